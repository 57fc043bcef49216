"""POSIX semantics on a real mount, in the spirit of pjdfstest (which Debian does not package): each system
call's success cases and its errno for the usual mistakes. What does not apply to a ubiquity container is
checked to fail plainly: hard links and device files (EPERM), ownership (chown is accepted and changes
nothing, as on other cloud mounts). Symbolic links, fifos and sockets work (test_links_tar_rsync_git.py)."""
import ctypes
import errno
import os
import stat
import time


import pytest

from conftest import fails

# Run while the kernel forgets inodes every half second, as memory pressure makes it (Part 20, point 5).
pytestmark = pytest.mark.usefixtures("caches_dropped")

libc = ctypes.CDLL("libc.so.6", use_errno=True)
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def renameat2(a, b, flags):
    AT_FDCWD = -100
    rc = libc.renameat2(AT_FDCWD, str(a).encode(), AT_FDCWD, str(b).encode(), flags)
    return 0 if rc == 0 else ctypes.get_errno()


def test_open_and_creat(d):
    fails(errno.ENOENT, os.open, d / "missing", os.O_RDONLY)
    fails(errno.ENOENT, os.open, d / "nodir" / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    fd = os.open(d / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
    os.close(fd)
    assert stat.S_IMODE(os.stat(d / "f").st_mode) == 0o640
    fails(errno.EEXIST, os.open, d / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    fails(errno.EISDIR, os.open, d, os.O_WRONLY)
    fails(errno.ENOTDIR, os.open, d / "f" / "x", os.O_RDONLY)


def test_mkdir_rmdir_unlink(d):
    os.mkdir(d / "x", 0o750)
    assert stat.S_IMODE(os.stat(d / "x").st_mode) == 0o750
    fails(errno.EEXIST, os.mkdir, d / "x")
    (d / "x" / "f").write_text("f")
    fails(errno.ENOTEMPTY, os.rmdir, d / "x")
    fails(errno.ENOTDIR, os.rmdir, d / "x" / "f")
    fails(errno.EISDIR, os.unlink, d / "x")
    fails(errno.ENOENT, os.unlink, d / "x" / "nope")
    os.unlink(d / "x" / "f")
    os.rmdir(d / "x")
    fails(errno.ENOENT, os.stat, d / "x")


def test_rename_rules(d):
    (d / "a").write_text("a")
    (d / "b").write_text("b")
    os.mkdir(d / "dir")
    os.mkdir(d / "full")
    (d / "full" / "x").write_text("x")
    os.mkdir(d / "empty")
    fails(errno.EISDIR, os.rename, d / "a", d / "dir")
    fails(errno.ENOTDIR, os.rename, d / "dir", d / "a")
    fails(errno.ENOTEMPTY, os.rename, d / "dir", d / "full")
    os.rename(d / "dir", d / "empty")  # over an empty directory
    assert not (d / "dir").exists() and (d / "empty").is_dir()
    fails(errno.EINVAL, os.rename, d / "full", d / "full" / "inside")
    assert renameat2(d / "a", d / "b", RENAME_NOREPLACE) == errno.EEXIST
    assert renameat2(d / "a", d / "b", RENAME_EXCHANGE) == 0
    assert (d / "a").read_text() == "b" and (d / "b").read_text() == "a"
    assert renameat2(d / "a", d / "b", RENAME_EXCHANGE) == 0
    assert renameat2(d / "a", d / "nope", RENAME_EXCHANGE) == errno.ENOENT
    os.rename(d / "a", d / "b")
    assert (d / "b").read_text() == "a" and not (d / "a").exists()
    fails(errno.ENOENT, os.rename, d / "a", d / "c")


def test_sizes_holes_and_truncate(d):
    p = d / "sparse"
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.pwrite(fd, b"end", 10_000)
    assert os.fstat(fd).st_size == 10_003
    assert os.pread(fd, 10, 5000) == b"\0" * 10
    os.ftruncate(fd, 20_000)
    assert os.pread(fd, 5, 19_995) == b"\0" * 5
    os.ftruncate(fd, 4)
    assert os.pread(fd, 100, 0) == b"\0" * 4
    os.close(fd)
    os.truncate(p, 0)
    assert p.stat().st_size == 0


def test_append_and_unlinked_open_file(d):
    p = d / "log"
    p.write_text("1\n")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"2\n")
    os.close(fd)
    assert p.read_text() == "1\n2\n"
    fd = os.open(p, os.O_RDONLY)
    os.unlink(p)
    assert os.read(fd, 100) == b"1\n2\n"  # still readable through the open descriptor
    os.close(fd)
    assert not p.exists()


def test_chmod_utime_and_times(d):
    p = d / "t"
    p.write_text("t")
    before = os.stat(p)
    time.sleep(0.02)
    os.chmod(p, 0o600)
    after = os.stat(p)
    assert stat.S_IMODE(after.st_mode) == 0o600 and after.st_ctime_ns >= before.st_ctime_ns
    os.utime(p, ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    assert os.stat(p).st_mtime_ns == 1_600_000_000_123_456_789
    mtime = os.stat(p).st_mtime_ns
    with open(p, "a") as f:
        f.write("more")
    assert os.stat(p).st_mtime_ns > mtime


def test_names(d):
    (d / ("n" * 255)).write_text("ok")
    fails(errno.ENAMETOOLONG, os.open, d / ("n" * 256), os.O_CREAT | os.O_WRONLY, 0o644)
    fails(errno.EEXIST, os.mkdir, d / ".")
    for name in ("with space", "ünïcödé", "tab\there", "new\nline", "*?[]", "-dash", ".hidden"):
        (d / name).write_text(name)
        assert (d / name).read_text() == name
    assert len(os.listdir(d)) == 8


def test_many_entries_listed(d):
    for i in range(500):
        (d / f"e{i:04d}").write_text(str(i))
    names = sorted(os.listdir(d))
    assert names == [f"e{i:04d}" for i in range(500)]


def test_what_does_not_apply(d):
    (d / "target").write_text("t")
    fails(errno.EPERM, os.link, d / "target", d / "hard")
    fails(errno.EPERM, os.mknod, d / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    os.symlink("target", d / "soft")
    assert os.readlink(d / "soft") == "target" and (d / "soft").read_text() == "t"
    os.mkfifo(d / "fifo")
    assert stat.S_ISFIFO(os.lstat(d / "fifo").st_mode)
    os.chown(d / "target", os.getuid(), os.getgid())  # accepted
    st = os.statvfs(d)
    assert st.f_namemax == 255 and st.f_bsize > 0
