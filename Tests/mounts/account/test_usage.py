"""Part 23, point 3: usage per app. `ubiquityfs usage` and the roots' attributes show what the account stores on
the remote per container (documents, data, kept versions, Recently Deleted) against the one quota of all its
containers, and what this device holds; the figures are the server's own (`remote usage`)."""
import json
import os
import time

from conftest import BIN, accounts, attr, run, wait_until

NOTES = "iCloud.com.example.notes"
DRAW = "iCloud.com.example.draw"
KiB = 1024


def fresh_usage(path):
    """`ubiquityfs usage --json` of `path`, once its figures are from after this call began."""
    began = time.time()
    while True:
        report = json.loads(run(BIN, "usage", "--json", path).stdout)
        at = time.mktime(time.strptime(report["at"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        if at >= began - 0.5 or time.time() - began > 20:
            return report
        time.sleep(0.5)


def test_usage_per_container_matches_the_servers_figures(stub, mount_factory):
    laptop = mount_factory(stub, device="laptop", container=None, extra=["--containers", f"{NOTES},{DRAW}"])
    notes, draw = laptop.path / "iCloud~com~example~notes", laptop.path / "iCloud~com~example~draw"
    (notes / "Documents/letter.bin").write_bytes(os.urandom(200 * KiB))
    (notes / "Documents/draft.bin").write_bytes(os.urandom(30 * KiB))
    (draw / "Documents/cat.bin").write_bytes(os.urandom(100 * KiB))
    (draw / "settings.bin").write_bytes(os.urandom(50 * KiB))  # the app's data, outside Documents
    laptop.sync()
    (notes / "Documents/letter.bin").write_bytes(os.urandom(210 * KiB))  # the 200 KiB become a kept version
    os.remove(notes / "Documents/draft.bin")  # into Recently Deleted
    laptop.sync()
    time.sleep(1)

    report = fresh_usage(laptop.path)
    rows = {r["container"]: r for r in report["containers"]}
    assert rows[NOTES] == {"container": NOTES, "documents": 210 * KiB, "data": 0, "versions": 200 * KiB,
                           "deleted": 30 * KiB}, rows
    assert rows[DRAW] == {"container": DRAW, "documents": 100 * KiB, "data": 50 * KiB, "versions": 0, "deleted": 0}
    # The server's own view, as its operator sees it.
    server = json.loads(accounts(stub, "usage", "--json").stdout)
    for row in server["containers"]:
        if row["user"] == "default" and row["container"] in rows:
            mine = rows[row["container"]]
            assert (mine["documents"] + mine["data"], mine["versions"], mine["deleted"]) == (
                row["live"], row["history"], row["trash"]), (mine, row)
    default = next(u for u in server["users"] if u["user"] == "default")
    assert report["used"] == default["storage"] and report["quota"] == default["limits"]["storage"] == 1 << 40
    assert report["local"] > 0

    # The attributes: each container's root its own bytes, the mount's root the account's.
    assert attr(notes, "usedBytes") == str(440 * KiB)
    assert attr(draw, "usedBytes") == str(150 * KiB)
    assert attr(laptop.path, "usedBytes") == str(report["used"])
    assert attr(laptop.path, "quotaBytes") == str(1 << 40) and attr(laptop.path, "quotaState") == "ok"
    assert int(attr(draw, "localBytes")) >= 150 * KiB
    table = run(BIN, "usage", laptop.path).stdout
    assert NOTES in table and DRAW in table and "of 1.0 TiB" in table, table
    # A path in a container shows that container.
    one = json.loads(run(BIN, "usage", "--json", draw / "Documents").stdout)
    assert [r["container"] for r in one["containers"]] == [DRAW]

    # Near the quota, and past it, the roots say so.
    accounts(stub, "user", "set", "default", "--quota", str(report["used"] + 10 * KiB))
    wait_until(lambda: attr(laptop.path, "quotaState") == "almostFull", timeout=30, what="almostFull")
    accounts(stub, "user", "set", "default", "--quota", "100K")
    wait_until(lambda: attr(laptop.path, "quotaState") == "full", timeout=30, what="full")
    assert "the account is full" in run(BIN, "usage", laptop.path).stdout


def test_usage_without_figures_from_the_remote_says_so(stub, mount_factory):
    laptop = mount_factory(stub, device="laptop", container=NOTES)
    stub.stop()
    laptop.unmount()
    laptop.mount()  # from the store's last known state: the remote cannot be asked
    p = run(BIN, "usage", laptop.path, check=False)
    assert p.returncode == 1 and "the remote has not answered" in p.stderr, p.stderr
    assert attr(laptop.path, "usedBytes") is None and attr(laptop.path, "localBytes") is not None
