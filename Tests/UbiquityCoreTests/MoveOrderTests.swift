// Moves made on one device reach the remote in an order the remote accepts: a folder moved into one that the
// remote still has below it waits for the move that takes that one out (fsstress undid such renames: "an item
// cannot move below itself").
import Foundation
import Testing
import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting

@Suite struct MoveOrderTests {
    let remote = MemoryRemote()

    /// Folders nested in Documents in the order named (A/B/...), synced, then the link down: the moves that
    /// follow wait together.
    private func syncedChain(_ names: String...) throws -> (Link, Device, [Item]) {
        let link = Link(remote)
        let dev = try Device(link, name: "a")
        var folders: [Item] = []
        for name in names {
            folders.append(try dev.container.makeDirectory(parent: folders.last?.id ?? dev.docs, name: name,
                                                           mode: 0o755))
        }
        #expect(eventually { dev.pending == 0 })
        link.offline = true
        return (link, dev, folders)
    }

    /// Documents/A/B on every device; here B moves out to Documents, then A into B, then B changes again (so
    /// that its journal entry comes after A's). Both moves stand, here and on the remote.
    @Test func aFolderMovedIntoOneThatLeftItStaysMoved() throws {
        let (link, dev, folders) = try syncedChain("A", "B")
        let (a, b) = (folders[0], folders[1])
        try dev.container.rename(parent: a.id, name: "B", newParent: dev.docs, newName: "B", noReplace: false)
        try dev.container.rename(parent: dev.docs, name: "A", newParent: b.id, newName: "A", noReplace: false)
        _ = try dev.container.setAttributes(b.id, mode: 0o700, mtime: nil)
        #expect(try dev.container.pendingIDs() == [a.id, b.id])
        link.offline = false
        dev.nudge()
        #expect(eventually { dev.pending == 0 })
        #expect(dev.container.item(a.id)?.parent == b.id)
        #expect(dev.container.item(b.id)?.parent == dev.docs)
        #expect(try remote.item(a.id).parent == b.id)
        #expect(try remote.item(b.id).parent == dev.docs)
        #expect(remote.lookup(path: "Documents/B/A")?.id == a.id)
    }

    /// A rotation through three levels: Documents/A/B/C; C moves to Documents, B into C, A into B, and C
    /// changes last. Every move stands.
    @Test func aChainOfFoldersTurnedUpsideDownStaysSo() throws {
        let (link, dev, folders) = try syncedChain("A", "B", "C")
        let (a, b, c) = (folders[0], folders[1], folders[2])
        try dev.container.rename(parent: b.id, name: "C", newParent: dev.docs, newName: "C", noReplace: false)
        try dev.container.rename(parent: a.id, name: "B", newParent: c.id, newName: "B", noReplace: false)
        try dev.container.rename(parent: dev.docs, name: "A", newParent: b.id, newName: "A", noReplace: false)
        _ = try dev.container.setAttributes(c.id, mode: 0o700, mtime: nil)
        link.offline = false
        dev.nudge()
        #expect(eventually { dev.pending == 0 })
        #expect(remote.lookup(path: "Documents/C/B/A")?.id == a.id)
        #expect(dev.container.item(a.id)?.parent == b.id && dev.container.item(b.id)?.parent == c.id)
    }

    /// Documents/A/B; here B moves into a new folder N, then A into B, then B changes again. B's push waits
    /// for N's create, so A's goes without it and meets B still below A on the remote.
    @Test func aFolderMovedIntoOneThatLeftItForANewFolderStaysMoved() throws {
        let (link, dev, folders) = try syncedChain("A", "B")
        let (a, b) = (folders[0], folders[1])
        let n = try dev.container.makeDirectory(parent: dev.docs, name: "N", mode: 0o755)
        try dev.container.rename(parent: a.id, name: "B", newParent: n.id, newName: "B", noReplace: false)
        try dev.container.rename(parent: dev.docs, name: "A", newParent: b.id, newName: "A", noReplace: false)
        _ = try dev.container.setAttributes(b.id, mode: 0o700, mtime: nil)
        #expect(try dev.container.pendingIDs() == [n.id, a.id, b.id])
        link.offline = false
        dev.nudge()
        #expect(eventually { dev.pending == 0 })
        #expect(dev.container.item(a.id)?.parent == b.id)
        #expect(remote.lookup(path: "Documents/N/B/A")?.id == a.id)
    }

    /// Documents/A/B; here B moves out to Documents as R, A into R, then R takes A's old name (so B's push
    /// waits for A's name, and A's for B to leave from above it), and A changes last. B goes first to
    /// Documents under a name of its own, A goes into B, B takes the name: every move stands (none went back,
    /// nothing was renamed to a free name).
    /// Documents/P holds the file a.txt and the folder "y 2", with "y 2"/y/z below it. Here the chain turns
    /// upside down and the names go the other way round: z comes up into P, y goes into z, "y 2" into y, then
    /// the file takes the name "y 2" and z the name a.txt. Each push waits for the next one's name or for a
    /// folder to leave from above it, round the whole chain (z for the file's name, the file for "y 2"'s,
    /// "y 2" for y to leave from above it, y for z to). z goes first into P under a name of its own, and
    /// every move and name stands. A fresh seed of two containers (998105977) found the pushes going round for
    /// ever: y stepped aside where it was, which freed a name nobody waited for.
    @Test func aChainTurnedUpsideDownWithItsNamesExchangedStaysSo() throws {
        let link = Link(remote)
        let dev = try Device(link, name: "a")
        let p = try dev.container.makeDirectory(parent: dev.docs, name: "P", mode: 0o755)
        let file = try dev.createFile("a.txt", Array("the file".utf8), in: p.id)
        let y2 = try dev.container.makeDirectory(parent: p.id, name: "y 2", mode: 0o755)
        let y = try dev.container.makeDirectory(parent: y2.id, name: "y", mode: 0o755)
        let z = try dev.container.makeDirectory(parent: y.id, name: "z", mode: 0o755)
        #expect(eventually { dev.pending == 0 })
        link.offline = true
        try dev.container.rename(parent: y.id, name: "z", newParent: p.id, newName: "zz", noReplace: false)
        try dev.container.rename(parent: y2.id, name: "y", newParent: z.id, newName: "y", noReplace: false)
        try dev.container.rename(parent: p.id, name: "y 2", newParent: y.id, newName: "z", noReplace: false)
        try dev.container.rename(parent: p.id, name: "a.txt", newParent: p.id, newName: "y 2", noReplace: false)
        try dev.container.rename(parent: p.id, name: "zz", newParent: p.id, newName: "a.txt", noReplace: false)
        #expect(try dev.container.pendingIDs() == [y.id, y2.id, file.id, z.id])
        link.offline = false
        dev.nudge()
        #expect(eventually { dev.pending == 0 })
        #expect(remote.lookup(path: "Documents/P/a.txt/y/z")?.id == y2.id)
        #expect(remote.lookup(path: "Documents/P/a.txt")?.id == z.id && remote.lookup(path: "Documents/P/y 2")?.id == file.id)
        #expect(dev.container.item(z.id)?.name == "a.txt" && dev.container.item(file.id)?.name == "y 2")
    }

    @Test func twoFoldersThatWaitForEachOtherBothStayMoved() throws {
        let (link, dev, folders) = try syncedChain("A", "B")
        let (a, b) = (folders[0], folders[1])
        try dev.container.rename(parent: a.id, name: "B", newParent: dev.docs, newName: "R", noReplace: false)
        try dev.container.rename(parent: dev.docs, name: "A", newParent: b.id, newName: "A", noReplace: false)
        try dev.container.rename(parent: dev.docs, name: "R", newParent: dev.docs, newName: "A", noReplace: false)
        _ = try dev.container.setAttributes(a.id, mode: 0o700, mtime: nil)
        #expect(try dev.container.pendingIDs() == [b.id, a.id])
        link.offline = false
        dev.nudge()
        #expect(eventually { dev.pending == 0 })
        #expect(dev.container.item(b.id)?.parent == dev.docs && dev.container.item(b.id)?.name == "A")
        #expect(dev.container.item(a.id)?.parent == b.id && dev.container.item(a.id)?.name == "A")
        #expect(remote.lookup(path: "Documents/A")?.id == b.id && remote.lookup(path: "Documents/A/A")?.id == a.id)
    }
}
