"""Part 18: creating and deleting at the FUSE floor. A new file's create, chmod, chown and times are recorded at
its close in one commit, and a deleted small file's content file is emptied and taken by the next new file; what
a program closed must still survive a kill -9 of the daemon, with its bytes, mode and time, as `tar` checks."""
import os
import random
import signal
import stat
import subprocess

from conftest import run


def tarball(path, files, seed):
    """A tar of `files` small files (a few modes and times, 100 to a folder), made with tar itself."""
    rng = random.Random(seed)
    src = path / "src"
    for i in range(files):
        d = src / f"d{i // 100:02}"
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"f{i:04}"
        f.write_bytes(rng.randbytes(rng.randint(0, 4096)))
        f.chmod(rng.choice([0o600, 0o644, 0o755, 0o640]))
        os.utime(f, ns=(1_600_000_000_000_000_000 + i * 1_000_003, 1_600_000_000_000_000_000 + i * 1_000_003))
    out = path / f"small-{seed}.tar"
    run("tar", "-cf", out, "-C", src, ".")
    return out


def test_what_tar_extracted_after_an_rm_rf_survives_a_kill_9(stub, mount_factory, tmp_path):
    m = mount_factory(stub)
    first, second = tarball(tmp_path / "a", 300, 1), tarball(tmp_path / "b", 300, 2)
    target = m / "Documents" / "x"
    target.mkdir()
    run("tar", "-xf", first, "-C", target)
    run("rm", "-rf", target)
    target.mkdir()
    run("tar", "-xf", second, "-C", target)  # into the content files the rm -rf emptied
    loop = m / "Documents" / "loop"
    loop.mkdir()
    run("sh", "-c", "for i in $(seq 50); do : > f$i; chmod 640 f$i; done", cwd=loop)
    m.kill_daemon(signal.SIGKILL)  # at once: nothing had time to go up
    m.mount()
    # tar -d compares each file's bytes, size, mode and modification time with the archive's.
    p = subprocess.run(["tar", "-df", second, "-C", target], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == "", p.stdout + p.stderr
    names = sorted(os.listdir(loop))
    assert len(names) == 50
    assert all(stat.S_IMODE(os.stat(loop / n).st_mode) == 0o640 and os.stat(loop / n).st_size == 0 for n in names)


def test_an_rm_made_durable_by_fsync_of_its_folder_survives_a_kill_9(stub, mount_factory):
    """A delete waits for the next commit (up to a second): an fsync of the folder, as a program that must not
    see the file again does (sync -f DIR would not do: it syncs the file system, not the folder), writes it."""
    m = mount_factory(stub)
    folder = m / "Documents" / "d"
    folder.mkdir()
    run("sh", "-c", "for i in $(seq 20); do echo $i > f$i; done", cwd=folder)
    run("sh", "-c", "rm f1 f2 f3 && python3 -c 'import os; fd = os.open(\".\", os.O_RDONLY); os.fsync(fd)'",
        cwd=folder)
    m.kill_daemon(signal.SIGKILL)  # at once: the push loop had no time to write the deletes
    m.mount()
    names = sorted(os.listdir(folder), key=lambda n: int(n[1:]))
    assert names == [f"f{i}" for i in range(4, 21)]
    assert (folder / "f20").read_text() == "20\n"
