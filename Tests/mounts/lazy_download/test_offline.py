"""Offline without stalls (Part 7's contract, Part 9 point 3): while the remote is known to be unreachable, an
open is answered at once, from an older local copy where there is one, else EIO with the cause in
downloadingError; no open waits out the download timeout. The mount root says offline and since when."""
import re
import time

from conftest import BIN, run, wait_until, attr, freeze


def test_offline_open_is_answered_at_once(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop", extra=["--download-timeout", "60"])
    (a / "Documents" / "remote.txt").write_text("only on the remote\n")
    (a / "Documents" / "stale.txt").write_text("old\n")
    run(BIN, "sync", "--wait", "--timeout", "30", a.path)
    wait_until(lambda: (b / "Documents" / "stale.txt").exists(), what="stale.txt on b")
    assert (b / "Documents" / "stale.txt").read_text() == "old\n"
    (a / "Documents" / "stale.txt").write_text("newer content\n")
    run(BIN, "sync", "--wait", "--timeout", "30", a.path)
    wait_until(lambda: attr(b / "Documents" / "stale.txt", "downloadingStatus") == "downloaded",
               what="the newer version to be listed on b")
    stub.stop()
    wait_until(lambda: attr(b.path, "isOffline") == "1", what="b to see the remote gone")
    t0 = time.monotonic()
    p = run("cat", b / "Documents" / "remote.txt", check=False)
    took = time.monotonic() - t0
    assert p.returncode == 1 and "Input/output error" in p.stderr
    assert took < 30, f"the open waited {took:.1f}s for a remote known to be away (timeout 60s)"
    assert "unreachable" in attr(b / "Documents" / "remote.txt", "downloadingError")
    # An older local copy is served at once (the kernel shows it within the newer version's size).
    p = run("cat", b / "Documents" / "stale.txt", check=False)
    assert p.returncode == 0 and p.stdout.startswith("old\n")
    # Written, that older copy went up over the newer version once online, and a's edit was lost everywhere (the
    # adapter's reference model, seed 1001866): it opens to read only.
    p = run("sh", "-c", 'echo more >> "$1"', "sh", b / "Documents" / "stale.txt", check=False)
    assert p.returncode != 0 and "Input/output error" in p.stderr
    stub.start()
    wait_until(lambda: run("cat", b / "Documents" / "remote.txt", check=False).stdout == "only on the remote\n",
               timeout=30, what="the open to work again once the remote is back")
    wait_until(lambda: (b / "Documents" / "stale.txt").read_text() == "newer content\n", timeout=30,
               what="the newer version on b")
    assert (a / "Documents" / "stale.txt").read_text() == "newer content\n"


def test_the_mount_root_says_offline_and_since_when(stub, mount_factory):
    m = mount_factory(stub, "laptop")
    assert attr(m.path, "isOffline") == "0" and attr(m.path, "offlineSince") is None
    assert "online" in run(BIN, "status", m.path).stdout
    stub.stop()
    wait_until(lambda: attr(m.path, "isOffline") == "1", timeout=10, what="the mount to notice the remote is gone")
    since = attr(m.path, "offlineSince")
    assert since and since.endswith("Z") and since.startswith("20"), since
    assert f"offline since {since}" in run(BIN, "status", m.path).stdout
    listed = run("getfattr", "-d", "-m", "-", "--absolute-names", m.path).stdout
    assert "user.ubiquity.isOffline" in listed and "user.ubiquity.offlineSince" in listed
    stub.start()
    # The return is noticed within a couple of seconds, not at the end of a long poll.
    wait_until(lambda: attr(m.path, "isOffline") == "0", timeout=8, what="the mount to notice the remote is back")
    assert attr(m.path, "offlineSince") is None


def test_a_hung_remote_fails_the_next_opens_at_once_and_downloads_go_on_when_it_is_back(stub, mount_factory):
    """A remote that hangs (stopped, not dead) costs one open its --download-timeout; from then on the mount
    knows it is away: the next opens fail at once with that cause, no local copy is evicted to make room for a
    download that cannot happen, and a background download asked for meanwhile runs once the remote answers."""
    import os
    import signal
    m = mount_factory(stub, "laptop", extra=["--download-timeout", "3", "--cache-size", "64K"])
    docs = m / "Documents"
    # one.txt fits beside kept.txt in 64K; two.txt only once kept.txt is evicted.
    for name, size in (("one", 3000), ("two", 40000), ("kept", 40000)):
        (docs / f"{name}.txt").write_bytes(name[0].encode() * size)
    run(BIN, "sync", "--wait", "--timeout", "30", m.path)
    for name in ("one", "two"):
        run("setfattr", "-n", "user.ubiquity.evict", docs / f"{name}.txt")
    run(BIN, "download", "--wait", docs / "kept.txt")
    freeze(stub.proc.pid)
    try:
        first = run("cat", docs / "one.txt", check=False)
        assert first.returncode == 1 and "Input/output error" in first.stderr, first
        # It waited the mount's --download-timeout, not the transfer's own 30-s limit on silence.
        assert re.search(r"stalled.* for 3 s$", attr(docs / "one.txt", "downloadingError")), \
            attr(docs / "one.txt", "downloadingError")
        assert attr(m.path, "isOffline") == "1", "a download that timed out says the remote is away"
        second = run("cat", docs / "two.txt", check=False)
        assert second.returncode == 1 and "Input/output error" in second.stderr
        assert "away" in attr(docs / "two.txt", "downloadingError")
        assert attr(docs / "kept.txt", "downloadingStatus") == "current", "evicted for a download that cannot happen"
        run("setfattr", "-n", "user.ubiquity.download", docs / "two.txt")
    finally:
        os.kill(stub.proc.pid, signal.SIGCONT)
    # The mount asks the hung remote every 2 s whether it is back; before, it waited for a long poll of the
    # change feed to end (its 25-s wait: the feed had nothing new), so this took 20-25 s.
    wait_until(lambda: attr(docs / "two.txt", "downloadingStatus") == "current", timeout=15,
               what="the download asked for while the remote hung, once it answers")
    assert attr(m.path, "isOffline") == "0"


def test_download_wait_right_after_the_remote_is_back_waits_for_the_new_try(stub, mount_factory):
    """`ubiquityfs download --wait` of a file whose last download failed (the remote was away) waits for the new
    try: it does not take the last try's error, still shown until the new try starts, for its own."""
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    (a / "Documents" / "later.txt").write_text("fetched once the remote is back\n")
    run(BIN, "sync", "--wait", "--timeout", "30", a.path)
    wait_until(lambda: (b / "Documents" / "later.txt").exists(), what="later.txt listed on b")
    stub.stop()
    wait_until(lambda: attr(b.path, "isOffline") == "1", what="b to see the remote gone")
    assert run("cat", b / "Documents" / "later.txt", check=False).returncode == 1
    assert attr(b / "Documents" / "later.txt", "downloadingError")
    stub.start()
    p = run(BIN, "download", "--wait", b / "Documents" / "later.txt", check=False, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (b / "Documents" / "later.txt").read_text() == "fetched once the remote is back\n"


def test_moves_into_new_folders_made_offline_keep_every_name(stub, mount_factory):
    # The adapter's reference model, seed 2026120603: offline, `mkdir -p e/d; mv a e/d/a; touch a`; once back,
    # the new `a` showed as "a 2" on every device (its name waited for the old a's move, which waited for e/d,
    # which waited for e, and the pusher gave up after e).
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    docs_a, docs_b = a / "Documents", b / "Documents"
    (docs_a / "a").write_text("first\n")
    run(BIN, "sync", "--wait", "--timeout", "30", a.path)
    wait_until(lambda: (docs_b / "a").exists(), what="a on the desktop")
    stub.stop()
    wait_until(lambda: attr(a.path, "isOffline") == "1", what="the laptop to see the remote gone")
    run("mkdir", "-p", docs_a / "e" / "d")
    run("mv", docs_a / "a", docs_a / "e" / "d" / "a")
    run("sh", "-c", 'echo second > "$1"', "sh", docs_a / "a")
    stub.start()
    run(BIN, "sync", "--wait", "--timeout", "60", a.path)
    wait_until(lambda: (docs_b / "e" / "d" / "a").exists() and (docs_b / "a").read_text() == "second\n",
               timeout=30, what="both files in their places on the desktop")
    assert sorted(p.name for p in docs_b.iterdir()) == ["a", "e"]
    assert sorted(p.name for p in docs_a.iterdir()) == ["a", "e"]
    assert (docs_b / "e" / "d" / "a").read_text() == "first\n"
