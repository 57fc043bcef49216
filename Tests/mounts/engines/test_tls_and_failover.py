"""Part 12: the remote over TLS, a token shared by several servers, and a mount that names several servers and
moves on when the one in use stops answering.

TLS: a self-signed certificate for 127.0.0.1 and localhost, made with the openssl command. Failover: two
embedded stubs cannot share one store, so two small TCP forwarders (FORWARDER, below) stand in front of one stub
as two "servers"; the mount names both, and the one in use is killed with SIGKILL in the middle of uploads.
"""
import hashlib
import os
import re
import signal
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

from conftest import BIN, attr, certificate, run, serve, stop, sync, wait_until

FORWARDER = r'''
import socket, sys, threading
listen_port, target_port, port_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", listen_port))
server.listen(64)
open(port_file + ".tmp", "w").write(str(server.getsockname()[1]))
import os; os.rename(port_file + ".tmp", port_file)

def pump(src, dst):
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

while True:
    client, _ = server.accept()
    try:
        upstream = socket.create_connection(("127.0.0.1", target_port))
    except OSError:
        client.close()
        continue
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
'''


class Remote:
    """What a Mount needs of a remote: its URL(s) and token file."""

    def __init__(self, url, token_file):
        self.url = url
        self.token_file = token_file


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# TLS ------------------------------------------------------------------------------------------------------

def test_tls_with_ca_file_syncs_between_two_mounts(tmp_path, mount_factory):
    cert, key = certificate(tmp_path)
    proc, url = serve(tmp_path / "remote", "--tls-cert", cert, "--tls-key", key)
    try:
        assert url.startswith("https://127.0.0.1:")
        remote = Remote(url, tmp_path / "remote" / "token")
        a = mount_factory(remote, "laptop", extra=["--ca-file", cert])
        b = mount_factory(remote, "desktop", extra=["--ca-file", cert])
        blob = os.urandom(3 << 20)
        (a / "Documents" / "over-tls.bin").write_bytes(blob)
        (a / "Documents" / "note.txt").write_text("sent over HTTPS\n")
        sync(a)
        wait_until(lambda: (b / "Documents" / "note.txt").exists(), timeout=30, what="the note on b")
        assert (b / "Documents" / "note.txt").read_text() == "sent over HTTPS\n"
        assert (b / "Documents" / "over-tls.bin").read_bytes() == blob
        # Plain HTTP to the HTTPS server gets nothing.
        with_http = url.replace("https://", "http://")
        p = run("curl", "-sS", "-m", "5", with_http + "/v1/health", check=False)
        assert p.returncode != 0
    finally:
        stop(proc)


def test_mount_without_the_ca_or_with_the_wrong_one_fails_plainly(tmp_path, mount_factory):
    cert, key = certificate(tmp_path)
    other, _ = certificate(tmp_path, "other")
    proc, url = serve(tmp_path / "remote", "--tls-cert", cert, "--tls-key", key)
    try:
        remote = Remote(url, tmp_path / "remote" / "token")
        for name, extra in [("no-ca", []), ("wrong-ca", ["--ca-file", other])]:
            m = mount_factory(remote, name, extra=extra, mount=False)
            p = run(*m.args(), check=False, timeout=60)
            assert p.returncode != 0, name
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1, p.stderr
            assert "certificate" in lines[0] and "not trusted" in lines[0], lines[0]
            assert url in lines[0]
            assert not m.is_mounted()
    finally:
        stop(proc)


def test_host_name_is_verified(tmp_path, mount_factory):
    cert, key = certificate(tmp_path, "elsewhere", names="DNS:elsewhere.example")
    proc, url = serve(tmp_path / "remote", "--tls-cert", cert, "--tls-key", key)
    try:
        m = mount_factory(Remote(url, tmp_path / "remote" / "token"), "laptop", extra=["--ca-file", cert],
                          mount=False)
        p = run(*m.args(), check=False, timeout=60)
        assert p.returncode != 0 and "not trusted" in p.stderr and "host name" in p.stderr, p.stderr
        assert not m.is_mounted()
    finally:
        stop(proc)


def test_plain_http_beyond_loopback_is_refused_in_one_line(tmp_path):
    data = tmp_path / "remote"
    p = run(BIN, "remote", "serve", "--data", data, "--listen", "0.0.0.0:0", check=False, timeout=20)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "plain HTTP" in lines[0] and "0.0.0.0" in lines[0] and "--tls-cert" in lines[0], p.stderr
    assert not data.exists()  # refused before anything was made
    p = run(BIN, "remote", "serve", "--data", data, "--tls-cert", tmp_path / "missing.crt", check=False)
    assert p.returncode == 2 and "--tls-key" in p.stderr


# One token, several servers ---------------------------------------------------------------------------------

def authorized_status(url, token):
    """The status of a request that needs the token (a wrong one gets 401): making a container."""
    req = urllib.request.Request(url + "/v1/containers/iCloud.com.example.shared", method="PUT",
                                 headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def test_token_file_is_made_0600_and_shared_by_two_servers(tmp_path):
    token_file = tmp_path / "shared" / "token"
    token_file.parent.mkdir()
    procs = []
    try:
        for name in ("one", "two"):
            procs.append(serve(tmp_path / name, "--token-file", token_file))
        token = token_file.read_text().strip()
        assert re.fullmatch(r"[0-9a-f]{64}", token)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert [authorized_status(url, token) for _, url in procs] == [200, 200]
        assert not (tmp_path / "one" / "token").exists() and not (tmp_path / "two" / "token").exists()
        assert os.listdir(token_file.parent) == ["token"]  # nothing left aside
        assert f"token in {token_file}" in (tmp_path / "one" / "stub.log").read_text()
    finally:
        for proc, _ in procs:
            stop(proc)


# Several servers: failover ----------------------------------------------------------------------------------

class Forwarder:
    def __init__(self, directory: Path, name, target_port):
        self.script = directory / "forwarder.py"
        self.script.write_text(FORWARDER)
        self.port_file = directory / f"{name}.port"
        self.target_port = target_port
        self.port = 0
        self.proc = None

    def start(self):
        if self.port_file.exists():
            self.port_file.unlink()
        self.proc = subprocess.Popen([sys.executable, self.script, str(self.port), str(self.target_port),
                                      self.port_file])
        wait_until(self.port_file.exists, timeout=10, what="forwarder port")
        self.port = int(self.port_file.read_text())
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def tree(root: Path):
    """Every file under root: relative path -> SHA-256."""
    return {str(p.relative_to(root)): sha(p) for p in sorted(root.rglob("*")) if p.is_file()}


def settled(m, files):
    return all(attr(m / "Documents" / f, "isUploaded") == "1" and attr(m / "Documents" / f, "isUploading") == "0"
               for f in files)


def test_mount_moves_on_when_the_server_in_use_dies_mid_upload(tmp_path, stub, mount_factory):
    first = Forwarder(tmp_path, "first", stub.port).start()
    second = Forwarder(tmp_path, "second", stub.port).start()
    try:
        a = mount_factory(Remote(f"{first.url},{second.url}", stub.token_file), "laptop")
        b = mount_factory(stub, "desktop")
        docs = a / "Documents"
        # Counted before the writes: the small files may go up in one batch before the big file is written.
        before = stub.stats()["itemPuts"]
        (docs / "many").mkdir()
        for i in range(300):
            (docs / "many" / f"f{i:03}.txt").write_text(f"small file {i}\n" * (i % 7 + 1))
        (docs / "big.bin").write_bytes(os.urandom(20 << 20))
        wait_until(lambda: stub.stats()["itemPuts"] >= before + 20, timeout=60, what="uploads under way")
        first.kill()  # the server in use goes away in the middle of the uploads
        sync(a, timeout=120)
        want = tree(docs)
        assert len(want) == 301
        wait_until(lambda: tree(b / "Documents") == want, timeout=60, what="everything on the second mount")
        assert settled(a, ["big.bin", "many/f000.txt", "many/f299.txt"])
        log = (a.store / "ubiquityfs.log").read_text()
        assert "stopped answering" in log and f"using {second.url} now" in log

        # Round again: the first comes back and the second goes away.
        first.start()
        second.kill()
        (docs / "after.txt").write_text("through the first again\n")
        sync(a, timeout=60)
        wait_until(lambda: (b / "Documents" / "after.txt").exists(), timeout=30, what="after.txt on b")
        assert (b / "Documents" / "after.txt").read_text() == "through the first again\n"
        assert f"using {first.url} now" in (a.store / "ubiquityfs.log").read_text()
        assert tree(b / "Documents") == tree(docs)
        assert not list((b / "Documents").rglob("*onflict*"))
    finally:
        for f in (first, second):
            if f.proc and f.proc.poll() is None:
                f.kill()
