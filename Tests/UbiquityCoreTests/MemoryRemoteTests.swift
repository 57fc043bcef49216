// The test hooks of the in-process remote (its wire rules are checked by Tests/UbiquityRemoteConformanceTests).
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

    @Test func countsDownloadsAndCanCorruptThem() throws {
        let dir = TempDir()
        let content = bytes("some content")
        let sha = sha256Hex(content)
        let path = dir.path + "/f"
        #expect(FileManager.default.createFile(atPath: path, contents: Data(content)))
        try remote.uploadBlob(sha256: sha, size: Int64(content.count), fromFile: path, progress: nil)
        let out = try FileDescriptor.open(dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, mode: 0o600)
        try remote.downloadBlob(sha256: sha, offset: 0, to: out, progress: nil)
        remote.corruptDownloads = true
        try remote.downloadBlob(sha256: sha, offset: 0, to: out, progress: nil)
        out.close()
        #expect(remote.blobDownloads == [sha: 2])
        let got = FileManager.default.contents(atPath: dir.path + "/out").map { [UInt8]($0) } ?? []
        #expect(got.count == 2 * content.count && Array(got.prefix(content.count)) == content)
        #expect(Array(got.suffix(content.count)) != content, "the second copy has a byte flipped")
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
