"""What the integration tests and the bench share: running commands, waiting, a remote stub process and a mount.

Tests/mounts/conftest.py and every workload of the bench import these; nothing here knows pytest. A
failure raises `CommandFailed` or `TimedOut`, both AssertionErrors, so that a test fails and the bench says why.
Stdlib only.
"""
import hashlib
import json
import os
import select
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("UBIQUITYFS_BIN") or str(ROOT / ".build" / "release" / "ubiquityfs")
# The container of the integration tests; the bench names its own.
TEST_CONTAINER = "iCloud.com.example.tests"


class CommandFailed(AssertionError):
    """A command exited with a status other than 0."""


class TimedOut(AssertionError):
    """What was waited for did not come in time."""


def run(*args, check=True, timeout=60, **kw):
    """Runs a command, returning the CompletedProcess with text output."""
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise CommandFailed(f"{args} exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


_auth_files = {}


def exists(pid):
    """Whether process `pid` is still running: not gone, and not a zombie (which has closed its files)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def curl_auth(token):
    """curl's `-H @FILE` for the bearer token: a file only its owner may read (mkstemp's 0600), one per token, so
    that the token never shows on a command line, where any user's `ps` would see it."""
    if token not in _auth_files:
        fd, path = tempfile.mkstemp(prefix="ubq-auth-", suffix=".header")
        with os.fdopen(fd, "w") as f:
            f.write(f"Authorization: Bearer {token}\n")
        _auth_files[token] = "@" + path
    return _auth_files[token]


def wait_until(predicate, timeout=15.0, interval=0.1, what="condition"):
    """Polls `predicate` until it returns a truthy value, which it returns; raises TimedOut after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except (OSError, AssertionError) as e:
            last = e
        time.sleep(interval)
    raise TimedOut(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_for_line(proc, stream, prefix, timeout=20.0):
    """Reads `stream` (a pipe of `proc`, opened in text mode) until a line starting with `prefix`: a background
    process's readiness signal. Fails on a timeout or when the process ends first."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            raise TimedOut(f"no line '{prefix}...' from {proc.args} within {timeout}s (read: {seen})")
        line = stream.readline()
        if not line:
            raise AssertionError(f"{proc.args} ended (status {proc.wait(10)}) before '{prefix}...' (read: {seen})")
        if line.startswith(prefix):
            return line
        seen.append(line)


def mounted(path):
    """The file system type mounted at `path` (e.g. fuse.ubiquityfs), or None."""
    path = str(path)
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] == path:
            return parts[2]
    return None


def stop_process(proc, timeout=10):
    """SIGTERM, then SIGKILL after `timeout` seconds; nothing for a process that has ended."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def drop_caches():
    """Writes back and drops the kernel's page, dentry and inode caches (needs root)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


class Stub:
    """One `ubiquityfs remote serve` process on loopback with its data directory. `extra` are more of its
    options; `metadata` a postgresql:// URL (None: DATA/stub.sqlite); `tag` tells apart the files of servers
    sharing one data directory; `binary` the ubiquityfs that serves (an older one, in a comparison)."""

    def __init__(self, data: Path, bandwidth=0, latency_ms=0, port=0, metadata=None, tag="", extra=(),
                 container=TEST_CONTAINER, binary=None, test_routes=True):
        self.data = Path(data)
        self.binary = binary or BIN
        self.bandwidth = bandwidth
        self.latency_ms = latency_ms
        self.port = port
        self.metadata = metadata
        self.tag = tag
        self.extra = [str(a) for a in extra]
        self.container = container
        # /v1/stats and /v1/faults, which the tests and the bench read and arm (remote serve --test-routes; a
        # binary older than that option serves them always and would refuse it).
        self.test_routes = test_routes and self.binary == BIN
        self.proc = None
        self.url = None

    @property
    def token_file(self):
        return self.data / "token"

    @property
    def token(self):
        return self.token_file.read_text().strip()

    @property
    def log_file(self):
        return self.data / f"stub{self.tag}.log"

    def start(self):
        endpoint = self.data / f"endpoint{self.tag}"
        if endpoint.exists():
            endpoint.unlink()
        self.data.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "ab")
        metadata = ["--metadata", self.metadata] if self.metadata else []
        if getattr(self.metadata, "password_file", None):  # a PGURL (Tests/mounts/conftest.py)
            metadata += ["--metadata-password-file", self.metadata.password_file]
        self.proc = subprocess.Popen(
            [self.binary, "remote", "serve", "--data", self.data, "--listen", f"127.0.0.1:{self.port}",
             "--endpoint-file", endpoint, "--bandwidth", str(self.bandwidth), "--latency-ms", str(self.latency_ms),
             *metadata, *(["--test-routes"] if self.test_routes else []), *self.extra],
            stdout=log, stderr=log)
        wait_until(lambda: endpoint.exists() and endpoint.read_text().strip() or self.proc.poll() is not None,
                   timeout=30, what="stub endpoint")
        assert self.proc.poll() is None, self.log_file.read_text()[-2000:]
        self.url = endpoint.read_text().strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def stop(self):
        stop_process(self.proc)
        self.proc = None

    def request(self, method, path, body=None, auth=True):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        if auth:
            req.add_header("Authorization", "Bearer " + self.token)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"null")

    def stats(self):
        return self.request("GET", "/v1/stats")

    def blob_gets(self, path=None):
        """Blob downloads served: of all blobs, or of the content of local file `path`."""
        stats = self.stats()
        if path is None:
            return stats["blobGets"]
        sha = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        return stats["blobGetsBySha"].get(sha, 0)

    def blob_url(self, sha):
        return f"{self.url}/v1/containers/{self.container}/blobs/{sha}"

    def faults(self, **kw):
        return self.request("POST", "/v1/faults", kw)

    def seed(self, *pairs, device="iPhone", container=None, timeout=60):
        """Seeds files, each pair (path in the container, local source), while the stub is stopped (restarting
        it after if it ran)."""
        running = self.proc is not None
        self.stop()
        self.data.mkdir(parents=True, exist_ok=True)
        run(self.binary, "remote", "seed", "--data", self.data, "--container", container or self.container,
            "--device", device, *[f"{dest}={source}" for dest, source in pairs], *self.blob_store_args(),
            timeout=timeout)
        if running:
            self.start()

    def blob_store_args(self):
        """`seed` takes no serving options, but needs the blob store's (--blobs, --s3-credentials)."""
        out, words = [], iter(self.extra)
        for w in words:
            if w in ("--blobs", "--s3-credentials"):
                out += [w, next(words)]
        return out


class Mount:
    """One device's ubiquityfs mount of a container on a remote (a Stub, or anything with `url` and
    `token_file`; None: the embedded stub the mount starts itself, its data under `root`/data): `root`/mnt, its
    store in `root`/store. `binary` is the ubiquityfs that mounts (an older one, in a comparison)."""

    def __init__(self, root: Path, stub, device: str, extra=(), log_level="debug", container=TEST_CONTAINER,
                 binary=None):
        self.root = Path(root)
        self.binary = binary or BIN
        # The embedded stub keeps its data under XDG_DATA_HOME: each such mount its own.
        self.env = None if stub else dict(os.environ, XDG_DATA_HOME=str(self.root / "data"))
        self.path = self.root / "mnt"
        self.store = self.root / "store"
        self.stub = stub
        self.device = device
        self.extra = list(extra)
        self.log_level = log_level
        self.container = container
        self.path.mkdir(parents=True, exist_ok=True)

    def args(self):
        level = ["--log-level", self.log_level] if self.log_level else []
        remote = ["--remote", self.stub.url, "--token-file", self.stub.token_file] if self.stub else []
        container = ["--container", self.container] if self.container else []  # None: --containers in `extra`
        return [self.binary, "mount", self.path, *remote, *container, "--store", self.store, "--device", self.device,
                *level, *self.extra, *os.environ.get("UBIQUITYFS_MOUNT_EXTRA", "").split()]

    def mount(self, timeout=90):
        proc = run(*self.args(), check=False, timeout=timeout, env=self.env)
        assert proc.returncode == 0, f"mount failed: {proc.stderr}\n{self.log()}"
        assert self.is_mounted(), f"{self.path} is not mounted after mount"
        return proc

    def is_mounted(self):
        return mounted(self.path) == "fuse.ubiquityfs"

    def unmount(self, timeout=60):
        """Unmounts (lazily if the unmount fails or takes over `timeout` seconds) and ends the daemon."""
        if self.is_mounted():
            try:
                ok = run(self.binary, "unmount", "--force", self.path, check=False, timeout=timeout,
                         env=self.env).returncode == 0
            except subprocess.TimeoutExpired:
                ok = False
            if not ok:
                run("fusermount3", "-u", "-z", self.path, check=False)
        self.kill_daemon(signal.SIGTERM)

    def daemon_pids(self):
        out = run("pgrep", "-f", f"mount {self.path} ", check=False).stdout.split()
        return [int(p) for p in out]

    def kill_daemon(self, sig=signal.SIGKILL, timeout=20):
        """Sends `sig` to the daemon, then SIGKILL if it has not ended after half the timeout; returns once the
        process is gone or a zombie: its command line empties, so `pgrep -f` stops finding it, before it has
        closed /dev/fuse, and a mount made then found the old one still there."""
        deadline = time.monotonic() + timeout
        pids = self.daemon_pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            wait_until(lambda: not any(map(exists, pids)), timeout=timeout / 2, what="daemon exit")
        except TimedOut:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait_until(lambda: not any(map(exists, pids)), timeout=max(1.0, deadline - time.monotonic()),
                       what="daemon exit")

    def sync(self, timeout=60):
        """`ubiquityfs sync --wait`: every change of the mount is on the remote."""
        run(self.binary, "sync", "--wait", "--timeout", str(timeout), self.path, timeout=timeout + 30, env=self.env)

    def log(self):
        p = self.store / "ubiquityfs.log"
        return p.read_text(errors="replace")[-4000:] if p.exists() else ""

    def __truediv__(self, rel):
        return self.path / rel
