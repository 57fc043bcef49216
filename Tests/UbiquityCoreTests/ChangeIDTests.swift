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
}

private extension MemoryRemote {
    /// The item, or nil when the remote has none.
    func stored(_ id: String) -> WireItem? { try? item(id) }
}
