"""Part 7: the content of a file under concurrent eviction, writes, truncation, downloads and remote updates,
and files that stay usable through open descriptors after unlink, as on ext4.

Two devices share one stub. The randomized race keeps a model of each file's bytes and checks every byte on
both devices at the end.
"""
import os
import random
import subprocess
import threading
import time

from conftest import run, wait_until, attr, sync, conflict_versions_in, same_on


def test_evict_racing_writers_loses_nothing(two):
    """The repro of the data loss: eviction in a loop while dd writes into the file."""
    stub, a, b = two
    rel = "Documents/race.bin"
    data = bytearray(os.urandom(1 << 20))
    (a / rel).write_bytes(data)
    sync(a)
    stop = threading.Event()

    def evict_loop():
        while not stop.is_set():
            subprocess.run(["setfattr", "-n", "user.ubiquity.evict", str(a / rel)], capture_output=True)

    evictor = threading.Thread(target=evict_loop)
    evictor.start()
    try:
        for i in range(1, 31):
            chunk = b"W%02d" % i
            run("dd", f"of={a / rel}", "bs=1", f"seek={i * 1000}", "conv=notrunc", "status=none",
                input=chunk.decode(), timeout=120)
            data[i * 1000:i * 1000 + 3] = chunk
            time.sleep(0.05)
    finally:
        stop.set()
        evictor.join()
    sync(a)
    assert (a / rel).stat().st_size == len(data)
    assert (a / rel).read_bytes() == bytes(data)
    same_on(b, rel, bytes(data))


class Model:
    """The bytes each file should hold; every operation on the mount is mirrored here under one lock."""

    def __init__(self, names):
        self.lock = threading.Lock()
        self.files = {n: b"" for n in names}


def test_randomized_content_race_matches_model(stub, mount_factory):
    """For a minute, threads race evict, download, open-for-write with pwrite, truncate, rename over and
    remote updates on a few files; each file's final bytes on both devices equal the model's. A local store
    limit smaller than the files together keeps the automatic evictor racing too."""
    a = mount_factory(stub, "laptop", extra=["--cache-size", "300K"])
    b = mount_factory(stub, "desktop", extra=["--cache-size", "300K"])
    names = [f"f{i}.bin" for i in range(4)]
    model = Model(names)
    for n in names:
        data = os.urandom(random.randint(1, 200_000))
        (a / "Documents" / n).write_bytes(data)
        model.files[n] = data
    sync(a)
    for n in names:
        same_on(b, f"Documents/{n}", model.files[n])
    seed = int(os.environ.get("RACE_SEED", random.randrange(1 << 30)))
    print("seed", seed)
    deadline = time.monotonic() + float(os.environ.get("RACE_SECONDS", "60"))
    errors = []
    # Each file's operations on A, with their times, for the report of a mismatch.
    done = {n: [] for n in names}
    # Writers on A hold the model's lock per file operation, so the model's order is the mount's order.
    file_locks = {n: threading.Lock() for n in names}

    def writer(k):
        rng = random.Random(seed + k)
        while time.monotonic() < deadline:
            n = rng.choice(names)
            p = a / "Documents" / n
            op = rng.random()
            with file_locks[n]:
                try:
                    cur = model.files[n]
                    if op < 0.45:
                        off = rng.randint(0, len(cur) + 100)
                        chunk = os.urandom(rng.randint(1, 5000))
                        fd = os.open(p, os.O_WRONLY)
                        try:
                            os.pwrite(fd, chunk, off)
                        finally:
                            os.close(fd)
                        new = cur.ljust(off, b"\0")[:off] + chunk + cur[off + len(chunk):]
                        model.files[n] = new
                        done[n].append(f"pwrite {len(chunk)} at {off} {time.time():.3f}")
                    elif op < 0.65:
                        size = rng.randint(0, len(cur) + 1000)
                        os.truncate(p, size)
                        model.files[n] = cur[:size].ljust(size, b"\0")
                        done[n].append(f"truncate {size} {time.time():.3f}")
                    elif op < 0.8:
                        tmp = a / "Documents" / f".{n}.tmp{k}"
                        data = os.urandom(rng.randint(0, 100_000))
                        tmp.write_bytes(data)
                        os.rename(tmp, p)
                        model.files[n] = data
                        done[n].append(f"rename over, {len(data)} bytes {time.time():.3f}")
                    else:
                        got = p.read_bytes()
                        if got != cur:
                            errors.append(mismatch(n, p, got, cur))
                except OSError as e:
                    errors.append(f"{n}: op {op:.2f}: {e!r}")
            time.sleep(rng.random() * 0.02)

    def mismatch(n, p, got, cur):
        """What a read that differs from the model says: where it differs, whether it lasts, the last operations."""
        first = next((i for i in range(min(len(got), len(cur))) if got[i] != cur[i]), None)
        time.sleep(1)
        lasting = p.read_bytes() != cur
        return (f"{n}: read {len(got)} bytes, model has {len(cur)}, first difference at {first}, "
                f"{'still so' if lasting else 'right'} a second later, at {time.time():.3f}; last: {done[n][-4:]}")

    def evictor(k):
        rng = random.Random(seed + 100 + k)
        while time.monotonic() < deadline:
            n = rng.choice(names)
            action = rng.choice(["evict", "evict", "download"])
            subprocess.run(["setfattr", "-n", "user.ubiquity." + action, str(a / "Documents" / n)],
                           capture_output=True)
            time.sleep(rng.random() * 0.01)

    def remote_updater():
        """Device B writes whole files now and then, after waiting for A's last state of the file to
        arrive; A's writes to that file pause meanwhile, so no conflict muddles the model."""
        rng = random.Random(seed + 200)
        while time.monotonic() < deadline - 5:
            n = rng.choice(names)
            with file_locks[n]:
                try:
                    sync(a)
                    same_on(b, f"Documents/{n}", model.files[n], timeout=30)
                    data = os.urandom(rng.randint(0, 150_000))
                    (b / "Documents" / n).write_bytes(data)
                    model.files[n] = data
                    done[n].append(f"written on B, {len(data)} bytes {time.time():.3f}")
                    sync(b)
                    same_on(a, f"Documents/{n}", data, timeout=30)
                except (OSError, AssertionError) as e:
                    errors.append(f"remote update of {n}: {e!r}")
            time.sleep(rng.random() * 3)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    threads += [threading.Thread(target=evictor, args=(k,)) for k in range(2)]
    threads.append(threading.Thread(target=remote_updater))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, (errors[:10], a.log())
    sync(a)
    sync(b)
    for n in names:
        same_on(a, f"Documents/{n}", model.files[n])
        same_on(b, f"Documents/{n}", model.files[n])
        assert conflict_versions_in(a / ".versions" / "Documents" / n) == [], f"{n} has conflict versions"


PY_UNLINKED = r"""
import mmap, os, sys
p = sys.argv[1]
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"hello world")
os.unlink(p)
assert not os.path.exists(p)
st = os.fstat(fd)
print("nlink", st.st_nlink, "size", st.st_size)
print("pread", os.pread(fd, 5, 6))
os.ftruncate(fd, 5)
os.fsync(fd)
print("after truncate", os.fstat(fd).st_size, os.pread(fd, 100, 0))
os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096)
m[0:3] = b"MAP"
m.flush()
print("mmap", os.pread(fd, 5, 0))
m.close()
os.close(fd)
"""


def test_unlinked_open_file_stays_usable(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    p = run("python3", "-c", PY_UNLINKED, a / "Documents" / "gone.txt")
    assert p.stdout.splitlines() == [
        "nlink 0 size 11",
        "pread b'world'",
        "after truncate 5 b'hello'",
        "mmap b'MAPlo'",
    ]
    sync(a)
    assert not (a / "Documents" / "gone.txt").exists()
    # Nothing of it went to the remote, and nothing is left in the store once it is closed.
    stats = stub.stats()
    assert stats["blobPuts"] == 0 and stats["itemPuts"] == 0, stats
    assert os.listdir(a.store / "content") == []


def test_python_temporary_file(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    code = ("import tempfile;t=tempfile.TemporaryFile(dir=%r);t.write(b'x');t.seek(0);print(t.read())"
            % str(a / "Documents"))
    assert run("python3", "-c", code).stdout == "b'x'\n"
    assert os.listdir(a / "Documents") == []


def test_rename_over_an_open_file_keeps_its_descriptor(two):
    stub, a, b = two
    target = a / "Documents" / "t.txt"
    target.write_text("old content")
    sync(a)
    with open(target, "rb") as old:
        (a / "Documents" / "new.txt").write_text("new")
        os.rename(a / "Documents" / "new.txt", target)
        assert os.fstat(old.fileno()).st_nlink == 0
        assert old.read() == b"old content"
    sync(a)
    same_on(b, "Documents/t.txt", b"new")


def test_tmpfile_in_c(stub, mount_factory, tmp_path):
    """tmpfile(3)-style use: open, unlink, write, seek, read, from a C program."""
    a = mount_factory(stub, "laptop")
    src = tmp_path / "t.c"
    src.write_text(r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) { perror("open"); return 1; }
    if (unlink(argv[1]) != 0) { perror("unlink"); return 1; }
    FILE *f = fdopen(fd, "w+");
    fputs("scratch data\n", f);
    fflush(f);
    struct stat st;
    if (fstat(fd, &st) != 0) { perror("fstat"); return 1; }
    rewind(f);
    char buf[64] = {0};
    if (!fgets(buf, sizeof buf, f)) { perror("fgets"); return 1; }
    printf("%ld %lu %s", (long)st.st_size, (unsigned long)st.st_nlink, buf);
    return 0;
}
""")
    run("cc", "-o", tmp_path / "t", src)
    assert run(tmp_path / "t", a / "Documents" / "scratch").stdout == "13 0 scratch data\n"


def test_log_held_open_reaches_the_other_device(two):
    """A log written with fsync every second goes up at its fsync points as a consistent prefix, while the
    writer still holds it open; once it is quiet, `sync --wait` returns and isUploaded says 1."""
    stub, a, b = two
    path = a / "Documents" / "app.log"
    lines = [f"line {i:03d} {'x' * 50}\n" for i in range(8)]
    seen_open = set()
    with open(path, "w") as log:
        for i, line in enumerate(lines):
            log.write(line)
            log.flush()
            os.fsync(log.fileno())
            time.sleep(1)
            copy = b / "Documents" / "app.log"
            if copy.exists():
                text = copy.read_text()
                assert "".join(lines[:i + 1]).startswith(text), "a torn or foreign snapshot"
                seen_open.add(text.count("\n"))
        assert len(seen_open - {0}) >= 2, f"the other device saw only {seen_open} lines while open"
        # Quiet now, still open: everything goes up and sync --wait returns.
        sync(a, timeout=30)
        assert attr(path, "isUploaded") == "1"
        same_on(b, "Documents/app.log", "".join(lines).encode())
        log.write("after\n")
        log.flush()
        assert attr(path, "isUploaded") == "0"
    sync(a)
    same_on(b, "Documents/app.log", ("".join(lines) + "after\n").encode())


def test_sqlite_with_a_long_lived_connection_reaches_the_other_device(two):
    stub, a, b = two
    code = r"""
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
db.execute("create table notes(n integer, body text)")
for i in range(5):
    db.execute("insert into notes values(?, ?)", (i, "note %d" % i))
    db.commit()
print("committed", flush=True)
sys.stdin.readline()   # hold the connection open until told
db.close()
"""
    proc = subprocess.Popen(["python3", "-c", code, str(a / "Documents" / "notes.db")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "committed\n"

        def rows_on_b():
            p = b / "Documents" / "notes.db"
            if not p.exists():
                return None
            out = run("sqlite3", p, "select count(*), max(body) from notes", check=False)
            return out.returncode == 0 and out.stdout.strip() == "5|note 4"

        wait_until(rows_on_b, timeout=30, what="the database on the other device while still open")
        assert proc.poll() is None
    finally:
        proc.communicate("\n", timeout=30)
    assert proc.returncode == 0


def test_holes_stay_holes_on_the_other_device(two):
    """A sparse file made with truncate and a few writes takes as little disk on the device that downloads
    it as on the one that made it, and reads the same bytes."""
    stub, a, b = two
    rel = "Documents/sparse.img"
    run("truncate", "-s", "64M", a / rel)
    with open(a / rel, "r+b") as f:
        f.seek(32 << 20)
        f.write(b"middle")
        f.seek((64 << 20) - 5)
        f.write(b"tail!")
    sync(a)
    wait_until(lambda: (b / rel).exists() and (b / rel).stat().st_size == 64 << 20, what="the sparse file on b")
    assert run("cmp", a / rel, b / rel).returncode == 0  # the open downloads it
    used_a = int(run("du", "-k", a / rel).stdout.split()[0])
    used_b = int(run("du", "-k", b / rel).stdout.split()[0])
    assert used_a <= 64 and used_b <= 64, (used_a, used_b)
    assert int(run("du", "-k", "--apparent-size", b / rel).stdout.split()[0]) == 64 << 10
