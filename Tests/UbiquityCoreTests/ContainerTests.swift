// One device against a MemoryRemote: the initial sync, downloads, and local changes reaching the remote.
import Foundation
import Testing
import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting

@Suite struct ContainerTests {
    let remote = MemoryRemote()

    @Test func initialSyncListsWithoutDownloading() throws {
        let a = remote.seed(path: "Documents/a.txt", bytes: bytes("hello"), device: "other", mtime: 5)
        remote.seed(path: "Documents/sub/b.txt", bytes: bytes("bee"), device: "other", mtime: 6)
        let dev = try Device(remote, name: "a")
        #expect(try dev.container.list(dev.docs).map(\.name) == ["a.txt", "sub"])
        let item = try #require(dev.lookup("a.txt"))
        #expect(item.id == a.id && item.size == 5 && item.mtime == 5 && item.device == "other")
        #expect(!item.hasLocal && item.downloadingStatus == .notDownloaded)
        let sub = try #require(dev.lookup("sub"))
        #expect(try dev.container.list(sub.id).map(\.name) == ["b.txt"])
        #expect(dev.container.path(of: item.id) == "Documents/a.txt")
        #expect(throws: CoreError.wouldBlock) { try dev.container.open(a.id, writable: false, truncate: false, noDownload: true) }
        #expect(try dev.container.open(a.id, writable: false, truncate: false).isFetch)
        #expect(remote.blobDownloads.isEmpty)
    }

    @Test func changesMadeElsewhereArrive() throws {
        let dev = try Device(remote, name: "a")
        let f = remote.seed(path: "Documents/later.txt", bytes: bytes("later"), device: "other", mtime: 9)
        #expect(eventually { dev.lookup("later.txt")?.remoteVersion == f.version })
        let g = remote.seed(path: "Documents/later.txt", bytes: bytes("later still"), device: "other", mtime: 10)
        #expect(eventually { dev.lookup("later.txt")?.remoteSHA == g.sha256 })
        #expect(dev.lookup("later.txt")?.size == 11)
        #expect(remote.blobDownloads.isEmpty)
    }

    @Test func fetchDownloadsVerifiesAndInstalls() throws {
        let content = Array((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let f = remote.seed(path: "Documents/big.bin", bytes: content, device: "other", mtime: 5)
        let dev = try Device(remote, name: "a")
        #expect(dev.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(dev.content(f.id) == content)
        let item = try #require(dev.container.item(f.id))
        #expect(item.isCurrent && item.localSHA == f.sha256 && item.downloadingStatus == .current)
        let opening = try dev.container.open(f.id, writable: false, truncate: false, noDownload: true)
        guard case .opened(let fd) = opening else { Issue.record("current content must open"); return }
        fd.close()
        dev.container.closed(f.id, writable: false)
        #expect(remote.blobDownloads == [f.sha256: 1])
        #expect(try FileManager.default.contentsOfDirectory(atPath: dev.container.stagingDirectory).isEmpty)
        // Current content is not fetched again.
        #expect(dev.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(remote.blobDownloads == [f.sha256: 1])
    }

    @Test func concurrentWaitersShareOneDownload() throws {
        let f = remote.seed(path: "Documents/shared.txt", bytes: bytes("shared content"), device: "other", mtime: 5)
        let dev = try Device(remote, name: "a")
        remote.downloadDelayMilliseconds = 300
        let results = Box<[Bool]>([])
        let group = DispatchGroup()
        for _ in 0..<6 {
            group.enter()
            _ = dev.container.fetch(f.id) { r in
                results.value.append((try? r.get()) != nil)
                group.leave()
            }
        }
        #expect(group.wait(timeout: .now() + 15) == .success)
        #expect(results.value == Array(repeating: true, count: 6))
        #expect(remote.blobDownloads == [f.sha256: 1])
        #expect(dev.content(f.id) == bytes("shared content"))
    }

    @Test func corruptDownloadsAreNeverInstalled() throws {
        let f = remote.seed(path: "Documents/c.txt", bytes: bytes("good bytes"), device: "other", mtime: 5)
        let dev = try Device(remote, name: "a", downloadTimeout: 1)
        remote.corruptDownloads = true
        let result = try #require(dev.fetch(f.id))
        guard case .failure(.remote(.corrupt)) = result else {
            Issue.record("expected the remote's corrupt bytes as the cause, got \(result)")
            return
        }
        let item = try #require(dev.container.item(f.id))
        #expect(!item.hasLocal && !item.isCurrent)
        #expect(dev.content(f.id) == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dev.container.stagingDirectory).isEmpty)
        #expect((remote.blobDownloads[f.sha256] ?? 0) >= 1)
        // Once the remote serves good bytes again, the next fetch installs them.
        remote.corruptDownloads = false
        #expect(dev.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(dev.content(f.id) == bytes("good bytes"))
    }

    @Test func newFileIsPushed() throws {
        let dev = try Device(remote, name: "a")
        let content = bytes("fresh bytes\n")
        let item = try dev.createFile("new.txt", content)
        #expect(item.size == Int64(content.count)) // dirty until the pusher, which may be quick, acknowledges it
        #expect(eventually { remote.lookup(path: "Documents/new.txt")?.sha256 == sha256Hex(content) })
        let w = try #require(remote.lookup(path: "Documents/new.txt"))
        #expect(w.id == item.id && w.size == Int64(content.count) && w.device == "a" && w.mode == 0o644)
        #expect(remote.blob(w.sha256) == content)
        #expect(eventually { dev.pending == 0 })
        let now = try #require(dev.container.item(item.id))
        #expect(!now.isPending && now.isCurrent && now.remoteVersion == w.version && now.localSHA == w.sha256)
    }

    @Test func createAndOpenCountsTheWriterAndPushesWhatIsWritten() throws {
        let dev = try Device(remote, name: "a")
        let (item, fd) = try dev.container.createAndOpen(parent: dev.docs, name: "made.txt", mode: 0o600)
        #expect(dev.lookup("made.txt")?.id == item.id)
        #expect(throws: CoreError.exists) { _ = try dev.container.createAndOpen(parent: dev.docs, name: "made.txt", mode: 0o600) }
        let content = bytes("written through the first descriptor")
        try dev.container.willWrite(item.id)
        _ = content.withUnsafeBytes { pwrite(fd.raw, $0.baseAddress, content.count, 0) }
        try dev.container.flushed(item.id)
        fd.close()
        dev.container.closed(item.id, writable: true)
        #expect(eventually { remote.lookup(path: "Documents/made.txt")?.sha256 == sha256Hex(content) })
        #expect(remote.lookup(path: "Documents/made.txt")?.mode == 0o600)
    }

    @Test func mkdirRenameRemovePropagate() throws {
        let dev = try Device(remote, name: "a")
        let dir = try dev.container.makeDirectory(parent: dev.docs, name: "dir", mode: 0o750)
        let f = try dev.createFile("f.txt", bytes("in dir"), in: dir.id)
        #expect(eventually { remote.lookup(path: "Documents/dir/f.txt")?.sha256 == sha256Hex(bytes("in dir")) })
        #expect(remote.lookup(path: "Documents/dir")?.mode == 0o750)

        try dev.container.rename(parent: dir.id, name: "f.txt", newParent: dev.docs, newName: "g.txt", noReplace: false)
        #expect(eventually { remote.lookup(path: "Documents/g.txt")?.id == f.id })
        #expect(remote.lookup(path: "Documents/dir/f.txt") == nil)
        try dev.container.rename(parent: dev.docs, name: "dir", newParent: dev.docs, newName: "dir2", noReplace: true)
        #expect(eventually { remote.lookup(path: "Documents/dir2")?.id == dir.id })

        try dev.container.remove(parent: dev.docs, name: "g.txt", directory: false)
        try dev.container.remove(parent: dev.docs, name: "dir2", directory: true)
        #expect(eventually { (try? remote.item(dir.id).deleted) == true })
        #expect(try remote.item(f.id).deleted)
        #expect(remote.lookup(path: "Documents/g.txt") == nil)
        #expect(eventually { dev.pending == 0 })
        #expect(try dev.container.list(dev.docs).isEmpty)
    }

    /// An open for writing and an eviction are one after the other, never interleaved: once the open has its
    /// descriptor the eviction is refused, and an evicted file is fetched again before it opens.
    @Test func openForWritingExcludesEviction() throws {
        let f = remote.seed(path: "Documents/e.txt", bytes: bytes("keep me"), device: "other", mtime: 5)
        let dev = try Device(remote, name: "a")
        #expect(dev.fetch(f.id).map { (try? $0.get()) != nil } == true)
        guard case .opened(let fd) = try dev.container.open(f.id, writable: true, truncate: false) else {
            Issue.record("current content must open"); return
        }
        #expect(throws: CoreError.self) { try dev.container.evict(f.id) }
        var buf = [UInt8](repeating: 0, count: 16)
        let n = try buf.withUnsafeMutableBytes { try fd.read(into: $0, at: 0) }
        #expect(Array(buf[0..<n]) == bytes("keep me"))
        fd.close()
        dev.container.closed(f.id, writable: true)
        try dev.container.evict(f.id)
        #expect(try dev.container.open(f.id, writable: true, truncate: false).isFetch)
        #expect(dev.container.item(f.id)?.hasLocal == false)
    }

    /// A program holds a file open for writing and deletes it; an edit elsewhere brings the file back (edit wins
    /// over delete), not local here. The program's next write reaches the copy it holds, and leaves the file
    /// that came back as the remote has it, with nothing to push. (It was marked dirty without content here, and
    /// its push failed with ENOENT for ever: found by the simulation's held writers.)
    @Test func aWriteOfAHandleOnADeletedFileLeavesTheRevivedOneAlone() throws {
        let f = remote.seed(path: "Documents/w.txt", bytes: bytes("one"), device: "other", mtime: 5)
        let dev = try Device(remote, name: "a")
        #expect(dev.fetch(f.id).map { (try? $0.get()) != nil } == true)
        guard case .opened(let fd) = try dev.container.open(f.id, writable: true, truncate: false) else {
            Issue.record("current content must open"); return
        }
        defer { fd.close(); dev.container.closed(f.id, writable: true) }
        try dev.container.remove(parent: dev.docs, name: "w.txt", directory: false)
        #expect(eventually { (try? remote.item(f.id).deleted) == true })
        let tomb = try remote.item(f.id)
        var edit = tomb
        edit.deleted = false
        edit.sha256 = sha256Hex(bytes("two"))
        edit.size = 3
        edit.device = "other"
        let results = try remote.batch([.put(edit, ifMatch: tomb.version, content: bytes("two"))])
        guard case .success(let revived)? = results.first else { Issue.record("the edit must land: \(results)"); return }
        #expect(eventually { dev.container.item(f.id)?.remoteVersion == revived.version })
        try dev.container.write(f.id, through: fd) { Result { try fd.writeAll(bytes(" more")) } }.get()
        try dev.container.flushed(f.id)
        let item = try #require(dev.container.item(f.id))
        #expect(!item.dirty && !item.hasLocal, "the write was not the revived file's")
        #expect(dev.pending == 0)
        #expect(try remote.item(f.id).sha256 == edit.sha256)
    }

    /// A file removed while open stays readable and writable through its descriptor, is shown with its own
    /// size, and leaves nothing behind at the last close.
    @Test func unlinkedOpenFileLivesUntilLastClose() throws {
        let dev = try Device(remote, name: "a")
        let f = try dev.container.createFile(parent: dev.docs, name: "tmp", mode: 0o600)
        guard case .opened(let fd) = try dev.container.open(f.id, writable: true, truncate: false) else {
            Issue.record("a new file must open"); return
        }
        try dev.container.willWrite(f.id)
        try fd.writeAll(bytes("scratch"))
        try dev.container.remove(parent: dev.docs, name: "tmp", directory: false)
        #expect(dev.lookup("tmp") == nil)
        let gone = try #require(dev.container.unlinkedItem(f.id))
        #expect(gone.deleted && dev.container.localStat(gone)?.st_size == 7)
        #expect(try dev.container.truncate(f.id, to: 3).size == 3)
        #expect(dev.container.localStat(gone)?.st_size == 3)
        fd.close()
        dev.container.closed(f.id, writable: true)
        #expect(dev.container.unlinkedItem(f.id) == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dev.container.contentDirectory).isEmpty)
        #expect(eventually { dev.pending == 0 })
        #expect(remote.lookup(path: "Documents/tmp") == nil)
    }

    /// The content's states through a file's life: absent, clean after a download, dirty after a write, clean
    /// again once the upload is acknowledged, absent after an eviction.
    @Test func localContentFollowsTheStateMachine() throws {
        let f = remote.seed(path: "Documents/s.txt", bytes: bytes("one"), device: "other", mtime: 5)
        let link = Link(remote)
        let dev = try Device(link, name: "a")
        #expect(dev.container.item(f.id)?.localContent == .absent)
        #expect(dev.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(dev.container.item(f.id)?.localContent == .clean(sha: f.sha256))
        link.offline = true // the upload waits, so the dirty state can be seen
        try dev.write(f.id, bytes("two"))
        #expect(dev.container.item(f.id)?.localContent == .dirty)
        link.offline = false
        dev.nudge()
        #expect(eventually { dev.container.item(f.id)?.localContent == .clean(sha: sha256Hex(bytes("two"))) })
        try dev.container.evict(f.id)
        #expect(dev.container.item(f.id)?.localContent == .absent)
    }
}
