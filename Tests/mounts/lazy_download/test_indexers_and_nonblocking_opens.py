"""O_NONBLOCK changes nothing for a regular file (GNU grep -r, GNU tar and file open with it and must simply work
on files that are not local); indexers are kept from pulling whole files by a per-process policy instead
(`mount --no-download-for NAME,...`, by default the desktop indexers): their opens of a file that is not local
fail at once with EAGAIN, download nothing, and are served an older local copy where there is one."""
import os
import shutil

import pytest

from conftest import BIN, run, wait_until

FILES = {"x.txt": b"a line\nthe needle is here\nlast line\n", "sub/y.txt": b"nothing to see\n",
         "sub/z.bin": bytes(range(256)) * 64}


@pytest.fixture
def synced(stub, mount_factory):
    """Files written on device a and uploaded: the stub and a's mount."""
    a = mount_factory(stub, device="a")
    for rel, data in FILES.items():
        (a / "Documents" / rel).parent.mkdir(parents=True, exist_ok=True)
        (a / "Documents" / rel).write_bytes(data)
    run(BIN, "sync", "--wait", a.path, timeout=60)
    return stub, a


def device_b(stub, mount_factory, device="b", extra=()):
    """A second device that lists the files without having downloaded any."""
    b = mount_factory(stub, device=device, extra=extra)
    wait_until(lambda: all((b / "Documents" / rel).stat().st_size == len(data) for rel, data in FILES.items()),
               what="the files listed on " + device)
    assert stub.blob_gets() == 0
    return b


def named_cat(tmp_path, name):
    """A copy of cat that runs under another process name."""
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    shutil.copy("/bin/cat", path)
    return path


def test_grep_r_finds_text_in_files_that_are_not_local(synced, mount_factory):
    stub, _ = synced
    b = device_b(stub, mount_factory)
    p = run("grep", "-r", "needle", b / "Documents", check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{b / 'Documents' / 'x.txt'}:the needle is here\n"
    assert "Resource temporarily unavailable" not in p.stderr
    assert stub.blob_gets() == len(FILES)


def test_tar_archives_files_that_are_not_local(synced, mount_factory, tmp_path):
    stub, _ = synced
    b = device_b(stub, mount_factory)
    listed = run("bash", "-c", f"set -o pipefail; tar c -f - -C '{b.path}' Documents | tar t").stdout.split()
    assert sorted(listed) == sorted(["Documents/", "Documents/sub/"] + [f"Documents/{r}" for r in FILES])
    out = tmp_path / "out"
    out.mkdir()
    run("bash", "-c", f"set -o pipefail; tar c -f - -C '{b.path}' Documents | tar x -f - -C '{out}'")
    for rel, data in FILES.items():
        assert (out / "Documents" / rel).read_bytes() == data


def test_file_reads_a_file_that_is_not_local(synced, mount_factory):
    stub, _ = synced
    b = device_b(stub, mount_factory)
    p = run("file", b / "Documents" / "x.txt")
    assert "ASCII text" in p.stdout, p.stdout
    assert stub.blob_gets() == 1


def test_python_nonblocking_open_reads_the_content(synced, mount_factory):
    stub, _ = synced
    b = device_b(stub, mount_factory)
    fd = os.open(b / "Documents" / "x.txt", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert os.read(fd, 4096) == FILES["x.txt"]
    finally:
        os.close(fd)


def test_default_indexers_get_eagain_and_download_nothing(synced, mount_factory, tmp_path):
    stub, a = synced
    b = device_b(stub, mount_factory)
    # "tracker-miner-fs-3" runs as "tracker-miner-f": the kernel keeps 15 bytes of a process name.
    indexer = named_cat(tmp_path, "tracker-miner-fs-3")
    p = run(indexer, b / "Documents" / "x.txt", check=False)
    assert p.returncode != 0 and "Resource temporarily unavailable" in p.stderr, p.stderr
    assert stub.blob_gets() == 0
    # Once local it is served; when a newer version waits on the remote, the older local copy is.
    assert run("cat", b / "Documents" / "x.txt").stdout.encode() == FILES["x.txt"]
    assert run(indexer, b / "Documents" / "x.txt").stdout.encode() == FILES["x.txt"]
    (a / "Documents" / "x.txt").write_bytes(b"a newer version\n")
    run(BIN, "sync", "--wait", a.path, timeout=60)
    wait_until(lambda: (b / "Documents" / "x.txt").stat().st_size == len(b"a newer version\n"),
               what="the newer version listed on b")
    gets = stub.blob_gets()
    # The older copy is read through the newer version's size, which the listing shows.
    served = run(indexer, b / "Documents" / "x.txt").stdout.encode()
    assert served == FILES["x.txt"][:len(b"a newer version\n")]
    assert stub.blob_gets() == gets
    assert run("cat", b / "Documents" / "x.txt").stdout == "a newer version\n"


def test_no_download_for_names_the_processes(synced, mount_factory, tmp_path):
    stub, _ = synced
    mycat = named_cat(tmp_path, "mycat")
    tracker = named_cat(tmp_path, "tracker-miner-fs-3")
    b = device_b(stub, mount_factory, extra=["--no-download-for", "mycat,other"])
    p = run(mycat, b / "Documents" / "x.txt", check=False)
    assert p.returncode != 0 and "Resource temporarily unavailable" in p.stderr, p.stderr
    assert stub.blob_gets() == 0
    assert run(tracker, b / "Documents" / "x.txt").stdout.encode() == FILES["x.txt"]


def test_an_empty_no_download_for_list_refuses_nobody(synced, mount_factory, tmp_path):
    stub, _ = synced
    tracker = named_cat(tmp_path, "tracker-miner-fs-3")
    b = device_b(stub, mount_factory, extra=["--no-download-for", ""])
    assert run(tracker, b / "Documents" / "x.txt").stdout.encode() == FILES["x.txt"]
    assert stub.blob_gets() == 1


def test_mount_help_describes_no_download_for():
    out = run(BIN, "mount", "--help").stdout
    assert "--no-download-for NAME,..." in out and "tracker-miner-fs-3" in out and "O_NONBLOCK changes nothing" in out
