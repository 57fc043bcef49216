// The values the sync rules compare with: an item's place and metadata (names byte for byte), the one xattr
// conversion between the core's bytes and the wire's base64, and the typed key of a content file.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore

@Suite struct SyncRulesTests {
    let nfc = "caf\u{e9}.txt", nfd = "cafe\u{301}.txt"

    func wire(name: String, xattrs: [String: String] = [:]) -> WireItem {
        WireItem(id: "f1", parent: "documents", name: name, kind: .file, mode: 0o644, mtime: 1_700_000_000,
                 size: 3, sha256: "abc", version: 4, deleted: false, device: "a", xattrs: xattrs, conflicts: [])
    }

    func item(name: String, xattrs: [String: [UInt8]] = [:]) -> Item {
        var item = Item(id: "f1", parent: nil, name: "", kind: .file, mode: 0, mtime: 0, ctime: 0, size: 0,
                        remoteVersion: 0, remoteSHA: "", remoteSize: 0, device: "", hasLocal: false, localSHA: nil,
                        dirty: false, metaDirty: false, deleted: false, pinned: false, xattrs: [:], conflicts: [])
        item.adopt(wire(name: name, xattrs: Xattrs.toWire(xattrs)), capping: 0)
        return item
    }

    @Test func canonicallyEquivalentNamesAreDifferentPlacesAndMetadata() {
        #expect(nfc == nfd) // Swift's String equality, which the rules must not use for names
        #expect(item(name: nfc).place != item(name: nfd).place)
        #expect(item(name: nfc).metadata != item(name: nfd).metadata)
        #expect(item(name: nfc).metadata == item(name: nfc).metadata)
        #expect(item(name: nfc).metadata != wire(name: nfd).metadata)
    }

    /// A mode from the wire: setuid, setgid and sticky stay this device's; of the capped bits (group and other
    /// write, by the mounting user's umask) it may take away but not add.
    @Test func aModeFromTheWireKeepsLocalBitsAndAddsNoCappedOnes() {
        #expect(Item.mode(0o777, keepingLocalBitsOf: 0o755, capping: 0o022) == 0o755)
        #expect(Item.mode(0o777, keepingLocalBitsOf: 0, capping: 0o002) == 0o775)
        #expect(Item.mode(0o777, keepingLocalBitsOf: 0o775, capping: 0o022) == 0o775)
        #expect(Item.mode(0o700, keepingLocalBitsOf: 0o777, capping: 0o022) == 0o700)
        #expect(Item.mode(0o6777, keepingLocalBitsOf: 0o1755, capping: 0o022) == 0o1755)
        #expect(Item.mode(0o777, keepingLocalBitsOf: 0, capping: 0) == 0o777)
        // What the cap held back is kept, and goes with the item's metadata (so with its pushes) as it came.
        var it = item(name: "f")
        it.mode = 0o644
        it.takeMode(0o666, capping: 0o022)
        #expect((it.mode, it.cappedModeBits, it.sharedMode, it.metadata.mode) == (0o644, 0o022, 0o666, 0o666))
        it.takeMode(0o640, capping: 0o022)
        #expect((it.mode, it.cappedModeBits, it.sharedMode) == (0o640, 0, 0o640))
    }

    @Test func aLocalItemAndTheWireStateItCameFromHaveEqualMetadata() {
        let x: [String: [UInt8]] = ["user.tag": [0, 1, 255], "user.empty": []]
        let local = item(name: nfd, xattrs: x)
        #expect(local.xattrs == x)
        #expect(local.metadata == wire(name: nfd, xattrs: Xattrs.toWire(x)).metadata)
        var moved = local
        moved.mode = 0o600
        #expect(moved.metadata != local.metadata)
    }

    @Test func renamedComparesAllButTheName() {
        let a = item(name: nfc).metadata
        var b = item(name: nfd).metadata
        #expect(a != b && a.named(nfd) == b)
        b.place.parent = "other"
        #expect(a.named(nfd) != b)
    }

    @Test func xattrsRoundTripThroughTheWireAndBadBase64IsDropped() {
        let x: [String: [UInt8]] = ["user.a": Array("hello".utf8), "user.b": [0xff, 0x00]]
        #expect(Xattrs.toWire(x)["user.a"] == "aGVsbG8=")
        #expect(Xattrs.fromWire(Xattrs.toWire(x)) == x)
        #expect(Xattrs.fromWire(["user.a": "aGVsbG8=", "user.bad": "not base64!"]) == ["user.a": Array("hello".utf8)])
    }

    @Test func contentKeysNameAnItemOrOneOfItsConflictVersions() throws {
        let current = try #require(ContentKey(parsing: "item1"))
        #expect(current.item == "item1" && current.conflict == nil && current.description == "item1")
        let version = try #require(ContentKey(parsing: "item1.c0ffee"))
        #expect(version.item == "item1" && version.conflict == "c0ffee")
        #expect(version.description == "item1.c0ffee")
        #expect(ContentKey(item: "item1", conflict: "c0ffee").description == "item1.c0ffee")
        #expect(ContentKey(parsing: "") == nil)
    }
}
