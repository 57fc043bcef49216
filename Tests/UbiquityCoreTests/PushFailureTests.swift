// The pusher when the store fails under it: it backs off and shows why, never idles as if nothing waited. And
// when the remote is away: it backs off, and goes again as soon as the remote is back.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct PushFailureTests {
    let dir = TempDir()

    @Test func unreadableJournalFailsThePassAndShowsOnTheRoot() throws {
        _ = quietLogs
        let path = dir.path + "/store"
        let c = try Container(store: try Store(directory: path), remote: MemoryRemote(),
                              config: ContainerConfig(device: "a"))
        let other = try Database(path: path + "/state.sqlite")
        try other.exec("DROP TABLE pending")
        // Before: the error read as an empty journal, and the pusher went idle.
        #expect(c.sync.pushAll() == .storeFailed)
        let shown = try c.status(c.rootID).uploadingError
        #expect(shown?.contains("no such table: pending") == true)
        #expect(throws: StoreError.self) { _ = try c.pendingChanges }
        #expect(throws: CoreError.self) { _ = try c.rootAttributes() }

        try other.exec("CREATE TABLE pending(id TEXT PRIMARY KEY, seq INTEGER NOT NULL)")
        #expect(c.sync.pushAll() == .idle)
        #expect(try c.status(c.rootID).uploadingError == nil)
    }

    /// Away long enough that the pusher's wait between tries has grown to 16 s: once the remote is back, the
    /// change goes up when the feed's next look (every second or so while the remote is away) finds it back,
    /// not at the pusher's next try (it waited up to 30 s after a long outage).
    @Test func aChangeMadeWhileTheRemoteWasAwayGoesUpSoonAfterItIsBack() throws {
        let remote = MemoryRemote(), link = Link(remote)
        let dev = try Device(link, name: "a")
        #expect(eventually { dev.pending == 0 })
        link.offline = true
        _ = try dev.createFile("away.txt", bytes("written while the remote was away"))
        #expect(eventually(20) { link.writesRefused.value >= 5 }, "tried \(link.writesRefused.value) times")
        link.offline = false
        #expect(eventually(6) { remote.lookup(path: "Documents/away.txt") != nil })
    }
}
