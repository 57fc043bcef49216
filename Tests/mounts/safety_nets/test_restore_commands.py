"""Part 20, point 7: the safety nets' commands say plainly what is wrong with a path they are given, and a
folder brought back in parts comes back whole."""
import os
import time

from conftest import BIN, run, sync, wait_until


def test_history_and_rewind_of_a_path_that_does_not_exist_say_so(stub, mount_factory):
    m = mount_factory(stub)
    (m / "Documents" / "new.txt").write_text("not uploaded yet\n")
    p = run(BIN, "history", m / "Documents" / "nothing.txt", check=False)
    assert p.returncode != 0 and "no such file or folder" in p.stderr, p.stderr
    assert "never uploaded" not in p.stderr
    p = run(BIN, "rewind", m / "Documents" / "nowhere", "--to", "2026-01-01T00:00:00Z", "--dry-run", check=False)
    assert p.returncode != 0 and "no such file or folder" in p.stderr, p.stderr


def test_a_folder_restored_after_one_of_its_files_brings_the_rest(two):
    """`trash restore M p/a` brings back a and the folder p; `trash restore M p` then brings back what was
    deleted with p (before: "p is not in Recently Deleted", and p/b and p/c were left as entries of their own)."""
    _, a, b = two
    p = a / "Documents" / "p"
    p.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (p / name).write_text(f"{name}\n")
    sync(a)
    run("rm", "-rf", p)
    sync(a)
    wait_until(lambda: not (b / "Documents" / "p").exists(), timeout=30, what="p gone on b")
    assert run(BIN, "trash", "restore", b.path, "Documents/p/a.txt").stdout == "restored Documents/p/a.txt\n"
    assert sorted(os.listdir(b / "Documents" / "p")) == ["a.txt"]
    listed = run(BIN, "trash", "list", b.path).stdout
    assert "Documents/p/b.txt" in listed and "Documents/p/c.txt" in listed
    assert run(BIN, "trash", "restore", b.path, "Documents/p").stdout == "restored Documents/p\n"
    for m in (b, a):
        wait_until(lambda: sorted(os.listdir(m / "Documents" / "p")) == ["a.txt", "b.txt", "c.txt"], timeout=30,
                   what=f"all of p on {m.device}")
        assert (m / "Documents" / "p" / "c.txt").read_text() == "c.txt\n"
    assert "Documents/p" not in run(BIN, "trash", "list", b.path).stdout
    nothing = run(BIN, "trash", "restore", b.path, "Documents/p", check=False)
    assert nothing.returncode == 1 and "not in Recently Deleted" in nothing.stderr


def test_a_folder_brought_back_by_a_rewind_has_its_old_time_on_every_device(stub, mount_factory):
    """A folder a rewind brings back shows the time it had, on the devices online during the rewind as on one
    mounted after (before: the online devices showed the time of the rewind, as its files arrived after it)."""
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    f = a / "Documents" / "f"
    f.mkdir()
    (f / "one.txt").write_text("one\n")
    run("touch", "-d", "@1700000000", f)
    sync(a)
    wait_until(lambda: (b / "Documents" / "f" / "one.txt").exists(), timeout=30, what="f on the desktop")
    time.sleep(1.1)
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time()))
    time.sleep(1.1)
    run("rm", "-rf", f)
    sync(a)
    wait_until(lambda: not (b / "Documents" / "f").exists(), timeout=30, what="f gone on the desktop")
    time.sleep(1.1)  # the rewind's own time is visibly later than the folder's
    assert "rewound" in run(BIN, "rewind", b / "Documents", "--to", before).stdout
    c = mount_factory(stub, "tablet")
    for m in (a, b, c):
        wait_until(lambda: (m / "Documents" / "f" / "one.txt").exists(), timeout=30, what=f"f back on {m.device}")
        wait_until(lambda: os.stat(m / "Documents" / "f").st_mtime == 1700000000, timeout=10,
                   what=f"f's own time on {m.device} (it shows {os.stat(m / 'Documents' / 'f').st_mtime})")
