"""Part 21 point 4: nothing the daemon keeps on this machine is readable by another local user."""
import os
import stat

from conftest import BIN, run


def test_what_the_daemon_makes_in_its_store_is_its_users_alone_whatever_the_umask(stub, mount_factory):
    # Before Part 21, a store folder made beforehand (0755) and a umask of 022 left state.sqlite, its -wal and
    # -shm 0644: any local user read every name, hash and key-value of the container.
    m = mount_factory(stub, mount=False)
    m.store.mkdir(parents=True)
    m.store.chmod(0o755)
    umask = os.umask(0o022)
    try:
        m.mount()
    finally:
        os.umask(umask)
    (m / "Documents" / "notes.txt").write_text("private\n")
    run("setfattr", "-n", "user.color", "-v", "red", m / "Documents" / "notes.txt")
    run(BIN, "sync", "--wait", "--timeout", "30", m.path)
    modes = {p: mode for p in m.store.rglob("*") if (mode := mode_of(p)) is not None and not stat.S_ISLNK(mode)}
    assert {"state.sqlite", "state.sqlite-wal", "content"} <= {p.name for p in modes}, modes
    too_open = [f"{p.relative_to(m.store)} {stat.filemode(mode)}" for p, mode in modes.items() if mode & 0o077]
    assert not too_open, too_open


def mode_of(path):
    """The mode of `path`, or None when it went meanwhile (a staging file)."""
    try:
        return path.lstat().st_mode
    except FileNotFoundError:
        return None


def test_recently_deleted_is_the_mounting_users_alone(stub, mount_factory):
    # Before Part 21, `.trash` was 0755 and `.list` 0444: on a mount made by root (allow_other), any local user
    # listed the paths and hashes of what was deleted from folders closed to them, and read its content.
    m = mount_factory(stub)
    private = m / "Documents" / "private"
    private.mkdir()
    private.chmod(0o700)
    (private / "salary.txt").write_text("confidential\n")
    run(BIN, "sync", "--wait", "--timeout", "30", m.path)
    (private / "salary.txt").unlink()
    run(BIN, "sync", "--wait", "--timeout", "30", m.path)
    assert "salary.txt" in run("cat", m / ".trash" / ".list").stdout  # the owner reads it
    for command in (["cat", ".trash/.list"], ["ls", ".trash"], ["cat", ".trash/salary.txt"]):
        p = run("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command, cwd=m.path, check=False)
        assert p.returncode != 0 and "Permission denied" in p.stderr, (command, p.stdout, p.stderr)
