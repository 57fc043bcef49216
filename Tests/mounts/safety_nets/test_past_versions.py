"""Part 17: a file's past versions are files under MOUNT/.versions/PATH/, beside its conflict versions and told
apart from them by name (`notes (vN, DEVICE, TIME).txt`); they read like any file (fetched at the open), and
`cp` or `mv` of one onto the live path brings it back as a new version on every device."""
import errno
import os
import re

import pytest

from conftest import PAST_VERSION, attr, conflict_versions_in, edit_in_turn, run, sync, wait_until

NAME = re.compile(r"^notes \(v(\d+), (laptop|desktop), \d{4}-\d\d-\d\d \d\d\.\d\d\.\d\d\)\.txt$")


def past_versions(m, rel="Documents/notes.txt"):
    """The past versions `ls` shows in the file's folder under .versions, oldest first."""
    names = run("ls", m.path / ".versions" / rel).stdout.split("\n")
    past = [n for n in names if PAST_VERSION.search(n)]
    return sorted(past, key=lambda n: int(NAME.match(n).group(1)))


@pytest.fixture
def five_edits(stub, mount_factory):
    """`notes.txt` written five times, in turn on the laptop and on the desktop."""
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    f_a, f_b = a / "Documents" / "notes.txt", b / "Documents" / "notes.txt"
    edit_in_turn(a, b)
    wait_until(lambda: f_a.read_text() == "edit 4\n" and f_b.read_text() == "edit 4\n", timeout=30, what="edit 4")
    return a, b


def test_the_past_versions_of_five_edits_read_as_files_on_both_devices(five_edits):
    a, b = five_edits
    for m in (a, b):
        past = past_versions(m)
        assert [NAME.match(n).group(2) for n in past] == ["laptop", "desktop", "laptop", "desktop"], past
        folder = m.path / ".versions" / "Documents" / "notes.txt"
        assert [run("cat", folder / n).stdout for n in past] == [f"edit {i}\n" for i in range(4)]
        assert run("stat", "-c", "%a %s", folder / past[0]).stdout.split() == ["444", "7"]
        # Past versions are not conflicts.
        assert conflict_versions_in(folder) == []
        assert attr(m / "Documents" / "notes.txt", "hasUnresolvedConflicts") == "0"
    # Read-only: no write, no rm (a past version stays until retention lets it go).
    version = a.path / ".versions" / "Documents" / "notes.txt" / past_versions(a)[0]
    p = run("sh", "-c", f"echo x >> '{version}'", check=False)
    assert p.returncode != 0 and "Read-only file system" in p.stderr, p.stderr
    p = run("rm", "-f", version, check=False)
    assert p.returncode == 1 and "Read-only file system" in p.stderr, p.stderr
    assert version.read_text() == "edit 0\n"


def test_cp_and_mv_of_a_past_version_bring_it_back_on_every_device(five_edits):
    a, b = five_edits
    f_a, f_b = a / "Documents" / "notes.txt", b / "Documents" / "notes.txt"
    run("cp", b.path / ".versions" / "Documents" / "notes.txt" / past_versions(b)[1], f_b)
    assert f_b.read_text() == "edit 1\n"
    sync(b)
    wait_until(lambda: f_a.read_text() == "edit 1\n", timeout=30, what="the copied-back version on the laptop")
    # The content edit 4 replaced is a past version now too; mv brings edit 2 back without a copy.
    wait_until(lambda: len(past_versions(a)) == 5, timeout=30, what="edit 4 listed as past on the laptop")
    mv = run("mv", a.path / ".versions" / "Documents" / "notes.txt" / past_versions(a)[2], f_a, check=False)
    assert mv.returncode == 0, mv.stderr
    assert f_a.read_text() == "edit 2\n"
    sync(a)
    wait_until(lambda: f_b.read_text() == "edit 2\n", timeout=30, what="the moved-back version on the desktop")
    assert attr(f_b, "hasUnresolvedConflicts") == "0"


def test_a_file_never_edited_has_no_past_versions_and_offline_still_lists_conflicts(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    (a / "Documents" / "once.txt").write_text("once\n")
    sync(a)
    assert run("ls", a.path / ".versions" / "Documents" / "once.txt").stdout == ""
    # The folder of a file that does not exist is not there.
    p = run("ls", a.path / ".versions" / "Documents" / "absent.txt", check=False)
    assert p.returncode == 2 and "No such file or directory" in p.stderr
    # A past version's name that the remote does not know is not found either.
    with pytest.raises(OSError) as e:
        os.stat(a.path / ".versions" / "Documents" / "once (v99, laptop, 2026-01-01 00.00.00).txt")
    assert e.value.errno == errno.ENOENT
    stub.stop()
    p = run("ls", a.path / ".versions" / "Documents" / "once.txt", check=False)
    assert p.returncode == 0 and p.stdout == "", p.stderr
