"""Part 16, the wire: only what changed travels. Two real mounts on one stub; the stub's counters (bytes of blob
bodies stored and served) say what moved. A byte changed in a big file moves at most two chunks each way, a
copy inside the mount sends nothing, a sparse file sends its data only and stays sparse on the other device,
and an upload or a download cut by `kill -9` of the stub resumes with the chunks it lacks."""
import os
import signal
import subprocess
import time

from conftest import attr, run, sync, wait_until

MiB = 1 << 20
TWO_CHUNKS = 8 * MiB


def counters(stub):
    s = stub.stats()
    return s["blobBytesIn"], s["blobBytesOut"]


def kill_9(stub):
    stub.proc.send_signal(signal.SIGKILL)
    stub.proc.wait(timeout=30)
    stub.proc = None


def flip_byte(path, offset):
    """One byte changed in place, as `dd conv=notrunc` does it."""
    with open(path, "rb") as f:
        f.seek(offset)
        byte = f.read(1)[0]
    subprocess.run(["dd", f"of={path}", "bs=1", f"seek={offset}", "count=1", "conv=notrunc", "status=none"],
                   input=bytes([byte ^ 0xFF]), check=True, timeout=60)


def arrived(m, name, source):
    """Waits until the other device lists the file at its new size, then reads it there (a lazy download) and
    compares every byte."""
    path = m / "Documents" / name
    wait_until(lambda: path.exists() and path.stat().st_size == source.stat().st_size
               and attr(path, "downloadingStatus") != "current", timeout=60, what=f"{name} on {m.device}")
    run("cmp", path, source)


def test_a_byte_changed_in_a_big_file_moves_at_most_two_chunks_each_way(two, tmp_path):
    stub, a, b = two
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(64 * MiB))
    run("cp", source, a / "Documents" / "big.bin")
    sync(a)
    arrived(b, "big.bin", source)
    up, down = counters(stub)

    flip_byte(a / "Documents" / "big.bin", 32 * MiB + 5)
    flip_byte(source, 32 * MiB + 5)
    sync(a)
    sent = counters(stub)[0] - up
    assert 0 < sent <= TWO_CHUNKS, f"{sent} bytes went up for one byte changed"
    arrived(b, "big.bin", source)
    fetched = counters(stub)[1] - down
    assert 0 < fetched <= TWO_CHUNKS, f"{fetched} bytes came down for one byte changed"


def test_a_copy_in_the_mount_sends_nothing_and_an_append_sends_what_was_added(two, tmp_path):
    stub, a, b = two
    source = tmp_path / "log.bin"
    source.write_bytes(os.urandom(48 * MiB))
    run("cp", source, a / "Documents" / "log.bin")
    sync(a)
    up = counters(stub)[0]
    run("cp", a / "Documents" / "log.bin", a / "Documents" / "copy.bin")
    sync(a)
    assert counters(stub)[0] - up <= MiB
    arrived(b, "copy.bin", source)

    up = counters(stub)[0]
    with open(source, "ab") as f:
        f.write(os.urandom(MiB))
    subprocess.run(["sh", "-c", f'tail -c {MiB} "$1" >> "$2"', "sh", source, a / "Documents" / "log.bin"],
                   check=True, timeout=60)
    sync(a)
    assert counters(stub)[0] - up <= MiB + TWO_CHUNKS
    arrived(b, "log.bin", source)


def test_a_sparse_file_sends_its_data_only_and_stays_sparse(two):
    stub, a, b = two
    path = a / "Documents" / "disk.img"
    run("truncate", "-s", "1G", path)
    run("dd", "if=/dev/urandom", f"of={path}", "bs=1M", "count=1", "seek=512", "conv=notrunc", "status=none")
    up, down = counters(stub)
    sync(a)
    assert counters(stub)[0] - up <= 2 * MiB
    other = b / "Documents" / "disk.img"
    wait_until(lambda: other.exists() and other.stat().st_size == 1 << 30, timeout=60, what="disk.img on b")
    run("cmp", other, path)
    assert counters(stub)[1] - down <= 2 * MiB
    used = int(run("du", "-B1", other).stdout.split()[0])
    assert used <= 4 * MiB, f"the other device stores {used} bytes of a 1 GiB file with 1 MiB of data"


def test_an_upload_cut_by_kill_9_resumes_with_the_chunks_it_lacks(stub_factory, mount_factory, tmp_path):
    stub = stub_factory(latency_ms=40)  # each chunk's answer waits: the upload takes seconds
    a = mount_factory(stub, "laptop")
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(96 * MiB))
    run("cp", source, a / "Documents" / "big.bin")
    wait_until(lambda: counters(stub)[0] >= 32 * MiB, timeout=120, interval=0.05, what="a third uploaded")
    kill_9(stub)
    stub.start()
    sync(a, timeout=120)
    again = counters(stub)[0]  # the counters start at zero with the new process
    assert again <= 64 * MiB + TWO_CHUNKS, f"{again} bytes went up again after the cut"
    b = mount_factory(stub, "desktop")
    run("cmp", b / "Documents" / "big.bin", source)


def test_a_download_cut_by_kill_9_resumes_with_the_chunks_it_lacks(stub_factory, mount_factory, tmp_path):
    stub = stub_factory(bandwidth=16 * MiB)  # the other device's download takes seconds
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(64 * MiB))
    run("cp", source, a / "Documents" / "big.bin")
    sync(a)
    other = b / "Documents" / "big.bin"
    wait_until(lambda: other.exists(), timeout=60, what="big.bin on b")
    run("setfattr", "-n", "user.ubiquity.download", other)  # in the background
    wait_until(lambda: int(attr(other, "percentDownloaded") or 0) >= 40, timeout=60, interval=0.05,
               what="40% downloaded")
    kill_9(stub)
    time.sleep(1)
    stub.start()
    # The download goes on by itself once the remote answers again, from the chunks it has.
    wait_until(lambda: attr(other, "downloadingStatus") == "current", timeout=120, what="the download resumed")
    fetched = counters(stub)[1]
    assert fetched <= 40 * MiB + TWO_CHUNKS, f"{fetched} bytes came down again after the cut"
    run("cmp", other, source)


def test_a_remote_of_whole_blobs_goes_on_and_a_change_comes_down_as_chunks(stub, mount_factory, tmp_path):
    """What the remote of the previous version holds, every file one blob (`remote seed` stores them so): the
    new mounts read it whole, a file changed goes up in chunks, and the device that holds the old whole version
    fetches only the chunks its copy lacks."""
    source = tmp_path / "seeded.bin"
    source.write_bytes(os.urandom(24 * MiB))
    stub.seed(("Documents/seeded.bin", source))
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    run("cmp", a / "Documents" / "seeded.bin", source)
    run("cmp", b / "Documents" / "seeded.bin", source)
    down = counters(stub)[1]
    flip_byte(a / "Documents" / "seeded.bin", 12 * MiB)
    flip_byte(source, 12 * MiB)
    sync(a)
    arrived(b, "seeded.bin", source)
    fetched = counters(stub)[1] - down
    assert 0 < fetched <= TWO_CHUNKS, f"{fetched} bytes came down for one byte changed"


def test_a_small_file_saved_during_a_big_upload_does_not_wait_for_it(stub_factory, mount_factory, tmp_path):
    stub = stub_factory(latency_ms=60)  # each chunk's answer waits: the big upload takes seconds
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(96 * MiB))
    run("cp", source, a / "Documents" / "big.bin")
    wait_until(lambda: counters(stub)[0] >= 8 * MiB, timeout=60, interval=0.05, what="the big upload under way")
    run("sh", "-c", 'echo "saved meanwhile" > "$1"', "sh", a / "Documents" / "note.txt")
    wait_until(lambda: (b / "Documents" / "note.txt").exists(), timeout=30, interval=0.1,
               what="the small file on the other device")
    assert attr(a / "Documents" / "big.bin", "isUploaded") == "0", "the big upload was over before the note came"
    assert run("cat", b / "Documents" / "note.txt").stdout == "saved meanwhile\n"
    sync(a, timeout=120)
    run("cmp", b / "Documents" / "big.bin", source)


def test_a_copy_edited_on_one_device_comes_down_as_its_edit_on_the_other(stub, mount_factory, tmp_path):
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(64 * MiB))
    run("cp", source, a / "Documents" / "big.bin")
    sync(a)
    wait_until(lambda: (b / "Documents" / "big.bin").exists(), timeout=60, what="big.bin on b")
    run("cmp", b / "Documents" / "big.bin", source)  # b holds it now
    run("cp", a / "Documents" / "big.bin", a / "Documents" / "edited.bin")
    flip_byte(a / "Documents" / "edited.bin", 32 * MiB)
    sync(a)
    other = b / "Documents" / "edited.bin"
    wait_until(lambda: other.exists() and attr(other, "downloadingStatus") is not None, timeout=60,
               what="edited.bin on b")
    down = counters(stub)[1]
    run("cmp", other, a / "Documents" / "edited.bin")
    fetched = counters(stub)[1] - down
    assert fetched <= TWO_CHUNKS, f"{fetched} bytes came down for a copy with one byte changed"


def test_a_cold_open_waiting_while_the_stub_restarts_gets_its_content(stub_factory, mount_factory, tmp_path):
    # Found by bench workload D: a `cat` waiting for its download failed with EIO when the stub was killed and
    # started again at once, because the change feed had marked the mount offline meanwhile.
    stub = stub_factory(bandwidth=16 * MiB)
    a, b = mount_factory(stub, "laptop"), mount_factory(stub, "desktop")
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(48 * MiB))
    run("cp", source, a / "Documents" / "big.bin")
    sync(a)
    other = b / "Documents" / "big.bin"
    wait_until(lambda: other.exists(), timeout=60, what="big.bin on b")
    copy = tmp_path / "read.bin"
    with open(copy, "wb") as out:
        cat = subprocess.Popen(["cat", str(other)], stdout=out, stderr=subprocess.PIPE)
        wait_until(lambda: int(attr(other, "percentDownloaded") or 0) >= 30, timeout=60, interval=0.05,
                   what="30% downloaded")
        kill_9(stub)
        wait_until(lambda: attr(b.path, "isOffline") == "1", timeout=30, what="b to see the remote gone")
        stub.start()
        _, err = cat.communicate(timeout=120)
    assert cat.returncode == 0, err
    run("cmp", copy, source)
