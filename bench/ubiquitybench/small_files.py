"""Small files and metadata, old binary against new, alternating in one run (Part 11, goal 3).

Each round mounts a fresh store on a fresh embedded stub with each binary in turn (the order swaps every
round) and times, on that mount:
  tar   `tar x` of N small files (1-4 KiB, random bytes) into one folder
  ls    `ls -l` of that folder, the kernel's dentries and inodes dropped first (the daemon answers every
        entry); the median of 3
  loop  a shell loop creating N empty files (`: > fI`)
With --drain the uploads of one workload finish (`ubiquityfs sync --wait`) before the next starts, so each is
timed alone; without it the pusher competes, as it does for a user.
The median of each binary is quoted, and new/old (below 1: the new binary is faster).

usage: python3 -m ubiquitybench.small_files --old BIN --new BIN [--rounds N] [--files N] [--drain] [--work DIR]
       python3 -m ubiquitybench.small_files --perf OUT.data --new BIN [--files N]   (one mount, `perf record -g` on its daemon)
Run as root (drop_caches). Stdlib only.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from . import harness
from .common import make_tarball

CONTAINER = "iCloud.com.example.smallfiles"


class Mount(harness.Mount):
    """A mount of a fresh store on its own embedded stub, by one binary (a context manager).

    The daemon stops the embedded stub it started, and `unmount` waits for the daemon. The store stays until the
    run ends: ext4 without a journal (this machine's) skips inodes deleted in the last 5-30 s, reading each one's
    table entry, so deleting thousands of files just before a round slows its creates."""

    def __init__(self, binary: str, root: Path):
        super().__init__(root, None, "smallfiles", log_level=None, container=CONTAINER, binary=binary)
        self.mnt = self.path

    def __enter__(self):
        self.mount(timeout=120)
        return self

    def __exit__(self, *exc):
        self.unmount(timeout=120)

    def daemon_pid(self) -> int:
        return self.daemon_pids()[0]

    def drain(self):
        self.sync(timeout=900)


def timed(cmd, cwd):
    t0 = time.perf_counter()
    p = subprocess.run(["sh", "-c", cmd], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=900)
    if p.returncode != 0:
        raise harness.CommandFailed(f"{cmd}: {p.stderr.decode()[-300:]}")
    return time.perf_counter() - t0


def workloads(m: Mount, tarball: Path, n: int, drain: bool):
    w = m.mnt / "w"
    w.mkdir()
    (w / "loop").mkdir()
    out = {"tar": timed(f"tar -xf {tarball}", w)}
    if drain:
        m.drain()
    lss = []
    for _ in range(3):
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("2\n")  # dentries and inodes only: the daemon answers
        lss.append(timed("ls -l t", w))
    out["ls"] = statistics.median(lss)
    if drain:
        m.drain()
    out["loop"] = timed(f"i=0; while [ $i -lt {n} ]; do : > f$i; i=$((i+1)); done", w / "loop")
    return out


def fresh_work(path: str) -> Path:
    work = Path(path)
    left = list(work.glob("m-*"))
    for old in left:
        shutil.rmtree(old)
    if left:
        time.sleep(30)  # past ext4's window of recently deleted inodes (see Mount.__exit__)
    work.mkdir(parents=True, exist_ok=True)
    return work


def compare(args):
    work = fresh_work(args.work)
    tarball = make_tarball(work, args.files, name="small", seed=11)
    bins = {"old": args.old, "new": args.new}
    times = {b: {"tar": [], "ls": [], "loop": []} for b in bins}
    for r in range(args.rounds):
        order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for b in order:
            with Mount(bins[b], work / f"m-{b}-{r}") as m:
                res = workloads(m, tarball, args.files, args.drain)
            for k, v in res.items():
                times[b][k].append(v)
            print(f"round {r + 1} {b}: " + "  ".join(f"{k} {v:.3f}s" for k, v in res.items()), flush=True)
    print(f"\n{args.files} files, {args.rounds} rounds, drain={args.drain}; median seconds")
    print(f"{'workload':8} {'old':>8} {'new':>8} {'new/old':>8}")
    for k in ("tar", "ls", "loop"):
        o, n = statistics.median(times["old"][k]), statistics.median(times["new"][k])
        print(f"{k:8} {o:8.3f} {n:8.3f} {n / o:8.2f}")
    for old in work.glob("m-*"):
        shutil.rmtree(old)


def profile(args):
    work = fresh_work(args.work)
    tarball = make_tarball(work, args.files, name="small", seed=11)
    with Mount(args.new, work / "m-perf") as m:
        perf = subprocess.Popen(["perf", "record", "-g", "-F", str(args.freq), "-o", args.perf,
                                 "-p", str(m.daemon_pid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        res = workloads(m, tarball, args.files, args.drain)
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
    print("  ".join(f"{k} {v:.3f}s" for k, v in res.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old")
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--drain", action="store_true")
    ap.add_argument("--work", default="/tmp/small-files")
    ap.add_argument("--perf")
    ap.add_argument("--freq", type=int, default=999)
    args = ap.parse_args()
    if args.perf:
        return profile(args)
    if not args.old:
        sys.exit("--old is needed to compare")
    compare(args)


if __name__ == "__main__":
    main()
