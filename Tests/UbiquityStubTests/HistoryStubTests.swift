// The history on the stub itself (docs/HISTORY.md): the retention policy alone (which rows survive for given
// times), the policy's text, numbered names, the routes' refusals of malformed bodies and other users' keys,
// the path a delete keeps, and `remote usage`'s figures.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityStub

private let second = HistoryRules.second, hour = HistoryRules.hour, day = HistoryRules.day

/// A row of item "i" at version `v`, stored at `at`.
private func row(_ v: Int64, _ at: Int64, deleted: Bool = false) -> HistoryStamp {
    HistoryStamp(id: "i", version: v, at: at, deleted: deleted)
}

@Suite struct HistoryRetentionTests {
    /// Noon of a UTC day, far from its edges.
    let noon: Int64 = 20_000 * day + 12 * hour

    @Test func theCurrentVersionOfALiveItemNeverExpires() {
        let r = HistoryRetention(versions: .none, keepDeleted: 0)
        #expect(r.expired([row(5, noon - 400 * day)], now: noon).isEmpty)
        #expect(r.expired([row(1, noon - 2 * day), row(2, noon - day), row(3, noon - 400 * day)], now: noon) == [2, 1],
                "by version, not by time: the newest version is current")
    }

    @Test func everyVersionOfTheLastDayThenTheNewestOfEachUTCDay() {
        let r = HistoryRetention.standard
        let rows = [
            row(1, noon - 45 * day),            // day -45, replaced 40 days ago: gone
            row(2, noon - 40 * day),            // day -40, alone in its day, replaced 3 days ago: kept
            row(3, noon - 3 * day - hour),      // day -3, older, replaced 3 days ago: gone
            row(4, noon - 3 * day),             // day -3, its newest: kept
            row(5, noon - 2 * day - 2 * hour),  // day -2, older, replaced 2 days ago: gone
            row(6, noon - 2 * day + hour),      // day -2, its newest: kept
            row(7, noon - 20 * hour),           // replaced within 24 h: kept
            row(8, noon - 10 * hour),           // replaced within 24 h: kept
            row(9, noon - hour),                // current
        ]
        #expect(Set(r.expired(rows, now: noon)) == [1, 3, 5])
    }

    /// A version left alone for long was the file's state until it was replaced: its age counts from then.
    /// (Counted from when it was stored, a file untouched for 40 days lost its only good version at the first
    /// pass after garbage was written over it, and a rewind of an hour found nothing to go back to.)
    @Test func aVersionLeftAloneLongStaysForTheRetentionAfterItIsReplaced() {
        let r = HistoryRetention.standard
        let rows = [row(1, noon - 40 * day), row(2, noon - hour)]
        #expect(r.expired(rows, now: noon).isEmpty)
        #expect(r.expired(rows, now: noon + 29 * day).isEmpty, "the newest older version of its day, replaced 29 days ago")
        #expect(r.expired(rows, now: noon + 31 * day) == [1], "replaced more than 30 days ago")
    }

    @Test func theDaysNewestIsPickedAmongOlderVersionsOnly() {
        // The current version is of the same day as the older ones: the newest of those still stays (garbage
        // written over a file in the evening must not take the morning's good version with it).
        let r = HistoryRetention.standard
        let rows = [row(1, noon - 2 * day - hour), row(2, noon - 2 * day), row(3, noon - 2 * day + hour)]
        #expect(r.expired(rows, now: noon) == [1])
    }

    @Test func anItemInRecentlyDeletedGoesWholeAfterKeepDeleted() {
        let r = HistoryRetention(versions: .standard, keepDeleted: 30 * day)
        let rows = [row(1, noon - 30 * day + 1), row(2, noon - 30 * day + 2, deleted: true)]
        #expect(r.expired(rows, now: noon) == [], "29 days and a bit after the delete: kept, the older day's newest too")
        let late = [row(1, noon - 31 * day), row(2, noon - 30 * day, deleted: true)]
        #expect(Set(r.expired(late, now: noon)) == [1, 2], "30 days after: every row of the item")
        #expect(HistoryRetention(versions: .standard, keepDeleted: 0).expired([row(3, noon, deleted: true)], now: noon) == [3])
    }

    @Test func aPolicyOfSecondsAndNone() {
        let r = HistoryRetention(versions: VersionPolicy(parsing: "10s,20s")!, keepDeleted: 30 * second)
        let rows = [row(1, noon - 15 * second), row(2, noon - 12 * second), row(3, noon - 5 * second), row(4, noon)]
        #expect(r.expired(rows, now: noon) == [1], "2 was replaced 5 s ago; 1, 12 s ago, and 3 is its day's newest older version")
        #expect(Set(r.expired(rows, now: noon + 10 * second)) == [1, 2])
        #expect(HistoryRetention(versions: .none).expired(rows, now: noon) == [3, 2, 1])
        #expect(r.versionHorizon(now: noon) == noon - 10 * second && r.deletedHorizon(now: noon) == noon - 30 * second)
    }

    @Test func policiesAreReadAndRefused() {
        #expect(VersionPolicy(parsing: "24h,30d") == .standard)
        #expect(VersionPolicy(parsing: "0") == VersionPolicy.none)
        #expect(VersionPolicy(parsing: "10s,20s") == VersionPolicy(everyVersionFor: 10 * second, dailyFor: 20 * second))
        #expect(VersionPolicy(parsing: "7d") == VersionPolicy(everyVersionFor: 7 * day, dailyFor: 7 * day))
        #expect(VersionPolicy(parsing: "90m,2h")?.everyVersionFor == 90 * 60 * second)
        for bad in ["", "24", "24h,", ",30d", "30d,24h", "1w", "-1h,2h", "1h,2h,3h", "24h 30d", "1.5h", "99999999999d", "+1h"] {
            #expect(VersionPolicy(parsing: bad) == nil, "\(bad)")
        }
        #expect(VersionPolicy(parsing: VersionPolicy.standard.description) == .standard && VersionPolicy.none.description == "0")
    }

    @Test func numberedNamesKeepTheExtension() {
        #expect(HistoryRules.numberedName("report.txt", 2) == "report 2.txt")
        #expect(HistoryRules.numberedName("archive.tar.gz", 3) == "archive.tar 3.gz")
        #expect(HistoryRules.numberedName("notes", 2) == "notes 2")
        #expect(HistoryRules.numberedName(".profile", 2) == ".profile 2")
        let long = String(repeating: "é", count: 125) + ".txt" // 254 bytes
        let numbered = HistoryRules.numberedName(long, 12)
        #expect(numbered.utf8.count <= WireRules.maxNameBytes && numbered.hasSuffix(" 12.txt") && WireRules.isValidName(numbered))
    }
}

@Suite struct HistoryStubTests {
    /// A file `name` in the container of the fixture's token, its blob uploaded first.
    @discardableResult
    private func makeFile(_ f: Fixture, _ id: String, _ name: String, _ text: String, parent: String = WireRules.documentsID)
        throws -> WireItem {
        #expect(try f.putBlob(Array(text.utf8)).status < 300)
        let answer = try f.putItem(file(id, name, Array(text.utf8), parent: parent))
        #expect(answer.status == 200, "\(answer.text)")
        return try answer.decode(WireItem.self)
    }

    private func delete(_ f: Fixture, _ item: WireItem) throws {
        let answer = try f.call("DELETE", "/v1/containers/\(cid)/items/\(item.id)",
                                headers: ["If-Match: \(item.version)", "X-Device: phone"])
        #expect(answer.status == 200, "\(answer.text)")
    }

    @Test func malformedBodiesAreRefusedWithAPlainLine() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let restore = "/v1/containers/\(cid)/trash/restore", empty = "/v1/containers/\(cid)/trash/empty"
        let refusals: [(String, [UInt8], Int)] = [
            (restore, Array("{not json".utf8), 400),
            (restore, Array(#"{"ids": ["a1"]}"#.utf8), 400), // no device
            (restore, Array(#"{"ids": "a1", "device": "x"}"#.utf8), 400),
            (restore, Array(#"{"ids": ["a 1"], "device": "x"}"#.utf8), 400),
            (restore, Array(#"{"ids": [], "device": "x"}"#.utf8), 400),
            (empty, Array(#"{"ids": ["a1"], "all": true}"#.utf8), 400),
            (empty, Array(#"{"all": false}"#.utf8), 400),
            (empty, Array("{}".utf8), 400),
            (empty, Array("[]".utf8), 400),
            (restore, Array(#"{"ids": ["a1"], "device": "x"}"#.utf8), 404),
            (empty, Array(#"{"ids": ["a1"]}"#.utf8), 404),
        ]
        for (path, body, expected) in refusals {
            let answer = try f.call("POST", path, body: body)
            #expect(answer.status == expected, "\(path) \(String(decoding: body, as: UTF8.self)): \(answer.text)")
            let message = answer.json["error"] as? String ?? ""
            #expect(!message.isEmpty && !message.contains("\n") && answer.headers["x-error"] == message)
        }
        #expect(try f.call("POST", restore, body: [UInt8](repeating: 0x20, count: 2 << 20)).status == 413)
        #expect(try f.call("GET", restore).status == 405)
        #expect(try f.call("POST", "/v1/containers/\(cid)/trash").status == 405)
        #expect(try f.call("GET", "/v1/containers/\(cid)/history/a%201").status == 400)
        #expect(try f.call("GET", "/v1/containers/\(cid)/history/nobody").status == 404)
        #expect(try f.call("GET", "/v1/containers/iCloud.com.example.absent/trash").status == 404)
    }

    @Test func aKeyReachesItsOwnUsersHistoryOnly() throws {
        let f = try Fixture()
        try f.server.accounts.addUser("bob")
        let bob = try f.server.accounts.addDevice(user: "bob", device: "phone")
        _ = try f.openContainer()
        let gone = try makeFile(f, "a1", "a.txt", "alice's words")
        try delete(f, gone)
        for (method, path, body) in [("GET", "/v1/containers/\(cid)/history/a1", nil),
                                     ("GET", "/v1/containers/\(cid)/trash", nil),
                                     ("POST", "/v1/containers/\(cid)/trash/restore", #"{"ids": ["a1"], "device": "bob"}"#),
                                     ("POST", "/v1/containers/\(cid)/trash/empty", #"{"all": true}"#),
                                     ("POST", "/v1/containers/\(cid)/delete-data", #"{"documents": true, "device": "bob"}"#)] {
            #expect(try f.call(method, path, token: .some(bob), body: body.map { Array($0.utf8) }).status == 404, "\(path)")
            #expect(try f.call(method, path, token: .some(nil), body: body.map { Array($0.utf8) }).status == 401, "\(path)")
        }
        #expect(try f.call("GET", "/v1/containers/\(cid)/trash").decode(WireTrash.self).items.map(\.id) == ["a1"],
                "nothing of Bob's requests reached it")
        #expect(try f.call("GET", "/v1/containers/\(cid)/changes?since=0").decode(WireChanges.self).items.allSatisfy {
            $0.id == "a1" || !$0.deleted }, "nor deleted Alice's data")
    }

    @Test func aDeleteKeepsThePathItHadThen() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let folder = try f.putItem(dir("f1", "before")).decode(WireItem.self)
        try delete(f, try makeFile(f, "a1", "a.txt", "words", parent: "f1"))
        var renamed = folder
        renamed.name = "after"
        #expect(try f.putItem(renamed, ifMatch: folder.version).status == 200)
        let trash = try f.call("GET", "/v1/containers/\(cid)/trash").decode(WireTrash.self).items
        #expect(trash.map(\.path) == ["Documents/before/a.txt"])
        let versions = try f.call("GET", "/v1/containers/\(cid)/history/f1").decode(WireHistory.self).versions
        #expect(versions.map(\.path) == ["Documents/after", "Documents/before"])
        let root = try f.call("GET", "/v1/containers/\(cid)/history/root").decode(WireHistory.self).versions
        #expect(root.map(\.path) == [""] && root.first?.device == "stub")
    }

    /// An item that stepped aside (`WireRules.asideName`, a device's exchange of names) and was deleted before
    /// its move landed is listed and restored under the place it had before (after fsstress, two entries of
    /// Recently Deleted showed as `.ID.moving`).
    @Test func aDeleteOfAnItemSteppedAsideKeepsItsNameBefore() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let folder = try f.putItem(dir("f1", "docs")).decode(WireItem.self)
        let a = try makeFile(f, "a1", "a.txt", "words", parent: folder.id)
        var aside = a
        aside.parent = WireRules.documentsID
        aside.name = WireRules.asideName(a.id)
        let moved = try f.putItem(aside, ifMatch: a.version).decode(WireItem.self)
        try delete(f, moved)
        let trash = try f.call("GET", "/v1/containers/\(cid)/trash").decode(WireTrash.self).items
        #expect(trash.map(\.path) == ["Documents/docs/a.txt"])
        let restored = try f.call("POST", "/v1/containers/\(cid)/trash/restore", json: WireRestoreRequest(ids: ["a1"], device: "x"))
        #expect(try restored.decode(WireRestored.self).restored.map { "\($0.parent ?? "") \($0.name)" } == ["f1 a.txt"])
    }

    @Test func usageCountsLiveHistoryAndTrashOnce() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let v1 = try makeFile(f, "a1", "a.txt", "first version") // 13 bytes, then history
        #expect(try f.putBlob(Array("the second".utf8)).status < 300)
        #expect(try f.putItem(file("a1", "a.txt", Array("the second".utf8)), ifMatch: v1.version).status == 200) // 10, live
        try delete(f, try makeFile(f, "b1", "b.txt", "in the trash!")) // 13, trash
        try delete(f, try makeFile(f, "c1", "c.txt", "the second")) // the live content: counted there
        let usage = try f.server.usage()
        #expect(usage == [{
            var u = StubUsage(container: cid)
            u.user = "default"; u.live = 10; u.documents = 10; u.history = 13; u.trash = 13 // a.txt is in Documents
            return u
        }()])
        _ = try f.server.store.emptyTrash(cid, ids: nil)
        #expect(try f.server.usage().first?.trash == 0)
    }

    @Test func aRestoreIsRefusedWholeAndItsAnswerGoesToTheFeed() throws {
        let f = try Fixture()
        let start = try f.openContainer().token
        let gone = try makeFile(f, "a1", "a.txt", "words")
        try delete(f, gone)
        let refused = try f.call("POST", "/v1/containers/\(cid)/trash/restore", json: WireRestoreRequest(ids: ["a1", "zz"], device: "x"))
        #expect(refused.status == 404 && refused.text.contains("zz"))
        let restored = try f.call("POST", "/v1/containers/\(cid)/trash/restore", json: WireRestoreRequest(ids: ["a1"], device: "x"))
        let items = try restored.decode(WireRestored.self).restored
        #expect(items.map(\.id) == ["a1"] && items.first?.device == "x")
        let feed = try f.call("GET", "/v1/containers/\(cid)/changes?since=\(start)").decode(WireChanges.self).items
        #expect(feed.map(\.id) == ["a1"] && feed.last == items.first)
    }
}
