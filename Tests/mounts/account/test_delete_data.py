"""Part 23: deleting an app's data (`ubiquityfs delete-data`): everything of a container outside Documents/
(with --documents, everything) goes from the remote and every device in one step, after a confirmation, as one
entry of Recently Deleted that `trash restore` brings back whole; everything else stays as it was."""
import json
import os
import time

from conftest import BIN, attr, run, wait_until

NOTES = "iCloud.com.example.notes"
DRAW = "iCloud.com.example.draw"


def visible(root):
    """The names `ls -A` shows in `root`, sorted, but the mount's own folders."""
    return sorted(set(run("ls", "-A", root).stdout.split()) - {".kvstore", ".trash", ".versions"})


def trash(root):
    return json.loads(run(BIN, "trash", "list", "--json", root).stdout)


def test_an_apps_data_goes_everywhere_in_one_step_and_comes_back_whole(stub, mount_factory):
    laptop = mount_factory(stub, device="laptop", container=None, extra=["--containers", f"{NOTES},{DRAW}"])
    phone = mount_factory(stub, device="phone", container=NOTES)
    notes, draw = laptop.path / "iCloud~com~example~notes", laptop.path / "iCloud~com~example~draw"
    (notes / "Documents/keep.txt").write_text("a document\n")
    os.makedirs(notes / "Library/Caches")
    (notes / "Library/Caches/cache.bin").write_bytes(os.urandom(300_000))
    (notes / "Library/old.txt").write_text("deleted before\n")
    (notes / "settings.json").write_text('{"theme": "dark"}\n')
    (draw / "data.txt").write_text("the other app's data\n")
    laptop.sync()
    wait_until(lambda: (phone.path / "Library/Caches/cache.bin").exists(), timeout=30, what="the data on the phone")
    cache = (notes / "Library/Caches/cache.bin").read_bytes()
    os.remove(notes / "Library/old.txt")
    laptop.sync()

    # Refused where it cannot mean one container, or a container's root.
    p = run(BIN, "delete-data", laptop.path, "--yes", check=False)
    assert p.returncode == 1 and "holds several containers" in p.stderr, p.stderr
    p = run(BIN, "delete-data", notes / "Library", "--yes", check=False)
    assert p.returncode == 1 and "is not the root of a container" in p.stderr, p.stderr
    # Without --yes it asks; anything but yes deletes nothing.
    p = run(BIN, "delete-data", notes, input="n\n", check=False)
    assert p.returncode == 1 and "nothing deleted" in p.stderr, p.stderr
    assert "4 items" in p.stdout and "every device" in p.stdout, p.stdout
    assert (notes / "settings.json").exists() and (phone.path / "settings.json").exists()

    p = run(BIN, "delete-data", notes, input="y\n")
    assert "deleted 4 items" in p.stdout and "[app data]" in p.stdout, p.stdout
    assert visible(notes) == ["Documents"], "at once on this device"
    wait_until(lambda: visible(phone.path) == ["Documents"], timeout=30, what="the deletion on the phone")
    assert (phone.path / "Documents/keep.txt").read_text() == "a document\n"
    assert (notes / "Documents/keep.txt").read_text() == "a document\n"
    assert (draw / "data.txt").read_text() == "the other app's data\n", "the other container is untouched"

    # One entry in Recently Deleted, next to what was deleted before it.
    entries = trash(phone.path)
    assert sorted(e["path"] for e in entries) == ["Library/old.txt", "[app data]"], entries
    whole = next(e for e in entries if e["path"] == "[app data]")
    assert whole["itemsInside"] == 4 and whole["device"] == "laptop" and whole["size"] == 300_000 + len("{\"theme\": \"dark\"}\n"), whole
    assert "[app data]" in run(BIN, "trash", "list", notes).stdout

    # Restored whole from any device, and nothing else with it.
    assert "restored [app data]" in run(BIN, "trash", "restore", phone.path, "[app data]").stdout
    assert visible(phone.path) == ["Documents", "Library", "settings.json"]
    wait_until(lambda: (notes / "Library/Caches/cache.bin").exists(), timeout=30, what="the restore on the laptop")
    assert (notes / "Library/Caches/cache.bin").read_bytes() == cache
    assert (phone.path / "settings.json").read_text() == '{"theme": "dark"}\n'
    assert not (notes / "Library/old.txt").exists()
    assert [e["path"] for e in trash(notes)] == ["Library/old.txt"]


def test_with_documents_everything_goes_and_changes_waiting_refuse_it(stub, mount_factory):
    m = mount_factory(stub, device="laptop")
    (m.path / "Documents/a.txt").write_text("a\n")
    (m.path / "notes.db").write_text("data\n")
    m.sync()
    # A change of this device still to upload would come back after the deletion: refused first.
    run(BIN, "pause", m.path)
    (m.path / "late.txt").write_text("not uploaded\n")
    p = run(BIN, "delete-data", m.path, "--yes", check=False)
    assert p.returncode == 1 and "wait to upload" in p.stderr, p.stderr
    run(BIN, "resume", m.path)
    m.sync()

    out = run(BIN, "delete-data", m.path, "--documents", "--yes").stdout
    assert "deleted 4 items" in out and "[all data]" in out, out
    assert visible(m.path) == []
    assert [e["path"] for e in trash(m.path)] == ["[all data]"]
    # An empty of the entry takes it whole; then there is nothing left to delete.
    assert "removed [all data] for good" in run(BIN, "trash", "empty", m.path, "[all data]").stdout
    assert trash(m.path) == []
    assert "nothing to delete" in run(BIN, "delete-data", m.path, "--yes").stdout
    # Only data or all, through the attribute too.
    p = run("setfattr", "-n", "user.ubiquity.deleteData", "-v", "some", m.path / ".trash", check=False)
    assert p.returncode == 1 and "Invalid argument" in p.stderr, p.stderr


def test_a_container_left_with_nothing_leaves_an_all_containers_mount_and_comes_back(stub, mount_factory):
    phone = mount_factory(stub, device="phone", container=DRAW)
    (phone.path / "Documents/sketch.txt").write_text("a sketch\n")
    phone.sync()
    laptop = mount_factory(stub, device="laptop", container=None, extra=["--all-containers"])
    draw = laptop.path / "iCloud~com~example~draw"
    assert (draw / "Documents/sketch.txt").read_text() == "a sketch\n"

    run(BIN, "delete-data", draw, "--documents", "--yes")
    wait_until(lambda: visible(phone.path) == [], timeout=30, what="the deletion on the phone")
    time.sleep(3)  # two looks at the remote's list: still in Recently Deleted, so the folder stays
    assert "iCloud~com~example~draw" in os.listdir(laptop.path)
    run(BIN, "trash", "empty", phone.path)
    wait_until(lambda: "iCloud~com~example~draw" not in os.listdir(laptop.path), timeout=30,
               what="the empty container's folder to go")
    assert not draw.exists() and attr(laptop.path, "containers") in (None, "")
    p = run("ls", draw, check=False)
    assert p.returncode == 2 and "No such file or directory" in p.stderr, p.stderr

    # Something in it again (from a device that mounts it): it is back, with what it holds.
    (phone.path / "again.txt").write_text("back\n")
    phone.sync()
    wait_until(lambda: (draw / "again.txt").exists(), timeout=30, what="the container back in the mount")
    assert (draw / "again.txt").read_text() == "back\n"


def test_an_edit_the_deletion_had_not_seen_is_kept(stub, mount_factory):
    """No edit is lost: a device that edited a file of the app's data before it learned of the deletion keeps
    its edit (and the folders above it come back with it), on every device."""
    laptop = mount_factory(stub, device="laptop")
    phone = mount_factory(stub, device="phone")
    os.makedirs(laptop.path / "Library/Preferences")
    (laptop.path / "Library/Preferences/prefs.txt").write_text("first\n")
    (laptop.path / "cache.bin").write_text("cached\n")
    laptop.sync()
    wait_until(lambda: (phone.path / "Library/Preferences/prefs.txt").exists(), timeout=30, what="prefs on the phone")
    run(BIN, "pause", phone.path)
    (phone.path / "Library/Preferences/prefs.txt").write_text("edited on the phone\n")
    run(BIN, "delete-data", laptop.path, "--yes")
    assert visible(laptop.path) == ["Documents"]
    run(BIN, "resume", phone.path)
    phone.sync()
    wait_until(lambda: (laptop.path / "Library/Preferences/prefs.txt").exists(), timeout=30, what="the edit back")
    assert (laptop.path / "Library/Preferences/prefs.txt").read_text() == "edited on the phone\n"
    assert (phone.path / "Library/Preferences/prefs.txt").read_text() == "edited on the phone\n"
    wait_until(lambda: not (phone.path / "cache.bin").exists(), timeout=30, what="the rest deleted on the phone")
    assert visible(phone.path) == visible(laptop.path) == ["Documents", "Library"]
