"""Part 21, point 1: the server's connection limits never shut honest neighbours out. Connections that have sent
no request with a valid key (strangers) get a short header deadline and a share of their own: past it, the
oldest stranger still owing its header is cut, so a flood of half-sent requests, from one address or from
many, takes no slot an honest client needs. What is counted per address by nobody is counted per device key
and per user. Every limit hit is logged, at most once per 10 s per limit. Each test stops by itself."""
import resource
import socket
import subprocess

import pytest

from conftest import CONTAINER, Stub, curl_auth, run, sync, wait_until


@pytest.fixture
def many_files():
    """Room for a few thousand sockets in this process (the server raises its own limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def half_sent(port, count, source="127.0.0.1"):
    """`count` connections from `source` that each send a request header which never ends."""
    held = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        s.bind((source, 0))
        s.connect_ex(("127.0.0.1", port))
        held.append(s)
    for s in held:
        try:
            s.send(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass  # not accepted yet, or already cut
    return held


def answered(stub, source):
    """Whether an authenticated request from `source` gets its answer within 5 s."""
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "5", "--interface", source,
                          "-X", "PUT", "-H", curl_auth(stub.token), f"{stub.url}/v1/containers/{CONTAINER}"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout in ("200", "201")


def test_half_sent_requests_from_one_address_lock_nobody_on_it_out(tmp_path, mount_factory, many_files):
    stub = Stub(tmp_path / "remote").start()
    held = []
    try:
        m = mount_factory(stub, "laptop", extra=["--download-timeout", "15"])
        doc = m / "Documents" / "evicted.txt"
        doc.write_text("still here\n")
        sync(m)
        run("setfattr", "-n", "user.ubiquity.evict", doc)
        # 1,100 half-sent requests from the address every other client here uses too (before: 4 curls of 4
        # from it got no answer, and the mount's cat of an evicted file waited 23.6 s).
        held = half_sent(stub.port, 1100)
        assert [answered(stub, "127.0.0.1") for _ in range(4)] == [True] * 4
        assert run("cat", doc, timeout=30).stdout == "still here\n"
        log = stub.log_file
        wait_until(lambda: "connections that sent no valid key" in log.read_text(errors="replace"), timeout=15,
                   what="the limit hit in the server's log")
        lines = [line for line in log.read_text(errors="replace").splitlines() if "sent no valid key" in line]
        assert "127.0.0.1" in lines[0]
        assert len(lines) <= 3, "logged at most once per 10 s"
    finally:
        for s in held:
            s.close()
        stub.stop()


def test_slow_connections_from_many_addresses_leave_room_for_a_new_one(tmp_path, many_files):
    stub = Stub(tmp_path / "remote").start()
    held = []
    try:
        # 18 addresses with 128 slow connections each: more than the server's 2,000 in all (before, a client
        # from a fresh address then got no answer).
        for k in range(2, 20):
            held += half_sent(stub.port, 128, source=f"127.0.0.{k}")
        assert answered(stub, "127.0.0.50")
        assert answered(stub, "127.0.0.2"), "an address among the slow ones is answered too"
    finally:
        for s in held:
            s.close()
        stub.stop()


def test_strangers_trickling_bodies_hold_no_connection(tmp_path, many_files):
    """A request without a valid key that announces a body is answered at once and closed: 300 of them, each
    trickling a body of 1 MB, leave room for everyone else (a stranger in a request was never cut)."""
    stub = Stub(tmp_path / "remote").start()
    held = []
    try:
        for k in range(300):
            s = socket.create_connection(("127.0.0.1", stub.port), timeout=10)
            key = f"Authorization: Bearer {'f' * 64}\r\n" if k % 2 else ""  # a wrong key, or none
            s.sendall(f"PUT /v1/containers/{CONTAINER}/blobs/{'0' * 64} HTTP/1.1\r\nHost: x\r\n{key}"
                      "Content-Length: 1000000\r\n\r\nx".encode())
            held.append(s)
        assert answered(stub, "127.0.0.1")
        for s in held[:5]:
            s.settimeout(10)
            assert s.recv(4096).split(b" ")[1] == b"401"
    finally:
        for s in held:
            s.close()
        stub.stop()


def test_one_device_key_holds_a_bounded_number_of_connections(tmp_path):
    """Connections are counted per device key: past its share, a key's new connection is answered 429 with one
    plain line and closed, the limit is logged, and the key is answered again once it gave one back."""
    stub = Stub(tmp_path / "remote", extra=["--connections-per-device", "4"]).start()
    held = []
    request = (f"PUT /v1/containers/{CONTAINER} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
               f"Authorization: Bearer {stub.token}\r\n\r\n").encode()
    try:
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", stub.port), timeout=10)
            s.sendall(request)
            assert s.recv(4096).split(b" ")[1] in (b"200", b"201")
            held.append(s)
        out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "-m", "5", "-X", "PUT", "-H", curl_auth(stub.token),
                              f"{stub.url}/v1/containers/{CONTAINER}"], capture_output=True, text=True, timeout=30)
        body, code = out.stdout.rsplit("\n", 1)
        assert code == "429" and "connections" in body and "\n" not in body.strip(), out.stdout
        wait_until(lambda: "device token of user default" in stub.log_file.read_text(errors="replace"), timeout=15,
                   what="the limit hit in the server's log")
        held.pop().close()
        wait_until(lambda: answered(stub, "127.0.0.1"), timeout=10, what="a connection given back")
    finally:
        for s in held:
            s.close()
        stub.stop()
