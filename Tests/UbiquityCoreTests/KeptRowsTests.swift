// A new file's rows are kept back until its close (Store.keptBack): the create, the marks of its writes and its
// chmod, chown and utimens before the close cost one commit, and a crash keeps exactly what a program closed.
import Foundation
import Testing
import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting

@Suite struct KeptRowsTests {
    let dir = TempDir()
    let remote = MemoryRemote()
    var docs: String { WireRules.rootID }

    /// A container with no background loop, on the same store each time (a reopen after a drop is a crash:
    /// nothing is written at a stop).
    let time = Box<Int64>(1_800_000_000_000_000_000)

    func open(background: Bool = false) throws -> Container {
        _ = quietLogs
        var config = ContainerConfig(device: "laptop")
        config.environment.backgroundTransfers = background
        config.environment.clock = { [time] in time.value }
        return try Container(store: try Store(directory: dir.path + "/store"), remote: remote, config: config)
    }

    func commits(_ c: Container) -> Int { c.read { $0.store.commits } }

    /// What `tar x` does to each file: create, write, utimens, chown, chmod, close (flush, then release).
    func extract(_ c: Container, _ name: String, close: Bool = true) throws -> String {
        let (item, fd) = try c.createAndOpen(parent: docs, name: name, mode: 0o600)
        _ = try c.write(item.id, through: fd) { pwrite(fd.raw, "hello", 5, 0) }
        _ = try c.setAttributes(item.id, mode: nil, mtime: 1_700_000_000_000_000_000)
        _ = try c.setAttributes(item.id, mode: nil, mtime: nil, owner: Owner(uid: 1000, gid: 1000))
        _ = try c.setAttributes(item.id, mode: 0o644, mtime: nil)
        if close {
            try c.flushed(item.id, through: fd)
            try c.release(item.id, through: fd, .init(writable: true, wrote: true))
        }
        return item.id
    }

    @Test func aNewFileFromCreateToCloseCostsOneCommit() throws {
        let c = try open()
        let before = commits(c)
        _ = try extract(c, "f")
        #expect(commits(c) - before == 1)
        #expect(try c.pendingChanges == 1)
    }

    @Test func aCrashKeepsWhatWasClosedAndDropsWhatWasNot() throws {
        var c: Container? = try open()
        let closed = try extract(c!, "closed")
        let unclosed = try extract(c!, "open", close: false)
        #expect(c!.lookup(parent: docs, name: "open")?.mode == 0o644)
        c = nil // kill -9
        c = try open()
        let kept = try #require(c!.lookup(parent: docs, name: "closed"))
        #expect(kept.id == closed && kept.mode == 0o644 && kept.size == 5 && kept.mtime == 1_700_000_000_000_000_000)
        #expect(c!.lookup(parent: docs, name: "open") == nil)
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/store/content/" + unclosed))
    }

    @Test func aKeptRowGoesToTheJournalBeforeThePusherReadsIt() throws {
        let c = try open()
        _ = try extract(c, "open", close: false)
        #expect(try c.read { s in try s.store.pendingIDs() }.isEmpty)
        c.writeKeptBack()
        #expect(try c.read { s in try s.store.pendingIDs() }.count == 1)
    }

    @Test func aFailedOperationLeavesTheRowsKeptBeforeIt() throws {
        let c = try open()
        let id = try extract(c, "open", close: false)
        #expect(throws: CoreError.exists) { _ = try c.createAndOpen(parent: docs, name: "open", mode: 0o600) }
        #expect(c.read { $0.store.isKeptBack(id) })
        try c.flushed(id)
        #expect(!c.read { $0.store.isKeptBack(id) })
    }

    @Test func aKeptRowIsWrittenByTheFirstCommitASecondLater() throws {
        let c = try open()
        let id = try extract(c, "open", close: false)
        _ = try c.makeDirectory(parent: docs, name: "d", mode: 0o755)
        #expect(c.read { $0.store.isKeptBack(id) })
        time.value += Store.keptBackNanoseconds + 1
        _ = try c.makeDirectory(parent: docs, name: "e", mode: 0o755)
        #expect(!c.read { $0.store.isKeptBack(id) })
    }

    /// Small files go up in a batch with their content inline, read into memory: no copy of them is made in
    /// staging (a burst of small files used to create and delete one file per upload there).
    @Test func smallFilesGoUpWithNoCopyInStaging() throws {
        let c = try open()
        let id = try extract(c, "small")
        _ = try extract(c, "small 2")
        _ = try extract(c, "small 3")
        func stagingTime() throws -> timespec { try FileDescriptor.open(c.stagingDirectory, O_RDONLY).stat().st_mtim }
        let before = try stagingTime()
        usleep(20_000)
        while case .pushed = c.pushOnce() {}
        #expect(c.item(id)?.isPending == false)
        #expect(try remote.item(id).size == 5)
        let after = try stagingTime()
        #expect(after.tv_sec == before.tv_sec && after.tv_nsec == before.tv_nsec)
    }

    /// The content file of a deleted file nothing holds is emptied and kept; the next new file takes it (no
    /// inode freed and allocated: see SpareFiles), unless it was large. A deleted file still open keeps its content
    /// aside as before.
    @Test func aNewFileTakesTheEmptiedContentFileOfADeletedOne() throws {
        let c = try open()
        let spares = c.read { $0.paths.spares }
        let first = try extract(c, "first")
        var st = stat()
        #expect(stat(dir.path + "/store/content/" + first, &st) == 0)
        let inode = st.st_ino
        try c.remove(parent: docs, name: "first", directory: false)
        #expect(spares.count == 0) // not before the delete is written
        c.writeKeptBack()
        #expect(spares.count == 1)
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/store/content/" + first))
        let second = try extract(c, "second")
        #expect(spares.count == 0)
        #expect(stat(dir.path + "/store/content/" + second, &st) == 0 && st.st_ino == inode && st.st_size == 5)
        #expect(c.lookup(parent: docs, name: "second")?.size == 5)

        let (large, lfd) = try c.createAndOpen(parent: docs, name: "large", mode: 0o600)
        _ = try c.write(large.id, through: lfd) { ftruncate(lfd.raw, off_t(SpareFiles.largestKept + 1)) }
        try c.flushed(large.id, through: lfd)
        try c.release(large.id, through: lfd, .init(writable: true, wrote: true))
        lfd.close()
        try c.remove(parent: docs, name: "large", directory: false)
        c.writeKeptBack()
        #expect(spares.count == 0) // removed: a large file is not emptied under the lock

        let (held, fd) = try c.createAndOpen(parent: docs, name: "held", mode: 0o600)
        try c.remove(parent: docs, name: "held", directory: false)
        #expect(spares.count == 0) // moved aside for the open descriptor, not emptied
        try c.release(held.id, through: fd, .init(writable: true))
        fd.close()
    }

    /// A folder's row kept back beside a new file in it (its entries' time) does not keep back a chmod of the
    /// folder: that is written at once (tar sets its folders' modes at the end; a kill -9 then lost them).
    @Test func aFoldersChmodAfterANewFileInItIsWrittenAtOnce() throws {
        var c: Container? = try open()
        let folder = try c!.makeDirectory(parent: docs, name: "d", mode: 0o700)
        let (item, fd) = try c!.createAndOpen(parent: folder.id, name: "f", mode: 0o600)
        #expect(c!.read { $0.store.isKeptBack(folder.id) })
        try c!.flushed(item.id, through: fd)
        try c!.release(item.id, through: fd, .init(writable: true, wrote: true))
        fd.close()
        _ = try c!.setAttributes(folder.id, mode: 0o755, mtime: nil)
        c = nil // kill -9
        c = try open()
        #expect(c!.item(folder.id)?.mode == 0o755)
        #expect(c!.lookup(parent: folder.id, name: "f") != nil)
    }

    /// An unlink costs no commit of its own: its rows wait for the next commit, and the file's content stays
    /// until then (`rm -rf` made one commit per file). Once written, the file is gone for good.
    @Test func anUnlinkCostsNoCommitOfItsOwn() throws {
        var c: Container? = try open()
        let id = try extract(c!, "f")
        let before = commits(c!)
        try c!.remove(parent: docs, name: "f", directory: false)
        #expect(commits(c!) == before)
        #expect(c!.lookup(parent: docs, name: "f") == nil)
        #expect(FileManager.default.fileExists(atPath: dir.path + "/store/content/" + id))
        c!.writeKeptBack()
        #expect(commits(c!) == before + 1)
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/store/content/" + id))
        c = nil // kill -9
        c = try open()
        #expect(c!.lookup(parent: docs, name: "f") == nil && c!.item(id) == nil)
    }

    /// A crash before a delete is written brings the file back whole, as it was before the unlink: its content
    /// goes only with its delete. A file pushed already comes back likewise, and its delete reaches the remote
    /// once written.
    @Test func aCrashBeforeADeleteIsWrittenBringsTheFileBackWhole() throws {
        var c: Container? = try open()
        let id = try extract(c!, "f")
        let pushed = try extract(c!, "pushed")
        while case .pushed = c!.pushOnce() {}
        try c!.remove(parent: docs, name: "f", directory: false)
        try c!.remove(parent: docs, name: "pushed", directory: false)
        c = nil // kill -9
        c = try open()
        let back = try #require(c!.lookup(parent: docs, name: "f"))
        #expect(back.id == id && back.size == 5)
        #expect(try String(contentsOfFile: dir.path + "/store/content/" + id, encoding: .utf8) == "hello")
        #expect(c!.lookup(parent: docs, name: "pushed")?.id == pushed)
        try c!.remove(parent: docs, name: "pushed", directory: false)
        while case .pushed = c!.pushOnce() {}
        #expect(try remote.item(pushed).deleted)
    }

    /// A delete kept back goes with the next commit that writes anything: a new file closed under the freed name
    /// is never beside the deleted one after a crash (the pull would have given one of them another name).
    @Test func aKeptDeleteGoesWithTheNextCommitThatWrites() throws {
        var c: Container? = try open()
        let old = try extract(c!, "a")
        while case .pushed = c!.pushOnce() {}
        try c!.remove(parent: docs, name: "a", directory: false)
        let new = try extract(c!, "a")
        #expect(!c!.read { $0.store.hasKeptDeletes })
        c = nil // kill -9
        c = try open()
        #expect(c!.lookup(parent: docs, name: "a")?.id == new)
        #expect(c!.item(old)?.deleted ?? true)
        #expect(try c!.read { s in try s.store.pendingIDs() }.contains(old)) // its delete still to push
    }

    /// A file held open keeps its delete written at once: its content moves aside for the open descriptor.
    @Test func anUnlinkOfAFileHeldOpenIsWrittenAtOnce() throws {
        let c = try open()
        let (item, fd) = try c.createAndOpen(parent: docs, name: "held", mode: 0o600)
        try c.flushed(item.id, through: fd)
        try c.remove(parent: docs, name: "held", directory: false)
        #expect(!c.read { $0.store.isKeptBack(item.id) })
        try c.release(item.id, through: fd, .init(writable: true))
        fd.close()
    }

    /// With background transfers, the content files of the deletes a commit wrote are emptied on the spares'
    /// own thread (thousands come at once after an `rm -rf`), and leave the cache account at once.
    @Test func theContentOfWrittenDeletesIsEmptiedOnTheSparesThread() throws {
        let c = try open(background: true)
        let spares = c.read { $0.paths.spares }
        let ids = try (0..<3).map { try extract(c, "f\($0)") }
        for i in 0..<3 { try c.remove(parent: docs, name: "f\(i)", directory: false) }
        c.writeKeptBack()
        #expect(c.read { s in ids.allSatisfy { s.cache.size($0) == 0 } })
        // Out of the content folder at once, under the lock: a download of an item brought back meanwhile
        // lands in a place of its own, which the spares' thread never empties.
        for id in ids { #expect(!FileManager.default.fileExists(atPath: dir.path + "/store/content/" + id)) }
        spares.settle()
        #expect(spares.count == 3)
        for id in ids { #expect(!FileManager.default.fileExists(atPath: dir.path + "/store/content/" + id)) }
    }

    /// fsync(2) of a folder writes its deletes kept back: a crash after it keeps them.
    @Test func anFsyncOfTheFolderWritesTheDeletesKeptBack() throws {
        var c: Container? = try open()
        let id = try extract(c!, "f")
        try c!.remove(parent: docs, name: "f", directory: false)
        try c!.syncedDirectory()
        c = nil // kill -9
        c = try open()
        #expect(c!.lookup(parent: docs, name: "f") == nil && c!.item(id) == nil)
    }

    /// A delete kept back is not pushed before it is written here; in the journal the deletes kept back come
    /// before the rows of the operation that writes them (a create after the delete that freed its name).
    @Test func aKeptDeleteIsPushedOnlyOnceWrittenAndBeforeWhatFollows() throws {
        let c = try open()
        let old = try extract(c, "a")
        while case .pushed = c.pushOnce() {}
        try c.remove(parent: docs, name: "a", directory: false)
        #expect(!c.read { $0.isPushable(old) })
        let folder = try c.makeDirectory(parent: docs, name: "a", mode: 0o755)
        #expect(try c.read { s in try s.store.pendingIDs() } == [old, folder.id])
        #expect(c.read { $0.isPushable(old) })
    }
}
