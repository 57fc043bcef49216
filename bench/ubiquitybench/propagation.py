"""Propagation of many changes between two devices, old binary against new, alternating in one run (Part 11,
goal 4).

Each round starts a stub (`remote serve`) and two mounts of it, A and B, with each binary in turn (the order
swaps every round) and times, from the end of the command on A to the moment B shows the result:
  create  `tar x` on A of N small files (1-4 KiB, random bytes) into one new folder; until B lists all N
  rm      `rm -rf` of that folder on A; until B no longer lists it
(0.00 when B had it already as the command returned: the pushes keep pace with it.) Also printed: the command's
own time on A, and the time from its start to B showing the result.
The goal: both within 15 s for N = 20,000.

usage: python3 -m ubiquitybench.propagation --new BIN [--old BIN] [--rounds N] [--files N] [--work DIR] [--timeout S]
Run as root (FUSE mounts). Stdlib only.
"""
import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from .common import make_tarball, run
from .harness import Mount, Stub

CONTAINER = "iCloud.com.example.propagation"


class Devices:
    """A stub and two mounts of it (A and B) by one binary; `serve_args` go to the stub's `remote serve` (e.g.
    --metadata and --blobs for a remote on PostgreSQL and S3)."""

    def __init__(self, binary: str, root: Path, serve_args=()):
        self.stub = Stub(root / "remote", extra=serve_args, container=CONTAINER, binary=binary)
        self.mounts = [Mount(root / name, self.stub, "device" + name.upper(), log_level=None, container=CONTAINER,
                             binary=binary) for name in ("a", "b")]
        self.a, self.b = (m.path for m in self.mounts)

    def __enter__(self):
        self.stub.start()
        for m in self.mounts:
            m.mount(timeout=120)
        return self

    def __exit__(self, *exc):
        for m in self.mounts:
            m.unmount(timeout=300)
        self.stub.stop()


def until(pred, timeout):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if pred():
            return time.perf_counter()
        time.sleep(0.1)
    return None


def count(path: Path):
    try:
        return sum(1 for _ in os.scandir(path))
    except OSError:
        return -1


def round_of(d: Devices, tarball: Path, n: int, timeout: float):
    src, dst = d.a / "Documents", d.b / "Documents" / "t"
    t0 = time.perf_counter()
    run("tar", "-xf", tarball, cwd=src, timeout=900)
    made = time.perf_counter()
    seen = until(lambda: count(dst) == n, timeout)
    create = (seen - made) if seen else float("inf")
    if seen is None:  # let the rest arrive, so the rm is of all of them
        until(lambda: count(dst) == n, 900)
    r0 = time.perf_counter()
    run("rm", "-rf", src / "t", timeout=900)
    removed = time.perf_counter()
    gone = until(lambda: not (d.b / "Documents" / "t").exists(), timeout)
    rm = (gone - removed) if gone else float("inf")
    return {"create": create, "rm": rm, "tar on A": made - t0, "rm on A": removed - r0,
            "create, from the start of tar": (seen - t0) if seen else float("inf"),
            "rm, from the start of rm": (gone - r0) if gone else float("inf")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old")
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--timeout", type=float, default=600, help="longest wait for B, seconds (then inf)")
    ap.add_argument("--work", default="/var/tmp/propagation")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("propagation: run as root (mounts)")
    work = Path(args.work)
    for old in work.glob("m-*"):
        shutil.rmtree(old)
    work.mkdir(parents=True, exist_ok=True)
    tarball = make_tarball(work, args.files, name="prop", seed=7)
    bins = {"new": args.new} | ({"old": args.old} if args.old else {})
    times = {b: {} for b in bins}
    for r in range(args.rounds):
        order = list(bins) if r % 2 == 0 else list(reversed(bins))
        for b in order:
            with Devices(bins[b], work / f"m-{b}-{r}") as d:
                res = round_of(d, tarball, args.files, args.timeout)
            for k, v in res.items():
                times[b].setdefault(k, []).append(v)
            print(f"round {r + 1} {b}: " + "  ".join(f"{k} {v:.2f}s" for k, v in res.items()), flush=True)
            shutil.rmtree(work / f"m-{b}-{r}", ignore_errors=True)
    print(f"\n{args.files} files, {args.rounds} round(s); median seconds from the end of the command on A to B")
    print(f"{'workload':30} " + " ".join(f"{b:>8}" for b in bins) + ("   new/old" if "old" in bins else ""))
    for k in times["new"]:
        med = {b: statistics.median(times[b][k]) for b in bins}
        ratio = f"   {med['new'] / med['old']:.3f}" if "old" in bins and med["old"] not in (0, float("inf")) else ""
        print(f"{k:30} " + " ".join(f"{med[b]:8.2f}" for b in bins) + ratio)


if __name__ == "__main__":
    main()
