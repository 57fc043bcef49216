"""Part 24: the owner's side through the mount (`ubiquityfs share add|remove|list`, the share attributes on a
shared folder and on everything in it, each refusal in one plain line that changes nothing), and the
participant's view on the wire, driven with curl. (The view in a participant's own mount is planned:
docs/SHARING.md.)"""
import json
import os
import stat

from conftest import BIN, CONTAINER, accounts, attr, curl_auth, new_key, run, sync, wait_until


def share(*words, check=True):
    return run(BIN, "share", *words, check=check)


def share_attrs(path):
    return {name: attr(path, name) for name in ("isShared", "sharedRole", "sharedPermissions", "sharedOwner")}


def owner_with_a_project(stub, mount_factory, tmp_path, *participants):
    """Users alice and `participants`; alice's mount, with Documents/project/notes.txt uploaded."""
    for user in ("alice", *participants):
        accounts(stub, "user", "add", user)
    alice = mount_factory(new_key(stub, tmp_path, "alice", "laptop"), "alice-laptop")
    project = alice / "Documents" / "project"
    project.mkdir()
    (project / "notes.txt").write_text("notes\n")
    sync(alice)
    return alice, project


def test_a_shared_folder_says_so_on_everything_in_it_and_both_users_list_it(stub, mount_factory, tmp_path):
    for user in ("alice", "bob"):
        accounts(stub, "user", "add", user)
    alice = mount_factory(new_key(stub, tmp_path, "alice", "laptop"), "alice-laptop")
    bob = mount_factory(new_key(stub, tmp_path, "bob", "laptop"), "bob-laptop")
    docs = alice / "Documents"
    project = docs / "project"
    (project / "drafts").mkdir(parents=True)
    (project / "drafts" / "plan.txt").write_text("the plan\n")
    (docs / "private.txt").write_text("mine alone\n")
    sync(alice)
    assert share("list", alice.path).stdout == "nothing shared\n"

    assert share("add", project, "bob").stdout == "shared Documents/project with bob (read-write)\n"
    owner = {"isShared": "1", "sharedRole": "owner", "sharedPermissions": "readWrite", "sharedOwner": "alice"}
    for path in (project, project / "drafts", project / "drafts" / "plan.txt"):
        assert share_attrs(path) == owner, path
    assert share_attrs(docs / "private.txt") == dict.fromkeys(owner), "outside the folder: no share attributes"
    listed = run("getfattr", "-d", "-m", "user.ubiquity.shared", "--absolute-names", project).stdout
    assert 'user.ubiquity.sharedOwner="alice"' in listed, listed

    assert share("list", alice.path).stdout == "Documents/project\tshared with bob\tread-write\n"
    assert share("list", bob.path).stdout == "alice's project\tshared with you\tread-write\n"
    # Again, read-only: the same share changes how.
    assert share("add", project, "bob", "--read-only").stdout == "shared Documents/project with bob (read-only)\n"
    rows = json.loads(share("list", "--json", project).stdout)
    assert [(r["path"], r["user"], r["readOnly"], r["role"]) for r in rows] == [("Documents/project", "bob", True, "owner")]
    rows = json.loads(share("list", "--json", bob.path).stdout)
    assert [(r["owner"], r["name"], r["readOnly"], r["role"]) for r in rows] == [("alice", "project", True, "participant")]
    assert "path" not in rows[0], "a participant learns the folder's name only"
    assert share("list", docs / "private.txt").stdout == "nothing shared\n", "the shares of that path only"

    # `cp -a` copies the attributes along: written, they change nothing (the copy outside is not shared).
    run("cp", "-a", project / "drafts" / "plan.txt", docs / "copy.txt")
    assert (docs / "copy.txt").read_text() == "the plan\n"
    assert share_attrs(docs / "copy.txt") == dict.fromkeys(owner)

    assert share("remove", project, "bob").stdout == "Documents/project is no longer shared with bob\n"
    assert share_attrs(project / "drafts" / "plan.txt") == dict.fromkeys(owner)
    assert share("list", bob.path).stdout == "nothing shared\n"
    assert share("list", alice.path).stdout == "nothing shared\n"


def test_each_refusal_is_one_plain_line_and_changes_nothing(stub, mount_factory, tmp_path):
    for user in ("alice", "bob"):
        accounts(stub, "user", "add", user)
    alice = mount_factory(new_key(stub, tmp_path, "alice", "laptop"), "alice-laptop")
    docs = alice / "Documents"
    (docs / "team" / "inner").mkdir(parents=True)
    (docs / "note.txt").write_text("a file\n")
    sync(alice)
    assert share("add", docs / "team", "bob").returncode == 0

    def refused(*words):
        p = share(*words, check=False)
        assert p.returncode == 1 and p.stdout == "", p
        assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith("ubiquityfs: cannot "), p.stderr
        return p.stderr

    assert "only a folder is shared" in refused("add", docs / "note.txt", "bob")
    assert "only a folder inside Documents is shared" in refused("add", docs, "bob")
    assert "no such user: nobody" in refused("add", docs / "team" / "inner", "nobody")
    assert "a folder is not shared with its owner" in refused("add", docs / "team", "alice")
    assert "a folder above it is shared already" in refused("add", docs / "team" / "inner", "bob")
    assert "not shared with bob" in refused("remove", docs / "team" / "inner", "bob")
    assert "no such folder" in refused("add", docs / "missing", "bob")
    # The refusal's reason stays on the folder until its next share command.
    assert attr(docs / "team" / "inner", "shareError") == "that folder is not shared with bob"
    assert share("list", alice.path).stdout == "Documents/team\tshared with bob\tread-write\n", "nothing changed"
    assert attr(docs / "team" / "inner", "sharedOwner") == "alice", "inside the shared folder"


def curl(key, method, url, *extra):
    """An HTTP request with the device key `key` (a file); answers (status, body)."""
    token = open(key).read().strip()
    p = run("curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H", curl_auth(token), *extra, url,
            check=False)
    body, _, status = p.stdout.rpartition("\n")
    return int(status), body


def test_a_participant_reads_the_shared_folder_alone_and_writes_by_no_route(stub, mount_factory, tmp_path):
    """The participant's view on the wire (docs/WIRE.md "A share's view"), driven with curl as an attacker
    holding bob's key would: the folder's items and contents, nothing of the owner's other files, no write by
    any route of a read-only share; other users (the owner too) do not reach it."""
    for user in ("alice", "bob", "carol"):
        accounts(stub, "user", "add", user)
    keys = {u: new_key(stub, tmp_path, u, "laptop").token_file for u in ("bob", "carol")}
    alice_keyed = new_key(stub, tmp_path, "alice", "laptop")
    alice = mount_factory(alice_keyed, "alice-laptop")
    project = alice / "Documents" / "project"
    project.mkdir()
    (project / "plan.txt").write_text("the plan\n")
    (alice / "Documents" / "private.txt").write_text("mine alone\n")
    sync(alice)
    share("add", project, "bob", "--read-only")

    status, body = curl(keys["bob"], "GET", f"{stub.url}/v1/shares")
    assert status == 200, body
    view = f"{stub.url}/v1/shares/{json.loads(body)['shares'][0]['id']}"
    status, body = curl(keys["bob"], "GET", f"{view}/changes")
    assert status == 200, body
    items = json.loads(body)["items"]
    assert [(i["name"], i["parent"]) for i in items] == [("plan.txt", "root")], items
    plan = items[0]
    status, body = curl(keys["bob"], "GET", f"{view}/blobs/{plan['sha256']}")
    assert (status, body) == (200, "the plan\n"), "the content of a file inside"

    # The owner's other file: its item and its content stay out of reach, though the remote holds both.
    owner_key = alice_keyed.token_file
    status, body = curl(owner_key, "GET", f"{stub.url}/v1/containers/{CONTAINER}/changes")
    private = next(i for i in json.loads(body)["items"] if i["name"] == "private.txt")
    assert curl(keys["bob"], "GET", f"{view}/items/{private['id']}")[0] == 404
    assert curl(keys["bob"], "GET", f"{view}/blobs/{private['sha256']}")[0] == 404
    assert "mine alone" not in curl(keys["bob"], "GET", f"{view}/changes")[1]

    # No write by any route; nothing reaches the owner's container.
    before = curl(owner_key, "GET", f"{stub.url}/v1/containers/{CONTAINER}/changes")[1]
    item = json.dumps(dict(plan, name="mine now.txt"))
    json_body = ["-H", "Content-Type: application/json"]
    for method, path, extra in [
            ("PUT", f"items/{plan['id']}", [*json_body, "-d", item]),
            ("DELETE", f"items/{plan['id']}", ["-H", f"If-Match: {plan['version']}"]),
            ("PUT", "blobs/" + "0" * 64, ["--data-binary", "x" * 1000]),
            ("POST", "batch", [*json_body, "-d", json.dumps({"entries": [{"op": "put", "id": plan["id"], "item": plan}]})]),
            ("POST", "trash/restore", [*json_body, "-d", '{"ids": [], "device": "x"}']),
            ("POST", "rewind", [*json_body, "-d", '{"folder": "documents", "to": 0}']),
            ("PUT", "kv/key", [*json_body, "-d", '{"key": "key", "value": "x"}']),
            ("PUT", "manifests/" + "0" * 64, [*json_body, "-d", "{}"]),
            ("POST", "chunks/missing", [*json_body, "-d", '{"chunks": []}'])]:
        status, body = curl(keys["bob"], method, f"{view}/{path}", *extra)
        assert status == 403 and "read-only" in body, (method, path, status, body)
    assert curl(owner_key, "GET", f"{stub.url}/v1/containers/{CONTAINER}/changes")[1] == before
    assert (project / "plan.txt").read_text() == "the plan\n"

    # Only the participant: not another user, not the owner.
    assert curl(keys["carol"], "GET", f"{view}/changes")[0] == 404
    assert curl(owner_key, "GET", f"{view}/changes")[0] == 404
    assert curl(keys["carol"], "PUT", f"{view}/items/{plan['id']}", *json_body, "-d", item)[0] == 404


def test_a_participant_mounts_a_folder_shared_read_only_and_changes_nothing(stub, mount_factory, tmp_path):
    """`mount --share OWNER/NAME`: the folder is the mount's root, with its files downloaded on open, the
    participant's attributes on everything, no write bits, and every change refused with EACCES at once
    (nothing queued); the owner's later changes arrive; nothing of the owner's other files shows."""
    for user in ("alice", "bob"):
        accounts(stub, "user", "add", user)
    alice = mount_factory(new_key(stub, tmp_path, "alice", "laptop"), "alice-laptop")
    project = alice / "Documents" / "project"
    (project / "drafts").mkdir(parents=True)
    (project / "drafts" / "plan.txt").write_text("the plan\n")
    (project / "notes.txt").write_text("notes\n")
    (alice / "Documents" / "private.txt").write_text("mine alone\n")
    sync(alice)
    share("add", project, "bob", "--read-only")

    bob = mount_factory(new_key(stub, tmp_path, "bob", "laptop"), "bob-laptop", extra=["--share", "alice/project"])
    assert sorted(os.listdir(bob.path)) == [".versions", "drafts", "notes.txt"], "no Recently Deleted: the owner's"
    assert (bob.path / "drafts" / "plan.txt").read_text() == "the plan\n"
    participant = {"isShared": "1", "sharedRole": "participant", "sharedPermissions": "readOnly", "sharedOwner": "alice"}
    for path in (bob.path / "notes.txt", bob.path / "drafts", bob.path / "drafts" / "plan.txt"):
        assert share_attrs(path) == participant, path
    assert stat.S_IMODE(os.stat(bob.path / "notes.txt").st_mode) & 0o222 == 0
    assert stat.S_IMODE(os.stat(bob.path / "drafts").st_mode) & 0o222 == 0

    # Every change is refused at once, as "Permission denied", and nothing waits to go up.
    refusals = [
        ["sh", "-c", f"echo more >> '{bob.path / 'notes.txt'}'"],
        ["sh", "-c", f"echo new > '{bob.path / 'new.txt'}'"],
        ["touch", bob.path / "notes.txt"],
        ["mkdir", bob.path / "more"],
        ["rm", "-f", bob.path / "notes.txt"],
        ["mv", bob.path / "notes.txt", bob.path / "drafts" / "moved.txt"],
        ["truncate", "-s", "0", bob.path / "drafts" / "plan.txt"],
        ["ln", "-s", "notes.txt", bob.path / "link"],
        ["setfattr", "-n", "user.mine", "-v", "x", bob.path / "notes.txt"],
    ]
    for words in refusals:
        p = run(*words, check=False)
        assert p.returncode != 0 and "Permission denied" in p.stderr, (words, p.stderr)
    assert attr(bob.path, "pendingChanges") == "0"
    assert sorted(os.listdir(bob.path)) == [".versions", "drafts", "notes.txt"]
    assert (bob.path / "notes.txt").read_text() == "notes\n"
    # The cache is the participant's own: a file is evicted and downloaded again.
    run("setfattr", "-n", "user.ubiquity.evict", bob.path / "notes.txt")
    assert attr(bob.path / "notes.txt", "downloadingStatus") == "notDownloaded"
    assert (bob.path / "notes.txt").read_text() == "notes\n"

    # The owner's changes arrive; what the owner has outside the folder never does.
    (project / "notes.txt").write_text("notes, edited by alice\n")
    (project / "drafts" / "second.txt").write_text("a second draft\n")
    run("mv", project / "drafts" / "plan.txt", alice / "Documents" / "plan.txt")
    sync(alice)
    wait_until(lambda: sorted(os.listdir(bob.path / "drafts")) == ["second.txt"], what="the drafts on bob's view")
    wait_until(lambda: (bob.path / "notes.txt").read_text() == "notes, edited by alice\n", what="the edit")
    assert not any("private" in name or "plan" in name for _, _, names in os.walk(bob.path) for name in names)


def test_a_folder_shared_read_write_mounts_read_only_until_writes_are_built(stub, mount_factory, tmp_path):
    """Writing into a shared folder is not built yet (the remote answers 501): a read-write participant's
    mount says readWrite, reads, and refuses changes as a read-only file system, queueing nothing that could
    never go up."""
    alice, project = owner_with_a_project(stub, mount_factory, tmp_path, "bob")
    share("add", project, "bob")
    bob = mount_factory(new_key(stub, tmp_path, "bob", "laptop"), "bob-laptop", extra=["--share", "alice/project"])
    assert share_attrs(bob.path / "notes.txt") == {"isShared": "1", "sharedRole": "participant",
                                                   "sharedPermissions": "readWrite", "sharedOwner": "alice"}
    assert (bob.path / "notes.txt").read_text() == "notes\n"
    p = run("sh", "-c", f"echo more >> '{bob.path / 'notes.txt'}'", check=False)
    assert p.returncode != 0 and "Read-only file system" in p.stderr, p.stderr
    p = run("mkdir", bob.path / "more", check=False)
    assert p.returncode != 0 and "Read-only file system" in p.stderr, p.stderr
    assert attr(bob.path, "pendingChanges") == "0"


def test_mount_share_of_nothing_shared_fails_plainly(stub, mount_factory, tmp_path):
    for user in ("alice", "bob"):
        accounts(stub, "user", "add", user)
    bob = mount_factory(new_key(stub, tmp_path, "bob", "laptop"), "bob-laptop", extra=["--share", "alice/nothing"],
                        mount=False)
    p = run(*bob.args(), check=False, timeout=60)
    assert p.returncode == 1 and not bob.is_mounted()
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing named 'alice/nothing' is shared with you" in lines[0], p.stderr
    p = run(BIN, "mount", tmp_path / "x", "--share", "alice/nothing", check=False)
    assert p.returncode == 2 and "--share needs --remote" in p.stderr, p.stderr


def test_a_share_that_ends_takes_its_mount_with_it(stub, mount_factory, tmp_path):
    """The owner stops sharing: the participant's mount of the folder ends within seconds (its long poll is
    answered at once), and its store keeps none of the owner's files. A participant leaves with `share leave`:
    the same, and the owner no longer lists them."""
    alice, project = owner_with_a_project(stub, mount_factory, tmp_path, "bob", "carol")
    share("add", project, "bob", "--read-only")
    share("add", project, "carol", "--read-only")
    bob = mount_factory(new_key(stub, tmp_path, "bob", "laptop"), "bob-laptop", extra=["--share", "alice/project"])
    carol = mount_factory(new_key(stub, tmp_path, "carol", "laptop"), "carol-laptop", extra=["--share", "alice/project"])
    for m in (bob, carol):
        assert (m.path / "notes.txt").read_text() == "notes\n"
        assert os.listdir(m.store / "content"), "the participant's copy is local"

    assert share("remove", project, "bob").stdout == "Documents/project is no longer shared with bob\n"
    wait_until(lambda: not bob.is_mounted(), timeout=20, what="bob's mount of the share to end")
    # The daemon empties the store once the mount is down.
    wait_until(lambda: not (bob.store / "content").exists() and not (bob.store / "state.sqlite").exists(),
               timeout=20, what="bob's store emptied")

    p = share("leave", carol.path)
    assert p.stdout == f"left the folder alice shared with you; {carol.path} is unmounted\n"
    assert not carol.is_mounted()
    wait_until(lambda: not (carol.store / "content").exists(), timeout=20, what="carol's store emptied")
    assert share("list", alice.path).stdout == "nothing shared\n"
    assert (project / "notes.txt").read_text() == "notes\n", "the owner loses nothing"
    p = share("leave", alice.path, check=False)
    assert p.returncode == 1 and "not the mount of a folder shared with you" in p.stderr, p.stderr


def test_a_participant_removed_from_the_remote_is_out_at_once(stub, mount_factory, tmp_path):
    alice, project = owner_with_a_project(stub, mount_factory, tmp_path, "bob")
    share("add", project, "bob", "--read-only")
    bob = mount_factory(new_key(stub, tmp_path, "bob", "laptop"), "bob-laptop", extra=["--share", "alice/project"])
    assert (bob.path / "notes.txt").read_text() == "notes\n"
    accounts(stub, "user", "remove", "bob")
    wait_until(lambda: not bob.is_mounted(), timeout=30, what="the removed user's mount of the share to end")
    wait_until(lambda: not (bob.store / "content").exists(), timeout=20, what="bob's store emptied")
