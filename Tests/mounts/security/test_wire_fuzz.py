"""Part 15: a bounded fuzzer of the wire. For 30 s on each backend (embedded; PostgreSQL and SeaweedFS) it
sends a real `remote serve` random requests (routes of the wire and made-up ones, random methods, headers, ids,
JSON and bytes, wrong lengths, bad keys, garbage on raw sockets) while two mounted devices of the container work
as usual. Then: no answer was a 5xx, the server still answers, both devices' trees are identical, and both
stores check sound. The seed is printed; UBIQUITY_FUZZ_SEED replays one, UBIQUITY_FUZZ_SECONDS sets the length
(at most 180)."""
import hashlib
import http.client
import json
import os
import random
import socket
import time
import urllib.parse

import pytest

from conftest import BIN, CONTAINER, run, sync, wait_until

SECONDS = min(180, int(os.environ.get("UBIQUITY_FUZZ_SECONDS", "30")))


def tree(root):
    """Every path below `root` with its kind and, for a file, the SHA-256 of its content."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            found[os.path.relpath(os.path.join(dirpath, name), root)] = "dir"
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return found


class Fuzzer:
    def __init__(self, stub, rng):
        self.host, self.port = "127.0.0.1", stub.port
        self.token = stub.token
        self.rng = rng
        self.statuses = {}
        self.server_errors = []

    def junk(self, n=None):
        n = self.rng.choice([0, 1, 3, 17, 200, 5000]) if n is None else n
        return bytes(self.rng.getrandbits(8) for _ in range(n))

    def word(self):
        r = self.rng
        return r.choice(["root", "documents", "Documents", "x", "", ".", "..", "%2e%2e", "a/b", "é", "\u202e",
                         "k" * r.choice([1, 64, 300]), "%00", CONTAINER, "iCloud.other.app",
                         hashlib.sha256(self.junk(4)).hexdigest(), str(r.randint(-5, 10**20))])

    def item(self):
        r = self.rng
        sha = r.choice([hashlib.sha256(b"").hexdigest(), hashlib.sha256(self.junk(8)).hexdigest(), "", "zz"])
        body = {"id": self.word(), "parent": r.choice(["documents", "root", None, self.word()]),
                "name": r.choice([f"fuzz-{r.randint(0, 30)}.txt", self.word()]),
                "kind": r.choice(["file", "dir", "symlink", "fifo", 7]), "mode": r.choice([0o644, 0o4755, -1, 2**40]),
                "mtime": r.choice([0, -1, 2**62, 1_700_000_000_000_000_000]), "size": r.choice([0, 5, -3]),
                "sha256": sha, "device": self.word(), "xattrs": r.choice([{}, {"user.a": "b"}, {"x" * 300: "y"}]),
                "conflicts": r.choice([[], [{}], "no"])}
        for key in r.sample(list(body), r.randint(0, 3)):
            del body[key]
        return body

    def request(self):
        r = self.rng
        cid = r.choice([CONTAINER, CONTAINER, self.word()])
        path = r.choice([
            "/v1/health", "/v1/stats", "/v1/faults", "/v1/containers", "/v1/usage", f"/v1/containers/{cid}",
            f"/v1/containers/{cid}/changes?since={self.word()}&wait={r.choice([0, 1, 'x', -1])}&limit={self.word()}",
            f"/v1/containers/{cid}/items/{self.word()}", f"/v1/containers/{cid}/blobs/{self.word()}",
            f"/v1/containers/{cid}/kv", f"/v1/containers/{cid}/kv/{self.word()}", f"/v1/containers/{cid}/batch",
            f"/v1/containers/{cid}/delete-data", f"/v1/containers/{cid}/shares", f"/v1/containers/{cid}/shares/remove",
            "/v1/shares", "/v1/shares/leave",
            "/" + self.word(), "/v1/" + self.word() + "/" + self.word(), "*", "/v1/containers/" + "a" * 5000])
        method = r.choice(["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS", "GET", "PUT"])
        headers = {}
        if r.random() < 0.85:
            headers["Authorization"] = "Bearer " + r.choice([self.token] * 6 + ["0" * 64, self.token[:-1], "", "x y"])
        for name in r.sample(["If-Match", "If-None-Match", "X-Change-ID", "X-Device", "Range", "Content-Type"],
                             r.randint(0, 3)):
            headers[name] = r.choice(["*", "1", '"3"', "-1", self.word(), "bytes=0-", "bytes=5-2", "application/json"])
        if path.endswith("/batch"):
            entries = [{"op": r.choice(["put", "delete", "move"]), "id": self.word(), "item": self.item(),
                        "ifMatch": r.choice([None, 0, 1, -1]), "change": self.word()} for _ in range(r.randint(0, 20))]
            body = json.dumps({"entries": entries}).encode()
        elif "/kv/" in path:
            body = json.dumps({"key": self.word(), "value": r.choice([{"string": "v"}, {"int": 3}, "bad", None]),
                               "mtime": 1, "device": "f", "deleted": r.random() < 0.2}).encode()
        elif "/items/" in path:
            body = json.dumps(self.item()).encode()
        elif "/shares" in path:
            body = json.dumps({"folder": r.choice([self.word(), "documents", "root"]), "user": self.word(),
                               "readOnly": r.choice([True, False, "no", None]), "id": self.word()}).encode()
        else:
            body = self.junk()
        if r.random() < 0.1:
            body = self.junk()
        return method, path, headers, body if method in ("PUT", "POST", "PATCH") or r.random() < 0.1 else None

    def send(self):
        method, path, headers, body = self.request()
        c = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            c.putrequest(method, urllib.parse.quote(path, safe="/?=&%*"), skip_accept_encoding=True)
            for k, v in headers.items():
                c.putheader(k, v.encode("utf-8", "surrogateescape"))
            short = False
            if body is not None:
                length = len(body) + self.rng.choice([0, 0, 0, 0, 1, -1]) if len(body) else len(body)
                short = length > len(body)
                c.putheader("Content-Length", str(max(0, length)))
            c.endheaders()
            if body:
                c.send(body)
            if short:
                c.sock.shutdown(socket.SHUT_WR)  # the byte promised never comes: the server sees the end
            status = c.getresponse().status
        except ValueError:
            return  # a header http.client itself will not send
        except (OSError, http.client.HTTPException):
            return  # a connection the server closed (as it should, on a wrong length) is no answer
        finally:
            c.close()
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status >= 500:
            self.server_errors.append((status, method, path, headers, body[:200] if body else body))

    def garbage(self):
        """Bytes no HTTP parser should take, on a raw socket."""
        r = self.rng
        text = r.choice([b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x02\x00", b"GET /v1/health HTTP/9.9\r\n\r\n",
                         b"PUT /v1/containers/" + CONTAINER.encode() + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
                         b"GET /v1/health HTTP/1.1\r\n" + b"X: " + b"a" * 20000 + b"\r\n\r\n", self.junk(300)])
        try:
            with socket.create_connection((self.host, self.port), timeout=5) as s:
                s.sendall(text)
                s.shutdown(socket.SHUT_WR)
                answer = s.recv(64)
        except OSError:
            return
        # 505 is the one right answer to HTTP/9.9 (RFC 9110, 15.6.6): a refusal of the request, not a failure.
        if answer.startswith(b"HTTP/1.") and answer[9:10] == b"5" and not answer.startswith(b"HTTP/1.1 505"):
            self.server_errors.append(("raw", text[:80], answer))


@pytest.fixture(params=["embedded", "engines"])
def fuzzed(request, stub_factory):
    if request.param == "embedded":
        return stub_factory()
    pg_url, seaweedfs = request.getfixturevalue("pg_url"), request.getfixturevalue("seaweedfs")
    return stub_factory(metadata=pg_url, extra=seaweedfs.stub_args(f"fuzz-{os.getpid()}-{random.randrange(1 << 30)}"))


def test_random_requests_break_nothing(fuzzed, mount_factory):
    stub = fuzzed
    seed = int(os.environ.get("UBIQUITY_FUZZ_SEED", str(random.randrange(1 << 32))))
    print(f"fuzz seed {seed} ({SECONDS} s): UBIQUITY_FUZZ_SEED={seed} replays it")
    rng = random.Random(seed)
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    fuzzer = Fuzzer(stub, rng)
    deadline = time.monotonic() + SECONDS
    n = 0
    while time.monotonic() < deadline:
        fuzzer.garbage() if rng.random() < 0.05 else fuzzer.send()
        n += 1
        if n % 50 == 0:  # the devices work as usual meanwhile
            device = rng.choice([a, b])
            (device / "Documents" / f"work-{n % 7}.txt").write_text(f"edit {n} on {device.device}\n")
    print(f"{n} requests, statuses {sorted(fuzzer.statuses.items())}")
    assert not fuzzer.server_errors, fuzzer.server_errors[:5]
    assert sum(fuzzer.statuses.values()) > n / 2, "most requests got an answer"
    assert stub.request("GET", "/v1/health", auth=False) == {"ok": True}
    sync(a, timeout=120)
    sync(b, timeout=120)
    wait_until(lambda: tree(a.path) == tree(b.path), timeout=90, interval=1, what="both trees identical")
    for m in (a, b):
        m.unmount()
        p = run(BIN, "check", "--store", m.store, check=False, timeout=120)
        assert p.returncode == 0 and "the store is sound" in p.stdout, p.stdout + p.stderr
