"""Part 11 goal 4: many changes go up in batches (POST .../batch), and the other device ends with exactly the
same tree; an entry of a batch refused by a name clash made on the other device resolves as a single push
would (the new file takes a free name)."""
import hashlib
import os
import random
import signal

from conftest import run, sync, wait_until, freeze


def tree(root):
    """Every path below `root`: a folder's as "dir", a file's as the hash of its content."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), root)] = "dir"
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_many_creates_moves_and_deletes_arrive_exactly(two):
    stub, a, b = two
    rnd = random.Random(5)
    docs = a / "Documents"
    for f in range(4):
        (docs / f"f{f}" / "sub").mkdir(parents=True)
        for i in range(80):
            (docs / f"f{f}" / f"n{i}.txt").write_bytes(rnd.randbytes(rnd.randint(0, 6000)))
        for i in range(10):
            (docs / f"f{f}" / "sub" / f"s{i}").write_bytes(rnd.randbytes(100))
    (docs / "f0" / "big.bin").write_bytes(rnd.randbytes(200_000))  # too large to go inline
    sync(a)
    wait_until(lambda: tree(b / "Documents") == tree(docs), timeout=60, what="the created tree on B")
    assert stub.stats()["batches"] >= 1
    # Moves across folders, renames, edits and deletes, a whole folder removed, a new folder filled.
    for i in range(20):
        os.rename(docs / "f1" / f"n{i}.txt", docs / "f2" / f"moved{i}.txt")
    for i in range(20, 30):
        os.rename(docs / "f1" / f"n{i}.txt", docs / "f1" / f"renamed{i}.txt")
    for i in range(30, 50):
        (docs / "f2" / f"n{i}.txt").write_bytes(b"edited %d\n" % i)
    for i in range(50, 80):
        os.unlink(docs / "f3" / f"n{i}.txt")
    run("rm", "-rf", docs / "f0")
    (docs / "new").mkdir()
    for i in range(40):
        (docs / "new" / f"x{i}").write_bytes(b"x" * i)
    os.rename(docs / "f3" / "sub", docs / "new" / "sub-from-f3")
    sync(a)
    want = tree(docs)
    wait_until(lambda: tree(b / "Documents") == want, timeout=60, what="the changed tree on B")
    assert "f0" not in want and want["f2/moved3.txt"] != "dir" and "new/sub-from-f3/s1" in want
    assert sorted(os.listdir(b / "Documents" / "f3")) == sorted(f"n{i}.txt" for i in range(50))


def test_a_batch_entry_refused_by_a_name_clash_takes_a_free_name(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    stub.stop()
    for i in range(30):
        (a / "Documents" / f"other{i}.txt").write_text(f"other {i}\n")
    (a / "Documents" / "plan.txt").write_text("laptop plan\n")
    pids = a.daemon_pids()
    for pid in pids:
        freeze(pid)  # A keeps its changes to itself until B's plan.txt is on the remote
    try:
        stub.start()
        (b / "Documents" / "plan.txt").write_text("desktop plan\n")
        sync(b)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    want = sorted(["plan.txt", "plan 2.txt"] + [f"other{i}.txt" for i in range(30)])
    wait_until(lambda: all(sorted(os.listdir(m / "Documents")) == want for m in (a, b)), timeout=60,
               what="plan.txt and plan 2.txt with the others on both")
    for m in (a, b):
        assert (m / "Documents" / "plan.txt").read_text() == "desktop plan\n"
        assert (m / "Documents" / "plan 2.txt").read_text() == "laptop plan\n"
    assert stub.stats()["batches"] >= 1, "the laptop's files went up in a batch"
    sync(a)
    assert tree(a / "Documents") == tree(b / "Documents")
