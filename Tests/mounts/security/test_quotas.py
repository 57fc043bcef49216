"""Part 21, point 3: each user's limits on the remote (storage quota, containers, items), set with `remote user
add|set`, shown by `remote usage`. Over a limit the server refuses what would add (507), the mount keeps the change
queued, says so in its status, and a program that writes meanwhile gets EDQUOT at close; nothing is lost."""
import hashlib
import json
import os
import socket

from conftest import BIN, accounts, attr, curl_auth, Mount, new_key, run, sync, wait_until


def md5(path):
    return hashlib.md5(open(path, "rb").read()).hexdigest()


def usage_of(stub, user):
    report = json.loads(accounts(stub, "usage", "--json").stdout)
    return next(u for u in report["users"] if u["user"] == user)


def test_over_quota_a_change_waits_writes_get_edquot_and_all_goes_up_once_there_is_room(stub, mount_factory, tmp_path):
    accounts(stub, "user", "add", "bob", "--quota", "1M")
    laptop = mount_factory(new_key(stub, tmp_path, "bob", "laptop"), "laptop")
    docs = laptop / "Documents"
    (docs / "a.bin").write_bytes(os.urandom(700 * 1024))
    sync(laptop)
    # The second file would take bob past 1 MiB: refused, and the mount says why.
    (docs / "b.bin").write_bytes(os.urandom(700 * 1024))
    wait_until(lambda: "over quota" in (attr(docs / "b.bin", "uploadingError") or ""), timeout=60,
               what="b.bin's uploadingError naming the quota")
    assert attr(docs / "b.bin", "isUploaded") == "0"
    assert attr(laptop.path, "isOverQuota") == "1"
    assert "user bob stores 700.0 KiB of 1.0 MiB" in attr(laptop.path, "uploadingError")
    status = run(BIN, "status", laptop.path).stdout
    assert "uploads refused: over quota" in status, status
    # A program writing now learns it at close, as on a disk with quotas; what it wrote is kept here.
    (tmp_path / "c.txt").write_text("written over quota\n")
    cp = run("cp", tmp_path / "c.txt", docs / "c.txt", check=False)
    assert cp.returncode == 1 and "Disk quota exceeded" in cp.stderr, cp
    assert (docs / "c.txt").read_text() == "written over quota\n"
    # A file that stays on this device (`.nosync`) is no upload: it is written without a word.
    assert run("cp", tmp_path / "c.txt", docs / "scratch.nosync", check=False).returncode == 0
    # The operator's view: what bob stores against his quota.
    bob = usage_of(stub, "bob")
    assert bob["storage"] == 700 * 1024 and bob["limits"]["storage"] == 1 << 20 and bob["containers"] == 1, bob
    table = accounts(stub, "usage").stdout
    assert any(line.split()[:4] == ["bob", "700.0", "KiB", "1.0"] for line in table.splitlines()), table
    # Room made: every queued change goes up by itself, and another device of bob's gets the same bytes.
    assert "quota 10.0 MiB" in accounts(stub, "user", "set", "bob", "--quota", "10M").stdout
    sync(laptop, timeout=120)
    assert attr(laptop.path, "isOverQuota") == "0" and attr(docs / "b.bin", "uploadingError") is None
    phone = mount_factory(new_key(stub, tmp_path, "bob", "phone"), "phone")
    for name in ("a.bin", "b.bin", "c.txt"):
        assert md5(phone / "Documents" / name) == md5(docs / name), name


def test_the_container_and_item_limits_refuse_what_adds_and_never_a_delete(stub, mount_factory, tmp_path):
    accounts(stub, "user", "add", "carol", "--containers", "1")
    key = new_key(stub, tmp_path, "carol", "laptop")
    laptop = mount_factory(key, "laptop")
    docs = laptop / "Documents"
    for i in range(3):
        (docs / f"f{i}.txt").write_text(f"file {i}\n")
    sync(laptop)
    # A second container is refused, by curl and by a mount of it, in one line.
    secret = open(key.token_file).read().strip()
    put = run("curl", "-s", "-w", " %{http_code}", "-X", "PUT", "-H", curl_auth(secret),
              stub.url + "/v1/containers/iCloud.com.example.other").stdout
    assert put.endswith(" 507") and "carol has 1 containers, at most 1" in put, put
    other = Mount(tmp_path / "other", key, "laptop", container="iCloud.com.example.other")
    refused = run(*other.args(), check=False, timeout=90)
    assert refused.returncode != 0 and "over quota" in refused.stderr, refused
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    # Items: the root, Documents and three files are carol's five; at five, a new file waits and a delete goes.
    assert usage_of(stub, "carol")["items"] == 5
    accounts(stub, "user", "set", "carol", "--items", "5")
    (docs / "new.txt").write_text("one too many\n")
    wait_until(lambda: "at most 5" in (attr(docs / "new.txt", "uploadingError") or ""), timeout=60,
               what="new.txt refused for the item limit")
    os.unlink(docs / "f0.txt")
    # The delete goes up though the create before it waits: only new.txt is left to upload.
    wait_until(lambda: attr(laptop.path, "pendingChanges") == "1", timeout=60, what="the delete on the remote")
    assert "f0.txt" in run(BIN, "trash", "list", laptop.path).stdout
    # Set back to the standard limit, the new file goes up.
    assert "1000000 items" in accounts(stub, "user", "set", "carol", "--items", "default").stdout
    sync(laptop, timeout=120)
    assert attr(docs / "new.txt", "isUploaded") == "1"


def test_limits_refuse_bad_values_in_one_line(stub):
    def refused(*words, code=2):
        p = accounts(stub, *words, check=False)
        assert p.returncode == code and len(p.stderr.strip().splitlines()) == 1 and p.stdout == "", p
        return p.stderr
    accounts(stub, "user", "add", "dave")
    assert "--quota takes bytes" in refused("user", "set", "dave", "--quota", "lots")
    assert "--quota takes bytes" in refused("user", "set", "dave", "--quota", "10%")
    assert "--items takes a count" in refused("user", "set", "dave", "--items", "-1")
    assert "needs --quota" in refused("user", "set", "dave")
    assert "go with remote user add or set" in refused("user", "list", "--quota", "1G")
    assert "no user" in refused("user", "set", "nobody", "--quota", "1G", code=1)


def test_limits_on_postgresql_hold_on_every_server(pg_url, stub_factory, tmp_path):
    # (Each of these servers keeps its blobs in its own folder: the storage quota is checked on the one holding them.)
    one = stub_factory("one", metadata=pg_url)
    two = stub_factory("two", metadata=pg_url)
    accounts(one, "user", "add", "erin", "--containers", "1", "--quota", "2K")
    key = open(new_key(one, tmp_path, "erin", "laptop").token_file).read().strip()

    def put(stub, path, *data):
        body = ["--data-binary", "@-", "-H", "Expect:"] if data else []
        return run("curl", "-s", "-w", " %{http_code}", "-X", "PUT", "-H", curl_auth(key), *body, stub.url + path,
                   input=data[0] if data else None).stdout
    assert put(one, "/v1/containers/iCloud.com.example.a").endswith(" 200")
    refused = put(two, "/v1/containers/iCloud.com.example.b")
    assert refused.endswith(" 507") and "erin has 1 containers, at most 1" in refused, refused
    blob = "x" * 1500
    sha = hashlib.sha256(blob.encode()).hexdigest()
    assert put(one, f"/v1/containers/iCloud.com.example.a/blobs/{sha}", blob).endswith(" 201")
    other = "y" * 1500
    refused = put(one, f"/v1/containers/iCloud.com.example.a/blobs/{hashlib.sha256(other.encode()).hexdigest()}", other)
    assert refused.endswith(" 507") and "stores 1.5 KiB of 2.0 KiB" in refused, refused
    assert usage_of(one, "erin")["storage"] == 1500


def test_a_blob_past_the_quota_is_refused_from_its_length_before_its_body_is_read(stub, tmp_path):
    # Before quotas a 64 GiB body was read in full (the server answered "100 Continue" and took it).
    accounts(stub, "user", "add", "fred", "--quota", "1G")
    key = open(new_key(stub, tmp_path, "fred", "laptop").token_file).read().strip()
    container = "/v1/containers/iCloud.com.example.fred"
    put = run("curl", "-s", "-w", " %{http_code}", "-X", "PUT", "-H", curl_auth(key), stub.url + container).stdout
    assert put.endswith(" 200"), put
    host, port = stub.url.removeprefix("http://").split(":")
    request = (f"PUT {container}/blobs/{'ab' * 32} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
               f"Content-Length: {64 << 30}\r\nExpect: 100-continue\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request)  # and not one byte of the body
        answer = s.recv(65536).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 507 "), answer
    assert "fred stores 0 B of 1.0 GiB and this needs 64.0 GiB more" in answer, answer
    assert usage_of(stub, "fred")["storage"] == 0
