// Content-defined chunks (UbiquityBase/Chunker.swift): an edit changes the chunks it touches and no others,
// sizes stay within bounds, a file read in blocks is cut as the same bytes in memory are, holes and runs of
// zeros are holes, and the cuts of a fixed stream never change (they are part of the store's format).
import Foundation
import Testing
import UbiquityBase

@Suite struct ChunkerTests {
    /// Bytes from a fixed-seed generator (SplitMix64): the same on every run and machine.
    static func noise(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
        var state = seed
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in 0..<words.count {
                state &+= 0x9E37_79B9_7F4A_7C15
                var z = state
                z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                words[i] = z ^ (z >> 31)
            }
        }
        return out
    }

    static func chunks(_ bytes: [UInt8]) -> [Chunk] { bytes.withUnsafeBytes { Chunker.chunks(of: $0) } }

    /// The hashes of `after`'s chunks that `before` does not have: what an upload of `after` would send.
    static func newHashes(_ before: [Chunk], _ after: [Chunk]) -> Set<String> {
        Set(after.compactMap(\.sha256)).subtracting(before.compactMap(\.sha256))
    }

    static func write(_ bytes: [UInt8], to path: String) throws {
        #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
    }

    @Test func chunksCoverTheBytesInOrderWithinTheirBoundsAndHashThem() {
        let bytes = Self.noise(40 << 20)
        let chunks = Self.chunks(bytes)
        var offset: Int64 = 0
        for (i, chunk) in chunks.enumerated() {
            #expect(chunk.offset == offset)
            if i < chunks.count - 1 {
                #expect(chunk.size >= Int64(Chunker.minSize) && chunk.size <= Int64(Chunker.maxSize))
            }
            let range = Int(chunk.offset)..<Int(chunk.offset + chunk.size)
            #expect(chunk.sha256 == sha256Hex(Array(bytes[range])))
            offset += chunk.size
        }
        #expect(offset == Int64(bytes.count))
        let average = bytes.count / chunks.count
        #expect(average > 512 << 10 && average < 2 << 20, "average chunk \(average) bytes over \(chunks.count)")
    }

    @Test func aByteChangedInTheMiddleChangesAtMostTwoChunks() {
        var bytes = Self.noise(48 << 20)
        let before = Self.chunks(bytes)
        bytes[bytes.count / 2] ^= 0xff
        let after = Self.chunks(bytes)
        #expect(Self.newHashes(before, after).count <= 2)
        #expect(Self.newHashes(before, after).count >= 1)
    }

    @Test func aByteInsertedOrRemovedInTheMiddleChangesAtMostTwoChunks() {
        let bytes = Self.noise(48 << 20)
        let before = Self.chunks(bytes)
        var inserted = bytes
        inserted.insert(7, at: bytes.count / 2)
        #expect(Self.newHashes(before, Self.chunks(inserted)).count <= 2)
        var removed = bytes
        removed.remove(at: bytes.count / 3)
        #expect(Self.newHashes(before, Self.chunks(removed)).count <= 2)
    }

    @Test func anAppendChangesOnlyTheLastChunk() {
        let bytes = Self.noise(24 << 20)
        let before = Self.chunks(bytes)
        let after = Self.chunks(bytes + Self.noise(1 << 20, seed: 9))
        let sent = after.filter { Self.newHashes(before, after).contains($0.sha256 ?? "") }
        #expect(sent.reduce(0) { $0 + $1.size } <= Int64((1 << 20) + 2 * Chunker.maxSize))
        #expect(Array(after.prefix(before.count - 1)) == Array(before.prefix(before.count - 1)))
    }

    @Test func aFileReadInBlocksIsCutAsItsBytesInMemory() throws {
        let dir = TempDir()
        let bytes = Self.noise(37 << 20 + 12345, seed: 3)  // over two of the reader's 16 MiB blocks
        try Self.write(bytes, to: dir.path + "/f")
        #expect(try Chunker.chunks(ofFile: dir.path + "/f") == Self.chunks(bytes))
    }

    @Test func aSmallOrEmptyFileIsOneChunkOrNone() throws {
        let dir = TempDir()
        try Self.write([], to: dir.path + "/empty")
        #expect(try Chunker.chunks(ofFile: dir.path + "/empty") == [])
        try Self.write(Array("hello\n".utf8), to: dir.path + "/small")
        #expect(try Chunker.chunks(ofFile: dir.path + "/small")
                == [Chunk(offset: 0, size: 6, sha256: sha256Hex(Array("hello\n".utf8)))])
    }

    @Test func holesAndRunsOfZerosAreHoles() throws {
        let dir = TempDir()
        // A sparse 64 MiB file with 1 MiB written at 20 MiB: one hole, the data, one hole.
        let sparse = dir.path + "/sparse"
        let fd = try FileDescriptor.open(sparse, O_RDWR | O_CREAT)
        let data = Self.noise(1 << 20, seed: 5)
        try data.withUnsafeBytes { try fd.writeAll($0, at: 20 << 20) }
        try fd.truncate(64 << 20)
        fd.close()
        let chunks = try Chunker.chunks(ofFile: sparse)
        #expect(chunks.first == Chunk(offset: 0, size: 20 << 20, sha256: nil))
        #expect(chunks.last == Chunk(offset: 21 << 20, size: 43 << 20, sha256: nil))
        #expect(chunks.filter { !$0.isHole }.map(\.sha256) == Self.chunks(data).map(\.sha256))
        // Zeros written out are cut like any bytes, and every chunk of them is a hole, joined into one.
        let zeros = dir.path + "/zeros"
        try Self.write([UInt8](repeating: 0, count: 16 << 20) + data, to: zeros)
        let written = try Chunker.chunks(ofFile: zeros)
        #expect(written.first?.isHole == true)
        #expect(written.filter(\.isHole).count == 1)
        #expect(written.filter { !$0.isHole }.reduce(0) { $0 + $1.size } <= Int64((1 << 20) + Chunker.maxSize))
    }

    /// The cuts of a fixed stream: they are part of the store's format (every device must cut the same bytes
    /// the same way), so a change of the gear table, the masks or the sizes fails here first.
    @Test func theCutsOfAFixedStreamNeverChange() {
        let lengths = Self.chunks(Self.noise(12 << 20, seed: 42)).map(\.size)
        #expect(lengths == Self.pinnedLengths, "\(lengths)")
    }

    static let pinnedLengths: [Int64] = [1060335, 1308913, 1470923, 1468610, 1710992, 461821, 1151211, 1539099,
                                         1218272, 977682, 215054]
}
