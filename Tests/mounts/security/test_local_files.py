"""Part 21 point 4: nothing the daemon keeps on this machine is readable by another local user."""
import os
import stat

from conftest import BIN, run, wait_until


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


def mounted_with_umask(mount_factory, stub, device, mask):
    m = mount_factory(stub, device, mount=False)
    old = os.umask(mask)
    try:
        m.mount()
    finally:
        os.umask(old)
    return m


def test_group_and_world_write_from_another_device_never_arrive_past_the_mounting_users_umask(stub, mount_factory):
    # Before Part 21 a folder made 0777 on one device was 0777 on every other: any local user of those machines
    # could plant files in it, which then synced everywhere.
    a = mounted_with_umask(mount_factory, stub, "laptop", 0o022)
    b = mounted_with_umask(mount_factory, stub, "desktop", 0o022)
    team = mounted_with_umask(mount_factory, stub, "team", 0o002)
    shared = a / "Documents" / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "f.txt").write_text("x\n")
    (shared / "f.txt").chmod(0o666)
    run(BIN, "sync", "--wait", "--timeout", "30", a.path)
    on_b, on_team = b / "Documents" / "shared", team / "Documents" / "shared"
    wait_until(lambda: (on_b / "f.txt").exists() and (on_team / "f.txt").exists(), timeout=30, what="f.txt on b and team")
    assert (mode_of(on_b) & 0o777, mode_of(on_b / "f.txt") & 0o777) == (0o755, 0o644)
    assert (mode_of(on_team) & 0o777, mode_of(on_team / "f.txt") & 0o777) == (0o775, 0o664), "umask 002: group write arrives"
    assert mode_of(shared) & 0o777 == 0o777, "the device that set it keeps it"
    # An edit on b sends the bits b holds back as they came: the others keep them.
    with open(on_b / "f.txt", "a") as f:
        f.write("edited on b\n")
    run(BIN, "sync", "--wait", "--timeout", "30", b.path)
    wait_until(lambda: (shared / "f.txt").read_text() == "x\nedited on b\n", timeout=30, what="b's edit on a")
    assert (mode_of(shared / "f.txt") & 0o777, mode_of(on_team / "f.txt") & 0o777) == (0o666, 0o664)
    assert mode_of(on_b / "f.txt") & 0o777 == 0o644
    # The user of b may still open it up here, and taking bits away arrives everywhere.
    on_b.chmod(0o777)
    assert mode_of(on_b) & 0o777 == 0o777
    (shared / "f.txt").chmod(0o600)
    wait_until(lambda: mode_of(on_b / "f.txt") & 0o777 == 0o600, timeout=30, what="the narrower mode on b")
