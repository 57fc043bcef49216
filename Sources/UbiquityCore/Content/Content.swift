// The local content of a file, and every change of it: one state machine, changed under the container's lock.
//
//     absent ──(open of remote-empty content, O_TRUNC, a download's install)──▶ clean(sha)
//     clean(sha) ──(write, truncate, fallocate, O_TRUNC)──▶ dirty ──(upload acknowledged, Pusher)──▶ clean(sha)
//     clean(sha) ──(evict)──▶ absent          clean(old) ──(install of a newer version)──▶ clean(new)
//
// with the handle counts beside it (`handles`: open, writable). What must hold, and why it holds:
// - An open decides whether the content can be used, opens the descriptor on it and counts the handle in one
//   step under the lock (`open`). Eviction and install check the counts under the same lock, so neither can
//   fall between an open's decision and its descriptor (one did, and a writer wrote into an empty file that was
//   then uploaded over the real content on every device).
// - Eviction only leaves `clean`, never while the file is open for writing or pinned (`evictionRefusal`); an
//   install only replaces `absent` or `clean`, never `dirty` and never under a writer (`install`). A reader
//   keeps the bytes it opened: the content file is replaced by rename, never written in place.
// - Writes and truncations run inside the file's gate (Snapshots.swift), so a snapshot upload of a file held
//   open sees no half write; the lock order is gate, then the container's lock.
// - A file deleted while open keeps its content, moved aside, for its descriptors until the last close
//   (`releaseContent`, `unlinked`).
// - The store records a change before the content file changes (truncate, evict, install), in the operation's
//   one transaction, so a failed write of the store leaves the content as the store describes it.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// The state of a file's local content (derived from the item's stored fields).
public enum LocalContent: Equatable, Sendable {
    case absent
    /// A verified copy of the remote version with this hash.
    case clean(sha: String)
    /// Changed here and not yet acknowledged by the remote.
    case dirty
}

extension Item {
    public var localContent: LocalContent {
        if !hasLocal { return .absent }
        if dirty { return .dirty }
        return localSHA.map { .clean(sha: $0) } ?? .dirty
    }
}

extension Container {
    // MARK: opening

    /// What an open gets: the content file's descriptor, or the need to fetch the content first.
    public enum Opening {
        case opened(FileDescriptor)
        /// The newest content is not local: fetch it, then open again.
        case fetch
    }

    /// open(2) of a file. Whether the content can be used now, the descriptor on the content file, the handle's
    /// count and the item's new local state are all decided under the lock in one step, so no eviction, install
    /// or truncation can fall between the decision and the descriptor (one of them did, and an eviction between
    /// them had the open write into an empty file that was then uploaded).
    /// - `truncate`: O_TRUNC with write access, which needs no old content.
    /// - `staleOK`: an older local copy will do (the newest could not be had).
    /// - `noDownload`: a caller that may not download (an indexer): an older local copy, else `.wouldBlock`.
    public func open(_ id: String, writable: Bool, truncate: Bool, staleOK: Bool = false,
                     noDownload: Bool = false) throws(CoreError) -> Opening {
        if writable || truncate { try refuseChangeInAShare() }
        // An O_TRUNC of content gives room back (`> big.log` on a full disk), so it may use the reserve.
        let room = { (s: CoreState) -> FullDiskRoom in
            truncate && s.items[id].map { $0.hasLocal && s.cache.size(id) > 0 } == true ? .evictions : .freeSpace
        }
        return try mutate(roomFor: room) { (s: inout CoreState) throws(CoreError) -> Opening in
            try s.open(id, writable: writable, truncate: truncate, staleOK: staleOK, noDownload: noDownload)
        }
    }

    /// An item deleted while a program still holds it open, as `fstat` on that descriptor sees it (link count 0).
    public func unlinkedItem(_ id: String) -> Item? { read { $0.unlinked[id] } }

    /// `stat` of the local content of a file (of the copy moved aside, for an unlinked one), or nil if none.
    public func localStat(_ item: Item) -> stat? {
        guard item.kind == .file, item.hasLocal else { return nil }
        var st = stat()
        let path = item.deleted ? paths.unlinked(item.id) : paths.content(item.id)
        return stat(path, &st) == 0 ? st : nil
    }

    /// Records a write through a handle (called by `write` before each one): the content is now dirty, made
    /// durable before the write is acknowledged, so a crash never forgets that the file must be uploaded.
    /// `fd` is the handle's descriptor: while a copy that a delete moved aside is held open, a write through
    /// it reaches that copy, not the item of the same id that an edit elsewhere brought back, and marks nothing
    /// (nor does a write to an item without local content: no handle of it can be on its content).
    /// Here and in `write`, `openedForUnseenWrites`, `flushed`, `synced`, `release` and `closed`, `id` names the
    /// file the handle was opened on, which a save by rename may have made part of another since: each looks up
    /// the file that has the handle now (`CoreState.handleOwner`).
    func willWrite(_ id: String, through fd: FileDescriptor? = nil) throws(CoreError) {
        try mutate { (s: inout CoreState) throws(CoreError) in
            let id = s.handleOwner(id)
            s.store.keepsRowsBack = s.isNewFileNotClosed(id) // its first write's mark waits for its close
            try s.willWrite(id, through: fd)
        }
    }

    /// An open for writing whose writes this process will not see (FUSE passthrough): the item is marked dirty
    /// now as by a write (durably, before any write can land), and its quiet period starts now. Returns the
    /// content generation after the mark when the item was clean and on the remote before (for `Release`).
    public func openedForUnseenWrites(_ handle: String) throws(CoreError) -> Int? {
        let id = read { $0.handleOwner(handle) }
        let wasClean = read { s in s.items[id].map { !$0.dirty && $0.remoteVersion > 0 } ?? false }
        try write(id) { () }
        return wasClean ? read { s in s.contentGeneration[id] ?? 0 } : nil
    }

    /// Records that written content was flushed (close or fsync): size and time from the content file,
    /// persisted, and queued for upload. `wroteUnseen`: writes reached the content file through `fd` unseen
    /// (FUSE passthrough) since the last flush; they are recorded first as one write (dirty again: a push may
    /// have begun and ended unaware of them).
    public func flushed(_ id: String, wroteUnseen: Bool = false, through fd: FileDescriptor? = nil) throws(CoreError) {
        let refusal = try mutate { (s: inout CoreState) throws(CoreError) -> String? in
            let id = s.handleOwner(id)
            if wroteUnseen { try s.wroteUnseen(id, through: fd) }
            try s.flushed(id)
            try s.writeKeptBack(only: [id])
            // Kept here all the same: it goes up once the user has room on the remote (a local-only file never does).
            return s.items[id]?.isLocalOnly == false ? s.quotaRefusal : nil
        }
        if let refusal { throw .quotaExceeded(refusal + "; kept on this device until there is room") }
    }

    /// fsync: what the store knows of the item is made durable too (its content the caller syncs itself).
    public func synced(_ id: String, wroteUnseen: Bool = false, through fd: FileDescriptor? = nil) throws(CoreError) {
        try flushed(id, wroteUnseen: wroteUnseen, through: fd)
        do { try checkpointer.run() } catch { throw CoreError(error) }
        snapshotRequested(read { $0.handleOwner(id) })
    }

    /// What the release of a handle records besides the handle itself.
    public struct Release: Sendable {
        public var writable: Bool
        /// Written through: size and time are taken from the content file, as at a flush.
        public var wrote = false
        /// Written unseen (FUSE passthrough) since the last look, as for `flushed`.
        public var wroteUnseen = false
        /// The generation an open for unseen writes was marked at (`openedForUnseenWrites`), when the content
        /// file is as it was at that open: the mark is undone (`CoreState.wroteNothing`).
        public var unchangedSince: Int?

        public init(writable: Bool, wrote: Bool = false, wroteUnseen: Bool = false, unchangedSince: Int? = nil) {
            self.writable = writable
            self.wrote = wrote
            self.wroteUnseen = wroteUnseen
            self.unchangedSince = unchangedSince
        }
    }

    /// A handle released: what was written through it is recorded (`Release`) and the handle counted off, in
    /// one transaction. The handle is counted off even when the record fails (the error is thrown after).
    public func release(_ id: String, through fd: FileDescriptor, _ r: Release) throws(CoreError) {
        do {
            try mutate { (s: inout CoreState) throws(CoreError) in
                let id = s.handleOwner(id)
                if r.wroteUnseen { try s.wroteUnseen(id, through: fd) }
                if r.wrote { try s.flushed(id) }
                if let generation = r.unchangedSince { try s.wroteNothing(id, generation: generation) }
                if r.writable { try s.writeKeptBack(only: [id]) }
                s.closed(id, writable: r.writable)
            }
        } catch {
            mutate { (s: inout CoreState) in s.closed(id, writable: r.writable) }
            throw error
        }
    }

    /// Records a handle closed.
    func closed(_ id: String, writable: Bool) {
        mutate { (s: inout CoreState) in s.closed(id, writable: writable) }
    }

    /// The size a written file has now (from its content file while it is open for writing).
    public func currentSize(_ item: Item) -> Int64 { Container.currentSize(item, paths) }

    /// Fetches the newest content of a file, calling `done` once it is local (or failed, or gave up).
    public func fetch(_ id: String, done: @escaping @Sendable (Result<Void, CoreError>) -> Void) {
        downloads.wait(for: id, done: done)
    }

    /// Truncates a file to `size`. A non-empty size needs the content local; the caller fetches it first.
    /// The size the file has already changes nothing (and needs no content).
    func truncate(_ id: String, to size: Int64) throws(CoreError) -> Item {
        try gates.shared(id) { () throws(CoreError) -> Item in
            try mutate(room: .evictions) { (s: inout CoreState) throws(CoreError) -> Item in
                try s.truncate(id, to: size)
            }
        }
    }

    /// Drops the local content of a file, or of every file below a directory, keeping the entries.
    /// Refused (`.busy`) for content not yet uploaded, a file open for writing, or a pinned item; on a
    /// directory every file that can go goes, and the refusal names how many could not.
    public func evict(_ id: String) throws(CoreError) {
        // The files that can go go (committed), then the refusal names those that could not.
        let (refused, isFile) = try mutate(room: .evictions) {
            (s: inout CoreState) throws(CoreError) -> ([String], Bool) in
            guard s.items[id].map({ !$0.deleted }) ?? false else { throw .notFound }
            var refused: [String] = []
            for file in s.filesBelow(id) where file.hasLocal {
                if let why = s.evictionRefusal(file) { refused.append(why); continue }
                try s.dropContent(file)
            }
            return (refused, s.items[id]?.isDirectory == false)
        }
        if refused.count == 1 && isFile { throw .busy(refused[0]) }
        if !refused.isEmpty { throw .busy("\(refused.count) file(s) could not be evicted: \(refused[0])") }
    }

    /// Moves a verified download into place as the file's content (absent or clean → clean), unless the file
    /// changed here meanwhile or a program has it open for writing: then the download is dropped (false) and
    /// what is local is what the user has.
    /// The staging file is synced before (by the caller); the directory after, outside the lock.
    func installDownload(_ id: String, sha: String, staging: String, chunks: [Chunk] = []) throws(CoreError) -> Bool {
        if let appended = try appendInPlace(id, sha: sha, staging: staging, chunks: chunks) { return appended }
        let installed = try mutate(room: .evictions) { (s: inout CoreState) throws(CoreError) in
            try s.installDownload(id, sha: sha, staging: staging, chunks: chunks)
        }
        // Safe outside the lock: the decision and the rename are one step under it, so an open that comes after
        // the decision (an O_TRUNC, a writer) comes after the rename too, and the rename can never replace what
        // it did; every open sees the new content and its record together. The sync only makes the rename
        // durable (the staged bytes were synced before it). The record is not synced at its commit either (WAL,
        // synchronous=NORMAL), only at the store's next checkpoint, which this sync precedes unless the commit
        // itself started one (and on ext4 that checkpoint's fsync commits the journal holding the rename).
        if installed { syncContentDirectory() }
        return installed
    }

    /// A file held open whose new version only adds bytes at its end (a log appended on another device) takes
    /// them in place, so a reader at its end (`tail -F`) reads them through the descriptor it holds; a rename
    /// would leave it the content it opened. nil where that is not the case: then the rename.
    /// The old bytes are compared outside the lock; under it, the copy is still the one compared (same hash
    /// recorded, same size on disk) or nothing is done. The new bytes are written and synced before the record
    /// names the new version: a crash between the two leaves a record naming the old hash over the new
    /// version's (verified) bytes, an older copy by its record, which the next open replaces with a fresh
    /// download.
    /// (The record's size is the remote version's already: the local copy's is its file's.)
    private func appendInPlace(_ id: String, sha: String, staging: String, chunks: [Chunk]) throws(CoreError) -> Bool? {
        guard let copy = read({ s in s.heldCopy(id) }),
              let source = try? FileDescriptor.open(staging, O_RDONLY | O_CLOEXEC) else { return nil }
        defer { source.close() }
        guard let target = try? FileDescriptor.open(paths.content(id), O_RDWR | O_CLOEXEC) else { return nil }
        defer { target.close() }
        func size(_ fd: FileDescriptor) -> Int64? { (try? fd.stat()).map { Int64($0.st_size) } }
        guard let had = size(target), let grown = size(source), grown > had,
              (try? sameBytes(target, source, count: had)) == true else { return nil }
        return try mutate(room: .evictions) { (s: inout CoreState) throws(CoreError) -> Bool? in
            guard s.heldCopy(id) == copy, size(target) == had else { return nil }
            var end = had
            try onFiles { () throws(Errno) in
                try source.forEachChunk(from: had, count: grown - had) { (bytes) throws(Errno) in
                    try target.writeAll(bytes, at: end)
                    end += Int64(bytes.count)
                }
                try target.sync()
            }
            try onStore { () throws(StoreError) in try s.recordAppendedDownload(id, sha: sha, chunks: chunks) }
            removeLeftover(staging)
            return true
        }
    }

    /// Records where the chunks of the content of `id` lie (uploaded from it), for downloads to copy from.
    func recordChunkPlaces(_ id: String, _ chunks: [Chunk]) {
        mutate { (s: inout CoreState) in s.recordChunkPlaces(id, chunks) }
    }

    /// Makes the renames into the content folder durable. A failure is logged, not thrown: the content is in
    /// place and served; only a power cut before the next sync of the folder could lose the rename.
    func syncContentDirectory() {
        do { try syncDirectory(paths.content) } catch {
            log.warning("cannot sync the content folder \(paths.content) (a power cut could undo a rename): \(error)")
        }
    }
}

extension CoreState {
    mutating func open(_ id: String, writable: Bool, truncate: Bool, staleOK: Bool,
                       noDownload: Bool) throws(CoreError) -> Container.Opening {
        guard var item = items[id], !item.deleted else { throw .notFound }
        if item.isDirectory { throw .isDirectory }
        if !item.hasContent { throw .invalidArgument("only a file has content to open") }
        let truncating = writable && truncate
        let emptyRemote = item.remoteSHA == emptySHA256 && item.remoteSize == 0
        let staleUsable = item.hasLocal && (staleOK || noDownload || (handles[id]?.writers ?? 0) > 0)
        guard truncating || item.isCurrent || (!item.hasLocal && emptyRemote) || staleUsable else {
            if noDownload { throw .wouldBlock }
            return .fetch
        }
        // An older copy opens to read while the newest cannot be had (offline). Written, its change would go up
        // as the successor of a version it never saw, and the other device's edit would be lost: no writer opens
        // it (unless one holds it already: then it is that program's file).
        if writable && !truncating && !item.isCurrent && item.hasLocal && (handles[id]?.writers ?? 0) == 0 {
            throw .io("the newest version of \(item.name) cannot be downloaded now: the older copy here opens to read only")
        }
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(paths.content(id), (writable ? O_RDWR : O_RDONLY) | (item.hasLocal ? 0 : O_CREAT),
                                         mode: 0o600)
        } catch { throw CoreError(error) }
        do throws(CoreError) {
            if !item.hasLocal || truncating {
                let wasLocal = item.hasLocal
                item.hasLocal = true
                if truncating && (item.size != 0 || !wasLocal || !item.isCurrent) {
                    markContentChanged(&item, size: 0)
                    try saveLocalChange(item)
                } else if !wasLocal {
                    item.localSHA = emptySHA256
                    do { try store.save(item) } catch { throw CoreError(error) }
                    items[id] = item
                }
                // Last: the content changes only once the store has taken the change.
                if truncating {
                    do { try fd.truncate(0) } catch { throw CoreError(error) }
                }
            }
        } catch {
            fd.close()
            throw error
        }
        var h = handles[id] ?? (0, 0)
        h.open += 1
        if writable { h.writers += 1 }
        handles[id] = h
        cache.awaitingOpen[id] = nil
        touch(id)
        recountContent(id) // created or truncated here, or grown by a writer not closed yet
        return .opened(fd)
    }

    /// True when `fd` is on the item's content file (not on a copy that a delete moved aside).
    func isContentFile(_ fd: FileDescriptor, of id: String) -> Bool {
        var st = stat()
        guard stat(paths.content(id), &st) == 0, let held = try? fd.stat() else { return false }
        return held.st_ino == st.st_ino && held.st_dev == st.st_dev
    }

    /// A write through `fd` is coming (see `Container.willWrite`).
    mutating func willWrite(_ id: String, through fd: FileDescriptor?) throws(CoreError) {
        guard var item = items[id], !item.deleted, item.hasLocal else { return }
        if unlinked[id] != nil, let fd, !isContentFile(fd, of: id) { return }
        contentGeneration[id, default: 0] += 1
        try markWritten(&item)
    }

    /// Writes through `fd` that reached the content file unseen, recorded as one write that just ended.
    mutating func wroteUnseen(_ id: String, through fd: FileDescriptor?) throws(CoreError) {
        try willWrite(id, through: fd)
        contentGeneration[id, default: 0] += 1
        lastWrite[id] = now()
    }

    /// A handle opened with `openedForUnseenWrites` closes without having changed the content file: when
    /// nothing changed the content since its mark (the generation is still `generation`), the item is clean again.
    mutating func wroteNothing(_ id: String, generation: Int) throws(CoreError) {
        guard var item = items[id], !item.deleted, item.dirty, item.hasLocal,
              (contentGeneration[id] ?? 0) == generation else { return }
        item.dirty = false
        item.localSHA = item.remoteSHA
        do { try store.save(item) } catch { throw CoreError(error) }
        items[id] = item
    }

    /// See `Container.flushed`.
    mutating func flushed(_ id: String) throws(CoreError) {
        guard var item = items[id], !item.deleted, item.dirty else { return }
        var st = stat()
        guard stat(paths.content(id), &st) == 0 else { throw .io("content file missing") }
        recountContent(id)
        let mtime = nanoseconds(st.st_mtim)
        if item.size == Int64(st.st_size) && item.mtime == mtime { return } // already recorded
        item.size = Int64(st.st_size)
        item.mtime = mtime
        // Never back: the content file's time comes from the kernel's coarse clock, and a change recorded just
        // before (a truncate, a rename) may hold a later time of the fine one.
        item.ctime = max(item.ctime, mtime)
        try saveLocalChange(item)
    }

    /// The item's content changes here: dirty (durably) until it is uploaded.
    mutating func markWritten(_ item: inout Item) throws(CoreError) {
        if item.dirty { return }
        item.dirty = true
        item.localSHA = nil
        try saveLocalChange(item)
    }

    mutating func closed(_ handle: String, writable: Bool) {
        let id = handleOwner(handle)
        guard var h = handles[id] else { return }
        h.open -= 1
        if writable { h.writers -= 1 }
        handles[id] = h.open > 0 ? h : nil
        if h.open == 0 && !handedOver.isEmpty { handedOver = handedOver.filter { $0.value != id } }
        touch(id)
        if h.open == 0 && unlinked.removeValue(forKey: id) != nil {
            removeLeftover(paths.unlinked(id))
            recount(id + ".unlinked")
        }
        // A written file is re-measured; a file over the limit goes now that nothing holds it.
        if writable && h.writers == 0 { recountContent(id) }
        if h.open == 0 && cache.used > config.cacheLimit { wakeEvictor() }
        if writable && h.writers == 0 {
            lastWrite[id] = nil
            fsyncedSinceSnapshot.remove(id)
            wakePusher()
        }
    }

    /// Lets the content of an item that is going away go, or, while programs hold it open, moves it aside and
    /// keeps the item as it was for their descriptors until the last close. The content file is only touched
    /// once the operation has committed.
    mutating func releaseContent(of item: Item) {
        guard item.kind == .file else { return }
        let id = item.id
        if handles[id] == nil {
            if store.keepsDelete(id) { return store.releaseContentWhenWritten(id) } // a crash brings it back whole
            onCommit { s in
                s.paths.spares.give(s.paths.content(id)) // emptied for a new file (SpareFiles)
                s.recountContent(id)
            }
            return
        }
        guard item.hasLocal || unlinked[id] == nil else { return }
        var gone = item
        gone.deleted = true
        gone.hasLocal = true
        gone.dirty = true // its bytes are this device's alone now, and the size shown is the content file's
        unlinked[id] = gone
        let moveAside = item.hasLocal
        onCommit { s in
            // A failed move leaves the content where it was, for the descriptors open on it: it is removed at
            // the next start (`removeOrphanContent`), and until then a stat of the open file fails.
            if moveAside {
                do { try renameFile(s.paths.content(id), s.paths.unlinked(id)) } catch {
                    s.log.error("cannot move aside the content of \(id), deleted while open: \(error)")
                }
            }
            s.recountContent(id)
        }
    }

    mutating func truncate(_ id: String, to size: Int64) throws(CoreError) -> Item {
        if let gone = unlinked[id], items[id]?.deleted ?? true { return try truncateUnlinked(gone, to: size) }
        guard var item = items[id], !item.deleted else { throw .notFound }
        if item.isDirectory { throw .isDirectory }
        if !item.hasContent { throw .invalidArgument("only a file has content to truncate") }
        if size == Container.currentSize(item, paths) { return item }
        // A non-empty size keeps bytes of the content: of its newest version, not of an older copy left here
        // (that would upload the older bytes over the newer), unless a program holds that copy open for writing
        // (it is the file that program writes, as for an open).
        let heldForWriting = (handles[id]?.writers ?? 0) > 0
        if size != 0 && !(item.isCurrent || (item.hasLocal && heldForWriting)) { throw .wouldBlock }
        item.hasLocal = true
        markContentChanged(&item, size: size)
        try saveLocalChange(item)
        // Last: the content changes only once the store has taken the change.
        do {
            let fd = try FileDescriptor.open(paths.content(id), O_WRONLY | O_CREAT, mode: 0o600)
            defer { fd.close() }
            try fd.truncate(size)
        } catch { throw CoreError(error) }
        recountContent(id)
        return item
    }

    /// ftruncate(2) on a descriptor of an unlinked file: its content changes, nothing is recorded or uploaded.
    private mutating func truncateUnlinked(_ item: Item, to size: Int64) throws(CoreError) -> Item {
        do {
            let fd = try FileDescriptor.open(paths.unlinked(item.id), O_WRONLY | O_CREAT, mode: 0o600)
            defer { fd.close() }
            try fd.truncate(size)
        } catch { throw CoreError(error) }
        var item = item
        item.size = size
        item.ctime = now()
        unlinked[item.id] = item
        return item
    }

    /// Marks the local content as changed.
    mutating func markContentChanged(_ item: inout Item, size: Int64) {
        item.dirty = true
        item.localSHA = nil
        item.size = size
        let now = self.now()
        item.mtime = now
        item.ctime = now
        contentGeneration[item.id, default: 0] += 1
    }

    /// clean → absent: records the content gone, and removes the content file once that is committed, for a
    /// file `evictionRefusal` lets go.
    mutating func dropContent(_ file: Item) throws(CoreError) {
        var item = file
        item.hasLocal = false
        item.localSHA = nil
        do { try store.save(item) } catch { throw CoreError(error) }
        items[item.id] = item
        notice(.changed(item.id, content: true))
        let id = item.id
        onCommit { s in
            removeLeftover(s.paths.content(id))
            s.recountContent(id)
        }
    }

    /// Why a file's local content must stay, or nil (the evictor asks it too).
    func evictionRefusal(_ item: Item) -> String? {
        if item.isLocalOnly { return "\(item.name) is local-only (excluded from sync): this copy is its only one" }
        guard case .clean = item.localContent, item.remoteVersion != 0 else {
            return "\(item.name) has changes not yet uploaded"
        }
        if (handles[item.id]?.writers ?? 0) > 0 { return "\(item.name) is open for writing" }
        if isPinned(item.id) { return "\(item.name) is pinned" }
        return nil
    }

    /// Records where the chunks of the content of `id` lie: a hint only, so a failure is logged, not thrown.
    func recordChunkPlaces(_ id: String, _ chunks: [Chunk]) {
        guard !chunks.isEmpty else { return }
        do { try store.placeChunks(of: id, chunks) } catch {
            Logger("content").warning("cannot record the chunks of \(id): \(error)")
        }
    }

    /// The file whose handle count holds a handle opened on `id`: `id`, or the file it was saved over by rename.
    func handleOwner(_ id: String) -> String { handedOver[id] ?? id }

    /// The hash of a file's verified local copy, when a program holds it open and none writes it.
    func heldCopy(_ id: String) -> String? {
        guard let item = items[id], !item.deleted, case .clean(let sha) = item.localContent,
              let held = handles[id], held.open > 0, held.writers == 0 else { return nil }
        return sha
    }

    /// The record of a download appended to the local copy in place (see `Container.appendInPlace`).
    mutating func recordAppendedDownload(_ id: String, sha: String, chunks: [Chunk]) throws(StoreError) {
        guard var item = items[id] else { return }
        item.localSHA = sha
        try store.save(item)
        items[id] = item
        recordChunkPlaces(id, chunks)
        recountContent(id)
        // From elsewhere: watchers of the file are told now that its new bytes are here to read.
        notice(.changed(id, content: true, elsewhere: true))
    }

    mutating func installDownload(_ id: String, sha: String, staging: String, chunks: [Chunk]) throws(CoreError) -> Bool {
        guard var item = items[id], !item.deleted, item.localContent != .dirty,
              (handles[id]?.writers ?? 0) == 0 else {
            removeLeftover(staging)
            return false
        }
        item.hasLocal = true
        item.localSHA = sha
        try onStore { () throws(StoreError) in try store.save(item) }
        items[id] = item
        // Last: a failed rename rolls the save back. The directory is synced after the lock (Container's
        // installDownload).
        try onFiles { () throws(Errno) in try renameFile(staging, paths.content(id)) }
        recordChunkPlaces(id, chunks)
        recountContent(id)
        cache.awaitingOpen[id] = now()
        notice(.changed(id, content: true))
        return true
    }
}

extension Container {
    /// The size a written file has now (from its content file while it is open for writing).
    static func currentSize(_ item: Item, _ paths: StorePaths) -> Int64 {
        guard item.dirty, item.hasLocal else { return item.size }
        var st = stat()
        return stat(paths.content(item.id), &st) == 0 ? Int64(st.st_size) : item.size
    }
}

/// True when the first `count` bytes of `a` and `b` are the same.
func sameBytes(_ a: FileDescriptor, _ b: FileDescriptor, count: Int64) throws -> Bool {
    var offset: Int64 = 0
    var same = true
    let other = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { other.deallocate() }
    try a.forEachChunk(from: 0, count: count) { (bytes) throws(Errno) in
        guard same else { return }
        let n = try b.read(into: UnsafeMutableRawBufferPointer(rebasing: other[0..<bytes.count]), at: offset)
        same = n == bytes.count && memcmp(bytes.baseAddress!, other.baseAddress!, n) == 0
        offset += Int64(n)
    }
    return same && offset == count
}
