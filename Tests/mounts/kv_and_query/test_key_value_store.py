"""Part 10: the key-value store (NSUbiquitousKeyValueStore) on two devices, through MOUNT/.kvstore and
`ubiquityfs kv`."""
import errno
import json
import os
import subprocess
import time
import urllib.error

import pytest

from conftest import BIN, CONTAINER, fails, run, wait_for_line, wait_until

MB = 1 << 20


def kv(*args, check=True):
    return run(BIN, "kv", *args, check=check)


def key_text(m, key):
    """The key's file as read through the mount, or None when it is not there."""
    path = m / ".kvstore" / key
    return path.read_text() if path.exists() else None


def write_key(path, data):
    """open, write, close: the value is stored at close, where a quota refusal shows."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_a_set_on_one_device_is_read_on_the_other(two):
    _, a, b = two
    run("sh", "-c", f"echo hello > {a.path}/.kvstore/greeting")
    kv("set", a.path, "colour", "blue")
    assert (a / ".kvstore" / "greeting").read_text() == "hello\n"  # what echo wrote, cat reads back
    wait_until(lambda: key_text(b, "greeting") == "hello\n", timeout=10, what="greeting on B")
    wait_until(lambda: kv("get", b.path, "colour", check=False).stdout == "blue\n", timeout=10, what="colour on B")
    assert run("ls", b / ".kvstore").stdout.split() == ["colour", "greeting"]
    assert kv("list", b.path).stdout.split() == ["colour", "greeting"]
    # a delete is a write too
    run("rm", b / ".kvstore" / "colour")
    wait_until(lambda: key_text(a, "colour") is None, timeout=10, what="colour deleted on A")
    assert kv("get", a.path, "colour", check=False).stderr.strip() == "ubiquityfs: kv get: no such key: colour"


def test_kvstore_is_no_item_and_is_never_uploaded(two):
    stub, a, b = two
    fails(errno.EEXIST, os.mkdir, b / "Documents" / ".." / ".kvstore")
    fails(errno.EROFS, os.mkdir, a / ".kvstore" / "dir")
    kv("set", a.path, "k", "v")
    wait_until(lambda: key_text(b, "k") == "v", timeout=10, what="k on B")
    names = [i["name"] for i in stub.request("GET", f"/v1/containers/{CONTAINER}/changes")["items"]]
    assert ".kvstore" not in names and "k" not in names


def test_a_key_value_store_that_cannot_be_read_answers_eio_never_no_such_key(two):
    """A .kvstore whose table cannot be read (here dropped from outside) answers EIO at a lookup, a listing and
    an open: a key is never said to be absent because the store failed (Part 22, point 5). Before, `ls` listed
    it empty. Meanwhile the feed is asked again at the pace of an unreachable remote: before, it was asked
    again at once after each failure to take it in, a hundred times a second."""
    _, a, _ = two
    kv("set", a.path, "k", "v")
    assert key_text(a, "k") == "v"
    log = a.store / "ubiquityfs.log"
    run("sqlite3", "-cmd", ".timeout 10000", a.store / "state.sqlite", "DROP TABLE kv_local")
    time.sleep(1)
    asked = log.read_text(errors="replace").count("/kv?since=")
    time.sleep(3)
    asked = log.read_text(errors="replace").count("/kv?since=") - asked
    assert asked <= 10, f"the key-value feed was asked {asked} times in 3 s"
    for argv in (["cat", a / ".kvstore" / "k"], ["cat", a / ".kvstore" / "never-set"], ["ls", a / ".kvstore"]):
        p = run(*argv, check=False)
        assert p.returncode != 0 and "Input/output error" in p.stderr, (argv, p.stderr)
    assert (a / "Documents").is_dir()  # the rest of the mount goes on


def test_the_later_write_wins_on_both_after_both_were_offline(two):
    stub, a, b = two
    kv("set", a.path, "k", "first")
    wait_until(lambda: key_text(b, "k") == "first", timeout=10, what="k on B")
    stub.stop()
    kv("set", a.path, "k", "from A")
    kv("set", b.path, "k", "from B, later")
    kv("set", a.path, "only-a", "1")
    stub.start()
    for m in (a, b):
        wait_until(lambda: key_text(m, "k") == "from B, later", timeout=15, what=f"the later write on {m.device}")
        wait_until(lambda: key_text(m, "only-a") == "1", timeout=15, what=f"only-a on {m.device}")


def test_each_limit_is_refused_on_the_mount_and_stores_nothing(two):
    _, a, _ = two
    store = a / ".kvstore"
    with pytest.raises(OSError) as e:
        write_key(store / ("k" * 65), b"v")
    assert e.value.errno == errno.ENAMETOOLONG
    with pytest.raises(OSError) as e:
        write_key(store / "big", b"x" * (MB + 1))
    assert e.value.errno == errno.EFBIG
    write_key(store / "half", b"x" * (600 * 1024))
    with pytest.raises(OSError) as e:
        write_key(store / "other-half", b"y" * (600 * 1024))
    assert e.value.errno == errno.EDQUOT
    assert run("ls", store).stdout.split() == ["half"]
    # a shell's `>` opens with O_TRUNC and flushes once before the first write: still nothing is stored, and an
    # existing value is kept
    run("sh", "-c", f"echo old > {store}/kept")
    for key in ("kept", "new"):
        shell = run("sh", "-c", f"yes x | head -c {MB + 1} > {store}/{key}", check=False)
        assert "File too large" in shell.stderr
    assert run("ls", store).stdout.split() == ["half", "kept"]
    assert (store / "kept").read_text() == "old\n"
    os.unlink(store / "kept")
    os.unlink(store / "half")
    for i in range(1024):
        write_key(store / f"key{i}", b"1")
    with pytest.raises(OSError) as e:
        write_key(store / "one-too-many", b"1")
    assert e.value.errno == errno.EDQUOT
    assert not (store / "one-too-many").exists()
    assert len(os.listdir(store / ".json")) == 1024
    # The 1025th key is refused at its create, so a shell, which ignores what close says, sees it too.
    with pytest.raises(OSError) as e:
        os.open(store / "new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    assert e.value.errno == errno.EDQUOT
    shell = run("sh", "-c", f"echo x > {store}/new", check=False)
    assert shell.returncode != 0 and "Disk quota exceeded" in shell.stderr
    write_key(store / "key7", b"an existing key can still change")
    assert (store / "key7").read_text() == "an existing key can still change"


def test_keys_the_file_view_cannot_name_get_a_message_that_says_so(two):
    """`kv set` and `kv get` check the key themselves and say what is wrong with it; `.json` and `.changes`,
    names the file view uses for itself, are ordinary keys through the command (the typed files hold them)."""
    _, a, b = two
    for key, why in (("", "a key cannot be empty"), ("a/b", "a key cannot contain '/'"),
                     (".", "the keys . and .. cannot be used"), ("..", "the keys . and .. cannot be used")):
        for action in (("set", a.path, key, "v"), ("get", a.path, key)):
            p = kv(*action, check=False)
            assert p.returncode == 1 and p.stderr == f"ubiquityfs: kv {action[0]}: {why}\n", (key, p.stderr)
    bad = subprocess.run([os.fsencode(BIN), b"kv", b"set", os.fsencode(a.path), b"\xff\xfe", b"v"],
                         capture_output=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr == b"ubiquityfs: kv set: a key must be UTF-8\n"
    assert kv("list", a.path).stdout == ""
    for key in (".json", ".changes"):
        kv("set", a.path, key, f"value of {key}")
        assert kv("get", a.path, key).stdout == f"value of {key}\n"
        wait_until(lambda: kv("get", b.path, key, check=False).stdout == f"value of {key}\n", what=f"{key} on b")
    assert kv("list", a.path).stdout.split() == [".changes", ".json"]
    kv("delete", a.path, ".json")
    assert kv("get", a.path, ".json", check=False).stderr == "ubiquityfs: kv get: no such key: .json\n"


def set_from_stdin(m, key, data):
    """`ubiquityfs kv set MOUNT KEY` with the value on stdin (a value too long for one argument)."""
    return subprocess.run([BIN, "kv", "set", m.path, key], input=data, capture_output=True, timeout=60)


def test_each_limit_is_refused_on_the_command_line_with_one_line(two):
    _, a, _ = two
    long_key = kv("set", a.path, "k" * 65, "v", check=False)
    assert long_key.returncode == 1
    assert long_key.stderr == "ubiquityfs: kv set: key too long (over 64 bytes)\n"
    big = set_from_stdin(a, "big", b"x" * (MB + 1))
    assert big.returncode == 1 and big.stderr == b"ubiquityfs: kv set: value too large (over 1 MB)\n"
    assert set_from_stdin(a, "half", b"x" * (600 * 1024)).returncode == 0
    over = set_from_stdin(a, "other", b"y" * (600 * 1024))
    assert over.returncode == 1
    assert over.stderr == b"ubiquityfs: kv set: over the quota (at most 1024 keys and 1 MB in all)\n"
    assert kv("list", a.path).stdout.split() == ["half"]


def test_typed_values_keep_their_type_between_devices(two):
    _, a, b = two
    values = {
        "dict": {"type": "dictionary", "value": {"a": {"type": "array", "value": [
            {"type": "integer", "value": 1}, {"type": "real", "value": 2.5}, {"type": "boolean", "value": True}]}}},
        "when": {"type": "date", "value": 1764547200123456789},
        "bytes": {"type": "data", "value": "AAEC/w=="},
        "count": {"type": "integer", "value": 5},
    }
    for key, value in values.items():
        kv("set", "--json", a.path, key, json.dumps(value))
    for key, value in values.items():
        wait_until(lambda: kv("get", "--json", b.path, key, check=False).returncode == 0, timeout=10, what=key)
        assert json.loads(kv("get", "--json", b.path, key).stdout) == value
    # a non-string value reads as its typed JSON and a newline; a file written holds a string
    assert json.loads((b / ".kvstore" / "count").read_text()) == values["count"]
    assert (b / ".kvstore" / "count").read_text().endswith("}\n")
    assert json.loads(kv("list", "--json", b.path).stdout) == values
    bad = kv("set", "--json", a.path, "bad", "5", check=False)
    assert bad.returncode == 1 and "not a typed JSON value" in bad.stderr


def test_an_acknowledged_set_survives_a_crash(two):
    stub, a, b = two
    stub.stop()
    kv("set", a.path, "kept", "after the crash")
    a.kill_daemon()
    a.mount()
    assert key_text(a, "kept") == "after the crash"
    stub.start()
    wait_until(lambda: key_text(b, "kept") == "after the crash", timeout=15, what="kept on B")


def stub_kv(stub):
    return json.dumps(stub.request("GET", f"/v1/containers/{CONTAINER}/kv?since=0")).encode()


def put(stub, key, value, mtime=1, device="rogue"):
    return stub.request("PUT", f"/v1/containers/{CONTAINER}/kv/{key}",
                        {"key": key, "value": value, "mtime": mtime, "device": device, "deleted": False, "seq": 0})


def test_the_remote_refuses_over_quota_writes_from_a_misbehaving_client(two):
    stub, a, _ = two
    with pytest.raises(urllib.error.HTTPError) as e:
        put(stub, "big", {"type": "string", "value": "x" * (MB + 1)})
    assert e.value.code == 413 and b"value too large" in e.value.read()
    for i in range(1024):
        put(stub, f"key{i}", {"type": "integer", "value": i})
    with pytest.raises(urllib.error.HTTPError) as e:
        put(stub, "one-too-many", {"type": "integer", "value": 0})
    assert e.value.code == 413 and b"quota" in e.value.read()
    wait_until(lambda: len(os.listdir(a / ".kvstore" / ".json")) == 1024, timeout=15, what="1024 keys on A")
    # the later write wins on the remote as on the devices: an older one is answered with the winner
    assert put(stub, "key1", {"type": "integer", "value": -1}, mtime=0)["value"] == {"type": "integer", "value": 1}


def test_a_write_the_remote_refuses_for_the_quota_is_reported_and_dropped(two):
    stub, a, b = two
    stub.stop()
    assert set_from_stdin(a, "from-a", b"x" * (600 * 1024)).returncode == 0  # within the quota as A sees it
    a.kill_daemon()
    stub.start()
    assert set_from_stdin(b, "from-b", b"y" * (600 * 1024)).returncode == 0
    wait_until(lambda: key_text(b, "from-b") is not None and b"from-b" in stub_kv(stub), timeout=15,
               what="from-b on the remote")
    a.mount()  # A now sends its write, which would pass the quota on the remote
    changes = a / ".kvstore" / ".changes"
    wait_until(lambda: '"QuotaViolationChange"' in changes.read_text(), timeout=15, what="QuotaViolationChange")
    record = [json.loads(line) for line in changes.read_text().splitlines() if "Quota" in line][0]
    assert record["keys"] == ["from-a"]
    wait_until(lambda: key_text(a, "from-b") is not None, timeout=15, what="from-b on A")
    assert key_text(a, "from-a") is None and key_text(b, "from-a") is None


def watching(m, tmp_path, *flags):
    """A `kv watch` in the background, returned once it says it is watching (its readiness line on stderr)."""
    path = tmp_path / f"watch{len(flags)}.txt"
    proc = subprocess.Popen([BIN, "kv", "watch", *flags, m.path], stdout=open(path, "w"), stderr=subprocess.PIPE,
                            text=True)
    wait_for_line(proc, proc.stderr, "kv watch: watching")
    return proc, path


def test_watch_prints_a_change_made_on_the_other_device(two, tmp_path):
    _, a, b = two
    kv("set", a.path, "before", "1")  # a change made here is not printed
    watch, out = watching(a, tmp_path)
    jwatch, jout = watching(a, tmp_path, "--json")
    try:
        kv("set", b.path, "theme", "dark")
        wait_until(lambda: out.read_text(), timeout=15, what="a watch line")
        wait_until(lambda: jout.read_text(), timeout=15, what="a JSON watch line")
    finally:
        watch.kill()
        jwatch.kill()
    assert out.read_text() == "ServerChange theme\n"
    record = json.loads(jout.read_text())
    assert (record["reason"], record["keys"]) == ("ServerChange", ["theme"])
    assert key_text(a, "theme") == "dark"


def test_watch_all_shows_the_initial_sync_and_an_account_change(stub, stub_factory, mount_factory):
    a = mount_factory(stub, "laptop")
    kv("set", a.path, "k", "v")
    changes = a / ".kvstore" / ".changes"
    wait_until(lambda: "InitialSyncChange" in changes.read_text(), timeout=10, what="the initial sync")
    other = stub_factory("another-account")
    a.unmount()
    a.stub = other
    a.mount()
    wait_until(lambda: "InitialSyncChange" in changes.read_text(), timeout=10, what="the initial sync afresh")
    watch = run("timeout", "1", BIN, "kv", "watch", "--all", a.path, check=False)
    lines = watch.stdout.splitlines()
    assert lines[0] == "AccountChange k", lines
    assert lines[1].startswith("InitialSyncChange"), lines
    assert key_text(a, "k") is None
