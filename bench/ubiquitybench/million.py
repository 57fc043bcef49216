"""A container of many items (Part 11, goal 5), old binary against new, alternating in one run.

One stub is seeded once with N empty files (`ubiquityfs remote seed --items N`: 100,000 in one folder, the rest
in folders of 1,000), without pushing them. Each round, for each binary in turn (the order swaps every round):
  pull     a fresh store mounts it and pulls the whole feed before `mount` returns (the seconds taken)
  rss      the daemon's VmRSS and VmHWM (/proc/PID/status) once that mount is ready, and per item
  remount  unmount, then `mount` again on the same store, timed until it returns ("ready")
  rss2     VmRSS and VmHWM after the remount (the goal: at most 300 MB with a million items)
  ls       `ls -f` of the 100,000-entry folder (line-buffered), the longest gap between two entries and the
           total; the kernel's caches dropped first
The median of each binary is printed, and one JSON line (`RESULT {...}`) that scripts/bench --large reads.

usage: python3 -m ubiquitybench.million --new BIN [--old BIN] [--items N] [--rounds N] [--work DIR]
Run as root (drop_caches, FUSE mounts). Stdlib only.
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from . import harness
from .common import run, status_kb
from .harness import drop_caches

CONTAINER = "iCloud.com.example.million"


class Mount(harness.Mount):
    """The million-item mount by one binary; `mount` answers the seconds it took (the whole first pull)."""

    def __init__(self, binary: str, root: Path, stub: harness.Stub):
        super().__init__(root, stub, "million", log_level=None, container=CONTAINER, binary=binary)
        self.mnt = self.path

    def mount(self) -> float:
        t = time.monotonic()
        super().mount(timeout=3600)
        return time.monotonic() - t

    def pid(self) -> int:
        return self.daemon_pids()[0]

    def unmount(self):
        super().unmount(timeout=600)


def ls_gaps(folder: Path) -> tuple[float, float, int]:
    """The longest gap between two entries of a streaming `ls -f`, the total time and the entry count."""
    drop_caches()
    t0 = last = time.monotonic()
    longest, n = 0.0, 0
    p = subprocess.Popen(["stdbuf", "-oL", "ls", "-f", str(folder)], stdout=subprocess.PIPE)
    for _ in p.stdout:
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
        n += 1
    p.wait()
    return longest, time.monotonic() - t0, n


def one_round(binary: str, work: Path, stub: harness.Stub, items: int) -> dict:
    root = work / "m"
    shutil.rmtree(root, ignore_errors=True)
    m = Mount(binary, root, stub)
    r = {"pull_s": m.mount()}
    try:
        st = status_kb(m.pid())
        r["rss_mb"], r["hwm_mb"] = st["VmRSS"] / 1024, st["VmHWM"] / 1024
        m.unmount()
        drop_caches()
        r["remount_s"] = m.mount()
        st = status_kb(m.pid())
        r["rss2_mb"], r["hwm2_mb"] = st["VmRSS"] / 1024, st["VmHWM"] / 1024
        r["bytes_per_item"] = st["VmRSS"] * 1024 / items
        gap, total, n = ls_gaps(m.mnt / "folder-00000")
        r["ls_gap_s"], r["ls_total_s"], r["ls_entries"] = gap, total, n
    finally:
        m.unmount()
        shutil.rmtree(root, ignore_errors=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new", required=True)
    ap.add_argument("--old")
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--work", default="/tmp/ubq-million")
    a = ap.parse_args()
    work = Path(a.work)
    data = work / f"stub-{a.items}"
    if not (data / "seeded").exists():
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        t = time.monotonic()
        run(a.new, "remote", "seed", "--data", data, "--container", CONTAINER, "--items", a.items, timeout=3600)
        (data / "seeded").write_text("")
        print(f"seeded {a.items} items in {time.monotonic() - t:.1f} s", flush=True)
    stub = harness.Stub(data, container=CONTAINER, binary=a.new).start()
    contenders = [("new", a.new)] + ([("old", a.old)] if a.old else [])
    results = {name: [] for name, _ in contenders}
    try:
        for i in range(a.rounds):
            for name, binary in (contenders if i % 2 == 0 else contenders[::-1]):
                r = one_round(binary, work, stub, a.items)
                print(name, json.dumps({k: round(v, 3) for k, v in r.items()}), flush=True)
                results[name].append(r)
    finally:
        stub.stop()
    summary = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in results.items()}
    for name, s in summary.items():
        print(f"{name}: pull {s['pull_s']:.1f} s, RSS {s['rss_mb']:.0f} MB (peak {s['hwm_mb']:.0f}); remount "
              f"{s['remount_s']:.2f} s, RSS {s['rss2_mb']:.0f} MB (peak {s['hwm2_mb']:.0f}), "
              f"{s['bytes_per_item']:.0f} B/item; ls -f longest gap {s['ls_gap_s'] * 1000:.0f} ms, "
              f"total {s['ls_total_s']:.1f} s for {s['ls_entries']} entries")
    print("RESULT " + json.dumps({"items": a.items, **summary}))


if __name__ == "__main__":
    sys.exit(main())
