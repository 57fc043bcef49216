// Two devices on one remote: convergence and the conflict rules (later mtime wins, edit wins over delete,
// both creates kept).
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct TwoDeviceTests {
    let remote = MemoryRemote()

    @Test func changesConverge() throws {
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let f = try a.createFile("from-a.txt", bytes("written on a"))
        #expect(eventually { b.lookup("from-a.txt")?.remoteSHA == sha256Hex(bytes("written on a")) })
        #expect(b.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == bytes("written on a"))

        let d = try b.container.makeDirectory(parent: b.docs, name: "from-b", mode: 0o755)
        try b.container.rename(parent: b.docs, name: "from-a.txt", newParent: d.id, newName: "moved.txt", noReplace: true)
        #expect(eventually { a.lookup("moved.txt", in: d.id)?.id == f.id })
        #expect(a.lookup("from-a.txt") == nil)

        try b.write(f.id, bytes("edited on b"))
        #expect(eventually { a.container.item(f.id)?.remoteSHA == sha256Hex(bytes("edited on b")) })
        #expect(a.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(a.content(f.id) == bytes("edited on b"))

        try a.container.remove(parent: d.id, name: "moved.txt", directory: false)
        #expect(eventually { b.container.item(f.id) == nil })
        #expect(eventually { a.pending == 0 && b.pending == 0 })
    }

    /// Both write the same file while cut off; `winnerFirst`: the later writer reaches the remote first.
    @Test(arguments: [true, false]) func contentConflictLaterMtimeWins(winnerFirst: Bool) throws {
        let base = remote.seed(path: "Documents/c.txt", bytes: bytes("base"), device: "seed", mtime: 1)
        let linkA = Link(remote), linkB = Link(remote)
        let a = try Device(linkA, name: "a")
        let b = try Device(linkB, name: "b")
        linkA.offline = true; linkB.offline = true
        try a.write(base.id, bytes("from a"), mtimeSeconds: 1_800_000_000)
        try b.write(base.id, bytes("from b, later"), mtimeSeconds: 1_800_000_100)
        let (first, second) = winnerFirst ? (linkB, linkA) : (linkA, linkB)
        first.offline = false
        a.nudge(); b.nudge()
        let firstSHA = sha256Hex(bytes(winnerFirst ? "from b, later" : "from a"))
        #expect(eventually(15) { remote.lookup(path: "Documents/c.txt")?.sha256 == firstSHA })
        second.offline = false
        a.nudge(); b.nudge()

        let winSHA = sha256Hex(bytes("from b, later")), loseSHA = sha256Hex(bytes("from a"))
        let settled = eventually(15) {
            guard let w = remote.lookup(path: "Documents/c.txt"), w.sha256 == winSHA, w.conflicts.count == 1,
                  let ia = a.container.item(base.id), let ib = b.container.item(base.id) else { return false }
            return !ia.isPending && !ib.isPending && ia.remoteVersion == w.version && ib.remoteVersion == w.version
        }
        #expect(settled)
        let w = try #require(remote.lookup(path: "Documents/c.txt"))
        let ia = try #require(a.container.item(base.id)), ib = try #require(b.container.item(base.id))
        #expect(ia.remoteSHA == winSHA && ib.remoteSHA == winSHA)
        #expect(ia.conflicts == w.conflicts && ib.conflicts == w.conflicts)
        #expect(w.conflicts.first?.device == "a" && w.conflicts.first?.sha256 == loseSHA)
        #expect(w.conflicts.first?.mtime == Int64(1_800_000_000) * 1_000_000_000)
        #expect(remote.blob(loseSHA) == bytes("from a")) // the losing content is kept
        #expect(w.mtime == Int64(1_800_000_100) * 1_000_000_000 && w.device == "b")
        #expect(eventually(3) { a.pending == 0 && b.pending == 0 })
        for dev in [a, b] {
            #expect(dev.fetch(base.id).map { (try? $0.get()) != nil } == true)
            #expect(dev.content(base.id) == bytes("from b, later"))
        }
        #expect(eventually { a.pending == 0 && b.pending == 0 })
    }

    /// One device edits a file while the other deletes it; `editFirst`: the edit reaches the remote first.
    @Test(arguments: [true, false]) func editWinsOverDelete(editFirst: Bool) throws {
        let base = remote.seed(path: "Documents/e.txt", bytes: bytes("base"), device: "seed", mtime: 1)
        let linkA = Link(remote), linkB = Link(remote)
        let a = try Device(linkA, name: "a")
        let b = try Device(linkB, name: "b")
        linkA.offline = true; linkB.offline = true
        try a.write(base.id, bytes("edited"))
        try b.container.remove(parent: b.docs, name: "e.txt", directory: false)
        let (first, second) = editFirst ? (linkA, linkB) : (linkB, linkA)
        first.offline = false
        a.nudge(); b.nudge()
        #expect(eventually(15) { (try? remote.item(base.id).version) ?? 0 > base.version })
        second.offline = false
        a.nudge(); b.nudge()

        let editSHA = sha256Hex(bytes("edited"))
        let settled = eventually(15) {
            guard let w = remote.lookup(path: "Documents/e.txt"), w.sha256 == editSHA,
                  let ib = b.lookup("e.txt"), let ia = a.lookup("e.txt") else { return false }
            return ia.remoteVersion == w.version && ib.remoteVersion == w.version && !ia.isPending && !ib.isPending
        }
        #expect(settled)
        // Nothing is left to push (checked before the fetch below saves the item again).
        #expect(eventually(3) { a.pending == 0 && b.pending == 0 })
        #expect(b.lookup("e.txt")?.id == base.id)
        #expect(b.fetch(base.id).map { (try? $0.get()) != nil } == true)
        #expect(b.content(base.id) == bytes("edited"))
        #expect(eventually { a.pending == 0 && b.pending == 0 })
    }

    /// A folder deleted elsewhere is kept here for the file edited in it here (edit wins over delete). The file
    /// then comes back elsewhere, outside the folder, edited on a third device: the folder kept nothing any more,
    /// and its delete stands (it once came back empty on every device; simulation seed 999209105).
    @Test func aFolderKeptForAnEditThatLeftItTakesItsDelete() throws {
        let y = remote.seed(path: "Documents/z/y", bytes: bytes("base"), device: "seed", mtime: 1)
        let z = try #require(remote.lookup(path: "Documents/z"))
        let link = Link(remote)
        let b = try Device(link, name: "b")
        #expect(eventually { b.container.item(y.id) != nil })
        link.offline = true
        try b.write(y.id, bytes("edited on b"), mtimeSeconds: 1_800_000_000)
        // Elsewhere: y and then z deleted; a third device's edit of y, made where it had y (in Documents),
        // brings y back there over its delete.
        let yGone = try remote.deleteItem(y.id, ifMatch: y.version, change: nil)
        _ = try remote.deleteItem(z.id, ifMatch: z.version, change: nil)
        var back = y
        back.parent = WireRules.documentsID
        back.sha256 = remote.seed(path: "Documents/other-edit", bytes: bytes("edited on c"), device: "c",
                                  mtime: 1_800_000_100).sha256
        back.size = Int64(bytes("edited on c").count)
        back.mtime = 1_800_000_100_000_000_000
        back.device = "c"
        _ = try remote.putItem(back, ifMatch: yGone.version, change: nil)
        link.offline = false
        b.nudge()
        #expect(eventually(15) { b.pending == 0 && b.container.item(y.id)?.parent == WireRules.documentsID })
        #expect(try remote.item(z.id).deleted, "nothing of b's was left in z")
        // (b's push of y may go before its pull of z's delete: then z goes when that pull comes.)
        #expect(eventually(15) { b.container.item(z.id) == nil })
        #expect(try remote.item(z.id).deleted)
        #expect(remote.lookup(path: "Documents/y")?.id == y.id)
    }

    /// Both create the same name while cut off: both files are kept, the later one renamed.
    @Test func sameNameCreatesAreBothKept() throws {
        let linkA = Link(remote), linkB = Link(remote)
        let a = try Device(linkA, name: "a")
        let b = try Device(linkB, name: "b")
        linkA.offline = true; linkB.offline = true
        let fa = try a.createFile("same.txt", bytes("made on a"))
        let fb = try b.createFile("same.txt", bytes("made on b"))
        linkA.offline = false
        a.nudge()
        #expect(eventually(15) { remote.lookup(path: "Documents/same.txt")?.id == fa.id })
        linkB.offline = false
        b.nudge()
        let settled = eventually(15) {
            remote.lookup(path: "Documents/same 2.txt")?.id == fb.id
                && a.lookup("same 2.txt")?.id == fb.id && b.lookup("same.txt")?.id == fa.id
                && a.pending == 0 && b.pending == 0
        }
        #expect(settled)
        for dev in [a, b] {
            #expect(try dev.container.list(dev.docs).map(\.name) == ["same 2.txt", "same.txt"])
        }
        #expect(remote.lookup(path: "Documents/same.txt")?.sha256 == sha256Hex(bytes("made on a")))
        #expect(remote.lookup(path: "Documents/same 2.txt")?.sha256 == sha256Hex(bytes("made on b")))
    }

    /// The puller renames a pending create out of the way while the pusher's write of the old name is in
    /// flight: the 409 that write meets must not rename the item a second time ("same 2 2.txt").
    @Test func nameTakenWhileCreateIsInFlight() throws {
        let linkA = Link(remote), linkB = Link(remote)
        let a = try Device(linkA, name: "a")
        let b = try Device(linkB, name: "b")
        linkB.offline = true
        let fa = try a.createFile("same.txt", bytes("made on a"))
        let fb = try b.createFile("same.txt", bytes("made on b"))
        #expect(eventually(15) { remote.lookup(path: "Documents/same.txt")?.id == fa.id })
        // B's pusher gets through first; its write of "same.txt" waits until B's puller has seen a's file.
        linkB.feedBlocked.value = true
        let once = Box(true)
        linkB.beforePut.value = { [weak b] item in
            guard item.id == fb.id, item.name == "same.txt", once.value, let b else { return }
            once.value = false
            linkB.feedBlocked.value = false
            _ = eventually(15) { b.lookup("same 2.txt")?.id == fb.id }
        }
        defer { linkB.beforePut.value = nil }
        linkB.offline = false
        b.nudge()
        let settled = eventually(15) { remote.lookup(path: "Documents/same.txt")?.id == fa.id && b.pending == 0 }
        #expect(settled)
        #expect(!once.value)
        #expect(b.container.item(fb.id)?.name == "same 2.txt")
        #expect(remote.lookup(path: "Documents/same 2.txt")?.id == fb.id)
        #expect(eventually { a.lookup("same 2.txt")?.id == fb.id })
    }

    /// A push lands, then another device changes the item on top of it before the push's answer is back, and
    /// the puller meets that newer version while the item is still pending here (and skips it: the pusher meets
    /// such a version as a 412, but this push had landed before it). The skipped version must still be taken
    /// once the push is answered: before, this device kept its own version for good, the feed having moved past
    /// the other device's (a conflict made there never showed here: a loaded run of test_editor_saves).
    @Test func aVersionMadeOnTopOfAPushInFlightIsTakenOnceThePushIsAnswered() throws {
        let linkA = Link(remote)
        let a = try Device(linkA, name: "a")
        let b = try Device(Link(remote), name: "b")
        let f = try a.createFile("f.txt", bytes("one"))
        #expect(eventually(15) { b.lookup("f.txt") != nil && a.pending == 0 })
        let once = Box(true)
        linkA.afterPut.value = { [weak b] stored in
            guard stored.id == f.id, once.value, let b else { return }
            once.value = false
            // b writes on top of a's version, and a's puller sees b's version while a's push still waits.
            _ = eventually(15) { b.container.item(f.id)?.remoteVersion == stored.version }
            try? b.write(f.id, bytes("on top, from b"))
            _ = eventually(15) { (remote.lookup(path: "Documents/f.txt")?.version ?? 0) > stored.version }
            _ = eventually(15) { Int64(((try? a.container.sync.feedToken) ?? nil) ?? "0") ?? 0 > stored.version }
        }
        defer { linkA.afterPut.value = nil }
        try a.write(f.id, bytes("two, from a"))
        #expect(eventually(15) { !once.value && a.pending == 0 })
        let newest = try #require(remote.lookup(path: "Documents/f.txt"))
        #expect(eventually(15) { a.container.item(f.id)?.remoteVersion == newest.version },
                "a stays at version \(a.container.item(f.id)?.remoteVersion ?? 0), the remote has \(newest.version)")
        #expect(a.content(f.id) == nil || a.content(f.id) == bytes("on top, from b") || a.container.item(f.id)?.isCurrent == false)
    }
}
