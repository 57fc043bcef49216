// The chunk format a container is configured with (`ChunkFormat`, `ContainerConfig.chunkFormat`): the default
// is the standard format every store has used (its cuts are pinned in ChunkerTests), a small format cuts small
// files by the same rules, sizes that make no format are named, and two devices configured with a small format
// move a file of a few KiB as chunks, holes as holes, and an edit as the chunks around it.
import Foundation
import Testing
@testable import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting

@Suite struct ChunkFormatTests {
    /// Chunks of 16 to 256 bytes, about 64, for files over 256 bytes (the simulation's middle format).
    static let small = ChunkFormat(chunkedAbove: 256, minSize: 16, averageSize: 64, maxSize: 256)

    @Test func theDefaultIsTheStandardFormat() {
        let f = ChunkFormat.standard
        #expect(f.chunkedAbove == 4 << 20 && f.minSize == 256 << 10 && f.averageSize == 1 << 20 && f.maxSize == 4 << 20)
        #expect(Chunker.standard.strictMask == ~0 << 42 && Chunker.standard.looseMask == ~0 << 46)
        #expect(ContainerConfig(device: "d").chunkFormat == .standard)
        #expect(WireChunkLimits.chunkedAbove == f.chunkedAbove)
    }

    @Test func sizesThatMakeNoFormatAreNamed() {
        let problem = { (above: Int64, min: Int, average: Int, max: Int) in
            ChunkFormat.problem(chunkedAbove: above, minSize: min, averageSize: average, maxSize: max)
        }
        #expect(problem(256, 16, 64, 256) == nil)
        #expect(problem(256, 0, 64, 256) != nil)
        #expect(problem(256, 128, 64, 256) != nil)
        #expect(problem(256, 16, 96, 256) != nil, "an average that is no power of two")
        #expect(problem(256, 2, 4, 256) != nil, "an average under 8")
        #expect(problem(32 << 20, 1 << 20, 4 << 20, 16 << 20) != nil, "chunks larger than the wire carries")
        #expect(problem(128, 16, 64, 256) != nil, "a file in chunks no larger than one chunk")
    }

    @Test func aSmallFormatCutsByTheSameRules() {
        let chunker = Chunker(Self.small)
        let bytes = ChunkerTests.noise(64 << 10, seed: 7)
        let chunks = bytes.withUnsafeBytes { chunker.chunks(of: $0) }
        var offset: Int64 = 0
        for (i, chunk) in chunks.enumerated() {
            #expect(chunk.offset == offset)
            if i < chunks.count - 1 { #expect(chunk.size >= 16 && chunk.size <= 256) }
            #expect(chunk.sha256 == sha256Hex(Array(bytes[Int(chunk.offset)..<Int(chunk.offset + chunk.size)])))
            offset += chunk.size
        }
        #expect(offset == Int64(bytes.count))
        let average = bytes.count / chunks.count
        #expect(average > 32 && average < 128, "average chunk \(average) bytes over \(chunks.count)")
        var edited = bytes
        edited[bytes.count / 2] ^= 0xff
        let after = edited.withUnsafeBytes { chunker.chunks(of: $0) }
        // A byte reaches the hash of the 64 after it: a chunk or two further at this average, not the rest.
        #expect((1...4).contains(ChunkerTests.newHashes(chunks, after).count))
    }

    @Test func aSmallFormatFindsHolesAndRunsOfZeros() throws {
        let dir = TempDir()
        let chunker = Chunker(Self.small)
        // Zeros written out: every chunk of zeros only is a hole, joined into one.
        let zeros = dir.path + "/zeros"
        try ChunkerTests.write(ChunkerTests.noise(2048, seed: 1) + [UInt8](repeating: 0, count: 4096)
                               + ChunkerTests.noise(2048, seed: 2), to: zeros)
        let written = try chunker.chunks(ofFile: zeros)
        #expect(written.filter(\.isHole).count == 1)
        #expect(written.filter(\.isHole).reduce(0) { $0 + $1.size } > 4096 - 2 * 256)
        // A hole of the file: a hole however short, once at least `minSize`.
        let sparse = dir.path + "/sparse"
        let fd = try FileDescriptor.open(sparse, O_RDWR | O_CREAT)
        try ChunkerTests.noise(1024, seed: 3).withUnsafeBytes { try fd.writeAll($0, at: 64 << 10) }
        fd.close()
        #expect(try chunker.chunks(ofFile: sparse).first == Chunk(offset: 0, size: 64 << 10, sha256: nil))
    }

    @Test func devicesWithASmallFormatMoveSmallFilesInChunks() throws {
        let remote = MemoryRemote()
        let small = { (config: inout ContainerConfig) in config.chunkFormat = Self.small }
        let a = try Device(remote, name: "a", configure: small), b = try Device(remote, name: "b", configure: small)
        var data = ChunkerTests.noise(8 << 10, seed: 4) + [UInt8](repeating: 0, count: 2048)
            + ChunkerTests.noise(2 << 10, seed: 5)
        let f = try a.createFile("f.bin", data)
        #expect(eventually(30) { a.pending == 0 })
        let manifest = try remote.manifest(sha256: sha256Hex(data))
        #expect((manifest?.chunks.count ?? 0) > 16, "a file of 12 KiB went up as \(manifest?.chunks.count ?? 1) chunk(s)")
        #expect(manifest?.chunks.contains(where: \.isHole) == true)
        #expect(eventually(30) { b.container.item(f.id)?.remoteSHA == sha256Hex(data) })
        #expect(b.fetch(f.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == data)

        let up = remote.uploadedBytes, down = remote.downloadedBytes
        data[4 << 10] ^= 0xff
        try a.write(f.id, data)
        #expect(eventually(30) { a.pending == 0 })
        let sent = remote.uploadedBytes - up
        #expect(sent > 0 && sent <= 2 * 256, "\(sent) bytes went up")
        #expect(eventually(30) { b.container.item(f.id)?.remoteSHA == sha256Hex(data) })
        #expect(b.fetch(f.id, seconds: 30).map { (try? $0.get()) != nil } == true)
        #expect(b.content(f.id) == data)
        let fetched = remote.downloadedBytes - down
        #expect(fetched > 0 && fetched <= 2 * 256, "\(fetched) bytes came down")
    }
}
