// The refusals of malformed requests (docs/WIRE.md "Conditional writes", "The key-value store"), run against
// each backend of `Backend.all`: a malformed item is refused (400) before its condition is looked at, the root
// may be updated, extended attributes and conflict versions are checked, and malformed ids, hashes and keys
// are refused rather than not found.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore

@Suite(.serialized) struct ValidationConformanceTests {
    @Test(arguments: Backend.all) func malformedItemIsRefusedBeforeItsCondition(backend: Backend) throws {
        let s = try backend.make(nil)
        let made = try s.remote.putItem(file("f1"), ifMatch: nil)
        let missingBlob = file("f1", bytes: Array("no such blob".utf8))
        #expect(status(failure({ try s.remote.putItem(missingBlob, ifMatch: nil) })) == 400, "not 412")
        #expect(status(failure({ try s.remote.putItem(missingBlob, ifMatch: made.version + 5) })) == 400, "not 412")
        var noParent = directory("d1")
        noParent.parent = nil
        #expect(status(failure({ try s.remote.putItem(noParent, ifMatch: nil) })) == 400, "not 422")
    }

    @Test(arguments: Backend.all) func theRootMayBeUpdatedButNotMoved(backend: Backend) throws {
        let s = try backend.make(nil)
        let root = try s.remote.item(WireRules.rootID)
        var changed = root
        changed.mode = 0o700
        changed.xattrs = ["user.tag": Data("blue".utf8).base64EncodedString()]
        let stored = try s.remote.putItem(changed, ifMatch: root.version)
        #expect(stored.mode == 0o700 && stored.parent == nil && stored.name == "" && stored.version > root.version)
        #expect(stored.xattrs == changed.xattrs)
        var moved = stored
        moved.parent = WireRules.documentsID
        moved.name = "up"
        #expect(status(failure({ try s.remote.putItem(moved, ifMatch: stored.version) })) == 400)
    }

    /// Part 15: the names the mount gives a meaning of its own are no item's, whoever writes them.
    @Test(arguments: Backend.all) func theNamesTheMountReservesAreRefused(backend: Backend) throws {
        let s = try backend.make(nil)
        // Part 21: the desktop's trash folders in the root too (a folder renamed .Trash-0 there synced).
        for name in [".versions", ".kvstore", ".Trash", ".Trash-0", ".Trash-1002"] {
            #expect(status(failure({ try s.remote.putItem(directory("r1", in: WireRules.rootID, name: name), ifMatch: nil) })) == 400,
                    "\(name) in the root")
            #expect(try s.remote.putItem(directory("ok" + name.dropFirst(), name: name), ifMatch: nil).name == name,
                    "\(name) in a folder is an ordinary name")
        }
        #expect(status(failure({ try s.remote.putItem(file("n1", name: "x.nosync"), ifMatch: nil) })) == 400)
        let made = try s.remote.putItem(file("n2", name: "x"), ifMatch: nil)
        var renamed = made
        renamed.name = "x.nosync"
        #expect(status(failure({ try s.remote.putItem(renamed, ifMatch: made.version) })) == 400, "nor by a rename")
        #expect(try s.remote.item("n2") == made)
    }

    @Test(arguments: Backend.all) func modeKeepsOnlyPermissionBits(backend: Backend) throws {
        let s = try backend.make(nil)
        var d = directory("d1")
        d.mode = 0o40755
        #expect(try s.remote.putItem(d, ifMatch: nil).mode == 0o755)
        // Part 15: setuid, setgid and sticky never travel (a setuid file for whoever copies it out as root).
        var f = file("f1")
        f.mode = 0o7755
        #expect(try s.remote.putItem(f, ifMatch: nil).mode == 0o755)
        #expect(try s.remote.item("f1").mode == 0o755)
    }

    @Test(arguments: Backend.all) func extendedAttributesAreBase64WithinTheirLimit(backend: Backend) throws {
        let s = try backend.make(nil)
        var d = directory("d1")
        d.xattrs = ["user.color": Data("red".utf8).base64EncodedString()]
        let made = try s.remote.putItem(d, ifMatch: nil)
        #expect(made.xattrs == d.xattrs)
        d.xattrs = ["user.color": "not base64!"]
        #expect(status(failure({ try s.remote.putItem(d, ifMatch: made.version) })) == 400)
        // The limit counts names and values (not their base64), as the client counts them.
        let fits = WireRules.maxXattrBytes - "user.big".utf8.count
        d.xattrs = ["user.big": Data([UInt8](repeating: 1, count: fits + 1)).base64EncodedString()]
        #expect(status(failure({ try s.remote.putItem(d, ifMatch: made.version) })) == 400, "over 64 KiB")
        #expect(try s.remote.item("d1") == made, "a refused write changes nothing")
        d.xattrs = ["user.big": Data([UInt8](repeating: 1, count: fits)).base64EncodedString()]
        #expect(try s.remote.putItem(d, ifMatch: made.version).xattrs == d.xattrs, "64 KiB exactly")
    }

    @Test(arguments: Backend.all) func conflictVersionsNeedUniqueIdsAndTheirBlobs(backend: Backend) throws {
        let s = try backend.make(nil)
        let other = Array("the other version".utf8)
        var f = file("f1")
        f.conflicts = [WireConflict(id: "c1", sha256: sha256Hex(other), size: Int64(other.count), mtime: 1, device: "b")]
        #expect(status(failure({ try s.remote.putItem(f, ifMatch: nil) })) == 400, "the conflict's blob is missing")
        try s.upload(other)
        let made = try s.remote.putItem(f, ifMatch: nil)
        #expect(made.conflicts == f.conflicts)
        f.conflicts.append(f.conflicts[0])
        #expect(status(failure({ try s.remote.putItem(f, ifMatch: made.version) })) == 400, "a repeated id")
    }

    @Test(arguments: Backend.all) func malformedIdsAndHashesAreRefusedNotMissing(backend: Backend) throws {
        let s = try backend.make(nil)
        #expect(status(failure({ try s.remote.item("bad id!") })) == 400)
        #expect(status(failure({ try s.remote.deleteItem("bad id!", ifMatch: 1) })) == 400)
        #expect(status(failure({ try s.remote.hasBlob(sha256: "nothex") })) == 400)
        #expect(status(failure({ try s.download("nothex") })) == 400)
    }

    @Test(arguments: Backend.all) func malformedKeyValueWritesAreRefused(backend: Backend) throws {
        let s = try backend.make(nil)
        let long = String(repeating: "k", count: KVLimits.maxKeyBytes + 1)
        #expect(status(failure({ try s.kv.putKV(WireKVEntry(key: long, value: .integer(1), mtime: 1, device: "a")) })) == 400)
        let both = WireKVEntry(key: "k", value: .integer(1), mtime: 1, device: "a", deleted: true)
        #expect(status(failure({ try s.kv.putKV(both) })) == 400, "a value, or deleted, not both")
        #expect(try s.kv.kvChanges(since: 0, waitSeconds: 0).entries == [])
    }

    @Test(arguments: Backend.all) func keyValueValuesKeepTheirTypes(backend: Backend) throws {
        let s = try backend.make(nil)
        let value = KVValue.dictionary(["s": .string("é"), "i": .integer(-3), "r": .real(1.5), "b": .boolean(true),
                                        "d": .date(1_700_000_000_000_000_000), "x": .data([0, 255]),
                                        "a": .array([.integer(1), .string("two")])])
        let stored = try s.kv.putKV(WireKVEntry(key: "all", value: value, mtime: 1, device: "a"))
        #expect(stored.value == value)
        #expect(try s.kv.kvChanges(since: 0, waitSeconds: 0).entries.first?.value == value)
    }
}
