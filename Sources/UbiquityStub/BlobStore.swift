// Where the stub keeps blob bytes: one interface, with the embedded files of `--data` (FileBlobStore) and an
// S3-compatible bucket (S3BlobStore) behind it.
//
// What must hold: blobs are content-addressed and immutable. `put` is given a temporary file the server has
// already hashed to the blob's name and sized; the blob becomes visible (to `size`, so to item validation) only
// once its bytes are wholly in place, so no item can name a blob that is not stored. `open` hands out a file of
// bytes that hash to the name (a store that cannot vouch for its bytes checks them first). An existing blob is
// never rewritten: a second `put` of it is a success that changes nothing.
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
    /// Every blob stored for the container.
    func list(_ cid: String) throws -> [StoredBlob]
}

/// The embedded default: one file per blob under `--data`/blobs/CONTAINER/SHA256, renamed into place only after
/// it was verified, so a blob exists exactly when its file does.
final class FileBlobStore: BlobStore, Sendable {
    let dir: String

    init(dir: String) throws {
        self.dir = dir
        try makeDirectories(dir)
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

    func delete(_ cid: String, _ sha256: String) throws {
        do { try removeFile(path(cid, sha256)) } catch let e as Errno where e == .noEntry {}
    }

    func list(_ cid: String) throws -> [StoredBlob] {
        guard ContainerScope.isValidStoredID(cid),
              let names = try? FileManager.default.contentsOfDirectory(atPath: dir + "/" + cid) else { return [] }
        var blobs: [StoredBlob] = []
        for name in names where isSHA256Hex(name) {
            var st = stat()
            guard stat(path(cid, name), &st) == 0 else { continue }
            let mtime = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
            blobs.append(StoredBlob(sha256: name, size: Int64(st.st_size), stored: mtime))
        }
        return blobs
    }
}
