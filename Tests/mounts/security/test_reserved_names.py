"""Part 21 point 7: one list of the names the mount gives a meaning of its own, kept by the server and the mount
alike. The desktop's trash folders in the root (`.Trash`, `.Trash-UID`) belong to each device, whether made
there or renamed there."""
from conftest import attr, remote_names, run, sync, wait_until


def test_a_folder_renamed_as_the_desktop_trash_in_the_root_stays_on_its_device(two):
    # Before Part 21 the rename went to the remote, and the other device showed a .Trash-0 with the file in it.
    stub, a, b = two
    (a / "x").mkdir()
    (a / "x" / "f.txt").write_text("kept here\n")
    sync(a)
    wait_until(lambda: (b / "x" / "f.txt").exists(), what="x/f.txt on b")
    run("mv", a / "x", a / ".Trash-0")
    sync(a)
    wait_until(lambda: not (b / "x").exists(), what="x gone from b")
    assert not (b / ".Trash-0").exists()
    assert {".Trash-0", "x", "f.txt"} & remote_names(stub) == set()
    assert (a / ".Trash-0" / "f.txt").read_text() == "kept here\n"
    assert attr(a / ".Trash-0", "isUbiquitous") == "0"
    # Out of it, the folder is the container's again.
    run("mv", a / ".Trash-0", a / "y")
    sync(a)
    wait_until(lambda: (b / "y" / "f.txt").exists(), what="y/f.txt on b")
    assert (b / "y" / "f.txt").read_text() == "kept here\n"


def test_the_desktop_trash_is_an_ordinary_name_below_the_root(two):
    stub, a, b = two
    (a / "Documents" / ".Trash-0").mkdir()
    (a / "Documents" / ".Trash-0" / "g.txt").write_text("synced\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / ".Trash-0" / "g.txt").exists(), what=".Trash-0/g.txt on b")
