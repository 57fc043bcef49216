"""Part 7: ownership is this device's, as atime is. A new item belongs to the process that made it (its uid and
gid; in a setgid folder the folder's group), chown and chgrp work under the kernel's permission checks, the
owner is kept in the store across remounts, nothing of it is uploaded, and items from another device belong to
the mounting user. The tests run as root, so the mount has allow_other and another user can use it."""
import os
import stat

import pytest

from conftest import run, sync, wait_until

NOBODY = 65534


def as_nobody(cwd, *command, check=True):
    """Runs `command` in `cwd` as uid and gid 65534 with no supplementary groups (paths relative to `cwd`, so
    the test's private folders above the mount need not be open to that user)."""
    return run("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command, cwd=cwd,
               check=check)


def owner(path):
    return run("stat", "-c", "%u:%g", path).stdout.strip()


def pending(m):
    return run("getfattr", "-n", "user.ubiquity.pendingChanges", "--only-values", "--absolute-names",
               m.path).stdout


def item_writes(stub):
    s = stub.stats()
    return s["itemPuts"], s["itemDeletes"], s["blobPuts"]


@pytest.fixture
def shared(stub, mount_factory):
    """A world-writable folder of a mount: (mount, folder)."""
    m = mount_factory(stub)
    folder = m / "Documents" / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    return m, folder


def test_what_another_user_creates_is_theirs_and_they_may_append_and_chmod_it(shared):
    _, folder = shared
    as_nobody(folder, "sh", "-c", "echo one > f && mkdir d && ln -s f link && mkfifo p")
    for name in ("f", "d", "p"):
        assert owner(folder / name) == f"{NOBODY}:{NOBODY}", name
    assert run("stat", "-c", "%u:%g", "--", folder / "link").stdout.strip() == f"{NOBODY}:{NOBODY}"
    as_nobody(folder, "sh", "-c", "echo two >> f && chmod 600 f")
    assert (folder / "f").read_text() == "one\ntwo\n"
    assert stat.S_IMODE(os.stat(folder / "f").st_mode) == 0o600
    assert owner(folder) == "0:0"  # made by root, the mounting user


def test_chown_is_kept_on_this_device_and_never_uploaded(two):
    stub, laptop, desktop = two
    f = laptop / "Documents" / "f"
    f.write_text("data\n")
    sync(laptop)
    wait_until(lambda: (desktop / "Documents" / "f").exists(), what="f on the desktop")
    before = item_writes(stub)
    ctime = os.stat(f).st_ctime_ns
    run("chown", "1234:5678", f)
    assert owner(f) == "1234:5678"
    assert os.stat(f).st_ctime_ns > ctime
    run("chgrp", "42", f)
    assert owner(f) == "1234:42"
    assert pending(laptop) == "0"  # nothing queued
    sync(laptop)
    assert item_writes(stub) == before  # nothing sent
    assert owner(desktop / "Documents" / "f") == "0:0"  # another device's item: the mounting user's
    laptop.unmount()
    laptop.mount()
    assert owner(f) == "1234:42"  # kept in the store
    assert f.read_text() == "data\n"


def test_chown_follows_the_kernels_permission_checks(shared):
    _, folder = shared
    as_nobody(folder, "sh", "-c", "echo x > f")
    refused = as_nobody(folder, "chown", "1234", "f", check=False)
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr
    refused = as_nobody(folder, "chgrp", "0", "f", check=False)  # not a group of theirs
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr
    assert owner(folder / "f") == f"{NOBODY}:{NOBODY}"
    run("chown", "0:0", folder / "f")  # root may
    refused = as_nobody(folder, "chmod", "666", "f", check=False)  # no longer theirs
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr


def test_chown_clears_setuid_and_setgid(shared):
    _, folder = shared
    f = folder / "tool"
    f.write_text("#!/bin/sh\n")
    f.chmod(0o6755)
    run("chown", "1234:5678", f)
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o755


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("io", ["passthrough", "ordinary"])
def test_a_write_or_truncation_by_another_user_clears_setuid_and_setgid(stub, mount_factory, io):
    """With FUSE_HANDLE_KILLPRIV_V2 the kernel no longer asks for security.capability at every write, and the
    daemon clears the bits itself: at a write, an O_TRUNC, a truncation and a fallocate by a caller without
    CAP_FSETID (for a fallocate, which does not say, a caller other than root). The
    setgid bit goes where the group may execute or the caller is not in the file's group; root (CAP_FSETID)
    keeps both."""
    m = mount_factory(stub, extra=[] if io == "passthrough" else ["--no-passthrough"])
    folder = m / "Documents" / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    cases = {"appended": ("sh", "-c", "echo more >> appended"), "overwritten": ("sh", "-c", ": > overwritten"),
             "truncated": ("truncate", "-s", "2", "truncated"), "no-group-exec": ("sh", "-c", "echo x >> no-group-exec"),
             # A fallocate, a punched hole and a zeroed range (xfstests generic/683-685: the bits stayed).
             "allocated": ("fallocate", "-l", "64", "allocated"), "punched": ("fallocate", "-p", "-l", "2", "punched"),
             "zeroed": ("fallocate", "-z", "-l", "2", "zeroed")}
    for name in cases:
        f = folder / name
        f.write_text("#!/bin/sh\n")
        os.chown(f, NOBODY, NOBODY)
        f.chmod(0o2745 if name == "no-group-exec" else 0o6775)
    # Files of root's group, which nobody is not in: setgid goes even where the group may not execute (the
    # kernel's rule; xfstests generic/683-685: 6666 became 2666).
    other_group = {"written-other-group": ("sh", "-c", "echo x >> written-other-group"),
                   "allocated-other-group": ("fallocate", "-l", "64", "allocated-other-group")}
    for name in other_group:
        f = folder / name
        f.write_text("x\n")
        f.chmod(0o6666)
    # The same file written by nobody with root's group among its supplementary groups: setgid stays.
    member = folder / "written-by-a-member"
    member.write_text("x\n")
    member.chmod(0o2666)
    kept = folder / "roots"
    kept.write_text("#!/bin/sh\n")
    kept.chmod(0o6775)
    for command in (*cases.values(), *other_group.values()):
        as_nobody(folder, *command)
    run("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--groups=0", "sh", "-c", "echo x >> written-by-a-member",
        cwd=folder)
    run("sh", "-c", f"echo more >> {kept}")
    for name in ("appended", "overwritten", "truncated", "allocated", "punched", "zeroed"):
        wait_until(lambda: mode_of(folder / name) == 0o775, what=f"{name} without its setuid and setgid bits")
    for name in other_group:
        wait_until(lambda: mode_of(folder / name) == 0o666, what=f"{name} without its setuid and setgid bits")
    assert mode_of(folder / "no-group-exec") == 0o2745, "nobody is in the file's group: setgid stays"
    assert mode_of(member) == 0o2666, "a supplementary group is the file's: setgid stays"
    assert member.read_text() == "x\nx\n"
    assert mode_of(kept) == 0o6775
    assert (folder / "appended").read_text() == "#!/bin/sh\nmore\n"
    assert (folder / "truncated").read_text() == "#!"
    assert (folder / "overwritten").read_text() == ""


def test_a_setgid_folder_gives_new_items_its_group(shared):
    _, folder = shared
    run("chgrp", "5678", folder)
    folder.chmod(0o2777)
    as_nobody(folder, "sh", "-c", "echo x > f && mkdir d")
    assert owner(folder / "f") == f"{NOBODY}:5678"
    assert owner(folder / "d") == f"{NOBODY}:5678"
    assert os.stat(folder / "d").st_mode & stat.S_ISGID  # a folder passes the bit on, as on ext4
