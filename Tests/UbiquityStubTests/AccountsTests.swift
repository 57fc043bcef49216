// Accounts and device keys on a real stub over HTTP: a key opens its own user's containers only, a revoked
// or removed key is refused at its next request, only hashes are kept, and a single-token store keeps working.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityStub

@Suite struct AccountsTests {
    private func item(_ id: String, _ name: String) -> WireItem {
        WireItem(id: id, parent: WireRules.documentsID, name: name, kind: .dir, mode: 0o755, mtime: 1, size: 0,
                 sha256: "", device: "d")
    }

    private func names(_ f: Fixture, key: String) throws -> [String] {
        let feed = try f.call("GET", "/v1/containers/\(cid)/changes", token: .some(key))
        #expect(feed.status == 200, "\(feed.text)")
        return try feed.decode(WireChanges.self).items.map(\.name).sorted()
    }

    /// The users alice and bob, with a device each: their keys.
    private func aliceAndBob(_ f: Fixture) throws -> (alice: String, bob: String) {
        try f.server.accounts.addUser("alice")
        try f.server.accounts.addUser("bob")
        return (try f.server.accounts.addDevice(user: "alice", device: "laptop"),
                try f.server.accounts.addDevice(user: "bob", device: "phone"))
    }

    @Test func aKeyOpensItsOwnUsersContainersOnly() throws {
        let f = try Fixture()
        let (alice, bob) = try aliceAndBob(f)
        #expect(alice.utf8.count == 64 && isSHA256Hex(alice) && alice != bob)

        let opened = try f.call("PUT", "/v1/containers/\(cid)", token: .some(alice))
        #expect(opened.status == 200 && opened.json["container"] as? String == cid, "the wire id, not the stored one")
        #expect(try f.call("PUT", "/v1/containers/\(cid)/items/a1", token: .some(alice), headers: ["If-None-Match: *"],
                           json: item("a1", "alice's")).status == 200)
        // Bob does not see Alice's container: it is absent, for every route.
        for (method, path) in [("GET", "/v1/containers/\(cid)/changes"), ("GET", "/v1/containers/\(cid)/items/a1"),
                               ("GET", "/v1/containers/\(cid)/kv"), ("HEAD", "/v1/containers/\(cid)/blobs/\(emptySHA256)")] {
            #expect(try f.call(method, path, token: .some(bob)).status == 404, "\(method) \(path)")
        }
        // The container Bob opens under the same id is his own, and empty.
        #expect(try f.call("PUT", "/v1/containers/\(cid)", token: .some(bob)).status == 200)
        #expect(try names(f, key: bob) == ["", "Documents"])
        #expect(try f.call("PUT", "/v1/containers/\(cid)/items/b1", token: .some(bob), headers: ["If-None-Match: *"],
                           json: item("b1", "bob's")).status == 200)
        #expect(try names(f, key: alice) == ["", "Documents", "alice's"])
        #expect(try names(f, key: bob) == ["", "Documents", "bob's"])
        // The single-token store's user (the token file's key) sees neither.
        #expect(try f.call("GET", "/v1/containers/\(cid)/changes").status == 404)
    }

    /// A user removed takes their shares with them, as owner and as participant; the share routes answer only
    /// the methods they take, and refuse an oversized body before reading it.
    @Test func aRemovedUsersSharesGoWithThem() throws {
        let f = try Fixture()
        let (alice, bob) = try aliceAndBob(f)
        try f.server.accounts.addUser("carol")
        let carol = try f.server.accounts.addDevice(user: "carol", device: "tablet")
        #expect(try f.call("PUT", "/v1/containers/\(cid)", token: .some(alice)).status == 200)
        #expect(try f.call("PUT", "/v1/containers/\(cid)/items/t1", token: .some(alice), headers: ["If-None-Match: *"],
                           json: item("t1", "Trip")).status == 200)
        for user in ["bob", "carol"] {
            let r = try f.call("POST", "/v1/containers/\(cid)/shares", token: .some(alice),
                               json: WireShareRequest(folder: "t1", user: user, readOnly: false))
            #expect(r.status == 200, "\(r.text)")
        }
        func shared(_ key: String) throws -> [String] {
            let r = try f.call("GET", "/v1/shares", token: .some(key))
            #expect(r.status == 200, "\(r.text)")
            return try r.decode(WireShareList.self).shares.map { "\($0.owner)>\($0.user)" }
        }
        #expect(try shared(alice) == ["alice>bob", "alice>carol"])
        try f.server.accounts.removeUser("bob")
        #expect(try shared(alice) == ["alice>carol"])
        try f.server.accounts.addUser("bob")
        let bobAgain = try f.server.accounts.addDevice(user: "bob", device: "phone")
        #expect(try shared(bobAgain) == [], "a new user of the same name inherits nothing")
        try f.server.accounts.removeUser("alice")
        #expect(try shared(carol) == [])
        #expect(try f.call("GET", "/v1/shares", token: .some(bob)).status == 401, "the removed user's key")
        #expect(try f.call("POST", "/v1/shares", token: .some(carol)).status == 405)
        #expect(try f.call("GET", "/v1/shares/leave", token: .some(carol)).status == 405)
        #expect(try f.call("GET", "/v1/containers/\(cid)/shares", token: .some(carol)).status == 405)
        // Asked with 100-continue, as the client sends: the refusal comes before the body (without it, the answer
        // races the server's close, and curl saw a reset once: status 0).
        let big = try f.call("POST", "/v1/shares/leave", token: .some(carol),
                             headers: ["Content-Type: application/json", "Expect: 100-continue"],
                             body: Array(repeating: 0x20, count: 32 << 20))
        #expect(big.status == 413)
    }

    @Test func aKeyListsItsOwnUsersContainersOnly() throws {
        let f = try Fixture()
        let (alice, bob) = try aliceAndBob(f)
        func listed(_ key: String) throws -> [String] {
            let r = try f.call("GET", "/v1/containers", token: .some(key))
            #expect(r.status == 200, "\(r.text)")
            return try r.decode(WireContainerList.self).containers
        }
        #expect(try listed(alice) == [])
        for id in ["iCloud.com.example.notes", "iCloud.com.example.draw"] {
            #expect(try f.call("PUT", "/v1/containers/\(id)", token: .some(alice)).status == 200)
        }
        #expect(try f.call("PUT", "/v1/containers/iCloud.com.example.bobs", token: .some(bob)).status == 200)
        // Wire ids, sorted; never another user's, never a stored prefix.
        #expect(try listed(alice) == ["iCloud.com.example.draw", "iCloud.com.example.notes"])
        #expect(try listed(bob) == ["iCloud.com.example.bobs"])
        #expect(try f.call("GET", "/v1/containers", token: .some(String(repeating: "0", count: 64))).status == 401)
        #expect(try f.call("POST", "/v1/containers", token: .some(alice)).status == 405)
    }

    @Test func aKeySeesItsOwnUsersUsageOnly() throws {
        let f = try Fixture()
        let (alice, bob) = try aliceAndBob(f)
        try f.server.accounts.setLimits("alice") { $0.storage = 5 << 20 }
        #expect(try f.call("PUT", "/v1/containers/\(cid)", token: .some(alice)).status == 200)
        #expect(try f.call("PUT", "/v1/containers/iCloud.com.example.bobs", token: .some(bob)).status == 200)
        let r = try f.call("GET", "/v1/usage", token: .some(alice))
        #expect(r.status == 200, "\(r.text)")
        let usage = try r.decode(WireUsage.self)
        #expect(usage == WireUsage(used: 0, quota: 5 << 20, containers: [
            WireContainerUsage(container: cid, documents: 0, data: 0, versions: 0, deleted: 0)]))
        #expect(try f.call("GET", "/v1/usage", token: .some(bob)).decode(WireUsage.self).containers.map(\.container)
                == ["iCloud.com.example.bobs"])
        #expect(try f.call("GET", "/v1/usage", token: .some(String(repeating: "0", count: 64))).status == 401)
        #expect(try f.call("PUT", "/v1/usage", token: .some(alice)).status == 405)
    }

    @Test func aRevokedOrRemovedKeyIsRefusedAtItsNextRequest() throws {
        let f = try Fixture()
        try f.server.accounts.addUser("alice")
        let laptop = try f.server.accounts.addDevice(user: "alice", device: "laptop")
        let phone = try f.server.accounts.addDevice(user: "alice", device: "phone")
        #expect(try f.call("PUT", "/v1/containers/\(cid)", token: .some(laptop)).status == 200)
        try f.server.accounts.revoke(user: "alice", device: "laptop")
        let refused = try f.call("GET", "/v1/containers/\(cid)/changes", token: .some(laptop))
        #expect(refused.status == 401 && refused.text.contains("revoked"))
        #expect(try f.call("GET", "/v1/containers/\(cid)/changes", token: .some(phone)).status == 200, "the other device goes on")
        #expect(throws: StubError.self) { try f.server.accounts.revoke(user: "alice", device: "laptop") }
        #expect(throws: StubError.self) { _ = try f.server.accounts.addDevice(user: "alice", device: "laptop") }
        #expect(try f.server.accounts.devices(of: "alice").map { "\($0.name) \($0.revoked != nil)" } == ["laptop true", "phone false"])

        try f.server.accounts.removeUser("alice")
        #expect(try f.call("GET", "/v1/containers/\(cid)/changes", token: .some(phone)).status == 401)
        // A user added again under the name starts empty: the old containers are not given back.
        try f.server.accounts.addUser("alice")
        let again = try f.server.accounts.addDevice(user: "alice", device: "laptop")
        #expect(try f.call("GET", "/v1/containers/\(cid)/changes", token: .some(again)).status == 404)
    }

    @Test func namesAreCheckedAndTheStoreKeepsOnlyHashes() throws {
        let f = try Fixture()
        for bad in ["", ".hidden", "-x", "a b", "a/b", String(repeating: "a", count: 65), "é"] {
            #expect(throws: StubError.self) { try f.server.accounts.addUser(bad) }
        }
        try f.server.accounts.addUser("alice")
        #expect(throws: StubError.self) { try f.server.accounts.addUser("alice") }
        #expect(throws: StubError.self) { _ = try f.server.accounts.addDevice(user: "nobody", device: "laptop") }
        #expect(throws: StubError.self) { _ = try f.server.accounts.addDevice(user: "alice", device: "../x") }
        let key = try f.server.accounts.addDevice(user: "alice", device: "laptop")
        for file in ["stub.sqlite", "stub.sqlite-wal"] {
            let bytes = FileManager.default.contents(atPath: f.dir + "/" + file) ?? Data()
            #expect(!String(decoding: bytes, as: UTF8.self).contains(key), "\(file) holds the key itself")
        }
        #expect(try f.server.accounts.users().map(\.name) == ["alice", Accounts.firstUser])
    }

    /// A data directory of the single-token remote (no account tables): its token opens its containers, as
    /// the key of user `default`'s device `token`.
    @Test func aSingleTokenStoreKeepsItsTokenAndContainers() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        _ = try f.server.seed(container: cid, path: "Documents/kept.txt", contents: .bytes([1]), device: "x", mtime: 5)
        let token = f.server.token!
        f.server.stop()
        try Database(path: f.dir + "/stub.sqlite").exec("DROP TABLE settings; DROP TABLE users; DROP TABLE devices")

        let again = try StubServer(config: StubConfig(dataDir: f.dir))
        #expect(again.token == token)
        #expect(try again.accounts.devices(of: nil) == [StubDevice(owner: Accounts.firstUser, name: Accounts.tokenDevice,
                                                                     created: again.accounts.devices(of: nil)[0].created, revoked: nil)])
        try again.start()
        defer { again.stop() }
        let feed = try Fixture.curl(port: again.port, token: token, path: "/v1/containers/\(cid)/changes")
        #expect(feed.hasPrefix("200") && feed.contains("kept.txt"), "\(feed)")
        // Revoked once, the token file's key stays revoked however often the server starts again.
        try again.accounts.revoke(user: Accounts.firstUser, device: Accounts.tokenDevice)
        again.stop()
        let third = try StubServer(config: StubConfig(dataDir: f.dir))
        try third.start()
        defer { third.stop() }
        let answer = try Fixture.curl(port: third.port, token: token, path: "/v1/containers/\(cid)/changes")
        #expect(answer.hasPrefix("401"), "\(answer)")
    }
}

extension Fixture {
    /// The status and body of one GET to a server of the test's own.
    static func curl(port: UInt16, token: String, path: String) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        p.arguments = ["-s", "-w", "%{http_code} ", "-o", "/dev/stderr", "-H", "Authorization: Bearer \(token)",
                       "http://127.0.0.1:\(port)\(path)"]
        let out = Pipe(), body = Pipe()
        p.standardOutput = out
        p.standardError = body
        try p.run(); p.waitUntilExit()
        return String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            + String(decoding: body.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }
}

@Suite struct BatchDeadlineTests {
    /// A batch that runs out of its time applies what it had time for and answers the rest 503, unapplied;
    /// sent again, they are applied (not "already applied": they never were).
    @Test func entriesPastTheDeadlineAreAnsweredUnappliedAndGoInLater() throws {
        let f = try Fixture { $0.batchSeconds = 0 }
        _ = try f.openContainer()
        let entries = (1...3).map { i in
            WireBatchEntry(op: .put, id: "d\(i)", item: WireItem(id: "d\(i)", parent: WireRules.documentsID, name: "d\(i)",
                                                                kind: .dir, mode: 0o755, mtime: 1, size: 0, sha256: "", device: "t"),
                           change: "c\(i)")
        }
        let first = try f.call("POST", "/v1/containers/\(cid)/batch", json: WireBatch(entries: entries)).decode(WireBatchAnswer.self)
        #expect(first.results.map(\.status) == [200, 503, 503])
        #expect(first.results[1].error?.contains("not applied") == true)
        let again = try f.call("POST", "/v1/containers/\(cid)/batch", json: WireBatch(entries: Array(entries.dropFirst())))
            .decode(WireBatchAnswer.self)
        #expect(again.results.map(\.status) == [200, 503])
        let feed = try f.call("GET", "/v1/containers/\(cid)/changes").decode(WireChanges.self)
        #expect(feed.items.map(\.name).sorted() == ["", "Documents", "d1", "d2"])
    }
}
