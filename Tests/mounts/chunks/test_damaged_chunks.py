"""Part 21 point 8: a chunk damaged in the remote's store counts as missing everywhere. A read that finds it
does not hash to its name is cut before its last bytes and sets it aside, `chunks/missing` then lists it, and
the next upload of any file holding it stores it again."""
import json
import os
import subprocess

from conftest import BIN, CONTAINER, curl_auth, run, sync, wait_until


def test_a_damaged_chunk_is_missing_until_an_upload_of_it_repairs_it(two):
    stub, a, b = two
    data = os.urandom(6 << 20)  # chunked (over 4 MiB)
    (a / "Documents" / "f.bin").write_bytes(data)
    sync(a)
    wait_until(lambda: (b / "Documents" / "f.bin").exists(), what="f.bin listed on b")
    blobs = stub.data / "blobs" / CONTAINER
    manifest = json.loads(next(blobs.glob("*.chunks")).read_text())
    chunk = manifest["chunks"][1]["sha256"]
    damaged = bytearray((blobs / chunk).read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    (blobs / chunk).write_bytes(damaged)

    assert not readable(b / "Documents" / "f.bin")
    # Before Part 21 the chunk still counted as present: no device's upload ever sent it again.
    asked = subprocess.run(["curl", "-s", "-H", curl_auth(stub.token), "-H", "Content-Type: application/json",
                            "--data-binary", json.dumps({"chunks": [chunk]}),
                            f"{stub.url}/v1/containers/{CONTAINER}/chunks/missing"],
                           capture_output=True, text=True, timeout=30)
    assert json.loads(asked.stdout)["chunks"] == [chunk], asked.stdout

    run("cp", a / "Documents" / "f.bin", a / "Documents" / "g.bin")  # holds the same chunks
    sync(a)
    wait_until(lambda: readable(b / "Documents" / "f.bin"), timeout=60,
               what="f.bin readable on b once the chunk went up again")
    assert (b / "Documents" / "f.bin").read_bytes() == data


def readable(path):
    """Whether `cat` reads the whole file."""
    return subprocess.run(["cat", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60).returncode == 0


def remote_check(stub, *extra):
    return run(BIN, "remote", "check", "--data", stub.data, *extra, check=False, timeout=120)


def test_remote_check_finds_damage_repair_sets_it_aside_and_lists_the_files_to_upload_again(two):
    stub, a, b = two
    data = os.urandom(6 << 20)
    (a / "Documents" / "sub").mkdir()
    (a / "Documents" / "sub" / "f.bin").write_bytes(data)
    (a / "Documents" / "small.txt").write_text("small\n")
    sync(a)
    clean = remote_check(stub)
    assert clean.returncode == 0 and clean.stdout.startswith("checked 1 container(s): "), clean
    blobs = stub.data / "blobs" / CONTAINER
    chunk = json.loads(next(blobs.glob("*.chunks")).read_text())["chunks"][0]["sha256"]
    damaged = bytearray((blobs / chunk).read_bytes())
    damaged[100] ^= 0xFF
    (blobs / chunk).write_bytes(damaged)

    found = remote_check(stub)
    assert found.returncode == 1 and f"damaged blob {chunk} of default {CONTAINER}: --repair sets it aside" in found.stdout, found
    assert (blobs / chunk).exists(), "without --repair nothing changes"
    repaired = remote_check(stub, "--repair")
    assert repaired.returncode == 1, repaired
    assert "set aside; the next upload of it stores it again" in repaired.stdout
    missing = [line for line in repaired.stdout.splitlines() if line.startswith("missing content")]
    assert len(missing) == 1 and f"default {CONTAINER} Documents/sub/f.bin" in missing[0], repaired.stdout
    report = json.loads(remote_check(stub, "--json").stdout)
    assert [f["path"] for f in report["findings"] if f["kind"] == "missingContent"] == ["Documents/sub/f.bin"], report

    # The device that has it uploads it again (a copy holds the same chunks): nothing is missing any more.
    run("cp", a / "Documents" / "sub" / "f.bin", a / "Documents" / "copy.bin")
    sync(a)
    wait_until(lambda: remote_check(stub).returncode == 0, timeout=60, what="a clean check after the upload")
    assert (b / "Documents" / "sub" / "f.bin").read_bytes() == data


def test_remote_check_finds_a_damaged_object_in_s3(seaweedfs, stub_factory, mount_factory, tmp_path):
    prefix = "it-check-" + os.urandom(4).hex()
    stub = stub_factory("remote", extra=seaweedfs.stub_args(prefix))
    a = mount_factory(stub)
    (a / "Documents" / "doc.txt").write_text("kept in S3\n")
    sync(a)
    blobs = ["--data", stub.data, *seaweedfs.stub_args(prefix)]
    assert run(BIN, "remote", "check", *blobs, check=False).returncode == 0
    key = next(k for k in seaweedfs.keys(prefix) if "/blobs/" in k and not k.endswith(".chunks"))
    (tmp_path / "bad").write_text("not what was kept\n")
    seaweedfs.overwrite(key, tmp_path / "bad")
    found = run(BIN, "remote", "check", *blobs, "--repair", check=False, timeout=120)
    assert found.returncode == 1 and "damaged blob" in found.stdout, found
    assert f"missing content of default {CONTAINER} Documents/doc.txt" in found.stdout, found.stdout
