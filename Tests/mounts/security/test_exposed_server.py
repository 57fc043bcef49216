"""Part 15: the remote as a server exposed to others. Each test drives a real `ubiquityfs remote serve` with
curl, as an attacker holding a token (or none) would."""
import hashlib
import json
import os
import socket
import stat
import subprocess
import time

from conftest import BIN, CONTAINER, certificate, curl_auth, run, serve, stop, Stub, sync, wait_until


def status(stub, method, path, body=None):
    """The HTTP status curl gets for one request with the stub's token."""
    args = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method,
            "-H", curl_auth(stub.token)]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", body]
    return subprocess.run(args + [stub.url + path], capture_output=True, text=True, timeout=30).stdout


def test_the_test_routes_exist_only_with_test_routes(tmp_path):
    plain = Stub(tmp_path / "plain", test_routes=False).start()
    try:
        # Before Part 15 any token holder listed every blob of every container and armed failures of other
        # clients' requests.
        assert status(plain, "GET", "/v1/stats") == "404"
        assert status(plain, "POST", "/v1/faults", '{"failNext": 3, "status": 500}') == "404"
        assert status(plain, "GET", "/v1/health") == "200"
    finally:
        plain.stop()
    bench = Stub(tmp_path / "bench").start()  # the harness asks for them: --test-routes
    try:
        assert status(bench, "GET", "/v1/stats") == "200"
    finally:
        bench.stop()


def raw_request(url, text):
    """Sends `text` as it is over a socket to the stub at `url`; the status code of the answer."""
    host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(text.encode())
        answer = s.recv(4096).decode(errors="replace")
    return answer.split(" ", 2)[1] if answer.startswith("HTTP/") else answer


def test_conflicting_content_lengths_are_refused(tmp_path):
    stub = Stub(tmp_path / "remote").start()
    try:
        body = "{}"
        head = (f"PUT /v1/containers/iCloud.com.example.smuggle HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {stub.token}\r\nContent-Type: application/json\r\n")
        # Before Part 15 this was 201: one parser on the way may take the first length, the server the second.
        assert raw_request(stub.url, head + "Content-Length: 2\r\nContent-Length: 40\r\n\r\n" + body) == "400"
        assert status(stub, "GET", "/v1/containers/iCloud.com.example.smuggle/items/root") == "404"
        # One length, or the same one twice, is a request like any other.
        assert raw_request(stub.url, head + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n" + body) in ("200", "201")
    finally:
        stub.stop()


def test_tls_below_1_2_is_refused(tmp_path):
    cert, key = certificate(tmp_path)
    proc, url = serve(tmp_path / "remote", "--tls-cert", cert, "--tls-key", key)
    try:
        def handshake(*versions):
            return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", cert, *versions,
                                   url + "/v1/health"], capture_output=True, text=True, timeout=30)
        assert handshake("--tlsv1.2").stdout == "200"
        # TLS 1.0 and 1.1 were accepted before Part 15.
        old = handshake("--tlsv1.0", "--tls-max", "1.1")
        assert old.returncode != 0 and old.stdout == "000", old
    finally:
        stop(proc)


def test_a_token_file_others_can_read_or_another_user_owns_is_refused(tmp_path):
    data = tmp_path / "remote"
    data.mkdir()
    token = token_file(data / "token", "0" * 63 + "7", 0o644)
    # The server: before Part 15 it made the file 0600 and served with whatever token it held.
    p = run(BIN, "remote", "serve", "--data", data, check=False, timeout=20)
    assert p.returncode != 0 and "chmod 600" in p.stderr and str(token) in p.stderr, p.stderr
    os.chown(token, 65534, 65534)  # nobody's, who then knows it
    token.chmod(0o600)
    p = run(BIN, "remote", "serve", "--data", data, check=False, timeout=20)
    assert p.returncode != 0 and "another user" in p.stderr, p.stderr
    # The mount: the same file is refused before anything is mounted.
    p = refused_mount(tmp_path, "http://127.0.0.1:9", token)
    assert p.returncode != 0 and "another user" in p.stderr, p.stderr
    assert not os.path.ismount(tmp_path / "mnt")
    # A file of one's own, 0600, with a key made by hand: anyone guesses it.
    os.chown(token, 0, 0)
    p = run(BIN, "remote", "serve", "--data", data, check=False, timeout=20)
    assert p.returncode != 0 and "random key" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def token_file(path, token, mode):
    """A token file holding `token`, with `mode`."""
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


def refused_mount(tmp_path, url, token):
    """`mount` of TMP/mnt on `url` with the token file `token`, which is to be refused: its process."""
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    return run(BIN, "mount", mnt, "--remote", url, "--token-file", token, "--store", tmp_path / "store",
               check=False, timeout=30)


def test_mount_refuses_plain_http_beyond_loopback_in_one_line(tmp_path):
    token = token_file(tmp_path / "token", "1" * 64, 0o600)
    for url in ["http://192.0.2.7:8443", "http://example.com", "http://[2001:db8::1]:80", "http://127.0.0.1.example.com"]:
        p = refused_mount(tmp_path, url, token)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and "plain HTTP" in lines[0] and url in lines[0], p.stderr
    assert not (tmp_path / "store").exists()  # refused before anything was made


def put_blob(stub, data: bytes):
    """curl PUT of a blob; (status, sha)."""
    sha = hashlib.sha256(data).hexdigest()
    p = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT", "-H", "Expect:",
                        "-H", curl_auth(stub.token), "--data-binary", "@-",
                        f"{stub.url}/v1/containers/{CONTAINER}/blobs/{sha}"], input=data, capture_output=True, timeout=30)
    return p.stdout.decode(), sha


def get_blob(stub, sha):
    p = subprocess.run(["curl", "-s", "-H", "Authorization: Bearer " + stub.token,
                        f"{stub.url}/v1/containers/{CONTAINER}/blobs/{sha}"], capture_output=True, timeout=30)
    return p.stdout


def test_a_damaged_blob_is_replaced_by_the_right_bytes_uploaded_again(tmp_path):
    stub = Stub(tmp_path / "remote").start()
    try:
        assert status(stub, "PUT", f"/v1/containers/{CONTAINER}") in ("200", "201")
        data = os.urandom(100_000)
        code, sha = put_blob(stub, data)
        assert code in ("200", "201")
        stored = tmp_path / "remote" / "blobs" / CONTAINER / sha
        damaged = bytearray(stored.read_bytes())
        damaged[5000] ^= 0xFF
        stored.write_bytes(bytes(damaged))  # a bit turned on the disk
        # Before Part 15: "200, already there", and the damaged bytes stayed (and were served).
        code, _ = put_blob(stub, data)
        assert code in ("200", "201")
        assert hashlib.sha256(get_blob(stub, sha)).hexdigest() == sha
        assert stored.read_bytes() == data
        assert "damaged" in stub.log_file.read_text()
    finally:
        stub.stop()


def test_setuid_setgid_and_sticky_never_travel(stub, mount_factory, tmp_path):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    tool, shared = a / "Documents" / "tool", a / "Documents" / "shared"
    tool.write_text("#!/bin/sh\necho hi\n")
    shared.mkdir()
    run("chmod", "6755", tool)
    run("chmod", "1777", shared)
    sync(a)
    wait_until(lambda: (b / "Documents" / "tool").exists() and (b / "Documents" / "shared").exists(), timeout=30,
               what="both on b")
    # Before Part 15 b showed -rwsr-sr-x, and `cp -a` of it by root made a setuid file outside the mount.
    wait_until(lambda: run("stat", "-c", "%a", b / "Documents" / "tool").stdout.strip() == "755", timeout=30,
               what="the tool's mode on b")
    # (Without its group and world write bits where b's umask takes them: test_local_files.)
    mask = os.umask(0)
    os.umask(mask)
    assert run("stat", "-c", "%a", b / "Documents" / "shared").stdout.strip() == format(0o777 & ~(mask & 0o022), "o")
    assert run("stat", "-c", "%a", tool).stdout.strip() == "6755"  # this device's bits, kept here
    assert run("stat", "-c", "%a", shared).stdout.strip() == "1777"
    run("cp", "-a", b / "Documents" / "tool", tmp_path / "tool")
    assert not os.stat(tmp_path / "tool").st_mode & (stat.S_ISUID | stat.S_ISGID)


def test_the_server_makes_its_files_private_whatever_its_folder(tmp_path):
    data = tmp_path / "remote"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    stub = Stub(data).start()
    try:
        assert status(stub, "PUT", f"/v1/containers/{CONTAINER}") in ("200", "201")
        put_blob(stub, b"some bytes")
    finally:
        stub.stop()
    # Before Part 15 stub.sqlite was 0644 in a 0755 folder: any local user read every item of every container.
    made = [p for p in data.rglob("*") if p.name.startswith("stub.sqlite") or "blobs" in p.parts]
    assert any(p.name == "stub.sqlite" for p in made)
    for p in made:
        assert p.stat().st_mode & 0o077 == 0, f"{p} is {oct(p.stat().st_mode & 0o777)}"


def test_one_address_with_many_half_sent_requests_locks_nobody_else_out(tmp_path):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    stub = Stub(tmp_path / "remote").start()
    held = []
    try:
        host, port = stub.url.rsplit("/", 1)[1].rsplit(":", 1)
        # 1,100 requests from 127.0.0.1 whose headers never end (before Part 15, 1,016 of them took every
        # connection the server had, for five minutes).
        for _ in range(1100):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((host, int(port)))
            held.append(s)
        for s in held:
            try:
                s.send(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass  # refused or reset by the server: that address has its share already
        # Another client, from 127.0.0.2, is answered.
        other = socket.create_connection((host, int(port)), timeout=10, source_address=("127.0.0.2", 0))
        with other:
            other.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert other.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()
        stub.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def as_nobody(*command):
    """Runs `command` as the unprivileged user `nobody`: another user of this machine."""
    return subprocess.run(["runuser", "-u", "nobody", "--", *map(str, command)], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)


def test_postgresql_asks_every_local_user_for_the_password(postgres, pg_url, tmp_path):
    port = (postgres.dir / "port").read_text().strip()
    # Before Part 15 the cluster trusted every local connection: any user was a superuser on the metadata.
    for where in (["-h", postgres.dir], ["-h", "127.0.0.1"]):
        p = as_nobody("psql", "-X", *where, "-p", port, "-U", "postgres", "-w", "-c", "SELECT 1")
        assert p.returncode != 0 and "password" in p.stderr, p
    assert stat.S_IMODE(os.stat(pg_url.password_file).st_mode) == 0o600
    # The server reads the password from its file; a URL holding one is refused (ps would show it).
    stub = Stub(tmp_path / "remote", metadata=pg_url).start()
    try:
        assert status(stub, "PUT", f"/v1/containers/{CONTAINER}") == "200"
    finally:
        stub.stop()
    with_password = pg_url.replace("postgres@", "postgres:" + pg_url.password_file.read_text().strip() + "@")
    p = run(BIN, "remote", "serve", "--data", tmp_path / "never", "--metadata", with_password, check=False)
    assert p.returncode == 2 and "--metadata-password-file" in p.stderr and len(p.stderr.splitlines()) == 1, p
    open_file = tmp_path / "open-password"
    open_file.write_text(pg_url.password_file.read_text())
    open_file.chmod(0o644)
    p = run(BIN, "remote", "user", "list", "--data", tmp_path / "never", "--metadata", pg_url,
            "--metadata-password-file", open_file, check=False)
    assert p.returncode == 1 and "chmod 600" in p.stderr, p


def test_seaweedfs_serves_s3_and_nothing_else(seaweedfs):
    s3_port = int(seaweedfs.endpoint.rsplit(":", 1)[1])
    others = [p for p in json.loads((seaweedfs.dir / "ports.json").read_text()) if p != s3_port]
    # Before Part 15 the filer answered every local user on one of these (list, read, write, delete objects),
    # and the master deleted a bucket's volumes for anyone who asked.
    # The ports were free when weed was started; another test's server may have taken one since (they are drawn
    # from the same ephemeral range), so one that answers must not be weed's.
    for port in others:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                owner = run("ss", "-ltnpH", f"sport = :{port}").stdout
                assert "weed" not in owner, f"port {port} of weed answers on this machine: {owner}"
    listening = run("ss", "-ltnpH").stdout
    assert "weed" not in listening, listening
    # Its sockets are in a folder only its owner enters; S3 itself wants a signature.
    assert stat.S_IMODE(os.stat(seaweedfs.dir).st_mode) == 0o700
    for sock in ("filer.sock", "s3.sock"):
        p = as_nobody("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", seaweedfs.dir / sock,
                      "http://x/")
        assert p.stdout == "000", (sock, p)
    anonymous = run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", seaweedfs.endpoint + "/ubiquity-tests/").stdout
    assert anonymous == "403"


def test_a_batch_out_of_time_is_answered_in_parts_and_nothing_is_sent_twice(stub_factory, mount_factory, tmp_path):
    # --batch-seconds 0: every batch applies one entry and answers the rest 503, as a slow database would make
    # it. Before Part 15 such a batch outlasted the client's timeout, and all of it was sent again.
    stub = stub_factory(extra=["--batch-seconds", "0"])
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"f{i:02}.txt").write_text(f"file {i}\n")
    run("cp", "-r", src, a / "Documents" / "many")
    sync(a, timeout=120)
    wait_until(lambda: len(os.listdir(b / "Documents" / "many")) == 40, timeout=60, what="the 40 files on the desktop")
    assert (b / "Documents" / "many" / "f39.txt").read_text() == "file 39\n"
    stats = stub.stats()
    assert stats["batches"] > 1 and stats["appliedRetries"] == 0, stats


def test_an_idle_mount_holds_two_connections(stub, mount_factory):
    m = mount_factory(stub)
    (m / "Documents" / "note.txt").write_text("a change, so that pushes have used a connection\n")
    sync(m)

    def held():
        out = run("ss", "-tnH", "state", "established", f"dport = :{stub.port}").stdout
        return len(out.splitlines())
    # The two long polls (the change feed and the key-value store); the connection the pushes used is closed
    # by the server once it has sent no request for 10 s. Before Part 15 it stayed open 300 s: 3 each, 340 idle
    # devices filled a server.
    wait_until(lambda: held() <= 2, timeout=45, interval=1, what="the idle pushes' connection closed")
    assert held() == 2


def test_slow_headers_and_slow_bodies_are_cut(stub):
    host, port = "127.0.0.1", stub.port
    # A header that never ends (a byte every 2 s: never idle long enough for the idle timeout) ...
    slow_header = socket.create_connection((host, port), timeout=30)
    slow_header.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
    # ... and a body that trickles in.
    slow_body = socket.create_connection((host, port), timeout=30)
    sha = hashlib.sha256(b"x" * 1000).hexdigest()
    slow_body.sendall((f"PUT /v1/containers/{CONTAINER}/blobs/{sha} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                       f"Authorization: Bearer {stub.token}\r\n\r\n").encode())
    assert status(stub, "PUT", f"/v1/containers/{CONTAINER}") in ("200", "201")

    def cut(s, byte):
        try:
            s.sendall(byte)
            s.settimeout(0.01)
            return s.recv(1) == b""
        except socket.timeout:
            return False
        except OSError:
            return True
    started = time.monotonic()
    alive = {"header": slow_header, "body": slow_body}
    cut_after = {}
    while alive and time.monotonic() - started < 40:
        for name, s in list(alive.items()):
            if cut(s, b"X" if name == "header" else b"x"):
                cut_after[name] = time.monotonic() - started
                del alive[name]
        time.sleep(2)
    # Before Part 15 both were held for as long as the client liked.
    assert not alive, f"{sorted(alive)} still open after 40 s"
    # The header's connection never sent a key: a stranger owes its header within 5 s (Part 21); the body's
    # request had one, and is cut once it is slower than 1 KiB/s after 10 s.
    assert 4 <= cut_after["header"] <= 15 and 8 <= cut_after["body"] <= 25, cut_after
    assert status(stub, "GET", "/v1/health") == "200"
