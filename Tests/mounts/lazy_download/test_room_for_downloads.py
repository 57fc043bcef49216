"""Part 21, point 3: a device never evicts its local copies to make room for a file that could never fit on
its disk. The open fails at once with EIO, downloadingError says why, and every copy stays. A sparse file
needs room for its data only."""
import os
import subprocess

from conftest import attr, mount_with_store_on, small_ext4_at, sync, wait_until

MiB = 1 << 20


def test_a_file_larger_than_the_disk_evicts_nothing(stub, mount_factory, tmp_path):
    other = mount_factory(stub, "desktop")
    copies = {f"kept{i}.bin": os.urandom(2 * MiB) for i in range(4)}
    for name, data in copies.items():
        (other / "Documents" / name).write_bytes(data)
    sparse = other / "Documents" / "sparse.bin"
    with open(sparse, "wb") as f:  # 1 GiB, of which 1 MiB of data
        f.write(copies["kept0.bin"][:MiB])
        f.truncate(1 << 30)
    big = other / "Documents" / "big.bin"
    with open(big, "wb") as f:  # 80 MiB of data: more than the 64 MiB disk holds
        for _ in range(80):
            f.write(os.urandom(MiB))
    sync(other)
    with small_ext4_at(tmp_path, 64) as small:
        m = mount_with_store_on(mount_factory, stub, small, "--min-free", "8M")
        docs = m / "Documents"
        wait_until(lambda: (docs / "big.bin").exists(), timeout=30, what="big.bin listed")
        for name, data in copies.items():
            assert (docs / name).read_bytes() == data
        got = subprocess.run(["cat", docs / "big.bin"], capture_output=True, timeout=60)
        assert got.returncode != 0 and b"Input/output error" in got.stderr, got
        why = attr(docs / "big.bin", "downloadingError") or ""
        assert "could never fit" in why and "80.0 MiB" in why, why
        # Before, every copy here was evicted for it first.
        for name in copies:
            assert attr(docs / name, "downloadingStatus") == "current", name
        head = subprocess.run(["head", "-c", str(MiB)], stdin=open(docs / "sparse.bin", "rb"), capture_output=True,
                              timeout=60)
        assert head.stdout == copies["kept0.bin"][:MiB]
        for name in copies:
            assert attr(docs / name, "downloadingStatus") == "current", f"{name} evicted for a sparse file's holes"
