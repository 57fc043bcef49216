"""Part 17: the desktop's Trash on the mount. `gio trash` (what GNOME Files does on Delete) makes the
freedesktop.org per-mount trash folder `.Trash-UID` in the mount's root and moves the file into it; that
folder stays on this device, so the file leaves the remote into Recently Deleted, on every device, while this
device's Trash (`gio list trash://`, through gvfs on a session bus) shows it."""
import os
import subprocess

from conftest import BIN, attr, run, sync, wait_until


def gio(*args, home):
    """`gio ARGS` on a session bus of its own (gvfs's trash:// backend is activated on it)."""
    env = dict(os.environ, HOME=str(home), XDG_DATA_HOME=str(home / ".local" / "share"))
    return subprocess.run(["dbus-run-session", "--", "gio", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=60)


def test_gio_trash_puts_a_file_into_recently_deleted_on_every_device(stub, mount_factory, tmp_path):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    home = tmp_path / "home"
    home.mkdir()
    (a / "Documents" / "report.txt").write_text("quarterly figures\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "report.txt").exists(), timeout=30, what="the report on the desktop")

    p = gio("trash", a / "Documents" / "report.txt", home=home)
    assert p.returncode == 0, p.stderr
    assert not (a / "Documents" / "report.txt").exists()
    trash_dir = a.path / f".Trash-{os.getuid()}"
    assert (trash_dir / "files" / "report.txt").read_text() == "quarterly figures\n"
    info = (trash_dir / "info" / "report.txt.trashinfo").read_text()
    assert "Path=Documents/report.txt" in info, info
    assert attr(trash_dir, "isUbiquitous") == "0"  # by its name in the root, as a .nosync folder
    # The desktop's Trash lists it.
    listed = gio("list", "trash://", home=home)
    assert listed.returncode == 0 and "report.txt" in listed.stdout, (listed.stdout, listed.stderr)

    # On the other device it is gone, into Recently Deleted; the trash folder itself never travels.
    sync(a)
    wait_until(lambda: not (b / "Documents" / "report.txt").exists(), timeout=30, what="the delete on the desktop")
    assert not any(n.startswith(".Trash") for n in os.listdir(b.path))
    listed = run(BIN, "trash", "list", b.path).stdout
    assert "Documents/report.txt" in listed and "laptop" in listed, listed
    assert (b.path / ".trash" / "report.txt").read_text() == "quarterly figures\n"

    run(BIN, "trash", "restore", b.path, "Documents/report.txt")
    assert (b / "Documents" / "report.txt").read_text() == "quarterly figures\n"
    # The laptop takes it back out of its Trash, and it syncs as before.
    wait_until(lambda: (a / "Documents" / "report.txt").exists(), timeout=30, what="the restore on the laptop")
    assert (a / "Documents" / "report.txt").read_text() == "quarterly figures\n"
    assert not (trash_dir / "files" / "report.txt").exists()
    # Its record in the Trash goes with it (Part 20: before, report.txt.trashinfo stayed, and the desktop's
    # Trash listed a file that was not there).
    assert os.listdir(trash_dir / "info") == []
    listed = gio("list", "trash://", home=home)
    assert listed.returncode == 0 and "report.txt" not in listed.stdout, (listed.stdout, listed.stderr)
    assert attr(a / "Documents" / "report.txt", "isUbiquitous") == "1"
    (a / "Documents" / "report.txt").write_text("revised figures\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "report.txt").read_text() == "revised figures\n", timeout=30,
               what="the laptop's edit on the desktop")


def test_gio_trash_of_a_file_not_downloaded_fetches_it_first(stub, mount_factory, tmp_path):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    home = tmp_path / "home"
    home.mkdir()
    data = os.urandom(200_000)
    (b / "Documents" / "photo.jpg").write_bytes(data)
    sync(b)
    wait_until(lambda: (a / "Documents" / "photo.jpg").exists(), timeout=30, what="the photo on the laptop")
    assert attr(a / "Documents" / "photo.jpg", "downloadingStatus") == "notDownloaded"

    p = gio("trash", a / "Documents" / "photo.jpg", home=home)
    assert p.returncode == 0, p.stderr
    assert (a.path / f".Trash-{os.getuid()}" / "files" / "photo.jpg").read_bytes() == data
    sync(a)
    wait_until(lambda: not (b / "Documents" / "photo.jpg").exists(), timeout=30, what="the delete on the desktop")
    assert "Documents/photo.jpg" in run(BIN, "trash", "list", b.path).stdout
