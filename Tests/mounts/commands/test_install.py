"""Part 19: installed like a Linux program. `scripts/install --prefix DIR` puts the binary, its man page, its
bash completion, the systemd units and mount(8)'s helper where Linux keeps them; the installed command answers `--version` and works from PATH;
`--uninstall` removes exactly what was installed."""
import os
import subprocess

from conftest import BIN, ROOT, run


NAUTILUS_EXTENSION = "share/nautilus-python/extensions/ubiquityfs_nautilus.py"
EMBLEMS = [f"share/icons/hicolor/scalable/emblems/emblem-ubiquityfs-{state}.svg"
           for state in ("cloud", "conflict", "current", "downloading", "error", "uploading")]


def install(prefix, *extra, check=True):
    return run(ROOT / "scripts" / "install", "--prefix", prefix, "--binary", BIN, *extra, check=check, timeout=120)


def test_install_puts_the_command_its_man_page_and_completion_in_place_and_uninstall_removes_them(tmp_path):
    prefix = tmp_path / "usr"
    out = install(prefix).stdout
    assert out.startswith("installed ubiquityfs ") and str(prefix) in out, out
    files = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())
    assert files == ["bin/ubiquityfs", "lib/systemd/system/ubiquityfs-remote.service",
                     "lib/systemd/user/ubiquityfs.service", "sbin/mount.fuse.ubiquityfs",
                     "share/bash-completion/completions/ubiquityfs"] + EMBLEMS + [
                     "share/man/man1/ubiquityfs.1", NAUTILUS_EXTENSION, "share/ubiquityfs/installed"], files

    # On PATH, the README's commands are typed as they are shown.
    env = dict(os.environ, PATH=f"{prefix / 'bin'}:{os.environ['PATH']}")
    version = subprocess.run(["ubiquityfs", "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and version.stdout.startswith("ubiquityfs ") and "libfuse" in version.stdout
    helped = subprocess.run(["ubiquityfs", "trash", "--help"], capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "trash list" in helped.stdout

    page = " ".join(run("man", "-l", prefix / "share" / "man" / "man1" / "ubiquityfs.1").stdout.split())
    assert "ubiquityfs - a FUSE file system" in page and "MOUNTPOINT/.versions/PATH/" in page, page
    assert "user.ubiquity.evict" in page and "getfattr(1)" in page
    assert run("man", "--warnings", "-l", prefix / "share" / "man" / "man1" / "ubiquityfs.1").stderr == ""

    completion = prefix / "share" / "bash-completion" / "completions" / "ubiquityfs"
    def complete(*words):
        script = (f"source '{completion}'; COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; "
                  "_ubiquityfs; printf '%s\\n' \"${COMPREPLY[@]}\"")
        return run("bash", "-c", script, cwd=tmp_path).stdout.split()
    assert complete("ubiquityfs", "tr") == ["trash"]
    assert complete("ubiquityfs", "trash", "re") == ["restore"]
    assert complete("ubiquityfs", "mount", "--no-p") == ["--no-passthrough"]
    assert complete("ubiquityfs", "status", "us") == ["usr"]  # a path

    assert install(prefix, "--uninstall").stdout.strip() == f"removed ubiquityfs from {prefix}"
    assert [p for p in prefix.rglob("*") if p.is_file()] == []
    again = install(prefix, "--uninstall", check=False)
    assert again.returncode == 1 and "nothing installed" in again.stderr
    bad = install(prefix, "--nonsense", check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_install_desktop_puts_only_the_file_managers_extension_and_uninstall_removes_it(tmp_path):
    prefix = tmp_path / "usr"
    out = install(prefix, "--desktop").stdout
    assert out.startswith("installed GNOME Files' ubiquityfs extension in ") and "nautilus -q" in out, out
    files = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())
    assert files == EMBLEMS + [NAUTILUS_EXTENSION, "share/ubiquityfs/installed"], files
    assert (prefix / NAUTILUS_EXTENSION).read_bytes() == (ROOT / "scripts" / "desktop" / "ubiquityfs_nautilus.py").read_bytes()
    assert install(prefix, "--uninstall").stdout.strip() == f"removed ubiquityfs from {prefix}"
    assert [p for p in prefix.rglob("*") if p.is_file()] == []
