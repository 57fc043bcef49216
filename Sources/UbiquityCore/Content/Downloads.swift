// Downloads of file content: one transfer per item however many opens wait for it, landing in staging,
// verified against the remote's size and SHA-256, made durable, then moved into place in one rename.
// Transient failures are retried as `Backoff.download` says, resuming with a range request, until the
// deadline passes; waiters are told the outcome exactly once. A transfer that found the remote unreachable
// until its deadline marks it away (as a failing change feed does) and hanging: until it answers again, a
// transfer fails at once, sends nothing and makes no room. Every transfer that failed for want of the remote
// starts again when it answers (the feed, a download, or the prober that asks a hanging remote every 2 s), one
// still running then as soon as it ends.
// With background transfers, an item asked for while no transfer of it is queued or running (`running`) is
// queued on the bounded scheduler (Scheduler.swift): at most `maxConcurrentDownloads` threads, whatever the
// number of items waiting; a request for an item queued or running joins its transfer.
//
// What must hold: `book`'s lock guards the waiters, what runs and what was asked for, and is a leaf: the scheduler is
// called and waiters are told only after it is let go, in the order they registered, and each once (`finish` takes them
// out first). No network call runs under the container's lock: `target` looks at the state, the transfer runs outside
// it, and the install checks again under the lock that the item did not change here meanwhile (`installDownload`,
// Content.swift). A staging file is verified and fsynced before its rename; one that fails verification is removed, a
// partial one of the same version is kept only to resume.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `book` is a leaf, taken with or without the
// container's.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

final class Downloads: Sendable {
    typealias Waiter = @Sendable (Result<Void, CoreError>) -> Void

    /// The bookkeeping of transfers, under one lock.
    struct Book {
        /// Waiters per item id, by token.
        var waiters: [String: [Int: Waiter]] = [:]
        /// Items whose transfer is queued on the scheduler or running.
        var running: Set<String> = []
        var nextToken = 1
        /// Without background transfers: keys asked for, oldest first, until `downloadOnce` fetches them.
        var requested: [String] = []
        /// Items whose transfer failed because the remote could not be reached: started again once it answers.
        var retryWhenBack: Set<String> = []
        /// A transfer tried until its deadline and the remote never answered (a remote that hangs): until it
        /// answers again, transfers fail at once rather than each wait out the deadline.
        var remoteHangs = false
        /// How often the remote came back: a transfer that failed for want of it, and saw a different count
        /// when it began, starts again right after rather than waiting for the next return.
        var returns = 0
        /// Items whose transfer still runs as the remote came back: started again as soon as it ends.
        var again: Set<String> = []
    }

    unowned let container: Container
    let log = Logger("download")
    let book = Locked(Book())
    /// The workers that run background transfers.
    let scheduler: TransferScheduler
    /// While the remote hangs, asks it every few seconds whether it answers again (`probeWhileHanging`).
    let prober = Loop(name: "probe")

    init(container: Container) {
        self.container = container
        scheduler = TransferScheduler(width: container.config.maxConcurrentDownloads, name: "download") {
            [weak container] id in
            // The container is held for the transfer: `stop` waits for it, or it ends after the container's owner
            // let go of it, never with the container freed under it.
            guard let container else { return }
            withExtendedLifetime(container) { container.downloads.runInBackground(id) }
        }
    }

    /// A background transfer, on a worker of the scheduler; waiters are told the outcome.
    private func runInBackground(_ id: String) { finish(id, run(id)) }

    /// Starts no more transfers, waits a few seconds at most for those running, and fails every open still
    /// waiting for content.
    func stop() {
        prober.stopAndJoin(timeout: 1)
        scheduler.stop(timeout: 5)
        let left = book.withLock { b in
            defer { b.waiters = [:] }
            return b.waiters
        }
        for list in left.values { tell(list, .failure(.io("the container stopped"))) }
    }

    /// Tells waiters the outcome, each once, in the order they registered (the lock let go).
    private func tell(_ waiters: [Int: Waiter], _ result: Result<Void, CoreError>) {
        for (_, done) in waiters.sorted(by: { $0.key < $1.key }) { done(result) }
    }

    /// Registers a waiter for the item's content and starts the transfer if none runs.
    func wait(for id: String, done: @escaping Waiter) {
        book.withLock { b in
            b.waiters[id, default: [:]][b.nextToken] = done
            b.nextToken += 1
        }
        start(id)
    }

    /// Without background transfers: remembers the key for the owner's next `downloadOnce`.
    private func queue(_ key: String) {
        book.withLock { b in if !b.requested.contains(key) { b.requested.append(key) } }
    }

    /// One attempt at a transfer, on the calling thread, without retries; waiters are told the outcome.
    func runOnce(_ key: String) -> Result<Void, CoreError> {
        book.withLock { $0.requested.removeAll { $0 == key } }
        let result: Result<Void, CoreError>
        switch target(key) {
        case .done: removeStaleStaging(key); result = .success(())
        case .failed(let e): removeStaleStaging(key); record(key, error: e.description); result = .failure(e)
        case .fetch(let sha, let size):
            do {
                var data = size
                _ = try transfer(key, sha: sha, size: size, data: &data)
                record(key, error: nil)
                result = .success(())
            } catch {
                record(key, error: "\(error)")
                result = .failure(error)
            }
        }
        finish(key, result)
        return result
    }

    /// The remote's returns so far, read as a transfer begins an attempt.
    private var returns: Int { book.withLock { $0.returns } }

    /// A transfer that began when the remote had come back `seen` times failed for want of it: it starts again
    /// once the remote answers, or as soon as it ends if the remote came back meanwhile. `hangs`: the remote
    /// never answered until the deadline, and counts as hanging until it comes back.
    private func retryWhenBack(_ id: String, seen: Int, hangs: Bool = false) {
        book.withLock { b in
            guard b.returns == seen else { b.again.insert(id); return }
            b.retryWhenBack.insert(id)
            if hangs { b.remoteHangs = true }
        }
    }

    /// The remote answers again: the transfers it failed start again (those no longer needed end at once),
    /// those still running as soon as they end.
    func remoteIsBack() {
        let ids = book.withLock { b in
            defer { b.retryWhenBack = []; b.remoteHangs = false; b.returns += 1 }
            let running = b.retryWhenBack.intersection(b.running)
            b.again.formUnion(running)
            return b.retryWhenBack.subtracting(running).sorted()
        }
        for id in ids { start(id) }
    }

    /// Queues a background transfer of the item unless one is queued or runs already. From now on it shows as
    /// downloading at 0%, without the last try's error or progress: `download --wait` waits for this try, not
    /// that one, and the progress a reader sees only rises.
    func start(_ id: String) {
        if !container.config.environment.backgroundTransfers { return queue(id) }
        let fresh = book.withLock { $0.running.insert(id).inserted }
        guard fresh else { return }
        var total: Int64 = 0
        if case .fetch(_, let size) = target(id) { total = size }
        container.update { s in
            s.updateTransfer(id) {
                $0.isDownloading = true
                $0.downloadError = nil
                $0.downloadedBytes = 0
                $0.downloadTotal = total
            }
        }
        // After `stop` no transfer starts: its waiters are told at once rather than left waiting.
        if !scheduler.submit(id) { finish(id, .failure(.io("the container stopped"))) }
    }

    func finish(_ id: String, _ result: Result<Void, CoreError>) {
        container.update { s in s.updateTransfer(id) { $0.isDownloading = false } }
        let (list, again) = book.withLock { b in
            b.running.remove(id)
            return (b.waiters.removeValue(forKey: id) ?? [:], b.again.remove(id) != nil)
        }
        tell(list, result)
        if again { start(id) }
    }

    /// What to fetch for an item now, or why nothing is to be fetched.
    enum Target {
        case fetch(sha: String, size: Int64)
        case done
        case failed(CoreError)
    }

    /// What a download key names: an item's current content, one of its conflict versions ("ITEM.CONFLICT"), or
    /// a past version fetched for one open (`PastContent`).
    func target(_ key: String) -> Target {
        if let past = PastContent(parsing: key) {
            return FileManager.default.fileExists(atPath: container.paths.past(key)) ? .done
                : .fetch(sha: past.sha256, size: past.size)
        }
        return container.read { s in
            guard let key = ContentKey(parsing: key), let item = s.items[key.item], !item.deleted else {
                return .failed(.notFound)
            }
            if let conflict = key.conflict {
                guard let c = item.conflicts.first(where: { $0.id == conflict }) else { return .failed(.notFound) }
                if FileManager.default.fileExists(atPath: s.paths.conflict(item.id, c.id)) { return .done }
                return .fetch(sha: c.sha256, size: c.size)
            }
            if item.isCurrent || item.dirty { return .done }
            if item.remoteVersion == 0 { return .failed(.io("the item is not on the remote")) }
            return .fetch(sha: item.remoteSHA, size: item.remoteSize)
        }
    }

    /// Runs one item's transfer to the end: installed, or failed after retries.
    private func run(_ id: String) -> Result<Void, CoreError> {
        let deadline = monotonicNanoseconds() + Int64(container.config.downloadTimeoutSeconds) * 1_000_000_000
        var backoff = Backoff.download
        var madeRoom = false
        // Begun while the remote answered: a cut by the remote going away (a restart, a failover) is tried
        // again for a moment before the download counts as offline (set at its first transient failure).
        let begunOnline = !container.isOffline
        var graceEnd: Int64?
        while true {
            let seen = returns
            let sha: String, size: Int64
            switch target(id) {
            case .done: removeStaleStaging(id); return .success(())
            case .failed(let e): removeStaleStaging(id); record(id, error: e.description); return .failure(e)
            case .fetch(let s, let n): sha = s; size = n
            }
            if let failure = failureWhileRemoteHangs(id, seen: seen) { return failure }
            if container.isSyncPaused {
                record(id, error: Container.pausedRefusal)
                return .failure(.remote(.unreachable(Container.pausedRefusal)))
            }
            var data = size
            do {
                let installed = try transfer(id, sha: sha, size: size, data: &data)
                container.remoteAnswered()
                record(id, error: nil)
                // Installed: the next target() says done, or names a newer version that arrived meanwhile.
                // Not installed (changed here meanwhile): what is local is what the user has.
                if !installed { return .success(()) }
            } catch where Downloads.isDiskFull(error) && (!madeRoom || waitsForUploads(until: deadline)) {
                // The disk filled during the download: make room, then try again (resuming what landed). When
                // nothing could go, uploads in flight make copies evictable: wait for them, up to the deadline.
                if madeRoom {
                    record(id, error: "no space left in the store: waiting for uploads to make room")
                    backoff.sleep(in: container.config.environment, limit: deadline - monotonicNanoseconds())
                } else {
                    log.warning("download of \(id) met a full disk; evicting to make room and retrying")
                }
                madeRoom = true
                container.makeRoomAfterNoSpace(for: id, bytes: data)
            } catch {
                if case .remote(let remoteError) = error, remoteError.isTransient {
                    if begunOnline && graceEnd == nil { graceEnd = min(deadline, monotonicNanoseconds() + Downloads.outageGrace) }
                    if let failure = retryAfter(remoteError, id, seen: seen, deadline: deadline, graceEnd: graceEnd,
                                                backoff: &backoff) {
                        return failure
                    }
                    continue
                }
                // Not worth resuming (refused, gone, the store is full): free what the partial copy holds.
                removeLeftover(stagingPath(id, sha))
                record(id, error: error == .noSpace ? "no space left in the store" : Downloads.cause(of: error))
                return .failure(error)
            }
        }
    }

    /// While the remote hangs (a transfer found it unreachable until its deadline): no request that would wait
    /// out the whole timeout again, and no room made for a download that cannot happen; the transfer runs once
    /// the remote answers. Nil when it does not hang.
    private func failureWhileRemoteHangs(_ id: String, seen: Int) -> Result<Void, CoreError>? {
        guard book.withLock({ $0.remoteHangs && $0.returns == seen }) else { return nil }
        let since = container.offlineSince.map { " since \(iso8601(nanoseconds: $0))" } ?? ""
        let error = RemoteError.unreachable("the remote is away (no answer\(since))")
        record(id, error: error.description)
        retryWhenBack(id, seen: seen)
        return .failure(.remote(error))
    }

    /// While the remote hangs, a HEAD of a blob no one has every `probeSeconds` (read-only, and answered 404 by
    /// a remote that is back), so the transfers that wait for it start as soon as it answers, not when a long
    /// poll of the change feed ends (up to its whole wait later: the feed has nothing new to say). One thread,
    /// started at the first hang, asleep between hangs; none without background transfers (the simulation).
    private func probeWhileHanging() {
        guard container.config.environment.backgroundTransfers else { return }
        let remote = container.remote, prober = prober
        prober.start { [weak self, weak container] in
            while !prober.isStopping {
                guard self?.book.withLock({ $0.remoteHangs }) == true else {
                    prober.pause(nanoseconds: Int64.max / 2)
                    continue
                }
                guard let answered = prober.away({ (try? remote.hasBlob(sha256: Downloads.probeHash)) != nil }) else {
                    return // stopped meanwhile: nothing of the owner is touched
                }
                if answered, let container, let self {
                    // (The downloads' own return too: the root's state may have been cleared meanwhile by an
                    // answer that refused the key, which leaves them hanging.)
                    withExtendedLifetime(container) {
                        container.remoteAnswered()
                        self.remoteIsBack()
                    }
                }
                prober.pause(nanoseconds: Downloads.probeSeconds * 1_000_000_000)
            }
        }
        prober.wake()
    }

    /// What the prober asks about: a valid hash that names no blob.
    static let probeHash = String(repeating: "0", count: 64)
    static let probeSeconds: Int64 = 2

    /// How long a download begun online goes on trying after the remote went away under it.
    static let outageGrace: Int64 = 5_000_000_000

    /// After a transient failure: sleeps as `backoff` says and answers nil (try again), or answers the failure
    /// once the deadline passed or the remote is known to be away (past `graceEnd`, for a download begun
    /// while it answered).
    private func retryAfter(_ error: RemoteError, _ id: String, seen: Int, deadline: Int64, graceEnd: Int64?,
                            backoff: inout Backoff) -> Result<Void, CoreError>? {
        let now = monotonicNanoseconds()
        record(id, error: error.description)
        // Offline (the change feed knows the remote is away): one try, no waiting out the deadline; the open
        // serves what is local. A download the remote cut by going away for a moment tries a while longer.
        if now >= deadline || (container.isOffline && now >= graceEnd ?? now) {
            // Unreachable until the deadline: the remote counts as away until it answers again.
            var hangs = false
            if case .unreachable = error, now >= deadline { hangs = true }
            retryWhenBack(id, seen: seen, hangs: hangs)
            if hangs {
                container.remoteUnreachable()
                probeWhileHanging()
            }
            return .failure(.remote(error))
        }
        log.warning("download of \(id) failed: \(error); retrying")
        backoff.sleep(in: container.config.environment, limit: deadline - now)
        return nil
    }

    /// True while a download that found no room may wait: changes wait to go up (each one uploaded leaves a
    /// copy that may be evicted; the remote answered this download) and the deadline has not passed.
    private func waitsForUploads(until deadline: Int64) -> Bool {
        monotonicNanoseconds() < deadline && ((try? container.pendingChanges) ?? 0) > 0
    }

    /// True for the failure of a download that met a full disk here.
    static func isDiskFull(_ error: CoreError) -> Bool {
        if case .remote(.localDiskFull) = error { return true }
        return error == .noSpace
    }

    /// What the status says of a failed download: the remote's error as it said it.
    static func cause(of error: CoreError) -> String {
        if case .remote(let e) = error { return e.description }
        return error.description
    }

    /// Records progress and the last error in the item's transfer state.
    func record(_ id: String, error: String?) {
        container.update { s in
            s.updateTransfer(id) {
                $0.isDownloading = false
                $0.downloadError = error
            }
        }
    }

    func progress(_ id: String, done: Int64, total: Int64) {
        container.update { s in
            s.updateTransfer(id) {
                $0.isDownloading = true
                $0.downloadedBytes = done
                $0.downloadTotal = total
            }
        }
    }

    /// Where a download of one version lands until it is verified.
    func stagingPath(_ key: String, _ sha: String) -> String {
        container.paths.staging + "/" + key + "-" + sha.prefix(16)
    }

    /// Downloads one version into staging, verifies it and installs it. Resumes a partial staging file.
    /// Returns false when the item changed here meanwhile and the download was dropped. Makes room under the
    /// local store limit first for its data (a sparse file's holes take none), and holds it until the content
    /// is installed; data that could never fit on the store's disk fails at once, and nothing is evicted for it.
    /// `data`: the bytes of data the version holds, once known (room made after a full disk is for those).
    func transfer(_ id: String, sha: String, size: Int64, data: inout Int64) throws(CoreError) -> Bool {
        let manifest: WireManifest?
        if size > container.config.chunkFormat.chunkedAbove {
            manifest = try onRemote { () throws(RemoteError) in try container.remote.manifest(sha256: sha) }
        } else {
            manifest = nil
        }
        if let manifest {
            try onRemote { () throws(RemoteError) in try Self.check(manifest, sha: sha, size: size) }
            data = manifest.chunks.reduce(0) { $0 + ($1.isHole ? 0 : $1.size) } // (bounded: checked)
        }
        if let capacity = container.paths.capacityBytes, data > capacity - max(container.config.minFreeBytes, 0) {
            throw .io("no space for it here: its \(readableSize(data)) of data could never fit on the store's "
                               + "disk, which holds \(readableSize(capacity)) in all (--min-free "
                               + "\(readableSize(container.config.minFreeBytes)) kept free)")
        }
        container.makeRoom(for: id, bytes: data)
        defer { container.roomUsed(data) }
        return try land(id, sha: sha, size: size, manifest: manifest)
    }

    /// Refuses a chunk list that does not describe the version asked for, or is malformed (its sizes then
    /// could overflow a sum).
    static func check(_ manifest: WireManifest, sha: String, size: Int64) throws(RemoteError) {
        guard manifest.sha256 == sha, manifest.size == size, manifest.problem == nil else {
            throw RemoteError.corrupt("the remote's chunk list does not describe the version asked for")
        }
    }

    private func land(_ id: String, sha: String, size: Int64, manifest: WireManifest?) throws(CoreError) -> Bool {
        let staging = stagingPath(id, sha)
        removeStaleStaging(id, keeping: staging)
        let fd = try onFiles { () throws(Errno) in try FileDescriptor.open(staging, O_RDWR | O_CREAT, mode: 0o600) }
        container.paths.staged.add() // after the file is there: a listing begun before it does not count it
        defer { fd.close() }
        var have = Int64(try onFiles { () throws(Errno) in try fd.stat().st_size })
        if have > size { try onFiles { () throws(Errno) in try fd.truncate(0) }; have = 0 }
        let landed = LandedBytes(fd)
        if let manifest {
            try landChunks(id, manifest, sha: sha, size: size, into: fd, staging: staging, landed: landed)
        } else if have < size {
            progress(id, done: have, total: size)
            _ = lseek(fd.raw, off_t(have), SEEK_SET)
            do throws(RemoteError) {
                try container.remote.downloadBlob(sha256: sha, offset: have, to: fd) { [self] done in
                    progress(id, done: done, total: size)
                    landed.follow(to: done)
                    return true
                }
            } catch {
                // Nothing arrived: no partial file to resume from.
                if (try? fd.stat().st_size) == 0 { removeLeftover(staging) }
                throw .remote(error)
            }
        }
        let gotSize = Int64(try onFiles { () throws(Errno) in try fd.stat().st_size })
        let gotSHA = try onFiles { () throws(Errno) in try landed.finish(at: gotSize) }
        guard gotSize == size, gotSHA == sha else {
            // In chunks, the next try keeps the chunks that hash right; one blob has nothing to keep.
            if manifest == nil { removeLeftover(staging) }
            throw .remote(.corrupt("downloaded \(gotSize) bytes hashing to \(gotSHA.prefix(12)), "
                                   + "expected \(size) bytes hashing to \(sha.prefix(12))"))
        }
        try onFiles { () throws(Errno) in try fd.sync() }
        return try install(id, sha: sha, staging: staging, chunks: manifest?.placed ?? [])
    }

    /// Removes partial downloads of other versions of the same key: a transfer cut off part way leaves its
    /// staging file for a resume, but once the item has a newer version that file is never used again.
    /// Without `path`: every partial download of the key and, for an item, of its conflict versions (the item
    /// or the version is gone).
    func removeStaleStaging(_ key: String, keeping path: String = "") {
        container.paths.removeStaleStaging(key, keeping: path)
    }

    /// Moves verified content into place, unless the item changed here meanwhile; `chunks` are where its
    /// chunks lie, recorded for later downloads to copy from.
    private func install(_ key: String, sha: String, staging: String, chunks: [Chunk]) throws(CoreError) -> Bool {
        if PastContent(parsing: key) != nil {
            try onFiles { () throws(Errno) in try renameFile(staging, container.paths.past(key)) }
            return true
        }
        if let parsed = ContentKey(parsing: key), let conflict = parsed.conflict {
            try onFiles { () throws(Errno) in try renameFile(staging, container.paths.conflict(parsed.item, conflict)) }
            container.syncContentDirectory()
            return true
        }
        return try container.installDownload(key, sha: sha, staging: staging, chunks: chunks)
    }
}

/// Hashes a staging file as its bytes land (reading them back while they are still in the page cache) and
/// starts writing them to disk early, so that neither a second pass over the file nor a long final fsync
/// follows the transfer. Blocks that are all zeros become holes, so a sparse file stays sparse on every device
/// (the wire carries the zeros; the disk here does not keep them).
final class LandedBytes {
    private let fd: FileDescriptor
    private var hasher = SHA256Hasher()
    private var hashed: Int64 = 0
    private var flushed: Int64 = 0
    private static let step: Int64 = 4 << 20
    private static let block = 4096

    init(_ fd: FileDescriptor) { self.fd = fd }

    /// Called as the file grows to `size` bytes: hashes and flushes in steps of a few MiB.
    func follow(to size: Int64) {
        guard size - hashed >= LandedBytes.step else { return }
        // Up to a block boundary only, so every zero block lies whole in one read and becomes a hole.
        // Early work only: a read that fails leaves `hashed` behind, and `finish` reads it again and throws.
        try? hash(to: size - size % Int64(LandedBytes.block))
        fd.startWriteback(from: flushed, length: size - flushed)
        flushed = size
    }

    /// Hashes the rest of the file; returns the SHA-256 of its first `size` bytes.
    func finish(at size: Int64) throws(Errno) -> String {
        try hash(to: size)
        return hasher.finalizeHex()
    }

    private func hash(to size: Int64) throws(Errno) {
        let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buf.deallocate() }
        while hashed < size {
            let want = Int(min(Int64(buf.count), size - hashed))
            let n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buf[0..<want]), at: hashed)
            if n == 0 { break }
            hasher.update(UnsafeRawBufferPointer(rebasing: buf[0..<n]))
            punchZeroBlocks(UnsafeRawBufferPointer(rebasing: buf[0..<n]), at: hashed)
            hashed += Int64(n)
        }
    }

    /// Turns the whole zero blocks of `bytes`, read at `offset`, into holes (blocks aligned in the file).
    private func punchZeroBlocks(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        let block = LandedBytes.block
        var i = (block - Int(offset % Int64(block))) % block
        var runStart: Int?
        while i + block <= bytes.count {
            let zero = LandedBytes.isZero(UnsafeRawBufferPointer(rebasing: bytes[i..<i + block]))
            if zero && runStart == nil { runStart = i }
            if !zero, let start = runStart { punch(offset + Int64(start), Int64(i - start)); runStart = nil }
            i += block
        }
        if let start = runStart { punch(offset + Int64(start), Int64(i - start)) }
    }

    /// True when a block (a multiple of 8 bytes long) holds only zeros.
    private static func isZero(_ block: UnsafeRawBufferPointer) -> Bool {
        var acc: UInt64 = 0
        for k in stride(from: 0, to: block.count, by: 8) { acc |= block.loadUnaligned(fromByteOffset: k, as: UInt64.self) }
        return acc == 0
    }

    private func punch(_ offset: Int64, _ length: Int64) {
        // Only an optimisation: a file system without holes keeps the zeros.
        try? fd.punchHole(at: offset, length: length)
    }
}
