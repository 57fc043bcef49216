"""Part 13, point 4: a rename that the file system accepted stays, on every device. Found by fsstress: a push
chosen before a program made a new folder and moved a file into it sent the file into that folder before the
folder's create, the remote refused the place (its parent is not a live directory), and the file went back to
where the remote had it, or for a new file to the top of Documents."""
import os

from conftest import attr, sync, wait_until

MiB = 1 << 20


def test_a_file_moved_into_a_new_folder_during_an_upload_stays_there(stub_factory, mount_factory):
    stub = stub_factory()
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    docs = a / "Documents"
    stub.stop()
    # Two large files (each uploads on its own, after the batch that chose them), written while the remote is
    # away so that one push pass takes both.
    for name in ("one.bin", "two.bin"):
        (docs / name).write_bytes(os.urandom(48 * MiB))
    stub.start()
    wait_until(lambda: attr(docs / "one.bin", "isUploading") == "1" or attr(docs / "two.bin", "isUploading") == "1",
               timeout=60, interval=0.02, what="an upload under way")
    (docs / "new").mkdir()
    (docs / "new" / "deeper").mkdir()
    moved = docs / "new" / "deeper"
    for name in ("one.bin", "two.bin"):
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
