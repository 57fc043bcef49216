"""Part 17: Recently Deleted and version history, on real mounts of two devices. What one device deletes is
listed and restored from the other with `ubiquityfs trash`, byte-identical on both; a file's versions are
listed with `ubiquityfs history`; bad input gets one plain line and changes nothing."""
import json
import time
import os

from conftest import BIN, attr, edit_in_turn, run, sync, wait_until


def trash(*args, check=True):
    return run(BIN, "trash", *args, check=check, timeout=60)


def tree_digest(root):
    """Every file below `root` with its bytes, as a sorted list (what byte-identical means here)."""
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out.append((os.path.relpath(p, root), fh.read()))
    return sorted(out)


def test_rm_rf_of_a_thousand_files_on_one_device_is_restored_from_the_other(stub, mount_factory, tmp_path):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    src = tmp_path / "src"
    for d in range(10):
        (src / f"dir{d}").mkdir(parents=True)
        for f in range(100):
            (src / f"dir{d}" / f"file{f}.txt").write_bytes(os.urandom(64 + f))
    run("cp", "-r", src, a / "Documents" / "project", timeout=120)
    sync(a, timeout=120)
    wait_until(lambda: len(tree_digest(b / "Documents" / "project")) == 1000, timeout=120, interval=0.5,
               what="the 1,000 files on the desktop")
    expected = tree_digest(src)
    run("rm", "-rf", a / "Documents" / "project", timeout=120)
    sync(a, timeout=120)
    wait_until(lambda: not (b / "Documents" / "project").exists(), timeout=60, what="the delete on the desktop")

    listed = trash("list", b.path).stdout
    assert "Documents/project/" in listed and "laptop" in listed and "1010 items inside" in listed, listed
    rows = json.loads(trash("list", "--json", b.path).stdout)
    assert [r["path"] for r in rows] == ["Documents/project"] and rows[0]["itemsInside"] == 1010

    assert trash("restore", b.path, "Documents/project").stdout.strip() == "restored Documents/project"
    assert tree_digest(b / "Documents" / "project") == expected
    wait_until(lambda: len(tree_digest(a / "Documents" / "project")) == 1000, timeout=120, interval=0.5,
               what="the restore on the laptop")
    assert tree_digest(a / "Documents" / "project") == expected
    assert "Recently Deleted is empty" in trash("list", a.path).stdout


def test_a_restore_into_a_taken_name_and_emptying(stub, mount_factory):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    (a / "Documents" / "report.txt").write_text("first draft\n")
    sync(a)
    run("rm", a / "Documents" / "report.txt")
    (a / "Documents" / "report.txt").write_text("a new report in its place\n")
    (a / "Documents" / "scratch.txt").write_text("throw away\n")
    sync(a)
    run("rm", a / "Documents" / "scratch.txt")
    sync(a)
    # The old report comes back beside the new one, under a free name.
    trash("restore", b.path, str(b / "Documents" / "report.txt"))
    wait_until(lambda: (b / "Documents" / "report 2.txt").exists(), timeout=30, what="report 2.txt on the desktop")
    assert (b / "Documents" / "report 2.txt").read_text() == "first draft\n"
    wait_until(lambda: (a / "Documents" / "report 2.txt").exists(), timeout=30, what="report 2.txt on the laptop")
    assert (a / "Documents" / "report.txt").read_text() == "a new report in its place\n"
    # Emptied for good: listed no more, and a restore of it is refused with one plain line.
    assert "Documents/scratch.txt" in trash("list", b.path).stdout
    trash("empty", b.path, "Documents/scratch.txt")
    assert "scratch.txt" not in trash("list", b.path).stdout
    p = trash("restore", b.path, "Documents/scratch.txt", check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "not in Recently Deleted" in p.stderr, p.stderr
    assert not (b / "Documents" / "scratch.txt").exists()


def test_history_lists_the_versions_of_five_edits_on_two_devices(stub, mount_factory):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    f_a, f_b = a / "Documents" / "notes.txt", b / "Documents" / "notes.txt"
    edit_in_turn(a, b)
    out = run(BIN, "history", f_a).stdout.splitlines()
    assert out[0].startswith("STORED (UTC)")
    rows = json.loads(run(BIN, "history", "--json", f_b).stdout)
    sizes_devices = [(r["size"], r["device"]) for r in rows if r["size"] > 0]
    assert sizes_devices[:5] == [(7, "laptop"), (7, "desktop"), (7, "laptop"), (7, "desktop"), (7, "laptop")], rows
    assert all(r["path"] == "Documents/notes.txt" for r in rows)


def test_recently_deleted_reads_as_files_under_dot_trash_and_rm_there_empties_it(stub, mount_factory, tmp_path):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    proj = a / "Documents" / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "one.txt").write_text("one\n")
    (proj / "sub" / "two.bin").write_bytes(os.urandom(300_000))
    os.symlink("one.txt", proj / "link")
    (a / "Documents" / "notes.txt").write_text("first notes\n")
    sync(a)
    copy = tmp_path / "proj"
    run("cp", "-a", proj, copy)
    run("rm", "-rf", proj, a / "Documents" / "notes.txt")
    sync(a)
    wait_until(lambda: not (b / "Documents" / "proj").exists(), timeout=30, what="the delete on the desktop")

    trash_b = b.path / ".trash"
    assert run("ls", trash_b).stdout.split() == ["notes.txt", "proj"]
    assert run("ls", "-A", trash_b).stdout.split() == [".list", "notes.txt", "proj"]
    assert run("cat", trash_b / "notes.txt").stdout == "first notes\n"
    assert run("readlink", trash_b / "proj" / "link").stdout == "one.txt\n"
    assert run("diff", "-r", "--no-dereference", copy, trash_b / "proj", check=False).returncode == 0
    assert attr(trash_b / "proj" / "sub" / "two.bin", "originalPath") == "Documents/proj/sub/two.bin"
    assert attr(trash_b / "proj", "deletedBy") == "laptop"
    assert attr(trash_b / "notes.txt", "deletedAt").startswith(time.strftime("%Y-", time.gmtime()))
    p = run("sh", "-c", f"echo x > '{trash_b / 'notes.txt'}'", check=False)
    assert p.returncode != 0 and "Read-only file system" in p.stderr, p.stderr

    # The same name deleted twice: the newest keeps it.
    (a / "Documents" / "notes.txt").write_text("second notes\n")
    sync(a)
    run("rm", a / "Documents" / "notes.txt")
    sync(a)
    names = run("ls", trash_b).stdout.split("\n")
    older = [n for n in names if n.startswith("notes (deleted ") and n.endswith(").txt")]
    assert "notes.txt" in names and len(older) == 1, names
    assert (trash_b / "notes.txt").read_text() == "second notes\n"
    assert (trash_b / older[0]).read_text() == "first notes\n"

    # rm -rf there removes it from Recently Deleted for good, on every device; mv out of it copies it back.
    run("rm", "-rf", trash_b / "proj")
    assert run("ls", a.path / ".trash").stdout.split("\n")[:-1] == sorted([older[0], "notes.txt"])
    assert "proj" not in trash("list", a.path).stdout
    run("mv", trash_b / "notes.txt", b / "Documents" / "notes.txt")
    assert (b / "Documents" / "notes.txt").read_text() == "second notes\n"
    sync(b)
    wait_until(lambda: (a / "Documents" / "notes.txt").exists(), timeout=30, what="the moved-out notes on the laptop")
    assert (a / "Documents" / "notes.txt").read_text() == "second notes\n"
    # The older one is alone under its name now.
    assert run("ls", a.path / ".trash").stdout.split() == ["notes.txt"]
    assert (a.path / ".trash" / "notes.txt").read_text() == "first notes\n"


def test_bad_input_gets_one_plain_line_and_changes_nothing(stub, mount_factory, tmp_path):
    a = mount_factory(stub, "laptop")
    (a / "Documents" / "keep.txt").write_text("kept\n")
    sync(a)
    for args in (["restore", a.path, "Documents/never-there.txt"], ["empty", a.path, "no/such/path"],
                 ["list", str(tmp_path)]):
        p = trash(*args, check=False)
        assert p.returncode == 1 and p.stderr.startswith("ubiquityfs: ") and p.stderr.count("\n") == 1, (args, p.stderr)
    p = run(BIN, "history", tmp_path / "nowhere.txt", check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    p = trash("restore", a.path, check=False)
    assert p.returncode == 2 and "--help" in p.stderr
    assert (a / "Documents" / "keep.txt").read_text() == "kept\n"
    assert attr(a.path, "pendingChanges") == "0"


def test_offline_the_commands_fail_at_once_with_the_cause(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    stub.stop()
    wait_until(lambda: attr(a.path, "isOffline") == "1", what="the mount to see the remote gone")
    p = trash("list", a.path, check=False)
    assert p.returncode == 1 and "unreachable" in p.stderr, p.stderr
    stub.start()


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_garbage_written_over_a_hundred_files_on_one_device_is_rewound_from_the_other(stub, mount_factory):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    work_a, work_b = a / "Documents" / "work", b / "Documents" / "work"
    work_a.mkdir()
    for i in range(100):
        (work_a / f"f{i:03}.txt").write_text(f"good content {i}\n")
    sync(a, timeout=120)
    wait_until(lambda: len(list(work_b.iterdir())) == 100, timeout=60, what="the 100 files on the desktop")
    good = tree_digest(work_a)
    time.sleep(1.1)
    before = iso(time.time())  # every good version is stored at or before this second
    time.sleep(1.1)
    # A program gone wrong: garbage over every file, one deleted, one made.
    for i in range(100):
        (work_a / f"f{i:03}.txt").write_bytes(os.urandom(40))
    (work_a / "f000.txt").unlink()
    (work_a / "ransom.txt").write_text("pay up\n")
    sync(a, timeout=120)
    wait_until(lambda: (work_b / "ransom.txt").exists(), timeout=60, what="the damage on the desktop")

    dry = run(BIN, "rewind", work_b, "--to", before, "--dry-run").stdout
    assert "restore   Documents/work/f000.txt" in dry and "delete    Documents/work/ransom.txt" in dry, dry
    assert dry.count("content   ") == 99 and "(dry run: nothing changed)" in dry
    assert (work_b / "ransom.txt").exists(), "the dry run changed something"

    out = run(BIN, "rewind", work_b, "--to", before).stdout
    assert "rewound" in out and "101 change(s)" in out, out
    for m, work in ((b, work_b), (a, work_a)):
        wait_until(lambda: tree_digest(work) == good, timeout=60, interval=0.5, what=f"the good files back on {m.device}")
    assert "Documents/work/ransom.txt" in trash("list", a.path).stdout


def test_a_rewind_refuses_bad_input_with_one_line(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    (a / "Documents" / "f.txt").write_text("x\n")
    sync(a)
    cases = [(["--to", iso(time.time() + 3600)], "in the future"),
             (["--to", "2001-01-01T00:00:00Z"], "keeps no state"),
             (["--to", "yesterday"], "not a time"), (["--to", "infd"], "not a time"),
             (["--to", "9999-01-01 00:00:00"], "not a time")]
    for extra, said in cases:
        p = run(BIN, "rewind", a / "Documents", *extra, check=False)
        assert p.returncode in (1, 2) and said in p.stderr and p.stderr.count("\n") == 1, (extra, p.stderr)
    p = run(BIN, "rewind", a / "Documents" / "f.txt", "--to", "1m", check=False)
    assert p.returncode == 1 and "is not a folder" in p.stderr
    assert (a / "Documents" / "f.txt").read_text() == "x\n"


def test_versions_and_recently_deleted_expire_with_a_retention_of_seconds(stub_factory, mount_factory):
    stub = stub_factory(extra=["--keep-deleted", "3s", "--keep-versions", "2s,4s", "--blob-grace", "1",
                               "--blob-collect-every", "1"])
    a = mount_factory(stub, "laptop")
    f, g = a / "Documents" / "f.txt", a / "Documents" / "g.txt"
    for text in ("one\n", "two\n", "three\n"):
        f.write_text(text)
        sync(a)
    g.write_text("short-lived\n")
    sync(a)
    run("rm", g)
    sync(a)
    assert len(json.loads(run(BIN, "history", "--json", f).stdout)) >= 3
    assert "Documents/g.txt" in trash("list", a.path).stdout
    # Past the retention (and a collection pass), only the current version is left, and g is gone for good.
    wait_until(lambda: len(json.loads(run(BIN, "history", "--json", f).stdout)) == 1, timeout=30, interval=0.5,
               what="the older versions of f.txt to expire")
    wait_until(lambda: "Recently Deleted is empty" in trash("list", a.path).stdout, timeout=30, interval=0.5,
               what="g.txt to leave Recently Deleted")
    p = trash("restore", a.path, "Documents/g.txt", check=False)
    assert p.returncode == 1 and "not in Recently Deleted" in p.stderr
    assert f.read_text() == "three\n"
