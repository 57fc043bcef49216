"""Part 23: several containers of one user in one mount (`--containers`, `--all-containers`), laid out as
~/Library/Mobile Documents: a folder per container, each a file system of its own, served by one daemon."""
import errno
import json
import os
import signal
import subprocess
import sys
import time

from conftest import BIN, attr, run, wait_for_line, wait_until

NOTES = "iCloud.com.example.notes"
DRAW = "iCloud.com.example.draw"
NEW = "iCloud.com.example.new"


def folder(m, container):
    """The folder of `container` in an account mount `m`."""
    return m.path / container.replace(".", "~")


def account(mount_factory, stub, device, *containers, extra=()):
    """A mount of several containers on `device` (`containers` for --containers; none: --all-containers)."""
    which = ["--containers", ",".join(containers)] if containers else ["--all-containers"]
    return mount_factory(stub, device=device, container=None, extra=[*which, *extra])


def ubiquityfs_mounts_under(path):
    """The ubiquityfs mount points at or under `path`, from /proc/self/mountinfo."""
    points = []
    for line in open("/proc/self/mountinfo"):
        fields, _, rest = line.partition(" - ")
        point = fields.split()[4].replace("\\040", " ")
        if rest.split()[0] == "fuse.ubiquityfs" and (point == str(path) or point.startswith(str(path) + "/")):
            points.append(point)
    return sorted(points)


def test_two_containers_are_two_folders_each_its_own_file_system(stub, mount_factory):
    laptop = account(mount_factory, stub, "laptop", NOTES, DRAW)
    # The layout of ~/Library/Mobile Documents: dots as tildes, one folder per container, each with its tree.
    assert sorted(os.listdir(laptop.path)) == ["iCloud~com~example~draw", "iCloud~com~example~notes"]
    assert run("ls", folder(laptop, NOTES)).stdout.split() == ["Documents"]
    assert ubiquityfs_mounts_under(laptop.path) == sorted(
        [str(laptop.path), str(folder(laptop, NOTES)), str(folder(laptop, DRAW))])
    assert os.stat(folder(laptop, NOTES)).st_dev != os.stat(folder(laptop, DRAW)).st_dev
    # Nothing is made in the root itself: it holds containers only.
    p = run("mkdir", laptop.path / "mine", check=False)
    assert p.returncode == 1 and "Operation not permitted" in p.stderr, p.stderr
    p = run("touch", laptop.path / "loose.txt", check=False)
    assert p.returncode == 1 and "Operation not permitted" in p.stderr, p.stderr
    assert attr(laptop.path, "containers").splitlines() == [NOTES, DRAW]

    (folder(laptop, NOTES) / "Documents/list.txt").write_text("milk\n")
    run("cp", "/etc/hostname", folder(laptop, DRAW) / "Documents/sketch.txt")
    assert attr(laptop.path, "pendingChanges") != "0"
    laptop.sync()  # `sync --wait` of the mount waits for every container
    assert attr(laptop.path, "pendingChanges") == "0"

    # Each container is the same container another device mounts alone.
    phone = mount_factory(stub, device="phone", container=NOTES)
    tablet = mount_factory(stub, device="tablet", container=DRAW)
    assert (phone / "Documents/list.txt").read_text() == "milk\n"
    assert sorted(os.listdir(phone / "Documents")) == ["list.txt"]
    assert (tablet / "Documents/sketch.txt").read_bytes() == open("/etc/hostname", "rb").read()

    # The commands take paths in any container.
    out = run(BIN, "status", folder(laptop, DRAW) / "Documents/sketch.txt").stdout
    assert "sketch.txt" in out and "current" in out, out
    run(BIN, "evict", folder(laptop, DRAW) / "Documents/sketch.txt")
    assert attr(folder(laptop, DRAW) / "Documents/sketch.txt", "downloadingStatus") == "notDownloaded"
    run(BIN, "kv", "set", folder(laptop, DRAW), "theme", "dark")
    assert run(BIN, "kv", "get", folder(laptop, DRAW), "theme").stdout.strip() == "dark"
    assert run(BIN, "kv", "get", folder(laptop, NOTES), "theme", check=False).returncode != 0
    # The root of the mount: status shows each container's root; a command of one container asks for one.
    out = run(BIN, "status", laptop.path).stdout
    assert "iCloud~com~example~notes: 0 change(s) waiting" in out and "iCloud~com~example~draw: " in out, out
    for words in (["trash", "list"], ["kv", "list"]):
        p = run(BIN, *words, laptop.path, check=False)
        assert p.returncode == 1 and "holds several containers; name one of them" in p.stderr, p.stderr

    # One unmount ends every container and the daemon.
    laptop.sync()
    run(BIN, "unmount", laptop.path)
    assert ubiquityfs_mounts_under(laptop.path) == []
    wait_until(lambda: not laptop.daemon_pids(), timeout=20, what="the daemon's exit")


def test_a_move_between_containers_copies_and_deletes_on_every_device(stub, mount_factory, tmp_path):
    laptop = account(mount_factory, stub, "laptop", NOTES, DRAW)
    phone = account(mount_factory, stub, "phone", NOTES, DRAW)
    src = folder(laptop, NOTES) / "Documents"
    (src / "trip").mkdir()
    data = os.urandom(300_000)
    (src / "trip/photo.bin").write_bytes(data)
    (src / "letter.txt").write_text("dear\n")
    laptop.sync()
    wait_until(lambda: (folder(phone, NOTES) / "Documents/letter.txt").exists(), timeout=30, what="the letter")
    # rename(2) across two containers is a move across file systems: EXDEV, and mv copies and deletes.
    code = subprocess.run([sys.executable, "-c", f"import os; os.rename({str(src / 'letter.txt')!r}, "
                           f"{str(folder(laptop, DRAW) / 'Documents/letter.txt')!r})"],
                          capture_output=True, text=True)
    assert code.returncode == 1 and f"[Errno {errno.EXDEV}]" in code.stderr, code.stderr
    run("mv", src / "letter.txt", src / "trip", folder(laptop, DRAW) / "Documents/")
    assert sorted(os.listdir(src)) == []
    assert (folder(laptop, DRAW) / "Documents/trip/photo.bin").read_bytes() == data
    laptop.sync()
    there = folder(phone, DRAW) / "Documents"
    wait_until(lambda: (there / "trip/photo.bin").exists() and (there / "letter.txt").exists()
               and os.listdir(folder(phone, NOTES) / "Documents") == [], timeout=30, what="the move on the phone")
    assert (there / "trip/photo.bin").read_bytes() == data
    assert (there / "letter.txt").read_text() == "dear\n"
    # What left a container is in its Recently Deleted, as any delete.
    out = run(BIN, "trash", "list", folder(laptop, NOTES)).stdout
    assert "letter.txt" in out and "trip" in out, out


def test_all_containers_shows_a_container_made_elsewhere_without_a_remount(stub, mount_factory):
    laptop = mount_factory(stub, device="laptop", container=NOTES)
    (laptop / "Documents/a.txt").write_text("a\n")
    laptop.sync()
    phone = account(mount_factory, stub, "phone")
    assert os.listdir(phone.path) == ["iCloud~com~example~notes"]
    assert (folder(phone, NOTES) / "Documents/a.txt").read_text() == "a\n"
    # Another device makes a container: it appears in the running mount, with its files.
    tablet = mount_factory(stub, device="tablet", container=NEW)
    (tablet / "Documents/new.txt").write_text("new\n")
    tablet.sync()
    wait_until(lambda: (folder(phone, NEW) / "Documents/new.txt").exists(), timeout=30, what="the new container")
    assert (folder(phone, NEW) / "Documents/new.txt").read_text() == "new\n"
    assert sorted(os.listdir(phone.path)) == ["iCloud~com~example~new", "iCloud~com~example~notes"]
    assert attr(phone.path, "containers").splitlines() == [NOTES, NEW]
    # And a change made in it on the phone reaches the tablet.
    (folder(phone, NEW) / "Documents/reply.txt").write_text("hi\n")
    phone.sync()
    wait_until(lambda: (tablet / "Documents/reply.txt").exists(), timeout=30, what="the reply on the tablet")
    # SIGTERM (a shutdown) ends the daemon, and it takes every container's mount down with the root.
    phone.kill_daemon(signal.SIGTERM)
    assert ubiquityfs_mounts_under(phone.path) == []


def test_a_store_of_a_mount_of_one_container_serves_it_in_a_mount_of_several(stub, tmp_path):
    """Without --store, a device keeps one store per container, whichever way it is mounted: what a mount of
    the container alone downloaded is there, and is not fetched again."""
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    remote = ["--remote", stub.url, "--token-file", stub.token_file, "--device", "laptop"]
    run(BIN, "mount", mnt, *remote, "--container", NOTES, env=env)
    try:
        data = os.urandom(200_000)
        (mnt / "Documents/kept.bin").write_bytes(data)
        run(BIN, "sync", "--wait", mnt, env=env)
    finally:
        run(BIN, "unmount", mnt, env=env)
    gets = stub.blob_gets()
    run(BIN, "mount", mnt, *remote, "--containers", f"{NOTES},{DRAW}", env=env)
    try:
        kept = mnt / "iCloud~com~example~notes/Documents/kept.bin"
        assert attr(kept, "downloadingStatus") == "current"
        assert kept.read_bytes() == data
        assert stub.blob_gets() == gets, "read from the store the single mount made, not downloaded again"
        assert (tmp_path / "data/ubiquityfs/stores" / NOTES / "laptop/state.sqlite").exists()
        assert (tmp_path / "data/ubiquityfs/stores" / DRAW / "laptop/state.sqlite").exists()
    finally:
        run(BIN, "unmount", "--force", mnt, env=env)
    assert ubiquityfs_mounts_under(mnt) == []


def test_bad_container_lists_are_refused_with_one_plain_line(stub, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    remote = ["--remote", stub.url, "--token-file", stub.token_file]
    for args, says in [(["--containers", f"{NOTES},{NOTES}"], "names a container twice"),
                       (["--containers", f"{NOTES},not a container"], "is not a container id"),
                       (["--containers", ""], "is not a container id"),
                       (["--container", NOTES, "--containers", DRAW], "do not go together")]:
        p = run(BIN, "mount", mnt, *remote, *args, check=False)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.splitlines()) == 1, (args, p.stderr)
    # A container that cannot be opened fails the whole mount with the reason, and leaves nothing mounted.
    bad = tmp_path / "bad.key"
    bad.write_text("0" * 64 + "\n")
    bad.chmod(0o600)
    p = run(BIN, "mount", mnt, "--remote", stub.url, "--token-file", bad, "--containers", f"{NOTES},{DRAW}",
            "--store", tmp_path / "store", check=False)
    assert p.returncode == 1 and "refused the token" in p.stderr, p.stderr
    assert ubiquityfs_mounts_under(mnt) == []


def test_a_query_of_documents_spans_every_container(stub, mount_factory, tmp_path):
    laptop = account(mount_factory, stub, "laptop", NOTES, DRAW)
    (folder(laptop, NOTES) / "Documents/list.txt").write_text("milk\n")
    (folder(laptop, DRAW) / "Documents/cat.svg").write_text("<svg/>\n")
    (folder(laptop, DRAW) / "settings.plist").write_text("data, not a document\n")
    # Each container serves its own socket; one whose store's path is too long for a socket's address (108
    # bytes) has it in a folder of the user's alone.
    for c in (NOTES, DRAW):
        sock = attr(folder(laptop, c), "querySocket")
        assert sock and len(sock.encode()) < 108, sock
        if not sock.startswith(str(laptop.store)):
            st = os.stat(os.path.dirname(sock))
            assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700, oct(st.st_mode)
    out = run(BIN, "query", laptop.path, "--scope", "documents").stdout.splitlines()
    rows = sorted(line.split("  ")[0] for line in out if not line.startswith("--"))
    assert rows == ["iCloud~com~example~draw/Documents/cat.svg", "iCloud~com~example~notes/Documents/list.txt"], out
    assert out[-1] == "-- gathering finished (2 items)", out
    lines = [json.loads(line) for line in run(BIN, "query", laptop.path, "--scope", "documents", "--json").stdout.splitlines()]
    assert sorted((x["container"], x["item"]["path"]) for x in lines if "item" in x) == [
        (DRAW, "Documents/cat.svg"), (NOTES, "Documents/list.txt")]
    assert lines[-1] == {"gathered": True, "count": 2}
    narrow = run(BIN, "query", laptop.path, "--scope", "documents", "--container", DRAW).stdout
    assert "cat.svg" in narrow and "list.txt" not in narrow, narrow
    # --live follows them all: a change in either container is reported with its folder.
    live = subprocess.Popen([BIN, "query", laptop.path, "--scope", "documents", "--live"],
                            stdout=subprocess.PIPE, text=True)
    try:
        wait_for_line(live, live.stdout, "-- gathering finished", timeout=20)
        (folder(laptop, DRAW) / "Documents/dog.svg").write_text("<svg/>\n")
        wait_for_line(live, live.stdout, "+ iCloud~com~example~draw/Documents/dog.svg", timeout=20)
        (folder(laptop, NOTES) / "Documents/todo.txt").write_text("call\n")
        wait_for_line(live, live.stdout, "+ iCloud~com~example~notes/Documents/todo.txt", timeout=20)
    finally:
        live.kill()
        live.wait()
    p = run(BIN, "query", laptop.path, "--container", NEW, check=False)
    assert p.returncode == 1 and "holds no container iCloud.com.example.new" in p.stderr, p.stderr


def test_all_containers_tries_a_container_it_cannot_open_again_and_says_so_once(stub, mount_factory):
    laptop = mount_factory(stub, device="laptop", container=NOTES)
    (laptop / "Documents/a.txt").write_text("a\n")
    laptop.sync()
    phone = account(mount_factory, stub, "phone")
    (phone.store / NEW).write_text("a file where the new container's store would go\n")
    tablet = mount_factory(stub, device="tablet", container=NEW)
    (tablet / "Documents/new.txt").write_text("new\n")
    tablet.sync()
    time.sleep(7)  # three looks at the remote's list
    assert os.listdir(phone.path) == ["iCloud~com~example~notes"]
    log = (phone.store / "ubiquityfs.log").read_text()
    assert log.count(f"cannot open {NEW} (tried again every 2 s)") == 1, log[-3000:]
    assert f"still cannot open {NEW}" in log, "later tries are logged quietly"
    # Once the way is clear, the next look opens it.
    (phone.store / NEW).unlink()
    wait_until(lambda: (folder(phone, NEW) / "Documents/new.txt").exists(), timeout=30, what="the new container")
