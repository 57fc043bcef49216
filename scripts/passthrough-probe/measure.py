#!/usr/bin/env python3
"""Sequential read (cold and warm page cache) and write of 1 GiB: the disk, a mount with --passthrough and one
without, in one alternating run. Run as root from the worktree: python3 scripts/passthrough-probe/measure.py [REPS]
Local-only mounts (no remote): the file's content is local and complete. Prints MiB/s and ratios to the disk."""
import os, subprocess, sys, tempfile, time
from pathlib import Path

BIN = str(Path(__file__).resolve().parents[2] / ".build" / "release" / "ubiquityfs")
SIZE_MIB = 1024
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3

def sh(*a):
    subprocess.run([str(x) for x in a], check=True, capture_output=True)

def drop_caches():
    settle()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")

def timed_read(path):
    t = time.monotonic()
    sh("dd", f"if={path}", "of=/dev/null", "bs=1M")
    return SIZE_MIB / (time.monotonic() - t)

def settle():
    # The virtual disk's writeback of earlier writes, and the daemon's hashing after a close, would land in the
    # next timing: let them finish first.
    os.sync()
    time.sleep(3)

def timed_write(path):
    settle()
    t = time.monotonic()
    sh("dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={SIZE_MIB}", "conv=fsync")
    return SIZE_MIB / (time.monotonic() - t)

def mount(root, name, extra):
    mnt, store = root / f"{name}-mnt", root / f"{name}-store"
    mnt.mkdir()
    sh(BIN, "mount", mnt, "--store", store, "--device", name, *extra)
    return mnt, store

def main():
    root = Path(tempfile.mkdtemp(prefix="ptmeasure-", dir="/work/tmp" if Path("/work/tmp").is_dir() else None))
    mounts = {}
    try:
        for name, extra in (("passthrough", ["--passthrough"]), ("ordinary", ["--no-passthrough"])):
            mounts[name] = mount(root, name, extra)
        disk = root / "disk-file"
        targets = {"disk": disk, "passthrough": mounts["passthrough"][0] / "f", "ordinary": mounts["ordinary"][0] / "f"}
        results = {k: {"write": [], "cold": [], "warm": []} for k in targets}
        for rep in range(REPS):
            for name, path in targets.items():
                results[name]["write"].append(timed_write(path))
            for name, path in targets.items():
                drop_caches()
                results[name]["cold"].append(timed_read(path))
                results[name]["warm"].append(timed_read(path))
        med = {k: {m: sorted(v)[len(v) // 2] for m, v in r.items()} for k, r in results.items()}
        print(f"1 GiB, dd bs=1M, {REPS} alternating reps, medians in MiB/s (ratio to disk):")
        for m in ("cold", "warm", "write"):
            print(f"  {m:5}: " + "  ".join(f"{k} {med[k][m]:.0f} ({med[k][m] / med['disk'][m]:.2f})" for k in targets))
        print("all reps:", results)
        for name in ("passthrough", "ordinary"):
            print(name, "store files over 1 MiB:", [(str(p), p.stat().st_size) for p in mounts[name][1].rglob("*")
                                                     if p.is_file() and p.stat().st_size > 1 << 20])
    finally:
        for mnt, _ in mounts.values():
            subprocess.run([BIN, "unmount", mnt], capture_output=True)
        subprocess.run(["rm", "-rf", str(root)])

main()
