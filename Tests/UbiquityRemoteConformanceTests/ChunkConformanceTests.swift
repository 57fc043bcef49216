// Content in chunks (docs/CHUNKS.md, docs/WIRE.md "Content in chunks"), run against each backend of
// `Backend.all`: which chunks are missing, a manifest refused while a chunk it names is not stored and accepted
// once it is, an item naming a manifest's hash as it names a blob's, the manifest's content read as a blob's
// (zeros for its hole, from an offset across a chunk's end), and the manifest itself read back.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
@testable import UbiquityHTTP
#if canImport(Glibc)
import Glibc
#endif

/// A small version in chunks: two data chunks with a hole between them, the chunks' bytes side by side in one
/// file (as a client uploads them, each from its offset).
private struct Chunked {
    let first = Array("the first chunk, ".utf8)
    let hole: Int64 = 7
    let second = Array("and the second one".utf8)

    var content: [UInt8] { first + [UInt8](repeating: 0, count: Int(hole)) + second }
    var manifest: WireManifest {
        WireManifest(sha256: sha256Hex(content), size: Int64(content.count), chunks: [
            WireChunk(sha256: sha256Hex(first), size: Int64(first.count)),
            WireChunk(sha256: nil, size: hole),
            WireChunk(sha256: sha256Hex(second), size: Int64(second.count)),
        ])
    }

    /// Writes both chunks to a file in `dir`: the first at 0, the second after it.
    func file(in dir: String) -> String {
        let path = dir + "/chunks-\(randomHex(bytes: 4))"
        _ = FileManager.default.createFile(atPath: path, contents: Data(first + second))
        return path
    }

    /// Uploads the chunks from `path`.
    func upload(_ remote: any RemoteClient, from path: String) throws {
        try remote.uploadChunk(sha256: sha256Hex(first), size: Int64(first.count), fromFile: path, at: 0, progress: nil)
        try remote.uploadChunk(sha256: sha256Hex(second), size: Int64(second.count), fromFile: path,
                               at: Int64(first.count), progress: nil)
    }
}

@Suite(.serialized) struct ChunkConformanceTests {
    @Test(arguments: Backend.all) func missingListsOnlyTheChunksNotStored(backend: Backend) throws {
        let s = try backend.make(nil)
        let held = Array("a chunk already there".utf8), absent = Array("a chunk never sent".utf8)
        try s.upload(held)
        #expect(try s.remote.missingChunks([sha256Hex(held), sha256Hex(absent)]) == [sha256Hex(absent)])
        #expect(try s.remote.missingChunks([sha256Hex(held)]) == [])
        #expect(status(failure({ try s.remote.missingChunks(["not a hash"]) })) == 400)
    }

    @Test(arguments: Backend.all) func aChunkUploadFromAnOffsetIsCheckedAgainstItsHash(backend: Backend) throws {
        let s = try backend.make(nil)
        let c = Chunked()
        let path = c.file(in: s.dir)
        let e = failure({
            try s.remote.uploadChunk(sha256: sha256Hex(c.second), size: Int64(c.second.count), fromFile: path, at: 1,
                                     progress: nil)
        })
        guard case .corrupt? = e else { Issue.record("expected corrupt, got \(String(describing: e))"); return }
        #expect(try s.remote.missingChunks([sha256Hex(c.second)]) == [sha256Hex(c.second)], "nothing is kept")
        try c.upload(s.remote, from: path)
        #expect(try s.remote.missingChunks([sha256Hex(c.first), sha256Hex(c.second)]) == [])
    }

    @Test(arguments: Backend.all) func aManifestIsRefusedUntilEveryChunkItNamesIsStored(backend: Backend) throws {
        let s = try backend.make(nil)
        let c = Chunked()
        try s.upload(c.first)
        let e = failure({ try s.remote.putManifest(c.manifest) })
        guard case .conflict(let message, _)? = e else { Issue.record("expected conflict, got \(String(describing: e))"); return }
        #expect(message.contains(sha256Hex(c.second)), "the refusal names the chunk not stored")
        #expect(try s.remote.manifest(sha256: c.manifest.sha256) == nil)
        try c.upload(s.remote, from: c.file(in: s.dir))
        try s.remote.putManifest(c.manifest)
        try s.remote.putManifest(c.manifest) // again: replaced, not refused
        // An item names the manifest's hash as it names a blob's, at its size.
        var wrongSize = file("f1", bytes: c.content)
        wrongSize.size -= 1
        #expect(status(failure({ try s.remote.putItem(wrongSize, ifMatch: nil) })) == 400)
        let made = try s.remote.putItem(file("f1", bytes: c.content), ifMatch: nil)
        #expect(made.sha256 == c.manifest.sha256 && made.size == c.manifest.size)
    }

    @Test(arguments: Backend.all) func aManifestsContentIsReadAsABlobsWithZerosForItsHoles(backend: Backend) throws {
        let s = try backend.make(nil)
        let c = Chunked()
        try c.upload(s.remote, from: c.file(in: s.dir))
        try s.remote.putManifest(c.manifest)
        let sha = c.manifest.sha256
        #expect(try s.remote.hasBlob(sha256: sha))
        #expect(try s.download(sha) == c.content)
        // From inside the first chunk, across its end, the hole and into the second.
        let from = Int64(c.first.count - 3)
        #expect(try s.download(sha, from: from, prefix: Array(c.content[..<Int(from)])) == c.content)
        let inHole = Int64(c.first.count + 2)
        #expect(try s.download(sha, from: inHole, prefix: Array(c.content[..<Int(inHole)])) == c.content)
    }

    @Test(arguments: Backend.all) func aManifestRoundTripsAndAPlainBlobHasNone(backend: Backend) throws {
        let s = try backend.make(nil)
        let c = Chunked()
        try c.upload(s.remote, from: c.file(in: s.dir))
        try s.remote.putManifest(c.manifest)
        #expect(try s.remote.manifest(sha256: c.manifest.sha256) == c.manifest)
        let plain = try s.upload(Array("one blob".utf8))
        #expect(try s.remote.manifest(sha256: plain) == nil)
        #expect(try s.remote.manifest(sha256: sha256Hex(Array("nothing at all".utf8))) == nil)
    }

    @Test(arguments: Backend.all) func aMalformedManifestIsRefused(backend: Backend) throws {
        let s = try backend.make(nil)
        let c = Chunked()
        try c.upload(s.remote, from: c.file(in: s.dir))
        var bad = c.manifest
        bad.size += 1 // the chunks no longer add up to it
        #expect(status(failure({ try s.remote.putManifest(bad) })) == 400)
        #expect(try s.remote.manifest(sha256: bad.sha256) == nil)
        // A file of holes past the largest one the wire carries (before, 4 EiB of holes was taken, and a reader
        // was sent gigabytes of zeros).
        var holes = c.manifest
        holes.chunks.append(WireChunk(sha256: nil, size: 4 << 60))
        holes.size += 4 << 60
        #expect(status(failure({ try s.remote.putManifest(holes) })) == 400)
        #expect(try s.remote.manifest(sha256: holes.sha256) == nil)
    }

    /// A bounded range (`bytes=A-B`) that starts in one chunk and ends in the next, through the wire itself (the
    /// client asks only `bytes=A-`).
    @Test(arguments: [Backend.stub, Backend.stubS3])
    func aBoundedRangeAcrossChunksIsServedFromBoth(backend: Backend) throws {
        let s = try backend.make(nil)
        let c = Chunked()
        try c.upload(s.remote, from: c.file(in: s.dir))
        try s.remote.putManifest(c.manifest)
        let client = try #require(s.remote as? HTTPRemoteClient)
        let (a, b) = (c.first.count - 2, c.first.count + Int(c.hole) + 1)
        let u = client.url(["v1", "containers", client.container, "blobs", c.manifest.sha256])
        let r = try client.perform("GET", u, headers: ["Range: bytes=\(a)-\(b)"], sink: .memory(limit: 1 << 20))
        #expect(r.status == 206)
        #expect(r.contentRange == "bytes \(a)-\(b)/\(c.content.count)")
        #expect(r.body == Array(c.content[a...b]))
    }
}
