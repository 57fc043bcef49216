// A save by rename (editors, atomic writers: a new file written beside the old one, then renamed over it) is an
// edit of the old file: it keeps its id, its history goes on, and an edit made elsewhere meanwhile becomes a
// conflict version rather than losing to a delete.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct SaveByRenameTests {
    let remote = MemoryRemote()

    /// Writes `text` to a new file `temp` and renames it over `name`, as an atomic writer does (offline, so
    /// the new file cannot go up in between, as it does not in the moments an editor takes).
    func save(_ dev: Device, _ link: Link, _ name: String, _ text: String, temp: String = ".doc.txt.tmp") throws -> SavedOver? {
        link.offline = true
        defer { link.offline = false; dev.nudge() }
        _ = try dev.createFile(temp, bytes(text))
        return try dev.container.rename(parent: dev.docs, name: temp, newParent: dev.docs, newName: name, noReplace: false)
    }

    @Test func theFileKeepsItsIdAndItsHistoryGoesOn() throws {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        let doc = try a.createFile("doc.txt", bytes("first"))
        #expect(eventually { a.pending == 0 })
        let saved = try save(a, link, "doc.txt", "second")
        #expect(saved?.kept == doc.id)
        #expect(a.lookup("doc.txt")?.id == doc.id && a.lookup(".doc.txt.tmp") == nil)
        #expect(a.content(doc.id) == bytes("second"))
        #expect(eventually { a.pending == 0 && remote.lookup(path: "Documents/doc.txt")?.sha256 == sha256Hex(bytes("second")) })
        #expect(remote.lookup(path: "Documents/doc.txt")?.id == doc.id)
        #expect(try remote.history(id: doc.id).count == 2, "the first content is the previous version")
        #expect(remote.lookup(path: "Documents/.doc.txt.tmp") == nil)
    }

    @Test func anEditElsewhereMeanwhileBecomesAConflictVersion() throws {
        let linkA = Link(remote), linkB = Link(remote)
        let a = try Device(linkA, name: "a"), b = try Device(linkB, name: "b")
        let doc = try a.createFile("doc.txt", bytes("base"))
        #expect(eventually { b.lookup("doc.txt")?.remoteSHA == sha256Hex(bytes("base")) })
        linkB.offline = true
        try b.write(doc.id, bytes("edited on b"), mtimeSeconds: 1_800_000_000)
        linkA.offline = true
        _ = try a.createFile(".doc.txt.tmp", bytes("saved on a"), mtimeSeconds: 1_800_000_100)
        #expect(try a.container.rename(parent: a.docs, name: ".doc.txt.tmp", newParent: a.docs, newName: "doc.txt",
                                       noReplace: false)?.kept == doc.id)
        linkB.offline = false
        b.nudge()
        #expect(eventually { remote.lookup(path: "Documents/doc.txt")?.sha256 == sha256Hex(bytes("edited on b")) })
        linkA.offline = false
        a.nudge()
        let settled = eventually(15) {
            guard let w = remote.lookup(path: "Documents/doc.txt") else { return false }
            return w.id == doc.id && w.sha256 == sha256Hex(bytes("saved on a")) && w.conflicts.count == 1
        }
        #expect(settled, "the later save is current and the edit on b a conflict version, nothing deleted")
        #expect(remote.lookup(path: "Documents/doc.txt")?.conflicts.first?.sha256 == sha256Hex(bytes("edited on b")))
    }

    @Test func aFileTheRemoteKnowsRenamedOverAnotherIsAPlainRename() throws {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        let old = try a.createFile("old.txt", bytes("old"))
        let other = try a.createFile("other.txt", bytes("other"))
        #expect(eventually { a.pending == 0 })
        #expect(try a.container.rename(parent: a.docs, name: "other.txt", newParent: a.docs, newName: "old.txt",
                                       noReplace: false) == nil)
        #expect(a.lookup("old.txt")?.id == other.id && a.container.item(old.id)?.deleted != false)
    }

    /// Device a with doc.txt uploaded, offline, and a new file `t` a program holds open for writing (truncated).
    func heldNewFile() throws -> (Link, Device, Item, Item, FileDescriptor) {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        let doc = try a.createFile("doc.txt", bytes("first"))
        #expect(eventually { a.pending == 0 })
        link.offline = true
        let temp = try a.container.createFile(parent: a.docs, name: "t", mode: 0o644)
        guard case .opened(let fd) = try a.container.open(temp.id, writable: true, truncate: true) else {
            throw CoreError.io("an open with O_TRUNC must not fetch")
        }
        return (link, a, doc, temp, fd)
    }

    /// The kernel sends the release of a closed file after close(2) returns: the rename can come first. The
    /// new file's handle becomes the file's, and what it writes is the file's.
    @Test func aNewFileStillOpenIsSavedOverAndItsHandleGoesOnWithTheFile() throws {
        let (link, a, doc, temp, fd) = try heldNewFile()
        try a.container.willWrite(temp.id)
        try fd.writeAll(bytes("sec"))
        try a.container.flushed(temp.id)
        #expect(try a.container.rename(parent: a.docs, name: "t", newParent: a.docs, newName: "doc.txt",
                                       noReplace: false) == SavedOver(new: temp.id, kept: doc.id))
        try fd.writeAll(bytes("ond"))
        fd.close()
        try a.container.flushed(doc.id)
        a.container.closed(doc.id, writable: true)
        #expect(a.lookup("doc.txt")?.id == doc.id && a.content(doc.id) == bytes("second"))
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 && remote.lookup(path: "Documents/doc.txt")?.sha256 == sha256Hex(bytes("second")) })
        // The handle was counted once and given back once: the file can be evicted now that nothing holds it.
        try a.container.evict(doc.id)
    }

    /// The adapter learns of a save by rename after the core made it: a release on another thread can still
    /// name the new file then. It gives the handle back to the file all the same; counted as still open for
    /// writing, the file would refuse every download and eviction for good (and serve its older copy).
    @Test func aReleaseThatStillNamesTheNewFileGivesTheHandleBackToTheFile() throws {
        let (link, a, doc, temp, fd) = try heldNewFile()
        try a.container.willWrite(temp.id, through: fd)
        try fd.writeAll(bytes("second"))
        #expect(try a.container.rename(parent: a.docs, name: "t", newParent: a.docs, newName: "doc.txt",
                                       noReplace: false) == SavedOver(new: temp.id, kept: doc.id))
        try a.container.release(temp.id, through: fd, Container.Release(writable: true, wrote: true))
        fd.close()
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 && remote.lookup(path: "Documents/doc.txt")?.sha256 == sha256Hex(bytes("second")) })
        try a.container.evict(doc.id)
    }

    @Test func aFileHeldOpenIsReplacedByARenameOverIt() throws {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        let doc = try a.createFile("doc.txt", bytes("first"))
        #expect(eventually { a.pending == 0 })
        guard case .opened(let fd) = try a.container.open(doc.id, writable: false, truncate: false) else {
            Issue.record("the file is local")
            return
        }
        link.offline = true
        let temp = try a.createFile("t", bytes("second"))
        #expect(try a.container.rename(parent: a.docs, name: "t", newParent: a.docs, newName: "doc.txt",
                                       noReplace: false) == nil)
        fd.close()
        a.container.closed(doc.id, writable: false)
        #expect(a.lookup("doc.txt")?.id == temp.id && a.container.item(doc.id)?.deleted != false)
    }

    /// vim with `backupcopy=no`, Word: the file renamed to a backup name, a new file written under its name,
    /// the backup removed.
    @Test func aBackupRemovedAfterTheNewFileTookItsNameCompletesTheSave() throws {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        let doc = try a.createFile("doc.txt", bytes("first"))
        #expect(eventually { a.pending == 0 })
        link.offline = true
        try a.container.rename(parent: a.docs, name: "doc.txt", newParent: a.docs, newName: "doc.txt~", noReplace: false)
        let new = try a.createFile("doc.txt", bytes("second"))
        let saved = try a.container.remove(parent: a.docs, name: "doc.txt~", directory: false)
        #expect(saved == SavedOver(new: new.id, kept: doc.id))
        #expect(a.lookup("doc.txt")?.id == doc.id && a.lookup("doc.txt~") == nil && a.container.item(new.id) == nil)
        #expect(a.content(doc.id) == bytes("second"))
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 && remote.lookup(path: "Documents/doc.txt")?.sha256 == sha256Hex(bytes("second")) })
        #expect(remote.lookup(path: "Documents/doc.txt")?.id == doc.id)
        #expect(try remote.history(id: doc.id).count >= 2)
        #expect(remote.lookup(path: "Documents/doc.txt~") == nil)
    }

    @Test func aFileRenamedAwayLongAgoIsRemovedAsItIs() throws {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        let doc = try a.createFile("doc.txt", bytes("first"))
        try a.container.rename(parent: a.docs, name: "doc.txt", newParent: a.docs, newName: "kept.txt", noReplace: false)
        #expect(eventually { a.pending == 0 })
        let other = try a.createFile("doc.txt", bytes("another file"))
        #expect(eventually { a.pending == 0 }) // the new file went up: it is a file of its own
        #expect(try a.container.remove(parent: a.docs, name: "kept.txt", directory: false) == nil)
        #expect(a.lookup("doc.txt")?.id == other.id && a.container.item(doc.id)?.deleted != false)
    }
}
