"""Part 20, point 7: the safety nets' commands say plainly what is wrong with a path they are given."""
from conftest import BIN, run


def test_history_and_rewind_of_a_path_that_does_not_exist_say_so(stub, mount_factory):
    m = mount_factory(stub)
    (m / "Documents" / "new.txt").write_text("not uploaded yet\n")
    p = run(BIN, "history", m / "Documents" / "nothing.txt", check=False)
    assert p.returncode != 0 and "no such file or folder" in p.stderr, p.stderr
    assert "never uploaded" not in p.stderr
    p = run(BIN, "rewind", m / "Documents" / "nowhere", "--to", "2026-01-01T00:00:00Z", "--dry-run", check=False)
    assert p.returncode != 0 and "no such file or folder" in p.stderr, p.stderr
