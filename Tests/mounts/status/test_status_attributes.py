"""Part 2: status attributes with getfattr, evict/download/pin with setfattr, and the same from the command."""
import json
import os
import time

import pytest

from conftest import BIN, run, sync, wait_until, attr

STATUS = ["isUbiquitous", "downloadingStatus", "isDownloading", "percentDownloaded", "isUploaded",
          "isUploading", "percentUploaded", "hasUnresolvedConflicts", "pinned"]


def attrs(path):
    """All attributes as getfattr -d -m - prints them."""
    out = run("getfattr", "-d", "-m", "-", "--absolute-names", path).stdout
    result = {}
    for line in out.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            result[k] = v.strip('"')
    return result


def blocks(path):
    return int(run("du", "-s", "-B1", path).stdout.split()[0])


@pytest.fixture
def seeded(stub, tmp_path):
    src = tmp_path / "src"
    (src / "dir" / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "dir" / "b.txt").write_text("bravo\n")
    (src / "dir" / "sub" / "c.txt").write_text("charlie\n")
    (src / "big.bin").write_bytes(os.urandom(2 << 20))
    stub.seed(("Documents", src))
    return stub, src


def test_getfattr_lists_every_status_attribute(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub)
    f = m / "Documents" / "a.txt"
    a = attrs(f)
    for name in STATUS:
        assert "user.ubiquity." + name in a, a
    assert a["user.ubiquity.isUbiquitous"] == "1"
    assert a["user.ubiquity.downloadingStatus"] == "notDownloaded"
    assert a["user.ubiquity.isUploaded"] == "1"
    assert "user.ubiquity.downloadingError" not in a
    run("cat", f)
    assert attr(f, "downloadingStatus") == "current"
    assert attr(f, "percentDownloaded") == "100"


def test_size_probe_and_erange(seeded, mount_factory):
    import ctypes
    import errno
    stub, src = seeded
    m = mount_factory(stub)
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    path = str(m / "Documents" / "a.txt").encode()
    name = b"user.ubiquity.downloadingStatus"
    n = libc.getxattr(path, name, None, 0)
    assert n == len("notDownloaded")
    buf = ctypes.create_string_buffer(4)
    assert libc.getxattr(path, name, buf, 4) == -1 and ctypes.get_errno() == errno.ERANGE
    size = libc.listxattr(path, None, 0)
    assert size > 0
    small = ctypes.create_string_buffer(8)
    assert libc.listxattr(path, small, 8) == -1 and ctypes.get_errno() == errno.ERANGE
    full = ctypes.create_string_buffer(size)
    assert libc.listxattr(path, full, size) == size


def test_downloaded_means_a_newer_version_waits(seeded, mount_factory):
    stub, src = seeded
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    fa, fb = a / "Documents" / "a.txt", b / "Documents" / "a.txt"
    run("cat", fa)
    assert attr(fa, "downloadingStatus") == "current"
    fb.write_text("alpha, edited on desktop\n")
    wait_until(lambda: attr(fa, "downloadingStatus") == "downloaded", what="downloaded status on a")
    assert fa.read_text() == "alpha, edited on desktop\n"
    assert attr(fa, "downloadingStatus") == "current"


def test_progress_rises_during_throttled_download(stub_factory, mount_factory, tmp_path):
    stub = stub_factory(bandwidth=2_000_000)
    src = tmp_path / "src"
    src.mkdir()
    (src / "slow.bin").write_bytes(os.urandom(8 << 20))
    stub.seed(("Documents", src))
    m = mount_factory(stub)
    f = m / "Documents" / "slow.bin"
    run("setfattr", "-n", "user.ubiquity.download", f)  # returns at once
    seen, downloading = [], False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pct, busy = attr(f, "percentDownloaded"), attr(f, "isDownloading")
        if busy == "1":
            downloading = True
            seen.append(int(pct))
        if attr(f, "downloadingStatus") == "current":
            break
        time.sleep(0.2)
    assert downloading
    assert seen == sorted(seen) and len(set(seen)) >= 3, seen
    assert attr(f, "isDownloading") == "0" and attr(f, "percentDownloaded") == "100"
    assert attr(f, "downloadingStatus") == "current"


def test_upload_status_becomes_uploaded(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub)
    f = m / "Documents" / "new.bin"
    f.write_bytes(os.urandom(1 << 20))
    wait_until(lambda: attr(f, "isUploaded") == "1", what="isUploaded")
    assert attr(f, "percentUploaded") == "100" and attr(f, "isUploading") == "0"
    assert stub.stats()["blobPuts"] >= 1


def test_evict_drops_content_and_keeps_entry(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub)
    f = m / "Documents" / "big.bin"
    original = f.read_bytes()
    assert blocks(f) >= 2 << 20
    store_before = int(run("du", "-s", "-B1", m.store / "content").stdout.split()[0])
    ls_before = run("ls", "-l", f).stdout
    run("setfattr", "-n", "user.ubiquity.evict", f)
    assert blocks(f) == 0
    assert int(run("du", "-s", "-B1", "--apparent-size", f).stdout.split()[0]) == 2 << 20
    assert run("ls", "-l", f).stdout == ls_before
    store_after = int(run("du", "-s", "-B1", m.store / "content").stdout.split()[0])
    assert store_before - store_after >= 2 << 20
    assert attr(f, "downloadingStatus") == "notDownloaded"
    assert f.read_bytes() == original
    assert stub.blob_gets(src / "big.bin") == 2


def test_evict_refused_while_not_uploaded_or_open_for_writing(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub)
    stub.stop()  # uploads cannot go through
    f = m / "Documents" / "unsent.txt"
    f.write_text("not yet on the remote")
    p = run("setfattr", "-n", "user.ubiquity.evict", f, check=False)
    assert p.returncode != 0 and "Device or resource busy" in p.stderr
    assert f.read_text() == "not yet on the remote"
    stub.start()
    wait_until(lambda: attr(f, "isUploaded") == "1", timeout=40, what="upload after the stub is back")
    g = m / "Documents" / "a.txt"
    with open(g, "a") as handle:
        p = run("setfattr", "-n", "user.ubiquity.evict", g, check=False)
        assert p.returncode != 0 and "busy" in p.stderr
        handle.write("more\n")
    assert g.read_text() == "alpha\nmore\n"


def test_evict_directory_reports_failures(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub)
    d = m / "Documents" / "dir"
    run("cat", d / "b.txt", d / "sub" / "c.txt")
    run("setfattr", "-n", "user.ubiquity.pinned", "-v", "1", d / "sub" / "c.txt")
    p = run("setfattr", "-n", "user.ubiquity.evict", d, check=False)
    assert p.returncode != 0
    assert attr(d / "b.txt", "downloadingStatus") == "notDownloaded"
    assert attr(d / "sub" / "c.txt", "downloadingStatus") == "current"


def test_download_action_on_directory_is_recursive(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub)
    d = m / "Documents" / "dir"
    run("setfattr", "-n", "user.ubiquity.download", d)
    wait_until(lambda: attr(d / "b.txt", "downloadingStatus") == "current"
               and attr(d / "sub" / "c.txt", "downloadingStatus") == "current", what="recursive download")
    assert attr(m / "Documents" / "a.txt", "downloadingStatus") == "notDownloaded"


def test_pin_keeps_downloaded_and_survives_remount(seeded, mount_factory):
    stub, src = seeded
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    d = a / "Documents" / "dir"
    run("setfattr", "-n", "user.ubiquity.pinned", "-v", "1", d)
    wait_until(lambda: attr(d / "b.txt", "downloadingStatus") == "current", what="pinned dir fetched")
    assert attr(d / "sub" / "c.txt", "pinned") == "1"
    p = run("setfattr", "-n", "user.ubiquity.evict", d / "b.txt", check=False)
    assert p.returncode != 0
    # New versions and new files arriving in a pinned directory are fetched as they arrive.
    (b / "Documents" / "dir" / "b.txt").write_text("bravo v2\n")
    (b / "Documents" / "dir" / "new.txt").write_text("new in pinned dir\n")
    wait_until(lambda: (d / "new.txt").exists() and attr(d / "new.txt", "downloadingStatus") == "current",
               what="new file in pinned dir fetched")
    wait_until(lambda: attr(d / "b.txt", "downloadingStatus") == "current" and blocks(d / "b.txt") > 0
               and (d / "b.txt").stat().st_size == len("bravo v2\n"), what="new version fetched")
    gets = stub.blob_gets()
    assert (d / "b.txt").read_text() == "bravo v2\n"
    assert stub.blob_gets() == gets  # it was already local
    run(BIN, "sync", "--wait", "--timeout", "30", a.path)
    run(BIN, "unmount", a.path)
    a.mount()
    assert attr(d, "pinned") == "1"
    run("setfattr", "-n", "user.ubiquity.pinned", "-v", "0", d)
    run("setfattr", "-n", "user.ubiquity.evict", d / "b.txt")
    assert attr(d / "b.txt", "downloadingStatus") == "notDownloaded"


def test_download_error_is_reported(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub, extra=["--download-timeout", "2"])
    stub.stop()
    f = m / "Documents" / "a.txt"
    p = run("cat", f, check=False)
    assert p.returncode != 0 and "Input/output error" in p.stderr
    err = attr(f, "downloadingError")
    assert err and "\n" not in err.strip()
    stub.start()
    assert f.read_text() == "alpha\n"
    assert attr(f, "downloadingError") is None


def test_upload_error_is_reported(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub)
    stub.stop()
    f = m / "Documents" / "pending.txt"
    f.write_text("waiting for the remote")
    wait_until(lambda: attr(f, "uploadingError"), timeout=20, what="uploadingError")
    assert attr(f, "isUploaded") == "0"
    stub.start()
    wait_until(lambda: attr(f, "isUploaded") == "1", timeout=40, what="upload after outage")
    assert attr(f, "uploadingError") is None


def test_bad_input_gets_clear_errno(seeded, mount_factory):
    stub, src = seeded
    m = mount_factory(stub)
    f = m / "Documents" / "a.txt"
    def fails(*args, text):
        p = run("setfattr", *args, f, check=False)
        assert p.returncode != 0 and text in p.stderr, p.stderr
    fails("-n", "user.ubiquity.pinned", "-v", "maybe", text="Invalid argument")
    fails("-n", "user.ubiquity.resolve", "-v", "keep-everything", text="Invalid argument")
    fails("-n", "user.ubiquity.isUploaded", "-v", "yes", text="Invalid argument")
    fails("-n", "user.ubiquity.noSuchThing", "-v", "1", text="Operation not supported")
    fails("-n", "trusted.foo", "-v", "1", text="Operation not supported")
    p = run("getfattr", "-n", "user.ubiquity.noSuchThing", f, check=False)
    assert p.returncode != 0 and "No such attribute" in p.stderr
    assert attr(f, "pinned") == "0"
    assert attr(f, "downloadingStatus") == "notDownloaded"


def test_user_attributes_sync_and_survive_eviction(seeded, mount_factory):
    stub, src = seeded
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    fa, fb = a / "Documents" / "a.txt", b / "Documents" / "a.txt"
    run("setfattr", "-n", "user.color", "-v", "red", fa)
    run("setfattr", "-n", "user.tags", "-v", "work,urgent", fa)
    assert run("getfattr", "-n", "user.color", "--only-values", fa).stdout == "red"
    wait_until(lambda: run("getfattr", "-n", "user.tags", "--only-values", fb, check=False).stdout == "work,urgent",
               what="user attribute on b")
    run("cat", fa)
    wait_until(lambda: attr(fa, "isUploaded") == "1", what="attribute uploaded")
    run("setfattr", "-n", "user.ubiquity.evict", fa)
    assert run("getfattr", "-n", "user.color", "--only-values", fa).stdout == "red"
    run("setfattr", "-x", "user.color", fa)
    wait_until(lambda: run("getfattr", "-n", "user.color", fb, check=False).returncode != 0,
               what="attribute removal on b")


def test_user_attributes_past_the_limit_get_e2big_and_all_that_were_accepted_sync(seeded, mount_factory):
    """Small attributes added one by one (as stress-ng's xattr stressor does) until the set would pass 64 KiB:
    setfattr gets E2BIG at once, and every attribute it accepted reaches the other device (the remote counts
    the limit the same way, so nothing is refused on upload)."""
    stub, src = seeded
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    fa, fb = a / "Documents" / "a.txt", b / "Documents" / "a.txt"
    value = "v" * 40
    accepted = 0
    for i in range(2000):
        p = run("setfattr", "-n", f"user.var_{i}", "-v", value, fa, check=False)
        if p.returncode != 0:
            assert "Argument list too long" in p.stderr, p.stderr
            break
        accepted += 1
    else:
        pytest.fail("2,000 attributes of 50 bytes each were all accepted")
    # 64 KiB of names and values, not of their base64 (which would stop near 1,000).
    assert accepted > 1200, accepted
    sync(a, timeout=120)
    assert attr(fa, "isUploaded") == "1"
    names = lambda f: [l.split("=")[0] for l in run("getfattr", "-d", "-m", "^user\\.var_", "--absolute-names", f,
                                                    check=False).stdout.splitlines() if l.startswith("user.var_")]
    wait_until(lambda: len(names(fb)) == accepted, what="every accepted attribute on b")
    assert sorted(names(fb)) == sorted(f"user.var_{i}" for i in range(accepted))


def test_cp_a_and_rsync_aX_carry_user_attributes(seeded, mount_factory, tmp_path):
    stub, src = seeded
    m = mount_factory(stub)
    docs = m / "Documents"
    run("setfattr", "-n", "user.color", "-v", "blue", docs / "a.txt")
    out = tmp_path / "out"
    out.mkdir()
    for cmd in (["cp", "-a", docs / "a.txt", out / "cp.txt"],
                ["rsync", "-aX", str(docs / "a.txt"), str(out / "rsync.txt")],
                ["cp", "-a", docs / "a.txt", docs / "dir" / "cp-in.txt"],
                ["rsync", "-aX", str(docs / "a.txt"), str(docs / "dir" / "rsync-in.txt")],
                ["rsync", "-aX", str(out / "cp.txt"), str(docs / "dir" / "from-local.txt")]):
        p = run(*cmd, check=False)
        assert p.returncode == 0 and p.stderr == "", (cmd, p.stderr)
    for copy in (out / "cp.txt", out / "rsync.txt", docs / "dir" / "cp-in.txt", docs / "dir" / "rsync-in.txt",
                 docs / "dir" / "from-local.txt"):
        assert run("getfattr", "-n", "user.color", "--only-values", copy).stdout == "blue", copy
        assert copy.read_text() == "alpha\n"


class TestCommand:
    def test_status_table_and_json(self, seeded, mount_factory):
        stub, src = seeded
        m = mount_factory(stub)
        f = m / "Documents" / "a.txt"
        out = run(BIN, "status", f, m / "Documents" / "dir").stdout
        assert "notDownloaded" in out and "a.txt" in out and "STATE" in out
        data = json.loads(run(BIN, "status", "--json", f).stdout)
        assert data[0]["downloadingStatus"] == "notDownloaded" and data[0]["isUploaded"] is True
        # Typed as the live query types them: flags as booleans, counts as numbers.
        assert data[0]["percentDownloaded"] == 0 and data[0]["size"] == 6 and data[0]["pinned"] is False
        p = run(BIN, "status", "/etc/hostname", check=False)
        assert p.returncode != 0 and "not in a ubiquityfs mount" in p.stderr

    def test_the_root_reads_uploaded_once_nothing_waits(self, seeded, mount_factory):
        stub, src = seeded
        m = mount_factory(stub)
        (m / "Documents" / "new.txt").write_text("new\n")
        sync(m)
        assert attr(m.path, "isUploaded") == "1"
        assert attr(m.path, "percentUploaded") == "100"
        row = json.loads(run(BIN, "status", "--json", m.path).stdout)[0]
        assert row["isUploaded"] is True and row["pendingChanges"] == 0
        out = run(BIN, "status", m.path).stdout
        assert "waiting" not in out.splitlines()[1], out
        stub.stop()
        (m / "Documents" / "later.txt").write_text("later\n")
        wait_until(lambda: attr(m.path, "isUploaded") == "0", what="the root waiting for an upload")

    def test_actions(self, seeded, mount_factory):
        stub, src = seeded
        m = mount_factory(stub)
        f = m / "Documents" / "big.bin"
        p = run(BIN, "download", "--wait", f)
        assert "100%" in p.stdout
        assert attr(f, "downloadingStatus") == "current"
        run(BIN, "pin", f)
        p = run(BIN, "evict", f, check=False)
        assert p.returncode != 0 and "cannot evict" in p.stderr
        run(BIN, "unpin", f)
        run(BIN, "evict", f)
        assert attr(f, "downloadingStatus") == "notDownloaded"

    def test_evict_of_a_folder_names_the_files_that_stayed(self, seeded, mount_factory):
        """setfattr can only say EBUSY; the command evicts what may go and names each file that stayed."""
        stub, src = seeded
        m = mount_factory(stub)
        d = m / "Documents" / "dir"
        run(BIN, "download", "--wait", d)
        run(BIN, "pin", d / "sub" / "c.txt")
        p = run(BIN, "evict", d, check=False)
        assert p.returncode == 1
        assert f"kept {d}/sub/c.txt: pinned" in p.stderr and "1 file(s) stayed" in p.stderr, p.stderr
        assert attr(d / "b.txt", "downloadingStatus") == "notDownloaded"
        assert attr(d / "sub" / "c.txt", "downloadingStatus") == "current"

    def test_download_wait_fails_when_remote_is_gone(self, seeded, mount_factory):
        stub, src = seeded
        m = mount_factory(stub, extra=["--download-timeout", "2"])
        stub.stop()
        p = run(BIN, "download", "--wait", m / "Documents" / "a.txt", check=False, timeout=60)
        assert p.returncode != 0 and "failed" in p.stderr
