"""Part 7: times and counts as ext4 keeps them, driven with touch, stat, ls, find, truncate, fallocate and python.

atime is kept on its own (this device's, not synced; reads do not change it: the mount behaves as noatime);
a directory's mtime and ctime follow the changes of its entries, also those made on another device (a local
time, not synced); ctime follows chmod, rename, truncate and xattrs; a directory's link count is 2 plus its
subdirectories; sizes past the store's file system give EFBIG; fallocate works; RENAME_EXCHANGE swaps two
items atomically and the swap reaches the other devices.
"""
import ctypes
import errno
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import BIN, conflict_versions_in, run, wait_until, sync

libc = ctypes.CDLL("libc.so.6", use_errno=True)
RENAME_EXCHANGE = 2


def exchange(a, b):
    """renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE); 0 or the errno."""
    AT_FDCWD = -100
    rc = libc.renameat2(AT_FDCWD, str(a).encode(), AT_FDCWD, str(b).encode(), RENAME_EXCHANGE)
    return 0 if rc == 0 else ctypes.get_errno()


def times(path):
    """atime, mtime, ctime (seconds) and link count as stat prints them."""
    return [int(x) for x in run("stat", "-c", "%X %Y %Z %h", path).stdout.split()]


def ctime_ns(path):
    return os.stat(path).st_ctime_ns


@pytest.fixture
def m(stub, mount_factory):
    return mount_factory(stub)


def test_atime_is_kept_apart_from_mtime_and_reads_leave_it(m):
    f = m / "Documents" / "f"
    run("touch", f)
    atime, mtime, _, links = times(f)
    assert atime == mtime and links == 1  # a new item's atime is its mtime
    run("touch", "-a", "-d", "@5000", f)
    run("touch", "-m", "-d", "@7000", f)
    assert times(f)[:2] == [5000, 7000]
    run("cat", f)
    assert times(f)[:2] == [5000, 7000]  # noatime: reading does not change it
    run("touch", "-a", "-d", "@6000", m / "Documents")
    assert times(m / "Documents")[0] == 6000
    m.unmount()
    m.mount()
    assert times(f)[:2] == [5000, 7000]  # kept in the store
    assert times(m / "Documents")[0] == 6000


def test_directory_mtime_and_ctime_follow_its_entries(m):
    docs = m / "Documents"
    d, e = docs / "d", docs / "e"
    run("mkdir", d, e)

    def reset():
        run("touch", "-d", "@1000", d, e)
        assert times(d)[1] == times(e)[1] == 1000  # a time set explicitly shows as set
        return ctime_ns(d), ctime_ns(e)

    def changed(before, *dirs):
        for directory, c in zip((d, e), before):
            if directory in dirs:
                assert times(directory)[1] > 1000 and ctime_ns(directory) > c, directory
            else:
                assert times(directory)[1] == 1000 and ctime_ns(directory) == c, directory

    before = reset()
    run("touch", d / "f")
    changed(before, d)
    before = reset()
    run("mkdir", d / "sub")
    changed(before, d)
    before = reset()
    run("mv", d / "f", d / "g")
    changed(before, d)
    before = reset()
    run("mv", d / "g", e / "g")  # both parents
    changed(before, d, e)
    before = reset()
    run("rm", e / "g")
    changed(before, e)
    before = reset()
    run("rmdir", d / "sub")
    changed(before, d)
    # Kept across a restart.
    run("touch", d / "late")
    shown = times(d)[1]
    m.unmount()
    m.mount()
    assert times(d)[1] == shown > 1000


def test_ctime_follows_chmod_rename_truncate_and_xattrs(m):
    f = m / "Documents" / "f"
    f.write_text("hello")
    steps = [
        ("chmod", lambda: run("chmod", "600", f)),
        ("rename", lambda: run("mv", f, f.with_name("g")) and run("mv", f.with_name("g"), f)),
        ("truncate", lambda: run("truncate", "-s", "2", f)),
        ("setfattr", lambda: run("setfattr", "-n", "user.color", "-v", "red", f)),
        ("setfattr -x", lambda: run("setfattr", "-x", "user.color", f)),
        ("pin", lambda: run("setfattr", "-n", "user.ubiquity.pinned", "-v", "1", f)),
        ("touch -a", lambda: run("touch", "-a", "-d", "@5000", f)),
    ]
    for what, step in steps:
        before = ctime_ns(f)
        step()
        assert ctime_ns(f) > before, what
    assert f.read_text() == "he"


def test_directory_link_count_is_two_plus_its_subdirectories(m):
    d = m / "Documents" / "d"
    run("mkdir", "-p", d / "s1" / "deep", d / "s2")
    run("touch", d / "f")
    assert times(d)[3] == 4
    assert run("ls", "-ld", d).stdout.split()[1] == "4"
    assert times(d / "s1")[3] == 3 and times(d / "s2")[3] == 2
    run("rmdir", d / "s2")
    assert times(d)[3] == 3
    run("mv", d / "s1", m / "Documents")
    assert times(d)[3] == 2
    root_dirs = [n for n in os.listdir(m.path) if (m.path / n).is_dir()]  # .versions included
    assert times(m.path)[3] == 2 + len(root_dirs)
    # find relies on the count to skip stats in leaf directories.
    found = run("find", m / "Documents", "-name", "deep").stdout.split()
    assert found == [str(m / "Documents" / "s1" / "deep")]


def test_a_size_past_the_store_gives_efbig(m):
    f = m / "Documents" / "f"
    f.write_text("x")
    p = run("truncate", "-s", "999999999999999", f, check=False)
    assert p.returncode != 0 and "File too large" in p.stderr
    fd = os.open(f, os.O_WRONLY)
    try:
        with pytest.raises(OSError) as e:
            os.ftruncate(fd, 999999999999999)
        assert e.value.errno == errno.EFBIG
    finally:
        os.close(fd)
    assert f.read_text() == "x"


def test_fallocate_modes_work_and_the_content_syncs(two):
    stub, a, b = two
    big = a / "Documents" / "big"
    run("fallocate", "-l", "100M", big)
    assert run("stat", "-c", "%s", big).stdout.strip() == "104857600"
    assert run("du", "-k", big).stdout.split()[0] == "102400"  # allocated, local
    f = a / "Documents" / "f"
    f.write_bytes(bytes([0xAB]) * 16384)
    run("fallocate", "-n", "-o", "0", "-l", "1M", f)  # keep size
    assert f.stat().st_size == 16384
    run("fallocate", "-p", "-o", "4096", "-l", "4096", f)  # punch
    run("fallocate", "-z", "-o", "12288", "-l", "2048", f)  # zero range
    run("fallocate", "-o", "16384", "-l", "4096", f)  # grows
    want = bytes([0xAB]) * 4096 + bytes(4096) + bytes([0xAB]) * 4096 + bytes(2048) + bytes([0xAB]) * 2048 \
        + bytes(4096)
    assert f.stat().st_size == 20480
    assert f.read_bytes() == want
    sync(a)
    wait_until(lambda: (b / "Documents" / "f").exists() and (b / "Documents" / "f").read_bytes() == want,
               timeout=60, what="fallocated content on the desktop")
    assert (b / "Documents" / "big").stat().st_size == 104857600


def test_exchange_swaps_and_syncs(two):
    stub, a, b = two
    docs = a / "Documents"
    (docs / "x").write_text("X")
    (docs / "y").write_text("Y")
    run("mkdir", docs / "dir")
    (docs / "dir" / "inside").write_text("in")
    run("mkdir", docs / "other")
    (docs / "other" / "f").write_text("F")
    sync(a)
    wait_until(lambda: (b / "Documents" / "other" / "f").exists(), what="the tree on the desktop")
    assert exchange(docs / "x", docs / "y") == 0
    assert exchange(docs / "dir", docs / "other" / "f") == 0  # a file and a directory, across folders
    assert exchange(docs / "x", docs / "nope") == errno.ENOENT
    assert exchange(docs / "other", docs / "other" / "f") == errno.EINVAL  # not below itself

    def swapped(m):
        d = m / "Documents"
        return ((d / "x").read_text() == "Y" and (d / "y").read_text() == "X"
                and (d / "dir").read_text() == "F" and (d / "other" / "f" / "inside").read_text() == "in"
                and sorted(os.listdir(d)) == ["dir", "other", "x", "y"] and os.listdir(d / "other") == ["f"])

    assert swapped(a)
    sync(a)
    wait_until(lambda: swapped(b), timeout=30, what="the exchange on the desktop")
    sync(b)
    assert swapped(a) and swapped(b)  # no item took another name on the way
    assert run(BIN, "status", a.path, check=False).returncode == 0


def test_a_remote_entry_change_moves_the_directory_mtime(two):
    stub, a, b = two
    run("mkdir", a / "Documents" / "d")
    run("touch", "-d", "@1000", a / "Documents" / "d")
    sync(a)
    bd = b / "Documents" / "d"
    wait_until(lambda: bd.exists() and times(bd)[1] == 1000, what="d on the desktop")
    c = ctime_ns(bd)  # the desktop's kernel caches these attributes now
    puts = stub.stats()["itemPuts"]
    for name in ("one", "two", "three"):
        (a / "Documents" / "d" / name).write_text(name)
    sync(a)
    # The folder itself is not uploaded for its entries: three puts, for the three files.
    assert stub.stats()["itemPuts"] == puts + 3
    wait_until(lambda: sorted(os.listdir(bd)) == ["one", "three", "two"], what="the files on the desktop")
    wait_until(lambda: times(bd)[1] > 1000 and ctime_ns(bd) > c, what="the desktop's d to show the change")
    assert times(a / "Documents" / "d")[1] > 1000
    # A time set explicitly elsewhere shows as set.
    run("touch", "-d", "@2000", a / "Documents" / "d")
    sync(a)
    wait_until(lambda: times(bd)[1] == 2000, what="the set time on the desktop")


def test_exchange_with_a_conflict_version_is_refused(two):
    stub, a, b = two
    rel = Path("Documents") / "notes.txt"
    (a / rel).write_text("original\n")
    wait_until(lambda: (b / rel).exists() and (b / rel).read_text() == "original\n", what="original on b")
    stub.stop()
    (a / rel).write_text("laptop\n")
    os.utime(a / rel, (1_800_000_000, 1_800_000_000))
    (b / rel).write_text("desktop\n")
    os.utime(b / rel, (1_800_000_100, 1_800_000_100))
    stub.start()
    vdir = a.path / ".versions" / rel
    wait_until(lambda: len(conflict_versions_in(vdir)) == 1 and (a / rel).read_text() == "desktop\n",
               timeout=60, what="the conflict settled on the laptop")
    version = vdir / conflict_versions_in(vdir)[0]
    assert exchange(version, a / rel) == errno.EROFS
    assert (a / rel).read_text() == "desktop\n" and version.read_text() == "laptop\n"


def test_a_time_set_right_after_close_stays(stub, mount_factory):
    """cp -p and rsync close a file and set its time at once; the kernel's release of the handle may reach
    the daemon after that and must not put the write's time back."""
    m = mount_factory(stub)
    files = [m / "Documents" / f"t{i}.txt" for i in range(40)]
    for i, f in enumerate(files):
        f.write_text(f"file {i}\n")
        os.utime(f, ns=(1_600_000_000_000_000_000 + i, 1_600_000_000_000_000_000 + i))
    time.sleep(0.5)
    run(BIN, "sync", "--wait", "--timeout", "30", m.path)
    assert [f.stat().st_mtime_ns for f in files] == [1_600_000_000_000_000_000 + i for i in range(40)]


SET = 1115269505  # 2005-05-05 05:05:05 UTC


def fill_and_time(how, src, dest):
    """Puts the tree `src` (folders timed SET) at `dest` in the mount the way a user would."""
    if how == "touch":
        run("mkdir", "-p", dest / "sub")
        run("touch", dest / "sub" / "f", dest / "sub" / "g")
        run("touch", "-d", f"@{SET}", dest / "sub", dest)
    elif how == "cp -a":
        run("cp", "-a", src, dest)
    elif how == "tar x":
        run("tar", "-cf", src.parent / "tree.tar", "-C", src.parent, src.name)
        run("tar", "-xf", src.parent / "tree.tar", "-C", dest.parent)
    elif how == "rsync -a":
        run("rsync", "-a", f"{src}/", dest)
    else:
        shutil.copytree(src, dest)


@pytest.mark.parametrize("how", ["touch", "cp -a", "tar x", "rsync -a", "copytree"])
def test_a_folder_time_set_after_filling_it_shows_on_a_device_that_was_online(two, tmp_path, how):
    """tar, cp -a, rsync -a and shutil.copytree set a folder's time after filling it; a device that takes the
    entries as they arrive shows that time too, not the time they arrived (and after a remount)."""
    stub, a, b = two
    src = tmp_path / "d"
    (src / "sub").mkdir(parents=True)
    for name in ("f", "g"):
        (src / "sub" / name).write_text(name + "\n")
    for folder in (src / "sub", src):
        os.utime(folder, (SET, SET))
    fill_and_time(how, src, a / "Documents" / "d")
    assert times(a / "Documents" / "d" / "sub")[1] == SET
    sync(a)
    bsub = b / "Documents" / "d" / "sub"
    wait_until(lambda: (bsub / "g").exists(), what="the entries on the desktop")
    wait_until(lambda: times(bsub)[1] == SET and times(bsub.parent)[1] == SET,
               what=f"the times set by {how} on the desktop: {times(bsub)[1]} {times(bsub.parent)[1]}")
    b.unmount()
    b.mount()
    assert times(bsub)[1] == SET and times(bsub.parent)[1] == SET
