// Recently Deleted and version history (docs/HISTORY.md, docs/WIRE.md "History"), run against each backend of
// `Backend.all`: an item's versions newest first, a delete in the trash with its path, time and device, a
// restore to the old place (numbered when the name is taken, its deleted folder first, a folder with what was
// deleted with it but not what went long before), emptying, the blobs the history keeps through a collection
// pass, a retention of seconds, and the refusals of bad input.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore

private let minute: Int64 = 60 * HistoryRules.second

extension Subject {
    /// A file `id` named `name` in `parent` holding `text`, uploaded and created.
    @discardableResult
    func makeFile(_ id: String, _ text: String, in parent: String = WireRules.documentsID, name: String? = nil) throws
        -> WireItem {
        try upload(Array(text.utf8))
        return try remote.putItem(file(id, in: parent, name: name, bytes: Array(text.utf8)), ifMatch: nil)
    }

    /// Deletes the item as the device `device` (its change id names the device in the tombstone).
    @discardableResult
    func delete(_ item: WireItem, by device: String = "phone") throws -> WireItem {
        try remote.deleteItem(item.id, ifMatch: item.version, change: WireChangeID(id: "del-" + item.id, device: device))
    }

    func trashIDs() throws -> [String] { try remote.trash().map(\.id) }
}

@Suite(.serialized) struct HistoryConformanceTests {
    @Test(arguments: Backend.all) func anItemsVersionsAreListedNewestFirst(backend: Backend) throws {
        let s = try backend.make(nil)
        let texts = (1...5).map { "version \($0) of the notes" }
        var item = try s.makeFile("n1", texts[0], name: "notes.txt")
        var made = [item]
        for text in texts.dropFirst() {
            try s.upload(Array(text.utf8))
            var next = file("n1", name: "notes.txt", bytes: Array(text.utf8))
            next.device = "laptop"
            item = try s.remote.putItem(next, ifMatch: item.version)
            made.append(item)
        }
        let versions = try s.remote.history(id: "n1")
        #expect(versions.map(\.version) == made.reversed().map(\.version), "every version, newest first")
        #expect(versions.map(\.sha256) == texts.reversed().map { sha256Hex(Array($0.utf8)) })
        #expect(versions.allSatisfy { $0.path == "Documents/notes.txt" && !$0.deleted && $0.id == "n1" })
        #expect(versions.first?.device == "laptop" && versions.last?.device == "")
        #expect(zip(versions, versions.dropFirst()).allSatisfy { $0.at >= $1.at }, "times newest first too")
        // A move shows the new path from its version on.
        _ = try s.remote.putItem(directory("d1"), ifMatch: nil)
        _ = try s.remote.putItem(file("n1", in: "d1", name: "moved.txt", bytes: Array(texts[4].utf8)), ifMatch: item.version)
        #expect(try s.remote.history(id: "n1").map(\.path).prefix(2) == ["Documents/d1/moved.txt", "Documents/notes.txt"])
    }

    @Test(arguments: Backend.all) func aDeleteShowsInTheTrashWithItsPathTimeAndDevice(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "folder"), ifMatch: nil)
        let made = try s.makeFile("a1", "some words", in: "f1", name: "a.txt")
        #expect(try s.remote.trash().isEmpty)
        let before = s.clock.now()
        let tomb = try s.delete(made, by: "phone")
        let after = s.clock.now()
        let trash = try s.remote.trash()
        #expect(trash.count == 1)
        let row = try #require(trash.first)
        #expect(row.id == "a1" && row.deleted && row.version == tomb.version)
        #expect(row.path == "Documents/folder/a.txt" && row.parent == "f1" && row.name == "a.txt")
        #expect(row.device == "phone" && row.at >= before && row.at <= after)
        #expect(row.sha256 == made.sha256 && row.size == made.size && row.kind == .file)
        #expect(try s.remote.history(id: "a1").first == row, "the delete is the newest version")
    }

    @Test(arguments: Backend.all) func aRestoreBringsTheItemBackWhereItWas(backend: Backend) throws {
        let s = try backend.make(nil)
        let made = try s.makeFile("a1", "keep me")
        let tomb = try s.delete(made)
        let token = try s.remote.changes(since: nil, waitSeconds: 0).token
        let restored = try s.remote.restore(ids: ["a1"], device: "laptop")
        #expect(restored.count == 1)
        let back = try #require(restored.first)
        #expect(back.id == "a1" && !back.deleted && back.version > tomb.version && back.device == "laptop")
        #expect(back.parent == made.parent && back.name == made.name && back.sha256 == made.sha256 && back.size == made.size)
        #expect(try s.remote.item("a1") == back)
        #expect(try s.remote.changes(since: token, waitSeconds: 0).items == [back], "a new version in the feed")
        #expect(try s.download(back.sha256) == Array("keep me".utf8), "the content is the kept blob")
        #expect(try s.remote.trash().isEmpty)
        #expect(try s.remote.restore(ids: ["a1"], device: "laptop") == [back], "a retry answers the item as it is")
    }

    @Test(arguments: Backend.all) func aRestoreIntoATakenNameNumbersIt(backend: Backend) throws {
        let s = try backend.make(nil)
        try s.delete(try s.makeFile("a1", "the old report", name: "report.txt"))
        try s.delete(try s.makeFile("a2", "an older report", name: "report.txt"))
        try s.makeFile("a3", "the new report", name: "report.txt")
        try s.delete(try s.remote.putItem(directory("d1", name: "notes"), ifMatch: nil))
        _ = try s.remote.putItem(directory("d2", name: "notes"), ifMatch: nil)
        let restored = try s.remote.restore(ids: ["a1", "a2", "d1"], device: "laptop")
        #expect(restored.map(\.name) == ["report 2.txt", "report 3.txt", "notes 2"])
        #expect(try s.remote.item("a3").name == "report.txt", "the live one keeps its name")
    }

    @Test(arguments: Backend.all) func restoringAFileRestoresItsDeletedFolderFirst(backend: Backend) throws {
        let s = try backend.make(nil)
        let folder = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        let a = try s.makeFile("a1", "a", in: "f1", name: "a.txt")
        let b = try s.makeFile("b1", "b", in: "f1", name: "b.txt")
        try s.delete(a); try s.delete(b); try s.delete(folder)
        let restored = try s.remote.restore(ids: ["a1"], device: "laptop")
        #expect(restored.map(\.id) == ["f1", "a1"], "the folder first, then the file")
        #expect(try s.remote.item("f1").deleted == false && s.remote.item("f1").name == "project")
        #expect(try s.remote.item("a1").parent == "f1")
        #expect(try s.trashIDs() == ["b1"], "what was not asked for stays in the trash")
    }

    @Test(arguments: Backend.all) func aFolderComesBackWithWhatWasDeletedWithItNotBefore(backend: Backend) throws {
        let s = try backend.make(nil)
        let folder = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        let sub = try s.remote.putItem(directory("g1", in: "f1", name: "src"), ifMatch: nil)
        let x = try s.makeFile("x1", "x", in: "g1", name: "x.txt")
        let y = try s.makeFile("y1", "y", in: "f1", name: "y.txt")
        let old = try s.makeFile("o1", "deleted long before", in: "f1", name: "old.txt")
        try s.delete(old)
        s.clock.advance(2 * HistoryRules.hour)
        try s.delete(x); try s.delete(sub)
        s.clock.advance(minute) // rm -rf takes its time
        try s.delete(y); try s.delete(folder)
        let restored = try s.remote.restore(ids: ["f1"], device: "laptop")
        #expect(Set(restored.map(\.id)) == ["f1", "g1", "x1", "y1"])
        #expect(restored.first?.id == "f1" && restored.firstIndex { $0.id == "g1" }! < restored.firstIndex { $0.id == "x1" }!,
                "parents before children")
        #expect(try s.remote.item("x1").parent == "g1" && s.remote.item("g1").parent == "f1")
        #expect(try s.trashIDs() == ["o1"], "a child deleted two hours before stays in the trash")
    }

    @Test(arguments: Backend.all) func emptyingTheTrash(backend: Backend) throws {
        let s = try backend.make(nil)
        try s.delete(try s.makeFile("a1", "a"))
        try s.delete(try s.makeFile("b1", "b"))
        let folder = try s.remote.putItem(directory("f1"), ifMatch: nil)
        try s.delete(try s.makeFile("c1", "c", in: "f1"))
        try s.delete(folder)
        #expect(Set(try s.trashIDs()) == ["a1", "b1", "c1", "f1"])
        #expect(try s.remote.emptyTrash(ids: ["a1"]) == 1)
        #expect(try s.remote.emptyTrash(ids: ["a1"]) == 0, "again: nothing left to empty")
        #expect(try s.remote.emptyTrash(ids: ["f1"]) == 2, "a folder with what was deleted with it")
        #expect(try s.trashIDs() == ["b1"])
        #expect(try s.remote.history(id: "a1").isEmpty, "its history went")
        #expect(isNotFound(failure({ try s.remote.restore(ids: ["a1"], device: "laptop") })))
        #expect(try s.remote.emptyTrash() == 1)
        #expect(try s.remote.trash().isEmpty)
        #expect(try s.remote.item("b1").deleted, "the tombstone stays in the feed")
    }

    @Test(arguments: Backend.all) func theHistoryKeepsItsBlobsThroughCollection(backend: Backend) throws {
        let s = try backend.make(nil)
        let v1 = try s.makeFile("a1", "the first version")
        try s.upload(Array("the second version".utf8))
        let v2 = try s.remote.putItem(file("a1", bytes: Array("the second version".utf8)), ifMatch: v1.version)
        let gone = try s.makeFile("b1", "a file in the trash")
        try s.delete(gone)
        try s.collectPass(s.clock.now() + 2 * HistoryRules.hour)
        #expect(try s.remote.hasBlob(sha256: v1.sha256), "an older version's blob is kept")
        #expect(try s.remote.hasBlob(sha256: gone.sha256), "a trashed file's blob is kept past the grace")
        #expect(try s.remote.restore(ids: ["b1"], device: "laptop").first?.sha256 == gone.sha256)
        try s.delete(try s.remote.item("b1"), by: "laptop")
        #expect(try s.remote.emptyTrash(ids: ["b1"]) == 1)
        try s.collectPass(s.clock.now() + 4 * HistoryRules.hour)
        #expect(try s.remote.hasBlob(sha256: gone.sha256) == false, "emptied and past the grace: collected")
        #expect(try s.remote.hasBlob(sha256: v1.sha256) && s.remote.hasBlob(sha256: v2.sha256))
    }

    @Test(arguments: Backend.all) func aRetentionOfSecondsLetsVersionsAndTheTrashGo(backend: Backend) throws {
        let retention = HistoryRetention(versions: try #require(VersionPolicy(parsing: "10s,20s")),
                                         keepDeleted: 30 * HistoryRules.second)
        let s = try backend.make(SubjectOptions(retention: retention))
        var item = try s.makeFile("a1", "one")
        for text in ["two", "three"] {
            try s.upload(Array(text.utf8))
            item = try s.remote.putItem(file("a1", bytes: Array(text.utf8)), ifMatch: item.version)
        }
        let gone = try s.delete(try s.makeFile("b1", "deleted"))
        let start = s.clock.now()
        let all = try s.remote.history(id: "a1").map(\.version)
        #expect(all.count == 3)
        try s.collectPass(start + 5 * HistoryRules.second)
        #expect(try s.remote.history(id: "a1").map(\.version) == all, "every version of the last 10 s")
        try s.collectPass(start + 15 * HistoryRules.second)
        #expect(try s.remote.history(id: "a1").map(\.version) == Array(all.prefix(2)), "then the newest older one of the day")
        try s.collectPass(start + 25 * HistoryRules.second)
        #expect(try s.remote.history(id: "a1").map(\.version) == [item.version], "the current version stays")
        #expect(try s.trashIDs() == ["b1"])
        try s.collectPass(start + 35 * HistoryRules.second)
        #expect(try s.remote.trash().isEmpty, "past --keep-deleted")
        #expect(try s.remote.history(id: "b1").isEmpty && s.remote.item("b1") == gone)
    }

    @Test(arguments: Backend.all) func badInputIsRefusedWithAPlainMessage(backend: Backend) throws {
        let s = try backend.make(nil)
        let live = try s.makeFile("a1", "live")
        for e in [failure({ try s.remote.history(id: "nobody") }),
                  failure({ try s.remote.restore(ids: ["nobody"], device: "laptop") }),
                  failure({ try s.remote.emptyTrash(ids: ["nobody"]) })] {
            guard case .notFound(let message)? = e else { Issue.record("expected 404, got \(String(describing: e))"); continue }
            #expect(!message.isEmpty && !message.contains("\n"))
        }
        #expect(status(failure({ try s.remote.restore(ids: [], device: "laptop") })) == 400)
        #expect(status(failure({ try s.remote.restore(ids: ["bad id!"], device: "laptop") })) == 400)
        #expect(status(failure({ try s.remote.restore(ids: Array(repeating: "a1", count: 1001), device: "x") })) == 400)
        #expect(status(failure({ try s.remote.emptyTrash(ids: []) })) == 400)
        #expect(status(failure({ try s.remote.history(id: "bad id!") })) == 400)
        // An id of another container is unknown here.
        let other = try s.sibling()
        try other.upload(Array("elsewhere".utf8), dir: s.dir)
        let there = try other.putItem(file("e1", bytes: Array("elsewhere".utf8)), ifMatch: nil)
        _ = try other.deleteItem("e1", ifMatch: there.version)
        #expect(try other.trash().map(\.id) == ["e1"])
        #expect(isNotFound(failure({ try s.remote.restore(ids: ["e1"], device: "laptop") })))
        #expect(isNotFound(failure({ try s.remote.emptyTrash(ids: ["e1"]) })))
        #expect(isNotFound(failure({ try s.remote.history(id: "e1") })))
        // A refused restore changes nothing, even for the ids before the bad one.
        try s.delete(live)
        #expect(isNotFound(failure({ try s.remote.restore(ids: ["a1", "nobody"], device: "laptop") })))
        #expect(try s.trashIDs() == ["a1"])
    }
}

extension RemoteClient {
    /// Uploads `bytes` as a blob through a file in `dir`.
    func upload(_ bytes: [UInt8], dir: String) throws {
        let path = dir + "/up-\(randomHex(bytes: 4))"
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        try uploadBlob(sha256: sha256Hex(bytes), size: Int64(bytes.count), fromFile: path, progress: nil)
    }
}
