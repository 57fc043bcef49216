// Symbolic links on the stub: the target travels in the item, is validated there, and stores made before links
// open and take them. FIFOs and sockets are local-only and refused.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityStub

func link(_ id: String, _ name: String, _ target: String, parent: String = WireRules.documentsID) -> WireItem {
    WireItem(id: id, parent: parent, name: name, kind: .symlink, mode: 0o777, mtime: 3,
             size: Int64(target.utf8.count), sha256: "", device: "test", target: target)
}

@Suite struct StubLinkTests {
    @Test func linksKeepTheirTargetExactly() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        for (i, target) in ["../a/b", "/etc/passwd", "dangling, with spaces", "é/ü", String(repeating: "x", count: 4095)].enumerated() {
            let put = try f.putItem(link("l\(i)", "link\(i)", target))
            #expect(put.status == 200, "\(put.text)")
            let stored = try put.decode(WireItem.self)
            #expect(stored.kind == .symlink && stored.target == target && stored.size == Int64(target.utf8.count))
            #expect(try f.call("GET", "/v1/containers/\(cid)/items/l\(i)").decode(WireItem.self).target == target)
        }
        let feed = try f.call("GET", "/v1/containers/\(cid)/changes").decode(WireChanges.self)
        #expect(feed.items.first { $0.id == "l0" }?.target == "../a/b")
        #expect(feed.items.first { $0.id == WireRules.documentsID }?.target == nil)
        // A rename keeps the target; a link becomes no other kind.
        var renamed = link("l0", "renamed", "../a/b")
        let version = try f.call("GET", "/v1/containers/\(cid)/items/l0").decode(WireItem.self).version
        let moved = try f.putItem(renamed, ifMatch: version).decode(WireItem.self)
        #expect(moved.name == "renamed" && moved.target == "../a/b")
        renamed.kind = .file; renamed.target = nil; renamed.size = 0; renamed.sha256 = emptySHA256
        #expect(try f.putItem(renamed, ifMatch: moved.version).status == 400)
    }

    @Test func badLinksAndLocalOnlyKindsAreRefused() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        var tooLong = link("x1", "long", String(repeating: "x", count: 4096))
        #expect(try f.putItem(tooLong).status == 400)
        tooLong.target = ""
        tooLong.size = 0
        #expect(try f.putItem(tooLong).status == 400)                       // an empty target
        var noTarget = link("x2", "none", "t")
        noTarget.target = nil
        #expect(try f.putItem(noTarget).status == 400)
        var wrongSize = link("x3", "size", "abc")
        wrongSize.size = 7
        #expect(try f.putItem(wrongSize).status == 400)
        #expect(try f.putBlob(Array("content".utf8)).status == 201)
        var withContent = link("x4", "content", "abcdefg")
        withContent.sha256 = sha256Hex(Array("content".utf8))
        #expect(try f.putItem(withContent).status == 400)                   // a link has no content
        var withConflict = link("x5", "conflict", "t")
        withConflict.conflicts = [WireConflict(id: "c1", sha256: emptySHA256, size: 0, mtime: 1, device: "d")]
        #expect(try f.putItem(withConflict).status == 400)
        var fileWithTarget = file("x6", "file", [])
        fileWithTarget.target = "t"
        #expect(try f.putItem(fileWithTarget).status == 400)
        for kind in [ItemKind.fifo, .socket] {
            let node = WireItem(id: "x7", parent: WireRules.documentsID, name: "node", kind: kind, mode: 0o644,
                                mtime: 1, size: 0, sha256: "", device: "test")
            #expect(try f.putItem(node).status == 400)
        }
        let feed = try f.call("GET", "/v1/containers/\(cid)/changes").decode(WireChanges.self)
        #expect(feed.items.map(\.id) == [WireRules.rootID, WireRules.documentsID]) // nothing else was stored
    }

    @Test func itemsWithoutTargetEncodeAsBefore() throws {
        let json = #"{"id":"a","parent":"root","name":"n","kind":"dir","mode":493,"mtime":1,"size":0,"sha256":"","version":2,"deleted":false,"device":"d","xattrs":{},"conflicts":[]}"#
        let item = try JSONDecoder().decode(WireItem.self, from: Data(json.utf8))
        #expect(item.target == nil)
        #expect(!String(decoding: try JSONEncoder.wire.encode(item), as: UTF8.self).contains("target"))
        #expect(String(decoding: try JSONEncoder.wire.encode(link("l", "n", "t")), as: UTF8.self).contains(#""target":"t""#))
    }

    /// A stub data directory made before links (no `target` column) opens and stores links.
    @Test func anOlderDatabaseGainsTheTargetColumn() throws {
        let dir = NSTemporaryDirectory() + "stubtest-" + randomHex(bytes: 8)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try makeDirectories(dir)
        do {
            let old = try Database(path: dir + "/stub.sqlite")
            try old.exec("""
                CREATE TABLE containers (id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
                CREATE TABLE items (
                    container TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, name TEXT NOT NULL, kind TEXT NOT NULL,
                    mode INTEGER NOT NULL, mtime INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL,
                    version INTEGER NOT NULL, deleted INTEGER NOT NULL, device TEXT NOT NULL,
                    xattrs TEXT NOT NULL, conflicts TEXT NOT NULL,
                    PRIMARY KEY (container, id));
                INSERT INTO containers VALUES ('\(cid)', 2);
                INSERT INTO items VALUES ('\(cid)', 'root', NULL, '', 'dir', 493, 1, 0, '', 1, 0, 'stub', '{}', '[]');
                INSERT INTO items VALUES ('\(cid)', 'documents', 'root', 'Documents', 'dir', 493, 1, 0, '', 2, 0, 'stub', '{}', '[]');
                """)
        }
        let store = try StubStore(dataDir: dir)
        #expect(try store.item(cid, WireRules.documentsID).name == "Documents")
        let stored = try store.putItem(cid, "l1", link("l1", "l", "../t"), .ifNoneMatch)
        #expect(stored.target == "../t" && stored.version == 3)
        #expect(try store.item(cid, "l1").target == "../t")
    }
}
