// The compact index of items (ItemIndex.swift): every field of every kind of item comes back as it went in,
// through the store too; removals keep every other item findable; a rollback restores what was overwritten.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore

struct ItemIndexTests {
    static let sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

    static func file(_ id: String, parent: String? = "documents", name: String = "a.txt") -> Item {
        Item(id: id, parent: parent, name: name, kind: .file, mode: 0o644, mtime: 1_000, ctime: 2_000, size: 5,
             remoteVersion: 7, remoteSHA: sha, remoteSize: 5, device: "laptop", hasLocal: true, localSHA: sha,
             dirty: false, metaDirty: false, deleted: false, pinned: false, xattrs: [:], conflicts: [])
    }

    /// Items that exercise every field and every packed case: hex and other ids, no parent, long and short
    /// names, each flag, hashes that are empty, upper case, other than the remote's or absent, a remote size
    /// other than the size, xattrs, conflicts, a link target, an access time, a folder's entry time, each kind.
    static var variety: [Item] {
        var items: [Item] = []
        var root = file("root", parent: nil, name: "")
        root.kind = .dir; root.remoteSHA = ""; root.localSHA = nil; root.size = 0; root.remoteSize = 0
        items.append(root)
        items.append(file("0123456789abcdef0123456789abcdef", name: "a name longer than fifteen bytes.txt"))
        items.append(file("ffffffffffffffff0000000000000001", name: "looks like an interned code"))
        items.append(file("0123456789ABCDEF0123456789ABCDEF", name: "upper-case id"))
        var dirty = file("f-dirty")
        dirty.dirty = true; dirty.metaDirty = true; dirty.localSHA = nil; dirty.size = 99; dirty.remoteSize = 5
        items.append(dirty)
        var stale = file("f-stale")
        stale.localSHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        stale.pinned = true; stale.deleted = true; stale.excluded = true; stale.localOnlyAbove = true
        items.append(stale)
        var zero = file("f-zero")
        zero.remoteSHA = String(repeating: "0", count: 64); zero.localSHA = zero.remoteSHA
        items.append(zero)
        var odd = file("f-odd")
        odd.remoteSHA = Self.sha.uppercased(); odd.localSHA = Self.sha; odd.hasLocal = false
        items.append(odd)
        var extras = file("f-extras", name: "é.txt")
        extras.xattrs = ["user.a": [1, 2, 3], "user.empty": []]
        extras.conflicts = [WireConflict(id: "c1", sha256: Self.sha, size: 3, mtime: 4, device: "desktop")]
        extras.atime = 123; extras.device = "a device with a rather long name"
        items.append(extras)
        var owned = file("f-owned")
        owned.owner = Owner(uid: 65534, gid: .max)
        items.append(owned)
        var link = file("l1", name: "link")
        link.kind = .symlink; link.target = "../a.txt"; link.remoteSHA = ""; link.localSHA = nil; link.size = 8
        link.remoteSize = 8
        items.append(link)
        var dir = file("d1", name: "folder")
        dir.kind = .dir; dir.entriesMTime = 5_000; dir.remoteSHA = ""; dir.localSHA = nil; dir.remoteVersion = 0
        items.append(dir)
        for kind in [ItemKind.fifo, .socket] {
            var node = file("n-\(kind)", name: "node-\(kind)")
            node.kind = kind; node.mode = 0o600; node.remoteSHA = ""; node.localSHA = nil; node.size = 0
            node.remoteSize = 0; node.mtime = -1; node.ctime = .max
            items.append(node)
        }
        return items
    }

    @Test func everyFieldRoundTrips() {
        var index = ItemIndex()
        for item in Self.variety { index[item.id] = item }
        #expect(index.count == Self.variety.count)
        for item in Self.variety {
            let back = index[item.id]
            #expect(back == item, "\(item.id)")
            #expect(back?.name.utf8.elementsEqual(item.name.utf8) == true)
        }
        #expect(Set(index.values.map(\.id)) == Set(Self.variety.map(\.id)))
    }

    @Test func overwritesAndRemovalsKeepTheRest() throws {
        var index = ItemIndex()
        var ids: [String] = []
        for i in 0..<5_000 {
            let id = randomHex(bytes: 16)
            ids.append(id)
            index[id] = Self.file(id, name: "f\(i)")
        }
        for (i, id) in ids.enumerated() where i % 3 == 0 { index[id] = nil }
        for (i, id) in ids.enumerated() where i % 3 == 1 {
            var item = try #require(index[id])
            item.xattrs = ["user.n": [UInt8(i & 0xff)]]
            item.dirty = true
            index[id] = item
        }
        #expect(index.count == ids.count - (ids.count + 2) / 3)
        for (i, id) in ids.enumerated() {
            switch i % 3 {
            case 0: #expect(index[id] == nil)
            case 1: #expect(index[id]?.xattrs == ["user.n": [UInt8(i & 0xff)]] && index[id]?.dirty == true)
            default: #expect(index[id] == Self.file(id, name: "f\(i)"))
            }
        }
        // Freed slots are used again, and their old extras do not leak into the new items.
        for i in 0..<2_000 { index["new\(i)"] = Self.file("new\(i)") }
        #expect(index["new1999"]?.xattrs == [:])
        #expect(Array(index.values).count == index.count)
    }

    @Test func rollBackRestoresWhatWasOverwritten() {
        var index = ItemIndex()
        let a = Self.file("a"), b = Self.file("b")
        index["a"] = a
        index["b"] = b
        index.undo = []
        var changed = a
        changed.name = "changed"
        index["a"] = changed
        index["b"] = nil
        index["c"] = Self.file("c")
        index.rollBack()
        #expect(index["a"] == a && index["b"] == b && index["c"] == nil && index.count == 2)
    }

    @Test func localOnlyAboveFollowsTheParents() {
        var index = ItemIndex()
        var root = Self.file("root", parent: nil, name: "")
        root.kind = .dir
        var folder = Self.file("d", parent: "root", name: "keep.nosync")
        folder.kind = .dir
        var inner = Self.file("d2", parent: "d", name: "inner")
        inner.kind = .dir
        for item in [root, folder, inner, Self.file("f", parent: "d2"), Self.file("g", parent: "root")] {
            index[item.id] = item
        }
        index.markLocalOnlyAbove()
        #expect(index["d"]?.localOnlyAbove == false && index["d"]?.isLocalOnly == true)
        #expect(index["d2"]?.localOnlyAbove == true && index["f"]?.localOnlyAbove == true)
        #expect(index["g"]?.localOnlyAbove == false && index["root"]?.localOnlyAbove == false)
    }

    /// Through the store and a new container: the load reads each row into the index as it was saved.
    @Test func storeLoadRoundTrips() throws {
        let dir = NSTemporaryDirectory() + "ubq-index-" + randomHex(bytes: 6)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try Store(directory: dir)
        var saved: [Item] = []
        for var item in Self.variety where item.id != "root" {
            item.localOnlyAbove = false
            item.hasLocal = item.kind != .file ? true : false // no content file: nothing to rescan
            item.localSHA = item.hasLocal ? item.localSHA : nil
            item.parent = "root"
            try store.save(item)
            saved.append(item)
        }
        var state = CoreState(store: store, config: ContainerConfig(device: "here"))
        try state.load()
        for item in saved {
            var expected = item
            expected.localOnlyAbove = false
            var got = try #require(state.items[item.id])
            got.localOnlyAbove = false
            #expect(got == expected, "\(item.id)")
        }
    }

    /// The name table (its own open-addressing map) agrees with a dictionary through adds, replacements and
    /// removals, byte for byte: an NFC and an NFD spelling are two names.
    @Test func nameTableAgreesWithADictionary() {
        var table: NameTable = [:]
        var reference: [[UInt8]: String] = [:]
        var rng = SystemRandomNumberGenerator()
        for step in 0..<20_000 {
            let name = "n\(Int.random(in: 0..<3_000, using: &rng))" + (step % 7 == 0 ? "\u{e9}" : "e\u{301}")
            if Int.random(in: 0..<3, using: &rng) == 0 {
                table[name] = nil
                reference[Array(name.utf8)] = nil
            } else {
                let id = randomHex(bytes: 16)
                table[name] = id
                reference[Array(name.utf8)] = id
            }
        }
        #expect(table.count == reference.count)
        for (bytes, id) in reference { #expect(table[String(decoding: bytes, as: UTF8.self)] == id) }
        var seen = 0
        for (name, id) in table {
            #expect(reference[Array(name.utf8)] == id)
            seen += 1
        }
        #expect(seen == reference.count)
    }
}
