// Content in chunks between two devices (docs/CHUNKS.md): a small change moves a few chunks each way, holes
// never travel and stay holes, a remote without chunks still gets every file whole, and a chunk the local copy
// holds but that no longer hashes right there is fetched rather than copied.
import Foundation
import Testing
import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting
#if canImport(Glibc)
import Glibc
#endif

@Suite struct ChunkTransferTests {
    let remote = MemoryRemote()
    static let twoChunks = 2 * Int64(Chunker.maxSize)

    /// Both devices hold the file; returns them and its item.
    private func shared(_ data: [UInt8], remote: RemoteClient? = nil) throws -> (Device, Device, Item) {
        let a = try Device(remote ?? self.remote, name: "a"), b = try Device(remote ?? self.remote, name: "b")
        let f = try a.createFile("big.bin", data)
        #expect(eventually(30) { a.pending == 0 })
        #expect(eventually(30) { b.container.item(f.id)?.remoteSHA == sha256Hex(data) })
        #expect(b.fetch(f.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        return (a, b, f)
    }

    @Test func aOneByteChangeMovesAtMostTwoChunksEachWay() throws {
        var data = randomBytes(24 << 20)
        let (a, b, f) = try shared(data)
        let up = remote.uploadedBytes, down = remote.downloadedBytes
        data[12 << 20] ^= 0xff
        try a.write(f.id, data)
        #expect(eventually(30) { a.pending == 0 })
        let sent = remote.uploadedBytes - up
        #expect(sent > 0 && sent <= Self.twoChunks, "\(sent) bytes went up")
        #expect(eventually(30) { b.container.item(f.id)?.remoteSHA == sha256Hex(data) })
        #expect(b.fetch(f.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == data)
        let fetched = remote.downloadedBytes - down
        #expect(fetched > 0 && fetched <= Self.twoChunks, "\(fetched) bytes came down")
    }

    /// The content of a large file goes up on the content lane: a small file saved meanwhile is on the remote
    /// while the large one still uploads (the push loop sent them one after the other before).
    @Test func aSmallFileDoesNotWaitBehindALargeUpload() throws {
        let a = try Device(remote, name: "a")
        remote.holdChunkUploads = true
        let large = randomBytes(12 << 20), small = Array("saved while the large one uploads".utf8)
        let big = try a.createFile("big.bin", large)
        #expect(eventually(30) { remote.heldChunkUploads > 0 })
        let note = try a.createFile("small.txt", small)
        let onRemote = { (id: String, bytes: [UInt8]) in
            remote.allItems.contains { $0.id == id && $0.sha256 == sha256Hex(bytes) }
        }
        #expect(eventually(15) { onRemote(note.id, small) }, "the small file waited behind the large one")
        #expect(!onRemote(big.id, large), "the large file landed while its upload was held")
        remote.holdChunkUploads = false
        #expect(eventually(30) { a.pending == 0 })
        #expect(onRemote(big.id, large))
    }

    /// A new file made of another file's bytes (a copy edited, made on the other device) comes down as the
    /// chunks no local file holds: those of the file it was made from are copied from it.
    @Test func chunksHeldByAnotherLocalFileAreCopiedNotFetched() throws {
        let data = randomBytes(24 << 20)
        let (a, b, _) = try shared(data)
        var edited = data
        edited[12 << 20] ^= 0xff
        let copy = try a.createFile("copy.bin", edited)
        #expect(eventually(30) { a.pending == 0 })
        #expect(eventually(30) { b.container.item(copy.id)?.remoteSHA == sha256Hex(edited) })
        let down = remote.downloadedBytes
        #expect(b.fetch(copy.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        #expect(b.content(copy.id) == edited)
        let fetched = remote.downloadedBytes - down
        #expect(fetched > 0 && fetched <= Self.twoChunks, "\(fetched) bytes came down")
    }

    @Test func holesAreNeitherSentNorStoredAndStayHoles() throws {
        let a = try Device(remote, name: "a"), b = try Device(remote, name: "b")
        let item = try a.container.createFile(parent: a.docs, name: "sparse.img", mode: 0o644)
        let piece = randomBytes(1 << 20)
        try a.writeSparse(item.id, size: 64 << 20, piece, at: 32 << 20)
        #expect(eventually(30) { a.pending == 0 })
        #expect(remote.uploadedBytes <= Int64(piece.count) + (256 << 10), "\(remote.uploadedBytes) bytes went up")
        #expect(eventually(30) { b.container.item(item.id)?.remoteSize == 64 << 20 })
        #expect(b.fetch(item.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        #expect(remote.downloadedBytes <= Int64(piece.count) + (256 << 10))
        var expected = [UInt8](repeating: 0, count: 64 << 20)
        expected.replaceSubrange((32 << 20)..<(33 << 20), with: piece)
        #expect(b.content(item.id) == expected)
        var st = stat()
        #expect(stat(b.container.contentPath(item.id), &st) == 0)
        #expect(Int64(st.st_blocks) * 512 <= 4 << 20, "the holes were filled: \(st.st_blocks) blocks")
    }

    @Test func aRemoteWithoutChunksGetsEveryFileWhole() throws {
        let link = Link(remote)
        link.chunks.value = false
        var data = randomBytes(9 << 20)
        let (a, b, f) = try shared(data, remote: link)
        #expect(try remote.manifest(sha256: sha256Hex(data)) == nil)
        data[1] ^= 1
        try a.write(f.id, data)
        #expect(eventually(30) { a.pending == 0 })
        #expect(eventually(30) { b.container.item(f.id)?.remoteSHA == sha256Hex(data) })
        #expect(b.fetch(f.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == data)
    }

    /// Chunks that arrive damaged are never installed: the whole file's hash refuses them, and once the remote
    /// serves the right bytes the next try keeps what hashes right and installs the version.
    @Test func damagedChunksAreNeverInstalled() throws {
        let data = randomBytes(12 << 20)
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b", downloadTimeout: 2)
        let f = try a.createFile("big.bin", data)
        #expect(eventually(30) { a.pending == 0 })
        #expect(eventually(30) { b.container.item(f.id)?.remoteSHA == sha256Hex(data) })
        remote.corruptDownloads = true
        #expect(b.fetch(f.id, seconds: 30).map { (try? $0.get()) == nil } == true)
        #expect(b.container.item(f.id)?.isCurrent == false)
        remote.corruptDownloads = false
        #expect(b.fetch(f.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == data)
    }

    /// The local copy changed under the download (a chunk there no longer hashes to its name): that chunk comes
    /// from the remote, and the file installed is the version asked for.
    @Test func aLocalChunkThatChangedIsFetched() throws {
        var data = randomBytes(12 << 20)
        let (a, b, f) = try shared(data)
        data[data.count - 1] ^= 1
        try a.write(f.id, data)
        #expect(eventually(30) { a.pending == 0 })
        #expect(eventually(30) { b.container.item(f.id)?.remoteSHA == sha256Hex(data) })
        // Damage every chunk of b's old copy but keep its cuts: the bytes differ, so no copy hashes right.
        let local = LocalChunks(copyOf: f.id, in: b.container)
        defer { local.close() }
        let before = try Chunker.chunks(ofFile: b.container.contentPath(f.id))
        let fd = try FileDescriptor.open(b.container.contentPath(f.id), O_WRONLY)
        for chunk in before {
            try [data[Int(chunk.offset)] ^ 0xff].withUnsafeBytes { try fd.writeAll($0, at: chunk.offset) }
        }
        fd.close()
        let staging = FileDescriptor(raw: Glibc.open("/dev/null", O_WRONLY))
        defer { staging.close() }
        let first = try #require(before.first)
        #expect(!local.copy(try #require(first.sha256), size: first.size, to: staging, at: 0))
        #expect(b.fetch(f.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == data)
    }
}

extension Device {
    /// Writes a sparse file as a program would: open with O_TRUNC, set the size, write one piece, close.
    func writeSparse(_ id: String, size: Int64, _ piece: [UInt8], at offset: Int64) throws {
        guard case .opened(let fd) = try container.open(id, writable: true, truncate: true) else {
            throw CoreError.io("an open with O_TRUNC must not fetch")
        }
        try container.willWrite(id)
        try fd.truncate(size)
        try piece.withUnsafeBytes { try fd.writeAll($0, at: offset) }
        fd.close()
        try container.flushed(id)
        container.closed(id, writable: true)
    }
}
