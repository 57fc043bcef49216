"""Part 15: accounts and device keys. Users and keys are made with `ubiquityfs remote user|device`, devices mount
with their own key, and what each sees is read with ls, cat and getfattr."""
import os

from conftest import BIN, accounts, attr, curl_auth, new_key, run, sync, wait_until


def http_status(stub, key_file, method, path):
    """The status curl gets for one request with the key in `key_file`."""
    key = open(key_file).read().strip()
    return run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "-H", curl_auth(key),
               stub.url + path).stdout


def test_a_key_opens_its_own_users_containers_only(stub, mount_factory, tmp_path):
    for user in ("alice", "bob"):
        assert accounts(stub, "user", "add", user).stdout.strip() == f"added user {user}"
    alice = mount_factory(new_key(stub, tmp_path, "alice", "laptop"), "alice-laptop")
    (alice / "Documents" / "plans.txt").write_text("alice's plans\n")
    sync(alice)
    # Before Part 15 one token opened every container: bob's device would have listed plans.txt.
    bob = mount_factory(new_key(stub, tmp_path, "bob", "phone"), "bob-phone")
    assert os.listdir(bob / "Documents") == []
    (bob / "Documents" / "notes.txt").write_text("bob's notes\n")
    sync(bob)
    desk = mount_factory(new_key(stub, tmp_path, "alice", "desktop"), "alice-desktop")
    assert sorted(os.listdir(desk / "Documents")) == ["plans.txt"]
    assert (desk / "Documents" / "plans.txt").read_text() == "alice's plans\n"
    # The store's first user (the token of the single-token remote) sees neither.
    default = mount_factory(stub, "default")
    assert os.listdir(default / "Documents") == []
    listed = accounts(stub, "device", "list").stdout.splitlines()
    assert [" ".join(line.split()[:3]) for line in listed] == [
        "alice desktop active", "alice laptop active", "bob phone active", "default token active"]


def test_a_revoked_key_keeps_changes_queued_until_mounted_with_a_new_one(stub, mount_factory, tmp_path):
    accounts(stub, "user", "add", "alice")
    laptop = mount_factory(new_key(stub, tmp_path, "alice", "laptop"), "laptop")
    desk = mount_factory(new_key(stub, tmp_path, "alice", "desktop"), "desktop")
    (laptop / "Documents" / "before.txt").write_text("before\n")
    sync(laptop)
    assert accounts(stub, "device", "revoke", "alice", "laptop").returncode == 0
    (laptop / "Documents" / "after.txt").write_text("written after the revocation\n")
    # The mount says so: the root's uploadingError, and `ubiquityfs status`.
    wait_until(lambda: "refused" in (attr(laptop.path, "uploadingError") or ""), timeout=60,
               what="uploadingError naming the refusal")
    status = run(BIN, "status", laptop.path).stdout
    assert "refused" in status, status
    assert attr(laptop / "Documents" / "after.txt", "isUploaded") == "0"
    assert not (desk / "Documents" / "after.txt").exists()
    laptop.unmount()  # --force: a change waits to go up
    # Mounted again with the revoked key: refused, in one line, and nothing is lost.
    again = run(*laptop.args(), check=False, timeout=90)
    assert again.returncode != 0 and "refused" in again.stderr and len(again.stderr.strip().splitlines()) == 1, again
    laptop.stub = new_key(stub, tmp_path, "alice", "laptop2")
    laptop.mount()
    sync(laptop)
    wait_until(lambda: (desk / "Documents" / "after.txt").exists(), timeout=60, what="the queued change on the desktop")
    assert (desk / "Documents" / "after.txt").read_text() == "written after the revocation\n"
    assert attr(laptop.path, "uploadingError") is None


def test_account_commands_refuse_bad_input_in_one_line(stub, tmp_path):
    def refused(*words, code=1):
        p = accounts(stub, *words, check=False)
        assert p.returncode == code and len(p.stderr.strip().splitlines()) == 1 and p.stdout == "", p
        return p.stderr
    accounts(stub, "user", "add", "alice")
    assert "already" in refused("user", "add", "alice")
    assert "not a user name" in refused("user", "add", "../etc")
    assert "no user" in refused("device", "add", "nobody", "laptop", "--key-file", tmp_path / "k")
    assert not (tmp_path / "k").exists(), "no key file is left for a device that was not made"
    (tmp_path / "taken").write_text("something\n")
    assert "exists" in refused("device", "add", "alice", "laptop", "--key-file", tmp_path / "taken")
    assert (tmp_path / "taken").read_text() == "something\n"
    assert "--key-file" in refused("device", "add", "alice", "laptop", code=2)
    assert "no device" in refused("device", "revoke", "alice", "laptop")
    assert "no user" in refused("user", "remove", "bob")
    assert "remote user takes" in refused("user", "frob", code=2)


def test_accounts_on_postgresql_hold_across_servers(pg_url, stub_factory, tmp_path):
    one = stub_factory("one", metadata=pg_url)
    two = stub_factory("two", metadata=pg_url)
    accounts(one, "user", "add", "alice")
    accounts(one, "user", "add", "bob")
    alice = new_key(one, tmp_path, "alice", "laptop").token_file
    bob = new_key(one, tmp_path, "bob", "phone").token_file
    box = "/v1/containers/iCloud.com.example.box"
    assert http_status(one, alice, "PUT", box) == "200"
    assert http_status(two, alice, "GET", box + "/items/root") == "200", "a key made through one server opens the other"
    assert http_status(two, bob, "GET", box + "/items/root") == "404", "another user's container is absent"
    # Revoked through the database, the key is refused by both servers at its next request.
    accounts(two, "device", "revoke", "alice", "laptop")
    assert http_status(one, alice, "GET", box + "/items/root") == "401"
    assert http_status(two, alice, "GET", box + "/items/root") == "401"
    assert open(alice).read().strip() not in one.log_file.read_text() + two.log_file.read_text()


def test_a_users_files_travel_on_postgresql_and_s3(pg_url, seaweedfs, stub_factory, mount_factory, tmp_path):
    stub = stub_factory(metadata=pg_url, extra=seaweedfs.stub_args(f"accounts-{os.getpid()}"))
    accounts(stub, "user", "add", "alice")
    laptop = mount_factory(new_key(stub, tmp_path, "alice", "laptop"), "laptop")
    data = os.urandom(300_000)  # not inline in a batch: a blob of its own in the bucket
    (laptop / "Documents" / "photo.raw").write_bytes(data)
    sync(laptop)
    desk = mount_factory(new_key(stub, tmp_path, "alice", "desktop"), "desktop")
    assert (desk / "Documents" / "photo.raw").read_bytes() == data
