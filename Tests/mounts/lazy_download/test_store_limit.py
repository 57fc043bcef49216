"""Part 9: the local store limit (--cache-size, --min-free): least recently used files are evicted to keep the
content under the limit; pinned, dirty and open files stay; evicted files come back with the same bytes."""
import hashlib
import json
import os
import subprocess
import sys
import threading

import pytest

from conftest import BIN, mount_with_store_on, run, small_disk_at, wait_until, attr

MiB = 1 << 20


def du(path):
    """Bytes the directory takes on disk, as du counts them (a file evicted while du walks is not counted, and
    du then exits 1: its total is still the one printed)."""
    p = run("du", "-s", "--block-size=1", path, check=False)
    assert p.returncode == 0 or "No such file" in p.stderr, p.stderr
    return int(p.stdout.split()[0])


def sha_of_cat(path):
    """The SHA-256 of what `cat` reads from the file."""
    p = subprocess.run(["cat", str(path)], capture_output=True, check=True, timeout=120)
    return hashlib.sha256(p.stdout).hexdigest()


def seed_files(stub, tmp_path, count, size, folder="Documents/big"):
    """Seeds `count` random files of `size` bytes; returns name -> SHA-256."""
    src = tmp_path / "src"
    src.mkdir()
    hashes = {}
    for i in range(count):
        data = os.urandom(size)
        name = f"f{i:04}.bin"
        (src / name).write_bytes(data)
        hashes[name] = hashlib.sha256(data).hexdigest()
    stub.seed((folder, src))
    return hashes


def test_twenty_files_read_in_turn_stay_within_the_limit(stub, mount_factory, tmp_path):
    hashes = seed_files(stub, tmp_path, 20, 10 * MiB)
    m = mount_factory(stub, extra=["--cache-size", "50M"])
    limit = 50 * MiB
    assert attr(m.path, "cacheLimit") == str(limit)
    content = m.store / "content"
    for name, sha in hashes.items():
        assert sha_of_cat(m / "Documents/big" / name) == sha, name
        assert du(content) <= limit + 10 * MiB + 64 * 1024, name
    assert int(attr(m.path, "cacheUsed")) <= limit
    evicted = attr(m.path, "recentlyEvicted").splitlines()
    assert int(evicted[0].split()[0]) >= 15, evicted
    assert 1 <= len(evicted) - 1 <= 10 and all("Documents/big/f" in line for line in evicted[1:]), evicted
    # An evicted file comes back with the same bytes on the next open.
    first = m / "Documents/big/f0000.bin"
    assert attr(first, "downloadingStatus") == "notDownloaded"
    assert sha_of_cat(first) == hashes["f0000.bin"]
    assert du(content) <= limit + 10 * MiB + 64 * 1024
    # The root's attributes are listed there only, and `ubiquityfs status` shows them.
    listed = run("getfattr", "-d", "-m", "-", "--absolute-names", m.path).stdout
    assert "user.ubiquity.cacheUsed" in listed and "user.ubiquity.recentlyEvicted" in listed
    assert "cacheUsed" not in run("getfattr", "-d", "-m", "-", "--absolute-names", first).stdout
    out = run(BIN, "status", m.path).stdout
    assert "limit 50.0M" in out and "evicted:" in out and "files," in out, out
    rows = json.loads(run(BIN, "status", "--json", m.path).stdout)
    assert rows[0]["cacheLimit"] == limit  # a number, as the live query gives counts


def test_pinned_and_dirty_files_survive(stub, mount_factory, tmp_path):
    hashes = seed_files(stub, tmp_path, 6, 10 * MiB)
    m = mount_factory(stub, extra=["--cache-size", "25M"])
    big = m / "Documents/big"
    assert sha_of_cat(big / "f0000.bin") == hashes["f0000.bin"]
    run(BIN, "pin", big / "f0001.bin")
    wait_until(lambda: attr(big / "f0001.bin", "downloadingStatus") == "current", what="pinned file downloaded")
    stub.stop()
    dirty = os.urandom(10 * MiB)
    run("dd", "of=" + str(big / "dirty.bin"), "bs=1M", "status=none", stdin=open_bytes(tmp_path, dirty))
    # 30M are local now: the evictor gives back the one clean, unpinned, closed file.
    wait_until(lambda: attr(big / "f0000.bin", "downloadingStatus") == "notDownloaded", what="f0000 evicted")
    # A second dirty file: nothing more can go, and nothing that must stay went.
    dirty2 = os.urandom(10 * MiB)
    run("dd", "of=" + str(big / "dirty2.bin"), "bs=1M", "status=none", stdin=open_bytes(tmp_path, dirty2))
    assert sha_of_cat(big / "f0001.bin") == hashes["f0001.bin"]  # the remote is down: these are local copies
    assert sha_of_cat(big / "dirty.bin") == hashlib.sha256(dirty).hexdigest()
    assert sha_of_cat(big / "dirty2.bin") == hashlib.sha256(dirty2).hexdigest()
    assert attr(big / "f0001.bin", "downloadingStatus") == "current"
    stub.start()
    wait_until(lambda: attr(m.path, "pendingChanges") == "0", timeout=60, what="uploads")
    # Uploaded now: the written files may go like any other, and the pinned one still stays.
    for name in ["f0002.bin", "f0003.bin", "f0004.bin", "f0005.bin"]:
        assert sha_of_cat(big / name) == hashes[name]
        assert du(m.store / "content") <= 25 * MiB + 10 * MiB + 64 * 1024
    assert attr(big / "f0001.bin", "downloadingStatus") == "current"
    assert sha_of_cat(big / "dirty.bin") == hashlib.sha256(dirty).hexdigest()


def open_bytes(tmp_path, data):
    """A file object holding `data`, to feed a program's standard input."""
    p = tmp_path / f"input-{hashlib.sha256(data).hexdigest()[:8]}"
    p.write_bytes(data)
    return open(p, "rb")


def test_the_limit_and_the_order_hold_across_a_remount(stub, mount_factory, tmp_path):
    hashes = seed_files(stub, tmp_path, 10, 10 * MiB)
    # Room for five files and their file system's block maps: a fragmented copy takes a few KiB more than its
    # 10 MiB, and a limit of exactly 50M would then hold four, the evictor rightly going down to its low mark.
    limit = 52 * MiB
    m = mount_factory(stub, extra=["--cache-size", "52M"])
    big = m / "Documents/big"
    for name, sha in hashes.items():
        assert sha_of_cat(big / name) == sha
    local = [n for n in hashes if attr(big / n, "downloadingStatus") == "current"]
    assert local == [f"f{i:04}.bin" for i in range(5, 10)], local
    m.unmount()
    m.mount()
    assert attr(m.path, "cacheLimit") == str(limit)
    assert int(attr(m.path, "cacheUsed")) <= limit
    oldest, newer = local[0], local[1]
    # The oldest local file is used again: after the remount the next eviction takes the one after it.
    assert sha_of_cat(big / oldest) == hashes[oldest]
    for name in [n for n in hashes if n not in local]:
        assert sha_of_cat(big / name) == hashes[name]
        gone = [n for n in local if attr(big / n, "downloadingStatus") == "notDownloaded"]
        if gone:
            break
    assert gone == [newer], (local, gone)
    assert attr(big / oldest, "downloadingStatus") == "current"
    for name, sha in hashes.items():
        assert sha_of_cat(big / name) == sha
        assert du(m.store / "content") <= limit + 10 * MiB + 64 * 1024


READER = r"""
import hashlib, json, random, sys
root, expected, seed = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
names = sorted(expected)
random.Random(seed).shuffle(names)
bad = [n for n in names if hashlib.sha256(open(root + "/" + n, "rb").read()).hexdigest() != expected[n]]
print(f"{len(names) - len(bad)} ok, {len(bad)} wrong: {bad[:5]}")
sys.exit(1 if bad else 0)
"""


def test_four_processes_reading_a_thousand_files_stay_within_the_limit(stub, mount_factory, tmp_path):
    hashes = seed_files(stub, tmp_path, 1000, 100 * 1024)
    limit = 20 * MiB
    m = mount_factory(stub, extra=["--cache-size", "20M"])
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps(hashes))
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(m / "Documents/big"), str(expected), str(i)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    samples = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            samples.append(du(m.store / "content"))
            done.wait(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        outcomes = [(p.wait(timeout=600), *p.communicate()) for p in readers]
    finally:
        done.set()
        sampler.join()
    for code, out, err in outcomes:
        assert code == 0 and out.startswith("1000 ok"), (out, err)
    one_file = 100 * 1024 + 64 * 1024
    assert len(samples) >= 3 and max(samples) <= limit + one_file, (len(samples), max(samples))
    assert du(m.store / "content") <= limit + one_file
    assert int(attr(m.path, "cacheUsed")) <= limit


def test_a_file_larger_than_the_limit_opens_reads_and_goes_after_its_last_close(stub, mount_factory, tmp_path):
    hashes = seed_files(stub, tmp_path, 1, 12 * MiB)
    m = mount_factory(stub, extra=["--cache-size", "5M"])
    f = m / "Documents/big/f0000.bin"
    script = ("import hashlib, subprocess, sys\n"
              "fd = open(sys.argv[1], 'rb')\n"
              "print(hashlib.sha256(fd.read()).hexdigest())\n"
              "print(subprocess.run(['getfattr', '-n', 'user.ubiquity.downloadingStatus', '--only-values',"
              " sys.argv[1]], capture_output=True, text=True).stdout)\n"
              "fd.close()\n")
    out = run(sys.executable, "-c", script, f).stdout.split()
    assert out == [hashes["f0000.bin"], "current"], out
    wait_until(lambda: attr(f, "downloadingStatus") == "notDownloaded", what="eviction after the last close")
    assert du(m.store / "content") <= 64 * 1024
    assert sha_of_cat(f) == hashes["f0000.bin"]


@pytest.mark.parametrize("option,value", [("--cache-size", "12Q"), ("--cache-size", "0"), ("--cache-size", "150%"),
                                          ("--min-free", "-1G"), ("--min-free", "lots")])
def test_bad_sizes_are_refused_in_one_line(tmp_path, option, value):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = run(BIN, "mount", mnt, option, value, check=False)
    assert p.returncode != 0
    assert p.stderr.count("\n") == 1 and option in p.stderr and value in p.stderr, p.stderr


@pytest.fixture
def small_disk(tmp_path):
    """A 40 MiB file system for the store (a tmpfs), so that tests can fill it."""
    with small_disk_at(tmp_path, 40) as disk:
        yield disk



def fill(disk, leave):
    """Fills the disk with a file of another program until about `leave` bytes are free."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    run("dd", "if=/dev/zero", "of=" + str(disk / "filler"), "bs=64K", f"count={max(0, free - leave) // (64 * 1024)}",
        "status=none")


def test_a_download_that_meets_a_full_disk_makes_room_and_succeeds(stub, mount_factory, tmp_path, small_disk):
    hashes = seed_files(stub, tmp_path, 3, 8 * MiB)
    m = mount_with_store_on(mount_factory, stub, small_disk, "--cache-size", "1T", "--min-free", "0")
    big = m / "Documents/big"
    for name in ["f0000.bin", "f0001.bin"]:
        assert sha_of_cat(big / name) == hashes[name]
    fill(small_disk, 4 * MiB)
    assert sha_of_cat(big / "f0002.bin") == hashes["f0002.bin"]
    assert attr(big / "f0000.bin", "downloadingStatus") == "notDownloaded"
    assert attr(big / "f0002.bin", "downloadingStatus") == "current"
    assert "met a full disk" in m.log()


def test_free_space_under_the_minimum_is_given_back(stub, mount_factory, tmp_path, small_disk):
    hashes = seed_files(stub, tmp_path, 3, 8 * MiB)
    m = mount_with_store_on(mount_factory, stub, small_disk, "--cache-size", "1T", "--min-free", "10M")
    big = m / "Documents/big"
    for name in hashes:
        assert sha_of_cat(big / name) == hashes[name]
    fill(small_disk, 6 * MiB)
    wait_until(lambda: attr(big / "f0000.bin", "downloadingStatus") == "notDownloaded", what="eviction for free space")
    assert attr(big / "f0002.bin", "downloadingStatus") == "current"
    assert os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize >= 10 * MiB
    # Coming back, the file makes room first: the next least recently used one goes.
    assert sha_of_cat(big / "f0000.bin") == hashes["f0000.bin"]
    assert attr(big / "f0001.bin", "downloadingStatus") == "notDownloaded"
