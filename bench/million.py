#!/usr/bin/python3
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

usage: bench/million.py --new BIN [--old BIN] [--items N] [--rounds N] [--work DIR]
Run as root (drop_caches, FUSE mounts). Stdlib only.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONTAINER = "iCloud.com.example.million"


def run(*args, check=True, timeout=3600, **kw):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return p


def mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines())


def status_kb(pid: int) -> dict:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


class Stub:
    def __init__(self, binary: str, data: Path):
        self.bin, self.data, self.proc = binary, data, None

    def start(self):
        ep = self.data / "endpoint"
        ep.unlink(missing_ok=True)
        log = open(self.data / "stub.log", "ab")
        self.proc = subprocess.Popen([self.bin, "remote", "serve", "--data", self.data, "--listen", "127.0.0.1:0",
                                      "--endpoint-file", ep], stdout=log, stderr=log)
        for _ in range(600):
            if ep.exists() and ep.read_text().strip():
                self.url = ep.read_text().strip()
                return self
            time.sleep(0.05)
        raise RuntimeError("the stub did not start")

    def stop(self):
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
            self.proc = None


class Mount:
    def __init__(self, binary: str, root: Path, stub: Stub):
        self.bin, self.root, self.stub = binary, root, stub
        self.mnt = root / "mnt"

    def mount(self) -> float:
        self.mnt.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        run(self.bin, "mount", self.mnt, "--remote", self.stub.url, "--token-file", self.stub.data / "token",
            "--container", CONTAINER, "--store", self.root / "store", "--device", "million")
        return time.monotonic() - t

    def pid(self) -> int:
        return int(run("pgrep", "-f", f"mount {self.mnt} ").stdout.split()[0])

    def unmount(self):
        run(self.bin, "unmount", self.mnt, check=False, timeout=600)
        if mounted(self.mnt):
            run("fusermount3", "-u", "-z", self.mnt, check=False)
        for _ in range(600):
            if run("pgrep", "-f", f"mount {self.mnt} ", check=False).returncode != 0:
                return
            time.sleep(0.1)


def drop_caches():
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


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


def one_round(binary: str, work: Path, stub: Stub, items: int) -> dict:
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
    ap = argparse.ArgumentParser()
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
        run(a.new, "remote", "seed", "--data", data, "--container", CONTAINER, "--items", a.items)
        (data / "seeded").write_text("")
        print(f"seeded {a.items} items in {time.monotonic() - t:.1f} s", flush=True)
    stub = Stub(a.new, data).start()
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
