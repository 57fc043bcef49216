// The inode table: the kernel's lookup counts decide how long a node id lives, the root lives forever, a node id
// is never given to a second item (so the generation can stay 0), and the inode number programs see is the
// item's own, whatever happens to its node ids.
import Dispatch
import Foundation
import Testing
@testable import UbiquityFUSE

@Suite struct InodeTableTests {
    let table = InodeTable(rootID: "root")

    @Test func theRootIsInodeOneAndIsNeverForgotten() {
        #expect(table.id(InodeTable.rootIno) == "root")
        #expect(table.known("root") == InodeTable.rootIno)
        table.forget(InodeTable.rootIno, 5)
        #expect(table.id(InodeTable.rootIno) == "root")
        #expect(table.count == 1)
    }

    @Test func eachEntryReplyCountsOneLookupAndForgetSubtracts() {
        let ino = table.remember("a")
        #expect(table.remember("a") == ino)
        #expect(table.remember("a") == ino)
        table.forget(ino, 1)
        #expect(table.id(ino) == "a")
        table.forget(ino, 1)
        #expect(table.known("a") == ino)
        table.forget(ino, 1)
        #expect(table.id(ino) == nil)
        #expect(table.known("a") == nil)
        #expect(table.count == 1)
    }

    @Test func aRetiredInodeStaysForItsHoldersAndTheNextLookupGetsANewOne() {
        let old = table.remember("a")
        table.retire(old)
        #expect(table.id(old) == "a")         // the holders' requests still reach the item
        #expect(table.known("a") == nil)      // no invalidation is sent to the retired inode
        let new = table.remember("a")
        #expect(new != old && table.known("a") == new)
        table.forget(old, 1)                  // the holders' last forget leaves the new inode alone
        #expect(table.id(old) == nil && table.known("a") == new && table.id(new) == "a")
        table.retire(InodeTable.rootIno)      // the root is never retired
        #expect(table.known("root") == InodeTable.rootIno)
    }

    @Test func aForgetOfManyLookupsAtOnceDropsTheInode() {
        let ino = table.remember("a")
        for _ in 0..<9 { _ = table.remember("a") }
        table.forget(ino, 10)
        #expect(table.id(ino) == nil)
    }

    @Test func distinctItemsGetDistinctInodes() {
        let a = table.remember("a"), b = table.remember("b")
        #expect(a != b && a != InodeTable.rootIno && b != InodeTable.rootIno)
        #expect(table.id(a) == "a" && table.id(b) == "b")
        #expect(table.count == 3)
    }

    @Test func knownDoesNotCountALookup() {
        #expect(table.known("a") == nil)
        let ino = table.remember("a")
        #expect(table.known("a") == ino)
        table.forget(ino, 1)
        #expect(table.id(ino) == nil)
    }

    @Test func anInodeNumberIsNeverReusedForAnotherItem() {
        var old = Set<UInt64>()
        for i in 0..<100 { old.insert(table.remember("item\(i)")) }
        for ino in old { table.forget(ino, 1) }
        #expect(table.count == 1)
        // The same item comes back under a new number too: a stale inode of the kernel never names it again.
        let again = table.remember("item0")
        let other = table.remember("other")
        #expect(!old.contains(again) && !old.contains(other))
        #expect(again > old.max()! && other > old.max()!)
    }

    @Test func aForgetOfAnUnknownInodeChangesNothing() {
        let ino = table.remember("a")
        table.forget(ino + 1000, 1)
        #expect(table.id(ino) == "a")
        #expect(table.count == 2)
    }

    @Test func concurrentLookupsAndForgetsBalanceOut() {
        let ids = (0..<16).map { "item\($0)" }
        DispatchQueue.concurrentPerform(iterations: 800) { i in
            let ino = table.remember(ids[i % ids.count])
            table.forget(ino, 1)
        }
        #expect(table.count == 1)
        for id in ids { #expect(table.known(id) == nil) }
    }

    @Test func anItemKeepsItsInodeNumberThroughForgets() {
        let id = "0123456789abcdef0123456789abcdef"
        let number = table.number(id)
        let first = table.remember(id)
        #expect(table.number(ofNode: first) == number)
        table.forget(first, 1)                // the kernel dropped it (echo 2 > /proc/sys/vm/drop_caches)
        let second = table.remember(id)
        #expect(second != first && table.number(id) == number && table.number(ofNode: second) == number)
        // Another table over the same store (a remount) shows the same number.
        #expect(InodeTable(rootID: "root").number(id) == number)
    }

    @Test func aRetiredNodeKeepsItsNumberAndTheNameLeadsToANewOne() {
        let id = "0123456789abcdef0123456789abcdef"
        let old = table.remember(id), number = table.number(id)
        table.retire(old)                     // its content replaced while held: a file replaced by rename
        let new = table.remember(id)
        #expect(table.number(ofNode: old) == number, "the holders see the number they saw")
        #expect(table.number(ofNode: new) == table.number(id) && table.number(id) != number)
        table.forget(old, 1)
        table.forget(new, 1)
        #expect(table.number(ofNode: new) == nil)
        let again = table.remember(id)
        #expect(table.number(ofNode: again) == table.number(id) && table.number(id) != number)
    }

    @Test func inodeNumbersKeepToTheirSpaces() {
        #expect(table.number("root") == InodeTable.rootIno)
        var seen = Set<UInt64>()
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<100_000 {
            let id = String(format: "%016llx%016llx", rng.next() as UInt64, rng.next() as UInt64)
            let n = table.number(id)
            #expect(n > 1 && n < 1 << 62, "an item's number is below the virtual nodes' space")
            seen.insert(n)
        }
        #expect(seen.count == 100_000, "no two of 100,000 random ids share a number")
        for id in ["v:root", "c:0123456789abcdef0123456789abcdef:77", "kv:key", "t:", "ti:0123"] {
            let n = table.number(id)
            #expect(n >= 1 << 62 && n < 1 << 63, "\(id) is in the virtual nodes' space")
        }
        #expect(table.number("kv:a") != table.number("kv:b"))
    }
}
