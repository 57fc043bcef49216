// The embedded metadata keeps the stub's schema: a data directory written by an earlier stub (before symbolic
// links added a column, before the history) opens with its items, its feed position and its key-value entries,
// and goes on from there.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityStub

@Suite struct StubMetadataTests {
    @Test func aDataDirectoryFromBeforeOpensWithItsItemsAndGoesOn() throws {
        let dir = NSTemporaryDirectory() + "stubmeta-" + randomHex(bytes: 8)
        try makeDirectories(dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let db = try Database(path: dir + "/stub.sqlite")
            try db.exec("""
                CREATE TABLE containers (id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
                CREATE TABLE items (
                    container TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, name TEXT NOT NULL, kind TEXT NOT NULL,
                    mode INTEGER NOT NULL, mtime INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL,
                    version INTEGER NOT NULL, deleted INTEGER NOT NULL, device TEXT NOT NULL,
                    xattrs TEXT NOT NULL, conflicts TEXT NOT NULL,
                    PRIMARY KEY (container, id));
                CREATE TABLE blobs (container TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
                    PRIMARY KEY (container, sha256));
                CREATE TABLE kv (container TEXT NOT NULL, key TEXT NOT NULL, value TEXT,
                    mtime INTEGER NOT NULL, device TEXT NOT NULL, deleted INTEGER NOT NULL, seq INTEGER NOT NULL,
                    PRIMARY KEY (container, key));
                INSERT INTO containers VALUES ('\(cid)', 3);
                INSERT INTO items VALUES ('\(cid)', 'root', NULL, '', 'dir', 493, 1, 0, '', 1, 0, 'stub', '{}', '[]');
                INSERT INTO items VALUES ('\(cid)', 'documents', 'root', 'Documents', 'dir', 493, 1, 0, '', 2, 0, 'stub', '{}', '[]');
                INSERT INTO items VALUES ('\(cid)', 'd1', 'documents', 'old', 'dir', 448, 7, 0, '', 3, 0, 'phone', '{}', '[]');
                """)
            let red = String(decoding: try JSONEncoder.wire.encode(KVValue.string("red")), as: UTF8.self)
            try db.query("INSERT INTO kv VALUES (?, 'color', ?, 5, 'phone', 0, 1)", [.text(cid), .text(red)])
        }
        let server = try StubServer(config: StubConfig(dataDir: dir))
        let store = server.store
        let old = try store.item(cid, "d1")
        #expect(old.name == "old" && old.mode == 0o700 && old.version == 3 && old.device == "phone" && old.target == nil)
        let feed = try store.changes(cid, since: 0, limit: 100, wait: 0)
        #expect(feed.items.map(\.id) == ["root", "documents", "d1"] && feed.token == "3")
        #expect(try store.ensureContainer(cid).token == "3", "the container is not made again")
        #expect(try store.kvChanges(cid, since: 0, wait: 0).entries.map(\.value) == [.string("red")])
        var renamed = old
        renamed.name = "new"
        let upgraded = nowNanoseconds()
        usleep(2000)
        let stored = try store.putItem(cid, "d1", renamed, .ifMatch(3))
        #expect(stored.version == 4 && stored.name == "new")
        // The history starts with the upgrade: each live item as it was then, then what came after.
        #expect(try store.history(cid, "d1").map { "\($0.version) \($0.path)" } == ["4 Documents/new", "3 Documents/old"])
        #expect(try store.history(cid, "documents").map(\.path) == ["Documents"] && store.trash(cid).isEmpty)
        // So a rewind to the upgrade knows every item there was (without those rows it took "d1" for one made
        // after that time and sent it to Recently Deleted).
        let back = try store.rewind(cid, WireRewindRequest(folder: "documents", to: upgraded + 1000, dryRun: false, device: "phone"))
        #expect(back.map { "\($0.what) \($0.path)" } == ["move Documents/old"])
        #expect(try store.item(cid, "d1").name == "old" && store.trash(cid).isEmpty)
    }

    /// Stored extended attributes of a kept version that do not decode are a damaged row: reading the history
    /// fails, as reading a live item with such a row does. Before, the version came back without its xattrs,
    /// and a restore of it would have taken them away on every device.
    @Test func aKeptVersionWithDamagedXattrsIsAnErrorNotAVersionWithout() throws {
        let dir = NSTemporaryDirectory() + "stubmeta-" + randomHex(bytes: 8)
        try makeDirectories(dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let server = try StubServer(config: StubConfig(dataDir: dir))
        let store = server.store
        _ = try store.ensureContainer(cid)
        var item = try store.item(cid, "documents")
        item.xattrs = ["user.color": "cmVk"]
        _ = try store.putItem(cid, "documents", item, .ifMatch(item.version))
        #expect(try store.history(cid, "documents").first?.xattrs == ["user.color": "cmVk"])
        let db = try Database(path: dir + "/stub.sqlite")
        try db.query("UPDATE history SET xattrs = '{not json' WHERE id = 'documents'", [])
        #expect(throws: (any Error).self) { try store.history(cid, "documents") }
    }

    /// A history table from before deletions of an app's data gains their batch column: its rows read as
    /// deletes of no batch, and a deletion of the app's data made after is one batch.
    @Test func aHistoryFromBeforeBatchesGainsTheColumn() throws {
        let dir = NSTemporaryDirectory() + "stubmeta-" + randomHex(bytes: 8)
        try makeDirectories(dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let server = try StubServer(config: StubConfig(dataDir: dir))
            _ = try server.store.ensureContainer(cid)
            let lib = WireItem(id: "lib", parent: WireRules.rootID, name: "Library", kind: .dir, mode: 0o755, mtime: 1, size: 0, sha256: "")
            let made = try server.store.putItem(cid, "lib", lib, .ifNoneMatch)
            _ = try server.store.deleteItem(cid, "lib", ifMatch: made.version, device: "phone")
            _ = try server.store.putItem(cid, "lib2", WireItem(id: "lib2", parent: WireRules.rootID, name: "Library", kind: .dir,
                                                                mode: 0o755, mtime: 1, size: 0, sha256: ""), .ifNoneMatch)
        }
        let db = try Database(path: dir + "/stub.sqlite")
        try db.exec("ALTER TABLE history DROP COLUMN batch")
        let store = try StubServer(config: StubConfig(dataDir: dir)).store
        #expect(try store.trash(cid).map { "\($0.id) \(String(describing: $0.batch))" } == ["lib nil"])
        let answer = try store.deleteData(cid, documents: false, device: "laptop")
        #expect(answer.deleted.map(\.id) == ["lib2"] && answer.batch != nil)
        #expect(try store.trash(cid).map(\.batch) == [answer.batch, nil])
    }
}
