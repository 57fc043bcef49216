"""Part 7, points 4 and 5: symbolic links are items (created, read, renamed, deleted and synced as links, their
target kept exactly as written), so venv, tar, rsync, unzip and git work in the mount; fifos and sockets work
locally and stay on their device. Hard links and device nodes stay refused with EPERM."""
import errno
import os
import stat
from pathlib import Path

import pytest

from conftest import CONTAINER, run, wait_until, sync

# Run while the kernel forgets inodes every half second, as memory pressure makes it (Part 20, point 5).
pytestmark = pytest.mark.usefixtures("caches_dropped")

LINKS = {"rel": "../up/file.txt", "abs": "/etc/hostname", "dangling": "no such thing", "todir": "sub",
         "utf8": "résumé ☃"}


def links_below(root):
    """Every link below `root` with its target, by relative path."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                found[str(p.relative_to(root))] = os.readlink(p)
    return found


def remote_names(stub):
    """Names of every live item the stub holds."""
    feed = stub.request("GET", f"/v1/containers/{CONTAINER}/changes?limit=10000")
    return {i["name"] for i in feed["items"] if not i["deleted"]}


def make_tree(src):
    """A tree with a relative, an absolute, a dangling link and a link to a directory."""
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "data.txt").write_text("data\n")
    os.symlink("sub/data.txt", src / "rel")
    os.symlink("/etc/hostname", src / "abs")
    os.symlink("missing/target", src / "dangling")
    os.symlink("sub", src / "todir")
    os.symlink("../rel", src / "sub" / "up")
    return links_below(src)


def test_links_are_created_read_and_synced(two):
    stub, a, b = two
    d = a / "Documents"
    (d / "sub").mkdir()
    (d / "sub" / "inside.txt").write_text("inside\n")
    for name, target in LINKS.items():
        os.symlink(target, d / name)
    for name, target in LINKS.items():
        assert os.readlink(d / name) == target
        st = os.lstat(d / name)
        assert stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o777
        assert st.st_size == len(target.encode())
    assert run("stat", "-c", "%A %s", d / "rel").stdout.split() == ["lrwxrwxrwx", str(len(LINKS["rel"]))]
    assert run("ls", d / "todir").stdout.split() == ["inside.txt"]      # followed by the kernel
    assert (d / "todir" / "inside.txt").read_text() == "inside\n"
    assert not (d / "dangling").exists() and (d / "dangling").is_symlink()
    assert os.listxattr(d / "rel", follow_symlinks=False) == []          # no user.* attributes on links
    assert run("ls", "-l", d).stdout.count("\nl") == len(LINKS)           # listed as links

    sync(a)
    db = b / "Documents"
    wait_until(lambda: links_below(db) == LINKS, what="the links on b")
    for name, target in LINKS.items():
        assert run("readlink", db / name).stdout == target + "\n"
        assert os.lstat(db / name).st_size == len(target.encode())

    os.rename(d / "rel", d / "renamed")
    os.unlink(d / "abs")
    run("ln", "-sfn", "elsewhere", d / "dangling")                     # a link is replaced by a new one
    sync(a)
    wait_until(lambda: not (db / "rel").is_symlink() and not (db / "abs").is_symlink()
               and os.readlink(db / "renamed") == LINKS["rel"] and os.readlink(db / "dangling") == "elsewhere",
               what="rename, delete and replacement on b")
    assert "abs" not in remote_names(stub)


def test_targets_are_kept_exactly(stub, mount_factory):
    d = mount_factory(stub) / "Documents"
    longest = "x" * 4095
    os.symlink(longest, d / "longest")
    assert os.readlink(d / "longest") == longest
    with pytest.raises(OSError) as e:
        os.symlink("x" * 4096, d / "too-long")
    assert e.value.errno == errno.ENAMETOOLONG
    nfd = "e\u0301"                                                  # not normalised on the way
    os.symlink(nfd, d / "nfd")
    assert os.readlink(d / "nfd").encode() == nfd.encode()
    with pytest.raises(OSError) as e:
        os.symlink(b"\xff\xfe", bytes(d / "latin1"))
    assert e.value.errno == errno.EILSEQ
    with pytest.raises(FileExistsError):
        os.symlink("t", d / "nfd")


def test_hard_links_and_devices_are_refused(stub, mount_factory):
    d = mount_factory(stub) / "Documents"
    (d / "target").write_text("t")
    for make in (lambda: os.link(d / "target", d / "hard"),
                 lambda: os.mknod(d / "chr", 0o600 | stat.S_IFCHR, os.makedev(1, 3)),
                 lambda: os.mknod(d / "blk", 0o600 | stat.S_IFBLK, os.makedev(7, 0))):
        with pytest.raises(OSError) as e:
            make()
        assert e.value.errno == errno.EPERM
    os.mknod(d / "regular", 0o640 | stat.S_IFREG)
    assert run("stat", "-c", "%F %a %s", d / "regular").stdout.split() == ["regular", "empty", "file", "640", "0"]


def test_tar_rsync_and_unzip_keep_links(two, tmp_path):
    stub, a, b = two
    src = tmp_path / "src"
    expected = make_tree(src)
    run("tar", "cf", tmp_path / "t.tar", "-C", src, ".")
    (a / "Documents" / "tar").mkdir()
    assert run("tar", "xf", tmp_path / "t.tar", "-C", a / "Documents" / "tar", check=False).returncode == 0
    assert run("rsync", "-a", f"{src}/", a / "Documents" / "rsync", check=False).returncode == 0
    run("zip", "-qry", tmp_path / "t.zip", ".", cwd=src)
    assert run("unzip", "-q", tmp_path / "t.zip", "-d", a / "Documents" / "zip", check=False).returncode == 0
    for tool in ("tar", "rsync", "zip"):
        assert links_below(a / "Documents" / tool) == expected, tool
        assert (a / "Documents" / tool / "rel").read_text() == "data\n"
    # rsync -a again finds nothing to change (times and links as written).
    again = run("rsync", "-ai", f"{src}/", a / "Documents" / "rsync")
    assert again.stdout == ""

    sync(a)
    for tool in ("tar", "rsync", "zip"):
        wait_until(lambda: links_below(b / "Documents" / tool) == expected, timeout=30, what=f"{tool} links on b")


def test_python_venv(stub, mount_factory):
    d = mount_factory(stub) / "Documents"
    run("python3", "-m", "venv", "--without-pip", d / "venv", timeout=120)
    assert (d / "venv" / "bin" / "python").is_symlink()
    assert run(d / "venv" / "bin" / "python", "-c", "print(1)").stdout == "1\n"


def test_git_clone_with_links(stub, mount_factory, tmp_path):
    d = mount_factory(stub) / "Documents"
    src = tmp_path / "repo"
    src.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    run(*git, "init", "-q", src)
    (src / "real.txt").write_text("real\n")
    os.symlink("real.txt", src / "link")
    os.symlink("../outside", src / "dangling")
    run(*git, "-C", src, "add", ".")
    run(*git, "-C", src, "commit", "-qm", "links")
    run("git", "clone", "-q", src, d / "clone", timeout=120)
    assert run("git", "-C", d / "clone", "status", "--porcelain").stdout == ""
    assert os.readlink(d / "clone" / "link") == "real.txt"
    assert os.readlink(d / "clone" / "dangling") == "../outside"


SOCKET_ECHO = r"""
import socket, sys, threading
path = sys.argv[1]
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(1)
def serve():
    conn, _ = server.accept()
    conn.sendall(b"echo:" + conn.recv(100))
    conn.close()
t = threading.Thread(target=serve)
t.start()
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect(path)
client.sendall(b"ping")
print(client.recv(100).decode())
t.join()
"""


def test_fifos_and_sockets_work_locally_and_stay_local(two):
    stub, a, b = two
    d = a / "Documents"
    run("mkfifo", d / "p")
    out = run("sh", "-c", f"(echo hi > '{d / 'p'}' &) ; cat '{d / 'p'}'", timeout=30)
    assert out.stdout == "hi\n"
    assert run("stat", "-c", "%F", d / "p").stdout == "fifo\n"
    run("mknod", d / "p2", "p")
    assert run("stat", "-c", "%F", d / "p2").stdout == "fifo\n"
    assert run("python3", "-c", SOCKET_ECHO, d / "s", timeout=30).stdout == "echo:ping\n"
    assert run("stat", "-c", "%F", d / "s").stdout == "socket\n"
    (d / "after.txt").write_text("synced\n")
    assert sorted(os.listdir(d)) == ["after.txt", "p", "p2", "s"]

    sync(a)
    wait_until(lambda: (b / "Documents" / "after.txt").exists(), what="after.txt on b")
    assert sorted(os.listdir(b / "Documents")) == ["after.txt"]
    assert remote_names(stub) & {"p", "p2", "s"} == set()

    os.rename(d / "p2", d / "q")
    os.unlink(d / "s")
    assert sorted(os.listdir(d)) == ["after.txt", "p", "q"]
    a.unmount()
    a.mount()
    assert sorted(os.listdir(d)) == ["after.txt", "p", "q"]
    assert run("stat", "-c", "%F", d / "q").stdout == "fifo\n"
    out = run("sh", "-c", f"(echo again > '{d / 'q'}' &) ; cat '{d / 'q'}'", timeout=30)
    assert out.stdout == "again\n"
    run("rm", d / "p", d / "q")
    assert os.listdir(d) == ["after.txt"]
    sync(a)
    assert remote_names(stub) & {"p", "q", "p2", "s"} == set()


def test_a_remote_item_moves_a_fifo_aside(two):
    stub, a, b = two
    run("mkfifo", a / "Documents" / "p")
    (b / "Documents" / "p").write_text("from b\n")
    sync(b)
    wait_until(lambda: (a / "Documents" / "p").is_file(), what="b's file on a")
    assert (a / "Documents" / "p").read_text() == "from b\n"
    assert run("stat", "-c", "%F", a / "Documents" / "p 2").stdout == "fifo\n"
    sync(a)
    assert "p 2" not in remote_names(stub)
