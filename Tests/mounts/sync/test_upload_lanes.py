"""Part 20, point 6: a big file never holds back others. Large files go up beside one another (a few at once),
so a file saved while a terabyte-long sparse file is read and hashed for its upload goes up at once."""
import os

from conftest import BIN, attr, run, wait_until


def test_a_file_saved_during_a_long_upload_goes_up_beside_it(stub, mount_factory):
    m = mount_factory(stub)
    big, small = m / "Documents" / "sp", m / "Documents" / "b"
    run("truncate", "-s", "1T", big)
    # The terabyte's upload is under way (its zeros read and hashed) before the small file is written: its
    # status and the log say so.
    wait_until(lambda: attr(big, "isUploading") == "1", timeout=60, what="the sparse file's upload to start")
    assert attr(big, "percentUploaded") == "0"
    small.write_bytes(os.urandom(5 << 20))  # chunked, as large files are: it takes the content lane too
    wait_until(lambda: attr(small, "isUploaded") == "1", timeout=90, what="the 5 MiB file uploaded")
    assert attr(big, "isUploaded") == "0" and attr(big, "isUploading") == "1", "the terabyte was still going up"
    assert "Documents/sp on the content lane" in (m.store / "ubiquityfs.log").read_text(errors="replace")
    big.unlink()  # its upload stops at once (the file is gone)
    run(BIN, "sync", "--wait", "--timeout", "60", m.path, timeout=90)
