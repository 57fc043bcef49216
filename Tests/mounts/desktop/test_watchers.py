"""Part 19: a change that arrives from another device raises on this device the inotify events the same change
made here would raise, so `inotifywait`, `gio monitor`, Python's watchdog and other watchers see it: the daemon
repeats it through its own mount and answers its own requests from what it holds (Watchers.swift)."""
import os
import subprocess
import threading
import time

from conftest import run, sync, wait_until


class Watch:
    """A watcher process on `path` whose output lines are collected as they come."""

    def __init__(self, *cmd, ready=None):
        self.proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if ready:
            wait_until(lambda: any(ready in line for line in self.lines), timeout=30, what=f"{cmd[0]} to start")

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def saw(self, *expected, timeout=15):
        """Waits for a line ending in each of `expected`."""
        wait_until(lambda: all(any(line.endswith(e) for line in self.lines) for e in expected), timeout=timeout,
                   what=f"{expected} (seen: {self.lines[-12:]})")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def test_each_kind_of_remote_change_raises_its_inotify_events(stub, mount_factory):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    docs_a, docs_b = a / "Documents", b / "Documents"
    for name in ("old.txt", "data.txt", "log.txt"):
        (docs_a / name).write_text(f"{name}\n")
    sync(a)
    wait_until(lambda: (docs_b / "log.txt").exists(), timeout=30, what="the files on the desktop")
    assert (docs_b / "log.txt").read_text() == "log.txt\n"  # downloaded here
    w = Watch("inotifywait", "-m", "-r", "--format", "%e %f", docs_b, ready="Watches established")
    try:
        (docs_a / "new.txt").write_text("new\n")
        sync(a)
        w.saw("CREATE new.txt")
        (docs_a / "folder").mkdir()
        sync(a)
        w.saw("CREATE,ISDIR folder")
        os.remove(docs_a / "old.txt")
        sync(a)
        w.saw("DELETE old.txt")
        os.rename(docs_a / "data.txt", docs_a / "renamed.txt")
        sync(a)
        w.saw("MOVED_FROM data.txt", "MOVED_TO renamed.txt")
        os.chmod(docs_a / "renamed.txt", 0o600)
        sync(a)
        w.saw("ATTRIB renamed.txt")
        with open(docs_a / "log.txt", "a") as f:
            f.write("a second line\n")
        sync(a)
        w.saw("MODIFY log.txt", "CLOSE_WRITE,CLOSE log.txt")
        os.rmdir(docs_a / "folder")
        sync(a)
        w.saw("DELETE,ISDIR folder")
        # What this device does itself raises its events once, as before.
        before = len(w.lines)
        (docs_b / "local.txt").write_text("here\n")
        sync(b)
        time.sleep(2)
        assert [line for line in w.lines[before:] if line.startswith("CREATE")] == ["CREATE local.txt"], w.lines[before:]
    finally:
        w.stop()
    # Nothing was changed by the repeats: both devices agree.
    assert sorted(os.listdir(docs_b)) == sorted(os.listdir(docs_a)) == ["local.txt", "log.txt", "new.txt", "renamed.txt"]
    assert (docs_b / "log.txt").read_text() == "log.txt\na second line\n"
    assert run("stat", "-c", "%a", docs_b / "renamed.txt").stdout.strip() == "600"


def test_gio_monitor_follows_changes_from_the_other_device(stub, mount_factory):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    (a / "Documents" / "app.log").write_text("started\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "app.log").exists(), timeout=30, what="the log on the desktop")
    assert (b / "Documents" / "app.log").read_text() == "started\n"  # downloaded here
    monitor = Watch("gio", "monitor", "--dir", b / "Documents")
    try:
        time.sleep(1)
        (a / "Documents" / "report.txt").write_text("made on the laptop\n")
        with open(a / "Documents" / "app.log", "a") as f:
            f.write("a line from the laptop\n")
        sync(a)
        log = b / "Documents" / "app.log"
        monitor.saw(f"{b / 'Documents' / 'report.txt'}: created", f"{log}: changed", f"{log}: changes done")
        os.remove(a / "Documents" / "report.txt")
        sync(a)
        monitor.saw(f"{b / 'Documents' / 'report.txt'}: deleted")
    finally:
        monitor.stop()
    assert (b / "Documents" / "app.log").read_text() == "started\na line from the laptop\n"


def test_pythons_watchdog_sees_files_made_moved_and_deleted_on_the_other_device(stub, mount_factory):
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    (a / "Documents" / "draft.md").write_text("# draft\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "draft.md").exists(), timeout=30, what="the draft on the desktop")
    seen = []

    class Collect(FileSystemEventHandler):
        def on_any_event(self, event):
            if event.event_type in ("created", "deleted", "moved"):
                dest = getattr(event, "dest_path", "")
                seen.append((event.event_type, os.path.basename(event.src_path), os.path.basename(dest or "")))

    observer = Observer()
    observer.schedule(Collect(), str(b / "Documents"), recursive=True)
    observer.start()
    try:
        (a / "Documents" / "notes.md").write_text("notes\n")
        os.rename(a / "Documents" / "draft.md", a / "Documents" / "final.md")
        sync(a)
        wait_until(lambda: ("created", "notes.md", "") in seen and ("moved", "draft.md", "final.md") in seen,
                   timeout=15, what=f"watchdog's events (seen: {seen})")
        os.remove(a / "Documents" / "notes.md")
        sync(a)
        wait_until(lambda: ("deleted", "notes.md", "") in seen, timeout=15, what=f"the delete (seen: {seen})")
    finally:
        observer.stop()
        observer.join(timeout=10)


def test_tail_follows_a_log_appended_on_the_other_device(stub, mount_factory):
    """`tail -F` holds the log open and reads on from where it was at each IN_MODIFY: the lines appended on
    the other device reach it through the descriptor it holds (a new version that only lengthens a file held
    open is appended to its local copy in place), and a rewrite of the log from its start is followed too
    (tail sees the file replaced and reads it anew)."""
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    log_a, log_b = a / "Documents" / "app.log", b / "Documents" / "app.log"
    log_a.write_text("line 1\n")
    sync(a)
    wait_until(lambda: log_b.exists(), timeout=30, what="the log on the desktop")
    tail = Watch("tail", "-F", "-n", "+1", log_b, ready="line 1")
    try:
        for n in (2, 3, 4):
            with open(log_a, "a") as f:
                f.write(f"line {n}\n")
            sync(a)
            tail.saw(f"line {n}")
        assert [line for line in tail.lines if line.startswith("line")] == ["line 1", "line 2", "line 3", "line 4"]
        log_a.write_text("rotated\n")
        sync(a)
        tail.saw("rotated")
    finally:
        tail.stop()
    assert log_b.read_text() == "rotated\n"


def test_the_daemons_threads_are_named_and_the_repeats_run_below_requests(stub, mount_factory):
    """`ps -L` (as `top -H`) names each of the daemon's threads; the announcer that repeats changes from
    elsewhere and the upload lane run at nice 10, the pull and push loops at the priority of the threads
    answering requests."""
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    os.listdir(b / "Documents")  # loaded here: its changes from elsewhere are repeated
    (a / "Documents" / "new.txt").write_text("made on the laptop\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "new.txt").exists(), timeout=30, what="new.txt on the desktop")
    (pid,) = b.daemon_pids()
    out = run("ps", "-L", "-o", "comm=,ni=", "-p", pid).stdout
    nice = {}
    for line in out.splitlines():
        name, value = line.rsplit(None, 1)
        nice.setdefault(name.strip(), set()).add(int(value))
    assert nice.get("announce") == {10}, out
    assert nice.get("upload") == {10}, out
    assert nice.get("pull") == {0} and nice.get("push") == {0}, out


def test_a_folder_moved_and_removed_elsewhere_raises_the_events_of_a_move_and_of_each_delete(stub, mount_factory):
    """Part 20 (7): a folder renamed on the other device right after a change of a file in it is a move here
    (before: DELETE_SELF, and the watch was lost: later changes in it raised nothing), and `rm -rf` of a folder
    there raises IN_DELETE here for each file in it, as it does on the device that ran it."""
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    (a / "Documents" / "d1").mkdir()
    (a / "Documents" / "d1" / "x").write_text("one\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "d1" / "x").exists(), timeout=30, what="d1/x on the desktop")
    assert (b / "Documents" / "d1" / "x").read_text() == "one\n"  # read here, so the kernel holds d1 and x
    w = Watch("inotifywait", "-m", "-r", "--format", "%e %w%f", b / "Documents", ready="Watches established")
    try:
        (a / "Documents" / "d1" / "x").write_text("two\n")
        os.rename(a / "Documents" / "d1", a / "Documents" / "d1r")
        sync(a)
        w.saw("MOVED_FROM,ISDIR " + str(b / "Documents" / "d1"), "MOVED_TO,ISDIR " + str(b / "Documents" / "d1r"))
        (a / "Documents" / "d1r" / "y").write_text("new\n")
        sync(a)
        w.saw("CREATE " + str(b / "Documents" / "d1r" / "y"))
        run("rm", "-rf", a / "Documents" / "d1r")
        sync(a)
        w.saw("DELETE " + str(b / "Documents" / "d1r" / "x"), "DELETE " + str(b / "Documents" / "d1r" / "y"),
              "DELETE,ISDIR " + str(b / "Documents" / "d1r"))
        assert not any(line.startswith("DELETE_SELF") and line.endswith("/d1/") for line in w.lines), w.lines
    finally:
        w.stop()
    assert os.listdir(b / "Documents") == []
