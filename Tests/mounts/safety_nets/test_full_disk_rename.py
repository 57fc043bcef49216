# One operation, one transaction, seen from a real mount: a rename over a file that meets a full disk fails
# with ENOSPC and leaves both names and both contents as they were; with room again it goes through.
import os

from conftest import BIN, mount_with_store_on, run, small_disk_at


def fill(path):
    """Writes into `path` until the disk refuses more."""
    run("dd", "if=/dev/zero", f"of={path}", "bs=64k", check=False, timeout=120)


def test_mv_over_a_file_on_a_full_disk_leaves_both_names(stub, mount_factory, tmp_path):
    with small_disk_at(tmp_path, 8) as small:
        m = mount_with_store_on(mount_factory, stub, small)
        d = m / "Documents"
        (d / "a.txt").write_text("the file that moves\n")
        (d / "b.txt").write_text("the file it would replace\n")
        run(BIN, "sync", "--wait", "--timeout", "30", m.path)
        fill(small / "filler")
        # The store gives up a reserve on a full disk and tries once more: take that room too.
        os.unlink(small / "store" / "reserve")
        fill(small / "filler2")

        p = run("mv", d / "a.txt", d / "b.txt", check=False)
        assert p.returncode != 0 and "No space left on device" in p.stderr, p.stderr
        assert run("cat", d / "a.txt").stdout == "the file that moves\n"
        assert run("cat", d / "b.txt").stdout == "the file it would replace\n"
        assert sorted(os.listdir(d)) == ["a.txt", "b.txt"]

        os.unlink(small / "filler")
        run("mv", d / "a.txt", d / "b.txt")
        assert sorted(os.listdir(d)) == ["b.txt"]
        assert run("cat", d / "b.txt").stdout == "the file that moves\n"
        m.unmount()
        # The store checks clean once the daemon has let it go: the failed rename left nothing behind.
        assert run(BIN, "check", "--store", m.store).returncode == 0
