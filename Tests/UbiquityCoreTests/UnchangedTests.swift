// Changes that change nothing (rsync setting every time and mode again) queue nothing and touch no ctime.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct UnchangedTests {
    let remote = MemoryRemote()

    @Test func settingTheSameModeAndTimeQueuesNothing() throws {
        let f = remote.seed(path: "Documents/f.txt", bytes: bytes("abc"), device: "other", mtime: 5)
        let dev = try Device(remote, name: "a")
        let before = try #require(dev.container.item(f.id))
        let after = try dev.container.setAttributes(f.id, mode: before.mode, mtime: before.mtime)
        #expect(after == before && !after.metaDirty && dev.pending == 0)
        let docs = try #require(dev.container.item(dev.docs))
        #expect(try dev.container.setAttributes(docs.id, mode: nil, mtime: docs.mtime) == docs)
        #expect(dev.pending == 0)
        #expect(try dev.container.setAttributes(f.id, mode: 0o600, mtime: nil).metaDirty)
    }

    @Test func truncatingToTheSameSizeNeedsNoContentAndQueuesNothing() throws {
        let f = remote.seed(path: "Documents/f.txt", bytes: bytes("abc"), device: "other", mtime: 5)
        let dev = try Device(remote, name: "a")
        let before = try #require(dev.container.item(f.id))
        #expect(try dev.container.truncate(f.id, to: 3) == before)
        #expect(dev.pending == 0 && remote.blobDownloads.isEmpty)
        #expect(throws: CoreError.wouldBlock) { try dev.container.truncate(f.id, to: 2) }
    }
}
