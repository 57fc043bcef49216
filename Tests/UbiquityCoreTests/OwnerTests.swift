// Ownership is this device's, as atime is: a new item belongs to its creator (in a setgid folder, to the
// folder's group), a change of owner is kept in the store and never pushed, and items from other devices
// belong to the mounting user.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct OwnerTests {
    let remote = MemoryRemote()
    static let mounting = Owner(uid: 1000, gid: 1000)
    static let nobody = Owner(uid: 65534, gid: 65534)

    func device(_ name: String, store: String? = nil) throws -> Device {
        try Device(remote, name: name, storeDirectory: store) { $0.owner = OwnerTests.mounting }
    }

    func settled(_ devices: [Device]) -> Bool { devices.allSatisfy { $0.pending == 0 } }

    @Test func newItemsBelongToTheirCreatorAndTheMountingUsersCarryNothing() throws {
        let a = try device("a")
        let mine = try a.container.createFile(parent: a.docs, name: "mine", mode: 0o644, owner: OwnerTests.mounting)
        let theirs = try a.container.makeDirectory(parent: a.docs, name: "theirs", mode: 0o755, owner: OwnerTests.nobody)
        #expect(mine.owner == nil && a.container.config.owner(of: mine) == OwnerTests.mounting)
        #expect(theirs.owner == OwnerTests.nobody)
    }

    /// Part 15: setuid, setgid and sticky are this device's, as the owner is: kept here, never sent, and never
    /// taken from the wire (a setuid file handed over by whoever holds a token).
    @Test func setuidSetgidAndStickyBitsStayOnTheirDevice() throws {
        let a = try device("a"), b = try device("b")
        let f = try a.createFile("tool", bytes("#!/bin/sh\n"))
        _ = try a.container.setAttributes(f.id, mode: 0o755, mtime: nil)
        #expect(eventually { settled([a]) && b.lookup("tool")?.mode == 0o755 })
        let version = try #require(remote.lookup(path: "Documents/tool")).version
        let special = try a.container.setAttributes(f.id, mode: 0o4755, mtime: nil)
        #expect(special.mode == 0o4755 && !special.metaDirty && a.pending == 0, "a change of those bits alone is not pushed")
        #expect(try #require(remote.lookup(path: "Documents/tool")).version == version)
        _ = try a.container.setAttributes(f.id, mode: 0o6711, mtime: nil)
        #expect(eventually { settled([a]) && b.lookup("tool")?.mode == 0o711 })
        #expect(try #require(remote.lookup(path: "Documents/tool")).mode == 0o711)
        #expect(a.container.item(f.id)?.mode == 0o6711, "kept here, also once the echo of its push came back")
        // A mode that comes from elsewhere leaves this device's bits as they are.
        _ = try b.container.setAttributes(f.id, mode: 0o700, mtime: nil)
        #expect(eventually { a.container.item(f.id)?.mode == 0o6700 })
        #expect(eventually { settled([a, b]) })
    }

    @Test func aChangeOfOwnerIsKeptHereAndNotPushed() throws {
        let store = TempDir()
        var f: Item
        do {
            let a = try device("a", store: store.path + "/store")
            let b = try device("b")
            f = try a.createFile("f", bytes("F"))
            #expect(eventually { settled([a]) && b.lookup("f") != nil })
            let version = try #require(remote.lookup(path: "Documents/f")).version
            let set = try a.container.setAttributes(f.id, mode: nil, mtime: nil, owner: Owner(uid: 1234, gid: 5678))
            #expect(set.owner == Owner(uid: 1234, gid: 5678) && set.ctime > f.ctime)
            #expect(!set.isPending && !set.metaDirty && a.pending == 0)
            #expect(remote.lookup(path: "Documents/f")?.version == version)
            #expect(b.lookup("f")?.owner == nil) // the mounting user's there
            // A change from elsewhere leaves the owner here alone.
            try b.write(try #require(b.lookup("f")).id, bytes("G"))
            #expect(eventually { settled([b]) && a.container.item(f.id)?.remoteVersion ?? 0 > version })
            #expect(a.container.item(f.id)?.owner == Owner(uid: 1234, gid: 5678))
        }
        let again = try device("a", store: store.path + "/store")
        #expect(again.container.item(f.id)?.owner == Owner(uid: 1234, gid: 5678))
        let back = try again.container.setAttributes(f.id, mode: nil, mtime: nil, owner: OwnerTests.mounting)
        #expect(back.owner == nil)
    }

    @Test func aSetGIDFolderGivesNewItemsItsGroupAndNewFoldersItsBit() throws {
        let a = try device("a")
        let shared = try a.container.makeDirectory(parent: a.docs, name: "shared", mode: 0o2777,
                                                   owner: Owner(uid: 0, gid: 5678))
        let f = try a.container.createFile(parent: shared.id, name: "f", mode: 0o644, owner: OwnerTests.nobody)
        let d = try a.container.makeDirectory(parent: shared.id, name: "d", mode: 0o755, owner: OwnerTests.nobody)
        #expect(f.owner == Owner(uid: 65534, gid: 5678) && f.mode == 0o644)
        #expect(d.owner == Owner(uid: 65534, gid: 5678) && d.mode == 0o2755)
        let plain = try a.container.createFile(parent: a.docs, name: "plain", mode: 0o644, owner: OwnerTests.nobody)
        #expect(plain.owner == OwnerTests.nobody)
    }
}
