// Content-defined chunking: where a file's bytes are cut into chunks, and each chunk's SHA-256.
//
// What must hold: the cuts depend on the bytes alone (a gear hash over the last 64 bytes, FastCDC's normalized
// cut points), so an edit moves the cuts of the chunks it touches and no others; every chunk but a file's last
// is between `minSize` and `maxSize` long; the same bytes give the same chunks on every device, today and in
// ten years: the gear table and the sizes (`ChunkFormat.standard`) are part of the store's format, and changing
// either re-chunks every file. A smaller format (tests, the simulation) cuts by the same rules, its masks
// derived from its average as the standard's are. A run of zeros is a hole: a chunk of zeros only, or a hole of
// the file (SEEK_HOLE) at least `minSize` long, has no hash and is never stored. A file is read in large blocks
// and never held whole in memory.
import Foundation

/// One chunk of a file: its place, its length and the SHA-256 of its bytes (nil for a hole).
public struct Chunk: Equatable, Sendable {
    public var offset: Int64
    public var size: Int64
    public var sha256: String?

    public init(offset: Int64, size: Int64, sha256: String?) {
        self.offset = offset
        self.size = size
        self.sha256 = sha256
    }

    public var isHole: Bool { sha256 == nil }
}

/// A file cut into chunks: its chunks in order, its size, and the SHA-256 of all its bytes when asked for.
public struct ChunkedFile: Sendable {
    public var chunks: [Chunk]
    public var size: Int64
    public var sha256: String?
}

/// The SHA-256 of a whole file as its chunks are read, holes hashed as the zeros they read as.
final class WholeHash {
    var hasher = SHA256Hasher()
    private static let zeros = [UInt8](repeating: 0, count: 1 << 20)

    /// `keepGoing` is asked before each MiB: false stops with ECANCELED (a hole may be a terabyte long).
    func addZeros(_ count: Int64, while keepGoing: () -> Bool) throws {
        var left = count
        while left > 0 {
            if !keepGoing() { throw Errno(ECANCELED) }
            let n = Int(min(left, Int64(WholeHash.zeros.count)))
            WholeHash.zeros.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0.prefix(n))) }
            left -= Int64(n)
        }
    }

    func finish() -> String { hasher.finalizeHex() }
}

/// The chunk format: which files go in chunks, and the sizes the chunker cuts at. It binds every device and
/// store that share content (two that cut the same bytes differently dedupe nothing), so a container is
/// configured with one (`ContainerConfig.chunkFormat`) and every store uses `standard`; a smaller one lets
/// tests and the simulation cut files of a few hundred bytes by the same rules.
public struct ChunkFormat: Equatable, Sendable, CustomStringConvertible {
    /// A file larger than this goes up in chunks; one of this size or less is one blob, as before chunks.
    public let chunkedAbove: Int64
    /// No cut before this many bytes (they are not even hashed); also the shortest hole of a file that counts
    /// as a hole.
    public let minSize: Int
    /// Where the cuts gather: a power of two, 2^k. Before it a cut needs k + 2 zero bits of the hash, after it
    /// k - 2 (FastCDC's normalized chunking, level 2).
    public let averageSize: Int
    /// Always a cut here.
    public let maxSize: Int

    /// The format of every store: chunks of 256 KiB to 4 MiB, about 1 MiB, for files over 4 MiB.
    public static let standard = ChunkFormat(chunkedAbove: 4 << 20, minSize: 256 << 10, averageSize: 1 << 20,
                                             maxSize: 4 << 20)

    /// Traps on sizes that make no format (`problem`).
    public init(chunkedAbove: Int64, minSize: Int, averageSize: Int, maxSize: Int) {
        if let problem = ChunkFormat.problem(chunkedAbove: chunkedAbove, minSize: minSize, averageSize: averageSize,
                                             maxSize: maxSize) {
            preconditionFailure("no chunk format: \(problem)")
        }
        self.chunkedAbove = chunkedAbove
        self.minSize = minSize
        self.averageSize = averageSize
        self.maxSize = maxSize
    }

    /// Why the sizes make no format, or nil: 1 <= min <= average <= max, the average a power of two of at least
    /// 8, a chunk no larger than the wire carries (`WireChunkLimits.maxChunkBytes`), and a file that goes in
    /// chunks larger than one chunk.
    public static func problem(chunkedAbove: Int64, minSize: Int, averageSize: Int, maxSize: Int) -> String? {
        guard minSize >= 1, minSize <= averageSize, averageSize <= maxSize else {
            return "the sizes must be 1 <= min <= average <= max"
        }
        guard averageSize >= 8, averageSize & (averageSize - 1) == 0 else {
            return "the average must be a power of two, at least 8"
        }
        guard Int64(maxSize) <= WireChunkLimits.maxChunkBytes else {
            return "a chunk may not exceed the \(WireChunkLimits.maxChunkBytes) bytes the wire carries"
        }
        guard chunkedAbove >= Int64(maxSize) else { return "a file in chunks must be larger than one chunk" }
        return nil
    }

    public var description: String {
        "chunked above \(chunkedAbove), chunks \(minSize)/\(averageSize)/\(maxSize)"
    }
}

/// Finds the cut points of content-defined chunks in a run of bytes, by the sizes of its format.
public struct Chunker: Sendable {
    public let format: ChunkFormat
    /// Before the average size a cut needs k + 2 zero bits of the hash, after it k - 2 (for an average of 2^k;
    /// 22 and 18 in the standard format): chunk sizes gather around the average. The high bits are the ones
    /// every byte of the last 64 has reached.
    let strictMask: UInt64
    let looseMask: UInt64

    public init(_ format: ChunkFormat = .standard) {
        self.format = format
        let bits = format.averageSize.trailingZeroBitCount
        strictMask = ~0 << UInt64(64 - (bits + 2))
        looseMask = ~0 << UInt64(64 - (bits - 2))
    }

    /// The chunker of the standard format, and its sizes.
    public static let standard = Chunker()
    public static var minSize: Int { standard.format.minSize }
    public static var averageSize: Int { standard.format.averageSize }
    public static var maxSize: Int { standard.format.maxSize }

    /// 256 fixed pseudo-random words, one per byte value (SplitMix64 from a fixed seed: part of the format).
    static let gear: [UInt64] = {
        var state: UInt64 = 0x7562_6971_7569_7479  // "ubiquity"
        return (0..<256).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }()

    /// The length of the chunk that starts at the beginning of `bytes`. `bytes` holds the rest of the run, or
    /// at least `maxSize` bytes of it; a run shorter than `minSize` is one chunk.
    public func cut(_ bytes: UnsafeRawBufferPointer) -> Int {
        let n = bytes.count
        let minSize = format.minSize
        if n <= minSize { return n }
        let end = min(n, format.maxSize)
        let middle = min(end, format.averageSize)
        let p = bytes.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let strictMask = strictMask, looseMask = looseMask
        return Chunker.gear.withUnsafeBufferPointer { table in
            let g = table.baseAddress!
            var h: UInt64 = 0
            var i = minSize
            // Two bytes a step: the hash after the pair is 4h + (2g[a] + g[b]), so only one shift and one add
            // per pair lie on the chain from one hash to the next; the hash between them is checked aside.
            var mask = strictMask
            var limit = middle
            while true {
                while i + 1 < limit {
                    let a = g[Int(p[i])], b = g[Int(p[i + 1])]
                    let odd = (h &<< 1) &+ a
                    h = (h &<< 2) &+ ((a &<< 1) &+ b)
                    if odd & mask == 0 { return i + 1 }
                    if h & mask == 0 { return i + 2 }
                    i += 2
                }
                if i < limit {
                    h = (h &<< 1) &+ g[Int(p[i])]
                    if h & mask == 0 { return i + 1 }
                    i += 1
                }
                if limit == end { break }
                mask = looseMask
                limit = end
            }
            return end
        }
    }

    /// True when every byte is zero.
    static func isZero(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var words = bytes.count / 8
        var p = bytes.baseAddress!
        while words > 0 {
            if p.loadUnaligned(as: UInt64.self) != 0 { return false }
            p += 8
            words -= 1
        }
        return bytes.suffix(bytes.count % 8).allSatisfy { $0 == 0 }
    }

    /// The chunk made of `bytes`, at `offset` of its file: a hole when it holds only zeros.
    static func chunk(_ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Chunk {
        if isZero(bytes) { return Chunk(offset: offset, size: Int64(bytes.count), sha256: nil) }
        var hasher = SHA256Hasher()
        hasher.update(bytes)
        return Chunk(offset: offset, size: Int64(bytes.count), sha256: hasher.finalizeHex())
    }

    /// The chunks of a run of bytes held in memory.
    public func chunks(of bytes: UnsafeRawBufferPointer, at offset: Int64 = 0) -> [Chunk] {
        var out: [Chunk] = []
        var start = 0
        while start < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[start...])
            let length = cut(rest)
            out.append(Chunker.chunk(UnsafeRawBufferPointer(rebasing: rest.prefix(length)), at: offset + Int64(start)))
            start += length
        }
        return out
    }

    /// The chunks of a run of bytes held in memory, in the standard format.
    public static func chunks(of bytes: UnsafeRawBufferPointer, at offset: Int64 = 0) -> [Chunk] {
        standard.chunks(of: bytes, at: offset)
    }
}

extension Chunker {
    /// The chunks of a file: its data cut where its bytes say, its holes of at least `minSize` as holes, and
    /// runs of zeros cut as any bytes are (a chunk of zeros only is a hole). Adjacent holes are one hole.
    /// `keepGoing` is asked before each block: false stops with ECANCELED (a file changed or deleted meanwhile).
    public func chunks(ofFile path: String, while keepGoing: () -> Bool = { true }) throws -> [Chunk] {
        try cut(file: path, hashingWhole: false, while: keepGoing).chunks
    }

    /// The chunks of a file in the standard format.
    public static func chunks(ofFile path: String, while keepGoing: () -> Bool = { true }) throws -> [Chunk] {
        try standard.chunks(ofFile: path, while: keepGoing)
    }

    /// A file's chunks as `chunks(ofFile:)` finds them, its size, and with `hashingWhole` the SHA-256 of all
    /// its bytes (holes as zeros) from the same reads: the chunks and the whole hash describe the same bytes
    /// even when the file changes during the pass.
    public func cut(file path: String, hashingWhole: Bool,
                    while keepGoing: () -> Bool = { true }) throws -> ChunkedFile {
        let fd = try FileDescriptor.open(path, O_RDONLY)
        defer { fd.close() }
        return try cut(fd, hashingWhole: hashingWhole, while: keepGoing)
    }

    /// The same for a file open for reading (its position moves: SEEK_DATA and SEEK_HOLE find the holes).
    public func cut(_ fd: FileDescriptor, hashingWhole: Bool,
                    while keepGoing: () -> Bool = { true }) throws -> ChunkedFile {
        let size = Int64(try fd.stat().st_size)
        var reader = BlockReader(fd: fd, chunker: self)
        let whole: WholeHash? = hashingWhole ? WholeHash() : nil
        var out: [Chunk] = []
        for extent in dataExtents(of: fd, size: size) {
            if extent.hole {
                try whole?.addZeros(extent.end - extent.start, while: keepGoing)
                Chunker.append(Chunk(offset: extent.start, size: extent.end - extent.start, sha256: nil), to: &out)
                continue
            }
            var offset = extent.start
            while offset < extent.end {
                if !keepGoing() { throw Errno(ECANCELED) }
                let piece = try reader.chunk(at: offset, before: extent.end) { whole?.hasher.update($0) }
                Chunker.append(piece, to: &out)
                offset += piece.size
            }
        }
        return ChunkedFile(chunks: out, size: size, sha256: whole?.finish())
    }

    /// Adds a chunk, joining a hole to a hole just before it.
    static func append(_ chunk: Chunk, to out: inout [Chunk]) {
        if chunk.isHole, let last = out.last, last.isHole {
            out[out.count - 1].size += chunk.size
        } else {
            out.append(chunk)
        }
    }

    /// The file's extents in order, data and holes, covering all of it; a hole shorter than `minSize` counts as
    /// data (it is read as zeros), so small holes do not cut a file into many small chunks. Where the file
    /// system cannot tell data from holes, the rest of the file is data.
    func dataExtents(of fd: FileDescriptor, size: Int64) -> [(start: Int64, end: Int64, hole: Bool)] {
        var out: [(start: Int64, end: Int64, hole: Bool)] = []
        var at: Int64 = 0
        while at < size {
            guard let found = Chunker.seek(fd, at, FileDescriptor.seekData) else {
                Chunker.extendData(&out, from: at, to: size)
                break
            }
            let dataStart = min(found ?? size, size)  // nil: only a hole is left
            if dataStart - at >= Int64(format.minSize) {
                out.append((at, dataStart, true))
            } else if dataStart > at {
                Chunker.extendData(&out, from: at, to: dataStart)
            }
            if dataStart >= size { break }
            let dataEnd = min((Chunker.seek(fd, dataStart, FileDescriptor.seekHole) ?? nil) ?? size, size)
            Chunker.extendData(&out, from: dataStart, to: dataEnd)
            at = dataEnd
        }
        return out
    }

    /// `fd.seek`, with nil for a file system that cannot say (and `.some(nil)` for no more data or holes).
    private static func seek(_ fd: FileDescriptor, _ offset: Int64, _ whence: Int32) -> Int64?? {
        do { return .some(try fd.seek(offset, whence)) } catch { return nil }
    }

    private static func extendData(_ out: inout [(start: Int64, end: Int64, hole: Bool)], from: Int64, to: Int64) {
        if let last = out.last, !last.hole, last.end == from {
            out[out.count - 1].end = to
        } else {
            out.append((from, to, false))
        }
    }
}

/// Reads a file forward in large blocks and hands out its chunks, keeping at least `maxSize` bytes ahead of
/// the next cut in memory (or what is left of the extent).
struct BlockReader: ~Copyable {
    /// Twice the largest chunk the wire carries (`ChunkFormat.problem`), so any format's chunk fits.
    static let capacity = 16 << 20
    let fd: FileDescriptor
    let chunker: Chunker
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 4096)
    /// The file offset of buffer[0], and how many bytes from there are held.
    var base: Int64 = 0
    var held = 0

    init(fd: FileDescriptor, chunker: Chunker) {
        self.fd = fd
        self.chunker = chunker
    }

    deinit { buffer.deallocate() }

    /// The chunk that starts at `offset` and ends before `end` at the latest.
    /// `seen` is handed the chunk's bytes.
    mutating func chunk(at offset: Int64, before end: Int64,
                        seen: (UnsafeRawBufferPointer) -> Void = { _ in }) throws -> Chunk {
        let wanted = Int(min(Int64(chunker.format.maxSize), end - offset))
        try fill(from: offset, count: wanted)
        let start = Int(offset - base)
        let run = UnsafeRawBufferPointer(rebasing: buffer[start..<start + wanted])
        let bytes = UnsafeRawBufferPointer(rebasing: run.prefix(chunker.cut(run)))
        seen(bytes)
        return Chunker.chunk(bytes, at: offset)
    }

    /// Makes the buffer hold `count` bytes from `offset`, moving what is held there to the front and reading on.
    private mutating func fill(from offset: Int64, count: Int) throws {
        if offset >= base, offset + Int64(count) <= base + Int64(held) { return }
        let keep = offset >= base && offset < base + Int64(held) ? Int(base + Int64(held) - offset) : 0
        if keep > 0 {
            let from = UnsafeRawBufferPointer(rebasing: buffer[Int(offset - base)..<Int(offset - base) + keep])
            UnsafeMutableRawBufferPointer(rebasing: buffer[0..<keep]).copyMemory(from: from)
        }
        base = offset
        held = keep
        while held < count {
            let room = UnsafeMutableRawBufferPointer(rebasing: buffer[held...])
            let n = try fd.read(into: room, at: base + Int64(held))
            if n == 0 { throw Errno(ECANCELED) }  // the file grew shorter while being read
            held += n
        }
    }
}
