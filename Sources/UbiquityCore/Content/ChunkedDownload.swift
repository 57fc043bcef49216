// The download of a version kept in chunks (docs/CHUNKS.md): only the chunks this device does not hold travel.
// A chunk comes from the staging file itself (what an earlier, cut try landed), from the item's local copy (the
// version it had before, cut the same way by the same chunker), or from the remote; holes are never fetched and
// stay holes.
//
// What must hold: every chunk's bytes are checked against its hash where they land, whichever way they came
// (a local copy may change under the copy: a chunk that no longer hashes right is fetched instead), and the
// caller checks the whole file's size and SHA-256 after (Downloads.land), so no unverified byte is installed.
// A cut try leaves its verified chunks in the staging file, where the next try finds them by their hashes.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

extension Downloads {
    /// Chunks fetched at once for one file.
    static let chunkStreams = 4

    /// Lands the version `sha` of `size` bytes, which `manifest` describes, in the staging file `fd`: first what
    /// is here (the staging file's own chunks, the local copy's), then the rest from the remote, several at once.
    func landChunks(_ key: String, _ manifest: WireManifest, sha: String, size: Int64, into fd: FileDescriptor,
                    staging: String) throws {
        guard manifest.sha256 == sha, manifest.size == size, manifest.problem == nil else {
            throw RemoteError.corrupt("the remote's chunk list does not describe the version asked for")
        }
        var wanted: [(sha: String, offset: Int64, size: Int64)] = []
        var offset: Int64 = 0
        let staged = Int64(try fd.stat().st_size)
        let local = LocalChunks(copyOf: key, in: container)
        for chunk in manifest.chunks {
            if let sha = chunk.sha256,
               !(offset + chunk.size <= staged && (try? hashOf(fd, at: offset, count: chunk.size)) == sha),
               !local.copy(sha, size: chunk.size, to: fd, at: offset) {
                wanted.append((sha, offset, chunk.size))
            }
            offset += chunk.size
        }
        local.close()
        let done = Locked(size - wanted.reduce(0) { $0 + $1.size })
        progress(key, done: done.withLock { $0 }, total: size)
        try inParallel(wanted, width: Self.chunkStreams) { [self] chunk, goOn in
            try fetch(key, chunk.sha, size: chunk.size, into: staging, at: chunk.offset, goOn: goOn)
            done.withLock {  // (held while the progress is set, so that it only rises)
                $0 += chunk.size
                progress(key, done: $0, total: size)
            }
        }
        try fd.truncate(size)  // a hole at the end
        log.debug("download \(key): \(wanted.count) of \(manifest.chunkHashes.count) chunks fetched")
    }

    /// Fetches one chunk into its place in the staging file and checks it there.
    private func fetch(_ key: String, _ sha: String, size: Int64, into staging: String, at offset: Int64,
                       goOn: @escaping () -> Bool) throws {
        let fd = try FileDescriptor.open(staging, O_RDWR)
        defer { fd.close() }
        try container.remote.downloadChunk(sha256: sha, to: fd, at: offset) { _ in goOn() }
        guard try hashOf(fd, at: offset, count: size) == sha else {
            throw RemoteError.corrupt("chunk \(sha.prefix(12)) at \(offset) does not hash to its name")
        }
    }
}

/// The SHA-256 of `count` bytes of a file from `offset` (fewer when the file ends first).
func hashOf(_ fd: FileDescriptor, at offset: Int64, count: Int64) throws -> String {
    var hasher = SHA256Hasher()
    let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buf.deallocate() }
    var done: Int64 = 0
    while done < count {
        let want = Int(min(Int64(buf.count), count - done))
        let n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buf[0..<want]), at: offset + done)
        if n == 0 { break }
        hasher.update(UnsafeRawBufferPointer(rebasing: buf[0..<n]))
        done += Int64(n)
    }
    return hasher.finalizeHex()
}

/// The chunks of an item's local copy, by hash, to copy from rather than fetch. Empty when there is no copy.
final class LocalChunks {
    private let fd: FileDescriptor?
    private var byHash: [String: Chunk] = [:]

    init(copyOf key: String, in container: Container) {
        guard let item = ContentKey(parsing: key)?.item,
              let fd = try? FileDescriptor.open(container.paths.content(item), O_RDONLY) else {
            fd = nil
            return
        }
        self.fd = fd
        // Only a speed-up: a copy that cannot be cut is no copy.
        for chunk in (try? Chunker.chunks(ofFile: container.paths.content(item))) ?? [] {
            if let sha = chunk.sha256 { byHash[sha] = chunk }
        }
    }

    func close() { fd?.close() }

    /// Copies the chunk into `target` at `offset` when the copy holds it and it still hashes right there.
    func copy(_ sha: String, size: Int64, to target: FileDescriptor, at offset: Int64) -> Bool {
        guard let fd, let chunk = byHash[sha], chunk.size == size else { return false }
        var bytes = [UInt8](repeating: 0, count: Int(size))
        let got = bytes.withUnsafeMutableBytes { (try? fd.read(into: $0, at: chunk.offset)) ?? 0 }
        guard got == Int(size), sha256Hex(bytes) == sha else { return false }
        do {
            try bytes.withUnsafeBytes { try target.writeAll($0, at: offset) }
        } catch {
            return false
        }
        return true
    }
}
