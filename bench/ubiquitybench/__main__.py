"""Benchmarks ubiquityfs against baselines on this machine, in the same run and in alternation.

Baselines: the backing store's own file system ("direct"), `rclone mount --vfs-cache-mode full` over
`rclone serve webdav` of a local directory on 127.0.0.1, and `curl` against the remote stub (the wire's limit).
For metadata (workload 4) also the FUSE floor: bench/floor/floor.c, a minimal passthrough on libfuse's low-level
API compiled into the work directory, set up like ubiquityfs; and bindfs, a passthrough on the high-level API.
Every measurement is repeated (3 times with --quick, 5 by default) and the median is quoted. The table goes to
stdout and to bench-out/results.md; throughput figures are plotted to bench-out/throughput.png.

usage: scripts/bench [--quick] [--only 1,2,...] [--work DIR] [--out DIR] [--reps N] [--old-bin BIN]
                     [--large [--large-old BIN]] [--engines]
With --engines, workload 7 (propagation between two mounts) runs once more with the remote on PostgreSQL and
SeaweedFS (scripts/postgres and scripts/seaweedfs, started in the work directory), and workload 8 (small files
on one mount, timed until they are on the remote) runs on both backends, alternating; the engines' figures are
quoted against the embedded remote's (SQLite and files). Workload 8 runs only when asked for (--only) or with
--engines.
With --large, also workload L: a container of 1,000,000 items (ubiquitybench/million.py: the daemon's RSS per item,
remount time, the longest pause of `ls -f` in a folder of 100,000), beside an old binary when one is given. It
takes 15-25 minutes more (seeding the stub once, a first pull of the million items per binary).
Workload C (Part 16, content in chunks) times `ubiquityfs chunks` on one core against sha256sum. Workload D moves
small changes between two real mounts and quotes the bytes the remote received and served against what the wire
before chunks moved (each version whole); it also cuts a 1 GiB upload and a cold download by `kill -9` of the
remote at 70% (bytes in all after the restart, against the file once) and reads 16 cold files at once against
16 curls at once; with --engines also on PostgreSQL and SeaweedFS.
Workload O (Part 27) writes a file on one mount while the remote is killed, starts the remote again after 12 s
and after 60 s, and times from its restart to the file on the other mount, beside the same change with the
remote up.
Workload W (Part 19, watchers) times this mount's own requests while 20,000 creates arrive from elsewhere, with
and without `inotifywait -m -r` on the mount (ubiquitybench/burst.py), against the same work when idle.
Run as root (drop_caches, FUSE mounts). Stdlib only; matplotlib (Debian python3-matplotlib) for the plot.
UBIQUITYFS_MOUNT_EXTRA (as in the integration tests) adds arguments to every ubiquityfs mount, e.g.
--no-passthrough to measure the ordinary I/O path.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .common import CLEANUP, ROOT, ensure_packages
from .report import FAILURES, markdown, plot
from .suite import Bench


def main():
    ap = argparse.ArgumentParser(prog="scripts/bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 runs each (about 2 minutes)")
    ap.add_argument("--only", default="1,2,3,4,5,6,7,C,D,W,O", help="workloads to run, e.g. 1,3")
    ap.add_argument("--old-bin", help="an older ubiquityfs to run beside this one in workload 7")
    ap.add_argument("--reps", type=int, default=0, help="runs per measurement (default 3 quick, 5 otherwise)")
    ap.add_argument("--work", default="/var/tmp/ubiquityfs-bench", help="scratch directory (removed after)")
    ap.add_argument("--out", default=str(ROOT / "bench-out"), help="where results.md and throughput.png go")
    ap.add_argument("--no-build", action="store_true", help="use the existing release binary")
    ap.add_argument("--large", action="store_true", help="also workload L, a million items (ubiquitybench/million.py)")
    ap.add_argument("--large-old", help="the binary workload L compares with (e.g. one built from main)")
    ap.add_argument("--engines", action="store_true",
                    help="workloads 7 and 8 also with the remote on PostgreSQL and SeaweedFS (adds workload 8)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (drop_caches and mounts)")
    ensure_packages()
    if not args.no_build and "UBIQUITYFS_BIN" not in os.environ:
        env = dict(os.environ, PATH="/opt/swift/usr/bin:" + os.environ.get("PATH", ""))
        subprocess.run([str(ROOT / "scripts" / "build")], check=True, env=env, stdout=subprocess.DEVNULL)
    which = [w.strip() for w in args.only.split(",") if w.strip()]
    if args.large and "L" not in which:
        which.append("L")
    if args.engines and "8" not in which:
        which.append("8")
    bench = Bench(args)
    t0 = time.perf_counter()

    def on_signal(sig, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    try:
        bench.work.mkdir(parents=True, exist_ok=True)
        bench.run(which)
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
    finally:
        CLEANUP.run()
        shutil.rmtree(bench.work, ignore_errors=True)
    for what, why in FAILURES:
        bench.res.failed(what, why)
    elapsed = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(bench.res, args, bench.reps, elapsed)
    (out / "results.md").write_text(md)
    print()
    print(md)
    plot(bench.throughput, out / "throughput.png",
         f"ubiquityfs vs baselines ({'quick' if args.quick else 'default'}, median of {bench.reps})")
    print(f"bench: table in {out / 'results.md'}")


if __name__ == "__main__":
    main()
