"""Part 9, point 2: local-only items. A name ending in .nosync (file or folder, and everything below it) is never
uploaded; `setfattr -n user.ubiquity.isExcludedFromSync -v 1` takes an item off the remote (other devices see it
deleted) while its local copy stays, complete and never evicted; `-v 0` puts it back (as "name 2" if the name
was taken meanwhile). A move into or out of a .nosync folder does the same."""
import errno
import os

import pytest

from conftest import BIN, remote_names, run, sync, wait_until


def attr(path, name):
    p = run("getfattr", "-n", "user.ubiquity." + name, "--only-values", path, check=False)
    return p.stdout if p.returncode == 0 else p.stderr


def setattr_(path, name, value):
    return run("setfattr", "-n", "user.ubiquity." + name, "-v", value, path, check=False)


def evict(path):
    return run("setfattr", "-n", "user.ubiquity.evict", path, check=False)


def test_nosync_names_never_leave_the_device(two):
    stub, a, b = two
    d = a / "Documents"
    before = stub.stats()
    (d / "cache.nosync" / "sub").mkdir(parents=True)
    (d / "cache.nosync" / "one.bin").write_bytes(b"one" * 1000)
    (d / "cache.nosync" / "sub" / "two.txt").write_text("two\n")
    (d / "x.nosync").write_text("local only\n")
    sync(a)
    after = stub.stats()
    assert (after["itemPuts"], after["blobPuts"]) == (before["itemPuts"], before["blobPuts"])
    assert remote_names(stub) & {"cache.nosync", "one.bin", "sub", "two.txt", "x.nosync"} == set()

    (d / "plain.txt").write_text("synced\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "plain.txt").exists(), what="plain.txt on b")
    assert sorted(os.listdir(b / "Documents")) == ["plain.txt"]
    assert attr(d / "plain.txt", "isUbiquitous") == "1"
    for p in (d / "cache.nosync", d / "cache.nosync" / "sub" / "two.txt", d / "x.nosync"):
        assert attr(p, "isUbiquitous") == "0", p
        assert attr(p, "isExcludedFromSync") == "0", p
    p = evict(d / "x.nosync")
    assert p.returncode != 0 and "Device or resource busy" in p.stderr
    out = run(BIN, "status", d / "x.nosync", d / "plain.txt").stdout
    assert "local-only" in out and "SYNC" in out

    a.unmount()
    a.mount()
    assert (d / "cache.nosync" / "one.bin").read_bytes() == b"one" * 1000
    assert (d / "cache.nosync" / "sub" / "two.txt").read_text() == "two\n"
    assert (d / "x.nosync").read_text() == "local only\n"
    assert attr(d / "x.nosync", "isUbiquitous") == "0"
    sync(a)
    assert remote_names(stub) & {"cache.nosync", "x.nosync", "one.bin"} == set()


def test_the_excluded_flag_takes_items_off_the_remote_and_back(two):
    stub, a, b = two
    d, e = a / "Documents", b / "Documents"
    (d / "f.txt").write_text("file bytes\n")
    (d / "dir" / "sub").mkdir(parents=True)
    (d / "dir" / "sub" / "g.txt").write_text("below\n")
    sync(a)
    wait_until(lambda: (e / "dir" / "sub" / "g.txt").exists() and (e / "f.txt").exists(), what="the tree on b")

    for p in (d / "f.txt", d / "dir"):
        assert setattr_(p, "isExcludedFromSync", "1").returncode == 0
    assert setattr_(d / "f.txt", "isExcludedFromSync", "2").returncode != 0
    assert attr(d / "f.txt", "isExcludedFromSync") == "1"
    assert attr(d / "dir" / "sub" / "g.txt", "isUbiquitous") == "0"
    sync(a)
    wait_until(lambda: not (e / "f.txt").exists() and not (e / "dir").exists(), what="the items gone from b")
    assert remote_names(stub) & {"f.txt", "dir", "sub", "g.txt"} == set()
    assert (d / "f.txt").read_text() == "file bytes\n"
    assert (d / "dir" / "sub" / "g.txt").read_text() == "below\n"
    for p in (d / "f.txt", d / "dir"):
        r = evict(p)
        assert r.returncode != 0 and "Device or resource busy" in r.stderr, p
    assert (d / "f.txt").read_text() == "file bytes\n"
    assert "excluded" in run(BIN, "status", d / "f.txt").stdout

    # Back: b sees them again with the right bytes.
    for p in (d / "f.txt", d / "dir"):
        assert setattr_(p, "isExcludedFromSync", "0").returncode == 0
    assert attr(d / "f.txt", "isUbiquitous") == "1"
    sync(a)
    wait_until(lambda: (e / "dir" / "sub" / "g.txt").exists() and (e / "f.txt").exists(), what="the tree back on b")
    assert (e / "f.txt").read_text() == "file bytes\n"
    assert (e / "dir" / "sub" / "g.txt").read_text() == "below\n"


def test_a_name_taken_meanwhile_keeps_both(two):
    stub, a, b = two
    d, e = a / "Documents", b / "Documents"
    (d / "n.txt").write_text("from laptop\n")
    sync(a)
    wait_until(lambda: (e / "n.txt").exists(), what="n.txt on b")
    assert setattr_(d / "n.txt", "isExcludedFromSync", "1").returncode == 0
    sync(a)
    wait_until(lambda: not (e / "n.txt").exists(), what="n.txt gone from b")
    (e / "n.txt").write_text("from desktop\n")
    sync(b)
    # The remote item arrives: the local-only one moves aside, as a local item not yet uploaded would.
    wait_until(lambda: (d / "n 2.txt").exists(), what="the local-only n.txt moved aside on a")
    assert setattr_(d / "n 2.txt", "isExcludedFromSync", "0").returncode == 0
    sync(a)
    wait_until(lambda: (e / "n 2.txt").exists(), what="n 2.txt on b")
    assert (e / "n.txt").read_text() == "from desktop\n"
    assert (e / "n 2.txt").read_text() == "from laptop\n"
    assert (d / "n.txt").read_text() == "from desktop\n"


def test_mv_into_a_nosync_folder_and_back_out(two):
    stub, a, b = two
    d, e = a / "Documents", b / "Documents"
    (d / "keep.nosync").mkdir()
    (d / "m.txt").write_text("moving\n")
    sync(a)
    wait_until(lambda: (e / "m.txt").exists(), what="m.txt on b")
    run("mv", d / "m.txt", d / "keep.nosync" / "m.txt")
    sync(a)
    wait_until(lambda: not (e / "m.txt").exists(), what="m.txt gone from b")
    assert "m.txt" not in remote_names(stub)
    assert (d / "keep.nosync" / "m.txt").read_text() == "moving\n"
    run("mv", d / "keep.nosync" / "m.txt", d / "m.txt")
    sync(a)
    wait_until(lambda: (e / "m.txt").exists(), what="m.txt back on b")
    assert (e / "m.txt").read_text() == "moving\n"


def test_content_not_here_is_downloaded_first(two):
    stub, a, b = two
    d, e = a / "Documents", b / "Documents"
    big = os.urandom(1 << 20)
    (d / "big.bin").write_bytes(big)
    (d / "other.bin").write_bytes(b"other" * 100)
    (d / "proj").mkdir()
    (d / "proj" / "inner.bin").write_bytes(b"inner" * 100)
    sync(a)
    wait_until(lambda: (e / "big.bin").exists() and (e / "other.bin").exists() and (e / "proj" / "inner.bin").exists(),
               what="the files on b")
    assert attr(e / "big.bin", "downloadingStatus") == "notDownloaded"
    # The flag starts the download and is refused until the content is here.
    r = setattr_(e / "big.bin", "isExcludedFromSync", "1")
    assert r.returncode != 0 and "Device or resource busy" in r.stderr
    wait_until(lambda: attr(e / "big.bin", "downloadingStatus") == "current", what="big.bin downloaded on b")
    assert setattr_(e / "big.bin", "isExcludedFromSync", "1").returncode == 0
    # (Compared with the bytes written, not with a's copy: excluded on b, the file leaves the remote, and a's
    # copy with it, as soon as b's push and a's pull have run.)
    assert (e / "big.bin").read_bytes() == big
    # A rename of a file into a .nosync folder downloads it first (gio trash, which moves into a local-only
    # folder, does not copy on EXDEV as mv does); a folder holding files not here gets EXDEV, and mv copies it.
    (e / "stash.nosync").mkdir()
    assert attr(e / "other.bin", "downloadingStatus") == "notDownloaded"
    os.rename(e / "other.bin", e / "stash.nosync" / "other.bin")
    assert (e / "stash.nosync" / "other.bin").read_bytes() == b"other" * 100
    with pytest.raises(OSError) as err:
        os.rename(e / "proj", e / "stash.nosync" / "proj")
    assert err.value.errno == errno.EXDEV
    run("mv", e / "proj", e / "stash.nosync" / "proj")
    assert (e / "stash.nosync" / "proj" / "inner.bin").read_bytes() == b"inner" * 100
    sync(b)
    wait_until(lambda: not any((d / n).exists() for n in ("big.bin", "other.bin", "proj")), what="all gone from a")


def test_status_of_fifos_and_sockets_says_local_only(two):
    """The kernel lets no user.* attribute be read on a fifo or a socket (getfattr answers "No such attribute"
    before the file system is asked), so `ubiquityfs status` tells them by their kind: local-only."""
    import json
    import socket
    stub, a, b = two
    docs = a / "Documents"
    os.mkfifo(docs / "pipe")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(docs / "sock"))
    try:
        for node in ("pipe", "sock"):
            p = run(BIN, "status", docs / node, check=False)
            assert p.returncode == 0, p.stderr
            assert "local-only" in p.stdout.splitlines()[1], p.stdout
            row = json.loads(run(BIN, "status", "--json", docs / node).stdout)[0]
            assert row["isUbiquitous"] is False and row["kind"] == ("fifo" if node == "pipe" else "socket")
        outside = run(BIN, "status", "/run/initctl" if os.path.exists("/run/initctl") else "/dev/null", check=False)
        assert outside.returncode != 0 and "not in a ubiquityfs mount" in outside.stderr
    finally:
        s.close()
