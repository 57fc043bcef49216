"""Part 13, point 8 (the part that is the file system's): SEEK_DATA and SEEK_HOLE on a sparse file report where
the data is, as ext4 does, not one data segment for the whole file (cp --sparse, tar -S and rsync -S use them)."""
import errno
import os

import pytest

MiB = 1 << 20


@pytest.mark.parametrize("passthrough", [True, False], ids=["passthrough", "no-passthrough"])
def test_seek_data_and_seek_hole_find_the_data_of_a_sparse_file(stub, mount_factory, passthrough):
    m = mount_factory(stub, extra=() if passthrough else ("--no-passthrough",))
    path = m / "Documents" / "sparse.img"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 64 * MiB)
        os.pwrite(fd, b"x" * 4096, 32 * MiB)
        assert os.lseek(fd, 0, os.SEEK_DATA) == 32 * MiB
        assert os.lseek(fd, 32 * MiB, os.SEEK_HOLE) == 32 * MiB + 4096
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 0
        with pytest.raises(OSError) as e:
            os.lseek(fd, 32 * MiB + 4096, os.SEEK_DATA)
        assert e.value.errno == errno.ENXIO
    finally:
        os.close(fd)
    # A new open (the kernel may ask through another handle) sees the same.
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_DATA) == 32 * MiB
    finally:
        os.close(fd)
