"""Part 20 (7): an SQLite database in WAL mode written on one device while another reads it. The database's
companions (`-wal`, `-shm`, `-journal`) stay on the device that made them; the database file travels. Before,
every reader and writer's companions went up, met each other's, and "t 2.db-wal", "t 2.db-shm", "t 3.db-..."
piled up on both devices, with some 25 entries in Recently Deleted."""
import os
import subprocess
import time

from conftest import BIN, attr, run, sync, wait_until

WRITER = r"""
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER, at REAL)")
db.commit()
for n in range(int(sys.argv[2])):
    db.execute("INSERT INTO t VALUES (?, ?)", (n, time.time()))
    db.commit()
    time.sleep(0.05)
db.close()
"""


def rows(path):
    """The rows of table t as `sqlite3 -readonly` counts them, or its error."""
    p = run("sqlite3", "-readonly", path, "SELECT count(*) FROM t", check=False)
    return int(p.stdout) if p.returncode == 0 and p.stdout.strip().isdigit() else p.stderr.strip()


def test_a_database_written_on_one_device_and_read_on_another_leaves_no_copies(two):
    _, a, b = two
    db_a, db_b = a / "Documents" / "t.db", b / "Documents" / "t.db"
    writer = subprocess.Popen(["python3", "-c", WRITER, str(db_a), "200"])
    try:
        # The reader on the other device, as long as the writer writes.
        seen = []
        while writer.poll() is None:
            if db_b.exists():
                seen.append(rows(db_b))
            time.sleep(0.3)
        assert writer.returncode == 0
    finally:
        writer.kill()
        writer.wait()
    assert not (a / "Documents" / "t.db-wal").exists(), "the last close checkpoints the log into the database"
    sync(a)
    wait_until(lambda: rows(db_b) == 200, timeout=60, what="every row in the database on the reader's device")
    # Meanwhile the reader saw the database as of the writer's last checkpoint (here its first state, without
    # the table: every row was in the writer's log), and never a database torn between two moments.
    assert seen and all(n == "Error: in prepare, no such table: t" or isinstance(n, int) for n in seen), seen
    sync(b)
    for m in (a, b):
        names = sorted(os.listdir(m / "Documents"))
        assert [n for n in names if not n.endswith(("-wal", "-shm", "-journal"))] == ["t.db"], (m.device, names)
        assert not os.listdir(m / ".versions"), f"conflict versions on {m.device}"
    assert run(BIN, "trash", "list", a.path).stdout.strip() == "Recently Deleted is empty"
    # A companion the reader made stays where it was made, and says so.
    companion = b / "Documents" / "t.db-shm"
    if not companion.exists():
        companion.write_bytes(b"\0" * 32)
    assert attr(companion, "isUbiquitous") == "0"
    assert not (a / "Documents" / "t.db-shm").exists()
