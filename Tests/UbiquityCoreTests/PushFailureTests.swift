// The pusher when the store fails under it: it backs off and shows why, never idles as if nothing waited.
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
}
