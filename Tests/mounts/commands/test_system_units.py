"""Part 19: system integration. `scripts/install` ships a user unit that mounts at login and, at logout, waits
a bounded time for uploads before it unmounts; a system unit for `remote serve`; and mount(8)'s helper, so that
`mount -t fuse.ubiquityfs` and an /etc/fstab line (with `noauto`, `_netdev`, `x-systemd.automount`) mount a
container. `systemd-analyze verify` passes on the units, and their commands are run here as systemd would."""
import contextlib
import os
import re
import shlex

import pytest

from conftest import BIN, ROOT, run, wait_until
from ubiquitybench.harness import mounted


def install(prefix, sbin):
    run(ROOT / "scripts" / "install", "--prefix", prefix, "--sbin", sbin, "--binary", BIN, timeout=120)


def uninstall(prefix):
    run(ROOT / "scripts" / "install", "--prefix", prefix, "--uninstall", check=False)


@contextlib.contextmanager
def unmounting(*mountpoints):
    try:
        yield
    finally:
        for m in mountpoints:
            if mounted(m) == "fuse.ubiquityfs":
                if run(BIN, "unmount", "--force", m, check=False, timeout=60).returncode != 0:
                    run("fusermount3", "-u", "-z", m, check=False)


def exec_lines(unit, key, home):
    """The commands of `key=` lines of a unit file, as systemd runs them: %h is the home, a leading `-` lets
    the command fail."""
    out = []
    for line in unit.read_text().splitlines():
        if line.startswith(key + "="):
            cmd = line[len(key) + 1:].replace("%h", str(home))
            out.append((cmd.startswith("-"), shlex.split(cmd.lstrip("-"))))
    return out


def test_the_units_verify_and_the_helper_is_installed(tmp_path):
    prefix = tmp_path / "usr"
    install(prefix, tmp_path / "sbin")
    env = dict(os.environ, MANPATH=str(prefix / "share" / "man"), XDG_RUNTIME_DIR=str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    system = run("systemd-analyze", "verify", prefix / "lib/systemd/system/ubiquityfs-remote.service", env=env,
                 check=False, cwd=tmp_path)
    assert system.returncode == 0 and system.stderr == "", system.stderr
    user = run("systemd-analyze", "--user", "verify", prefix / "lib/systemd/user/ubiquityfs.service", env=env,
               check=False, cwd=tmp_path)
    assert user.returncode == 0 and user.stderr == "", user.stderr
    helper = tmp_path / "sbin" / "mount.fuse.ubiquityfs"
    assert os.access(helper, os.X_OK) and f"bin={prefix}/bin/ubiquityfs" in helper.read_text()
    uninstall(prefix)
    assert not helper.exists() and not (prefix / "lib/systemd/user/ubiquityfs.service").exists()


def test_the_user_units_commands_mount_at_login_and_upload_before_unmounting_at_logout(tmp_path):
    prefix, home = tmp_path / "usr", tmp_path / "home"
    install(prefix, tmp_path / "sbin")
    home.mkdir()
    unit = prefix / "lib/systemd/user/ubiquityfs.service"
    env = dict(os.environ, HOME=str(home), XDG_DATA_HOME=str(home / ".local" / "share"))
    mnt = home / "iCloud"
    with unmounting(mnt):
        for may_fail, cmd in exec_lines(unit, "ExecStartPre", home) + exec_lines(unit, "ExecStart", home):
            assert run(*cmd, env=env, check=not may_fail, timeout=90).returncode == 0
        assert mounted(mnt) == "fuse.ubiquityfs"
        (mnt / "Documents" / "written-before-logout.txt").write_bytes(os.urandom(3 << 20))
        stops = exec_lines(unit, "ExecStop", home)
        assert [may_fail for may_fail, _ in stops] == [True, False] and "sync" in stops[0][1]
        for may_fail, cmd in stops:
            p = run(*cmd, env=env, check=False, timeout=120)
            assert may_fail or p.returncode == 0, p.stderr
        assert mounted(mnt) is None
        # At the next login the file is there, uploaded before the logout: the store's queue is empty.
        for _, cmd in exec_lines(unit, "ExecStart", home):
            run(*cmd, env=env, timeout=90)
        assert (mnt / "Documents" / "written-before-logout.txt").stat().st_size == 3 << 20
        assert run("getfattr", "-n", "user.ubiquity.pendingChanges", "--only-values", mnt).stdout == "0"


@pytest.fixture
def helper_in_sbin(tmp_path):
    """The helper installed where mount(8) looks for it (/sbin), removed after the test."""
    prefix = tmp_path / "usr"
    if os.path.exists("/sbin/mount.fuse.ubiquityfs"):
        pytest.skip("a mount.fuse.ubiquityfs is installed in /sbin already; not replacing it")
    install(prefix, "/sbin")
    yield prefix
    uninstall(prefix)


def test_mount_t_and_an_fstab_line_mount_a_container(stub, mount_factory, tmp_path, helper_in_sbin):
    other = mount_factory(stub, "desktop")
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    fstab = tmp_path / "fstab"
    opts = (f"noauto,_netdev,x-systemd.automount,nofail,remote={stub.url},token-file={stub.token_file},"
            f"store={tmp_path / 'store-one'},device=laptop")
    fstab.write_text(f"# a test fstab\n{stub.container} {one} fuse.ubiquityfs {opts} 0 0\n")
    with unmounting(one, two):
        run("mount", "-T", fstab, one, timeout=90)
        assert mounted(one) == "fuse.ubiquityfs"
        (one / "Documents" / "from-fstab.txt").write_text("mounted by mount(8)\n")
        wait_until(lambda: (other / "Documents" / "from-fstab.txt").exists(), timeout=30, what="the file on the desktop")

        opts2 = f"remote={stub.url},token-file={stub.token_file},store={tmp_path / 'store-two'},device=tablet,noatime"
        run("mount", "-t", "fuse.ubiquityfs", "-o", opts2, stub.container, two, timeout=90)
        assert (two / "Documents" / "from-fstab.txt").read_text() == "mounted by mount(8)\n"
        # A remount changes the kernel's flags of the mount (xfstests generic/452 remounts read-only), and the
        # source /proc/mounts shows mounts the container again (xfstests finds and mounts its devices so).
        run("mount", "-o", "remount,ro", two)
        p = run("touch", two / "Documents" / "ro.txt", check=False)
        assert p.returncode != 0 and "Read-only file system" in p.stderr, p.stderr
        run("mount", "-o", "remount,rw", two)
        (two / "Documents" / "rw.txt").write_text("writable again\n")
        source = run("findmnt", "-n", "-o", "SOURCE", two).stdout.strip()
        assert source == f"ubiquityfs:{stub.container}"
        run("umount", two)
        run("mount", "-t", "fuse.ubiquityfs", "-o", opts2, source, two, timeout=90)
        assert (two / "Documents" / "rw.txt").read_text() == "writable again\n"
        assert re.search(r"fuse\.ubiquityfs", run("findmnt", "-n", "-o", "FSTYPE", two).stdout)

        bad = run("mount", "-t", "fuse.ubiquityfs", "-o", "colour=blue", stub.container, tmp_path, check=False)
        assert bad.returncode != 0 and "unknown option 'colour=blue'" in bad.stderr, bad.stderr
        assert mounted(tmp_path) is None


def test_an_fstab_line_mounts_several_containers_and_its_source_mounts_them_again(stub, tmp_path, helper_in_sbin):
    mnt = tmp_path / "mobile"
    mnt.mkdir()
    opts = f"remote={stub.url},token-file={stub.token_file},store={tmp_path / 'stores'},device=laptop"
    fstab = tmp_path / "fstab"
    fstab.write_text(f"iCloud.com.example.notes|iCloud.com.example.draw {mnt} fuse.ubiquityfs noauto,{opts} 0 0\n")
    with unmounting(mnt):
        run("mount", "-T", fstab, mnt, timeout=90)
        assert sorted(os.listdir(mnt)) == ["iCloud~com~example~draw", "iCloud~com~example~notes"]
        source = run("findmnt", "-n", "-o", "SOURCE", mnt).stdout.strip()
        assert source == "ubiquityfs:iCloud.com.example.notes|iCloud.com.example.draw", source
        (mnt / "iCloud~com~example~draw/Documents/kept.txt").write_text("kept\n")
        run(BIN, "sync", "--wait", mnt)
        # umount -R takes the containers first, then the root; the source shown mounts the same again.
        run("umount", "-R", mnt)
        assert mounted(mnt) is None
        run("mount", "-t", "fuse.ubiquityfs", "-o", opts, source, mnt, timeout=90)
        assert (mnt / "iCloud~com~example~draw/Documents/kept.txt").read_text() == "kept\n"
    # --all-containers is `all`.
    with unmounting(mnt):
        run("mount", "-t", "fuse.ubiquityfs", "-o", opts, "all", mnt, timeout=90)
        assert run("findmnt", "-n", "-o", "SOURCE", mnt).stdout.strip() == "ubiquityfs:all"
        wait_until(lambda: "iCloud~com~example~draw" in os.listdir(mnt), timeout=10, what="the draw container")
