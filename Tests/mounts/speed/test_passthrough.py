"""Part 11 goal 2: FUSE passthrough of local content (mount --passthrough, docs/PASSTHROUGH.md).

The kernel reads and writes such files itself; these tests check the outcomes the daemon must still get right:
the bytes, the sizes it reports, and that what was written unseen goes to the other device.
"""
import os
import time

import pytest

from conftest import run, sync, same_on

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE passthrough needs CAP_SYS_ADMIN")


def wait_same(m, rel, data):
    same_on(m, rel, data)


def passthrough_pair(stub, mount_factory):
    a = mount_factory(stub, "laptop", extra=["--passthrough"])
    b = mount_factory(stub, "desktop")
    return a, b


def test_negotiated_and_written_content_reaches_the_other_device(stub, mount_factory):
    a, b = passthrough_pair(stub, mount_factory)
    data = os.urandom(3 << 20)
    (a / "Documents" / "p.bin").write_bytes(data)
    assert "FUSE passthrough negotiated" in (a.store / "ubiquityfs.log").read_text(errors="replace")
    assert (a / "Documents" / "p.bin").read_bytes() == data
    sync(a)
    wait_same(b, "Documents/p.bin", data)


def test_write_in_place_through_passthrough_is_seen_in_size_and_on_the_other_device(stub, mount_factory):
    a, b = passthrough_pair(stub, mount_factory)
    path = a / "Documents" / "grow.bin"
    path.write_bytes(b"a" * 1000)
    sync(a)
    with open(path, "r+b") as f:
        f.seek(5000)
        f.write(b"tail")
        f.flush()
        # The daemon saw no write request: the size it reports comes from the content file.
        assert os.stat(path).st_size == 5004
    expected = b"a" * 1000 + b"\0" * 4000 + b"tail"
    assert path.read_bytes() == expected
    sync(a)
    wait_same(b, "Documents/grow.bin", expected)


def test_concurrent_opens_of_one_file_share_the_backing(stub, mount_factory):
    a, _ = passthrough_pair(stub, mount_factory)
    path = a / "Documents" / "two.txt"
    path.write_bytes(b"hello")
    # A second open while the first is held: the kernel refuses (EIO) another backing id on the same inode.
    with open(path, "rb") as r1, open(path, "r+b") as w:
        w.write(b"HE")
        w.flush()
        with open(path, "rb") as r2:
            assert r1.read() == b"HEllo"
            assert r2.read() == b"HEllo"


def uploaded(path):
    """isUploaded read in this process (getfattr would fork: the child's copies of our descriptors close, and
    each close is a FUSE flush)."""
    return os.getxattr(path, "user.ubiquity.isUploaded").decode()


def test_a_flush_without_a_write_leaves_an_uploaded_file_uploaded(stub, mount_factory):
    """A flush is no write: every close of a copy of the descriptor (a child forked and exec'd by the writer)
    sends one. Only a change of the content file since the last look makes the item dirty again."""
    a, b = passthrough_pair(stub, mount_factory)
    path = a / "Documents" / "held.log"
    with open(path, "w") as log:
        log.write("one\n")
        log.flush()
        os.fsync(log.fileno())
        sync(a)
        assert uploaded(path) == "1"
        for _ in range(3):
            run("true")  # forked with our descriptor: its exec closes that copy (a flush)
        assert uploaded(path) == "1"
        sync(a)
        assert uploaded(path) == "1"


def test_status_accounts_for_writes_the_daemon_never_saw(stub, mount_factory):
    """Written through passthrough with no flush, fsync or close since: the status asked for says what is
    true (not uploaded), and `sync --wait` waits for the write to reach the other device."""
    a, b = passthrough_pair(stub, mount_factory)
    path = a / "Documents" / "held.log"
    with open(path, "w") as log:
        log.write("one\n")
        log.flush()
        os.fsync(log.fileno())
        sync(a)
        assert uploaded(path) == "1"
        log.write("two\n")
        log.flush()  # a write(2): the kernel hands it to the content file, the daemon sees nothing
        assert uploaded(path) == "0"
        sync(a)
        assert uploaded(path) == "1"
        wait_same(b, "Documents/held.log", b"one\ntwo\n")


def test_a_file_written_without_pause_is_not_snapshotted_while_written(stub, mount_factory):
    """The quiet period of a file held open runs from its last write, which the daemon does not see with
    passthrough: it takes the content file's mtime. Written every 50 ms for 5 s (the quiet period is 3 s), the
    file is not pushed until it is closed."""
    a, b = passthrough_pair(stub, mount_factory)
    path = a / "Documents" / "busy.log"
    with open(path, "w") as log:
        for i in range(100):
            log.write(f"line {i:03d}\n")
            log.flush()
            time.sleep(0.05)
        assert not (b / "Documents" / "busy.log").exists(), "snapshotted while written without pause"
    sync(a)
    wait_same(b, "Documents/busy.log", "".join(f"line {i:03d}\n" for i in range(100)).encode())


def test_passthrough_is_the_default_and_no_passthrough_turns_it_off(stub, mount_factory):
    """One plain log line says which path a mount's I/O takes; both paths give the same bytes."""
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop", extra=["--no-passthrough"])
    data = os.urandom(1 << 20)
    (a / "Documents" / "d.bin").write_bytes(data)
    sync(a)
    wait_same(b, "Documents/d.bin", data)
    assert "I/O path: FUSE passthrough negotiated" in (a.store / "ubiquityfs.log").read_text(errors="replace")
    said = (b.store / "ubiquityfs.log").read_text(errors="replace")
    assert "I/O path: ordinary, through the daemon (FUSE passthrough: turned off (--no-passthrough))" in said
