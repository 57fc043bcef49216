// Local-only items on two devices over one MemoryRemote: `.nosync` names and everything below them never go
// up; the excluded flag (and a move into or out of a `.nosync` folder) takes an uploaded item off the remote
// while keeping its local copy, and puts it back as new.
import Foundation
import Testing
import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting

@Suite struct LocalOnlyTests {
    let remote = MemoryRemote()

    /// Live remote items below Documents whose name is `name`.
    func onRemote(_ name: String) -> [WireItem] { remote.allItems.filter { !$0.deleted && $0.name == name } }

    @Test func noSyncNamesAndWhatIsBelowThemNeverGoUp() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let cache = try a.container.makeDirectory(parent: a.docs, name: "cache.nosync", mode: 0o755)
        let sub = try a.container.makeDirectory(parent: cache.id, name: "sub", mode: 0o755)
        let inner = try a.createFile("inner.bin", bytes("inner"), in: sub.id)
        let x = try a.createFile("x.nosync", bytes("x"))
        _ = try a.createFile("after.txt", bytes("after"))
        #expect(eventually { b.lookup("after.txt") != nil && a.pending == 0 })
        #expect(b.lookup("cache.nosync") == nil && b.lookup("x.nosync") == nil)
        let ids = Set([cache.id, sub.id, inner.id, x.id])
        #expect(remote.allItems.allSatisfy { !ids.contains($0.id) })
        #expect(a.container.item(inner.id)?.isLocalOnly == true && a.container.item(x.id)?.isLocalOnly == true)
        #expect(try a.container.status(inner.id).isUbiquitous == false)
        #expect(try a.container.status(try #require(a.lookup("after.txt")).id).isUbiquitous)
        #expect(throws: CoreError.self) { try a.container.evict(inner.id) }
        #expect(throws: CoreError.self) { try a.container.evict(cache.id) }
        #expect(a.content(inner.id) == bytes("inner"))
        #expect(try a.container.checkStore(repair: false).isClean)
    }

    @Test func excludingAFileAndAFolderTakesThemOffTheRemoteAndBack() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let f = try a.createFile("f.txt", bytes("file"))
        let d = try a.container.makeDirectory(parent: a.docs, name: "d", mode: 0o755)
        let g = try a.createFile("g.txt", bytes("below"), in: d.id)
        #expect(eventually { b.lookup("f.txt") != nil && b.lookup("d") != nil && a.pending == 0 })
        #expect(eventually { b.lookup("d").flatMap { b.lookup("g.txt", in: $0.id) } != nil })

        try a.container.setExcludedFromSync(f.id, true)
        try a.container.setExcludedFromSync(d.id, true)
        #expect(eventually { b.lookup("f.txt") == nil && b.lookup("d") == nil && a.pending == 0 })
        #expect(onRemote("f.txt").isEmpty && onRemote("d").isEmpty && onRemote("g.txt").isEmpty)
        for id in [f.id, d.id, g.id] {
            let item = try #require(a.container.item(id))
            #expect(item.isLocalOnly && item.remoteVersion == 0 && !item.isPending)
            #expect(try a.container.status(id).isUbiquitous == false)
        }
        #expect(try a.container.status(f.id).isExcludedFromSync && !(try a.container.status(g.id).isExcludedFromSync))
        #expect(a.content(f.id) == bytes("file") && a.content(g.id) == bytes("below"))
        #expect(throws: CoreError.self) { try a.container.evict(f.id) }
        #expect(a.content(f.id) == bytes("file"))

        try a.container.setExcludedFromSync(f.id, false)
        try a.container.setExcludedFromSync(d.id, false)
        #expect(eventually { b.lookup("f.txt") != nil && b.lookup("d").flatMap { b.lookup("g.txt", in: $0.id) } != nil })
        #expect(eventually { a.pending == 0 && b.pending == 0 })
        let gb = try #require(b.lookup("d").flatMap { b.lookup("g.txt", in: $0.id) })
        #expect(b.fetch(gb.id).map { (try? $0.get()) != nil } == true && b.content(gb.id) == bytes("below"))
        #expect(try a.container.status(f.id).isUbiquitous && a.container.item(f.id)?.remoteVersion ?? 0 > 0)
        #expect(try a.container.checkStore(repair: false).isClean)
    }

    /// Made ubiquitous again while another device took its name: both are kept, this one as "name 2".
    @Test func theNameTakenMeanwhileKeepsBoth() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let f = try a.createFile("f.txt", bytes("from a"))
        #expect(eventually { b.lookup("f.txt") != nil && a.pending == 0 })
        try a.container.setExcludedFromSync(f.id, true)
        #expect(eventually { b.lookup("f.txt") == nil && a.pending == 0 })
        let other = try b.createFile("f.txt", bytes("from b"))
        // The remote item arrives: the local-only one moves aside, as a fifo does.
        #expect(eventually { a.lookup("f.txt")?.id == other.id && a.lookup("f 2.txt")?.id == f.id })
        try a.container.setExcludedFromSync(f.id, false)
        #expect(eventually { b.lookup("f 2.txt")?.id == f.id && a.pending == 0 && b.pending == 0 })
        #expect(b.lookup("f.txt")?.id == other.id)
        let back = try #require(b.lookup("f 2.txt"))
        #expect(b.fetch(back.id).map { (try? $0.get()) != nil } == true && b.content(back.id) == bytes("from a"))
    }

    @Test func aMoveIntoANoSyncFolderAndBackOut() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let cache = try a.container.makeDirectory(parent: a.docs, name: "cache.nosync", mode: 0o755)
        let f = try a.createFile("f.txt", bytes("moving"))
        #expect(eventually { b.lookup("f.txt") != nil && a.pending == 0 })
        try a.container.rename(parent: a.docs, name: "f.txt", newParent: cache.id, newName: "f.txt", noReplace: true)
        #expect(eventually { b.lookup("f.txt") == nil && a.pending == 0 })
        #expect(onRemote("f.txt").isEmpty && a.content(f.id) == bytes("moving"))
        try a.container.rename(parent: cache.id, name: "f.txt", newParent: a.docs, newName: "f.txt", noReplace: true)
        #expect(eventually { b.lookup("f.txt")?.id == f.id && a.pending == 0 })
        // Renamed to a .nosync name in place: the same.
        try a.container.rename(parent: a.docs, name: "f.txt", newParent: a.docs, newName: "f.nosync", noReplace: true)
        #expect(eventually { b.lookup("f.txt") == nil && a.pending == 0 })
        #expect(b.lookup("f.nosync") == nil && onRemote("f.nosync").isEmpty)
    }

    /// The desktop's Trash (`.Trash-UID` made in the root) is local-only: a file `gio trash` moves into it leaves
    /// the remote; restored from Recently Deleted on another device, it leaves that Trash here too and is back
    /// where every device has it.
    @Test func aFileInTheDesktopsTrashRestoredElsewhereComesBackHere() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let trash = try a.container.makeDirectory(parent: a.container.rootID, name: ".Trash-1000", mode: 0o700)
        #expect(a.container.item(trash.id)?.isLocalOnly == true)
        let files = try a.container.makeDirectory(parent: trash.id, name: "files", mode: 0o700)
        let f = try a.createFile("f.txt", bytes("trashed"))
        #expect(eventually { b.lookup("f.txt") != nil && a.pending == 0 })
        try a.container.rename(parent: a.docs, name: "f.txt", newParent: files.id, newName: "f.txt", noReplace: true)
        #expect(eventually { b.lookup("f.txt") == nil && a.pending == 0 })
        #expect(remote.allItems.allSatisfy { $0.name != ".Trash-1000" })
        _ = try remote.restore(ids: [f.id], device: "b")
        #expect(eventually { b.lookup("f.txt")?.id == f.id && a.lookup("f.txt")?.id == f.id })
        #expect(a.container.item(f.id)?.isLocalOnly == false && a.content(f.id) == bytes("trashed"))
        #expect(try a.container.listEntries(files.id).isEmpty)
    }

    /// Content not downloaded: the flag starts the downloads and is refused until they are done; a move
    /// into a .nosync folder is refused with EXDEV (mv then copies, which downloads).
    @Test func contentNotHereIsDownloadedFirst() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let f = try a.createFile("f.txt", bytes("remote bytes"))
        let cache = try b.container.makeDirectory(parent: b.docs, name: "cache.nosync", mode: 0o755)
        #expect(eventually { b.lookup("f.txt") != nil && a.pending == 0 })
        #expect(b.lookup("f.txt")?.hasLocal == false)
        #expect(throws: CoreError.crossDevice("1 file(s) to keep on this device only are not downloaded")) {
            try b.container.rename(parent: b.docs, name: "f.txt", newParent: cache.id, newName: "f.txt", noReplace: true)
        }
        #expect(throws: CoreError.self) { try b.container.setExcludedFromSync(f.id, true) }
        #expect(eventually { b.container.item(f.id)?.isCurrent == true })
        try b.container.setExcludedFromSync(f.id, true)
        #expect(eventually { a.lookup("f.txt") == nil && b.pending == 0 })
        #expect(b.content(f.id) == bytes("remote bytes"))
    }

    /// A restart after the flag was set and before the remote acknowledged the delete: the delete still goes
    /// and the local copy stays.
    @Test func theDeleteGoesAfterARestart() throws {
        let dir = TempDir()
        _ = quietLogs
        let link = Link(remote)
        let b = try Device(remote, name: "b")
        let fID: String, dID: String, gID: String
        do {
            let c = try Container(store: try Store(directory: dir.path), remote: link, config: ContainerConfig(device: "a"))
            try c.start(initialSync: true)
            let f = try c.createFile(parent: WireRules.documentsID, name: "f.txt", mode: 0o644)
            try write(c, f.id, bytes("kept"))
            let d = try c.makeDirectory(parent: WireRules.documentsID, name: "d", mode: 0o755)
            let g = try c.createFile(parent: d.id, name: "g.txt", mode: 0o644)
            try write(c, g.id, bytes("kept below"))
            (fID, dID, gID) = (f.id, d.id, g.id)
            #expect(eventually { (try? c.pendingChanges) == 0 && b.lookup("d").flatMap { b.lookup("g.txt", in: $0.id) } != nil })
            link.offline = true
            try c.setExcludedFromSync(fID, true)
            try c.setExcludedFromSync(dID, true)
            #expect((try? c.pendingChanges) == 3)
            c.stop()
        }
        link.offline = false
        // The store as the crash left it (the stopped container may hold the store's lock a while yet).
        let after = TempDir()
        try FileManager.default.removeItem(atPath: after.path)
        try FileManager.default.copyItem(atPath: dir.path, toPath: after.path)
        try FileManager.default.removeItem(atPath: after.path + "/lock")
        let c = try Container(store: try Store(directory: after.path), remote: link, config: ContainerConfig(device: "a"))
        defer { c.stop() }
        #expect(c.item(gID)?.isLocalOnly == true && (try? c.pendingChanges) == 3)
        try c.start(initialSync: true)
        #expect(eventually { (try? c.pendingChanges) == 0 && b.lookup("f.txt") == nil && b.lookup("d") == nil })
        #expect(onRemote("f.txt").isEmpty && onRemote("g.txt").isEmpty)
        for id in [fID, dID, gID] { #expect(c.item(id)?.isLocalOnly == true && c.item(id)?.remoteVersion == 0) }
        #expect(FileManager.default.contents(atPath: c.contentPath(gID)) == Data("kept below".utf8))
        #expect(try c.checkStore(repair: false).isClean)
    }

    /// A folder made ubiquitous again takes what is below it along, but not a .nosync folder inside it.
    @Test func aNoSyncFolderInsideAnExcludedOneStaysLocal() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let d = try a.container.makeDirectory(parent: a.docs, name: "d", mode: 0o755)
        try a.container.setExcludedFromSync(d.id, true)
        let inner = try a.container.makeDirectory(parent: d.id, name: "inner.nosync", mode: 0o755)
        let kept = try a.createFile("kept.txt", bytes("kept"), in: inner.id)
        let plain = try a.createFile("plain.txt", bytes("plain"), in: d.id)
        #expect(a.pending == 0 && a.container.item(plain.id)?.isLocalOnly == true)
        try a.container.setExcludedFromSync(d.id, false)
        #expect(a.container.item(plain.id)?.isLocalOnly == false && a.container.item(kept.id)?.isLocalOnly == true)
        #expect(eventually { b.lookup("d").flatMap { b.lookup("plain.txt", in: $0.id) } != nil && a.pending == 0 })
        #expect(b.lookup("d").flatMap { b.lookup("inner.nosync", in: $0.id) } == nil)
        #expect(remote.allItems.allSatisfy { $0.id != inner.id && $0.id != kept.id })
    }

    /// RENAME_EXCHANGE of a synced file with one in a .nosync folder: each takes the other's rule.
    @Test func anExchangeAcrossANoSyncFolder() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let cache = try a.container.makeDirectory(parent: a.docs, name: "cache.nosync", mode: 0o755)
        let out = try a.createFile("x.txt", bytes("was synced"))
        let inside = try a.createFile("x.txt", bytes("was local"), in: cache.id)
        #expect(eventually { b.lookup("x.txt")?.id == out.id && a.pending == 0 })
        try a.container.exchange(parent: a.docs, name: "x.txt", newParent: cache.id, newName: "x.txt")
        #expect(a.container.item(out.id)?.isLocalOnly == true && a.container.item(inside.id)?.isLocalOnly == false)
        #expect(eventually { b.lookup("x.txt")?.id == inside.id && a.pending == 0 && b.pending == 0 })
        #expect(remote.allItems.allSatisfy { $0.id != out.id || $0.deleted })
        let x = try #require(b.lookup("x.txt"))
        #expect(b.fetch(x.id).map { (try? $0.get()) != nil } == true && b.content(x.id) == bytes("was local"))
    }

    /// Edited elsewhere before the delete of its remote copy came: that edit stays on the remote (edit wins
    /// over delete); made ubiquitous again, the copy kept here meets it as a conflict, and both are kept.
    @Test func anEditElsewhereBeforeTheDeleteStaysOnTheRemote() throws {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        let b = try Device(remote, name: "b")
        let f = try a.createFile("f.txt", bytes("from a"), mtimeSeconds: 1_000)
        #expect(eventually { b.lookup("f.txt") != nil && a.pending == 0 })
        link.offline = true
        try a.container.setExcludedFromSync(f.id, true)
        try b.write(f.id, bytes("edited on b"), mtimeSeconds: 2_000)
        #expect(eventually { b.pending == 0 })
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 })
        #expect(remote.lookup(path: "Documents/f.txt")?.device == "b" && b.lookup("f.txt") != nil)
        #expect(a.content(f.id) == bytes("from a") && a.container.item(f.id)?.isLocalOnly == true)
        try a.container.setExcludedFromSync(f.id, false)
        #expect(eventually { a.pending == 0 && b.pending == 0 && remote.lookup(path: "Documents/f.txt")?.conflicts.count == 1 })
        let onRemote = try #require(remote.lookup(path: "Documents/f.txt"))
        let shas = Set([onRemote.sha256] + onRemote.conflicts.map(\.sha256))
        #expect(shas == Set([sha256Hex(bytes("from a")), sha256Hex(bytes("edited on b"))]))
    }

    /// A file added elsewhere to a folder while this device takes it local-only: the folder stays on the remote
    /// for it, and this device does not take the file into its local-only folder.
    @Test func aFileAddedElsewhereKeepsTheFolderOnTheRemote() throws {
        let link = Link(remote)
        let a = try Device(link, name: "a")
        let b = try Device(remote, name: "b")
        let d = try a.container.makeDirectory(parent: a.docs, name: "d", mode: 0o755)
        #expect(eventually { b.lookup("d") != nil && a.pending == 0 })
        link.offline = true
        try a.container.setExcludedFromSync(d.id, true)
        let added = try b.createFile("new.txt", bytes("from b"), in: d.id)
        #expect(eventually { b.pending == 0 })
        link.offline = false
        a.nudge()
        #expect(eventually { a.pending == 0 && a.container.item(d.id)?.remoteVersion == 0 })
        // Once a later change from b has arrived here, so has the file.
        _ = try b.createFile("later.txt", bytes("later"))
        #expect(eventually { a.lookup("later.txt") != nil })
        #expect(remote.lookup(path: "Documents/d/new.txt")?.id == added.id && b.lookup("new.txt", in: d.id) != nil)
        #expect(a.lookup("new.txt", in: d.id) == nil && a.container.item(d.id)?.isLocalOnly == true)
        #expect(try a.container.checkStore(repair: false).isClean)
    }

    /// `check --repair` reports a local-only file's damaged copy but never drops it: it is the only one.
    @Test func checkNeverDropsALocalOnlyCopy() throws {
        let a = try Device(remote, name: "a")
        let f = try a.createFile("f.txt", bytes("only copy"))
        #expect(eventually { a.pending == 0 })
        try a.container.setExcludedFromSync(f.id, true)
        #expect(eventually { a.pending == 0 && remote.lookup(path: "Documents/f.txt") == nil })
        try Data("0nly copy".utf8).write(to: URL(fileURLWithPath: a.container.contentPath(f.id)))
        let report = try a.container.checkStore(repair: true)
        #expect(!report.isClean && report.repaired.isEmpty)
        #expect(a.content(f.id) == bytes("0nly copy"))
    }

    /// Writes a whole file through the container as a program would.
    private func write(_ c: Container, _ id: String, _ content: [UInt8]) throws {
        guard case .opened(let fd) = try c.open(id, writable: true, truncate: true) else { throw CoreError.io("fetch") }
        try c.willWrite(id)
        try fd.writeAll(content)
        fd.close()
        try c.flushed(id)
        c.closed(id, writable: true)
    }
}
