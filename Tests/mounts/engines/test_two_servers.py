"""Part 12: two `remote serve` processes on one PostgreSQL database and one SeaweedFS bucket (both real), one
token (--token-file), each with a --data directory of its own.

Mount A names both servers (`--remote URL1,URL2`), mount B only the second. The server A uses is killed with
SIGKILL while A's uploads (a few hundred small files and a 20 MiB one) are under way: A carries on with the
other server, and the whole tree arrives byte-exact on B, with no conflict version and every status attribute
settled. Then a change made on B reaches A, which now talks to the second server.
"""
import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import PAST_VERSION, Stub, attr, sync, wait_until

SMALL = 300


class SharedTokenStub(Stub):
    """A stub whose token is in a file shared with other servers (`--token-file`), not in its DATA/token."""

    def __init__(self, data: Path, token_file: Path, **kw):
        super().__init__(data, **kw)
        self.shared_token = token_file
        self.extra += ["--token-file", str(token_file)]

    @property
    def token_file(self):
        return self.shared_token


class Remote:
    """What a Mount needs of a remote: its URL(s) and token file."""

    def __init__(self, url, token_file):
        self.url = url
        self.token_file = token_file


@pytest.fixture
def servers(tmp_path, pg_url, seaweedfs):
    """Two servers on one database and one bucket prefix, sharing one token, each with its own --data."""
    prefix = "two-servers-" + os.urandom(4).hex()
    token = tmp_path / "shared" / "token"
    token.parent.mkdir()
    stubs = [SharedTokenStub(tmp_path / name, token, metadata=pg_url, extra=seaweedfs.stub_args(prefix))
             for name in ("server1", "server2")]
    try:
        yield [s.start() for s in stubs]
    finally:
        for s in stubs:
            s.stop()


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tree(root: Path):
    """Every file under root: relative path -> SHA-256."""
    return {str(p.relative_to(root)): sha(p) for p in sorted(root.rglob("*")) if p.is_file()}


def settled(m, rels):
    return all(attr(m / "Documents" / r, "isUploaded") == "1" and attr(m / "Documents" / r, "isUploading") == "0"
               for r in rels)


def conflict_versions(m):
    versions = m.path / ".versions"
    return [p for p in versions.rglob("*") if p.is_file() and not PAST_VERSION.search(p.name)] if versions.exists() else []


def write_uploads(docs: Path):
    """Half the small files, the big one, then the other half (so uploads are still queued when the kill comes),
    a file every 10 ms: a steady stream of about 3 s, longer than the pusher gathers one (2 s), so the first
    batch goes up while the writer is still writing."""
    (docs / "many").mkdir()
    for i in range(SMALL):
        if i == SMALL // 2:
            (docs / "big.bin").write_bytes(os.urandom(20 << 20))
        (docs / "many" / f"f{i:03}.txt").write_text(f"small file {i}\n" * (i % 7 + 1))
        time.sleep(0.01)


def test_kill_9_of_the_server_in_use_mid_upload_loses_nothing(servers, mount_factory):
    one, two = servers
    a = mount_factory(Remote(f"{one.url},{two.url}", one.token_file), "laptop")
    b = mount_factory(two, "desktop")
    docs = a / "Documents"
    before = one.stats()["itemPuts"]
    writer = threading.Thread(target=write_uploads, args=(docs,))
    writer.start()
    try:
        wait_until(lambda: one.stats()["itemPuts"] >= before + 20, timeout=60, what="uploads under way on server 1")
        pending = writer.is_alive() or not settled(a, ["big.bin", f"many/f{SMALL - 1:03}.txt"])
        puts_on_two = two.stats()["itemPuts"]
        one.proc.send_signal(signal.SIGKILL)  # the server in use dies in the middle of the uploads
        one.proc.wait()
    finally:
        writer.join()
    assert pending, "the kill came after every upload had finished"
    sync(a, timeout=120)
    want = tree(docs)
    assert len(want) == SMALL + 1
    wait_until(lambda: tree(b / "Documents") == want, timeout=60, what="the whole tree, exact, on b")
    assert settled(a, ["big.bin", "many/f000.txt", f"many/f{SMALL // 2:03}.txt", f"many/f{SMALL - 1:03}.txt"])
    assert settled(b, ["big.bin", "many/f000.txt", f"many/f{SMALL - 1:03}.txt"])
    assert two.stats()["itemPuts"] > puts_on_two  # a's uploads after the kill went to the second server
    log = (a.store / "ubiquityfs.log").read_text()
    assert "stopped answering" in log and f"using {two.url} now" in log
    for m in (a, b):
        assert not conflict_versions(m) and not list((m / "Documents").rglob("*onflict*"))
        assert attr(m / "Documents" / "big.bin", "hasUnresolvedConflicts") == "0"

    # A change on b reaches a, which talks to the second server now.
    (b / "Documents" / "many" / "f007.txt").write_text("changed on the desktop\n")
    (b / "Documents" / "from-b.txt").write_text("written on the desktop\n")
    sync(b)
    wait_until(lambda: (a / "Documents" / "from-b.txt").exists()
               and (a / "Documents" / "many" / "f007.txt").read_text() == "changed on the desktop\n",
               timeout=30, what="b's changes on a")
    assert (a / "Documents" / "from-b.txt").read_text() == "written on the desktop\n"
    wait_until(lambda: tree(a / "Documents") == tree(b / "Documents"), timeout=30, what="one tree on both")
    assert not conflict_versions(a) and not conflict_versions(b)
