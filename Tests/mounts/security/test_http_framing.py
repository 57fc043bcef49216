"""Part 21 point 6: requests whose length two parsers could read two ways (the ground of request smuggling
behind a proxy) are refused with 400 and their connection closed, so nothing after them is read as a request.
What libmicrohttpd 0.9.75 (Debian 12's) itself accepts is pinned here too: see the README's Security section."""
import socket

import pytest

HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
LAST = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def exchange(stub, raw):
    """Sends `raw` on one connection; the status lines of every answer until the server closes or goes quiet."""
    host, port = stub.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(raw)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except socket.timeout:
            pass
    return [line.decode() for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


@pytest.mark.parametrize("headers", [
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
    b"Content-Length: 5\r\nContent-Length: 6\r\n",
])
def test_a_request_of_two_lengths_is_refused_and_nothing_after_it_is_read(stub, headers):
    # Before Part 21 the first two and the third were answered 200 (libmicrohttpd read the chunked body).
    smuggled = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n0\r\n\r\n" + LAST
    assert exchange(stub, smuggled) == ["HTTP/1.1 400 Bad Request"]


def test_plain_and_chunked_requests_still_go_through(stub):
    assert exchange(stub, LAST) == ["HTTP/1.1 200 OK"]
    chunked = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"
    assert exchange(stub, chunked) == ["HTTP/1.1 200 OK"]
