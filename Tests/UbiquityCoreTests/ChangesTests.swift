// The live query's change stream: every local and remote change, and transfer progress, reaches it as an id,
// once per drain however often the item changed, and nothing is kept while nobody follows.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct ChangesTests {
    let remote = MemoryRemote()

    @Test func anIdChangedManyTimesIsOneEntryOfABatch() {
        let changes = ItemChanges()
        changes.follow(true)
        for _ in 0..<1000 { changes.note("a") }
        changes.note("b")
        #expect(changes.drain() == ["a", "b"])
        #expect(changes.drain().isEmpty)
    }

    @Test func nothingIsKeptWhileNobodyFollows() {
        let changes = ItemChanges()
        changes.note("a")
        changes.follow(true)
        changes.note("b")
        changes.follow(false)
        changes.note("c")
        #expect(changes.drain().isEmpty)
    }

    @Test func localCreatesRenamesAndDeletesAreChanges() throws {
        let a = try Device(remote, name: "a")
        a.container.changes.follow(true)
        let f = try a.createFile("f.txt", bytes("one"))
        #expect(a.container.changes.drain().contains(f.id))
        try a.container.rename(parent: a.docs, name: "f.txt", newParent: a.docs, newName: "g.txt", noReplace: false)
        #expect(a.container.changes.drain().contains(f.id))
        try a.container.remove(parent: a.docs, name: "g.txt", directory: false)
        #expect(a.container.changes.drain().contains(f.id))
    }

    @Test func remoteChangesAndDownloadsAreChanges() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        b.container.changes.follow(true)
        let f = try a.createFile("r.txt", bytes("remote"))
        var seen: Set<String> = []
        #expect(eventually { seen.formUnion(b.container.changes.drain()); return seen.contains(f.id) })
        seen = []
        #expect(b.fetch(f.id) != nil)
        seen.formUnion(b.container.changes.drain())
        #expect(seen.contains(f.id))
    }
}
