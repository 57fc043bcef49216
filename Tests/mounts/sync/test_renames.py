"""Part 13, point 4: a rename that the file system accepted stays, on every device. Found by fsstress: a push
chosen before a program made a new folder and moved a file into it sent the file into that folder before the
folder's create, the remote refused the place (its parent is not a live directory), and the file went back to
where the remote had it, or for a new file to the top of Documents."""
import os

from conftest import BIN, attr, run, sync, wait_until

MiB = 1 << 20


def test_a_file_moved_into_a_new_folder_during_an_upload_stays_there(stub_factory, mount_factory):
    stub = stub_factory()
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    docs = a / "Documents"
    stub.stop()
    # More large files than the content lane uploads at once (three: each uploads on its own, after the batch
    # that chose them, and one at least waits its turn), written while the remote is away so that one push
    # pass takes them all.
    names = ("one.bin", "two.bin", "three.bin", "four.bin")
    for name in names:
        (docs / name).write_bytes(os.urandom(32 * MiB))
    stub.start()
    wait_until(lambda: any(attr(docs / name, "isUploading") == "1" for name in names),
               timeout=60, interval=0.02, what="an upload under way")
    (docs / "new").mkdir()
    (docs / "new" / "deeper").mkdir()
    moved = docs / "new" / "deeper"
    for name in names:
        if attr(docs / name, "isUploading") != "1":
            os.rename(docs / name, moved / name)
    sync(a, timeout=120)
    assert "goes back" not in a.log()
    left = sorted(os.listdir(moved))
    assert left, "a file was moved"
    for name in left:
        assert (moved / name).exists() and not (docs / name).exists()
        wait_until(lambda: (b / "Documents" / "new" / "deeper" / name).exists(), timeout=60,
                   what=f"{name} in its new folder on the desktop")
    assert sorted(os.listdir(b / "Documents" / "new" / "deeper")) == left


def synced_a_b_then_the_remote_away(stub, mount_factory):
    """Documents/A/B/f.txt on a laptop and a desktop, then the remote stopped: (laptop, desktop, its Documents)."""
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    docs = a / "Documents"
    (docs / "A" / "B").mkdir(parents=True)
    (docs / "A" / "B" / "f.txt").write_text("inside\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "A" / "B" / "f.txt").exists(), what="A/B on desktop")
    stub.stop()
    return a, b, docs


def test_a_folder_turned_upside_down_with_mv_stays_so_on_every_device(stub, mount_factory):
    """`mv A/B N/` into a new folder N, then `mv A N/B/`, then `chmod` of B, all while the remote is away: B's
    push waits for N's create, so A's goes first and meets B still below A on the remote ("an item cannot move
    below itself"). The move out of A goes first, and neither rename is undone."""
    a, b, docs = synced_a_b_then_the_remote_away(stub, mount_factory)
    (docs / "N").mkdir()
    run("mv", docs / "A" / "B", docs / "N" / "")
    run("mv", docs / "A", docs / "N" / "B" / "")
    run("chmod", "700", docs / "N" / "B")
    stub.start()
    sync(a)
    assert (docs / "N" / "B" / "A").is_dir() and not (docs / "A").exists()
    wait_until(lambda: (b / "Documents" / "N" / "B" / "A").is_dir() and not (b / "Documents" / "A").exists(),
               what="N/B/A on desktop")
    assert (b / "Documents" / "N" / "B" / "f.txt").read_text() == "inside\n"
    assert "goes back" not in (a.store / "ubiquityfs.log").read_text(errors="replace")


def test_two_folders_that_wait_for_each_other_with_mv_stay_so_on_every_device(stub, mount_factory):
    """`mv A/B R`, `mv A R/`, `mv R A`, then `chmod` of the inner A, all while the remote is away: B's push
    waits for the name A holds, and A's push for B to leave from above it. A steps aside on the remote, and
    neither rename is undone."""
    a, b, docs = synced_a_b_then_the_remote_away(stub, mount_factory)
    run("mv", docs / "A" / "B", docs / "R")
    run("mv", docs / "A", docs / "R" / "")
    run("mv", docs / "R", docs / "A")
    run("chmod", "700", docs / "A" / "A")
    stub.start()
    sync(a)
    assert sorted(os.listdir(docs)) == ["A"] and sorted(os.listdir(docs / "A")) == ["A", "f.txt"]
    wait_until(lambda: (b / "Documents" / "A" / "A").is_dir() and (b / "Documents" / "A" / "f.txt").exists(),
               what="A/A and A/f.txt on desktop")
    assert sorted(os.listdir(b / "Documents")) == ["A"]
    assert (b / "Documents" / "A" / "f.txt").read_text() == "inside\n"
    assert "goes back" not in (a.store / "ubiquityfs.log").read_text(errors="replace")


def test_a_folder_that_takes_the_name_of_a_folder_removed_here_while_moved_into_it_elsewhere(stub, mount_factory):
    """The laptop, with the remote away, moves y into z, names z y and removes the old y; the desktop moves z
    into y. Once the desktop's move is up, the laptop's z goes first and needs y's name on the remote, and y's
    delete needs z out of y there: z steps aside first, and both devices end with the laptop's y (the old z)
    alone."""
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    docs = a / "Documents"
    (docs / "y").mkdir()
    (docs / "z").mkdir()
    (docs / "z" / "f.txt").write_text("in z\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "z" / "f.txt").exists(), what="z/f.txt on desktop")
    stub.stop()
    run("mv", docs / "y", docs / "z" / "old")
    run("mv", docs / "z", docs / "y")
    run("rmdir", docs / "y" / "old")
    run("mv", b / "Documents" / "z", b / "Documents" / "y" / "")
    a.unmount()
    stub.start()
    sync(b)
    a.mount()
    sync(a)
    assert sorted(os.listdir(docs)) == ["y"] and sorted(os.listdir(docs / "y")) == ["f.txt"]
    wait_until(lambda: sorted(os.listdir(b / "Documents")) == ["y"]
               and sorted(os.listdir(b / "Documents" / "y")) == ["f.txt"], what="y/f.txt alone on desktop")
    assert (b / "Documents" / "y" / "f.txt").read_text() == "in z\n"
    assert attr(a.path, "pendingChanges") == "0" and attr(b.path, "pendingChanges") == "0"


def test_a_chain_of_folders_turned_upside_down_with_their_names_exchanged_stays_so(stub, mount_factory):
    """Part 23's fresh simulation seed 998105977: folders nested three deep, reversed while sync was paused, with
    a file and a folder exchanging names on the way. The pushes wait for one another round the chain; before the
    fix they went round until 'conflict did not settle after 8 tries', for ever, and the other device never saw
    the new tree."""
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    p = a / "Documents" / "P"
    (p / "y 2" / "y" / "z").mkdir(parents=True)
    (p / "a.txt").write_text("the file\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "P" / "y 2" / "y" / "z").is_dir(), timeout=60, what="the tree on the desktop")
    run(BIN, "pause", a.path)
    for src, dst in (("y 2/y/z", "zz"), ("y 2/y", "zz/y"), ("y 2", "zz/y/z"), ("a.txt", "y 2"), ("zz", "a.txt")):
        run("mv", "-T", p / src, p / dst)
    run(BIN, "resume", a.path)
    sync(a, timeout=120)
    assert "did not settle" not in a.log()

    def tree(root):
        return sorted(str(path.relative_to(root)) + ("/" if path.is_dir() else "") for path in root.rglob("*"))

    want = ["a.txt/", "a.txt/y/", "a.txt/y/z/", "y 2"]
    assert tree(p) == want
    wait_until(lambda: tree(b / "Documents" / "P") == want, timeout=60, what="the new tree on the desktop")
    assert (b / "Documents" / "P" / "y 2").read_text() == "the file\n"
