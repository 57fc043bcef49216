// Content in chunks on the stub (docs/WIRE.md "Content in chunks"): the two routes' answers and refusals over
// real HTTP, a manifest's content served by the blob route (HEAD, ranges), the counters; and collection: a chunk
// stays while a manifest that names it does, the manifest goes by the blob rule, and a manifest that cannot be
// read keeps every blob of its container.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
import UbiquityHTTP
@testable import UbiquityStub

/// Two chunks and a hole of three bytes between them, and its manifest.
private let first = Array("0123456789".utf8), second = Array("abcdefgh".utf8)
private let content = first + [0, 0, 0] + second
private let manifest = WireManifest(sha256: sha256Hex(content), size: Int64(content.count), chunks: [
    WireChunk(sha256: sha256Hex(first), size: Int64(first.count)),
    WireChunk(sha256: nil, size: 3),
    WireChunk(sha256: sha256Hex(second), size: Int64(second.count)),
])

@Suite struct ChunkRouteTests {
    private func manifestPath(_ sha: String = manifest.sha256, in container: String = cid) -> String {
        "/v1/containers/\(container)/manifests/\(sha)"
    }

    @Test func missingAnswersTheChunksNotStoredInTheOrderAsked() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        #expect(try f.putBlob(second).status == 201)
        let path = "/v1/containers/\(cid)/chunks/missing"
        let asked = [sha256Hex(second), sha256Hex(Array("z".utf8)), sha256Hex(first)]
        let answer = try f.call("POST", path, json: WireChunkList(chunks: asked))
        #expect(answer.status == 200)
        #expect(try answer.decode(WireChunkList.self).chunks == [asked[1], asked[2]])
        #expect(try f.call("POST", path, json: WireChunkList(chunks: [])).status == 400)
        #expect(try f.call("POST", path, json: WireChunkList(chunks: ["abc"])).status == 400)
        let tooMany = Array(repeating: sha256Hex(first), count: WireChunkLimits.maxAsk + 1)
        #expect(try f.call("POST", path, json: WireChunkList(chunks: tooMany)).status == 400)
        #expect(try f.call("POST", "/v1/containers/iCloud.com.example.none/chunks/missing",
                           json: WireChunkList(chunks: asked)).status == 404)
        #expect(try f.call("GET", path).status == 405)
        #expect(try f.stats().chunkAsks == 1)
    }

    @Test func aManifestIsStoredOnceItsChunksAreAndRefusedWhenMalformed() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        #expect(try f.putBlob(first).status == 201)
        let refused = try f.call("PUT", manifestPath(), json: manifest)
        #expect(refused.status == 409)
        #expect(try refused.decode(WireError.self).error == "chunk \(sha256Hex(second)) is not stored")
        #expect(try f.putBlob(second).status == 201)
        let made = try f.call("PUT", manifestPath(), json: manifest)
        #expect(made.status == 201)
        #expect(made.json["sha256"] as? String == manifest.sha256 && made.json["size"] as? Int == content.count)
        #expect(try f.call("PUT", manifestPath(), json: manifest).status == 200, "replaced")
        #expect(try f.call("GET", manifestPath()).decode(WireManifest.self) == manifest)
        // Refusals: another hash in the path, sizes that do not add up, a body too large, no container.
        #expect(try f.call("PUT", manifestPath(sha256Hex(first)), json: manifest).status == 400)
        var bad = manifest
        bad.size += 1
        let malformed = try f.call("PUT", manifestPath(), json: bad)
        #expect(malformed.status == 400)
        #expect(try malformed.decode(WireError.self).error == bad.problem)
        #expect(try f.call("PUT", manifestPath(), headers: ["Expect: 100-continue"],
                           body: [UInt8](repeating: 32, count: WireChunkLimits.maxManifestBytes + 1)).status == 413)
        #expect(try f.call("PUT", manifestPath(in: "iCloud.com.example.none"), json: manifest).status == 404)
        #expect(try f.call("GET", manifestPath(sha256Hex(first))).status == 404, "a plain blob has no manifest")
        #expect(try f.call("GET", manifestPath("xyz")).status == 400)
        #expect(try f.stats().manifestPuts == 2)
        // An item names the manifest's hash, at its size.
        var wrong = file("f1", "big.bin", content)
        wrong.size -= 1
        #expect(try f.putItem(wrong).status == 400)
        #expect(try f.putItem(file("f1", "big.bin", content)).status == 200)
    }

    @Test func theBlobRouteServesAManifestsContentWithRangesAndCountsTheBytes() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        for chunk in [first, second] { #expect(try f.putBlob(chunk).status == 201) }
        #expect(try f.call("PUT", manifestPath(), json: manifest).status == 201)
        let blob = "/v1/containers/\(cid)/blobs/\(manifest.sha256)"
        let head = try f.call("HEAD", blob)
        #expect(head.status == 200 && head.headers["content-length"] == String(content.count))
        #expect(head.headers["x-content-sha256"] == manifest.sha256)
        let whole = try f.call("GET", blob)
        #expect(whole.status == 200 && whole.body == content)
        let across = try f.call("GET", blob, headers: ["Range: bytes=8-14"]) // chunk, hole, chunk
        #expect(across.status == 206 && across.body == Array(content[8...14]))
        #expect(across.headers["content-range"] == "bytes 8-14/\(content.count)")
        let tail = try f.call("GET", blob, headers: ["Range: bytes=-4"])
        #expect(tail.status == 206 && tail.body == Array(content.suffix(4)))
        #expect(try f.call("GET", blob, headers: ["Range: bytes=\(content.count)-"]).status == 416)
        let s = try f.stats()
        #expect(s.blobBytesIn == Int64(first.count + second.count))
        #expect(s.blobBytesOut == Int64(content.count + 7 + 4))
        #expect(s.blobGetsBySha[manifest.sha256] == 3)
        #expect(try f.putBlob(first).status == 200)
        #expect(try f.stats().blobBytesIn == Int64(first.count + second.count), "a blob already there adds nothing")
    }

    @Test func aDownloadCutInAChunkResumesFromTheOffset() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        for chunk in [first, second] { #expect(try f.putBlob(chunk).status == 201) }
        #expect(try f.call("PUT", manifestPath(), json: manifest).status == 201)
        _ = try f.call("POST", "/v1/faults", json: WireFaults(dropAfterBytes: 12, count: 1))
        let blob = "/v1/containers/\(cid)/blobs/\(manifest.sha256)"
        let cut = try f.call("GET", blob)
        #expect(cut.curlExit != 0 && cut.body == Array(content[..<12]), "cut after 12 bytes, in the hole")
        let rest = try f.call("GET", blob, headers: ["Range: bytes=12-"])
        #expect(rest.status == 206 && cut.body + rest.body == content)
    }
}

@Suite struct ChunkCollectionTests {
    /// Uploads `chunks` (each from its offset in one file) and a manifest of them in order.
    private func putChunked(_ h: BlobHarness, _ chunks: [[UInt8]]) throws -> WireManifest {
        let path = h.dir + "/chunks-\(randomHex(bytes: 4))"
        _ = FileManager.default.createFile(atPath: path, contents: Data(chunks.flatMap { $0 }))
        var offset: Int64 = 0
        for chunk in chunks {
            try h.client.uploadChunk(sha256: sha256Hex(chunk), size: Int64(chunk.count), fromFile: path, at: offset,
                                     progress: nil)
            offset += Int64(chunk.count)
        }
        let m = WireManifest(sha256: sha256Hex(chunks.flatMap { $0 }), size: offset,
                             chunks: chunks.map { WireChunk(sha256: sha256Hex($0), size: Int64($0.count)) })
        try h.client.putManifest(m)
        return m
    }

    @Test(arguments: BlobBackend.allCases)
    func aChunkStaysWhileAManifestNamesItAndTheManifestWhileAnItemDoes(backend: BlobBackend) throws {
        let h = try BlobHarness(backend, graceSeconds: 3600)
        let only = Array("named by the manifest only".utf8), shared = Array("named by a plain item too".utf8)
        let m = try putChunked(h, [only, shared])
        let big = try h.putFile("big", (m.sha256, m.size))
        _ = try h.putFile("plain", (sha256Hex(shared), Int64(shared.count)))
        let later = nowNanoseconds() + BlobStoreTests.hour + 2_000_000_000
        #expect(try h.server.collectBlobs(now: later).isEmpty, "the item keeps the manifest, which keeps its chunks")
        #expect(try h.download(m.sha256) == only + shared)
        // Once the item is gone (deleted, and emptied from Recently Deleted), the manifest goes, and with it the chunk
        // nothing else names.
        _ = try h.client.deleteItem("big", ifMatch: big.version)
        #expect(try h.server.collectBlobs(now: later).isEmpty, "Recently Deleted keeps the manifest")
        #expect(try h.client.emptyTrash(ids: ["big"]) == 1)
        let prefix = BlobHarness.containerID + "/"
        #expect(try h.server.collectBlobs(now: later) == [prefix + m.sha256 + ".chunks", prefix + sha256Hex(only)])
        #expect(try h.client.manifest(sha256: m.sha256) == nil)
        #expect(try !h.client.hasBlob(sha256: sha256Hex(only)))
        #expect(try h.download(sha256Hex(shared)) == shared, "the plain item keeps its blob")
    }

    @Test func aManifestThatCannotBeReadKeepsEveryBlob() throws {
        let h = try BlobHarness(.files, graceSeconds: 3600)
        let loose = try h.upload("named by nothing")
        // A manifest stored just now (so not collected itself) that does not decode.
        let sha = sha256Hex(Array("unreadable".utf8))
        let path = h.dir + "/stub/blobs/\(BlobHarness.containerID)/\(sha).chunks"
        _ = FileManager.default.createFile(atPath: path, contents: Data("{not json".utf8))
        let later = nowNanoseconds() + BlobStoreTests.hour + 2_000_000_000
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: Double(later) / 1e9)],
                                              ofItemAtPath: path)
        #expect(try h.server.collectBlobs(now: later).isEmpty)
        #expect(try h.client.hasBlob(sha256: loose.sha256))
        try FileManager.default.removeItem(atPath: path)
        #expect(try h.server.collectBlobs(now: later + BlobStoreTests.hour) == [BlobHarness.containerID + "/" + loose.sha256])
    }
}
