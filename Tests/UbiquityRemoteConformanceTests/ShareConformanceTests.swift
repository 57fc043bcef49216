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

    /// Expects `body` to fail with the HTTP status `status` (404 as `.notFound`, 409 as `.conflict`, the rest
    /// as `.rejected`).
    private func expectStatus(_ status: Int, _ what: Comment? = nil, _ body: () throws -> Void) throws {
        do {
            try body()
            Issue.record("\(what.map { "\($0): " } ?? "")succeeded, expected \(status)")
        } catch let error as RemoteError {
            switch (status, error) {
            case (404, .notFound), (409, .conflict): break
            case (_, .rejected(let got, _)) where got == status: break
            default: Issue.record("\(what.map { "\($0): " } ?? "")\(error), expected \(status)")
            }
        }
    }
}
