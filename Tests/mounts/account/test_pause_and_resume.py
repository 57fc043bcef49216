"""Part 23: sync turned off for one container and back on (`ubiquityfs pause|resume`): local work goes on and
waits, nothing goes to or comes from the remote, the pause holds across a remount, and a resume goes on where
it stopped."""
import time

from conftest import BIN, attr, run, wait_until

NOTES = "iCloud.com.example.notes"
DRAW = "iCloud.com.example.draw"


def test_a_paused_container_keeps_its_work_and_resumes_where_it_stopped(stub, mount_factory):
    laptop = mount_factory(stub, device="laptop", container=None, extra=["--containers", f"{NOTES},{DRAW}"])
    phone = mount_factory(stub, device="phone", container=NOTES)
    notes, draw = laptop.path / "iCloud~com~example~notes", laptop.path / "iCloud~com~example~draw"
    (notes / "Documents/old.txt").write_text("old\n")
    laptop.sync()
    wait_until(lambda: (phone / "Documents/old.txt").exists(), timeout=30, what="old.txt on the phone")
    run(BIN, "evict", notes / "Documents/old.txt")

    out = run(BIN, "pause", notes / "Documents").stdout
    assert "paused" in out and "iCloud~com~example~notes" in out, out
    assert attr(notes, "syncPaused") == "1" and attr(draw, "syncPaused") == "0"
    (notes / "Documents/offline.txt").write_text("written while paused\n")
    (phone / "Documents/from-phone.txt").write_text("phone\n")
    phone.sync()
    (draw / "Documents/still-syncing.txt").write_text("draw goes on\n")
    time.sleep(3)  # what the laptop would have sent and taken by now, had it not paused
    assert attr(notes, "pendingChanges") == "1"
    assert attr(notes / "Documents/offline.txt", "isUploaded") == "0"
    assert not (notes / "Documents/from-phone.txt").exists()
    assert not (phone / "Documents/offline.txt").exists()
    # An open of content that is not here fails at once, and says why.
    p = run("cat", notes / "Documents/old.txt", check=False)
    assert p.returncode == 1 and "Input/output error" in p.stderr, p.stderr
    assert "paused" in attr(notes / "Documents/old.txt", "downloadingError")
    out = run(BIN, "status", notes).stdout
    assert "sync paused" in out, out
    # The other container of the mount syncs as before.
    laptop_draw_pending = lambda: attr(draw, "pendingChanges") == "0"
    wait_until(laptop_draw_pending, timeout=30, what="the draw container's upload")

    # The pause holds across a remount.
    laptop.unmount()
    laptop.mount()
    assert attr(notes, "syncPaused") == "1"
    time.sleep(2)
    assert attr(notes, "pendingChanges") == "1" and not (phone / "Documents/offline.txt").exists()

    # Resumed: both ways, from where it stopped.
    assert "resumed" in run(BIN, "resume", notes).stdout
    assert attr(notes, "syncPaused") == "0"
    run(BIN, "sync", "--wait", "--timeout", "30", notes)
    wait_until(lambda: (phone / "Documents/offline.txt").exists(), timeout=30, what="offline.txt on the phone")
    assert (phone / "Documents/offline.txt").read_text() == "written while paused\n"
    wait_until(lambda: (notes / "Documents/from-phone.txt").exists(), timeout=30, what="the phone's file")
    assert (notes / "Documents/old.txt").read_text() == "old\n"


def test_pause_on_the_root_of_a_mount_of_several_pauses_every_container(stub, mount_factory):
    laptop = mount_factory(stub, device="laptop", container=None, extra=["--containers", f"{NOTES},{DRAW}"])
    out = run(BIN, "pause", laptop.path).stdout
    assert out.count("paused") == 2, out
    assert attr(laptop.path / "iCloud~com~example~notes", "syncPaused") == "1"
    assert attr(laptop.path / "iCloud~com~example~draw", "syncPaused") == "1"
    run(BIN, "resume", laptop.path)
    assert attr(laptop.path / "iCloud~com~example~draw", "syncPaused") == "0"
    # Only 0 and 1, and only on a container's root.
    p = run("setfattr", "-n", "user.ubiquity.syncPaused", "-v", "2", laptop.path / "iCloud~com~example~draw",
            check=False)
    assert p.returncode == 1 and "Invalid argument" in p.stderr, p.stderr
    p = run("setfattr", "-n", "user.ubiquity.syncPaused", "-v", "1",
            laptop.path / "iCloud~com~example~draw/Documents", check=False)
    assert p.returncode == 1 and "Invalid argument" in p.stderr, p.stderr
    p = run(BIN, "pause", "/tmp", check=False)
    assert p.returncode == 1 and "not in a ubiquityfs mount" in p.stderr, p.stderr
