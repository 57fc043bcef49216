"""What a burst of creates from another device costs this mount's own requests (Part 19, goal: at most a tenth).

Each round seeds a fresh stub with a folder `burst` (one file), mounts it, and times the mount's own work in
another folder (`own`: N small files created with content, stat'ed and removed, by one process) three ways:
  idle       nothing arrives
  burst      ITEMS empty files arrive in `burst` at once (seeded while the stub was stopped, then it starts
             again), in a folder nobody has looked at: the daemon pulls them, the kernel holds nothing to tell
  watched    the same burst into `burst` listed first and watched by `inotifywait -m -r` on the whole mount:
             the daemon also repeats each create through its own mount (Watchers.swift), so the watcher sees
             one IN_CREATE per item
The own work starts as the stub starts again, so it meets the pull. Medians of the rounds; the ratios against
idle are the goal's figures (watched / burst is what the repeating alone costs). Also: how long the watched
burst took to be listed whole, and how many IN_CREATE events the watcher printed.

usage: python3 -m ubiquitybench.burst [--bin BIN] [--items N] [--own N] [--rounds N] [--work DIR]
Run as root (FUSE mounts). Stdlib and inotify-tools.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from . import harness
from .common import run

CONTAINER = "iCloud.com.example.burst"


def own_work(folder: Path, n: int) -> float:
    """Seconds to create n small files with content, stat each and remove each, in `folder`."""
    folder.mkdir(exist_ok=True)
    t = time.monotonic()
    for i in range(n):
        with open(folder / f"own-{i:05d}.txt", "w") as f:
            f.write("a line of this device's own\n")
    for i in range(n):
        os.stat(folder / f"own-{i:05d}.txt")
    for i in range(n):
        os.remove(folder / f"own-{i:05d}.txt")
    return time.monotonic() - t


def one_round(binary: str, work: Path, items: int, own: int, way: str) -> dict:
    root = work / way
    shutil.rmtree(root, ignore_errors=True)
    (root / "first").mkdir(parents=True)
    (root / "first" / "seed.txt").write_text("there before\n")
    many = work / "many"
    if not many.exists():
        many.mkdir()
        for i in range(items):
            (many / f"f{i:06d}").touch()
    data = root / "stub"
    run(binary, "remote", "seed", "--data", data, "--container", CONTAINER, f"burst={root / 'first'}")
    stub = harness.Stub(data, container=CONTAINER, binary=binary).start()
    m = harness.Mount(root / "dev", stub, "here", log_level="info", container=CONTAINER, binary=binary)
    m.mount()
    watcher = None
    r = {}
    try:
        harness.wait_until(lambda: (m.path / "burst").exists(), timeout=60, what="the seeded folder")
        own_work(m.path / "own", 50)  # warm: the folder made, the code paths run once
        if way == "idle":
            r["own_s"] = own_work(m.path / "own", own)
            return r
        events = root / "events"
        if way == "watched":
            os.listdir(m.path / "burst")
            watcher = subprocess.Popen(["inotifywait", "-m", "-r", "-q", "-e", "create", "--format", "%e %w%f",
                                        str(m.path)], stdout=open(events, "w"), stderr=subprocess.DEVNULL)
            time.sleep(2)  # its watches placed
        stub.stop()
        run(binary, "remote", "seed", "--data", data, "--container", CONTAINER, f"burst={many}", timeout=600)
        start = time.monotonic()
        stub.start()
        r["own_s"] = own_work(m.path / "own", own)
        harness.wait_until(lambda: len(os.listdir(m.path / "burst")) == items + 1, timeout=600, interval=0.5,
                           what="the burst listed whole")
        r["listed_s"] = time.monotonic() - start
        if watcher:
            def burst_creates():
                return events.read_text().count(f"{m.path / 'burst'}/f")
            harness.wait_until(lambda: burst_creates() >= items, timeout=60, interval=0.5, what="an IN_CREATE per item")
            r["in_create"] = burst_creates()
    finally:
        if watcher:
            watcher.terminate()
            watcher.wait()
        m.unmount()
        stub.stop()
        shutil.rmtree(root, ignore_errors=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("UBIQUITYFS_BIN", str(harness.BIN)))
    ap.add_argument("--items", type=int, default=20_000)
    ap.add_argument("--own", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/var/tmp/ubq-burst")
    a = ap.parse_args()
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results = {way: [] for way in ("idle", "burst", "watched")}
    try:
        for i in range(a.rounds):
            ways = list(results) if i % 2 == 0 else list(results)[::-1]
            for way in ways:
                r = one_round(a.bin, work, a.items, a.own, way)
                print(way, json.dumps({k: round(v, 3) for k, v in r.items()}), flush=True)
                results[way].append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {way: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for way, rs in results.items()}
    idle = med["idle"]["own_s"]
    print(f"own work ({a.own} files made, stat'ed, removed): idle {idle:.2f} s; during a burst of {a.items} creates "
          f"{med['burst']['own_s']:.2f} s ({med['burst']['own_s'] / idle:.2f}x), watched "
          f"{med['watched']['own_s']:.2f} s ({med['watched']['own_s'] / idle:.2f}x; "
          f"{med['watched']['own_s'] / med['burst']['own_s']:.2f}x the unwatched burst); the watched burst listed "
          f"whole after {med['watched']['listed_s']:.1f} s (unwatched {med['burst']['listed_s']:.1f} s), "
          f"{med['watched']['in_create']:.0f} IN_CREATE seen")
    print("RESULT " + json.dumps(med))


if __name__ == "__main__":
    main()
