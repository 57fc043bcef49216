"""Part 24, the owner's side: `ubiquityfs share add|remove|list` through the mount, the share attributes on a
shared folder and on everything in it, and each refusal in one plain line that changes nothing. (A participant's
view of a shared folder in their own mount is planned: docs/SHARING.md.)"""
import json

from conftest import BIN, accounts, attr, new_key, run, sync


def share(*words, check=True):
    return run(BIN, "share", *words, check=check)


def share_attrs(path):
    return {name: attr(path, name) for name in ("isShared", "sharedRole", "sharedPermissions", "sharedOwner")}


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
