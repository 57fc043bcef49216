"""Changes that change nothing queue nothing and send nothing: setting a mode, a time, a size or an extended
attribute to what it already is (rsync -aX of an unchanged tree does all of these) leaves no pending change and
no write on the remote."""
import os
import stat

import pytest

from conftest import BIN, run


def pending(m):
    return run("getfattr", "-n", "user.ubiquity.pendingChanges", "--only-values", "--absolute-names",
               m.path).stdout


def writes(stub):
    s = stub.stats()
    return {k: s[k] for k in ("itemPuts", "itemDeletes", "blobPuts")}


def settled(m, stub):
    """Waits for every change to be uploaded; returns the stub's write counters then."""
    run(BIN, "sync", "--wait", m.path, timeout=120)
    assert pending(m) == "0"
    return writes(stub)


@pytest.fixture
def m(stub, mount_factory):
    return mount_factory(stub)


def make_tree(base, n=200):
    for i in range(n):
        d = base / f"d{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"f{i}.txt"
        f.write_text(f"file {i}\n")
        os.setxattr(f, "user.tag", f"tag {i}".encode())
        if i % 3 == 0:
            os.setxattr(f, "user.color", b"blue")
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    # Folders made long before the copy (rsync leaves a folder's time alone when it is within the second).
    for d in [*base.iterdir(), base]:
        os.utime(d, (1_690_000_000, 1_690_000_000))
    return base


def test_a_second_rsync_of_an_unchanged_tree_changes_nothing(stub, m, tmp_path):
    src = make_tree(tmp_path / "tree")
    dest = m / "Documents" / "tree"
    run("rsync", "-aX", f"{src}/", f"{dest}/", timeout=300)
    before = settled(m, stub)
    assert before["itemPuts"] >= 210
    run("rsync", "-aX", f"{src}/", f"{dest}/", timeout=300)
    assert pending(m) == "0"
    assert writes(stub) == before
    # Everything arrived: the content, the times and the attributes.
    f = dest / "d7" / "f57.txt"
    assert f.read_text() == "file 57\n" and int(f.stat().st_mtime) == 1_700_000_057
    assert os.getxattr(f, "user.tag") == b"tag 57" and os.getxattr(f, "user.color") == b"blue"
    assert int((dest / "d7").stat().st_mtime) == 1_690_000_000


def test_touch_chmod_truncate_and_setfattr_to_the_same_value_queue_nothing(stub, m):
    f = m / "Documents" / "f.txt"
    f.write_text("twelve bytes")
    run("touch", "-m", "-d", "@1700000000", f)
    run("chmod", "644", f)
    run("setfattr", "-n", "user.a", "-v", "same", f)
    before = settled(m, stub)
    ctime = f.stat().st_ctime_ns
    run("touch", "-m", "-d", "@1700000000", f)
    run("chmod", "644", f)
    run("setfattr", "-n", "user.a", "-v", "same", f)
    os.truncate(f, 12)
    os.utime(m / "Documents", ns=(0, (m / "Documents").stat().st_mtime_ns))
    assert pending(m) == "0"
    assert writes(stub) == before
    st = f.stat()
    assert st.st_ctime_ns == ctime and int(st.st_mtime) == 1_700_000_000
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_size == 12
    assert f.read_text() == "twelve bytes" and os.getxattr(f, "user.a") == b"same"
    # A real change still goes up.
    run("chmod", "600", f)
    assert settled(m, stub)["itemPuts"] == before["itemPuts"] + 1
