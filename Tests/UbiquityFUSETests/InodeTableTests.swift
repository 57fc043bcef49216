// The inode table: the kernel's lookup counts decide how long an inode lives, the root lives forever, and an
// inode number is never given to a second item (so the generation can stay 0).
import Dispatch
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
}
