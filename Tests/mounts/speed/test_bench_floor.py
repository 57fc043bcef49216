# The bench's FUSE floor (bench/floor/floor.c) is a faithful passthrough: what the metadata workloads do through
# it lands in the backing directory as on a plain file system, so the floor's figures are of real work.
import contextlib
import errno
import os
import resource
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT, fails, run, wait_until


def mounted(path):
    return any(line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines())


def compiler():
    return shutil.which("cc") or shutil.which("clang") or "/opt/swift/usr/bin/clang"


@contextlib.contextmanager
def mounted_floor(tmp_path, fd_limit=None):
    """Compiles the floor and mounts it over a fresh backing directory; yields (mount point, backing).
    `fd_limit` starts it with that RLIMIT_NOFILE (soft and hard)."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("/dev/fuse is missing: integration tests need FUSE")
    binary = tmp_path / "floor"
    flags = run("pkg-config", "--cflags", "--libs", "fuse3").stdout.split()
    run(compiler(), "-O2", "-Wall", "-Werror", "-o", binary, ROOT / "bench/floor/floor.c", *flags)
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    log = open(tmp_path / "floor.log", "ab")
    limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))) if fd_limit else None
    proc = subprocess.Popen([binary, backing, mnt], stdout=log, stderr=log, preexec_fn=limit)
    try:
        wait_until(lambda: mounted(mnt) or proc.poll() is not None, what="floor mount")
        assert proc.poll() is None, (tmp_path / "floor.log").read_text()
        yield mnt, backing
    finally:
        if mounted(mnt):
            run("fusermount3", "-u", mnt, check=False)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        assert not mounted(mnt)


@pytest.fixture
def floor(tmp_path):
    with mounted_floor(tmp_path) as m:
        yield m


def test_files_links_and_folders_pass_through(floor):
    mnt, backing = floor
    (mnt / "d").mkdir()
    (mnt / "d/a.txt").write_bytes(b"hello floor")
    assert (backing / "d/a.txt").read_bytes() == b"hello floor"
    with open(mnt / "d/a.txt", "r+b") as f:
        f.seek(6)
        f.write(b"FLOOR")
        os.fsync(f.fileno())
    assert (mnt / "d/a.txt").read_bytes() == b"hello FLOOR"
    os.truncate(mnt / "d/a.txt", 5)
    os.chmod(mnt / "d/a.txt", 0o600)
    os.utime(mnt / "d/a.txt", (1_000_000, 2_000_000))
    st = os.stat(mnt / "d/a.txt")
    assert (st.st_size, st.st_mode & 0o777, st.st_mtime) == (5, 0o600, 2_000_000)
    assert os.stat(backing / "d/a.txt").st_mode & 0o777 == 0o600
    os.symlink("a.txt", mnt / "d/link")
    assert os.readlink(mnt / "d/link") == "a.txt" and (mnt / "d/link").read_bytes() == b"hello"
    os.mkfifo(mnt / "d/fifo")
    assert (backing / "d/fifo").is_fifo()
    os.rename(mnt / "d/a.txt", mnt / "d/b.txt")
    assert sorted(os.listdir(mnt / "d")) == ["b.txt", "fifo", "link"]
    assert sorted(os.listdir(backing / "d")) == ["b.txt", "fifo", "link"]
    fails(errno.ENOENT, os.stat, mnt / "d/a.txt")
    for name in ("b.txt", "fifo", "link"):
        os.unlink(mnt / "d" / name)
    os.rmdir(mnt / "d")
    assert os.listdir(backing) == [] and os.listdir(mnt) == []


def test_xattrs_and_statfs_are_those_of_a_plain_file_system(floor):
    mnt, backing = floor
    (mnt / "f").write_bytes(b"x")
    fails(errno.ENODATA, os.getxattr, mnt / "f", "security.selinux")
    fails(errno.ENODATA, os.getxattr, mnt / "f", "user.anything")
    assert os.listxattr(mnt / "f") == []
    assert os.statvfs(mnt).f_blocks == os.statvfs(backing).f_blocks


def test_a_big_folder_lists_whole_across_reply_pages(floor):
    mnt, backing = floor
    names = {f"file-with-a-long-name-to-fill-the-pages-{i:05}" for i in range(3000)}
    for n in names:
        (backing / n).write_bytes(n.encode())
    assert set(os.listdir(mnt)) == names  # readdir
    with os.scandir(mnt) as it:  # what `ls -l` does: readdirplus, then a stat of each
        seen = {e.name: e.stat(follow_symlinks=False).st_size for e in it}
    assert seen == {n: len(n) for n in names}


def test_tar_x_then_rm_rf_lands_in_the_backing_directory(floor, tmp_path):
    mnt, backing = floor
    src = tmp_path / "src" / "t"
    for i in range(300):
        p = src / f"d{i // 100}"
        p.mkdir(parents=True, exist_ok=True)
        (p / f"f{i:03}").write_bytes(bytes([i % 256]) * 1024)
    with tarfile.open(tmp_path / "small.tar", "w") as tar:
        tar.add(src, arcname="t")
    run("tar", "-xf", tmp_path / "small.tar", "-C", mnt)
    for i in range(300):
        assert (backing / f"t/d{i // 100}/f{i:03}").read_bytes() == bytes([i % 256]) * 1024
    run("sh", "-c", "i=0; while [ $i -lt 200 ]; do : > e$i; i=$((i+1)); done", cwd=mnt)
    assert len([n for n in os.listdir(backing) if n.startswith("e")]) == 200
    run("rm", "-rf", mnt / "t")
    assert not (backing / "t").exists()


def test_more_known_inodes_than_the_descriptor_limit_it_was_started_with(tmp_path):
    # The floor holds one descriptor per inode the kernel knows: it raises its own limit as far as it may.
    if os.geteuid() != 0:
        pytest.skip("raising the hard limit of open files needs root")
    with mounted_floor(tmp_path, fd_limit=256) as (mnt, backing):
        for i in range(1000):
            (mnt / f"f{i:04}").write_bytes(b"%d" % i)
        assert all((mnt / f"f{i:04}").read_bytes() == b"%d" % i for i in range(1000))
        assert len(os.listdir(backing)) == 1000
        # The last ones are past the floor's budget of descriptors: every operation works on them too.
        last = mnt / "f0999"
        os.chmod(last, 0o640)
        os.truncate(last, 1)
        os.utime(last, (5, 6))
        st = os.stat(last)
        assert (st.st_mode & 0o777, st.st_size, st.st_mtime) == (0o640, 1, 6)
        os.symlink("f0999", mnt / "link")
        assert os.readlink(mnt / "link") == "f0999" and (mnt / "link").read_bytes() == b"9"
        os.rename(last, mnt / "moved")
        assert (mnt / "moved").read_bytes() == b"9" and (backing / "moved").read_bytes() == b"9"
        os.unlink(mnt / "moved")
        assert not (backing / "moved").exists()
