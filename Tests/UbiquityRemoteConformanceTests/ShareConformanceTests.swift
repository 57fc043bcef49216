// The records of shared folders (docs/WIRE.md "Shares"), run against each backend with users (the stub on
// every engine): the owner shares a folder inside Documents with another user, read-only or read-write, and
// stops; the participant lists it and leaves it; everything else is refused with its status, and nobody but
// the owner and the participant learns of a share.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
import UbiquityHTTP

@Suite(.serialized) struct ShareConformanceTests {
    /// Documents/Trip (with Documents/Trip/Day 1 and a file in it), Documents/Photos/Inner, Library and a file.
    private func folders(_ s: Subject) throws {
        for (id, parent, name) in [("trip", WireRules.documentsID, "Trip"), ("day1", "trip", "Day 1"),
                                   ("photos", WireRules.documentsID, "Photos"), ("inner", "photos", "Inner"),
                                   ("lib", WireRules.rootID, "Library")] {
            _ = try s.remote.putItem(directory(id, in: parent, name: name), ifMatch: nil)
        }
        try s.makeFile("plan", "the plan", in: "trip", name: "plan.txt")
    }

    /// A fresh remote with the folders above, its owner's client (the remote's first user, `default`) and bob's
    /// and carol's, users made for the test.
    private func people(_ backend: Backend) throws
        -> (s: Subject, alice: HTTPRemoteClient, bob: HTTPRemoteClient, carol: HTTPRemoteClient) {
        let s = try backend.make(nil)
        try folders(s)
        let newUser = try #require(s.newUser)
        return (s, try #require(s.remote as? HTTPRemoteClient), try newUser("bob"), try newUser("carol"))
    }

    @Test(arguments: Backend.withUsers) func theOwnerSharesAndStopsAndOnlyTheTwoOfThemSeeIt(backend: Backend) throws {
        let (s, alice, bob, carol) = try people(backend)
        defer { withExtendedLifetime(s) {} } // the remote lives as long as its subject

        let share = try alice.addShare(folder: "trip", user: "bob", readOnly: true)
        #expect(share.container == "iCloud.com.example.conformance" && share.folder == "trip" && share.name == "Trip")
        #expect(share.owner == "default" && share.user == "bob" && share.readOnly)
        #expect(WireShareRules.isValidID(share.id))
        #expect(try alice.shares() == [share])
        #expect(try bob.shares() == [share], "the participant sees the share, with the folder's name only")
        #expect(try carol.shares() == [], "nobody else does")

        // Shared again with the same user: the same share, its permission changed.
        let again = try alice.addShare(folder: "trip", user: "bob", readOnly: false)
        #expect(again.id == share.id && !again.readOnly)
        #expect(try bob.shares().map(\.readOnly) == [false])

        // A second participant of the same folder is a share of its own.
        let withCarol = try alice.addShare(folder: "trip", user: "carol", readOnly: true)
        #expect(withCarol.id != share.id)
        #expect(try alice.shares().map(\.user) == ["bob", "carol"])
        #expect(try carol.shares().map(\.id) == [withCarol.id])

        try alice.removeShare(folder: "trip", user: "bob")
        #expect(try bob.shares() == [])
        #expect(try alice.shares().map(\.user) == ["carol"])
        #expect(throws: RemoteError.self) { try alice.removeShare(folder: "trip", user: "bob") }
    }

    @Test(arguments: Backend.withUsers) func aParticipantLeavesAndCannotShareTheOwnersFolder(backend: Backend) throws {
        let (s, alice, bob, carol) = try people(backend)
        defer { withExtendedLifetime(s) {} } // the remote lives as long as its subject
        let share = try alice.addShare(folder: "trip", user: "bob", readOnly: false)

        // Bob's calls on the container id name his own container: the owner's folder is not there.
        try expectStatus(404) { _ = try bob.addShare(folder: "trip", user: "carol", readOnly: false) }
        _ = try bob.openContainer()
        try expectStatus(404) { _ = try bob.addShare(folder: "trip", user: "carol", readOnly: false) }
        try expectStatus(404) { try bob.removeShare(folder: "trip", user: "bob") }
        // Only the participant leaves, and only once.
        try expectStatus(404) { try carol.leaveShare(id: share.id) }
        try expectStatus(404) { try alice.leaveShare(id: share.id) }
        try bob.leaveShare(id: share.id)
        #expect(try bob.shares() == [] && alice.shares() == [])
        try expectStatus(404) { try bob.leaveShare(id: share.id) }
        try expectStatus(400) { try bob.leaveShare(id: "not-a-share") }
    }

    @Test(arguments: Backend.withUsers) func whatCannotBeSharedIsRefusedAndNothingIsStored(backend: Backend) throws {
        let (s, alice, _, _) = try people(backend)
        defer { withExtendedLifetime(s) {} } // the remote lives as long as its subject
        try expectStatus(400, "its owner") { _ = try alice.addShare(folder: "trip", user: "default", readOnly: false) }
        try expectStatus(404, "no such user") { _ = try alice.addShare(folder: "trip", user: "dave", readOnly: false) }
        try expectStatus(400, "a bad name") { _ = try alice.addShare(folder: "trip", user: "bob/../x", readOnly: false) }
        try expectStatus(404, "no such folder") { _ = try alice.addShare(folder: "nothere", user: "bob", readOnly: false) }
        try expectStatus(400, "a bad id") { _ = try alice.addShare(folder: "../trip", user: "bob", readOnly: false) }
        try expectStatus(400, "a file") { _ = try alice.addShare(folder: "plan", user: "bob", readOnly: false) }
        try expectStatus(400, "Documents itself") {
            _ = try alice.addShare(folder: WireRules.documentsID, user: "bob", readOnly: false)
        }
        try expectStatus(400, "outside Documents") { _ = try alice.addShare(folder: "lib", user: "bob", readOnly: false) }
        try expectStatus(400, "the root") { _ = try alice.addShare(folder: WireRules.rootID, user: "bob", readOnly: false) }
        _ = try s.remote.deleteItem("inner", ifMatch: try s.remote.item("inner").version)
        try expectStatus(404, "a deleted folder") { _ = try alice.addShare(folder: "inner", user: "bob", readOnly: false) }
        #expect(try alice.shares() == [], "nothing refused was stored")

        // A share inside a share, either way round, is refused (docs/WIRE.md says why).
        _ = try alice.addShare(folder: "trip", user: "bob", readOnly: false)
        try expectStatus(409, "below a shared folder") { _ = try alice.addShare(folder: "day1", user: "bob", readOnly: false) }
        _ = try alice.addShare(folder: "photos", user: "bob", readOnly: true)
        _ = try s.remote.putItem(directory("inner2", in: "photos", name: "Inner 2"), ifMatch: nil)
        try expectStatus(409, "below a shared folder") { _ = try alice.addShare(folder: "inner2", user: "bob", readOnly: false) }
        try alice.removeShare(folder: "trip", user: "bob")
        _ = try alice.addShare(folder: "day1", user: "bob", readOnly: false)
        try expectStatus(409, "above a shared folder") { _ = try alice.addShare(folder: "trip", user: "bob", readOnly: false) }
        #expect(Set(try alice.shares().map(\.folder)) == ["photos", "day1"])
    }

    // MARK: the participant's view (docs/SHARING.md): the folder as a container of its own, the folder its root

    @Test(arguments: Backend.withUsers) func theParticipantsViewHoldsTheFolderAndNothingElse(backend: Backend) throws {
        let (s, alice, bob, carol) = try people(backend)
        defer { withExtendedLifetime(s) {} } // the remote lives as long as its subject
        _ = try s.makeFile("secret", "the owner's alone", in: "photos", name: "secret.txt")
        _ = try s.makeFile("note", "a note of day 1", in: "day1", name: "note.txt")
        let share = try alice.addShare(folder: "trip", user: "bob", readOnly: true)
        let view = bob.view(of: share)
        #expect(try view.openContainer().token == alice.changes(since: nil, waitSeconds: 0).token,
                "a view's positions are the owner's container's")

        let items = try view.changes(since: nil, waitSeconds: 0).items
        #expect(Set(items.map(\.id)) == ["day1", "plan", "note"], "the folder's subtree, without the folder")
        #expect(items.first { $0.id == "plan" }?.parent == WireRules.rootID, "the folder is the view's root")
        #expect(items.first { $0.id == "note" }?.parent == "day1")
        #expect(try view.item("plan").name == "plan.txt")
        for outside in ["secret", "photos", "lib", "trip", WireRules.documentsID, WireRules.rootID] {
            try expectStatus(404, "item \(outside)") { _ = try view.item(outside) }
        }

        // Blobs: what an item inside names; not one the remote holds for an item outside.
        #expect(try s.download(sha256Hex(Array("the plan".utf8)), through: view) == Array("the plan".utf8))
        #expect(try view.hasBlob(sha256: sha256Hex(Array("the plan".utf8))))
        let secret = sha256Hex(Array("the owner's alone".utf8))
        #expect(try !view.hasBlob(sha256: secret))
        try expectStatus(404, "a blob outside") { _ = try s.download(secret, through: view) }

        // Only the participant reaches the view.
        try expectStatus(404, "another user") { _ = try carol.view(of: share).changes(since: nil, waitSeconds: 0) }
        try expectStatus(404, "the owner, by the participant's share") { _ = try alice.view(of: share).item("plan") }
        var unknown = share
        unknown.id = String(repeating: "0", count: share.id.count)
        try expectStatus(404, "no such share") { _ = try bob.view(of: unknown).item("plan") }

        // Once the share is gone, so is the view.
        try alice.removeShare(folder: "trip", user: "bob")
        try expectStatus(404, "a removed share") { _ = try view.changes(since: nil, waitSeconds: 0) }
    }

    /// The owner moves a folder in (what is below it comes with it), a folder out (it and what was below it
    /// go, as gone), and changes things outside (nothing of them shows).
    @Test(arguments: Backend.withUsers) func theViewsFeedFollowsMovesInAndOut(backend: Backend) throws {
        let (s, alice, bob, _) = try people(backend)
        defer { withExtendedLifetime(s) {} } // the remote lives as long as its subject
        _ = try s.makeFile("deep", "below inner", in: "inner", name: "deep.txt")
        _ = try s.makeFile("note", "a note of day 1", in: "day1", name: "note.txt")
        let view = bob.view(of: try alice.addShare(folder: "trip", user: "bob", readOnly: false))
        let start = try view.openContainer().token

        try move("inner", to: "trip", s)
        try move("day1", to: "photos", s)
        _ = try s.makeFile("other", "made outside", in: "photos", name: "other.txt")
        let page = try view.changes(since: start, waitSeconds: 0)
        #expect(page.token == (try alice.changes(since: nil, waitSeconds: 0).token))
        #expect(Set(page.items.filter { !$0.deleted }.map(\.id)) == ["inner", "deep"])
        #expect(page.items.first { $0.id == "inner" }?.parent == WireRules.rootID)
        let gone = page.items.filter(\.deleted)
        #expect(Set(gone.map(\.id)) == ["day1", "note"], "what left, and what was below it")
        #expect(gone.allSatisfy { $0.sha256.isEmpty && $0.size == 0 }, "of what left, only that it left")
        #expect(gone.first { $0.id == "day1" }?.name == "Day 1", "named as the view knew it")

        // Changes outside only: the position moves on, nothing shows.
        _ = try s.makeFile("more", "outside again", in: "photos", name: "more.txt")
        let quiet = try view.changes(since: page.token, waitSeconds: 0)
        #expect(quiet.items.isEmpty && quiet.token != page.token)
    }

    /// Every write through a view is refused before it reaches the owner's container: 403 when read-only, 501 on
    /// a read-write share until writing into a shared folder is built.
    @Test(arguments: Backend.withUsers) func writesThroughAViewAreRefused(backend: Backend) throws {
        let (s, alice, bob, carol) = try people(backend)
        defer { withExtendedLifetime(s) {} } // the remote lives as long as its subject
        let readOnly = bob.view(of: try alice.addShare(folder: "trip", user: "bob", readOnly: true))
        let readWrite = carol.view(of: try alice.addShare(folder: "trip", user: "carol", readOnly: false))
        let before = try alice.changes(since: nil, waitSeconds: 0).token
        let plan = try readOnly.item("plan")
        let bytes = Array("written through a view".utf8)
        for (view, status) in [(readOnly, 403), (readWrite, 501)] {
            var edited = plan
            edited.name = "renamed.txt"
            try expectStatus(status, "a put") { _ = try view.putItem(edited, ifMatch: plan.version, change: nil) }
            try expectStatus(status, "a create") {
                _ = try view.putItem(file("new", in: WireRules.rootID, bytes: bytes), ifMatch: nil, change: nil)
            }
            try expectStatus(status, "a delete") { _ = try view.deleteItem("plan", ifMatch: plan.version, change: nil) }
            try expectStatus(status, "a blob") { try view.upload(bytes, dir: s.dir) }
            try expectStatus(status, "a batch") {
                _ = try view.batch([.put(edited, ifMatch: plan.version)])
            }
            try expectStatus(status, "a restore") { _ = try view.restore(ids: ["plan"], device: "x") }
        }
        #expect(try alice.changes(since: nil, waitSeconds: 0).token == before, "nothing was written")
        #expect(try alice.item("plan").name == "plan.txt")
    }

    private func move(_ id: String, to parent: String, _ s: Subject) throws {
        var item = try s.remote.item(id)
        item.parent = parent
        _ = try s.remote.putItem(item, ifMatch: item.version)
    }


    /// Expects `body` to fail with the HTTP status `status` (404 as `.notFound`, 409 as `.conflict`, 5xx as
    /// `.server`, the rest as `.rejected`).
    private func expectStatus(_ status: Int, _ what: Comment? = nil, _ body: () throws -> Void) throws {
        do {
            try body()
            Issue.record("\(what.map { "\($0): " } ?? "")succeeded, expected \(status)")
        } catch let error as RemoteError {
            switch (status, error) {
            case (404, .notFound), (409, .conflict): break
            case (_, .rejected(let got, _)) where got == status: break
            case (_, .server(let got, _)) where got == status: break
            default: Issue.record("\(what.map { "\($0): " } ?? "")\(error), expected \(status)")
            }
        }
    }
}
