// The database's kept statements (SQLite.swift): each use starts afresh, with only its own bindings, from the
// first row, also inside another use of the same text and after a use that threw part way; `first` reads no
// further than the row it takes; the store's texts for no xattrs and no conflicts are the encoder's own, and
// its reads of the journal and of id sets under a key prefix find what the full scans found.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore

@Suite struct StatementCacheTests {
    let dir = TempDir()

    func item(_ id: String) -> Item {
        Item(id: id, parent: "documents", name: id, kind: .file, mode: 0o644, mtime: 1, ctime: 1, size: 0,
             remoteVersion: 0, remoteSHA: emptySHA256, remoteSize: 0, device: "laptop", hasLocal: true, localSHA: nil,
             dirty: true, metaDirty: true, deleted: false, pinned: false, xattrs: [:], conflicts: [])
    }

    func database() throws -> Database {
        let db = try Database(path: dir.path + "/t.sqlite")
        try db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT)")
        for (i, name) in ["a", "b", "c"].enumerated() {
            try db.query("INSERT INTO t(id, name) VALUES(?, ?)", [.int(Int64(i)), .text(name)])
        }
        return db
    }

    @Test func aUseSeesOnlyItsOwnBindings() throws {
        let db = try database()
        #expect(try db.query("SELECT ?", [.text("x")]).first?.columns == [.text("x")])
        // The same text again with nothing bound: the last use's value is gone.
        #expect(try db.query("SELECT ?").first?.columns == [.null])
        #expect(try db.query("SELECT name FROM t WHERE id = ?", [.int(2)]).first?.text(0) == "c")
        #expect(try db.query("SELECT name FROM t WHERE id = ?", [.int(0)]).first?.text(0) == "a")
    }

    @Test func theSameTextRunsInsideItsOwnRows() throws {
        let db = try database()
        var pairs: [String] = []
        try db.forEach("SELECT name FROM t ORDER BY id") { outer in
            let name = outer.text(0)
            try db.forEach("SELECT name FROM t ORDER BY id") { pairs.append(name + $0.text(0)) }
        }
        #expect(pairs == ["aa", "ab", "ac", "ba", "bb", "bc", "ca", "cb", "cc"])
    }

    @Test func aUseThatThrewLeavesTheNextFromTheFirstRow() throws {
        struct Stop: Error {}
        let db = try database()
        #expect(throws: Stop.self) { try db.forEach("SELECT name FROM t ORDER BY id") { _ in throw Stop() } }
        #expect(try db.query("SELECT name FROM t ORDER BY id").map { $0.text(0) } == ["a", "b", "c"])
        // Nothing is left holding the database: a write from another connection goes through.
        let other = try Database(path: dir.path + "/t.sqlite")
        try other.exec("BEGIN IMMEDIATE; DELETE FROM t WHERE id = 0; COMMIT")
        #expect(try db.query("SELECT count(*) FROM t").first?.int(0) == 2)
    }

    @Test func aFailedStatementReportsItsErrorEachTime() throws {
        let db = try database()
        for _ in 0..<2 {
            #expect(throws: SQLiteError.self) {
                try db.query("INSERT INTO t(id, name) VALUES(?, ?)", [.int(1), .text("dup")])
            }
        }
        #expect(try db.query("SELECT name FROM t WHERE id = 1").first?.text(0) == "b")
    }

    @Test func emptyXattrsAndConflictsAreTheEncodersText() throws {
        let xattrs = String(decoding: try JSONEncoder.wire.encode([String: String]()), as: UTF8.self)
        let conflicts = String(decoding: try JSONEncoder.wire.encode([WireConflict]()), as: UTF8.self)
        #expect(Store.encodeXattrs([:]) == xattrs)
        #expect(Store.encodeConflicts([]) == conflicts)
        #expect(try Store.decodeXattrs(xattrs, of: "i").isEmpty)
        #expect(try Store.decodeConflicts(conflicts, of: "i").isEmpty)
        #expect(try Store.decodeXattrs(Store.encodeXattrs(["user.a": [1, 2]]), of: "i") == ["user.a": [1, 2]])
    }

    @Test func firstStopsAtTheRowItTakes() throws {
        let db = try database()
        var seen: [String] = []
        let found = try db.first("SELECT name FROM t ORDER BY id") { row -> String? in
            seen.append(row.text(0))
            return row.text(0) == "b" ? "took b" : nil
        }
        #expect(found == "took b")
        #expect(seen == ["a", "b"])
        #expect(try db.first("SELECT name FROM t") { _ -> Int? in nil } == nil)
        #expect(try db.query("SELECT name FROM t ORDER BY id").map { $0.text(0) } == ["a", "b", "c"])
    }

    @Test func theJournalIsReadUpToItsFirstAcceptedItem() throws {
        let store = try Store(directory: dir.path + "/store")
        for id in ["a", "b", "c"] { try store.saveChanged(item(id)) }
        try store.saveChanged(item("a"))
        #expect(try store.firstPending { _ in true } == "b")
        #expect(try store.firstPending { $0 != "b" } == "c")
        #expect(try store.firstPending { _ in false } == nil)
        #expect(try store.isPending("a") && !store.isPending("z"))
        #expect(try store.pendingCount() == 3)
    }

    @Test func idSetsUnderAPrefixHoldOnlyTheirOwn() throws {
        let store = try Store(directory: dir.path + "/store")
        try store.markResolved(["r2", "r1"])
        try store.markUnpushed(["u1"], added: true)
        try store.markRefused("x1")
        try store.markCreateSent("s1")
        try store.setMeta("resolved", "not an id")
        try store.setMeta("resolved;", "past the range")
        #expect(try store.resolvedConflicts() == ["r1", "r2"])
        #expect(try store.unpushedConflicts() == ["u1"])
        #expect(try store.takeRefused() == ["x1"])
        #expect(try store.takeRefused().isEmpty)
        #expect(try store.meta("resolved") == "not an id")
    }
}
