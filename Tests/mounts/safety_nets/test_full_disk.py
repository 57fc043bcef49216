"""Part 13, point 10: a store disk filled while the remote was away meets thousands of remote changes when
the remote returns. Uploads go on, uploaded copies are evicted to make room, deletes and reads of uploaded
files work, and the store takes every remote change once there is room, all by itself; a kill -9 while full
leaves a store that `check` and `mount` open with one clear line."""
import errno
import os
import subprocess

from conftest import BIN, attr, mount_with_store_on, run, small_ext4_at, sync, wait_until

MiB = 1 << 20


def fill(folder, size):
    """Writes files of `size` bytes into `folder` until the disk is full; the names of those written whole."""
    names = []
    for i in range(20_000):
        path = folder / f"fill{size}-{i}.bin"
        try:
            path.write_bytes(os.urandom(size))
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            return names
        names.append(path.name)
    raise AssertionError("the disk never filled")


def test_a_full_store_recovers_when_the_remote_returns_with_thousands_of_items(stub, mount_factory, tmp_path):
    src = tmp_path / "remote-tree"
    for d in range(30):
        (src / f"d{d}").mkdir(parents=True)
        for f in range(100):
            (src / f"d{d}" / f"f{f}.txt").write_text(f"{d}/{f}\n")
    with small_ext4_at(tmp_path, 64) as small:
        log = tmp_path / "daemon.log"  # beside the small disk, so that all of it is there to read
        m = mount_with_store_on(mount_factory, stub, small, "--cache-size", "8M", "--min-free", "0",
                                "--log-file", log)
        docs = m / "Documents"
        uploaded = os.urandom(4096)  # too small to make room for much when evicted
        (docs / "uploaded.bin").write_bytes(uploaded)
        (docs / "second.bin").write_bytes(uploaded[::-1])
        sync(m)
        stub.stop()
        written = fill(docs, 2 * MiB) + fill(docs, 64 * 1024) + fill(docs, 4096)
        assert written, "something was written before the disk filled"
        stub.seed(("Documents/from-elsewhere", src))  # 3,000 files and 30 folders, made elsewhere meanwhile
        stub.start()
        # Still full: an uploaded file reads (downloaded again if it was evicted), evicts and deletes, and so
        # does a file written while full, as on any disk.
        assert subprocess.run(["cat", docs / "uploaded.bin"], capture_output=True, check=True).stdout == uploaded
        run(BIN, "evict", docs / "second.bin")
        assert attr(docs / "second.bin", "downloadingStatus") == "notDownloaded"
        (docs / "second.bin").unlink()
        os.unlink(docs / written.pop())
        # It recovers by itself: every file written goes up, and every remote item arrives.
        sync(m, timeout=90)
        wait_until(lambda: len(os.listdir(docs / "from-elsewhere")) == 30, timeout=120, what="the remote folders")
        wait_until(lambda: sum(len(os.listdir(docs / "from-elsewhere" / f"d{d}")) for d in range(30)) == 3000,
                   timeout=120, what="the 3,000 remote files")
        assert (docs / "from-elsewhere" / "d7" / "f42.txt").read_text() == "7/42\n"
        assert (docs / "uploaded.bin").read_bytes() == uploaded
        for name in written:
            assert attr(docs / name, "isUploaded") == "1", name
        assert os.path.exists(small / "store" / "reserve"), "the reserve is back once there is room"
        assert attr(m.path, "isStoreFull") == "0" and attr(m.path, "storeFullSince") is None
        # A kill -9 while full: check and mount say one clear line, or open the store; neither crashes.
        fill(docs, 2 * MiB)
        m.kill_daemon()
        run("fusermount3", "-u", "-z", m.path, check=False)
        p = run(BIN, "check", "--store", small / "store", check=False, timeout=120)
        # 1: what a full disk cut short (a file whose record did not fit) is listed, one line each; 0: nothing was
        # cut short (a new file is recorded at its close, which the full disk refused: it was never recorded).
        assert p.returncode in (0, 1), p
        assert p.stderr == "", p.stderr
        lines = [line for line in p.stdout.splitlines() if line]
        assert all(line.startswith(("checked", "problem: ")) for line in lines[:-1]), p.stdout
        assert lines[-1] == "the store is sound" if p.returncode == 0 else lines[-1].startswith("problem: "), p.stdout
        m.mount()
        assert (docs / "uploaded.bin").read_bytes() == uploaded
        sync(m, timeout=120)
        m.unmount()
