// The rewind route on the stub itself (docs/HISTORY.md "Rewind"): a rewind that needs a content the store no
// longer holds is refused whole, naming the path, for the dry run too; malformed bodies, a body too large, a
// wrong method and other users' keys are refused with a plain line; and the planner leaves xattrs alone where a
// kept version does not know them (rows stored before the history kept xattrs).
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityStub

@Suite struct RewindStubTests {
    private let rewind = "/v1/containers/\(cid)/rewind"

    /// A file `name` in Documents, its blob uploaded first.
    @discardableResult
    private func makeFile(_ f: Fixture, _ id: String, _ name: String, _ text: String) throws -> WireItem {
        #expect(try f.putBlob(Array(text.utf8)).status < 300)
        let answer = try f.putItem(file(id, name, Array(text.utf8)))
        #expect(answer.status == 200, "\(answer.text)")
        return try answer.decode(WireItem.self)
    }

    private func overwrite(_ f: Fixture, _ item: WireItem, _ text: String) throws {
        #expect(try f.putBlob(Array(text.utf8)).status < 300)
        var next = item
        next.sha256 = sha256Hex(Array(text.utf8))
        next.size = Int64(text.utf8.count)
        #expect(try f.putItem(next, ifMatch: item.version).status == 200)
    }

    /// A time after everything stored so far and before everything stored next.
    private func moment() -> Int64 {
        usleep(2000)
        defer { usleep(2000) }
        return nowNanoseconds()
    }

    @Test func aContentNoLongerStoredRefusesTheWholeRewind() throws {
        let f = try Fixture()
        let start = try f.openContainer().token
        let a = try makeFile(f, "a1", "a.txt", "the old a")
        let b = try makeFile(f, "b1", "b.txt", "the old b")
        let to = moment()
        try overwrite(f, a, "garbage a")
        try overwrite(f, b, "garbage b")
        try f.server.store.blobs.delete(cid, a.sha256) // lost by the store, though a kept version names it
        let token = try f.call("GET", "/v1/containers/\(cid)/changes?since=\(start)").decode(WireChanges.self).token
        for dryRun in [true, false] {
            let answer = try f.call("POST", rewind, json: WireRewindRequest(folder: WireRules.documentsID, to: to,
                                                                             dryRun: dryRun, device: "laptop"))
            #expect(answer.status == 409 && (answer.json["error"] as? String ?? "").contains("Documents/a.txt"),
                    "\(answer.text)")
        }
        let after = try f.call("GET", "/v1/containers/\(cid)/changes?since=\(token)").decode(WireChanges.self)
        #expect(after.items.isEmpty && after.token == token, "nothing written, b.txt neither")
    }

    @Test func malformedRequestsAreRefusedWithAPlainLine() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let refusals: [(String, Int)] = [
            ("{not json", 400),
            (#"{"folder": "documents", "to": 1, "dryRun": true}"#, 400), // no device
            (#"{"folder": "documents", "to": "1", "dryRun": true, "device": "x"}"#, 400),
            (#"{"folder": "docu ments", "to": 1, "dryRun": true, "device": "x"}"#, 400),
            (#"{"folder": "documents", "to": 1, "dryRun": true, "device": "a\u0000b"}"#, 400),
            (#"{"folder": "documents", "to": 9223372036854775807, "dryRun": true, "device": "x"}"#, 400),
            (#"{"folder": "documents", "to": -1, "dryRun": false, "device": "x"}"#, 400),
            (#"{"folder": "root", "to": 1, "dryRun": false, "device": "x"}"#, 400),
            (#"{"folder": "nobody", "to": 1, "dryRun": false, "device": "x"}"#, 404),
        ]
        for (body, expected) in refusals {
            let answer = try f.call("POST", rewind, body: Array(body.utf8))
            #expect(answer.status == expected, "\(body): \(answer.text)")
            let message = answer.json["error"] as? String ?? ""
            #expect(!message.isEmpty && !message.contains("\n") && answer.headers["x-error"] == message)
        }
        #expect(try f.call("POST", rewind, body: [UInt8](repeating: 0x20, count: 17 << 10)).status == 413)
        #expect(try f.call("GET", rewind).status == 405)
        #expect(try f.call("POST", "/v1/containers/iCloud.com.example.absent/rewind",
                           json: WireRewindRequest(folder: "documents", to: 1, dryRun: true, device: "x")).status == 404)
    }

    @Test func aKeyRewindsItsOwnUsersContainersOnly() throws {
        let f = try Fixture()
        try f.server.accounts.addUser("bob")
        let bob = try f.server.accounts.addDevice(user: "bob", device: "phone")
        _ = try f.openContainer()
        let a = try makeFile(f, "a1", "a.txt", "alice's words")
        let to = moment()
        try overwrite(f, a, "garbage")
        let body = WireRewindRequest(folder: WireRules.documentsID, to: to, dryRun: false, device: "bob")
        #expect(try f.call("POST", rewind, token: .some(bob), json: body).status == 404)
        #expect(try f.call("POST", rewind, token: .some(nil), json: body).status == 401)
        #expect(try f.call("GET", "/v1/containers/\(cid)/items/a1").decode(WireItem.self).sha256 != a.sha256,
                "nothing of Bob's requests reached it")
        let mine = try f.call("POST", rewind, json: body).decode(WireRewound.self).changes
        #expect(mine == [WireRewindChange(id: "a1", path: "Documents/a.txt", what: .content)])
    }

    @Test func aVersionThatDoesNotKnowItsXattrsLeavesThemAsTheyAre() throws {
        let now = WireItem(id: "a1", parent: "f", name: "a.txt", kind: .file, mode: 0o600, mtime: 5, size: 0,
                           sha256: emptySHA256, version: 9, xattrs: ["user.x": "eA=="])
        var then = WireVersion(now, at: 10, path: "a.txt")
        then.mode = 0o644
        then.xattrs = nil
        let source = OneFileSource(folder: "f", now: now, then: then)
        let plan = try RewindPlanner.plan(WireRewindRequest(folder: "f", to: 20, dryRun: true, device: "d"),
                                          now: 30, source: source)
        #expect(plan.changes == [WireRewindChange(id: "a1", path: "f/a.txt", what: .metadata)])
        #expect(plan.writes.count == 1 && plan.writes.first?.mode == 0o644 && plan.writes.first?.xattrs == now.xattrs)
    }
}

/// A folder `folder` at the root holding one file, as it is now and as its kept version was.
private struct OneFileSource: RewindSource {
    let folder: String
    let now: WireItem
    let then: WireVersion

    private var folderItem: WireItem {
        WireItem(id: folder, parent: WireRules.rootID, name: folder, kind: .dir, mode: 0o755, mtime: 1, size: 0, sha256: "")
    }

    func item(_ id: String) -> WireItem? {
        switch id {
        case folder: return folderItem
        case now.id: return now
        case WireRules.rootID: return WireItem(id: id, parent: nil, name: "", kind: .dir, mode: 0o755, mtime: 1, size: 0, sha256: "")
        default: return nil
        }
    }

    func liveChildren(_ parent: String) -> [WireItem] { parent == folder ? [now] : [] }
    func liveChild(_ parent: String, named name: String) -> WireItem? { liveChildren(parent).first { $0.name == name } }
    func oldestKept(_ id: String) -> Int64? { 1 }
    func version(_ id: String, atOrBefore at: Int64) -> WireVersion? { id == then.id && then.at <= at ? then : nil }
    func versions(in parent: String, atOrBefore at: Int64) -> [WireVersion] {
        parent == folder && then.at <= at ? [then] : []
    }
    func holdsContent(sha256: String, size: Int64) -> Bool { true }
}
