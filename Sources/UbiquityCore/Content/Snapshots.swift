// Uploads of files that programs hold open for writing (a log, a database): a consistent copy of the content
// goes up at the program's fsync points and once the file has been quiet for a while, rather than only after
// the last close.
//
// What must hold: an uploaded copy never holds half of a write. Every write and truncation through the mount
// runs inside a gate shared by the writers of that file (`write`, `truncate`); a snapshot takes the gate
// alone while it copies (a reflink where the file system can, else a copy inside the kernel), and records
// the content generation at that moment. A write that lands after the copy bumps the generation, so the
// acknowledged upload leaves the item dirty and it goes up again later: `isUploaded` stays true to the bytes.
//
// Lock order: a file's gate, then the container's lock.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// Reader-writer locks striped by item id: writers of a file share theirs, a snapshot takes it alone. Striped
/// (not one per item) so that they need no lifetime of their own; two files in one stripe only wait for each
/// other's snapshots.
final class ContentGates: @unchecked Sendable {
    // @unchecked: `locks` is a fixed array of pthread reader-writer locks, made in init and destroyed in deinit;
    // the locks themselves are what makes it safe to share (Locked has no shared mode).
    private let locks: UnsafeMutablePointer<pthread_rwlock_t>
    private let count = 64

    init() {
        locks = .allocate(capacity: count)
        for i in 0..<count { pthread_rwlock_init(locks + i, nil) }
    }

    deinit {
        for i in 0..<count { pthread_rwlock_destroy(locks + i) }
        locks.deallocate()
    }

    private func lock(_ id: String) -> UnsafeMutablePointer<pthread_rwlock_t> {
        var h: UInt32 = 2166136261
        for b in id.utf8 { h = (h ^ UInt32(b)) &* 16777619 }
        return locks + Int(h % UInt32(count))
    }

    func shared<T, E: Error>(_ id: String, _ body: () throws(E) -> T) throws(E) -> T {
        let l = lock(id)
        pthread_rwlock_rdlock(l); defer { pthread_rwlock_unlock(l) }
        return try body()
    }

    func exclusive<T, E: Error>(_ id: String, _ body: () throws(E) -> T) throws(E) -> T {
        let l = lock(id)
        pthread_rwlock_wrlock(l); defer { pthread_rwlock_unlock(l) }
        return try body()
    }
}

extension Container {
    /// Runs one write of a program into an open file's content: the item is marked dirty first (durably, before
    /// the write is acknowledged), and no snapshot sees the write half done. `fd`: the handle's descriptor (see
    /// `willWrite`).
    public func write<T>(_ handle: String, through fd: FileDescriptor? = nil, _ body: () -> T) throws(CoreError) -> T {
        let id = read { $0.handleOwner(handle) }
        try willWrite(id, through: fd)
        return gates.shared(id) {
            let result = body()
            update { s in
                s.contentGeneration[id, default: 0] += 1
                s.lastWrite[id] = now()
            }
            return result
        }
    }

    /// An fsync of a file open for writing: a snapshot of it is due.
    func snapshotRequested(_ id: String) {
        update { s in _ = s.fsyncedSinceSnapshot.insert(id) }
        sync.wakePusher()
    }

    /// When the next file held open for writing becomes quiet enough for a snapshot (nanoseconds from now).
    func nextSnapshotDue() -> Int64? {
        guard let quiet = config.snapshotQuietSeconds else { return nil }
        return read { s in
            let now = self.now()
            return s.handles.compactMap { id, h -> Int64? in
                guard h.writers > 0, s.items[id]?.dirty == true else { return nil }
                return max(0, s.lastWriteTime(id) + Int64(quiet) * 1_000_000_000 - now)
            }.min()
        }
    }

    /// What the pusher hashes and uploads for a dirty file: a copy of its content taken between two writes (in
    /// staging, removed by `done`), so that the bytes sent are the bytes hashed, whatever a program writes,
    /// truncates or evicts meanwhile. `generation` is the content's at that moment. A copy made while a write
    /// the gate does not see (FUSE passthrough) changed the file is taken again. When the store's disk has no
    /// room for a copy and nobody writes the file, the content file itself goes (as before copies: a write
    /// that comes meanwhile makes the remote refuse the bytes, and the upload is tried again).
    func contentForUpload(_ id: String) throws -> (path: String, generation: Int?, done: () -> Void) {
        let path = paths.content(id)
        let copy = paths.staging + "/snapshot-" + id
        do {
            for _ in 0..<3 {
                if let generation = try gates.exclusive(id, { () throws -> Int? in try snapshot(id, path, to: copy) }) {
                    return (copy, generation, { removeLeftover(copy) })
                }
            }
        } catch let error as Errno where error == .noSpace || error == .quota {
            removeLeftover(copy)
            if read({ ($0.handles[id]?.writers ?? 0) == 0 }) { return (path, nil, {}) }
            throw error
        } catch {
            removeLeftover(copy)
            throw error
        }
        removeLeftover(copy)
        throw RemoteError.localFile("\(self.path(of: id)) changed during each of 3 copies", cause: .busy)
    }

    /// The content of a dirty file of at most `limit` bytes, read into memory between two writes, with its
    /// generation at that moment (see `contentForUpload`, which a larger file takes): a batch's inline content
    /// needs no copy in staging, so a burst of small files creates and deletes no file of its own. Nil when the
    /// file is larger; a read that a write the gate does not see (FUSE passthrough) changed is taken again.
    func smallContentForUpload(_ id: String, limit: Int) throws -> (bytes: [UInt8], generation: Int)? {
        for _ in 0..<3 {
            // The generation is taken with the file's gate still held, as `snapshot` takes it: taken after, a
            // truncate between the two gave the old bytes the truncate's generation, and the push of the old
            // bytes then marked the file clean over it.
            let read = try gates.exclusive(id) { () throws -> (ReadForUpload, Int) in
                let read = try readWhole(id, limit: limit)
                config.environment.afterUploadRead?(id)
                let generation = update { s -> Int in
                    if case .read = read { s.fsyncedSinceSnapshot.remove(id) }
                    return s.contentGeneration[id] ?? 0
                }
                return (read, generation)
            }
            switch read.0 {
            case .tooLarge: return nil
            case .changed: continue
            case .read(let bytes): return (bytes, read.1)
            }
        }
        throw RemoteError.localFile("\(self.path(of: id)) changed during each of 3 reads", cause: .busy)
    }

    private enum ReadForUpload { case read([UInt8]), tooLarge, changed }

    /// Reads the content file whole (the file's gate held), unless it is larger than `limit` or changed meanwhile.
    private func readWhole(_ id: String, limit: Int) throws -> ReadForUpload {
        let fd = try FileDescriptor.open(paths.content(id), O_RDONLY)
        defer { fd.close() }
        let before = try fd.stat()
        let size = Int(before.st_size)
        guard size <= limit else { return .tooLarge }
        var bytes = [UInt8](repeating: 0, count: size + 1) // one more: a file that grew reads past its size
        var got = 0
        while got < bytes.count {
            let n = try bytes.withUnsafeMutableBytes { buffer in
                try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[got...]), at: Int64(got))
            }
            if n == 0 { break }
            got += n
        }
        let after = try fd.stat()
        guard got == size, after.st_size == before.st_size, after.st_mtim.tv_sec == before.st_mtim.tv_sec,
              after.st_mtim.tv_nsec == before.st_mtim.tv_nsec else { return .changed }
        bytes.removeLast()
        return .read(bytes)
    }

    /// Copies the content file to `copy` (the file's gate held); nil when the file changed under the copy.
    private func snapshot(_ id: String, _ path: String, to copy: String) throws -> Int? {
        let source = try FileDescriptor.open(path, O_RDONLY)
        defer { source.close() }
        let target = try FileDescriptor.open(copy, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
        defer { target.close() }
        let before = try source.stat()
        try target.copyContent(of: source, length: Int64(before.st_size))
        let after = try source.stat()
        guard after.st_size == before.st_size, after.st_mtim.tv_sec == before.st_mtim.tv_sec,
              after.st_mtim.tv_nsec == before.st_mtim.tv_nsec else { return nil }
        return mutate { (s: inout CoreState) -> Int in
            s.fsyncedSinceSnapshot.remove(id)
            return s.contentGeneration[id] ?? 0
        } ?? 0
    }
}

extension CoreState {
    /// True while a program writes the file and no snapshot of it is due: it waits for its fsync, for a quiet
    /// moment, or for its last close.
    func isBeingWritten(_ id: String) -> Bool {
        guard let item = items[id], item.dirty, (handles[id]?.writers ?? 0) > 0 else { return false }
        return !isSnapshotDue(id)
    }

    /// A snapshot of a file held open is due after an fsync, or once it was quiet for the quiet period.
    private func isSnapshotDue(_ id: String) -> Bool {
        guard let quiet = config.snapshotQuietSeconds else { return false }
        if fsyncedSinceSnapshot.contains(id) { return true }
        return now() - lastWriteTime(id) >= Int64(quiet) * 1_000_000_000
    }

    /// When the file was last written: the last write seen, or the content file's mtime when later (the kernel
    /// writes a file opened with FUSE passthrough without telling us), never later than now.
    func lastWriteTime(_ id: String) -> Int64 {
        let seen = lastWrite[id] ?? 0
        var st = stat()
        guard stat(paths.content(id), &st) == 0 else { return seen }
        let mtime = nanoseconds(st.st_mtim)
        return max(seen, min(mtime, now()))
    }
}
