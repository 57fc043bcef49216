// Symbolic links and local-only nodes (fifos, sockets) on two devices over one MemoryRemote: links sync as
// links with their target and never need a download; fifos and sockets never leave the device.
import Foundation
import Testing
import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting

@Suite struct LinkTests {
    let remote = MemoryRemote()

    @Test func linksSyncAsLinksWithTheirTarget() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let targets = ["rel": "../x/y", "abs": "/etc/hostname", "dangling": "no such thing", "dir": "sub"]
        _ = try a.container.makeDirectory(parent: a.docs, name: "sub", mode: 0o755)
        for (name, target) in targets {
            let l = try a.container.createSymlink(parent: a.docs, name: name, target: target)
            #expect(l.kind == .symlink && l.target == target && l.size == Int64(target.utf8.count))
            #expect(l.downloadingStatus == .current && !l.dirty)
        }
        #expect(eventually { targets.keys.allSatisfy { b.lookup($0) != nil } })
        for (name, target) in targets {
            let l = try #require(b.lookup(name))
            #expect(l.kind == .symlink && l.target == target && l.size == Int64(target.utf8.count))
            #expect(l.downloadingStatus == .current)           // usable offline: nothing to download
            #expect(remote.lookup(path: "Documents/\(name)")?.target == target)
        }
        #expect(!FileManager.default.fileExists(atPath: b.container.contentPath(try #require(b.lookup("rel")).id)))

        // Rename and delete on a, seen on b.
        try a.container.rename(parent: a.docs, name: "rel", newParent: a.docs, newName: "moved", noReplace: false)
        #expect(eventually { b.lookup("moved")?.target == "../x/y" && b.lookup("rel") == nil })
        try a.container.remove(parent: a.docs, name: "abs", directory: false)
        #expect(eventually { b.lookup("abs") == nil && remote.lookup(path: "Documents/abs") == nil })
        #expect(eventually { a.pending == 0 && b.pending == 0 })
    }

    @Test func linksHaveNoContentToEvictOpenOrTruncate() throws {
        let a = try Device(remote, name: "a")
        let l = try a.container.createSymlink(parent: a.docs, name: "l", target: "t")
        #expect(eventually { a.pending == 0 })
        try a.container.evict(l.id)
        try a.container.evict(a.docs)
        #expect(a.container.item(l.id)?.downloadingStatus == .current)
        #expect(throws: CoreError.self) { try a.container.open(l.id, writable: false, truncate: false) }
        #expect(throws: CoreError.self) { try a.container.truncate(l.id, to: 0) }
    }

    @Test func targetsAreCheckedAndKeptByteForByte() throws {
        let a = try Device(remote, name: "a")
        #expect(throws: CoreError.nameTooLong) {
            try a.container.createSymlink(parent: a.docs, name: "long", target: String(repeating: "x", count: 4096))
        }
        let longest = String(repeating: "y", count: 4095)
        #expect(try a.container.createSymlink(parent: a.docs, name: "longest", target: longest).target == longest)
        // NFD stays NFD: not normalised on the way.
        let nfd = "e\u{301}/x"
        let l = try a.container.createSymlink(parent: a.docs, name: "nfd", target: nfd)
        #expect(eventually { remote.lookup(path: "Documents/nfd") != nil })
        #expect(remote.lookup(path: "Documents/nfd")?.target.map { Array($0.utf8) } == Array(nfd.utf8))
        #expect(a.container.item(l.id)?.target.map { Array($0.utf8) } == Array(nfd.utf8))
        #expect(throws: CoreError.exists) { try a.container.createSymlink(parent: a.docs, name: "nfd", target: "t") }
    }

    /// Both devices make a link of the same name while cut off: both are kept, the later one as "name 2".
    @Test func sameNameLinksAreBothKept() throws {
        let linkA = Link(remote), linkB = Link(remote)
        let a = try Device(linkA, name: "a")
        let b = try Device(linkB, name: "b")
        linkA.offline = true; linkB.offline = true
        let la = try a.container.createSymlink(parent: a.docs, name: "same", target: "from a")
        let lb = try b.container.createSymlink(parent: b.docs, name: "same", target: "from b")
        linkA.offline = false
        a.nudge()
        #expect(eventually(15) { remote.lookup(path: "Documents/same")?.id == la.id })
        linkB.offline = false
        b.nudge()
        let settled = eventually(15) {
            remote.lookup(path: "Documents/same 2")?.id == lb.id && a.lookup("same 2")?.target == "from b"
                && b.lookup("same")?.target == "from a" && a.pending == 0 && b.pending == 0
        }
        #expect(settled)
    }

    @Test func fifosAndSocketsStayOnTheirDevice() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let fifo = try a.container.createLocalNode(parent: a.docs, name: "p", kind: .fifo, mode: 0o644)
        let socket = try a.container.createLocalNode(parent: a.docs, name: "s", kind: .socket, mode: 0o755)
        #expect(fifo.isLocalOnly && socket.isLocalOnly && !fifo.isPending)
        #expect(a.pending == 0)                               // never in the journal
        try a.container.rename(parent: a.docs, name: "p", newParent: a.docs, newName: "p2", noReplace: true)
        _ = try a.container.setAttributes(socket.id, mode: 0o700, mtime: nil)
        #expect(a.pending == 0)
        // A file made after them arrives on b; they never do.
        _ = try a.createFile("after.txt", bytes("x"))
        #expect(eventually { b.lookup("after.txt") != nil && a.pending == 0 })
        #expect(b.lookup("p2") == nil && b.lookup("s") == nil)
        #expect(remote.allItems.allSatisfy { $0.id != fifo.id && $0.id != socket.id })
        #expect(try a.container.list(a.docs).map(\.name) == ["after.txt", "p2", "s"])
        // A delete sends nothing.
        let deletesBefore = remote.allItems.filter(\.deleted).count
        try a.container.remove(parent: a.docs, name: "s", directory: false)
        #expect(a.pending == 0 && a.lookup("s") == nil)
        #expect(remote.allItems.filter(\.deleted).count == deletesBefore)
    }

    @Test func localNodesSurviveAReopen() throws {
        let dir = TempDir()
        _ = quietLogs
        let id: String
        do {
            let c = try Container(store: try Store(directory: dir.path), remote: remote, config: ContainerConfig(device: "a"))
            try c.start(initialSync: true)
            id = try c.createLocalNode(parent: WireRules.documentsID, name: "p", kind: .fifo, mode: 0o600).id
            c.stop()
        }
        let c = try Container(store: try Store(directory: dir.path), remote: remote, config: ContainerConfig(device: "a"))
        defer { c.stop() }
        #expect(c.lookup(parent: WireRules.documentsID, name: "p")?.id == id)
        #expect(c.item(id)?.kind == .fifo && (try? c.pendingChanges) == 0)
        #expect(try c.checkStore(repair: false).isClean)
    }

    /// A remote item takes the name of a fifo here: the fifo moves aside to "name 2", as a local item not yet
    /// uploaded would.
    @Test func aRemoteItemTakesTheNameOfALocalNode() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let fifo = try a.container.createLocalNode(parent: a.docs, name: "p", kind: .fifo, mode: 0o644)
        let f = try b.createFile("p", bytes("remote"))
        #expect(eventually { a.lookup("p")?.id == f.id })
        #expect(a.lookup("p 2")?.id == fifo.id)
        #expect(a.pending == 0)
        #expect(eventually { remote.lookup(path: "Documents/p 2") == nil && remote.lookup(path: "Documents/p")?.id == f.id })
    }

    /// A folder deleted elsewhere that holds a fifo here is kept (as it would be for an edit in it).
    @Test func aFolderHoldingALocalNodeIsKept() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let d = try a.container.makeDirectory(parent: a.docs, name: "d", mode: 0o755)
        #expect(eventually { b.lookup("d") != nil && a.pending == 0 })
        let fifo = try a.container.createLocalNode(parent: d.id, name: "p", kind: .fifo, mode: 0o644)
        try b.container.remove(parent: b.docs, name: "d", directory: true)
        #expect(eventually { a.pending == 0 && b.pending == 0 && remote.lookup(path: "Documents/d")?.id == d.id && b.lookup("d") != nil })
        #expect(a.lookup("p", in: d.id)?.id == fifo.id)
        #expect(try a.container.checkStore(repair: false).isClean)
    }
}
