"""Part 12, idempotent changes: a write whose answer is lost is retried with the same change id, and the stub
answers the retry as already applied (208), also after the daemon restarted and after another device changed
the item further or deleted it meanwhile. Nothing comes back, no conflict version or "name 2" appears."""
import hashlib
import os

from conftest import CONTAINER, attr, conflict_versions_in, read, sync, wait_until


def entries(m):
    return sorted(os.listdir(m / "Documents"))


def remote_documents(stub):
    """The stub's live items in Documents, by name."""
    items = stub.request("GET", f"/v1/containers/{CONTAINER}/changes?since=0")["items"]
    return {i["name"]: i for i in items if i.get("parent") == "documents" and not i["deleted"]}


def lose_the_answer_of_the_next_write(stub, laptop, write):
    """Runs `write` on the laptop with the stub losing the answer of the item write it makes; kills the laptop's
    daemon once that write has landed, before its retry (which its restart sends)."""
    before = stub.stats()["itemPuts"]
    stub.faults(loseAnswerNext=1)
    write()
    wait_until(lambda: stub.stats()["itemPuts"] > before, timeout=20, what="the write landed")
    laptop.kill_daemon()


def test_a_retry_after_a_lost_answer_meets_a_later_edit_as_applied(two):
    stub, laptop, desktop = two
    (laptop / "Documents" / "notes.txt").write_bytes(b"one\n")
    sync(laptop)
    wait_until(lambda: read(desktop / "Documents" / "notes.txt") == b"one\n", what="one on the desktop")
    lose_the_answer_of_the_next_write(stub, laptop,
                                      lambda: (laptop / "Documents" / "notes.txt").write_bytes(b"two\n"))
    wait_until(lambda: read(desktop / "Documents" / "notes.txt") == b"two\n", what="two on the desktop")
    (desktop / "Documents" / "notes.txt").write_bytes(b"three, from the desktop\n")
    sync(desktop)
    laptop.mount()
    sync(laptop)
    wait_until(lambda: read(laptop / "Documents" / "notes.txt") == b"three, from the desktop\n",
               what="the desktop's edit on the laptop")
    sync(desktop)
    there = remote_documents(stub)
    assert sorted(there) == ["notes.txt"]
    assert there["notes.txt"]["sha256"] == hashlib.sha256(b"three, from the desktop\n").hexdigest()
    assert there["notes.txt"]["conflicts"] == [] and there["notes.txt"]["device"] == "desktop"
    for m in (laptop, desktop):
        assert entries(m) == ["notes.txt"], m.log()
        assert read(m / "Documents" / "notes.txt") == b"three, from the desktop\n"
        assert attr(m / "Documents" / "notes.txt", "hasUnresolvedConflicts") == "0"
        assert conflict_versions_in(m.path / ".versions" / "Documents" / "notes.txt") == []
    assert stub.stats()["appliedRetries"] == 1


def test_a_retry_after_a_lost_answer_does_not_revive_a_file_deleted_elsewhere(two):
    stub, laptop, desktop = two
    (laptop / "Documents" / "keep.txt").write_bytes(b"kept\n")
    (laptop / "Documents" / "gone.txt").write_bytes(b"one\n")
    sync(laptop)
    wait_until(lambda: entries(desktop) == ["gone.txt", "keep.txt"], what="both files on the desktop")
    lose_the_answer_of_the_next_write(stub, laptop,
                                      lambda: (laptop / "Documents" / "gone.txt").write_bytes(b"two\n"))
    wait_until(lambda: read(desktop / "Documents" / "gone.txt") == b"two\n", what="two on the desktop")
    (desktop / "Documents" / "gone.txt").write_bytes(b"three\n")
    sync(desktop)
    (desktop / "Documents" / "gone.txt").unlink()
    sync(desktop)
    laptop.mount()
    sync(laptop)
    wait_until(lambda: entries(laptop) == ["keep.txt"], what="the delete on the laptop")
    sync(desktop)
    assert sorted(remote_documents(stub)) == ["keep.txt"], "the retry revived the file on the remote"
    for m in (laptop, desktop):
        assert entries(m) == ["keep.txt"], m.log()
        assert read(m / "Documents" / "keep.txt") == b"kept\n"
    assert stub.stats()["appliedRetries"] == 1
