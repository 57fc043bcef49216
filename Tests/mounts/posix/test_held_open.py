"""Part 13, point 1: an overwrite of a file that another program holds open, after the file was evicted or a
newer version arrived, never empties it. An open that fails changes nothing (not here, not on the remote, not
on the other device); an O_TRUNC open that succeeds truncates the newest content, as on ext4. (What the holder
then reads is ext4's answer too: cp truncates and rewrites the one file in place, so the holder sees the new
bytes; a new version from elsewhere that rewrites the file replaces it, which leaves a holder its old bytes,
and one that only appends is appended in place, as a local append would be.)"""
import os
import random
import subprocess

import pytest

from conftest import run, sync, wait_until

ORIGINAL = "".join(f"{i}\n" for i in range(1, 1001))
NEW = "written over\n"


def overwrite_with_cp(path, tmp_path):
    """`cp` of a new file over `path`; its exit status."""
    src = tmp_path / "new.txt"
    src.write_text(NEW)
    return subprocess.run(["cp", src, path], capture_output=True, text=True).returncode


def settled_everywhere(a, b, rel, cp_status):
    sync(a)
    want = NEW if cp_status == 0 else ORIGINAL
    assert (a / rel).read_text() == want
    wait_until(lambda: (b / rel).read_text() == want, timeout=30, what=f"{rel} on the other device")


# The holder's descriptor is on the evicted content file, the new open on a new one: before the fix both were one
# inode to the kernel, which with passthrough refused the second backing file (EIO) after the daemon had already
# truncated the file (it went up empty), and without it served later opens from the page cache that the holder's
# reads of its old file had filled.
@pytest.mark.parametrize("passthrough", [True, False], ids=["passthrough", "no-passthrough"])
def test_cp_over_an_evicted_file_held_open_keeps_it(stub, mount_factory, tmp_path, passthrough):
    extra = () if passthrough else ("--no-passthrough",)
    a, b = mount_factory(stub, "laptop", extra), mount_factory(stub, "desktop")
    rel = "Documents/f.txt"
    (a / rel).write_text(ORIGINAL)
    sync(a)
    with open(a / rel) as holder:  # tail -f, less, a viewer
        run("setfattr", "-n", "user.ubiquity.evict", a / rel)
        status = overwrite_with_cp(a / rel, tmp_path)
        holder.read()  # (what it reads is ext4's answer: cp truncates and rewrites the one file in place)
    settled_everywhere(a, b, rel, status)


@pytest.mark.parametrize("passthrough", [True, False], ids=["passthrough", "no-passthrough"])
def test_cp_over_a_file_held_open_when_a_newer_version_arrived_keeps_it(stub, mount_factory, tmp_path, passthrough):
    extra = () if passthrough else ("--no-passthrough",)
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop", extra)
    rel = "Documents/f.txt"
    (a / rel).write_text(ORIGINAL[:100])
    sync(a)
    wait_until(lambda: (b / rel).read_text() == ORIGINAL[:100], timeout=30, what="the first version on b")
    with open(b / rel) as holder:
        (a / rel).write_text(ORIGINAL)
        sync(a)
        wait_until(lambda: os.stat(b / rel).st_size == len(ORIGINAL), timeout=30, what="the newer version listed on b")
        status = overwrite_with_cp(b / rel, tmp_path)
        holder.read()
    sync(b)
    want = NEW if status == 0 else ORIGINAL
    assert (b / rel).read_text() == want
    wait_until(lambda: (a / rel).read_text() == want, timeout=30, what=f"{rel} back on a")


@pytest.mark.parametrize("passthrough", [True, False], ids=["passthrough", "no-passthrough"])
def test_cat_gets_the_newest_version_while_another_program_holds_the_old(stub, mount_factory, passthrough):
    """Point 2: `exec 7<B/g.log`, an append on A, then `cat B/g.log` (and a write) on B succeed with the newest
    content. The holder reads the appended lines too, as it would after an append on ext4 (Part 19: a version
    that only lengthens a file held open is appended to it in place, so `tail -F` follows it); a version that
    rewrites the file leaves it what it opened (the next test)."""
    extra = () if passthrough else ("--no-passthrough",)
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop", extra)
    rel = "Documents/g.log"
    (a / rel).write_text("first line\n")
    sync(a)
    wait_until(lambda: (b / rel).read_text() == "first line\n", timeout=30, what="g.log on b")
    with open(b / rel) as holder:
        with open(a / rel, "a") as log:
            log.write("second line\n")
        sync(a)
        wait_until(lambda: os.stat(b / rel).st_size == len("first line\nsecond line\n"), timeout=30,
                   what="the newer version listed on b")
        for _ in range(2):  # the second open finds the new version local
            assert run("cat", b / rel).stdout == "first line\nsecond line\n"
        assert run("grep", "-c", "line", b / rel).stdout == "2\n"
        run("sh", "-c", f"echo third line >> '{b / rel}'")
        assert run("cat", b / rel).stdout == "first line\nsecond line\nthird line\n"
        assert holder.read() == "first line\nsecond line\nthird line\n"
    sync(b)
    wait_until(lambda: (a / rel).read_text() == "first line\nsecond line\nthird line\n", timeout=30,
               what="b's append on a")


@pytest.mark.parametrize("passthrough", [True, False], ids=["passthrough", "no-passthrough"])
def test_a_holder_keeps_what_it_opened_when_the_file_is_rewritten_elsewhere(stub, mount_factory, passthrough):
    """A new version from elsewhere that is not the old content with more at its end replaces the file, as a
    rename over it would on ext4: `cat` gets the new content, the holder reads on in what it opened."""
    extra = () if passthrough else ("--no-passthrough",)
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop", extra)
    rel = "Documents/g.log"
    (a / rel).write_text("first line\nsecond line\n")
    sync(a)
    wait_until(lambda: (b / rel).read_text() == "first line\nsecond line\n", timeout=30, what="g.log on b")
    with open(b / rel) as holder:
        assert holder.readline() == "first line\n"
        (a / rel).write_text("FIRST LINE\nsecond line\nthird line\n")
        sync(a)
        wait_until(lambda: run("cat", b / rel).stdout == "FIRST LINE\nsecond line\nthird line\n", timeout=30,
                   what="the rewritten g.log on b")
        assert holder.read() == "second line\n"


@pytest.mark.parametrize("seed", [1301, 1302])
def test_random_holders_evictions_remote_versions_and_overwrites_against_a_model(stub, mount_factory, tmp_path, seed):
    """A seeded random run on one file: on B programs open it and hold it, it is evicted, overwritten with `cp`
    and read with `cat`; A writes newer versions. The model is the file's history: every `cat` on B shows its
    newest content and never fails, every `cp` succeeds, what a holder reads is one of the file's contents
    (what it opened, or a later overwrite made here: cp rewrites the one file in place), and at the end both
    devices hold the newest content."""
    rng = random.Random(seed)
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    rel = "Documents/race.txt"
    history = [f"version 0 of seed {seed}\n" * 50]
    (a / rel).write_text(history[-1])
    sync(a)
    wait_until(lambda: (b / rel).read_text() == history[-1], timeout=30, what="the first version on b")
    holders, trace = [], []
    try:
        for step in range(30):
            op = rng.choice(["hold", "hold", "release", "evict", "remote", "remote", "cp", "cat"])
            trace.append(op)
            if op == "hold":
                holders.append(open(b / rel))
            elif op == "release" and holders:
                holders.pop(rng.randrange(len(holders))).close()
            elif op == "evict":
                p = run("setfattr", "-n", "user.ubiquity.evict", b / rel, check=False)
                assert p.returncode == 0 or "busy" in p.stderr.lower(), (trace, p.stderr)
            elif op == "remote":
                history.append(f"version {len(history)} from a\n" * rng.randint(1, 200))
                (a / rel).write_text(history[-1])
                sync(a)
                wait_until(lambda: os.stat(b / rel).st_size == len(history[-1]), timeout=30,
                           what=f"version {len(history) - 1} listed on b")
            elif op == "cp":
                history.append(f"version {len(history)} from b\n" * rng.randint(1, 200))
                src = tmp_path / "src.txt"
                src.write_text(history[-1])
                p = run("cp", src, b / rel, check=False)
                assert p.returncode == 0, (trace, p.stderr)
                sync(b)
                wait_until(lambda: (a / rel).read_text() == history[-1], timeout=30, what="b's overwrite on a")
            p = run("cat", b / rel, check=False)
            assert p.returncode == 0 and p.stdout == history[-1], (trace, p.returncode, p.stderr, p.stdout[:80])
            for h in holders:
                h.seek(0)
                assert h.read() in history, trace
    finally:
        for h in holders:
            h.close()
    sync(b)
    assert (a / rel).read_text() == (b / rel).read_text() == history[-1], trace


# Found by the adapter's reference model (Tests/UbiquityFUSETests, seed 25): `truncate -s N` of a file whose
# newer version had arrived but was not downloaded yet cut the older local copy and uploaded that, so the other
# device's edit was lost on every device. It now fetches the newest version first.
def test_truncate_of_a_file_whose_newer_version_arrived_keeps_the_newer_bytes(stub, mount_factory):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    rel = "Documents/f.txt"
    (a / rel).write_text("old\n")
    sync(a)
    wait_until(lambda: (b / rel).read_text() == "old\n", timeout=30, what="the first version on b")
    (a / rel).write_text(ORIGINAL)
    sync(a)
    wait_until(lambda: os.stat(b / rel).st_size == len(ORIGINAL), timeout=30, what="the newer version listed on b")
    # truncate(2) by path, as Python's os.truncate and Perl's truncate call it (GNU truncate opens the file
    # first, which fetched the newest version already).
    run("python3", "-c", "import os, sys; os.truncate(sys.argv[1], 9)", b / rel)
    assert (b / rel).read_text() == ORIGINAL[:9]
    sync(b)
    wait_until(lambda: (a / rel).read_text() == ORIGINAL[:9], timeout=30, what="the truncation on a")
