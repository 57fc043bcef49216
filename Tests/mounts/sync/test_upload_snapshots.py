"""Part 13, point 3: what goes up is one moment of a file. Programs rewrite, truncate and extend files (and
evictions come between) while the daemon uploads them; every upload's bytes must be the bytes it hashed, so the
remote never refuses one ("corrupt data ... the bytes hash to", "has N bytes, not the N to upload", "ended N
bytes early"), and the other device ends with exactly the last bytes written."""
import os
import random
import subprocess
import threading
import time

import pytest

from conftest import sync, wait_until

REFUSALS = ("corrupt data", "bytes early", "bytes, not the")
MiB = 1 << 20


def rewrite(rng, path):
    """One program's change of a file: pwrites at random places, a truncation, an append, or dd conv=notrunc."""
    op = rng.choice(["pwrite", "truncate", "append", "dd"])
    if op == "dd":
        seek = rng.randrange(0, 4 * MiB, 4096)
        subprocess.run(["dd", "if=/dev/urandom", f"of={path}", "bs=4096", f"seek={seek // 4096}",
                        f"count={rng.randint(1, 256)}", "conv=notrunc", "status=none"], check=True)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if op == "pwrite":
            for _ in range(rng.randint(1, 8)):
                os.pwrite(fd, os.urandom(rng.randint(1, 256 * 1024)), rng.randrange(0, 6 * MiB))
        elif op == "truncate":
            os.ftruncate(fd, rng.randrange(0, 6 * MiB))
        else:
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, os.urandom(rng.randint(1, MiB)))
    finally:
        os.close(fd)


def keep_rewriting(seed, path, until):
    """A program that rewrites one file until `until`, with an eviction asked for now and then (refused while
    the file has changes to upload, which is most of the time)."""
    rng = random.Random(seed)
    while time.monotonic() < until:
        if rng.random() < 0.05:
            subprocess.run(["setfattr", "-n", "user.ubiquity.evict", path], capture_output=True)
        else:
            rewrite(rng, path)
        time.sleep(rng.random() * 0.02)


@pytest.mark.parametrize("passthrough", [True, False], ids=["passthrough", "no-passthrough"])
def test_files_rewritten_while_they_upload_go_up_whole(stub, mount_factory, passthrough):
    extra = () if passthrough else ("--no-passthrough",)
    a, b = mount_factory(stub, "laptop", extra), mount_factory(stub, "desktop")
    seed = random.randrange(1 << 30)
    files = [a / f"Documents/r{i}.bin" for i in range(4)]
    for f in files:
        f.write_bytes(os.urandom(4 * MiB))
    until = time.monotonic() + 20
    writers = [threading.Thread(target=keep_rewriting, args=(seed + i, f, until)) for i, f in enumerate(files)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    sync(a, timeout=120)
    refused = [line for line in a.log().splitlines() if any(r in line for r in REFUSALS)]
    assert not refused, f"seed {seed}: {len(refused)} refused uploads, first: {refused[:3]}"
    for f in files:
        rel = f.relative_to(a.path)
        want = f.read_bytes()
        wait_until(lambda: (b / rel).read_bytes() == want, timeout=60, what=f"{rel} on the other device (seed {seed})")
