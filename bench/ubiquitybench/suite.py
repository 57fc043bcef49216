"""The workloads of `scripts/bench`, one method each (w1 ... w8, wL), measured against their baselines in the
same run and in alternation."""
import hashlib
import json
import os
import shlex
import shutil
import resource
import signal
import subprocess
import threading
import sys
import time
import traceback
from pathlib import Path

from . import propagation as prop
from .common import (BIN, CLEANUP, ENGINES_NAME, MiB, ROOT, Engines, Passthrough, Rclone, Stub, UbqMount,
                     curl_get, drop_caches, make_file, mbps, nfds, read_file, rss_kb, run, sha256_file, wait_until)
from .harness import TimedOut, curl_auth
from .report import FAILURES, Results, alternate, median


def random_file(path, size):
    """Writes `size` bytes from the system's generator: no block repeats, so chunks do not dedupe by chance."""
    with open(path, "wb", buffering=0) as f:
        left = size
        while left > 0:
            n = min(left, 8 * MiB)
            f.write(os.urandom(n))
            left -= n


def random_file_sha(path, size):
    """Like random_file; answers the SHA-256 of what it wrote."""
    h = hashlib.sha256()
    with open(path, "wb", buffering=0) as f:
        left = size
        while left > 0:
            block = os.urandom(min(left, 8 * MiB))
            h.update(block)
            f.write(block)
            left -= len(block)
    return h.hexdigest()


def machine_cpu():
    """CPU-seconds the machine has spent busy since boot, all cores and processes (/proc/stat)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu():
    """CPU-seconds (user + system) of this process's children that have ended and been waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def process_cpu(pid):
    """CPU-seconds (user + system) process `pid` has spent."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kill9_and_restart(stub):
    """`kill -9` of the remote, then a new process on the same data, port and options (its counters start at
    zero); answers the seconds the restart took."""
    stub.proc.send_signal(signal.SIGKILL)
    stub.proc.wait(timeout=30)
    stub.stop()  # nothing left to stop: forgets the process and its cleanup
    t0 = time.perf_counter()
    stub.start()
    return time.perf_counter() - t0


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.reps = args.reps or (3 if self.quick else 5)
        self.work = Path(args.work)
        self.res = Results()
        self.throughput = []  # (label, {name: MB/s})
        q = self.quick
        self.large = (256 if q else 1024) * MiB          # workloads 1, 3 and 6
        self.cold = (64 if q else 256) * MiB              # workload 2
        self.many_size = (8 if q else 32) * MiB          # workload 2, 16 files
        self.dir_files = 1000 if q else 10000             # workload 4, ls/stat
        self.tree_dirs = 10 if q else 100                 # workload 4 find: dirs x 10 subdirs x 99 files
        self.tar_sizes = [500] if q else [2000, 10000]   # workload 4, tar x and rm -rf
        self.loop_files = 500 if q else 2000              # workload 4, a shell loop of creates
        self.fd_cycles = 1000 if q else 10000             # workload 6
        self.tree_items = self.tree_dirs * (1 + 10 + 10 * 99)
        self.tree_stub = None

    def fresh(self, name):
        d = self.work / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        return d

    # -------------------------------------------------------------- 1: warm sequential read of a local file
    def w1(self):
        W = "1 warm seq read"
        d = self.fresh("w1")
        src = d / "src"
        src.mkdir()
        make_file(src / "big.bin", self.large)
        direct = d / "direct.bin"
        shutil.copyfile(src / "big.bin", direct)
        stub = Stub(d / "remote")
        stub.seed(("Documents/big.bin", src / "big.bin"))
        stub.start()
        m = UbqMount(d / "ubq", stub).mount()
        rc = Rclone(d / "rclone", src).start()
        rmp = rc.mount()
        ubq_file, rc_file = m / "Documents/big.bin", rmp / "big.bin"
        # Make the content local on both mounts first (this is the "local file" case).
        read_file(ubq_file)
        read_file(rc_file)
        time.sleep(0.5)
        size = self.large
        for mode in ("dropped", "warm"):
            def measure(path, mode=mode):
                def f():
                    if mode == "dropped":
                        drop_caches()
                    else:
                        read_file(path)
                    secs, n = read_file(path)
                    assert n == size, f"read {n} bytes of {size}"
                    return mbps(n, secs)
                return f
            s, err = alternate(self.reps, {"ubiquityfs": measure(ubq_file), "direct": measure(direct),
                                           "rclone": measure(rc_file)}, f"{W} ({mode})")
            u, di, r = median(s["ubiquityfs"]), median(s["direct"]), median(s["rclone"])
            metric = f"read {size // MiB} MiB, page cache {mode}"
            self.res.add(W, metric, "MB/s", u, "direct", di, goal="≥0.95", goal_ok=u is not None and di and u / di >= 0.95)
            self.res.add(W, metric, "MB/s", u, "rclone", r, goal=">1", goal_ok=u is not None and r and u / r > 1)
            self.throughput.append((f"1 read ({mode} cache)", {"ubiquityfs": u, "direct": di, "rclone": r}))
        rc.stop()
        m.unmount()
        stub.stop()
        shutil.rmtree(d)

    # -------------------------------------------------------------- 2: cold reads from the remote
    def w2(self):
        W = "2 cold read"
        d = self.fresh("w2")
        src = d / "src"
        (src / "many").mkdir(parents=True)
        make_file(src / "cold.bin", self.cold)
        for i in range(16):
            make_file(src / "many" / f"f{i:02}.bin", self.many_size, seed=f"many{i}".encode())
        sha_cold = sha256_file(src / "cold.bin")
        shas_many = [sha256_file(src / "many" / f"f{i:02}.bin") for i in range(16)]
        stub = Stub(d / "remote")
        stub.seed(("Documents/cold.bin", src / "cold.bin"), ("Documents/many", src / "many"))
        stub.start()
        token = stub.token
        shutil.rmtree(src)
        rounds = [0]

        def ubq_cold():
            rounds[0] += 1
            m = UbqMount(d / f"ubq{rounds[0]}", stub).mount()
            try:
                drop_caches()
                before = stub.stats()["blobGetsBySha"].get(sha_cold, 0)
                secs, n = read_file(m / "Documents/cold.bin")
                assert n == self.cold
                after = stub.stats()["blobGetsBySha"].get(sha_cold, 0)
                assert after - before == 1, f"{after - before} blob GETs for one cold open"
                return secs
            finally:
                m.unmount()
                shutil.rmtree(d / f"ubq{rounds[0]}", ignore_errors=True)

        def curl_cold():
            drop_caches()
            return curl_get(stub.blob_url(sha_cold), token)

        s, err = alternate(self.reps, {"ubiquityfs": ubq_cold, "curl": curl_cold}, W)
        u, c = median(s["ubiquityfs"]), median(s["curl"])
        self.res.add(W, f"open+read {self.cold // MiB} MiB, total time", "s", u, "curl", c, better="lower",
                     goal="≤1.15", goal_ok=u is not None and c and u / c <= 1.15)
        self.throughput.append(("2 cold read", {"ubiquityfs": mbps(self.cold, u), "curl": mbps(self.cold, c)}))

        # 32 concurrent opens of one cold file: one transfer.
        try:
            m = UbqMount(d / "ubq-conc", stub).mount()
            before = stub.stats()["blobGetsBySha"].get(sha_cold, 0)
            errs = []

            def reader():
                try:
                    _, n = read_file(m / "Documents/cold.bin")
                    assert n == self.cold
                except Exception as e:
                    errs.append(e)
            ts = [threading.Thread(target=reader) for _ in range(32)]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            secs = time.perf_counter() - t0
            gets = stub.stats()["blobGetsBySha"].get(sha_cold, 0) - before
            if errs:
                raise RuntimeError(f"{len(errs)} readers failed: {errs[0]}")
            self.res.add(W, f"32 concurrent opens: blob GETs (all done in {secs:.2f} s)", "GETs", gets,
                         better="lower", goal="=1", goal_ok=gets == 1)
            m.unmount()
        except Exception as e:
            self.res.failed(W + " (32 opens)", f"{type(e).__name__}: {e}")

        # 16 different cold files at once vs 16 curls at once.
        total = 16 * self.many_size

        def ubq_many():
            rounds[0] += 1
            m = UbqMount(d / f"ubq{rounds[0]}", stub).mount()
            try:
                drop_caches()
                errs = []

                def reader(i):
                    try:
                        _, n = read_file(m / f"Documents/many/f{i:02}.bin")
                        assert n == self.many_size
                    except Exception as e:
                        errs.append(e)
                ts = [threading.Thread(target=reader, args=(i,)) for i in range(16)]
                t0 = time.perf_counter()
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                secs = time.perf_counter() - t0
                if errs:
                    raise RuntimeError(f"{len(errs)} readers failed: {errs[0]}")
                return mbps(total, secs)
            finally:
                m.unmount()
                shutil.rmtree(d / f"ubq{rounds[0]}", ignore_errors=True)

        def curl_many():
            drop_caches()
            t0 = time.perf_counter()
            procs = [subprocess.Popen(["curl", "-sS", "-f", "-o", "/dev/null", "-H", curl_auth(token),
                                       stub.blob_url(sha)]) for sha in shas_many]
            rcs = [p.wait() for p in procs]
            secs = time.perf_counter() - t0
            if any(rcs):
                raise RuntimeError(f"curl exit codes {rcs}")
            return mbps(total, secs)

        s, err = alternate(self.reps, {"ubiquityfs": ubq_many, "curl": curl_many}, W)
        u, c = median(s["ubiquityfs"]), median(s["curl"])
        self.res.add(W, f"16 cold files x {self.many_size // MiB} MiB at once, aggregate", "MB/s", u, "curl", c,
                     goal="≥0.9", goal_ok=u is not None and c and u / c >= 0.9)
        self.throughput.append(("2 16 cold files", {"ubiquityfs": u, "curl": c}))
        stub.stop()
        shutil.rmtree(d)

    # -------------------------------------------------------------- 3: sequential write, then upload
    def w3(self):
        W = "3 write"
        d = self.fresh("w3")
        stub = Stub(d / "remote").start()
        token = stub.token
        m = UbqMount(d / "ubq", stub).mount()
        (m / "Documents/w").mkdir(exist_ok=True)
        direct_dir = d / "direct"
        direct_dir.mkdir()
        size = self.large
        block = os.urandom(MiB)
        n = [0]
        upload_times = []

        def write(path, tag):
            n[0] += 1
            first = (f"{tag}{n[0]}-{time.time_ns()}".encode() + block)[:MiB]
            t0 = time.perf_counter()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, first)
                for _ in range(size // MiB - 1):
                    os.write(fd, block)
            finally:
                os.close(fd)
            return t0, time.perf_counter()

        def ubq_write():
            p = m / f"Documents/w/f{n[0] + 1}.bin"
            t0, t1 = write(p, "u")

            def uploaded():
                try:
                    return os.getxattr(p, "user.ubiquity.isUploaded") == b"1"
                except OSError:
                    return False
            wait_until(uploaded, timeout=600, interval=0.01, what="isUploaded = 1")
            upload_times.append(time.perf_counter() - t1)
            os.unlink(p)
            return mbps(size, t1 - t0)

        curl_times = []

        def direct_write():
            p = direct_dir / f"f{n[0] + 1}.bin"
            t0, t1 = write(p, "d")
            # The baseline for the upload: curl PUTting the same bytes to the stub.
            sha = sha256_file(p)
            drop = time.perf_counter()
            run("curl", "-sS", "-f", "-o", "/dev/null", "-T", p, "-H", curl_auth(token),
                stub.blob_url(sha), timeout=600)
            curl_times.append(time.perf_counter() - drop)
            os.unlink(p)
            return mbps(size, t1 - t0)

        s, err = alternate(self.reps, {"ubiquityfs": ubq_write, "direct": direct_write}, W)
        u, di = median(s["ubiquityfs"]), median(s["direct"])
        self.res.add(W, f"write {size // MiB} MiB + close", "MB/s", u, "direct", di, goal="≥0.9",
                     goal_ok=u is not None and di and u / di >= 0.9)
        uu, cu = median(upload_times), median(curl_times)
        self.res.add(W, "close → isUploaded=1", "s", uu, "curl -T PUT", cu, better="lower")
        self.throughput.append(("3 write", {"ubiquityfs": u, "direct": di}))
        self.throughput.append(("3 upload", {"ubiquityfs": mbps(size, uu), "curl": mbps(size, cu)}))
        m.unmount()
        stub.stop()
        shutil.rmtree(d)

    # -------------------------------------------------------------- 4: metadata
    def make_tree(self, top):
        for a in range(self.tree_dirs):
            for b in range(10):
                p = top / f"d{a:03}" / f"s{b}"
                p.mkdir(parents=True)
                for c in range(99):
                    (p / f"f{c:02}").touch()

    def get_tree_stub(self):
        """A stub data directory seeded with the big tree (kept for workloads 4 and 6), and the local tree."""
        if self.tree_stub:
            return self.tree_stub
        d = self.work / "tree"
        if d.exists():
            shutil.rmtree(d)
        src = d / "src" / "tree"
        src.mkdir(parents=True)
        self.make_tree(src)
        stub = Stub(d / "remote")
        t0 = time.perf_counter()
        stub.seed(("Documents/tree", src))
        secs = time.perf_counter() - t0
        self.res.note(f"seeding the stub with {self.tree_items} items took {secs:.1f} s "
                      f"({self.tree_items / secs:.0f} items/s)")
        self.tree_stub = (stub, d / "src")
        return self.tree_stub

    def w4(self):
        W = "4 metadata"
        d = self.fresh("w4")
        src = d / "src"
        flat = src / "flat"
        flat.mkdir(parents=True)
        for i in range(self.dir_files):
            (flat / f"file{i:05}.txt").write_bytes(b"x")
        tarballs = [(n, self.make_tarball(d, n)) for n in self.tar_sizes]
        tree_stub, tree_src = self.get_tree_stub()
        # flat dir: seed it into the tree stub too (one stub for everything in this workload)
        tree_stub.seed(("Documents/flat", flat))
        tree_stub.start()
        direct = d / "direct"
        direct.mkdir()
        shutil.copytree(flat, direct / "flat")
        shutil.copytree(tree_src / "tree", direct / "tree")
        # rclone serves a directory with the same files
        served = d / "served"
        served.mkdir()
        shutil.copytree(flat, served / "flat")
        shutil.copytree(tree_src / "tree", served / "tree")
        m = UbqMount(d / "ubq", tree_stub).mount()
        rc = Rclone(d / "rclone", served).start()
        roots = {"ubiquityfs": m / "Documents", "direct": direct}
        # The floors pass through to the direct directory itself: the same files, the same disk caches.
        floors = self.mount_floors(d, direct)
        for f in floors:
            roots[f.name] = f.path
        roots["rclone"] = rc.mount()
        try:
            for name, root in roots.items():
                wait_until(lambda: self.count_check(root) is None, timeout=120, interval=0.2,
                           what=f"flat dir on {name}")
            self.w4_reads(W, roots)
            self.w4_creates(W, roots, tarballs)
        finally:
            rc.stop()
            for f in floors:
                f.stop()
            m.unmount()
            tree_stub.stop()
            shutil.rmtree(d)
        self.res.note("fuse floor = bench/floor/floor.c, a passthrough on libfuse's low-level API set up like "
                      "ubiquityfs (multi-threaded, 10 s entry/attr/negative timeouts, readdirplus, no writeback "
                      "cache); it and bindfs (high-level API) pass through to the direct directory.")

    def mount_floors(self, d, backing):
        """The FUSE floor and, when installed, bindfs over `backing`; one that cannot mount is reported and left out."""
        floors = []
        for name, argv in (("fuse floor", lambda: [self.floor_binary(), backing, "{mnt}"]),
                           ("bindfs", lambda: ["bindfs", "-f", backing, "{mnt}"] if shutil.which("bindfs") else None)):
            try:
                args = argv()
                if args:
                    floors.append(Passthrough(name, d / name.replace(" ", "-"), args).mount())
            except Exception as e:
                FAILURES.append((f"4 metadata {name}", f"{type(e).__name__}: {e}"))
        return floors

    def floor_binary(self):
        """Compiles bench/floor/floor.c into the work directory (once per run)."""
        out = self.work / "floor-bin" / "floor"
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            flags = run("pkg-config", "--cflags", "--libs", "fuse3").stdout.split()
            run("cc", "-O2", "-Wall", "-o", out, ROOT / "bench" / "floor" / "floor.c", *flags)
        return out

    def make_tarball(self, d, files):
        """A tarball of `files` small files (1 KiB each, 100 to a directory) for create/delete."""
        tsrc = d / f"tarsrc{files}" / "t"
        for i in range(files):
            p = tsrc / f"d{i // 100:03}"
            if i % 100 == 0:
                p.mkdir(parents=True)
            (p / f"f{i:05}").write_bytes(os.urandom(64) * 16)
        tarball = d / f"small{files}.tar"
        run("tar", "-cf", tarball, "-C", tsrc.parent, "t")
        shutil.rmtree(tsrc.parent)
        return tarball

    def count_check(self, root):
        n = sum(1 for _ in os.scandir(root / "flat"))
        assert n == self.dir_files, f"{n} entries in flat, want {self.dir_files}"

    def meta_rows(self, W, metric, samples, floor_goal=1.5):
        """Quotes ubiquityfs's median against each baseline measured: the disk, the FUSE floors and rclone.
        Creating and deleting (Part 18) aim at 1.3 times the floor, reading metadata (Part 11) at 1.5."""
        u = median(samples["ubiquityfs"])
        goals = {"direct": ("≤3", lambda r: r <= 3),
                 "fuse floor": (f"≤{floor_goal}", lambda r: r <= floor_goal),
                 "bindfs": (None, None), "rclone": ("<1", lambda r: r < 1)}
        for base, (goal, ok) in goals.items():
            if not samples.get(base):
                continue
            b = median(samples[base])
            self.res.add(W, metric, "s", u, base, b, better="lower", goal=goal,
                         goal_ok=bool(ok and u is not None and b and ok(u / b)))

    def w4_reads(self, W, roots):
        def timed(cmd):
            def f(root):
                t0 = time.perf_counter()
                p = subprocess.run(["sh", "-c", cmd], cwd=root, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, timeout=900)
                if p.returncode != 0:
                    raise RuntimeError(f"{cmd}: {p.stderr.decode()[-300:]}")
                return time.perf_counter() - t0
            return f
        tests = [(f"ls -l of {self.dir_files} files", timed("ls -l flat")),
                 (f"stat of {self.dir_files} files", timed("cd flat && stat -- * ")),
                 (f"find over {self.tree_items} items", timed("find tree | wc -l"))]
        for metric, fn in tests:
            s, err = alternate(self.reps, {n: (lambda r=r, fn=fn: fn(r)) for n, r in roots.items()}, W)
            self.meta_rows(W, metric, s)

    def w4_creates(self, W, roots, tarballs):
        """Creates small files (a shell loop of empty files, tar x) and deletes them (rm -rf), in fresh folders."""
        k = [0]

        def rm_rf(name, dst, times=None):
            t0 = time.perf_counter()
            p = run("rm", "-rf", dst, timeout=900, check=False)
            if p.returncode == 0:
                if times is not None:
                    times[name].append(time.perf_counter() - t0)
                return
            # Not timed; note why, and clear the way for the next round.
            first = (p.stderr.strip().splitlines() or ["?"])[0]
            retry = time.perf_counter()
            wait_until(lambda: run("rm", "-rf", dst, check=False).returncode == 0, timeout=30,
                       interval=0.5, what="rm -rf on retry")
            FAILURES.append((f"{W} {name} rm -rf (round {k[0]})",
                             f"exit {p.returncode}: {first} (further errors: "
                             f"{len(p.stderr.strip().splitlines()) - 1}); a retry succeeded after "
                             f"{time.perf_counter() - retry:.1f} s"))

        def creating(name, root, cmd, rms=None):
            def f():
                k[0] += 1
                dst = root / f"x{k[0]}"
                dst.mkdir()
                t0 = time.perf_counter()
                run("sh", "-c", cmd, cwd=dst, timeout=900)
                secs = time.perf_counter() - t0
                rm_rf(name, dst, rms)
                return secs
            return f
        # A contender that fails (rclone's rm -rf right after tar x: its uploads still in flight) is left out of
        # the later rounds, which would otherwise wait for it each time.
        left_out = set()

        def measure(cmd, rms=None):
            live = {r: p for r, p in roots.items() if r not in left_out}
            s, err = alternate(min(self.reps, 3), {r: creating(r, p, cmd, rms) for r, p in live.items()}, W)
            left_out.update(err)
            return s
        n = self.loop_files
        self.meta_rows(W, f"shell loop creating {n} empty files",
                       measure(f'i=0; while [ $i -lt {n} ]; do : > f$i; i=$((i+1)); done'), floor_goal=1.3)
        # 10,000 files through five file systems take long: 3 rounds here keep the default run near 15 minutes.
        for files, tarball in tarballs:
            rms = {r: [] for r in roots}
            self.meta_rows(W, f"tar x of {files} files", measure(f"tar -xf {shlex.quote(str(tarball))}", rms),
                           floor_goal=1.3)
            self.meta_rows(W, f"rm -rf of {files} files", rms, floor_goal=1.3)
        if left_out:
            self.res.note(f"4: left out of the later create rounds after failing (see FAILED): "
                          f"{', '.join(sorted(left_out))}")

    # -------------------------------------------------------------- 5: propagation between two mounts
    def w5(self):
        W = "5 propagation"
        d = self.fresh("w5")
        stub = Stub(d / "remote").start()
        a = UbqMount(d / "a", stub, device="deviceA").mount()
        b = UbqMount(d / "b", stub, device="deviceB").mount()
        served = d / "served"
        served.mkdir()
        # rclone: webdav has no change notification, so a second mount sees a change only after
        # --dir-cache-time (default 5m; set to 1s here) and after the writer's --vfs-write-back (default 5s).
        rc_flags = ["--dir-cache-time", "1s", "--poll-interval", "1s"]
        rc = Rclone(d / "rclone", served).start()
        ra = rc.mount("a", rc_flags)
        rb = rc.mount("b", rc_flags)
        limit = 10.0 if self.quick else 20.0

        def prop(src_root, dst_root):
            k = [0]

            def f():
                k[0] += 1
                payload = f"version {k[0]} {time.time_ns()}\n".encode() * 64
                src, dst = src_root / "p.txt", dst_root / "p.txt"
                with open(src, "wb") as fh:
                    fh.write(payload)
                t0 = time.perf_counter()

                def seen():
                    try:
                        with open(dst, "rb") as fh:
                            return fh.read() == payload
                    except OSError:
                        return False
                try:
                    wait_until(seen, timeout=limit, interval=0.01, what="new content on the other mount")
                except TimedOut:
                    return float("inf")
                return time.perf_counter() - t0
            return f
        try:
            s, err = alternate(self.reps, {"ubiquityfs": prop(a / "Documents", b / "Documents"),
                                           "rclone": prop(ra, rb)}, W, skip_after=lambda v: v == float("inf"))
            u, r = median(s["ubiquityfs"]), median(s["rclone"])
            self.res.add(W, "close on A → new content readable on B", "s", u, "rclone (dir-cache 1s)", r,
                         better="lower", goal="<1 s", goal_ok=u is not None and u < 1)
            self.res.note("rclone over webdav has no change polling (--poll-interval does not apply): a second "
                          "mount sees a change after the writer's --vfs-write-back (default 5s) plus its own "
                          "--dir-cache-time (default 5m; 1s in this bench). inf = not seen within "
                          f"{limit:.0f} s (then not tried again).")
        finally:
            rc.stop()
            a.unmount()
            b.unmount()
            stub.stop()
            shutil.rmtree(d)

    # -------------------------------------------------------------- 7: propagation of many changes
    def w7(self):
        """N small files by `tar x` on device A until device B lists them all, then `rm -rf` of them until B
        lists none (ubiquitybench/propagation.py; once each: one round takes minutes), beside an older binary given by
        --old-bin, and with --engines also with the remote on PostgreSQL and SeaweedFS."""
        W = "7 many changes"
        n = 2000 if self.quick else 20000
        d = self.fresh("w7")
        tarball = prop.make_tarball(d, n, name="prop", seed=7)
        engines = Engines(d / "engines").start() if self.args.engines else None
        runs = {"ubiquityfs": (BIN, list)} | ({"old": (self.args.old_bin, list)} if self.args.old_bin else {}) \
            | ({"engines": (BIN, engines.serve_args)} if engines else {})
        res = {}
        for name, (binary, serve_args) in runs.items():
            with prop.Devices(binary, d / f"m-{name}", serve_args()) as dev:
                res[name] = prop.round_of(dev, tarball, n, 300)
            shutil.rmtree(d / f"m-{name}", ignore_errors=True)
        if engines:
            engines.stop()
        u, o, e = res["ubiquityfs"], res.get("old"), res.get("engines")
        for key, what in (("create", f"tar x of {n} small files on A → all listed on B, after tar ends"),
                          ("rm", f"rm -rf of the {n} on A → none listed on B, after rm ends")):
            self.res.add(W, what, "s", u[key], "old binary" if o else None, o[key] if o else None, better="lower",
                         goal="<15 s", goal_ok=u[key] < 15)
            if e:
                self.res.add(W, f"{what}, remote on {ENGINES_NAME}", "s", e[key], "embedded remote", u[key],
                             better="lower")
        self.res.note(f"7: tar x on A took {u['tar on A']:.1f} s and rm -rf {u['rm on A']:.1f} s; the pushes go "
                      "meanwhile, so 0 s means B showed it as the command returned.")
        if e:
            self.res.note(f"7 on {ENGINES_NAME}: tar x on A took {e['tar on A']:.1f} s and rm -rf "
                          f"{e['rm on A']:.1f} s; ratio = {ENGINES_NAME} ÷ embedded (SQLite and files).")
        shutil.rmtree(d, ignore_errors=True)

    # -------------------------------------------------------------- O: a change made while the remote is away
    def wO(self):
        """A file written on A while the remote is down (killed), then the remote started again after 12 s and
        after 60 s: the time from its restart to the file on B. Beside it, in the same run, the same change with
        the remote up (from the write to B). The goal: within 2 s of the return, whatever the outage's length."""
        W = "O remote away"
        d = self.fresh("wO")
        outages = [5, 20] if self.quick else [12, 60]
        up, back = [], {o: [] for o in outages}
        with prop.Devices(BIN, d / "m") as dev:
            a, b = dev.a / "Documents", dev.b / "Documents"
            for rep in range(self.reps):
                name = f"up-{rep}.txt"
                t0 = time.perf_counter()
                (a / name).write_text(f"written with the remote up, {rep}\n")
                seen = prop.until(lambda: (b / name).exists(), 60)
                up.append((seen - t0) if seen else float("inf"))
                for outage in outages:
                    dev.stub.proc.send_signal(signal.SIGKILL)
                    dev.stub.proc.wait(timeout=30)
                    dev.stub.stop()
                    name = f"away-{outage}-{rep}.txt"
                    (a / name).write_text(f"written with the remote away for {outage} s, {rep}\n")
                    time.sleep(outage)
                    dev.stub.start()
                    t1 = time.perf_counter()
                    seen = prop.until(lambda: (b / name).exists(), 120)
                    back[outage].append((seen - t1) if seen else float("inf"))
        for outage in outages:
            got = median(back[outage])
            self.res.add(W, f"a file written on A while the remote was away {outage} s: from its restart to B", "s",
                         got, "the same with the remote up, from the write", median(up), better="lower",
                         goal="<= 2 s", goal_ok=got <= 2, samples=back[outage])
        self.res.note("O: the remote is killed (kill -9) and started again on the same data and port; B's view is "
                      "polled every 0.1 s. A mount looks for an absent remote every second.")
        shutil.rmtree(d, ignore_errors=True)

    # -------------------------------------------------------------- 8: small files, by remote backend
    def w8(self):
        """`tar x` of N small files and a shell loop creating N empty files on one mount, each timed to the end
        of the command and to `sync --wait` (everything on the remote), on the embedded remote and, with
        --engines, on PostgreSQL and SeaweedFS, alternating."""
        W = "8 small files"
        n = self.tar_sizes[0]
        d = self.fresh("w8")
        tarball = self.make_tarball(d, n)
        backends = {"embedded": list}
        engines = Engines(d / "engines").start() if self.args.engines else None
        if engines:
            backends[ENGINES_NAME] = engines.serve_args
        mounts = {name: UbqMount(d / f"m-{i}", Stub(d / f"remote-{i}", serve_args()).start(), "device8").mount()
                  for i, (name, serve_args) in enumerate(backends.items())}
        k = [0]

        def timed_to_remote(m, cmd):
            k[0] += 1
            dst = m / "Documents" / f"x{k[0]}"
            dst.mkdir()
            t0 = time.perf_counter()
            run("sh", "-c", cmd, cwd=dst, timeout=900)
            done = time.perf_counter()
            run(BIN, "sync", "--wait", "--timeout", "600", m.path, timeout=660)
            return done - t0, time.perf_counter() - t0

        def sample(m):
            return {"tar": timed_to_remote(m, f"tar -xf {shlex.quote(str(tarball))}"),
                    "loop": timed_to_remote(m, f'i=0; while [ $i -lt {n} ]; do : > f$i; i=$((i+1)); done')}
        s, err = alternate(min(self.reps, 3), {name: (lambda m=m: sample(m)) for name, m in mounts.items()}, W)
        for key, what in (("tar", f"tar x of {n} small files"), ("loop", f"shell loop creating {n} empty files")):
            for j, end in ((0, "until the command ends"), (1, "until all is on the remote (sync --wait)")):
                fig = {name: median([x[key][j] for x in s[name]]) for name in mounts}
                if ENGINES_NAME in fig:
                    self.res.add(W, f"{what}, {end}, remote on {ENGINES_NAME}", "s",
                                 fig[ENGINES_NAME], "embedded remote", fig["embedded"], better="lower")
                else:
                    self.res.add(W, f"{what}, {end}", "s", fig["embedded"], better="lower")
        for m in mounts.values():
            m.unmount()
            m.stub.stop()
        if engines:
            engines.stop()
        shutil.rmtree(d, ignore_errors=True)

    # -------------------------------------------------------------- 6: resources
    def w6(self):
        W = "6 resources"
        tree_stub, _ = self.get_tree_stub()
        d = self.fresh("w6")
        # RSS with the big tree known
        try:
            tree_stub.start()
            m = UbqMount(d / "tree", tree_stub).mount()
            pid = m.pid()
            base = rss_kb(pid)
            t0 = time.perf_counter()
            n = int(run("sh", "-c", f"find {m / 'Documents/tree'} | wc -l", timeout=900).stdout)
            secs = time.perf_counter() - t0
            rss = rss_kb(pid)
            self.res.add(W, f"daemon RSS with {n} items known (find took {secs:.1f} s; {base / 1024:.0f} MB "
                         f"before find)", "MB", rss / 1024, better="lower", goal="<100 MB", goal_ok=rss / 1024 < 100)
            m.unmount()
            tree_stub.stop()
        except Exception as e:
            self.res.failed(W + " (RSS, items)", f"{type(e).__name__}: {e}")
            tree_stub.stop()
        # RSS growth during a large download
        src = d / "src"
        src.mkdir()
        make_file(src / "big.bin", self.large)
        stub = Stub(d / "remote")
        stub.seed(("Documents/big.bin", src / "big.bin"))
        shutil.rmtree(src)
        stub.start()
        try:
            m = UbqMount(d / "ubq", stub).mount()
            pid = m.pid()
            os.listdir(m / "Documents")
            time.sleep(0.5)
            before = rss_kb(pid)
            peak = [before]
            done = threading.Event()

            def sample():
                while not done.is_set():
                    try:
                        peak[0] = max(peak[0], rss_kb(pid))
                    except Exception:
                        pass
                    time.sleep(0.02)
            th = threading.Thread(target=sample)
            th.start()
            try:
                read_file(m / "Documents/big.bin")
            finally:
                done.set()
                th.join()
            self.res.add(W, f"RSS growth during a {self.large // MiB} MiB download (peak {peak[0] / 1024:.0f} MB)",
                         "MB", (peak[0] - before) / 1024, better="lower", goal="<16 MB",
                         goal_ok=(peak[0] - before) / 1024 < 16)
            # fds across open/close cycles
            f = m / "Documents/big.bin"
            f0 = nfds(pid)
            fmax = f0
            step = self.fd_cycles // 10
            for i in range(self.fd_cycles):
                fd = os.open(f, os.O_RDONLY)
                os.read(fd, 4096)
                os.close(fd)
                if i % step == step - 1:
                    fmax = max(fmax, nfds(pid))
            time.sleep(0.2)
            f1 = nfds(pid)
            self.res.add(W, f"daemon open fds over {self.fd_cycles} open/close cycles: before {f0}, after {f1}, "
                         f"max {fmax}", "fds", f1 - f0, better="lower", goal="flat", goal_ok=f1 - f0 <= 0 and fmax - f0 < 4)
            m.unmount()
        finally:
            stub.stop()
            shutil.rmtree(d)

    # -------------------------------------------------------------- driver
    def wL(self):
        """A million items (goal 5): ubiquitybench/million.py, reported against the old binary when given."""
        items = 100_000 if self.quick else 1_000_000
        argv = [sys.executable, "-m", "ubiquitybench.million", "--new", BIN, "--items", str(items),
                "--work", str(self.work / "million")]
        if self.args.large_old:
            argv += ["--old", self.args.large_old]
        out = run(*argv, timeout=7200, cwd=ROOT / "bench").stdout
        print(out, flush=True)
        line = next(l for l in out.splitlines() if l.startswith("RESULT "))
        r = json.loads(line[len("RESULT "):])
        new, old = r["new"], r.get("old") or {}
        w = f"L: {items:,} items"
        # The goals are for a million items; a smaller run (--quick) is reported without them.
        def goal(text, ok):
            return {"goal": text, "goal_ok": ok} if items >= 1_000_000 else {}
        if items < 1_000_000:
            self.res.note("L: the goals (300 MB, 3 s, 1 s) are for 1,000,000 items: `--large` without --quick")
        self.res.add(w, "RSS after remount", "MB", new["rss2_mb"], "old binary", old.get("rss2_mb"), better="lower",
                     **goal("<= 300 MB", new["rss2_mb"] <= 300))
        self.res.add(w, "RSS per item", "B", new["bytes_per_item"], "old binary", old.get("bytes_per_item"),
                     better="lower")
        self.res.add(w, "peak RSS of the first pull", "MB", new["hwm_mb"], "old binary", old.get("hwm_mb"),
                     better="lower")
        self.res.add(w, "remount until ready", "s", new["remount_s"], "old binary", old.get("remount_s"),
                     better="lower", **goal("<= 3 s", new["remount_s"] <= 3))
        self.res.add(w, "ls -f of 100,000: longest pause", "ms", new["ls_gap_s"] * 1000, "old binary",
                     old["ls_gap_s"] * 1000 if old else None, better="lower",
                     **goal("<= 1000 ms", new["ls_gap_s"] <= 1))
        self.res.add(w, "first pull of the container", "s", new["pull_s"], "old binary", old.get("pull_s"),
                     better="lower")

    def wW(self):
        """Watchers (Part 19): this mount's own requests while a burst of creates arrives from another device,
        with and without a watcher on it (ubiquitybench/burst.py)."""
        items = 5_000 if self.quick else 20_000
        argv = [sys.executable, "-m", "ubiquitybench.burst", "--bin", BIN, "--items", str(items),
                "--rounds", "1" if self.quick else "3", "--work", str(self.work / "burst")]
        out = run(*argv, timeout=3600, cwd=ROOT / "bench").stdout
        print(out, flush=True)
        line = next(l for l in out.splitlines() if l.startswith("RESULT "))
        r = json.loads(line[len("RESULT "):])
        idle, burst, watched = r["idle"], r["burst"], r["watched"]
        w = f"W: {items:,} creates from elsewhere"
        self.res.add(w, "own work (2,000 files made, stat'ed, removed), watched burst", "s", watched["own_s"],
                     "idle", idle["own_s"], better="lower", goal="<= 1.1x idle",
                     goal_ok=watched["own_s"] <= 1.1 * idle["own_s"])
        self.res.add(w, "own work, watched burst", "s", watched["own_s"], "unwatched burst", burst["own_s"],
                     better="lower")
        self.res.add(w, "burst listed whole, watched", "s", watched["listed_s"], "unwatched", burst["listed_s"],
                     better="lower")

    def wC(self):
        """Content in chunks (Part 16): the cut and hashes on one core against sha256sum (what moves on the wire:
        workload D)."""
        W = "C chunks"
        d = self.fresh("wC")
        size = self.large
        big = d / "big.bin"
        random_file(big, size)
        one_core = ["taskset", "-c", "0"]

        def timed(*argv):
            def f():
                t0 = time.perf_counter()
                run(*one_core, *argv)
                return mbps(size, time.perf_counter() - t0)
            return f
        read_file(big)  # warm: the page cache holds it, so both read at memory speed
        s, _ = alternate(self.reps, {"chunks": timed(BIN, "chunks", "--summary", big),
                                     "sha256sum": timed("sha256sum", big)}, W)
        ubq = median(s["chunks"])
        self.res.add(W, f"cut + SHA-256 of each chunk, warm {size // MiB} MiB, one core", "MB/s", ubq,
                     "sha256sum (whole file)", median(s["sha256sum"]), goal=">= 1000 MB/s",
                     goal_ok=ubq is not None and ubq >= 1000, samples=s)

    # -------------------------------------------------------------- D: only what changed travels
    def wD(self):
        """Content in chunks on the wire (Part 16): the bytes that small changes move between two real mounts,
        read at the remote (its counters of blob bytes stored and served), beside what the wire before chunks
        moved for the same work (every version whole: the file's size); an upload and a download cut by kill -9
        of the remote and resumed (wD_resume), and 16 cold files read at once against 16 curls (wD_many). On the
        embedded remote, and with --engines on PostgreSQL + SeaweedFS too."""
        self.wD_on("embedded", ())
        if self.args.engines:
            engines = Engines(self.work / "wD-engines").start()
            try:
                self.wD_on(ENGINES_NAME, engines.serve_args())
            finally:
                engines.stop()

    def wD_on(self, backend, serve_args):
        W = f"D wire, {backend}"
        d = self.fresh("wD")
        size = self.cold
        mib = size // MiB
        stub = Stub(d / "remote", serve_args=serve_args).start()
        a = UbqMount(d / "a", stub, device="deviceA").mount()
        b = UbqMount(d / "b", stub, device="deviceB").mount()
        stored = (lambda: int(run("du", "-sb", stub.data / "blobs").stdout.split()[0])) if not serve_args else None

        def moved():
            s = stub.stats()
            return s["blobBytesIn"], s["blobBytesOut"]

        def step(change, on=a, readers=(b,)):
            """Makes a change on one mount, waits until it is on the remote and read on the others; answers the
            bytes that went up and came down meanwhile."""
            up0, down0 = moved()
            names = change()
            run(BIN, "sync", "--wait", "--timeout", "900", on.path, timeout=1000)
            for m in readers:
                for name in names:
                    want = (on.path / "Documents" / name).stat().st_size
                    path = m.path / "Documents" / name
                    wait_until(lambda: path.exists() and path.stat().st_size == want and
                               run("getfattr", "-n", "user.ubiquity.downloadingStatus", "--only-values", path,
                                   check=False).stdout != "current", timeout=300, what=f"{name} on the other device")
                    read_file(path)
            up1, down1 = moved()
            return up1 - up0, down1 - down0

        def flip(path, offset):
            with open(path, "r+b") as f:
                f.seek(offset)
                byte = f.read(1)[0]
                f.seek(offset)
                f.write(bytes([byte ^ 0xFF]))

        def row(metric, got, whole, goal, limit):
            self.res.add(W, metric, "MiB", got / MiB, "whole file", whole / MiB, better="lower", goal=goal,
                         goal_ok=got <= limit)
        try:
            src = d / "big.bin"
            random_file(src, size)
            big = a.path / "Documents" / "big.bin"
            step(lambda: (shutil.copyfile(src, big), ["big.bin"])[1])
            up, down = step(lambda: (flip(big, size // 2), ["big.bin"])[1])
            row(f"1 byte changed in the middle of {mib} MiB: up", up, size, "<= 8 MiB", 8 * MiB)
            row(f"1 byte changed in the middle of {mib} MiB: down to the other device", down, size, "<= 8 MiB",
                8 * MiB)
            def append():
                with open(big, "ab") as f:
                    f.write(os.urandom(MiB))
                return ["big.bin"]
            up, _ = step(append)
            row(f"1 MiB appended to {mib} MiB: up", up, size + MiB, "<= 1 MiB + 2 chunks", 9 * MiB)
            up, _ = step(lambda: (run("cp", big, a.path / "Documents" / "copy.bin"), ["copy.bin"])[1])
            row(f"cp of {mib} MiB to a new name in the mount: up", up, size + MiB, "<= 1 MiB", MiB)
            before = stored() if stored else None
            up, _ = step(lambda: (shutil.copyfile(src, b.path / "Documents" / "same.bin"), ["same.bin"])[1],
                         on=b, readers=())
            row(f"the same {mib} MiB written on the other device: up", up, size, "<= 1 MiB", MiB)
            if stored:
                row(f"the same {mib} MiB written on the other device: stored anew", stored() - before, size,
                    "<= 1 MiB", MiB)
            if stored:
                first = stored()
                for i in range(10):
                    step(lambda i=i: (flip(big, (i + 1) * size // 12), ["big.bin"])[1], readers=())
                grown = stored() - first
                row(f"10 versions of {mib} MiB, 1 byte changed each: stored anew", grown, 10 * size,
                    "<= 0.2 x one version", size // 5)
            self.wD_cold(W, d, stub, big)
            sparse = a.path / "Documents" / "sparse.img"

            def make_sparse():
                with open(sparse, "wb") as f:
                    f.truncate(4096 * MiB)
                    f.seek(2048 * MiB)
                    f.write(os.urandom(MiB))
                return ["sparse.img"]
            up, down = step(make_sparse)
            row("4 GiB from truncate with 1 MiB written: up", up, 4096 * MiB, "<= 2 MiB", 2 * MiB)
            row("4 GiB from truncate with 1 MiB written: down", down, 4096 * MiB, "<= 2 MiB", 2 * MiB)
            self.wD_sqlite(W, a, step, row)
            self.wD_many(W, d, stub, a, b, moved)
            self.wD_resume(W, stub, a, b, moved, row)
            self.res.note(f"D ({backend}): bytes counted by the remote (blob bodies stored, and served); the "
                          "baseline is what the wire before chunks moved for the same work: each version whole")
        finally:
            a.unmount()
            b.unmount()
            stub.stop()
            shutil.rmtree(d)

    def wD_cold(self, W, d, stub, big):
        """A cold open and read of a file kept in chunks on a fresh device, beside curl's one GET of the same
        content (the stub streams it from the chunks)."""
        sha = sha256_file(big)
        size = big.stat().st_size
        rounds = [0]

        def ubq_cold():
            rounds[0] += 1
            m = UbqMount(d / f"cold{rounds[0]}", stub, device=f"cold{rounds[0]}").mount()
            try:
                drop_caches()
                secs, n = read_file(m.path / "Documents" / big.name)
                assert n == size
                return secs
            finally:
                m.unmount()
                shutil.rmtree(d / f"cold{rounds[0]}", ignore_errors=True)

        def curl_cold():
            drop_caches()
            return curl_get(stub.blob_url(sha), stub.token)
        s, _ = alternate(self.reps, {"ubiquityfs": ubq_cold, "curl": curl_cold}, W)
        u, c = median(s["ubiquityfs"]), median(s["curl"])
        self.res.add(W, f"cold open + read of {size // MiB} MiB kept in chunks, total time", "s", u,
                     "curl (one GET)", c, better="lower", goal="<= 1.0", goal_ok=u is not None and c and u / c <= 1.0,
                     samples=s)

    def wD_many(self, W, d, stub, a, b, moved):
        """16 cold files at once on the other device (16 `cat`s, each open a download of a file kept in chunks),
        beside 16 curl GETs at once of the same versions (the stub streams each from its chunks); alternating,
        the files evicted and the page cache dropped before each round."""
        n, each = 16, self.many_size
        total = n * each
        folder = a.path / "Documents" / "many16"
        folder.mkdir()
        shas = [random_file_sha(folder / f"f{i:02}.bin", each) for i in range(n)]
        run(BIN, "sync", "--wait", "--timeout", "900", a.path, timeout=1000)
        there = b.path / "Documents" / "many16"
        paths = [there / f"f{i:02}.bin" for i in range(n)]
        wait_until(lambda: all(p.exists() and p.stat().st_size == each for p in paths), timeout=300,
                   what="the 16 files on the other device")
        auth = curl_auth(stub.token)
        # Per round: the readers (cat or curl), the other device's daemon, the remote, the whole machine.
        cpu = {"ubiquityfs": [], "curl": []}

        def concurrently(argvs, name):
            """Starts every command at once; answers the seconds until the last one ended."""
            pids = (b.pid(), stub.proc.pid)
            c0 = (children_cpu(), *map(process_cpu, pids), machine_cpu())
            t0 = time.perf_counter()
            procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for argv in argvs]
            errs = [(p.wait(timeout=900), p.stderr.read().decode(errors="replace").strip()) for p in procs]
            secs = time.perf_counter() - t0
            cpu[name].append([x1 - x0 for x0, x1 in zip(c0, (children_cpu(), *map(process_cpu, pids), machine_cpu()))])
            for p in procs:
                p.stderr.close()
            bad = [e for e in errs if e[0] != 0]
            if bad:
                raise RuntimeError(f"{len(bad)} of {len(procs)} failed, e.g. exit {bad[0][0]}: {bad[0][1]}")
            return secs

        def ubq():
            run("setfattr", "-n", "user.ubiquity.evict", there)
            drop_caches()
            down0 = moved()[1]
            secs = concurrently([["cat", p] for p in paths], "ubiquityfs")
            served = moved()[1] - down0
            if served < total:  # each open must have downloaded its file whole
                raise RuntimeError(f"the remote served {served} bytes of {total}: not every open was cold")
            return mbps(total, secs)

        def curl():
            drop_caches()
            return mbps(total, concurrently([["curl", "-sS", "-f", "-o", "/dev/null", "-H", auth, stub.blob_url(sha)]
                                             for sha in shas], "curl"))
        s, _ = alternate(min(self.reps, 3), {"ubiquityfs": ubq, "curl": curl}, W)
        wrong = [p.name for p, sha in zip(paths, shas) if sha256_file(p) != sha]
        if wrong:
            raise RuntimeError(f"the other device read other bytes for {wrong}")
        u, c = median(s["ubiquityfs"]), median(s["curl"])
        self.res.add(W, f"16 cold files x {each // MiB} MiB kept in chunks, 16 cat at once: aggregate", "MB/s", u,
                     "curl (16 GETs at once)", c, goal=">= 0.9", goal_ok=u is not None and c and u / c >= 0.9,
                     samples=s)
        used = {name: [median([r[k] for r in rounds]) for k in range(4)] for name, rounds in cpu.items() if rounds}
        if len(used) == 2:
            ub, cu = used["ubiquityfs"], used["curl"]
            self.res.note(f"D 16 cold files ({W.split(', ', 1)[1]}): CPU-seconds per round of {total // MiB} MiB "
                          f"(medians): ubiquityfs {sum(ub[:3]):.2f} = the daemon {ub[1]:.2f} + the remote {ub[2]:.2f} "
                          f"+ the 16 cat {ub[0]:.2f}; curl {sum(cu[:3]):.2f} = the remote {cu[2]:.2f} + the 16 curl "
                          f"{cu[0]:.2f}; the machine in all (storage engines, kernel threads, anything else running): "
                          f"{ub[3]:.2f} and {cu[3]:.2f}; {os.cpu_count()} cores. Rounds (MB/s): ubiquityfs "
                          f"{', '.join(f'{x:.0f}' for x in s['ubiquityfs'])}; curl {', '.join(f'{x:.0f}' for x in s['curl'])}")

    def wD_resume(self, W, stub, a, b, moved, row):
        """An upload of 1 GiB cut by `kill -9` of the remote at 70% and resumed once a new remote process runs on
        the same data; then the same for a cold download on the other device (`cat`, whose open waits for the
        whole file). What the remote received (served) in all is its counter at the cut plus the new process's
        (which starts at zero), beside the file once; a transfer that started again from zero would move 1.7x."""
        size = self.large
        label = f"{size // MiB} MiB" if size < 1024 * MiB else f"{size / (1024 * MiB):g} GiB"
        cut_at = 0.7
        path = a.path / "Documents" / "resume.bin"

        def uploaded():
            try:
                return os.getxattr(path, "user.ubiquity.isUploaded") == b"1"
            except OSError:
                return False

        def reached(count, ended):
            """The bytes counted once they reach the cut; True if the transfer ended first."""
            return count if count >= cut_at * size else ended()
        # Up: 1 GiB of random bytes written on A; the remote is killed once 70% of it has arrived.
        up0 = moved()[0]
        sha = random_file_sha(path, size)
        at = wait_until(lambda: reached(moved()[0] - up0, uploaded), timeout=900, interval=0.02,
                        what=f"{cut_at:.0%} of the upload")
        if at is True or at >= size:
            raise RuntimeError("the upload ended before the remote could be cut")
        restart = kill9_and_restart(stub)
        t0 = time.perf_counter()
        wait_until(uploaded, timeout=900, interval=0.05, what="isUploaded = 1 after the restart")
        resumed = time.perf_counter() - t0
        again = moved()[0]
        row(f"{label} upload cut by kill -9 of the remote at {at / size:.0%}, then resumed: received in all", at + again,
            size, "<= 1.35 x the file", 1.35 * size)
        self.res.note(f"D resume up: the remote counted {at / MiB:.0f} MiB before the kill and {again / MiB:.0f} MiB "
                      f"after its restart ({restart:.2f} s); isUploaded = 1 {resumed:.1f} s after the restart. Against "
                      f"a restart from zero ({(at + size) / MiB:.0f} MiB): {(at + again) / (at + size):.2f}. The "
                      "remote counts a chunk once stored; the count before the kill is the last read, a few ms before "
                      "it, so chunks in flight at the kill (4 at once, each at most 4 MiB) count nowhere.")
        # Down: a cold `cat` of the file on B; the remote is killed once it has started 70% in chunk GETs.
        other = b.path / "Documents" / "resume.bin"
        wait_until(lambda: other.exists() and other.stat().st_size == size, timeout=300, what="resume.bin on B")
        drop_caches()
        down0 = moved()[1]
        t0 = time.perf_counter()
        cat = subprocess.Popen(["cat", other], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ended = []
        waiter = threading.Thread(target=lambda: (cat.wait(), ended.append(time.perf_counter())), daemon=True)
        waiter.start()
        at = wait_until(lambda: reached(moved()[1] - down0, lambda: cat.poll() is not None), timeout=900,
                        interval=0.02, what=f"{cut_at:.0%} of the download")
        if at is True or at >= size:
            raise RuntimeError(f"the cold cat ended (exit {cat.returncode}) before the remote could be cut")
        killed = time.perf_counter()
        restart = kill9_and_restart(stub)
        t1 = time.perf_counter()
        waiter.join(timeout=900)
        rc = cat.returncode
        if rc is None:
            raise RuntimeError("the cold cat hung for 15 minutes after the restart")
        err = cat.stderr.read().decode(errors="replace").strip()
        cat.stderr.close()
        outcome = (f"the cat went on and ended well, {ended[0] - t1:.1f} s after the restart" if rc == 0 else
                   f"the cat failed {ended[0] - killed:.2f} s after the kill (exit {rc}: {err})")
        tries = 0
        while rc != 0 and tries < 3:  # an open that failed while the remote was away: open again
            tries += 1
            got = subprocess.run(["cat", other], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 timeout=900)
            rc = got.returncode
            outcome += f"; cat again {'ended well' if rc == 0 else f'failed (exit {rc}: {got.stderr.strip()})'}"
        done = time.perf_counter()
        again = moved()[1]
        if tries:
            outcome += f", {done - t1:.1f} s after the restart"
        if rc != 0:
            raise RuntimeError(f"the download did not resume: {outcome}")
        row(f"{label} download cut by kill -9 of the remote at {at / size:.0%}, then resumed: served in all",
            at + again, size, "<= 1.35 x the file", 1.35 * size)
        self.res.note(f"D resume down: the remote counted {at / MiB:.0f} MiB before the kill and {again / MiB:.0f} MiB "
                      f"after its restart ({restart:.2f} s); {outcome} ({done - t0:.1f} s from the first open). "
                      f"Against a restart from zero ({(at + size) / MiB:.0f} MiB): {(at + again) / (at + size):.2f}. "
                      "The remote counts a chunk GET whole as it starts; the count before the kill is the last read, "
                      "a few ms before it (GETs started in between count nowhere).")
        if sha256_file(other) != sha:
            raise RuntimeError("the other device read other bytes than were written")

    def wD_sqlite(self, W, a, step, row):
        """An SQLite database of 100 MiB held open by its program, one row updated and committed."""
        import sqlite3
        db = a.path / "Documents" / "app.sqlite"
        rows = 100 * 1024  # of 1000 bytes each, four to a page: about 100 MiB
        conn = sqlite3.connect(db)
        try:
            def fill():
                conn.execute("create table t (id integer primary key, v blob)")
                conn.executemany("insert into t (v) values (?)", ((os.urandom(1000),) for _ in range(rows)))
                conn.commit()
                return []
            step(fill, readers=())
            size = db.stat().st_size

            def update():
                conn.execute("update t set v = ? where id = ?", (os.urandom(1000), rows // 2))
                conn.commit()
                return []
            up, _ = step(update, readers=())
            row(f"SQLite database of {size // MiB} MiB held open, one row updated: up", up, size, "<= 5 MiB",
                5 * MiB)
        finally:
            conn.close()

    def run(self, which):
        names = {"1": self.w1, "2": self.w2, "3": self.w3, "4": self.w4, "5": self.w5, "6": self.w6, "7": self.w7,
                 "8": self.w8, "L": self.wL, "C": self.wC, "D": self.wD, "W": self.wW, "O": self.wO}
        for key in which:
            fn = names[key]
            print(f"== workload {key}: {fn.__name__} ({'quick' if self.quick else 'default'}, {self.reps} reps)",
                  flush=True)
            t0 = time.perf_counter()
            try:
                fn()
            except Exception as e:
                self.res.failed(f"workload {key}", f"{type(e).__name__}: {e}")
                traceback.print_exc()
            finally:
                CLEANUP.run()
                try:
                    os.sync()
                except Exception:
                    pass
            print(f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
        if self.tree_stub:
            shutil.rmtree(self.work / "tree", ignore_errors=True)
