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
    func addContainer(_ cid: String) throws(ServerFailure)
    /// The blob's size, or nil when it is not stored (the empty blob is always there, of size 0).
    func size(_ cid: String, _ sha256: String) throws(ServerFailure) -> Int64?
    /// Stores the verified temporary file `tmpPath` (consumed) as the blob; false when it was already there.
    /// `replacing`: the stored blob is not sound (`isSound`), and these bytes take its place.
    func put(_ cid: String, _ sha256: String, size: Int64, tmpPath: String, replacing: Bool) throws(ServerFailure) -> Bool
    /// Whether the stored blob's bytes are `size` bytes that hash to its name, read from where they are kept
    /// (not from a cache). One that is not counts as absent for an upload of the right bytes, which replaces it.
    func isSound(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) -> Bool
    /// A file of the blob's verified bytes, positioned nowhere (read it with pread); the caller closes it.
    func open(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) -> FileDescriptor
    /// Removes the blob; harmless when it is gone.
    func delete(_ cid: String, _ sha256: String) throws(ServerFailure)
    /// Takes away a blob whose bytes were read and found not to hash to its name (or too short), if the
    /// stored bytes are so (not only a cache's): it then counts as absent, so `chunks/missing` lists it and
    /// the next upload of it stores it again.
    func setAsideDamaged(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure)
    /// Whether a damaged copy of the blob was set aside (and is kept to say so).
    func wasSetAside(_ cid: String, _ sha256: String) -> Bool
    /// Every blob stored for the container (not its manifests).
    func list(_ cid: String) throws(ServerFailure) -> [StoredBlob]

    /// Stores `json` as the manifest `sha256`, replacing one stored before; true when there was none.
    func putManifest(_ cid: String, _ sha256: String, json: [UInt8]) throws(ServerFailure) -> Bool
    /// The manifest's JSON as it was put, or nil when none is stored.
    func manifest(_ cid: String, _ sha256: String) throws(ServerFailure) -> [UInt8]?
    /// Removes the manifest; harmless when it is gone.
    func deleteManifest(_ cid: String, _ sha256: String) throws(ServerFailure)
    /// Every manifest stored for the container (`size`: of its JSON).
    func listManifests(_ cid: String) throws(ServerFailure) -> [StoredBlob]
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
func readAll(_ fd: FileDescriptor) throws(ServerFailure) -> [UInt8] {
    var bytes: [UInt8] = []
    try ServerFailure.file("reading a stored file", try fd.forEachChunk { bytes.append(contentsOf: $0) })
    return bytes
}

/// Writes `bytes` to a new file (mode 0600) in `dir` and answers its path, for the caller to move or remove.
func writeTemporary(_ bytes: [UInt8], in dir: String) throws(ServerFailure) -> String {
    let path = dir + "/" + randomHex(bytes: 12) + ".part"
    let fd = try ServerFailure.file("creating \(path)", try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600))
    defer { fd.close() }
    do { try fd.writeAll(bytes) } catch { removeLeftover(path); throw ServerFailure(error, "writing \(path)") }
    return path
}

/// The embedded default: one file per blob under `--data`/blobs/CONTAINER/SHA256, renamed into place only after
/// it was verified, so a blob exists exactly when its file does; a manifest beside it, SHA256.chunks, written in
/// `tmpDir` and renamed into place.
final class FileBlobStore: BlobStore, Sendable {
    let dir: String
    /// On the same file system as `dir`; its leftovers are the server's to remove (StubStore).
    let tmpDir: String

    init(dir: String, tmpDir: String) throws(ServerFailure) {
        self.dir = dir
        self.tmpDir = tmpDir
        try ServerFailure.file("making \(dir)", try makeDirectories(dir))
        try ServerFailure.file("making \(tmpDir)", try makeDirectories(tmpDir))
    }

    /// The blob file's path; both parts are validated before they are used.
    func path(_ cid: String, _ sha256: String) -> String {
        precondition(ContainerScope.isValidStoredID(cid) && isSHA256Hex(sha256))
        return dir + "/" + cid + "/" + sha256
    }

    func addContainer(_ cid: String) throws(ServerFailure) {
        precondition(ContainerScope.isValidStoredID(cid))
        try ServerFailure.file("making a container's blob folder", try makeDirectories(dir + "/" + cid))
    }

    func size(_ cid: String, _ sha256: String) throws(ServerFailure) -> Int64? {
        if sha256 == emptySHA256 { return 0 }
        var st = stat()
        guard stat(path(cid, sha256), &st) == 0 else {
            let e = Errno.current
            if e == .noEntry { return nil }
            throw ServerFailure(e, "stat of a blob")
        }
        return Int64(st.st_size)
    }

    func put(_ cid: String, _ sha256: String, size: Int64, tmpPath: String, replacing: Bool) throws(ServerFailure) -> Bool {
        if !replacing, try self.size(cid, sha256) != nil {
            removeLeftover(tmpPath)
            return false
        }
        try addContainer(cid)
        // (over a damaged one: rename replaces it in one step)
        try ServerFailure.file("renaming a blob into place", try renameFile(tmpPath, path(cid, sha256)))
        return true
    }

    func isSound(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) -> Bool {
        if sha256 == emptySHA256 { return true }
        let fd = try ServerFailure.file("opening a blob", try FileDescriptor.open(path(cid, sha256), O_RDONLY))
        defer { fd.close() }
        guard try ServerFailure.file("stat of a blob", try fd.stat()).st_size == size else { return false }
        return try ServerFailure.file("reading a blob", try sha256Hex(of: fd)) == sha256
    }

    func open(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) -> FileDescriptor {
        try ServerFailure.file("opening a blob", try FileDescriptor.open(path(cid, sha256), O_RDONLY))
    }

    /// Kept beside as SHA.damaged (one, the last), for whoever looks into it; the collector lists no such name.
    func setAsideDamaged(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) {
        guard try !isSound(cid, sha256, size: size) else { return }
        try ServerFailure.file("setting a damaged blob aside", try renameFile(path(cid, sha256), path(cid, sha256) + ".damaged"))
    }

    func wasSetAside(_ cid: String, _ sha256: String) -> Bool {
        FileManager.default.fileExists(atPath: path(cid, sha256) + ".damaged")
    }

    func delete(_ cid: String, _ sha256: String) throws(ServerFailure) {
        try ServerFailure.file("removing a blob", try removeFile(path(cid, sha256)))
    }

    func list(_ cid: String) throws(ServerFailure) -> [StoredBlob] {
        stored(cid, suffix: "")
    }

    /// The manifest file's path, beside the blob's.
    func manifestPath(_ cid: String, _ sha256: String) -> String { path(cid, sha256) + manifestSuffix }

    func putManifest(_ cid: String, _ sha256: String, json: [UInt8]) throws(ServerFailure) -> Bool {
        let isNew = !FileManager.default.fileExists(atPath: manifestPath(cid, sha256))
        let tmp = try writeTemporary(json, in: tmpDir)
        defer { removeLeftover(tmp) }
        try addContainer(cid)
        try ServerFailure.file("renaming a manifest into place", try renameFile(tmp, manifestPath(cid, sha256)))
        return isNew
    }

    func manifest(_ cid: String, _ sha256: String) throws(ServerFailure) -> [UInt8]? {
        guard let fd = try openIfThere(manifestPath(cid, sha256)) else { return nil }
        defer { fd.close() }
        return try readAll(fd)
    }

    /// The file opened for reading, or nil when there is none.
    private func openIfThere(_ path: String) throws(ServerFailure) -> FileDescriptor? {
        do {
            return try FileDescriptor.open(path, O_RDONLY)
        } catch {
            if error == .noEntry { return nil }
            throw ServerFailure(error, "opening \(path)")
        }
    }

    func deleteManifest(_ cid: String, _ sha256: String) throws(ServerFailure) {
        try ServerFailure.file("removing a manifest", try removeFile(manifestPath(cid, sha256)))
    }

    func listManifests(_ cid: String) throws(ServerFailure) -> [StoredBlob] {
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
