#!/usr/bin/python3
"""Propagation of many changes between two devices, old binary against new, alternating in one run (Part 11,
goal 4).

Each round starts a stub (`remote serve`) and two mounts of it, A and B, with each binary in turn (the order
swaps every round) and times, from the end of the command on A to the moment B shows the result:
  create  `tar x` on A of N small files (1-4 KiB, random bytes) into one new folder; until B lists all N
  rm      `rm -rf` of that folder on A; until B no longer lists it
(0.00 when B had it already as the command returned: the pushes keep pace with it.) Also printed: the command's
own time on A, and the time from its start to B showing the result.
The goal: both within 15 s for N = 20,000.

usage: bench/propagation.py --new BIN [--old BIN] [--rounds N] [--files N] [--work DIR] [--timeout S]
Run as root (FUSE mounts). Stdlib only.
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

CONTAINER = "iCloud.com.example.propagation"


def run(*args, check=True, timeout=600, **kw):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return p


def make_tarball(work: Path, n: int) -> Path:
    tarball = work / f"prop-{n}.tar"
    if tarball.exists():
        return tarball
    src = work / "tarsrc" / "t"
    src.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(7)
    for i in range(n):
        (src / f"f{i:05}").write_bytes(rnd.randbytes(rnd.randint(1024, 4096)))
    with tarfile.open(tarball, "w") as t:
        t.add(src, arcname="t")
    shutil.rmtree(work / "tarsrc")
    return tarball


def mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines())


class Devices:
    """A stub and two mounts of it (A and B) by one binary; `serve_args` go to the stub's `remote serve` (e.g.
    --metadata and --blobs for a remote on PostgreSQL and S3)."""

    def __init__(self, binary: str, root: Path, serve_args=()):
        self.bin, self.root = binary, root
        self.serve_args = [str(a) for a in serve_args]
        self.stub = None
        self.a, self.b = root / "a" / "mnt", root / "b" / "mnt"

    def __enter__(self):
        data = self.root / "remote"
        data.mkdir(parents=True)
        ep = data / "endpoint"
        log = open(data / "stub.log", "ab")
        self.stub = subprocess.Popen([self.bin, "remote", "serve", "--data", data, "--listen", "127.0.0.1:0",
                                      "--endpoint-file", ep, *self.serve_args], stdout=log, stderr=log)
        for _ in range(300):
            if ep.exists() and ep.read_text().strip():
                break
            time.sleep(0.05)
        url = ep.read_text().strip()
        for name, mnt in (("A", self.a), ("B", self.b)):
            mnt.mkdir(parents=True)
            run(self.bin, "mount", mnt, "--remote", url, "--token-file", data / "token", "--container", CONTAINER,
                "--store", mnt.parent / "store", "--device", "device" + name, timeout=120)
        return self

    def __exit__(self, *exc):
        for mnt in (self.a, self.b):
            if mounted(mnt):
                if run(self.bin, "unmount", mnt, check=False, timeout=300).returncode != 0:
                    run("fusermount3", "-u", "-z", mnt, check=False)
        if self.stub:
            self.stub.terminate()
            self.stub.wait(30)


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
    tarball = make_tarball(work, args.files)
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
