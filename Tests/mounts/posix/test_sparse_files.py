"""Part 13, point 8 (the part that is the file system's): SEEK_DATA and SEEK_HOLE on a sparse file report where
the data is, as ext4 does, not one data segment for the whole file (cp --sparse, tar -S and rsync -S use them)."""
import errno
import os
import time

import pytest

from conftest import attr, run, sync, wait_until

MiB = 1 << 20


@pytest.mark.parametrize("passthrough", [True, False], ids=["passthrough", "no-passthrough"])
def test_seek_data_and_seek_hole_find_the_data_of_a_sparse_file(stub, mount_factory, passthrough):
    m = mount_factory(stub, extra=() if passthrough else ("--no-passthrough",))
    path = m / "Documents" / "sparse.img"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 64 * MiB)
        os.pwrite(fd, b"x" * 4096, 32 * MiB)
        assert os.lseek(fd, 0, os.SEEK_DATA) == 32 * MiB
        assert os.lseek(fd, 32 * MiB, os.SEEK_HOLE) == 32 * MiB + 4096
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 0
        with pytest.raises(OSError) as e:
            os.lseek(fd, 32 * MiB + 4096, os.SEEK_DATA)
        assert e.value.errno == errno.ENXIO
    finally:
        os.close(fd)
    # A new open (the kernel may ask through another handle) sees the same.
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_DATA) == 32 * MiB
    finally:
        os.close(fd)


def test_an_upload_in_flight_stops_when_its_file_changes_or_goes(stub, mount_factory):
    """`truncate -s 1T` is accepted, as ext4 accepts it, and its upload starts (a terabyte of zeros to read and
    hash); changing the file stops it, and the new content goes up at once; deleting a file stops its upload
    too. Before, the daemon read on through the terabyte and every later change waited behind it."""
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    docs = a / "Documents"
    run("truncate", "-s", "1T", docs / "huge.img")
    wait_until(lambda: attr(docs / "huge.img", "isUploading") == "1", timeout=30, what="huge.img uploading")
    run("truncate", "-s", "4096", docs / "huge.img")
    (docs / "after.txt").write_text("after\n")
    sync(a, timeout=60)
    wait_until(lambda: (b / "Documents" / "after.txt").exists() and
               os.stat(b / "Documents" / "huge.img").st_size == 4096, timeout=30, what="both files on b")
    assert (b / "Documents" / "huge.img").read_bytes() == bytes(4096)
    assert "upload of Documents/huge.img stopped" in (a.store / "ubiquityfs.log").read_text(errors="replace")
    # A delete stops the upload in flight just the same.
    run("truncate", "-s", "1T", docs / "gone.img")
    wait_until(lambda: attr(docs / "gone.img", "isUploading") == "1", timeout=30, what="gone.img uploading")
    run("rm", docs / "gone.img")
    (docs / "later.txt").write_text("later\n")
    sync(a, timeout=60)
    wait_until(lambda: (b / "Documents" / "later.txt").exists(), timeout=30, what="later.txt on b")
    assert not (b / "Documents" / "gone.img").exists()


def test_a_file_written_steadily_goes_up_once_it_pauses_with_no_error(stub, mount_factory):
    """A program that rewrites a file every few milliseconds for seconds (dd conv=notrunc in a loop, any tool
    that opens, writes and closes) stops each upload that has started; the push waits for the next pause instead
    of counting the stops as failed tries. Before, eight stops in a row were reported as "conflict did not
    settle after 8 tries" (a WARN and an error in the file's status), though no other device had changed it."""
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    path = a / "Documents" / "steady.bin"
    path.write_bytes(os.urandom(4 * MiB))
    sync(a, timeout=60)
    end = time.monotonic() + 8
    n = 0
    while time.monotonic() < end:  # each write opens and closes the file, as dd does: every close may push
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, os.urandom(4096), (n * 7919 % 1024) * 4096)
        os.close(fd)
        n += 1
        time.sleep(0.002)
    sync(a, timeout=60)
    want = path.read_bytes()
    wait_until(lambda: (b / "Documents" / "steady.bin").read_bytes() == want, timeout=30, what="the last bytes on b")
    log = (a.store / "ubiquityfs.log").read_text(errors="replace")
    assert "did not settle" not in log
    assert "upload of Documents/steady.bin failed" not in log
