"""Part 20, point 2: editors' safe saves are edits. A program that writes a new file and renames it over the old
one (Python's atomic writers, GLib's g_file_replace, LibreOffice), or renames the old one to a backup name,
writes the new one and removes the backup (vim with backupcopy=no, Word), saves the same file: it keeps its
inode number and its history goes on (`ubiquityfs history` lists the previous content as a version)."""
import os
import signal
import subprocess

import pytest

from conftest import BIN, conflict_versions_in, run, sync, wait_until, freeze

# Run while the kernel forgets inodes every half second, as memory pressure makes it (Part 20, point 5).
pytestmark = pytest.mark.usefixtures("caches_dropped")


def versions(path):
    """The versions `ubiquityfs history` lists for a file (its lines after the header)."""
    return run(BIN, "history", path).stdout.strip().split("\n")[1:]


def saved_twice(m, name, save):
    """Writes `name` once and uploads it, saves it again with `save(path)`, uploads that: the path, and its inode
    number before and after the save."""
    doc = m / "Documents" / name
    doc.write_text("one\n")
    sync(m)
    before = os.stat(doc).st_ino
    save(doc)
    sync(m)
    return doc, before, os.stat(doc).st_ino


def test_an_atomic_writer_saves_the_same_file(stub, mount_factory):
    def atomic_write(doc):
        run("python3", "-c", """
import os, sys, tempfile
path = sys.argv[1]
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp")
with os.fdopen(fd, "w") as f:
    f.write("two\\n")
    f.flush()
    os.fsync(f.fileno())
os.chmod(tmp, 0o644)
os.replace(tmp, path)
""", doc)

    m = mount_factory(stub)
    doc, before, after = saved_twice(m, "notes.txt", atomic_write)
    assert doc.read_text() == "two\n"
    assert after == before
    assert len(versions(doc)) == 2
    assert sorted(os.listdir(doc.parent)) == ["notes.txt"]


def test_a_libreoffice_style_save_is_an_edit(stub, mount_factory):
    def libreoffice(doc):
        lock = doc.parent / f".~lock.{doc.name}#"
        lock.write_text("user,host\n")
        tmp = doc.parent / "lu12345abc.tmp"
        tmp.write_text("two\n")
        run("mv", tmp, doc)
        lock.unlink()

    m = mount_factory(stub)
    doc, before, after = saved_twice(m, "report.odt", libreoffice)
    assert doc.read_text() == "two\n" and after == before
    assert len(versions(doc)) == 2


def test_gio_save_replaces_the_file_as_an_edit(stub, mount_factory):
    m = mount_factory(stub)
    doc, before, after = saved_twice(m, "g.txt", lambda doc: run("gio", "save", doc, input="two\n"))
    assert doc.read_text() == "two\n" and after == before
    assert len(versions(doc)) == 2


def test_vim_saving_through_a_backup_is_an_edit(stub, mount_factory):
    def vim(doc):
        # backupcopy=no: vim renames the file to doc~, writes a new doc, then removes doc~ (nobackup).
        run("vim", "-Es", "-u", "NONE", "-N", "-c", "set backupcopy=no writebackup nobackup noswapfile",
            "-c", "%s/one/two/", "-c", "wq", doc)

    m = mount_factory(stub)
    doc, before, after = saved_twice(m, "v.txt", vim)
    assert doc.read_text() == "two\n" and after == before
    assert len(versions(doc)) == 2
    assert sorted(os.listdir(doc.parent)) == ["v.txt"]


def test_a_rename_of_an_uploaded_file_over_another_still_replaces_it(stub, mount_factory):
    """`mv a b` of two files the remote has is a plain rename: b's item goes (to Recently Deleted)."""
    m = mount_factory(stub)
    a, b = m / "Documents" / "a.txt", m / "Documents" / "b.txt"
    a.write_text("a\n")
    b.write_text("b\n")
    sync(m)
    ino_a = os.stat(a).st_ino
    run("mv", a, b)
    sync(m)
    assert b.read_text() == "a\n" and os.stat(b).st_ino == ino_a
    assert versions(b)[-1].endswith(" Documents/a.txt"), "b.txt's history is a.txt's: the same item, moved"
    assert "b.txt" in run(BIN, "trash", "list", m.path).stdout, "the file replaced is in Recently Deleted"


def test_a_save_by_rename_racing_an_edit_elsewhere_keeps_both_as_a_conflict(two):
    """An atomic save on one device and an edit on another, neither seeing the other's: one is current and the
    other a conflict version under .versions on both devices (before, the save was a delete and a create: the
    edit won over the delete and the saved file became "race 2.txt")."""
    stub, a, b = two
    da, db = a / "Documents" / "race.txt", b / "Documents" / "race.txt"
    da.write_text("base\n")
    sync(a)
    wait_until(lambda: db.exists() and db.read_text() == "base\n", timeout=30, what="race.txt on b")
    freeze(stub.proc.pid)  # neither device can see the other's change meanwhile
    try:
        db.write_text("edited on b\n")
        tmp = a / "Documents" / ".race.txt.tmp"
        tmp.write_text("saved on a\n")
        os.replace(tmp, da)
    finally:
        os.kill(stub.proc.pid, signal.SIGCONT)
    sync(a)
    sync(b)
    for m in (a, b):
        folder = m / ".versions" / "Documents" / "race.txt"
        wait_until(lambda: len(conflict_versions_in(folder)) == 1, timeout=60, what=f"one conflict version on {m.device}")
        wait_until(lambda: sorted(os.listdir(m / "Documents")) == ["race.txt"], timeout=30,
                   what=f"no second file on {m.device}")
    contents = {da.read_text(), db.read_text()}
    assert len(contents) == 1 and contents <= {"edited on b\n", "saved on a\n"}


def test_quick_saves_by_rename_leave_the_files_free_to_evict_and_to_update(two):
    """Programs that save by rename the moment they close (the kernel's release of the new file can reach the
    mount while the rename is being made) leave their files held by nothing: each evicts, and an edit on the
    other device arrives. Before, a release that lost the race to the rename left its file counted as open for
    writing for good: every eviction was refused and every download of a newer version thrown away, the older
    copy served."""
    stub, a, b = two
    names = [f"quick{k}.txt" for k in range(4)]
    for n in names:
        (a / "Documents" / n).write_text("0\n")
    sync(a)
    saver = """
import os, sys
path = sys.argv[1]
for i in range(1, 201):
    with open(path + ".tmp", "w") as f:
        f.write(f"{i}\\n")
    os.rename(path + ".tmp", path)
"""
    procs = [subprocess.Popen(["python3", "-c", saver, str(a / "Documents" / n)]) for n in names]
    assert [p.wait(timeout=120) for p in procs] == [0] * len(names)
    sync(a)
    for n in names:
        da, db = a / "Documents" / n, b / "Documents" / n
        assert da.read_text() == "200\n"
        evict = run("setfattr", "-n", "user.ubiquity.evict", str(da), check=False)
        assert evict.returncode == 0, evict.stderr
        wait_until(lambda: db.exists() and db.read_text() == "200\n", timeout=30, what=f"the last save of {n} on b")
        db.write_text("edited on b\n")
    sync(b)
    for n in names:
        wait_until(lambda: (a / "Documents" / n).read_text() == "edited on b\n", timeout=30, what=f"b's edit of {n} on a")


def test_a_file_saved_by_rename_while_the_new_file_is_still_open_opens_again(stub, mount_factory):
    """A program renames its new file over the old one before closing it (or the kernel's release comes after
    the rename): the file opens again at once, to read and to write, while that handle is still open, and
    the handle's last writes are the file's. Before, with FUSE passthrough, each such open failed with EIO: the
    kernel's inode held the new file's backing file, and the open asked for a second one."""
    m = mount_factory(stub, "laptop")
    assert "FUSE passthrough negotiated" in (m.store / "ubiquityfs.log").read_text(errors="replace")
    doc = m / "Documents" / "held.txt"
    doc.write_text("one\n")
    sync(m)
    run("python3", "-c", """
import os, sys
path = sys.argv[1]
with open(path + ".tmp", "a") as held:
    held.write("two\\n")
    held.flush()
    os.rename(path + ".tmp", path)
    with open(path) as f:
        assert f.read() == "two\\n"
    with open(path, "a") as f:
        f.write("three\\n")
    held.write("four\\n")
""", str(doc))
    sync(m)
    assert doc.read_text() == "two\nthree\nfour\n"
    assert len(versions(doc)) >= 2, "the save is an edit: the first content is a version"
