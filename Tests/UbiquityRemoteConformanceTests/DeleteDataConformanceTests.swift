// Deleting an app's data (docs/HISTORY.md "Deleting an app's data", docs/WIRE.md `POST .../delete-data`), run
// against each backend of `Backend.all`: everything outside Documents/ goes (with
// `documents`, everything), children before their folders, as one entry of Recently Deleted that a restore of
// any of its items brings back whole and an empty of any of them removes whole; what was deleted before stays
// an entry of its own.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore

@Suite(.serialized) struct DeleteDataConformanceTests {
    /// Documents/keep.txt, Library/Caches/cache.bin, Library/old.txt (deleted before) and settings.json.
    private func container(_ s: Subject) throws -> (deletedBefore: WireItem, token: String) {
        try s.makeFile("k1", "a document", name: "keep.txt")
        _ = try s.remote.putItem(directory("lib", in: WireRules.rootID, name: "Library"), ifMatch: nil)
        _ = try s.remote.putItem(directory("cch", in: "lib", name: "Caches"), ifMatch: nil)
        try s.makeFile("c1", "cached bytes", in: "cch", name: "cache.bin")
        try s.makeFile("j1", "{\"a\": 1}", in: WireRules.rootID, name: "settings.json")
        let old = try s.delete(try s.makeFile("o1", "deleted before", in: "lib", name: "old.txt"))
        return (old, try s.remote.changes(since: nil, waitSeconds: 0).token)
    }

    @Test(arguments: Backend.all) func theAppsDataGoesAsOneEntryAndComesBackWhole(backend: Backend) throws {
        let s = try backend.make(nil)
        let (old, token) = try container(s)
        let answer = try s.remote.deleteData(documents: false, device: "laptop")
        let batch = try #require(answer.batch)
        #expect(!batch.documentsToo)
        #expect(Set(answer.deleted.map(\.id)) == ["lib", "cch", "c1", "j1"])
        #expect(answer.deleted.allSatisfy { $0.deleted && $0.device == "laptop" })
        let order = answer.deleted.map(\.id)
        #expect(order.firstIndex(of: "c1")! < order.firstIndex(of: "cch")! && order.firstIndex(of: "cch")! < order.firstIndex(of: "lib")!,
                "children before their folders")
        #expect(try s.remote.changes(since: token, waitSeconds: 0).items == answer.deleted, "the deletes reach every device")
        #expect(try !s.remote.item("k1").deleted && !s.remote.item(WireRules.documentsID).deleted, "Documents/ stays")
        let trash = try s.remote.trash()
        #expect(Set(trash.filter { $0.batch == batch }.map(\.id)) == ["lib", "cch", "c1", "j1"])
        #expect(trash.first { $0.id == old.id }?.batch == nil, "what was deleted before is an entry of its own")
        #expect(trash.first { $0.id == "c1" }?.path == "Library/Caches/cache.bin")

        // A restore of any one of them brings the whole deletion back, and nothing else.
        let restored = try s.remote.restore(ids: ["j1"], device: "phone")
        #expect(Set(restored.map(\.id)) == ["lib", "cch", "c1", "j1"])
        #expect(restored.firstIndex { $0.id == "lib" }! < restored.firstIndex { $0.id == "c1" }!, "parents first")
        #expect(try s.remote.item("c1").parent == "cch" && !s.remote.item("c1").deleted)
        #expect(try s.download(s.remote.item("c1").sha256) == Array("cached bytes".utf8))
        #expect(try s.remote.trash().map(\.id) == [old.id])
    }

    @Test(arguments: Backend.all) func withDocumentsEverythingGoesAndAnEmptyTakesTheWhole(backend: Backend) throws {
        let s = try backend.make(nil)
        let (old, _) = try container(s)
        let answer = try s.remote.deleteData(documents: true, device: "laptop")
        #expect(answer.batch?.documentsToo == true)
        #expect(Set(answer.deleted.map(\.id)) == ["lib", "cch", "c1", "j1", "k1", WireRules.documentsID])
        #expect(try !s.remote.item(WireRules.rootID).deleted, "the root stays")
        #expect(try s.remote.emptyTrash(ids: ["k1"]) == 6, "the whole deletion, by one of its items")
        #expect(try s.remote.trash().map(\.id) == [old.id])
        // Nothing left to delete: no deletion, no entry.
        let again = try s.remote.deleteData(documents: true, device: "laptop")
        #expect(again.deleted.isEmpty && again.batch == nil)
        #expect(try s.remote.trash().map(\.id) == [old.id])
    }
}
