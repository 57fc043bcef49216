// The in-process remote keeps the stub's rules (docs/WIRE.md).
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct MemoryRemoteTests {
    let remote = MemoryRemote()

    func file(_ id: String, _ name: String, parent: String = "documents", content: [UInt8] = []) -> WireItem {
        WireItem(id: id, parent: parent, name: name, kind: .file, mode: 0o644, mtime: 1,
                 size: Int64(content.count), sha256: sha256Hex(content), device: "t")
    }

    func dir(_ id: String, _ name: String, parent: String = "documents") -> WireItem {
        WireItem(id: id, parent: parent, name: name, kind: .dir, mode: 0o755, mtime: 1, size: 0, sha256: "", device: "t")
    }

    @Test func newContainerHasRootAndDocuments() throws {
        let all = try remote.changes(since: nil, waitSeconds: 0)
        #expect(all.items.map(\.id) == ["root", "documents"])
        #expect(all.items[1].name == "Documents" && all.items[1].mode == 0o755 && all.items[1].parent == "root")
        #expect(all.token == "2" && !all.more)
        #expect(try remote.openContainer().token == "2")
    }

    @Test func feedPagesAndKeepsTombstones() throws {
        for i in 0..<5 { _ = try remote.putItem(file("f\(i)", "f\(i)"), ifMatch: nil) }
        let gone = try remote.deleteItem("f0", ifMatch: try remote.item("f0").version)
        #expect(gone.deleted)
        remote.changeLimit = 2
        var token: String? = "2"
        var seen: [String] = []
        while true {
            let page = try remote.changes(since: token, waitSeconds: 0)
            #expect(page.items.count <= 2)
            seen += page.items.map(\.id)
            token = page.token
            if !page.more { break }
        }
        #expect(seen == ["f1", "f2", "f3", "f4", "f0"]) // f0's newest state is its tombstone, last
        #expect(token == String(remote.currentVersion))
        #expect(throws: RemoteError.self) { try remote.changes(since: "nonsense", waitSeconds: 0) }
    }

    @Test func longPollWakesOnChange() throws {
        let token = try remote.openContainer().token
        let answer = Box<WireChanges?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [remote] in
            answer.value = try? remote.changes(since: token, waitSeconds: 20)
            done.signal()
        }
        usleep(100_000)
        _ = try remote.putItem(file("x", "x"), ifMatch: nil)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(answer.value?.items.map(\.id) == ["x"])
        // Nothing newer and a short wait: an empty answer at the same position.
        let empty = try remote.changes(since: answer.value?.token, waitSeconds: 1)
        #expect(empty.items.isEmpty && empty.token == answer.value?.token)
    }

    @Test func conditionalWrites() throws {
        let a = try remote.putItem(file("a", "a.txt"), ifMatch: nil)
        #expect(a.version == 3 && a.device == "t")
        // Create of an existing id, update with a stale version, update of a missing id.
        #expect(throws: RemoteError.preconditionFailed(current: a)) { try remote.putItem(file("a", "b.txt"), ifMatch: nil) }
        #expect(throws: RemoteError.preconditionFailed(current: a)) { try remote.putItem(file("a", "b.txt"), ifMatch: 1) }
        #expect(throws: RemoteError.notFound("item zz")) { try remote.putItem(file("zz", "z"), ifMatch: 4) }
        // A name taken among live siblings.
        #expect(throws: RemoteError.conflict("the name a.txt is taken", current: a)) {
            try remote.putItem(file("b", "a.txt"), ifMatch: nil)
        }
        // The parent must be a live directory, never the item itself or below it.
        let d = try remote.putItem(dir("d", "d"), ifMatch: nil)
        let e = try remote.putItem(dir("e", "e", parent: "d"), ifMatch: nil)
        #expect(throws: RemoteError.misplaced("an item cannot move below itself")) {
            try remote.putItem(dir("d", "d", parent: "e"), ifMatch: d.version)
        }
        #expect(throws: RemoteError.self) { try remote.putItem(file("c", "c", parent: "a"), ifMatch: nil) }
        #expect(throws: RemoteError.self) { try remote.putItem(file("c", "c", parent: "missing"), ifMatch: nil) }
        #expect(throws: RemoteError.self) { try remote.putItem(file("c", "."), ifMatch: nil) }
        #expect(throws: RemoteError.self) { try remote.putItem(file("d", "d"), ifMatch: d.version) } // kind
        // A non-empty directory cannot be deleted (the child in the way comes back); an empty one can, once.
        #expect(throws: RemoteError.conflict("the directory is not empty", current: e)) {
            try remote.deleteItem("d", ifMatch: d.version)
        }
        let gone = try remote.deleteItem("e", ifMatch: e.version)
        #expect(throws: RemoteError.preconditionFailed(current: gone)) { try remote.deleteItem("e", ifMatch: gone.version) }
        #expect(throws: RemoteError.self) { try remote.deleteItem("root", ifMatch: 1) }
        // A tombstone: create refused, stale update refused, update at its version revives it.
        #expect(throws: RemoteError.preconditionFailed(current: gone)) { try remote.putItem(dir("e", "e", parent: "d"), ifMatch: nil) }
        #expect(throws: RemoteError.preconditionFailed(current: gone)) { try remote.putItem(dir("e", "e", parent: "d"), ifMatch: e.version) }
        let back = try remote.putItem(dir("e", "e", parent: "d"), ifMatch: gone.version)
        #expect(!back.deleted && back.version > gone.version)
        #expect(remote.lookup(path: "Documents/d/e")?.id == "e")
    }

    @Test func blobs() throws {
        let dir = TempDir()
        let content = bytes("some content")
        let sha = sha256Hex(content)
        let path = dir.path + "/f"
        #expect(FileManager.default.createFile(atPath: path, contents: Data(content)))
        // A file needs its blob, with the right size (the empty file needs none).
        #expect(throws: RemoteError.self) { try remote.putItem(file("a", "a", content: content), ifMatch: nil) }
        _ = try remote.putItem(file("empty", "empty"), ifMatch: nil)
        #expect(try !remote.hasBlob(sha256: sha))
        #expect(throws: RemoteError.self) {
            try remote.uploadBlob(sha256: sha, size: 3, fromFile: path, progress: nil)
        }
        #expect(throws: RemoteError.self) {
            try remote.uploadBlob(sha256: emptySHA256, size: Int64(content.count), fromFile: path, progress: nil)
        }
        let reported = Box<Int64>(0)
        try remote.uploadBlob(sha256: sha, size: Int64(content.count), fromFile: path) { reported.value = $0; return true }
        #expect(reported.value == Int64(content.count))
        #expect(try remote.hasBlob(sha256: sha))
        var wrongSize = file("a", "a", content: content); wrongSize.size = 1
        #expect(throws: RemoteError.self) { try remote.putItem(wrongSize, ifMatch: nil) }
        _ = try remote.putItem(file("a", "a", content: content), ifMatch: nil)

        // Download from an offset, appending at the descriptor's position.
        let out = try FileDescriptor.open(dir.path + "/out", O_RDWR | O_CREAT, mode: 0o600)
        try out.writeAll(Array(content.prefix(4)))
        try remote.downloadBlob(sha256: sha, offset: 4, to: out) { reported.value = $0; return true }
        out.close()
        #expect(FileManager.default.contents(atPath: dir.path + "/out").map { [UInt8]($0) } == content)
        #expect(reported.value == Int64(content.count))
        #expect(remote.blobDownloads == [sha: 1])
        #expect(throws: RemoteError.notFound("blob \(String(repeating: "0", count: 64))")) {
            try remote.downloadBlob(sha256: String(repeating: "0", count: 64), offset: 0, to: out, progress: nil)
        }
    }

    @Test func offlineRefusesEverything() throws {
        remote.offline = true
        #expect(throws: RemoteError.unreachable("the memory remote is offline")) { try remote.openContainer() }
        #expect(throws: RemoteError.self) { try remote.changes(since: nil, waitSeconds: 0) }
        #expect(throws: RemoteError.self) { try remote.item("root") }
        #expect(throws: RemoteError.self) { try remote.putItem(file("a", "a"), ifMatch: nil) }
        remote.offline = false
        _ = try remote.putItem(file("a", "a"), ifMatch: nil)
    }

    @Test func seedMakesDirectoriesAndUpdates() throws {
        let f = remote.seed(path: "Documents/x/y/z.txt", bytes: bytes("zz"), device: "other", mtime: 77)
        #expect(f.kind == .file && f.size == 2 && f.device == "other" && f.mtime == 77)
        #expect(remote.lookup(path: "Documents/x/y")?.kind == .dir)
        #expect(remote.blob(f.sha256) == bytes("zz"))
        let g = remote.seed(path: "Documents/x/y/z.txt", bytes: bytes("new"), device: "other", mtime: 78)
        #expect(g.id == f.id && g.version > f.version && g.size == 3)
        let d = remote.seed(path: "Documents/empty", bytes: nil, device: "other", mtime: 1)
        #expect(d.kind == .dir && d.sha256 == "")
    }
}
