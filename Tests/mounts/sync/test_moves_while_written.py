"""Part 20 (8): a move made on another device reaches a file that a program here is writing, at once.

Before, the file stayed where it was here until its write went up, so the folder it was moved into looked
empty here, and an rmdir of that folder deleted it on the remote under the moved file (simulation seed
43002834: the folder came back on every device).
"""
import os
import threading

from conftest import run, sync, wait_until


def test_a_file_being_written_here_follows_a_move_made_elsewhere(two):
    _, a, b = two
    (a / "Documents" / "z").mkdir()
    (a / "Documents" / "b.txt").write_text("base\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "b.txt").exists() and (b / "Documents" / "z").is_dir(),
               timeout=30, what="b.txt and z on b")
    # A logger appends a line every 0.3 s: the file never has a quiet moment, so its change stays pending here.
    stop = threading.Event()
    fd = os.open(a / "Documents" / "b.txt", os.O_WRONLY | os.O_APPEND)

    def logger():
        os.write(fd, b"line\n")
        while not stop.wait(0.3):
            os.write(fd, b"line\n")

    writer = threading.Thread(target=logger)
    writer.start()
    try:
        run("mv", b / "Documents" / "b.txt", b / "Documents" / "z" / "b.txt")
        sync(b)
        wait_until(lambda: os.listdir(a / "Documents" / "z") == ["b.txt"], timeout=30,
                   what="the move on a while its writer holds the file open")
        assert os.listdir(a / "Documents") == ["z"]
        rmdir = run("rmdir", a / "Documents" / "z", check=False)
        assert rmdir.returncode != 0 and "Directory not empty" in rmdir.stderr
    finally:
        stop.set()
        writer.join()
        os.close(fd)
    lines = (a / "Documents" / "z" / "b.txt").read_text()
    assert lines.startswith("base\nline\n")
    sync(a)
    for m in (a, b):
        f = m / "Documents" / "z" / "b.txt"
        wait_until(lambda: f.exists() and f.read_text() == lines, timeout=30,
                   what=f"the written file in z on {m.device}")
        assert sorted(os.listdir(m / "Documents")) == ["z"]
