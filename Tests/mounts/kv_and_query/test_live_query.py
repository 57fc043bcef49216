"""Part 10, the live query: `ubiquityfs query` and the daemon's query socket (docs/QUERY.md).

A query gathers every matching item, says so, and with --live follows local changes, remote changes and
transfer progress in batches; a client that stops reading is dropped without slowing the mount.
"""
import json
import os
import queue
import socket
import stat
import subprocess
import tarfile
import threading
import time

from conftest import BIN, attr, run, sync, wait_until


class Query:
    """A `ubiquityfs query --json` process whose lines a thread reads as they come."""

    def __init__(self, m, *args):
        self.proc = subprocess.Popen([BIN, "query", str(m.path), "--json", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.batches = []

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout=30):
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"the query ended: {self.proc.stderr.read()}"
        return line

    def gathered(self):
        """The items of the gathering, by path."""
        items = {}
        while True:
            line = self.next()
            if "gathered" in line:
                assert line["count"] == len(items)
                return items
            items[line["item"]["path"]] = line["item"]

    def batch(self, timeout=30):
        line = self.next(timeout)
        assert "batch" in line, line
        self.batches.append(line["batch"])
        return line["batch"]

    def until(self, predicate, timeout=60, what="batch"):
        """Reads batches until `predicate(batch)` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            b = self.batch(timeout=max(0.1, deadline - time.monotonic()))
            if predicate(b):
                return b
        raise AssertionError(f"no {what} within {timeout}s")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def paths(items):
    return {i["path"] for i in items}


def test_a_query_on_b_sees_a_file_from_a_added_downloading_and_removed(stub_factory, mount_factory):
    stub = stub_factory(bandwidth=2_000_000)
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    q = Query(b, "--live")
    try:
        assert "Documents/big.bin" not in q.gathered()
        (a / "Documents" / "big.bin").write_bytes(os.urandom(6 << 20))
        added = q.until(lambda b_: "Documents/big.bin" in paths(b_["added"]), what="the file added")
        item = next(i for i in added["added"] if i["path"] == "Documents/big.bin")
        assert item["size"] == 6 << 20 and item["kind"] == "file"
        assert item["status"]["downloadingStatus"] == "notDownloaded"
        reader = subprocess.Popen(["cat", str(b / "Documents" / "big.bin")], stdout=subprocess.DEVNULL)
        seen = []

        def progress(batch):
            for i in batch["changed"]:
                if i["path"] == "Documents/big.bin":
                    s = i["status"]
                    if s["isDownloading"]:
                        seen.append(s["percentDownloaded"])
                    if s["downloadingStatus"] == "current":
                        return True
            return False
        q.until(progress, what="the download finished")
        assert reader.wait(30) == 0
        assert len(set(seen)) >= 3 and seen == sorted(seen), seen
        os.unlink(a / "Documents" / "big.bin")
        removed = q.until(lambda b_: b_["removed"], what="the file removed")
        assert paths(removed["removed"]) == {"Documents/big.bin"}
    finally:
        q.stop()


def test_gathering_holds_the_name_and_scope_filters(two):
    _, a, b = two
    (a / "Documents" / "notes.txt").write_text("n")
    (a / "Documents" / "photo.jpg").write_text("p")
    (a / "Documents" / "sub").mkdir()
    (a / "Documents" / "sub" / "deep.txt").write_text("d")
    (a / "settings.txt").write_text("s")  # outside Documents: the data scope
    sync(a)
    wait_until(lambda: (b / "settings.txt").exists() and (b / "Documents" / "sub" / "deep.txt").exists())

    def gather(*args):
        q = Query(b, *args)
        try:
            return set(q.gathered())
        finally:
            q.stop()
    assert gather("--name", "*.txt") == {"Documents/notes.txt", "Documents/sub/deep.txt", "settings.txt"}
    assert gather("--name", "*.txt", "--scope", "documents") == {"Documents/notes.txt", "Documents/sub/deep.txt"}
    assert gather("--scope", "data") == {"settings.txt"}
    q = Query(b, "--scope", "documents")
    try:  # depth first in name order
        assert list(q.gathered()) == ["Documents/notes.txt", "Documents/photo.jpg", "Documents/sub",
                                      "Documents/sub/deep.txt"]
    finally:
        q.stop()
    # The table a person reads, and a query without --live ends after the gathering.
    out = run(BIN, "query", b.path, "--name", "*.jpg").stdout
    assert out.splitlines()[0].startswith("Documents/photo.jpg  1B  (")
    assert out.splitlines()[-1] == "-- gathering finished (1 items)"
    sock = attr(b.path, "querySocket")
    assert sock == str(b.store / "query.sock")
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600


def test_a_folder_moved_out_of_documents_takes_its_items_out_of_the_scope(stub, mount_factory):
    m = mount_factory(stub)
    (m / "Documents" / "sub").mkdir()
    (m / "Documents" / "sub" / "deep.txt").write_text("deep")
    sync(m)  # nothing of deep.txt itself changes from here until the write
    docs, everything = Query(m, "--live", "--scope", "documents"), Query(m, "--live")
    try:
        assert set(docs.gathered()) == {"Documents/sub", "Documents/sub/deep.txt"}
        assert "Documents/sub/deep.txt" in everything.gathered()
        os.rename(m / "Documents" / "sub", m / "moved")
        gone = set()
        docs.until(lambda b_: gone.update(paths(b_["removed"])) or gone == {"Documents/sub", "Documents/sub/deep.txt"},
                   what="both removed from the documents scope")
        moved = set()
        everything.until(lambda b_: moved.update(paths(b_["changed"])) or {"moved", "moved/deep.txt"} <= moved,
                         what="both changed to their new paths")
        with open(m / "moved" / "deep.txt", "a") as f:
            f.write(" and more")
        everything.until(lambda b_: any(i["path"] == "moved/deep.txt" and i["size"] == len("deep and more")
                                        for i in b_["changed"]), what="the write's new size")
    finally:
        docs.stop()
        everything.stop()


def test_ten_thousand_creates_arrive_in_a_few_batches(stub, mount_factory, tmp_path):
    m = mount_factory(stub)
    src = tmp_path / "many"
    src.mkdir()
    for n in range(10_000):
        (src / f"f{n:05}.txt").touch()
    with tarfile.open(tmp_path / "many.tar", "w") as t:
        t.add(src, arcname="many")
    q = Query(m, "--live")
    try:
        q.gathered()
        run("tar", "xf", tmp_path / "many.tar", "-C", m / "Documents", timeout=300)
        added = set()

        def all_added(batch):
            added.update(paths(batch["added"]))
            return len(added) == 10_001
        q.until(all_added, timeout=120, what="10,000 files added")
        assert added == {"Documents/many"} | {f"Documents/many/f{n:05}.txt" for n in range(10_000)}
        print(f"10,000 creates: {len(q.batches)} batches")
        # One batch per 250 ms that brought changes: tar would have to take 50 s to pass this.
        assert len(q.batches) <= 200, len(q.batches)
    finally:
        q.stop()


def test_a_client_that_stops_reading_does_not_block_the_mount(stub, mount_factory):
    m = mount_factory(stub)
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.connect(attr(m.path, "querySocket"))
    stuck.sendall(json.dumps({"scope": "all", "live": True}).encode() + b"\n")  # and never reads
    q = Query(m, "--live")
    try:
        q.gathered()
        stem = "x" * 200
        # Far past what the stuck client's socket and its backlog (QueryServer.backlogLimit) hold, in batches
        # that keep coming after that: with 2,000 files the output sometimes fitted, and no later batch came to
        # find the client behind.
        run("python3", "-c", f"""
import os
for n in range(5000):
    open(os.path.join({str(m / 'Documents')!r}, '{stem}%04d' % n), 'w').close()
""", timeout=120)
        added = set()

        def all_added(batch):
            added.update(paths(batch["added"]))
            return len(added) == 5000
        q.until(all_added, what="5,000 files added")
    finally:
        q.stop()
    # The stuck client was told it fell behind, and dropped.
    stuck.settimeout(30)
    got = b""
    while chunk := stuck.recv(1 << 16):
        got += chunk
    lines = got.decode().splitlines()
    assert lines[-1] == '{"fellBehind":true}'
    assert all(json.loads(line) for line in lines)  # lines stay whole
