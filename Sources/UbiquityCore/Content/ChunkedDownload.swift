// The download of a version kept in chunks (docs/CHUNKS.md): only the chunks this device does not hold travel.
// A chunk comes from the staging file itself (what an earlier, cut try landed), from the item's local copy (the
// version it had before, cut the same way by the container's chunk format), or from the remote, several at once
// (one at a time without background transfers); holes are never fetched and stay holes.
//
// What must hold: the caller checks the whole file's size and SHA-256 before it installs it (Downloads.land),
// so no unverified byte is installed; the whole hash follows the chunks as they land (`HashFrontier`), so one
// pass over the bytes both checks them and starts writing them to disk. A chunk copied from here is checked
// against its own hash where it lands (a local copy may change under the copy: one that no longer hashes right
// is fetched instead). A try that fails, cut or corrupt, leaves its staging file: the next try keeps each chunk
// there that hashes to its name and fetches the others.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

extension Downloads {
    /// Lands the version `sha` of `size` bytes, which `manifest` describes, in the staging file `fd`: first what
    /// is here (the staging file's own chunks, the local copy's), then the rest from the remote, several at once.
    /// `landed` hashes the whole file as its chunks land in order.
    func landChunks(_ key: String, _ manifest: WireManifest, sha: String, size: Int64, into fd: FileDescriptor,
                    staging: String, landed: LandedBytes) throws(CoreError) {
        try onRemote { () throws(RemoteError) in try Downloads.check(manifest, sha: sha, size: size) }
        var wanted: [(index: Int, sha: String, offset: Int64, size: Int64)] = []
        var ends: [Int64] = []
        var offset: Int64 = 0
        let staged = Int64(try onFiles { () throws(Errno) in try fd.stat().st_size })
        let local = LocalChunks(copyOf: key, in: container)
        for (i, chunk) in manifest.chunks.enumerated() {
            if let sha = chunk.sha256,
               !(offset + chunk.size <= staged && (try? sha256Hex(of: fd, at: offset, count: chunk.size)) == sha),
               !local.copy(sha, size: chunk.size, to: fd, at: offset) {
                wanted.append((i, sha, offset, chunk.size))
            }
            offset += chunk.size
            ends.append(offset)
        }
        local.close()
        let frontier = HashFrontier(ends: ends, missing: wanted.map(\.index), landed: landed)
        // What is here, and the bytes of each chunk in flight; held while the progress is set, so that it only rises.
        let done = Locked((here: size - wanted.reduce(0) { $0 + $1.size }, inFlight: [Int: Int64]()))
        progress(key, done: done.withLock { $0.here }, total: size)
        try inParallel(wanted, width: container.config.environment.chunkStreams) { [self] (chunk, goOn) throws(CoreError) in
            try fetch(key, chunk.sha, size: chunk.size, into: staging, at: chunk.offset) { [self] got in
                done.withLock {
                    $0.inFlight[chunk.index] = min(got, chunk.size)
                    progress(key, done: $0.here + $0.inFlight.values.reduce(0, +), total: size)
                }
                return goOn()
            }
            frontier.arrived(chunk.index)
            done.withLock {
                $0.inFlight[chunk.index] = nil
                $0.here += chunk.size
                progress(key, done: $0.here + $0.inFlight.values.reduce(0, +), total: size)
            }
        }
        try onFiles { () throws(Errno) in try fd.truncate(size) } // a hole at the end
        log.debug("download \(key): \(wanted.count) of \(manifest.chunkHashes.count) chunks fetched")
    }

    /// Fetches one chunk into its place in the staging file. It is checked as part of the whole file; when that
    /// fails, the next try checks each chunk and fetches again only those that do not hash to their names.
    private func fetch(_ key: String, _ sha: String, size: Int64, into staging: String, at offset: Int64,
                       progress: @escaping TransferProgress) throws(CoreError) {
        let fd = try onFiles { () throws(Errno) in try FileDescriptor.open(staging, O_RDWR) }
        defer { fd.close() }
        try onRemote { () throws(RemoteError) in
            try container.remote.downloadChunk(sha256: sha, to: fd, at: offset, progress: progress)
        }
    }
}

/// Hashes a file being landed chunk by chunk, out of order, in order: as the chunks from the start on are all
/// there, `LandedBytes` hashes them (and starts writing them to disk), so that little is left for the end. One
/// thread hashes at a time (the one that set `hashing`); a chunk that arrives meanwhile does not wait for it,
/// and that thread hashes on to the new frontier before it lets go.
///
/// Lock order (docs/ARCHITECTURE.md): `frontier` is a leaf, never held while hashing; `landed` is held only by
/// the thread that set `hashing`, so nobody ever waits for it.
final class HashFrontier: Sendable {
    private struct Frontier {
        var there: [Bool]
        var next = 0
        var end: Int64 = 0
        var hashing = false
    }
    private let ends: [Int64]
    private let frontier: Locked<Frontier>
    private let landed: Locked<LandedBytes>

    /// `ends`: where each chunk ends; `missing`: the chunks not there yet.
    init(ends: [Int64], missing: [Int], landed: LandedBytes) {
        self.ends = ends
        self.landed = Locked(landed)
        var there = Array(repeating: true, count: ends.count)
        for i in missing { there[i] = false }
        frontier = Locked(Frontier(there: there))
        arrived(nil)
    }

    func arrived(_ index: Int?) {
        var upTo = frontier.withLock { f -> Int64? in
            if let index { f.there[index] = true }
            while f.next < f.there.count && f.there[f.next] {
                f.end = ends[f.next]
                f.next += 1
            }
            if f.hashing { return nil }
            f.hashing = true
            return f.end
        }
        while let end = upTo {
            landed.withLock { $0.follow(to: end) }
            upTo = frontier.withLock { f -> Int64? in
                if f.end > end { return f.end }
                f.hashing = false
                return nil
            }
        }
    }
}

extension WireManifest {
    /// The chunks where they lie in the file the manifest describes.
    var placed: [Chunk] {
        var offset: Int64 = 0
        return chunks.map { chunk in
            defer { offset += chunk.size }
            return Chunk(offset: offset, size: chunk.size, sha256: chunk.sha256)
        }
    }
}

/// The chunks this device holds, to copy rather than fetch: those of the item's own local copy (cut when the
/// download starts) and those the store recorded in any content file (`chunk_places`: what was uploaded from or
/// downloaded into it). Each is hashed again where it is read, so a file changed since gives nothing wrong.
final class LocalChunks {
    private let container: Container
    private let item: String?
    private var files: [String: FileDescriptor?] = [:]
    private var byHash: [String: Chunk] = [:]

    init(copyOf key: String, in container: Container) {
        self.container = container
        item = ContentKey(parsing: key)?.item
        guard let item, let fd = file(item) else { return }
        // Only a speed-up: a copy that cannot be cut is no copy.
        for chunk in (try? Chunker(container.config.chunkFormat).cut(fd, hashingWhole: false).chunks) ?? [] {
            if let sha = chunk.sha256 { byHash[sha] = chunk }
        }
    }

    func close() {
        for case let fd? in files.values { fd.close() }
        files = [:]
    }

    /// Copies the chunk into `target` at `offset` when a local file holds it and it still hashes right there.
    func copy(_ sha: String, size: Int64, to target: FileDescriptor, at offset: Int64) -> Bool {
        var places: [(id: String, offset: Int64, size: Int64)] = []
        if let item, let chunk = byHash[sha] { places.append((item, chunk.offset, chunk.size)) }
        do { places += try container.read { s in try s.store.chunkPlaces(sha) } } catch {
            // Only a speed-up: the chunk is fetched instead.
            Logger("download").warning("cannot look up where chunk \(sha) is held here (it is fetched): \(error)")
        }
        for place in places where place.size == size {
            guard let fd = file(place.id), let bytes = read(fd, at: place.offset, count: size),
                  sha256Hex(bytes) == sha else { continue }
            do { try bytes.withUnsafeBytes { try target.writeAll($0, at: offset) } } catch { return false }
            return true
        }
        return false
    }

    /// The content file of `id`, opened once; nil when there is none.
    private func file(_ id: String) -> FileDescriptor? {
        if let open = files[id] { return open }
        let fd = try? FileDescriptor.open(container.paths.content(id), O_RDONLY)
        files[id] = fd
        return fd
    }

    private func read(_ fd: FileDescriptor, at offset: Int64, count: Int64) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: Int(count))
        let got = bytes.withUnsafeMutableBytes { (try? fd.read(into: $0, at: offset)) ?? 0 }
        return got == Int(count) ? bytes : nil
    }
}
