"""Part 16, the cut: `ubiquityfs chunks` shows how a file is cut into content-defined chunks, the same for the
same bytes wherever they are (in a mount, downloaded on another device, outside), with the holes of a sparse
file in the mount as holes; an edit in the middle changes at most two chunks."""
import json
import os
import subprocess

from conftest import BIN, run, sync, wait_until

MiB = 1 << 20


def chunks(path):
    return json.loads(run(BIN, "chunks", "--json", path).stdout)[0]["chunks"]


def test_the_same_bytes_are_cut_the_same_in_a_mount_on_another_device_and_outside(stub, mount_factory, tmp_path):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    outside = tmp_path / "data.bin"
    outside.write_bytes(os.urandom(9 * MiB + 123))
    run("cp", outside, a / "Documents" / "data.bin")
    sync(a)
    wait_until(lambda: (b / "Documents" / "data.bin").exists(), timeout=30, what="data.bin on the desktop")
    expected = chunks(outside)
    assert len(expected) >= 3 and all("sha256" in c for c in expected)
    assert chunks(a / "Documents" / "data.bin") == expected
    assert chunks(b / "Documents" / "data.bin") == expected  # read, so downloaded, on the other device

    # One byte changed in the middle: at most two chunk hashes the old list lacks.
    with open(a / "Documents" / "data.bin", "r+b") as f:
        f.seek(4 * MiB)
        byte = f.read(1)[0]
        f.seek(4 * MiB)
        f.write(bytes([byte ^ 0xFF]))
    known = {c["sha256"] for c in expected}
    new = [c for c in chunks(a / "Documents" / "data.bin") if c.get("sha256") not in known]
    assert 1 <= len(new) <= 2, new


def test_the_holes_of_a_sparse_file_in_the_mount_are_holes(stub, mount_factory):
    m = mount_factory(stub)
    path = m / "Documents" / "disk.img"
    run("truncate", "-s", "64M", path)
    run("dd", "if=/dev/urandom", f"of={path}", "bs=1M", "count=1", "seek=20", "conv=notrunc", "status=none")
    got = chunks(path)
    assert got[0] == {"offset": 0, "size": 20 * MiB, "hole": True}
    assert got[-1] == {"offset": 21 * MiB, "size": 43 * MiB, "hole": True}
    assert sum(c["size"] for c in got if "sha256" in c) == MiB
    summary = run(BIN, "chunks", "--summary", path).stdout
    assert f"{64 * MiB} bytes, {63 * MiB} in holes" in summary, summary


def test_bad_input_is_one_line_and_exit_1(tmp_path):
    r = subprocess.run([BIN, "chunks", tmp_path / "missing", tmp_path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"ubiquityfs: {tmp_path / 'missing'}: No such file or directory",
                                     f"ubiquityfs: {tmp_path} is not a regular file"]
    r = subprocess.run([BIN, "chunks"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "chunks needs a FILE" in r.stderr
