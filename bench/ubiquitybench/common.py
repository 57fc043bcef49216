"""What the workloads share: the bench's container and sizes, the cleanup of everything started, the stub and
the mount of harness.py registered with it, the baselines (the engines, rclone, the FUSE floor and bindfs), and
small measuring helpers."""
import hashlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from . import harness
from .harness import BIN, ROOT, curl_auth, drop_caches, mounted, wait_until  # noqa: F401 (the workloads import them from here)
from .harness import stop_process as stop_proc

CONTAINER = "iCloud.com.example.bench"
MiB = 1 << 20
GiB = 1 << 30


def run(*args, timeout=600, **kw):
    """harness.run with the bench's longer default timeout (its workloads move gigabytes)."""
    return harness.run(*args, timeout=timeout, **kw)


def ensure_packages():
    """Installs rclone, matplotlib, bindfs and what the FUSE floor is compiled with from Debian when they are
    missing (like scripts/setup)."""
    wanted = {"rclone": "rclone", "python3-matplotlib": None, "curl": "curl", "attr": "getfattr",
              "fuse3": "fusermount3", "gcc": "cc", "pkg-config": "pkg-config", "libfuse3-dev": None,
              "bindfs": "bindfs"}
    missing = []
    for pkg in wanted:
        st = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if "ok installed" not in st.stdout:
            missing.append(pkg)
    if missing:
        print(f"bench: installing {' '.join(missing)}", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=env, check=False,
                       stdout=subprocess.DEVNULL)


class Cleanup:
    """Everything started is registered here and stopped in reverse order, even on failure."""

    def __init__(self):
        self.items = []

    def add(self, what, fn):
        self.items.append((what, fn))
        return fn

    def remove(self, fn):
        self.items = [(w, f) for w, f in self.items if f is not fn]

    def run(self):
        while self.items:
            what, fn = self.items.pop()
            try:
                fn()
            except Exception as e:  # keep cleaning up the rest
                print(f"bench: cleanup of {what} failed: {e}", file=sys.stderr)


CLEANUP = Cleanup()




class Stub(harness.Stub):
    """A remote stub of the bench's container, stopped by CLEANUP; `serve_args` are more of its options
    (Engines.serve_args)."""

    def __init__(self, data: Path, serve_args=()):
        super().__init__(data, extra=serve_args, container=CONTAINER)
        self._stop = None

    def seed(self, *pairs, device="otherdevice"):
        super().seed(*pairs, device=device, timeout=3600)

    def start(self):
        self._stop = CLEANUP.add(f"stub {self.data}", self.stop)
        return super().start()

    def stop(self):
        super().stop()
        if self._stop:
            CLEANUP.remove(self._stop)
            self._stop = None


class UbqMount(harness.Mount):
    """One device's ubiquityfs mount of the bench container (no debug log: it would be measured too), unmounted
    by CLEANUP."""

    def __init__(self, root: Path, stub: Stub, device="benchdev"):
        super().__init__(root, stub, device, log_level=None, container=CONTAINER)
        self._stop = None

    def mount(self):
        self._stop = CLEANUP.add(f"mount {self.path}", self.unmount)
        super().mount(timeout=300)
        return self

    def pid(self):
        pids = self.daemon_pids()
        return pids[0] if pids else None

    def unmount(self):
        super().unmount(timeout=180)
        if self._stop:
            CLEANUP.remove(self._stop)
            self._stop = None


class Engines:
    """The remote's real engines for --engines: a PostgreSQL cluster (scripts/postgres) and a SeaweedFS S3 gateway
    (scripts/seaweedfs), both on 127.0.0.1 with their data in `root`; stopped by CLEANUP."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.pg, self.s3 = self.root / "postgres", self.root / "seaweedfs"
        self.endpoint = None
        self._stop = None

    def start(self):
        self.root.mkdir(parents=True, exist_ok=True)
        for p in (self.root.parent, self.root):
            p.chmod(0o755)  # the cluster runs as the postgres user, who must reach its directory
        self._stop = CLEANUP.add("engines", self.stop)
        run(ROOT / "scripts" / "postgres", "start", self.pg, timeout=180)
        self.endpoint = run(ROOT / "scripts" / "seaweedfs", "start", self.s3, timeout=180).stdout.strip()
        return self

    def serve_args(self):
        """`remote serve` options for a fresh database and a fresh prefix of the bucket."""
        url = run(ROOT / "scripts" / "postgres", "newdb", self.pg, timeout=60).stdout.strip().splitlines()[-1]
        blobs = f"s3://ubiquity-bench/b-{os.urandom(4).hex()}?endpoint={self.endpoint}"
        return ["--metadata", url, "--metadata-password-file", self.pg / "password",
                "--blobs", blobs, "--s3-credentials", self.s3 / "credentials"]

    def stop(self):
        run(ROOT / "scripts" / "seaweedfs", "stop", self.s3, check=False, timeout=60)
        run(ROOT / "scripts" / "postgres", "stop", self.pg, check=False, timeout=120)
        if self._stop:
            CLEANUP.remove(self._stop)
            self._stop = None


ENGINES_NAME = "PostgreSQL+SeaweedFS"



class Rclone:
    """`rclone serve webdav` of a local directory on loopback, and `rclone mount`s of it (vfs-cache-mode full)."""

    def __init__(self, root: Path, served: Path):
        self.root = Path(root)
        self.served = Path(served)
        self.server = None
        self.port = None
        self.mounts = []
        self._stop = None

    def start(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "serve.log", "ab")
        self.server = subprocess.Popen(["rclone", "serve", "webdav", str(self.served), "--addr",
                                        f"127.0.0.1:{self.port}"], stdout=log, stderr=log)
        self._stop = CLEANUP.add("rclone serve", self.stop)

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return self.server.poll() is not None
        wait_until(up, timeout=20, what="rclone serve")
        if self.server.poll() is not None:
            raise RuntimeError("rclone serve did not start")
        return self

    def mount(self, name="m", extra=()):
        mp = self.root / name / "mnt"
        cache = self.root / name / "cache"
        mp.mkdir(parents=True, exist_ok=True)
        log = open(self.root / name / "mount.log", "ab")
        proc = subprocess.Popen(["rclone", "mount", ":webdav:", str(mp), "--webdav-url",
                                 f"http://127.0.0.1:{self.port}", "--vfs-cache-mode", "full",
                                 "--cache-dir", str(cache), "--allow-other", *extra],
                                stdout=log, stderr=log)
        entry = (mp, proc)
        self.mounts.append(entry)
        wait_until(lambda: mounted(mp) or proc.poll() is not None, timeout=30, what="rclone mount")
        if proc.poll() is not None:
            raise RuntimeError("rclone mount failed: " + (self.root / name / "mount.log").read_text()[-500:])
        return mp

    def stop(self):
        for mp, proc in self.mounts:
            if mounted(mp):
                run("fusermount3", "-u", mp, check=False)
                if mounted(mp):
                    run("fusermount3", "-u", "-z", mp, check=False)
            stop_proc(proc)
        self.mounts = []
        stop_proc(self.server)
        self.server = None
        if self._stop:
            CLEANUP.remove(self._stop)
            self._stop = None


class Passthrough:
    """A passthrough FUSE mount of a directory in the foreground: the bench's floor (bench/floor/floor.c) or
    bindfs. `argv` names the mount point as "{mnt}"."""

    def __init__(self, name, root: Path, argv):
        self.name = name
        self.root = Path(root)
        self.path = self.root / "mnt"
        self.argv = [str(a) for a in argv]
        self.proc = None
        self._stop = None

    def mount(self):
        self.path.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "mount.log", "ab")
        argv = [a.replace("{mnt}", str(self.path)) for a in self.argv]
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log)
        self._stop = CLEANUP.add(f"{self.name} mount", self.stop)
        wait_until(lambda: mounted(self.path) or self.proc.poll() is not None, timeout=30, what=f"{self.name} mount")
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} did not mount: " + (self.root / "mount.log").read_text()[-500:])
        return self

    def stop(self):
        if mounted(self.path):
            run("fusermount3", "-u", self.path, check=False)
            if mounted(self.path):
                run("fusermount3", "-u", "-z", self.path, check=False)
        stop_proc(self.proc)
        self.proc = None
        if self._stop:
            CLEANUP.remove(self._stop)
            self._stop = None



def read_file(path, bufsize=MiB):
    """Reads a whole file sequentially; returns (seconds, bytes)."""
    buf = bytearray(bufsize)
    mv = memoryview(buf)
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            k = f.readinto(mv)
            if not k:
                break
            n += k
    return time.perf_counter() - t0, n


def make_file(path, size, seed=b"", chunk=MiB):
    """Writes `size` pseudo-random bytes (one random MiB repeated, the first chunk stamped with `seed`)."""
    block = os.urandom(chunk)
    first = (seed + block)[:chunk]
    with open(path, "wb", buffering=0) as f:
        left = size
        b = first
        while left > 0:
            n = min(left, chunk)
            f.write(b[:n])
            left -= n
            b = block


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(4 * MiB)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def curl_get(url, token):
    """Times one GET with curl; the token goes in on stdin (`-K -`), never on the command line."""
    t0 = time.perf_counter()
    run("curl", "-sS", "-f", "-o", "/dev/null", "-H", curl_auth(token), url, timeout=600)
    return time.perf_counter() - t0


def status_kb(pid):
    """The daemon's resident memory now and at its peak, in KiB: {"VmRSS": ..., "VmHWM": ...}."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def rss_kb(pid):
    return status_kb(pid).get("VmRSS")


def make_tarball(work: Path, n: int, name: str, seed: int) -> Path:
    """A tar of one folder `t` of `n` small files (1-4 KiB of random bytes, the same for the same seed), made
    once per work directory."""
    tarball = work / f"{name}-{n}.tar"
    if tarball.exists():
        return tarball
    src = work / "tarsrc" / "t"
    src.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    for i in range(n):
        (src / f"f{i:05}").write_bytes(rnd.randbytes(rnd.randint(1024, 4096)))
    with tarfile.open(tarball, "w") as t:
        t.add(src, arcname="t")
    shutil.rmtree(work / "tarsrc")
    return tarball


def nfds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def mbps(size, secs):
    return size / secs / 1e6 if secs else None
