"""Part 4: nothing is lost under daemon crashes, remote outages, flaky links, corruption, a full disk and bad
input; and it is clear when it is safe to unmount."""
import errno
import hashlib
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, CONTAINER, mount_with_store_on, run, small_disk_at, wait_until, attr


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_store(m):
    """Unmounts (if needed) and runs the integrity check on the device's store."""
    if m.is_mounted():
        m.unmount()
    p = run(BIN, "check", "--store", m.store, check=False)
    assert p.returncode == 0 and "the store is sound" in p.stdout, p.stdout + p.stderr


@pytest.fixture
def big_remote(stub_factory, tmp_path):
    stub = stub_factory(bandwidth=4_000_000)
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(12 << 20))
    (src / "small.txt").write_text("small\n")
    stub.seed(("Documents", src))
    return stub, src


# 1. Daemon crashes ---------------------------------------------------------------------------------------

def test_kill_after_close_before_upload(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    stub.stop()  # nothing can be uploaded
    files = {f"f{i}.bin": os.urandom(100_000 + i) for i in range(5)}
    for name, data in files.items():
        (a / "Documents" / name).write_bytes(data)
    fd = os.open(a / "Documents" / "synced.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"fsynced bytes")
    os.fsync(fd)
    a.kill_daemon(signal.SIGKILL)  # while the file is still open
    try:
        os.close(fd)
    except OSError as e:
        # ENOTCONN, or ECONNABORTED (kernel 6.18, at times): both say the daemon is gone.
        assert e.errno in (errno.ENOTCONN, errno.ECONNABORTED), e
    stub.start()
    a.mount()
    for name, data in files.items():
        assert (a / "Documents" / name).read_bytes() == data
    assert (a / "Documents" / "synced.bin").read_bytes() == b"fsynced bytes"
    b = mount_factory(stub, "desktop")
    wait_until(lambda: all((b / "Documents" / n).exists() and (b / "Documents" / n).read_bytes() == d
                           for n, d in files.items()), timeout=40, what="uploads resumed after the crash")
    run(BIN, "sync", "--wait", "--timeout", "30", a.path)
    check_store(a)


def test_kill_mid_download_serves_no_partial_bytes(big_remote, mount_factory):
    stub, src = big_remote
    m = mount_factory(stub)
    cat = subprocess.Popen(["cat", m / "Documents" / "big.bin"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: int(attr(m / "Documents" / "big.bin", "percentDownloaded") or 0) > 0,
               what="part of the download to arrive")
    m.kill_daemon(signal.SIGKILL)
    cat.wait(10)
    check_store(m)  # staging leftovers are cleared when the store opens; nothing half-written is recorded
    m.mount()
    assert attr(m / "Documents" / "big.bin", "downloadingStatus") == "notDownloaded"
    assert sha(m / "Documents" / "big.bin") == sha(src / "big.bin")


def test_kill_mid_upload_and_mid_rename(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    data = os.urandom(24 << 20)
    (a / "Documents" / "large.bin").write_bytes(data)
    (a / "Documents" / "old-name.txt").write_text("renamed before the crash\n")
    run("mv", a / "Documents" / "old-name.txt", a / "Documents" / "new-name.txt")
    a.kill_daemon(signal.SIGKILL)
    a.mount()
    b = mount_factory(stub, "desktop")
    wait_until(lambda: (b / "Documents" / "new-name.txt").exists() and (b / "Documents" / "large.bin").exists()
               and sha(b / "Documents" / "large.bin") == hashlib.sha256(data).hexdigest(),
               timeout=60, what="upload and rename after the crash")
    assert not (b / "Documents" / "old-name.txt").exists()
    run(BIN, "sync", "--wait", "--timeout", "30", a.path)
    check_store(a)


def test_random_operations_with_crashes(stub, mount_factory):
    """At least 200 mixed operations; the daemon is killed with SIGKILL at random points; every file that was
    closed before a kill keeps exactly its bytes, and a second device converges on the same tree. A delete is
    written with the next change that writes the store (or a second later): files deleted since the last such
    change may come back whole after a kill, and nothing else does."""
    rng = random.Random(int(os.environ.get("UBIQUITYFS_SEED", "4242")))
    steps = int(os.environ.get("UBIQUITYFS_SOAK_OPS", "220"))  # a soak run sets thousands
    a = mount_factory(stub, "laptop")
    root = a / "Documents"
    model = {}  # relative path -> bytes, for files; directories implied
    dirs = {""}
    kills = 0
    unwritten_deletes = {}  # path -> bytes: deleted since the last change that writes the store
    for step in range(steps):
        op = rng.choice(["create", "create", "append", "truncate", "rename", "delete", "mkdir", "overwrite"])
        if op not in ("delete", "truncate"):  # (a truncation to the same size writes nothing)
            unwritten_deletes = {}
        files = sorted(model)
        if op == "create" or not files:
            d = rng.choice(sorted(dirs))
            rel = os.path.join(d, f"file{step}.txt")
            model[rel] = os.urandom(rng.randint(0, 5000))
            (root / rel).write_bytes(model[rel])
        elif op == "append":
            rel = rng.choice(files)
            extra = os.urandom(rng.randint(1, 3000))
            with open(root / rel, "ab") as f:
                f.write(extra)
            model[rel] += extra
        elif op == "overwrite":
            rel = rng.choice(files)
            model[rel] = os.urandom(rng.randint(0, 4000))
            (root / rel).write_bytes(model[rel])
        elif op == "truncate":
            rel = rng.choice(files)
            n = rng.randint(0, len(model[rel]))
            os.truncate(root / rel, n)
            model[rel] = model[rel][:n]
        elif op == "rename":
            rel = rng.choice(files)
            new = os.path.join(rng.choice(sorted(dirs)), f"moved{step}.txt")
            os.rename(root / rel, root / new)
            model[new] = model.pop(rel)
        elif op == "delete":
            rel = rng.choice(files)
            os.unlink(root / rel)
            unwritten_deletes[rel] = model.pop(rel)
        elif op == "mkdir":
            d = os.path.join(rng.choice(sorted(dirs)), f"dir{step}")
            os.mkdir(root / d)
            dirs.add(d)
        if rng.random() < 0.05:
            a.kill_daemon(signal.SIGKILL)
            kills += 1
            a.mount()
            for rel, data in unwritten_deletes.items():
                if rel not in model and (root / rel).exists():
                    assert (root / rel).read_bytes() == data, f"{rel} came back with other bytes"
                    model[rel] = data
            unwritten_deletes = {}
    assert kills >= 3
    print(f"{steps} operations, {kills} daemon kills")

    def tree(base):
        found = {}
        for dirpath, _, names in os.walk(base):
            for n in names:
                p = Path(dirpath) / n
                found[str(p.relative_to(base))] = p.read_bytes()
        return found

    assert tree(root) == model
    run(BIN, "sync", "--wait", "--timeout", "60", a.path)
    b = mount_factory(stub, "desktop")
    wait_until(lambda: tree(b / "Documents") == model, timeout=60, what="the second device to converge")
    check_store(a)
    check_store(b)


# 2. Remote outages ---------------------------------------------------------------------------------------

def test_outage_keeps_local_work_going(big_remote, mount_factory):
    stub, src = big_remote
    m = mount_factory(stub, extra=["--download-timeout", "3"])
    assert (m / "Documents" / "small.txt").read_text() == "small\n"
    stub.stop()
    t0 = time.monotonic()
    for _ in range(20):
        run("ls", "-l", m / "Documents")
        run("stat", m / "Documents" / "big.bin")
        assert (m / "Documents" / "small.txt").read_text() == "small\n"
    assert time.monotonic() - t0 < 10  # local work does not wait for the remote
    (m / "Documents" / "offline.txt").write_text("written offline\n")
    p = run("cat", m / "Documents" / "big.bin", check=False)
    assert p.returncode != 0 and "Input/output error" in p.stderr
    assert attr(m / "Documents" / "big.bin", "downloadingError")
    p = run(BIN, "unmount", m.path, check=False)
    assert p.returncode != 0 and "1 change(s)" in p.stderr and "not uploaded" in p.stderr
    stub.start()
    wait_until(lambda: attr(m / "Documents" / "offline.txt", "isUploaded") == "1", timeout=40, what="queued upload")
    assert sha(m / "Documents" / "big.bin") == sha(src / "big.bin")


def test_mount_while_remote_unreachable_uses_last_known_state(stub, mount_factory):
    m = mount_factory(stub)
    (m / "Documents" / "known.txt").write_text("known\n")
    run(BIN, "sync", "--wait", "--timeout", "30", m.path)
    run(BIN, "unmount", m.path)
    stub.stop()
    m.mount()
    assert (m / "Documents" / "known.txt").read_text() == "known\n"
    (m / "Documents" / "queued.txt").write_text("queued\n")
    stub.start()
    b = mount_factory(stub, "desktop")
    wait_until(lambda: (b / "Documents" / "queued.txt").exists(), timeout=40, what="queued change after restart")
    names = sorted(os.listdir(b / "Documents"))
    assert names == ["known.txt", "queued.txt"]  # no duplicates


def test_remote_back_on_another_port(stub, mount_factory):
    m = mount_factory(stub)
    stub.stop()
    (m / "Documents" / "moved-remote.txt").write_text("queued for the moved remote\n")
    run(BIN, "unmount", "--force", m.path)
    stub.port = 0  # the remote comes back elsewhere; the device is remounted with the new address
    stub.start()
    m.mount()
    run(BIN, "sync", "--wait", "--timeout", "30", m.path)
    b = mount_factory(stub, "desktop")
    assert (b / "Documents" / "moved-remote.txt").read_text() == "queued for the moved remote\n"


def test_forced_unmount_loses_nothing(stub, mount_factory):
    m = mount_factory(stub)
    stub.stop()
    (m / "Documents" / "pending.txt").write_text("pending at unmount\n")
    p = run(BIN, "unmount", m.path, check=False)
    assert p.returncode != 0 and "--force" in p.stderr
    assert m.is_mounted()
    run(BIN, "unmount", "--force", m.path)
    assert not m.is_mounted()
    stub.start()
    m.mount()
    run(BIN, "sync", "--wait", "--timeout", "30", m.path)
    b = mount_factory(stub, "desktop")
    wait_until(lambda: (b / "Documents" / "pending.txt").exists()
               and (b / "Documents" / "pending.txt").read_text() == "pending at unmount\n", what="pending upload")


# 3. Flaky links and 4. corruption ------------------------------------------------------------------------

def test_transfers_survive_cut_connections_and_errors(big_remote, mount_factory):
    stub, src = big_remote
    m = mount_factory(stub)
    stub.faults(dropAfterBytes=3_000_000, count=2)
    assert sha(m / "Documents" / "big.bin") == sha(src / "big.bin")
    stub.faults(failNext=3, status=503)
    (m / "Documents" / "up.bin").write_bytes(os.urandom(300_000))
    wait_until(lambda: attr(m / "Documents" / "up.bin", "isUploaded") == "1", timeout=40, what="upload after 503s")


def test_corruption_in_flight_is_never_served(big_remote, mount_factory):
    stub, src = big_remote
    m = mount_factory(stub)
    stub.faults(corruptNext=1)
    assert sha(m / "Documents" / "big.bin") == sha(src / "big.bin")  # the corrupt copy was refetched


def test_corruption_on_the_stub_disk_is_never_served(big_remote, mount_factory):
    stub, src = big_remote
    m = mount_factory(stub, extra=["--download-timeout", "3"])
    blob = stub.data / "blobs" / CONTAINER / sha(src / "small.txt")
    assert blob.exists()
    blob.write_text("SMALL\n")
    p = run("cat", m / "Documents" / "small.txt", check=False)
    assert p.returncode != 0 and "Input/output error" in p.stderr and "SMALL" not in p.stdout
    assert "corrupt" in (attr(m / "Documents" / "small.txt", "downloadingError") or "")


def test_corrupt_local_copy_is_detected_and_fetched_again(big_remote, mount_factory):
    stub, src = big_remote
    m = mount_factory(stub)
    assert sha(m / "Documents" / "small.txt") == sha(src / "small.txt")
    m.unmount()
    content = next(p for p in (m.store / "content").iterdir() if p.read_text(errors="replace") == "small\n")
    content.write_text("smell\n")
    p = run(BIN, "check", "--store", m.store, check=False)
    assert p.returncode != 0 and "corrupt" in p.stdout
    run(BIN, "check", "--store", m.store, "--repair")
    check_store(m)
    m.mount()
    assert (m / "Documents" / "small.txt").read_text() == "small\n"


def test_missing_or_torn_database_gets_a_clear_error(stub, mount_factory):
    m = mount_factory(stub)
    m.unmount()
    (m.store / "state.sqlite").write_bytes(b"this is not a database" * 100)
    for extra in ("state.sqlite-wal", "state.sqlite-shm"):
        if (m.store / extra).exists():
            (m.store / extra).unlink()
    p = run(*m.args(), check=False, timeout=60)
    assert p.returncode != 0
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "move the store aside" in lines[0], p.stderr


# 5. A full disk ------------------------------------------------------------------------------------------

def test_full_store_gives_enospc_and_recovers(big_remote, mount_factory, tmp_path):
    stub, src = big_remote
    with small_disk_at(tmp_path, 6) as small:
        m = mount_with_store_on(mount_factory, stub, small)
        keep = os.urandom(1 << 20)
        (m / "Documents" / "keep.bin").write_bytes(keep)
        with pytest.raises(OSError) as e:
            (m / "Documents" / "huge.bin").write_bytes(os.urandom(8 << 20))
        assert e.value.errno == errno.ENOSPC
        p = run("cat", m / "Documents" / "big.bin", check=False)
        assert p.returncode != 0
        assert "space" in (attr(m / "Documents" / "big.bin", "downloadingError") or "")
        assert (m / "Documents" / "keep.bin").read_bytes() == keep
        os.unlink(m / "Documents" / "huge.bin")
        (m / "Documents" / "after.txt").write_text("space again\n")
        assert (m / "Documents" / "after.txt").read_text() == "space again\n"
        run(BIN, "sync", "--wait", "--timeout", "30", m.path)
        m.unmount()


# 7. Bad input --------------------------------------------------------------------------------------------

def test_hostile_names_and_odd_requests(stub, mount_factory):
    m = mount_factory(stub)
    d = m / "Documents"
    with pytest.raises(OSError) as e:
        (d / ("x" * 256)).write_text("too long")
    assert e.value.errno == errno.ENAMETOOLONG
    ok = d / ("y" * 255)
    ok.write_text("longest name")
    # Names that differ only by normalisation or case are distinct (no folding).
    (d / "caf\u00e9.txt").write_text("nfc")
    (d / "cafe\u0301.txt").write_text("nfd")
    (d / "Case.txt").write_text("upper")
    (d / "case.txt").write_text("lower")
    assert len(os.listdir(d)) == 5
    os.mkdir(d / "outer")
    os.mkdir(d / "outer" / "inner")
    with pytest.raises(OSError) as e:
        os.rename(d / "outer", d / "outer" / "inner" / "x")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        os.setxattr(d / "Case.txt", "user.big", b"v" * (70 * 1024))
    assert e.value.errno in (errno.E2BIG, errno.ENOSPC, errno.ERANGE)
    with pytest.raises(OSError) as e:
        os.rmdir(d / "outer")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as e:
        os.mkdir(m.path / ".versions")
    assert e.value.errno == errno.EEXIST
    fd = os.open(d / "Case.txt", os.O_RDWR | os.O_APPEND | os.O_SYNC)
    os.write(fd, b"+")
    os.close(fd)
    assert (d / "Case.txt").read_text() == "upper+"
    # Nothing else changed.
    assert (d / "case.txt").read_text() == "lower" and ok.read_text() == "longest name"


def test_file_deleted_on_the_remote_meanwhile(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    (a / "Documents" / "gone.txt").write_text("soon gone\n")
    wait_until(lambda: (b / "Documents" / "gone.txt").exists(), what="file on b")
    run("rm", a / "Documents" / "gone.txt")
    wait_until(lambda: not (b / "Documents" / "gone.txt").exists(), what="delete on b")
    p = run("cat", b / "Documents" / "gone.txt", check=False)
    assert p.returncode != 0 and "No such file" in p.stderr


# 8. The stub's doors -------------------------------------------------------------------------------------

def test_stub_survives_a_bounded_fuzz(stub):
    import http.client
    rng = random.Random(7)
    token = stub.token_file.read_text().strip()
    methods = ["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"]
    paths = ["/v1/containers/", "/v1/containers/iCloud.a.b/items/", "/v1/containers/iCloud.a.b/blobs/",
             "/v1/containers/iCloud.a.b/changes?since=", "/v1/stats", "/v1/faults", "/", "/v1/../../etc/passwd"]
    deadline = time.monotonic() + 15
    count = 0
    while time.monotonic() < deadline and count < 3000:
        path = rng.choice(paths) + "".join(rng.choice("ab%/.._-\\x00é9") for _ in range(rng.randint(0, 20)))
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        headers = {"Authorization": "Bearer " + (token if rng.random() < 0.7 else "x" * rng.randint(0, 80))}
        if rng.random() < 0.3:
            headers["If-Match"] = rng.choice(["1", "-5", "abc", '"7"', "9" * 30])
        conn = http.client.HTTPConnection("127.0.0.1", stub.port, timeout=10)
        try:
            conn.request(rng.choice(methods), path.replace(" ", "%20"), body=body, headers=headers)
            status = conn.getresponse().status
            assert status < 500 or status == 503, (path, status)
        except (http.client.HTTPException, ConnectionError, UnicodeEncodeError):
            pass
        finally:
            conn.close()
        count += 1
    # Oversized headers are refused (or the connection closed), never crash the stub.
    conn = http.client.HTTPConnection("127.0.0.1", stub.port, timeout=10)
    try:
        conn.request("GET", "/v1/stats", headers={"Authorization": "Bearer " + token, "X-Big": "b" * 200_000})
        assert conn.getresponse().status in (400, 413, 431)
    except (http.client.HTTPException, ConnectionError):
        pass
    finally:
        conn.close()
    # It listens on loopback only.
    listening = [l.split()[1] for l in Path("/proc/net/tcp").read_text().splitlines()[1:] if l.split()[3] == "0A"]
    assert f"0100007F:{stub.port:04X}" in listening
    assert stub.proc.poll() is None, "the stub died under fuzzing"
    assert stub.request("GET", "/v1/health", auth=False)["ok"] is True
    print(f"fuzzed the stub with {count} requests")


# 9. fsx-style random I/O against a reference file --------------------------------------------------------

def test_fsx_random_io_matches_a_reference(stub, mount_factory, tmp_path):
    m = mount_factory(stub)
    rng = random.Random(99)
    ref_path, path = tmp_path / "ref.bin", m / "Documents" / "fsx.bin"
    ref = os.open(ref_path, os.O_RDWR | os.O_CREAT, 0o644)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    size = 0
    for i in range(2000):
        op = rng.choice(["write", "write", "read", "truncate", "reopen"])
        if op == "write":
            off, n = rng.randint(0, size + 4096), rng.randint(1, 20000)
            data = os.urandom(n)
            assert os.pwrite(fd, data, off) == os.pwrite(ref, data, off) == n
            size = max(size, off + n)
        elif op == "read":
            off, n = rng.randint(0, size + 100), rng.randint(1, 30000)
            assert os.pread(fd, n, off) == os.pread(ref, n, off), f"read mismatch at op {i}"
        elif op == "truncate":
            size = rng.randint(0, size + 5000)
            os.ftruncate(fd, size)
            os.ftruncate(ref, size)
        else:
            os.close(fd)
            fd = os.open(path, os.O_RDWR)
        assert os.fstat(fd).st_size == os.fstat(ref).st_size == size, f"size mismatch at op {i}"
    os.close(fd)
    os.close(ref)
    assert path.read_bytes() == ref_path.read_bytes()
