// The pusher's batches: many pending items go up in a few batch requests (small contents inline, no blob
// requests), and an entry the remote refuses settles by the single path's rules: a name taken elsewhere
// gives a free name, content changed on both sides keeps both.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

/// Forwards to a MemoryRemote (its batch included), counting the requests, with a network switch and a
/// switch for the change feed alone.
final class CountingRemote: RemoteClient, @unchecked Sendable {
    let remote: MemoryRemote
    let offline = Box(false)
    let feedBlocked = Box(false)
    /// The sizes of the batches sent, and the single writes and blob uploads.
    let batches = Box<[Int]>([])
    let singleWrites = Box(0)
    let uploads = Box(0)
    init(_ remote: MemoryRemote) { self.remote = remote }

    private func check() throws(RemoteError) { if offline.value { throw RemoteError.unreachable("link down") } }

    func openContainer() throws(RemoteError) -> WireContainer { try check(); return try remote.openContainer() }
    func changes(since token: String?, waitSeconds: Int) throws(RemoteError) -> WireChanges {
        try check()
        if feedBlocked.value { usleep(50_000); throw RemoteError.unreachable("feed blocked") }
        return try remote.changes(since: token, waitSeconds: min(waitSeconds, 1))
    }
    func item(_ id: String) throws(RemoteError) -> WireItem { try check(); return try remote.item(id) }
    func putItem(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws(RemoteError) -> WireItem {
        try check(); singleWrites.value += 1; return try remote.putItem(item, ifMatch: ifMatch, change: change)
    }
    func deleteItem(_ id: String, ifMatch: Int64, change: WireChangeID?) throws(RemoteError) -> WireItem {
        try check(); singleWrites.value += 1; return try remote.deleteItem(id, ifMatch: ifMatch, change: change)
    }
    func batch(_ entries: [WireBatchEntry]) throws(RemoteError) -> [BatchResult] {
        try check(); batches.value.append(entries.count); return try remote.batch(entries)
    }
    func hasBlob(sha256: String) throws(RemoteError) -> Bool { try check(); return try remote.hasBlob(sha256: sha256) }
    func uploadBlob(sha256: String, size: Int64, fromFile path: String, progress: TransferProgress?) throws(RemoteError) {
        try check(); uploads.value += 1
        try remote.uploadBlob(sha256: sha256, size: size, fromFile: path, progress: progress)
    }
    func downloadBlob(sha256: String, offset: Int64, to fd: FileDescriptor, progress: TransferProgress?) throws(RemoteError) {
        try check(); try remote.downloadBlob(sha256: sha256, offset: offset, to: fd, progress: progress)
    }
}

@Suite struct PushBatchTests {
    let remote = MemoryRemote()

    @Test func manySmallFilesAndTheirDeletesGoUpInBatches() throws {
        let link = CountingRemote(remote)
        let a = try Device(link, name: "a")
        link.offline.value = true
        let dir = try a.container.makeDirectory(parent: a.docs, name: "many", mode: 0o755)
        for i in 0..<300 { _ = try a.createFile("f\(i)", bytes("content \(i)"), in: dir.id) }
        link.offline.value = false
        a.nudge()
        #expect(eventually(20) { a.pending == 0 })
        for i in [0, 149, 299] {
            let w = try #require(remote.lookup(path: "Documents/many/f\(i)"))
            #expect(w.sha256 == sha256Hex(bytes("content \(i)")) && remote.blob(w.sha256) == bytes("content \(i)"))
        }
        #expect(try remote.changes(since: nil, waitSeconds: 0).items.filter { $0.parent == dir.id }.count == 300)
        // The folder alone (its files wait for its create's answer), then the files in one batch.
        #expect(link.singleWrites.value == 1 && link.uploads.value == 0 && link.batches.value == [300])

        link.offline.value = true
        for i in 0..<300 { try a.container.remove(parent: dir.id, name: "f\(i)", directory: false) }
        try a.container.remove(parent: a.docs, name: "many", directory: true)
        link.offline.value = false
        a.nudge()
        #expect(eventually(20) { a.pending == 0 })
        #expect(remote.lookup(path: "Documents/many") == nil && remote.lookup(path: "Documents/many/f7") == nil)
        // All 301 deletes in batches, the folder's after its files'. (A pass that picked its batch while the
        // link was still offline may send part of them first: the split is not fixed, the total is.)
        let deletes = Array(link.batches.value.dropFirst())
        #expect(deletes.reduce(0, +) == 301 && link.singleWrites.value == 1,
                "the deletes in batches: batches \(link.batches.value), singles \(link.singleWrites.value)")
    }

    /// Changes that keep coming (`tar x`, a build) are gathered until they pause, so that they go up together
    /// rather than as many small pushes competing with the writer.
    @Test func aStreamOfChangesGoesUpOnceItPauses() throws {
        let link = CountingRemote(remote)
        let a = try Device(link, name: "a")
        #expect(eventually(10) { a.pending == 0 })
        let before = link.batches.value.count
        // 30 files, one every 20 ms: each well within the pause the pusher waits for, all within its hold.
        for i in 0..<30 {
            _ = try a.createFile("s\(i)", bytes("stream \(i)"))
            usleep(20_000)
        }
        #expect(eventually(10) { a.pending == 0 })
        let batches = Array(link.batches.value.dropFirst(before))
        #expect(batches.reduce(0, +) + link.singleWrites.value == 30)
        #expect(batches.count <= 2 && link.singleWrites.value == 0,
                "batches \(batches), single writes \(link.singleWrites.value)")
    }

    @Test func refusedEntriesSettleAsSinglePushes() throws {
        let shared = remote.seed(path: "Documents/shared.txt", bytes: bytes("base"), device: "other", mtime: 1)
        let link = CountingRemote(remote)
        let a = try Device(link, name: "a")
        // The feed stays shut, so the pusher meets the other device's changes as refusals, not in the feed.
        link.feedBlocked.value = true
        usleep(300_000)
        link.offline.value = true
        for i in 0..<20 { _ = try a.createFile("n\(i)", bytes("new \(i)")) }
        let clash = try a.createFile("clash.txt", bytes("from a"))
        try a.write(shared.id, bytes("edited on a"), mtimeSeconds: 1_800_000_000)
        remote.seed(path: "Documents/clash.txt", bytes: bytes("from other"), device: "other", mtime: 5)
        remote.seed(path: "Documents/shared.txt", bytes: bytes("edited elsewhere"), device: "other",
                    mtime: 1_800_000_100 * 1_000_000_000)
        link.offline.value = false
        a.nudge()
        #expect(eventually(20) { a.pending == 0 })
        #expect(link.batches.value.first == 22)
        // The name was taken there: the new file took a free one, as a single push would have.
        #expect(remote.lookup(path: "Documents/clash 2.txt")?.id == clash.id)
        #expect(remote.lookup(path: "Documents/clash.txt")?.device == "other")
        #expect(a.container.item(clash.id)?.name == "clash 2.txt")
        // Both changed the content: the later one is current, the other kept as a conflict version.
        let w = try #require(remote.lookup(path: "Documents/shared.txt"))
        #expect(w.sha256 == sha256Hex(bytes("edited elsewhere")))
        #expect(w.conflicts.map(\.sha256) == [sha256Hex(bytes("edited on a"))])
        for i in 0..<20 { #expect(remote.lookup(path: "Documents/n\(i)")?.sha256 == sha256Hex(bytes("new \(i)"))) }
        link.feedBlocked.value = false
        #expect(eventually(20) { a.lookup("clash.txt")?.device == "other" && a.pending == 0 })
    }
}
