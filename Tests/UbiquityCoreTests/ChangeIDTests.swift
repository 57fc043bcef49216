// Idempotent changes: the pusher sends each change's id, the same on every retry, and takes a retry the remote
// already applied as the success whose answer was lost, then the remote's newer state as a pull would.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct ChangeIDTests {
    let remote = MemoryRemote()

    /// A lands a write whose answer is lost; another device changes the file further and deletes it; A's retry
    /// is answered as applied: the delete stands, nothing comes back.
    @Test func aRetryAfterALostAnswerDoesNotReviveAFileDeletedElsewhere() throws {
        let seeded = remote.seed(path: "Documents/f.txt", bytes: bytes("one"), device: "seed", mtime: 1)
        let link = Link(remote)
        let a = try Device(link, name: "a")
        #expect(eventually { a.lookup("f.txt")?.remoteVersion == seeded.version })
        link.loseAnswers.value = 1
        try a.write(seeded.id, bytes("two"))
        #expect(eventually { remote.stored(seeded.id)?.sha256 == sha256Hex(bytes("two")) && link.offline })
        let further = remote.seed(path: "Documents/f.txt", bytes: bytes("three"), device: "b", mtime: 5)
        _ = try remote.deleteItem(seeded.id, ifMatch: further.version)
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 && a.lookup("f.txt") == nil })
        #expect(try remote.item(seeded.id).deleted)
        #expect(remote.lookup(path: "Documents/f.txt") == nil)
    }

    /// A lands a write whose answer is lost; another device edits the file further; A's retry is answered as
    /// applied and A takes that edit: no conflict version, the same content on both sides.
    @Test func aRetryAfterALostAnswerTakesALaterEditWithoutAConflict() throws {
        let seeded = remote.seed(path: "Documents/f.txt", bytes: bytes("one"), device: "seed", mtime: 1)
        let link = Link(remote)
        let a = try Device(link, name: "a")
        #expect(eventually { a.lookup("f.txt")?.remoteVersion == seeded.version })
        link.loseAnswers.value = 1
        try a.write(seeded.id, bytes("two"))
        #expect(eventually { remote.stored(seeded.id)?.sha256 == sha256Hex(bytes("two")) && link.offline })
        let further = remote.seed(path: "Documents/f.txt", bytes: bytes("three"), device: "b", mtime: 5)
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 && a.container.item(seeded.id)?.remoteVersion == further.version })
        let item = try #require(a.container.item(seeded.id))
        #expect(item.remoteSHA == sha256Hex(bytes("three")) && item.conflicts.isEmpty)
        #expect(try remote.item(seeded.id).version == further.version, "nothing written after the edit")
        #expect(try remote.item(seeded.id).conflicts.isEmpty)
    }

    /// A's create lands and its answer is lost; A writes the file again before it hears back. Its next push
    /// meets its own create on the remote: the new content goes on top of it, with no conflict version of
    /// A's first content (nobody else wrote the file).
    @Test func aWriteAfterACreateWhoseAnswerWasLostIsNoConflict() throws {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        link.loseAnswers.value = 1
        let created = try a.createFile("f.txt", bytes("one"))
        #expect(eventually { remote.stored(created.id)?.sha256 == sha256Hex(bytes("one")) && link.offline })
        try a.write(created.id, bytes("two, longer"))
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 })
        let stored = try #require(remote.stored(created.id))
        #expect(stored.sha256 == sha256Hex(bytes("two, longer")))
        #expect(stored.conflicts.isEmpty, "no conflict with its own earlier write")
        let item = try #require(a.container.item(created.id))
        #expect(item.remoteSHA == stored.sha256 && item.remoteVersion == stored.version && item.conflicts.isEmpty)
    }

    /// A renames a file written elsewhere; the rename lands and its answer is lost; then A deletes the file.
    /// The remote's newer version is A's own rename (its author is still the content's writer): the delete
    /// stands on every device, nothing comes back as an edit made elsewhere.
    @Test func aDeleteAfterARenameWhoseAnswerWasLostStands() throws {
        let seeded = remote.seed(path: "Documents/f.txt", bytes: bytes("one"), device: "seed", mtime: 1)
        let link = Link(remote)
        let a = try Device(link, name: "a")
        #expect(eventually { a.lookup("f.txt")?.remoteVersion == seeded.version })
        link.loseAnswers.value = 1
        try a.container.rename(parent: a.docs, name: "f.txt", newParent: a.docs, newName: "g.txt",
                                  noReplace: false)
        #expect(eventually { remote.stored(seeded.id)?.name == "g.txt" && link.offline })
        try a.container.remove(parent: a.docs, name: "g.txt", directory: false)
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 })
        #expect(try remote.item(seeded.id).deleted, "the delete stands")
        #expect(a.lookup("g.txt") == nil && a.lookup("f.txt") == nil)
    }
}

private extension MemoryRemote {
    /// The item, or nil when the remote has none.
    func stored(_ id: String) -> WireItem? { try? item(id) }
}
