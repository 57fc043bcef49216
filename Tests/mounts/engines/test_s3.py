"""Part 12: the remote stub with its blobs in S3 (`remote serve --blobs s3://...`) on a real SeaweedFS gateway.

Content written on one mount reads on another; a big file arrives byte-exact though its download is cut and
resumed with a range; an S3 outage while uploads run shows its cause in the status attributes and ends, once
the gateway is back, with every file exact on another device; unreferenced blobs leave the bucket after the
grace period while the blobs in use stay. The gateway itself (scripts/seaweedfs) listens on 127.0.0.1 only and
refuses anonymous requests.
"""
import hashlib
import os
import shutil

import pytest

from conftest import CONTAINER, attr, read, run, sync, wait_until


def sha(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def s3_stub(seaweedfs, stub_factory, request):
    """A stub whose blobs are in the session's bucket, under a prefix of this test's own."""
    prefix = "it-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12] + "-" + os.urandom(3).hex()
    stub = stub_factory("remote", extra=seaweedfs.stub_args(prefix))
    stub.prefix = prefix
    return stub


def test_content_written_on_one_mount_reads_on_another(seaweedfs, s3_stub, mount_factory):
    a, b = mount_factory(s3_stub, "laptop"), mount_factory(s3_stub, "desktop")
    (a / "Documents" / "note.txt").write_text("kept in S3\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "note.txt").read_text() == "kept in S3\n", what="note on desktop")
    # The bytes are in the bucket, not in the stub's data directory.
    assert f"{s3_stub.prefix}/blobs/{CONTAINER}/{sha(b'kept in S3' + bytes([10]))}" in seaweedfs.keys(s3_stub.prefix)
    assert not list((s3_stub.data / "blobs").rglob("*.*")) and not (s3_stub.data / "blobs" / CONTAINER).exists()


def test_big_file_is_byte_exact_through_a_cut_and_resumed_download(s3_stub, mount_factory, tmp_path):
    data = os.urandom(50 << 20)
    a = mount_factory(s3_stub, "laptop")
    (a / "Documents" / "big.bin").write_bytes(data)
    sync(a, timeout=120)
    # Serve the download from the bucket, not from the copy the upload left in the stub's cache.
    shutil.rmtree(s3_stub.data / "blobcache" / CONTAINER)
    s3_stub.faults(dropAfterBytes=20_000_000, count=1)
    gets = s3_stub.blob_gets()
    b = mount_factory(s3_stub, "desktop")
    assert sha(read(b / "Documents" / "big.bin")) == sha(data)
    assert s3_stub.blob_gets() >= gets + 2  # the cut one and the resumed one
    with open(b / "Documents" / "big.bin", "rb") as f:
        f.seek(33_333_333)
        assert f.read(1_000_000) == data[33_333_333:34_333_333]


def test_an_s3_outage_during_uploads_loses_nothing_and_shows_its_cause(seaweedfs, s3_stub, mount_factory):
    a = mount_factory(s3_stub, "laptop")
    files = {f"f{i}.bin": os.urandom((3 << 20) + i) for i in range(4)}
    try:
        for name, data in files.items():
            (a / "Documents" / name).write_bytes(data)
        seaweedfs.stop()  # while those uploads run or wait
        late = {f"late{i}.txt": f"written during the outage {i}\n".encode() for i in range(3)}
        for name, data in late.items():
            (a / "Documents" / name).write_bytes(data)
        files.update(late)
        # The pusher retries whichever upload it is on: that file's status names the blob store as the cause.
        wait_until(lambda: any("blob store" in (attr(a / "Documents" / name, "uploadingError") or "") for name in files),
                   timeout=60, what="the S3 outage in uploadingError")
        assert attr(a / "Documents" / "late0.txt", "isUploaded") == "0"
    finally:
        seaweedfs.start()
    sync(a, timeout=120)
    assert all(attr(a / "Documents" / name, "uploadingError") is None for name in files)
    b = mount_factory(s3_stub, "desktop")
    for name, data in files.items():
        wait_until(lambda: (b / "Documents" / name).exists(), what=f"{name} on desktop")
        assert sha(read(b / "Documents" / name)) == sha(data), name


def test_unreferenced_blobs_leave_the_bucket_after_the_grace_period(seaweedfs, stub_factory, mount_factory):
    prefix = "it-collect-" + os.urandom(4).hex()
    stub = stub_factory("remote", extra=[*seaweedfs.stub_args(prefix), "--blob-grace", "3", "--blob-collect-every", "1",
                                         "--keep-versions", "0"])  # (no history keeps the replaced version)
    a = mount_factory(stub)
    doc = a / "Documents" / "doc.txt"
    doc.write_text("the first version\n")
    sync(a)
    doc.write_text("the second version\n")
    sync(a)
    old, new = (f"{prefix}/blobs/{CONTAINER}/{sha(t.encode())}" for t in ("the first version\n", "the second version\n"))
    wait_until(lambda: old not in seaweedfs.keys(prefix), timeout=60, what="the replaced blob collected")
    assert new in seaweedfs.keys(prefix)
    b = mount_factory(stub, "desktop")
    assert (b / "Documents" / "doc.txt").read_text() == "the second version\n"


def test_the_gateway_listens_on_loopback_only_and_refuses_anonymous_access(seaweedfs):
    pid = int((seaweedfs.dir / "pid").read_text())
    sockets = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    listening = []
    # weed's own network namespace (scripts/seaweedfs runs it in one, as root): its tables are its process's.
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and f"socket:[{fields[9]}]" in sockets:  # LISTEN, and weed's
                listening.append(fields[1].split(":")[0])
    assert listening and all(addr == "0100007F" for addr in listening), listening  # 127.0.0.1 only
    p = run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", seaweedfs.endpoint + "/")
    assert p.stdout == "403"
    assert (seaweedfs.credentials.stat().st_mode & 0o077) == 0
