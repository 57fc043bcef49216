// A download is not synced before the open it serves returns (it can be fetched again); a crash before its
// sync must never leave a torn copy that calls itself current.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct DurabilityTests {
    @Test func aDownloadIsSyncedAfterItsWaitersAndForgetsItsMark() throws {
        let remote = MemoryRemote()
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let f = try a.createFile("report.txt", bytes("the whole report"))
        #expect(eventually { b.lookup("report.txt")?.remoteSHA == sha256Hex(bytes("the whole report")) })
        #expect(b.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == bytes("the whole report"))
        #expect(eventually { (try? b.container.read { s in try s.store.unsynced() })?.isEmpty == true })
    }

    @Test func aTornDownloadFoundAtStartIsDroppedAndFetchedAgain() throws {
        let remote = MemoryRemote()
        let a = try Device(remote, name: "a")
        let before = try Device(remote, name: "b")
        let f = try a.createFile("report.txt", bytes("the whole report"))
        let sha = sha256Hex(bytes("the whole report"))
        #expect(eventually { before.lookup("report.txt")?.remoteSHA == sha })
        #expect(before.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(eventually { (try? before.container.read { s in try s.store.unsynced() })?.isEmpty == true })
        // As a crash leaves it: the rename reached the disk, the bytes did not, the mark is still there.
        try before.container.mutateThrowing { s in try s.store.markUnsynced(f.id, sha: sha) }
        try Data(repeating: 0, count: 16).write(to: URL(fileURLWithPath: before.container.contentPath(f.id)))
        before.container.stop()
        // The store as the crash left it (the stopped container may hold the store's lock a while yet).
        let after = TempDir()
        try FileManager.default.removeItem(atPath: after.path)
        try FileManager.default.copyItem(atPath: before.dir.path + "/store", toPath: after.path)
        try FileManager.default.removeItem(atPath: after.path + "/lock")
        let b = try Device(remote, name: "b", storeDirectory: after.path)
        #expect(b.container.item(f.id)?.hasLocal == false)
        #expect(b.fetch(f.id).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == bytes("the whole report"))
        #expect(try b.container.checkStore(repair: false).isClean)
    }
}
