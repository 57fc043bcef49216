// Where the stub keeps blob bytes: one interface, with the embedded files of `--data` (FileBlobStore) and an
// S3-compatible bucket (S3BlobStore) behind it.
//
// What must hold: blobs are content-addressed and immutable. `put` is given a temporary file the server has
// already hashed to the blob's name and sized; the blob becomes visible (to `size`, so to item validation) only
// once its bytes are wholly in place, so no item can name a blob that is not stored. `open` hands out a file of
// bytes that hash to the name (a store that cannot vouch for its bytes checks them first). An existing blob is
// never rewritten: a second `put` of it is a success that changes nothing. A manifest (docs/CHUNKS.md) is kept
// beside the blobs as `{sha256}.chunks`: it too becomes visible only whole (written aside, then moved or
// uploaded into place), but a later `putManifest` replaces it. `list` answers blobs only, `listManifests`
// manifests only.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// One stored blob as a listing for collection sees it.
struct StoredBlob: Sendable, Equatable {
    let sha256: String
    let size: Int64
    /// When it was stored, in nanoseconds since the epoch.
    let stored: Int64
}

protocol BlobStore: AnyObject, Sendable {
    /// Makes room for a new container's blobs.
    func addContainer(_ cid: String) throws
    /// The blob's size, or nil when it is not stored (the empty blob is always there, of size 0).
    func size(_ cid: String, _ sha256: String) throws -> Int64?
    /// Stores the verified temporary file `tmpPath` (consumed) as the blob; false when it was already there.
    /// `replacing`: the stored blob is not sound (`isSound`), and these bytes take its place.
    func put(_ cid: String, _ sha256: String, size: Int64, tmpPath: String, replacing: Bool) throws -> Bool
    /// Whether the stored blob's bytes are `size` bytes that hash to its name, read from where they are kept
    /// (not from a cache). One that is not counts as absent for an upload of the right bytes, which replaces it.
    func isSound(_ cid: String, _ sha256: String, size: Int64) throws -> Bool
    /// A file of the blob's verified bytes, positioned nowhere (read it with pread); the caller closes it.
    func open(_ cid: String, _ sha256: String, size: Int64) throws -> FileDescriptor
    /// Removes the blob; harmless when it is gone.
    func delete(_ cid: String, _ sha256: String) throws
    /// Takes away a blob whose bytes were read and found not to hash to its name (or too short), if the
    /// stored bytes are so (not only a cache's): it then counts as absent, so `chunks/missing` lists it and
    /// the next upload of it stores it again.
    func setAsideDamaged(_ cid: String, _ sha256: String, size: Int64) throws
    /// Whether a damaged copy of the blob was set aside (and is kept to say so).
    func wasSetAside(_ cid: String, _ sha256: String) -> Bool
    /// Every blob stored for the container (not its manifests).
    func list(_ cid: String) throws -> [StoredBlob]

    /// Stores `json` as the manifest `sha256`, replacing one stored before; true when there was none.
    func putManifest(_ cid: String, _ sha256: String, json: [UInt8]) throws -> Bool
    /// The manifest's JSON as it was put, or nil when none is stored.
    func manifest(_ cid: String, _ sha256: String) throws -> [UInt8]?
    /// Removes the manifest; harmless when it is gone.
    func deleteManifest(_ cid: String, _ sha256: String) throws
    /// Every manifest stored for the container (`size`: of its JSON).
    func listManifests(_ cid: String) throws -> [StoredBlob]
}

/// What a manifest's name adds to the hash it is stored under: `{sha256}.chunks`.
let manifestSuffix = ".chunks"

/// The hash in a stored name `{sha256}{suffix}`, or nil for any other name (a temporary file, a manifest when
/// the suffix is empty).
func storedHash(_ name: String, suffix: String) -> String? {
    guard name.hasSuffix(suffix) else { return nil }
    let sha = String(name.dropLast(suffix.count))
    return isSHA256Hex(sha) ? sha : nil
}

/// The bytes of `fd` from its position to its end.
func readAll(_ fd: FileDescriptor) throws -> [UInt8] {
    var bytes: [UInt8] = []
    try fd.forEachChunk { bytes.append(contentsOf: $0) }
    return bytes
}

/// Writes `bytes` to a new file (mode 0600) in `dir` and answers its path, for the caller to move or remove.
func writeTemporary(_ bytes: [UInt8], in dir: String) throws -> String {
    let path = dir + "/" + randomHex(bytes: 12) + ".part"
    let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
    defer { fd.close() }
    do { try fd.writeAll(bytes) } catch { removeLeftover(path); throw error }
    return path
}

/// The embedded default: one file per blob under `--data`/blobs/CONTAINER/SHA256, renamed into place only after
/// it was verified, so a blob exists exactly when its file does; a manifest beside it, SHA256.chunks, written in
/// `tmpDir` and renamed into place.
final class FileBlobStore: BlobStore, Sendable {
    let dir: String
    /// On the same file system as `dir`; its leftovers are the server's to remove (StubStore).
    let tmpDir: String

    init(dir: String, tmpDir: String) throws {
        self.dir = dir
        self.tmpDir = tmpDir
        try makeDirectories(dir)
        try makeDirectories(tmpDir)
    }

    /// The blob file's path; both parts are validated before they are used.
    func path(_ cid: String, _ sha256: String) -> String {
        precondition(ContainerScope.isValidStoredID(cid) && isSHA256Hex(sha256))
        return dir + "/" + cid + "/" + sha256
    }

    func addContainer(_ cid: String) throws {
        precondition(ContainerScope.isValidStoredID(cid))
        try makeDirectories(dir + "/" + cid)
    }

    func size(_ cid: String, _ sha256: String) throws -> Int64? {
        if sha256 == emptySHA256 { return 0 }
        var st = stat()
        guard stat(path(cid, sha256), &st) == 0 else {
            let e = Errno.current
            if e == .noEntry { return nil }
            throw e
        }
        return Int64(st.st_size)
    }

    func put(_ cid: String, _ sha256: String, size: Int64, tmpPath: String, replacing: Bool) throws -> Bool {
        if try !replacing && self.size(cid, sha256) != nil {
            removeLeftover(tmpPath)
            return false
        }
        try makeDirectories(dir + "/" + cid)
        try renameFile(tmpPath, path(cid, sha256)) // (over a damaged one: rename replaces it in one step)
        return true
    }

    func isSound(_ cid: String, _ sha256: String, size: Int64) throws -> Bool {
        if sha256 == emptySHA256 { return true }
        let fd = try FileDescriptor.open(path(cid, sha256), O_RDONLY)
        defer { fd.close() }
        return try Int64(fd.stat().st_size) == size && sha256Hex(of: fd) == sha256
    }

    func open(_ cid: String, _ sha256: String, size: Int64) throws -> FileDescriptor {
        try FileDescriptor.open(path(cid, sha256), O_RDONLY)
    }

    /// Kept beside as SHA.damaged (one, the last), for whoever looks into it; the collector lists no such name.
    func setAsideDamaged(_ cid: String, _ sha256: String, size: Int64) throws {
        guard try !isSound(cid, sha256, size: size) else { return }
        try renameFile(path(cid, sha256), path(cid, sha256) + ".damaged")
    }

    func wasSetAside(_ cid: String, _ sha256: String) -> Bool {
        FileManager.default.fileExists(atPath: path(cid, sha256) + ".damaged")
    }

    func delete(_ cid: String, _ sha256: String) throws {
        do { try removeFile(path(cid, sha256)) } catch let e as Errno where e == .noEntry {}
    }

    func list(_ cid: String) throws -> [StoredBlob] {
        stored(cid, suffix: "")
    }

    /// The manifest file's path, beside the blob's.
    func manifestPath(_ cid: String, _ sha256: String) -> String { path(cid, sha256) + manifestSuffix }

    func putManifest(_ cid: String, _ sha256: String, json: [UInt8]) throws -> Bool {
        let isNew = !FileManager.default.fileExists(atPath: manifestPath(cid, sha256))
        let tmp = try writeTemporary(json, in: tmpDir)
        defer { removeLeftover(tmp) }
        try makeDirectories(dir + "/" + cid)
        try renameFile(tmp, manifestPath(cid, sha256))
        return isNew
    }

    func manifest(_ cid: String, _ sha256: String) throws -> [UInt8]? {
        guard let fd = try openIfThere(manifestPath(cid, sha256)) else { return nil }
        defer { fd.close() }
        return try readAll(fd)
    }

    /// The file opened for reading, or nil when there is none.
    private func openIfThere(_ path: String) throws -> FileDescriptor? {
        do { return try FileDescriptor.open(path, O_RDONLY) } catch let e as Errno where e == .noEntry { return nil }
    }

    func deleteManifest(_ cid: String, _ sha256: String) throws {
        do { try removeFile(manifestPath(cid, sha256)) } catch let e as Errno where e == .noEntry {}
    }

    func listManifests(_ cid: String) throws -> [StoredBlob] {
        stored(cid, suffix: manifestSuffix)
    }

    /// The container's files named `{sha256}{suffix}`, with their sizes and modification times.
    private func stored(_ cid: String, suffix: String) -> [StoredBlob] {
        guard ContainerScope.isValidStoredID(cid),
              let names = try? FileManager.default.contentsOfDirectory(atPath: dir + "/" + cid) else { return [] }
        var found: [StoredBlob] = []
        for name in names {
            guard let sha = storedHash(name, suffix: suffix) else { continue }
            var st = stat()
            guard stat(dir + "/" + cid + "/" + name, &st) == 0 else { continue }
            let mtime = nanoseconds(st.st_mtim)
            found.append(StoredBlob(sha256: sha, size: Int64(st.st_size), stored: mtime))
        }
        return found
    }
}
