// An in-process remote with the stub's semantics (docs/WIRE.md), for tests and the simulation (test support:
// never linked into `ubiquityfs`): one container whose items, blobs and manifests live in memory. What must hold: it
// answers every call as the stub does (Tests/UbiquityRemoteConformanceTests runs the same suite against both;
// where they differ, the stub is right). Every call takes one condition lock, so it is thread-safe; the change
// feed waits on that condition for long polling. A put or delete with a change id is first checked against the
// last change applied for its item and device (`appliedChange`), as on the stub. A manifest is stored only once
// every chunk it names is held at its size, and no blob a manifest names is ever removed here (`collect` takes
// only blobs nothing names), so a manifest's content can always be put together (`assembled`).
//
// Test hooks: `offline` (every call fails as unreachable), `corruptDownloads` (flips a byte of every blob
// served), `downloadDelayMilliseconds`, `holdChunkUploads` (chunk uploads wait until it is cleared), `changeLimit`,
// `seed(path:...)`, `collect` (one blob collected as a pass past its grace would), and the counters
// `blobDownloads`, `uploadedBytes` and `downloadedBytes`.
// History (docs/HISTORY.md): every `store` appends the version to its item's history, at `clock`'s time; Recently
// Deleted, restore and empty follow the stub (StubHistory.swift), a rewind is planned by the stub's own planner
// (`RewindPlanner`) over this remote's state under its lock, and `collectPass` is a collector's pass past the
// grace, the history's `retention` first.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `cond` is a leaf.
import Foundation
import UbiquityBase
import UbiquityCore

public final class MemoryRemote: RemoteClient, @unchecked Sendable {
    // @unchecked: every field below is read and written only inside `locked` (under `cond`).
    /// Guards every field below and signals changes of the feed to long polls. An NSCondition, not a Locked:
    /// a test double whose every call reads and writes several fields, and whose long polls wait on the feed.
    private let cond = NSCondition()
    private var items: [String: WireItem] = [:]
    private var blobs: [String: [UInt8]] = [:]
    /// Versions kept in chunks, by their whole content's SHA-256.
    private var manifests: [String: WireManifest] = [:]
    /// The container's sequence number: the version of the newest change.
    private var sequence: Int64 = 0
    private var seedCount = 0

    private var _offline = false
    private var _corruptDownloads = false
    private var _downloadDelay = 0
    private var _holdChunkUploads = false
    private var _heldChunkUploads = 0
    private var _changeLimit = 1000
    private var _blobDownloads: [String: Int] = [:]
    private var _uploadedBytes: Int64 = 0
    private var _downloadedBytes: Int64 = 0
    /// The key-value store: each key's winning write, and the feed position of the newest.
    private var kv: [String: WireKVEntry] = [:]
    private var kvSeq: Int64 = 0
    /// The last change applied per item and device ("item/device"): its id, digest and the version it made.
    private var appliedChanges: [String: (change: String, digest: String, version: Int64)] = [:]
    /// Each item's kept versions, oldest first, by id.
    private var historyRows: [String: [WireVersion]] = [:]
    /// The shares `shares()` answers, as a test sets them (`setShares`): the records only.
    private var shareRecords: [WireShare] = []
    private var _clock: @Sendable () -> Int64 = nowNanoseconds
    private var _retention = HistoryRetention.standard

    public init() {
        _ = store(WireItem(id: WireRules.rootID, parent: nil, name: "", kind: .dir, mode: 0o755, mtime: 0,
                           size: 0, sha256: ""))
        _ = store(WireItem(id: WireRules.documentsID, parent: WireRules.rootID, name: WireRules.documentsName, kind: .dir,
                           mode: 0o755, mtime: 0, size: 0, sha256: ""))
    }

    private func locked<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        cond.lock(); defer { cond.unlock() }
        return try body()
    }

    // MARK: test hooks

    /// While set, every call throws `.unreachable` (a long poll in progress ends with it too).
    public var offline: Bool {
        get { locked { _offline } }
        set { locked { _offline = newValue; cond.broadcast() } }
    }

    /// While set, every blob download serves its bytes with one byte flipped.
    public var corruptDownloads: Bool {
        get { locked { _corruptDownloads } }
        set { locked { _corruptDownloads = newValue } }
    }

    /// How long each blob download waits before sending its bytes.
    public var downloadDelayMilliseconds: Int {
        get { locked { _downloadDelay } }
        set { locked { _downloadDelay = newValue } }
    }

    /// While set, every chunk upload waits before storing its bytes (`heldChunkUploads` counts those waiting).
    public var holdChunkUploads: Bool {
        get { locked { _holdChunkUploads } }
        set { locked { _holdChunkUploads = newValue; cond.broadcast() } }
    }

    /// Uploads waiting on `holdChunkUploads`.
    public var heldChunkUploads: Int { locked { _heldChunkUploads } }

    /// Most items in one answer of the change feed.
    public var changeLimit: Int {
        get { locked { _changeLimit } }
        set { locked { _changeLimit = max(1, newValue) } }
    }

    /// Blob downloads started, by SHA-256.
    public var blobDownloads: [String: Int] { locked { _blobDownloads } }

    /// Bytes that blob and chunk uploads and inline batch contents brought, whether the blob was new or not.
    public var uploadedBytes: Int64 { locked { _uploadedBytes } }

    /// Bytes that blob downloads wrote.
    public var downloadedBytes: Int64 { locked { _downloadedBytes } }

    /// The current container sequence number.
    public var currentVersion: Int64 { locked { sequence } }

    /// Every item the remote holds, tombstones included.
    public var allItems: [WireItem] { locked { items.values.sorted { $0.version < $1.version } } }

    /// The bytes of a blob, if the remote holds it.
    public func blob(_ sha256: String) -> [UInt8]? { locked { blobs[sha256] } }

    /// Removes the blob as a collection pass would once its grace is over: only one that no manifest and no
    /// item (current content or conflict version, tombstones included) and no kept history row names, such as a
    /// chunk uploaded for a manifest not committed yet. True when it was removed.
    @discardableResult
    public func collect(_ sha256: String) -> Bool {
        locked {
            guard blobs[sha256] != nil,
                  !manifests.values.contains(where: { $0.chunks.contains { $0.sha256 == sha256 } }),
                  !items.values.contains(where: { $0.sha256 == sha256 || $0.conflicts.contains { $0.sha256 == sha256 } }),
                  !historyNames(sha256)
            else { return false }
            blobs[sha256] = nil
            return true
        }
    }

    /// The live item at a path of names from the root (`Documents/a/b.txt`), if any.
    public func lookup(path: String) -> WireItem? {
        locked {
            var cur = WireRules.rootID
            for name in path.split(separator: "/").map(String.init) {
                guard let next = liveChild(of: cur, named: name) else { return nil }
                cur = next.id
            }
            return items[cur]
        }
    }

    /// Puts an item at `path` as another device would: creates missing directories along the path, then a
    /// file with `bytes` (or a directory when `bytes` is nil), or updates the live item already there.
    @discardableResult
    public func seed(path: String, bytes: [UInt8]?, device: String, mtime: Int64) -> WireItem {
        locked {
            let names = path.split(separator: "/").map(String.init)
            precondition(!names.isEmpty, "seed needs a path")
            var parent = WireRules.rootID
            for (i, name) in names.enumerated() {
                let last = i == names.count - 1
                let existing = liveChild(of: parent, named: name)
                if !last, let existing {
                    precondition(existing.kind == .dir, "seed: \(name) is not a directory")
                    parent = existing.id
                    continue
                }
                var item = existing ?? WireItem(id: nextSeedID(), parent: parent, name: name, kind: .dir,
                                                mode: 0o755, mtime: mtime, size: 0, sha256: "")
                item.device = device
                item.mtime = mtime
                if last, let bytes {
                    precondition(existing == nil || existing!.kind == .file, "seed: \(name) is a directory")
                    let sha = sha256Hex(bytes)
                    blobs[sha] = bytes
                    item.kind = .file
                    item.mode = existing?.mode ?? 0o644
                    item.sha256 = sha
                    item.size = Int64(bytes.count)
                }
                let stored = store(item)
                if last { return stored }
                parent = stored.id
            }
            fatalError("unreachable")
        }
    }

    private func nextSeedID() -> String {
        seedCount += 1
        return "seed\(seedCount)"
    }

    // MARK: internals (lock held)

    /// Records a new state of an item at the next sequence number and wakes long polls.
    private func store(_ item: WireItem, batch: WireDataBatch? = nil) -> WireItem {
        var item = item
        sequence += 1
        item.version = sequence
        items[item.id] = item
        historyRows[item.id, default: []].append(WireVersion(item, at: _clock(), path: pathLocked(item), batch: batch))
        cond.broadcast()
        return item
    }

    private func liveChild(of parent: String, named name: String) -> WireItem? {
        items.values.first { !$0.deleted && $0.parent == parent && sameName($0.name, name) }
    }

    private func liveChildren(of parent: String) -> [WireItem] {
        items.values.filter { !$0.deleted && $0.parent == parent }
    }

    private func checkOnline() throws(RemoteError) {
        if _offline { throw RemoteError.unreachable("the memory remote is offline") }
    }

    private static func bad(_ message: String) -> RemoteError { .rejected(status: 400, message: message) }

    // MARK: RemoteClient

    public func openContainer() throws(RemoteError) -> WireContainer {
        try locked { () throws(RemoteError) in
            try checkOnline()
            return WireContainer(container: "memory.remote", root: WireRules.rootID, token: String(sequence))
        }
    }

    public func changes(since token: String?, waitSeconds: Int) throws(RemoteError) -> WireChanges {
        let since: Int64
        if let token, !token.isEmpty {
            guard let n = Int64(token), n >= 0 else { throw Self.bad("bad token \(token)") }
            since = n
        } else {
            since = 0
        }
        return try locked { () throws(RemoteError) in
            try checkOnline()
            if sequence <= since && waitSeconds > 0 {
                let deadline = Date(timeIntervalSinceNow: Double(min(waitSeconds, 60)))
                while sequence <= since && !_offline && cond.wait(until: deadline) {}
                try checkOnline()
            }
            let newer = items.values.filter { $0.version > since }.sorted { $0.version < $1.version }
            let page = Array(newer.prefix(_changeLimit))
            let more = newer.count > page.count
            let token = more ? page.last!.version : max(since, sequence)
            return WireChanges(items: page, token: String(token), more: more)
        }
    }

    public func item(_ id: String) throws(RemoteError) -> WireItem {
        try locked { () throws(RemoteError) in
            try checkOnline()
            guard WireRules.isValidID(id) else { throw Self.bad("bad item id") }
            guard let item = items[id] else { throw RemoteError.notFound("item \(id)") }
            return item
        }
    }

    public func putItem(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws(RemoteError) -> WireItem {
        try locked { () throws(RemoteError) in
            try checkOnline()
            return try putChangeLocked(item, ifMatch: ifMatch, change: change)
        }
    }

    /// A put, unless it retries the change last applied for its item and device (`.alreadyApplied`).
    private func putChangeLocked(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws(RemoteError) -> WireItem {
        let digest = WireApplied.digest(condition: ifMatch.map { "If-Match: \($0)" } ?? "If-None-Match: *", item: item)
        try throwIfApplied(item.id, change, digest: digest)
        let stored = try putLocked(item, ifMatch: ifMatch, change: change)
        recordChange(item.id, change, digest: digest, version: stored.version)
        return stored
    }

    /// The put's checks and write (lock held).
    private func putLocked(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws(RemoteError) -> WireItem {
        let new = try validated(item)
        let existing = items[item.id]
        if let ifMatch {
            guard let existing else { throw RemoteError.notFound("item \(item.id)") }
            guard existing.version == ifMatch else { throw moved(existing, change) }
            guard existing.kind == item.kind else { throw Self.bad("an item cannot change kind") }
        } else if let existing {
            throw moved(existing, change)
        }
        // The parent: a live directory, not the item itself nor below it (the root has none).
        guard let parentID = item.parent else { return store(new) }
        guard let parent = items[parentID], !parent.deleted, parent.kind == .dir
        else { throw RemoteError.misplaced("the parent is not a live directory") }
        var cur: String? = parentID
        while let c = cur {
            if c == item.id { throw RemoteError.misplaced("an item cannot move below itself") }
            cur = items[c]?.parent
        }
        if let other = liveChild(of: parentID, named: item.name), other.id != item.id {
            throw RemoteError.conflict("the name \(item.name) is taken", current: other)
        }
        return store(new)
    }

    /// Throws `.alreadyApplied` when `change` is the last change applied for its item and device; the same id
    /// with another digest is refused (400), as on the stub.
    private func throwIfApplied(_ id: String, _ change: WireChangeID?, digest: String) throws(RemoteError) {
        guard let change else { return }
        guard WireRules.isValidID(change.id) else { throw Self.bad("bad change id") }
        guard let last = appliedChanges[id + "/" + change.device], last.change == change.id,
              let current = items[id] else { return }
        guard last.digest == digest else { throw Self.bad("change id \(change.id) reused for another change") }
        throw RemoteError.alreadyApplied(version: last.version, current: current)
    }

    /// The 412 of a write whose condition no longer holds, with the asking device's last applied change.
    private func moved(_ current: WireItem, _ change: WireChangeID?) -> RemoteError {
        let last = change.flatMap { appliedChanges[current.id + "/" + $0.device] }
        let yours = last.map { WireLastChange(change: $0.change, version: $0.version) }
        return .preconditionFailed(current: current, yours: yours)
    }

    private func recordChange(_ id: String, _ change: WireChangeID?, digest: String, version: Int64) {
        guard let change else { return }
        appliedChanges[id + "/" + change.device] = (change.id, digest, version)
    }

    /// The item as it would be stored, or the stub's 400 for a malformed one: checked before its condition.
    private func validated(_ item: WireItem) throws(RemoteError) -> WireItem {
        guard WireRules.isValidID(item.id) else { throw Self.bad("bad item id") }
        if item.id == WireRules.rootID {
            guard item.parent == nil, item.name == "", item.kind == .dir else {
                throw Self.bad("the root has no parent and no name")
            }
        } else {
            guard let parent = item.parent, WireRules.isValidID(parent) else { throw Self.bad("bad parent id") }
            guard WireRules.isValidName(item.name) else { throw Self.bad("bad name") }
            if let why = WireRules.reservedNameProblem(item.name, parent: item.parent ?? "") { throw Self.bad(why) }
        }
        var new = item
        new.deleted = false
        new.mode &= WireRules.sharedModeBits
        guard item.device.utf8.count <= 255 else { throw Self.bad("device name too long") }
        if let problem = WireRules.kindProblem(item) { throw Self.bad(problem) }
        if item.kind == .file {
            try checkContent(item.sha256, size: item.size, what: "content")
        } else if item.kind == .dir {
            new.size = 0
            new.sha256 = ""
        }
        var xattrBytes = 0
        for (key, value) in item.xattrs {
            guard !key.isEmpty, let decoded = Data(base64Encoded: value) else { throw Self.bad("bad xattr \(key)") }
            xattrBytes += WireRules.xattrBytes(name: key, valueBytes: decoded.count)
        }
        guard xattrBytes <= WireRules.maxXattrBytes else { throw Self.bad("xattrs larger than 64 KiB") }
        var conflictIDs = Set<String>()
        for c in item.conflicts {
            guard WireRules.isValidID(c.id), conflictIDs.insert(c.id).inserted else {
                throw Self.bad("bad or repeated conflict id")
            }
            try checkContent(c.sha256, size: c.size, what: "conflict \(c.id)")
        }
        return new
    }

    /// A hash must name a blob or a manifest held here of the same size (the empty hash needs no blob).
    private func checkContent(_ sha256: String, size: Int64, what: String) throws(RemoteError) {
        guard isSHA256Hex(sha256), size >= 0 else { throw Self.bad("bad hash or size of \(what)") }
        let held = sha256 == emptySHA256 ? 0 : blobs[sha256].map { Int64($0.count) } ?? manifests[sha256]?.size
        guard let held else { throw Self.bad("blob missing for \(what)") }
        guard held == size else { throw Self.bad("size of \(what) does not match its blob") }
    }

    public func deleteItem(_ id: String, ifMatch: Int64, change: WireChangeID?) throws(RemoteError) -> WireItem {
        try locked { () throws(RemoteError) in
            try checkOnline()
            return try deleteLocked(id, ifMatch: ifMatch, change: change)
        }
    }

    /// A delete, unless it retries the change last applied for its item and device (`.alreadyApplied`).
    private func deleteLocked(_ id: String, ifMatch: Int64, change: WireChangeID?) throws(RemoteError) -> WireItem {
        guard WireRules.isValidID(id) else { throw Self.bad("bad item id") }
        let digest = WireApplied.digest(condition: "delete \(ifMatch)", item: nil)
        try throwIfApplied(id, change, digest: digest)
        guard id != WireRules.rootID else { throw Self.bad("the root cannot be deleted") }
        guard let existing = items[id] else { throw RemoteError.notFound("item \(id)") }
        guard !existing.deleted, existing.version == ifMatch else {
            throw moved(existing, change)
        }
        if existing.kind == .dir,
           let child = liveChildren(of: id).min(by: { $0.id < $1.id }) {
            // The item in the way is a child, as on the stub.
            throw RemoteError.conflict("the directory is not empty", current: child)
        }
        var tombstone = existing
        tombstone.deleted = true
        if let change { tombstone.device = change.device }
        let stored = store(tombstone)
        recordChange(id, change, digest: digest, version: stored.version)
        return stored
    }

    /// The batch as the stub applies it: the whole request checked first (its size and each inline
    /// content's), then each entry in order by the same code as its single call, answered on its own.
    public func batch(_ entries: [WireBatchEntry]) throws(RemoteError) -> [BatchResult] {
        try locked { () throws(RemoteError) in
            try checkOnline()
            if let problem = Self.batchProblem(entries) { throw RemoteError.rejected(status: 413, message: problem) }
            return entries.map { entry in
                do throws(RemoteError) { return .success(try applyLocked(entry)) } catch { return .failure(error) }
            }
        }
    }

    /// Why the batch as a whole is too large, or nil.
    private static func batchProblem(_ entries: [WireBatchEntry]) -> String? {
        if entries.count > WireBatchLimits.maxEntries { return "more than \(WireBatchLimits.maxEntries) entries" }
        let inline = entries.map { $0.content?.count ?? 0 }
        if inline.contains(where: { $0 > WireBatchLimits.maxInlineBytes }) { return "inline content over 64 KiB" }
        if inline.reduce(0, +) > WireBatchLimits.maxInlineTotal { return "inline content over 4 MiB in all" }
        return nil
    }

    private func applyLocked(_ entry: WireBatchEntry) throws(RemoteError) -> WireItem {
        switch entry.op {
        case .delete:
            guard let version = entry.ifMatch else { throw Self.bad("If-Match version needed") }
            return try deleteLocked(entry.id, ifMatch: version, change: entry.changeID)
        case .put:
            guard let item = entry.item, item.id == entry.id else {
                throw Self.bad("the id in the body differs from the entry's")
            }
            if let content = entry.content {
                let bytes = [UInt8](content)
                guard item.kind == .file, Int64(bytes.count) == item.size, sha256Hex(bytes) == item.sha256 else {
                    throw Self.bad("the inline content does not match the item's hash and size")
                }
                if !bytes.isEmpty { blobs[item.sha256] = bytes }
                _uploadedBytes += Int64(bytes.count)
            }
            return try putChangeLocked(item, ifMatch: entry.ifMatch, change: entry.changeID)
        }
    }

    public func hasBlob(sha256: String) throws(RemoteError) -> Bool {
        try locked { () throws(RemoteError) in
            try checkOnline()
            guard isSHA256Hex(sha256) else { throw Self.bad("bad blob hash") }
            // (A manifest one of whose chunks is gone is no content, as on the stub.)
            return sha256 == emptySHA256 || blobs[sha256] != nil
                || manifests[sha256].map { $0.chunks.allSatisfy { $0.sha256.map { blobs[$0] != nil } ?? true } } ?? false
        }
    }

    public func uploadBlob(sha256: String, size: Int64, fromFile path: String,
                           progress: TransferProgress?) throws(RemoteError) {
        try upload(sha256: sha256, size: size, fromFile: path, at: 0, whole: true, progress: progress)
    }

    public func uploadChunk(sha256: String, size: Int64, fromFile path: String, at offset: Int64,
                            progress: TransferProgress?) throws(RemoteError) {
        try upload(sha256: sha256, size: size, fromFile: path, at: offset, whole: false, progress: progress)
    }

    /// Stores `size` bytes of the file at `path` from `offset` (with `whole`, the whole file) as the blob
    /// `sha256`, once they hash to it.
    private func upload(sha256: String, size: Int64, fromFile path: String, at offset: Int64, whole: Bool,
                        progress: TransferProgress?) throws(RemoteError) {
        try locked { () throws(RemoteError) in try checkOnline() }
        guard isSHA256Hex(sha256), offset >= 0, size >= 0 else { throw Self.bad("bad hash, offset or size") }
        let bytes = try Self.read(path, at: offset, count: whole ? nil : size)
        guard Int64(bytes.count) == size, sha256Hex(bytes) == sha256 else {
            throw RemoteError.corrupt("\(bytes.count) bytes do not hash to \(sha256.prefix(12)) with size \(size)")
        }
        if let progress, !progress(size) { throw RemoteError.cancelled }
        try locked { () throws(RemoteError) in
            if !whole {
                _heldChunkUploads += 1
                while _holdChunkUploads && !_offline { cond.wait() }
                _heldChunkUploads -= 1
            }
            try checkOnline()
            blobs[sha256] = bytes
            _uploadedBytes += size
        }
    }

    /// The bytes of the file at `path` from `offset`: `count` of them (fewer where it ends), or with `count` nil
    /// all of them to its end.
    private static func read(_ path: String, at offset: Int64, count: Int64?) throws(RemoteError) -> [UInt8] {
        guard let file = FileHandle(forReadingAtPath: path) else {
            throw RemoteError.rejected(status: 400, message: "cannot read \(path)")
        }
        defer { try? file.close() }
        do {
            try file.seek(toOffset: UInt64(offset))
            let data: Data?
            if let count { data = try file.read(upToCount: Int(count)) } else { data = try file.readToEnd() }
            return [UInt8](data ?? Data())
        } catch {
            throw RemoteError.rejected(status: 400, message: "cannot read \(path): \(error)")
        }
    }

    public func downloadBlob(sha256: String, offset: Int64, to fd: FileDescriptor,
                             progress: TransferProgress?) throws(RemoteError) {
        let (whole, delay, corrupt): ([UInt8], Int, Bool) = try locked { () throws(RemoteError) in
            try checkOnline()
            guard isSHA256Hex(sha256) else { throw Self.bad("bad blob hash") }
            guard let b = sha256 == emptySHA256 ? [] : blobs[sha256] ?? manifests[sha256].map(assembled) else {
                throw RemoteError.notFound("blob \(sha256)")
            }
            guard offset >= 0 && offset <= Int64(b.count) else {
                throw RemoteError.rejected(status: 416, message: "bad range")
            }
            _blobDownloads[sha256, default: 0] += 1
            _downloadedBytes += Int64(b.count) - offset
            return (b, _downloadDelay, _corruptDownloads)
        }
        if delay > 0 {
            usleep(UInt32(delay) * 1000)
            try locked { () throws(RemoteError) in try checkOnline() } // gone meanwhile: the transfer is cut
        }
        var bytes = Array(whole[Int(offset)...])
        if corrupt && !bytes.isEmpty { bytes[bytes.count / 2] ^= 0xff }
        do { try fd.writeAll(bytes) } catch { throw .landing(error) }
        if let progress, !progress(offset + Int64(bytes.count)) { throw RemoteError.cancelled }
    }

    // MARK: content in chunks

    public func missingChunks(_ sha256s: [String]) throws(RemoteError) -> Set<String> {
        try locked { () throws(RemoteError) in
            try checkOnline()
            guard sha256s.allSatisfy(isSHA256Hex) else { throw Self.bad("bad chunk hash") }
            return Set(sha256s.filter { $0 != emptySHA256 && blobs[$0] == nil })
        }
    }

    /// As on the stub: a malformed manifest is refused (400), and one naming a chunk not held at its size is a
    /// conflict; a manifest stored before is replaced.
    public func putManifest(_ manifest: WireManifest) throws(RemoteError) {
        try locked { () throws(RemoteError) in
            try checkOnline()
            if let problem = manifest.problem { throw Self.bad(problem) }
            for chunk in manifest.chunks {
                guard let sha = chunk.sha256 else { continue } // a hole
                guard blobs[sha].map({ Int64($0.count) }) == chunk.size else {
                    throw RemoteError.conflict("chunk \(sha) is not stored", current: nil)
                }
            }
            manifests[manifest.sha256] = manifest
        }
    }

    public func manifest(sha256: String) throws(RemoteError) -> WireManifest? {
        try locked { () throws(RemoteError) in
            try checkOnline()
            guard isSHA256Hex(sha256) else { throw Self.bad("bad manifest hash") }
            return manifests[sha256]
        }
    }

    /// A manifest's content: its chunks in order, zeros for its holes (lock held; every chunk is here, see the
    /// header).
    private func assembled(_ manifest: WireManifest) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(manifest.size))
        for chunk in manifest.chunks {
            if let sha = chunk.sha256 { bytes += blobs[sha]! } else { bytes += repeatElement(0, count: Int(chunk.size)) }
        }
        return bytes
    }
}

// MARK: - key-value store

extension MemoryRemote: KeyValueRemote {
    public func putKV(_ entry: WireKVEntry) throws(RemoteError) -> WireKVEntry {
        guard KVLimits.isValidKey(entry.key) else { throw Self.bad(KVLimits.keyProblem(entry.key)) }
        guard entry.deleted == (entry.value == nil) else { throw Self.bad("a value, or deleted, not both") }
        return try locked { () throws(RemoteError) in
            if _offline { throw RemoteError.unreachable("the memory remote is offline") }
            if let current = kv[entry.key], !entry.wins(over: current) { return current }
            let live = kv.values.filter { !$0.deleted }.reduce(into: [String: Int]()) { $0[$1.key] = $1.value?.byteSize ?? 0 }
            if let v = KVLimits.violation(key: entry.key, value: entry.value, live: live) {
                throw RemoteError.rejected(status: 413, message: "quota: " + v.message)
            }
            kvSeq += 1
            var stored = entry
            stored.seq = kvSeq
            kv[entry.key] = stored
            cond.broadcast()
            return stored
        }
    }

    public func kvChanges(since: Int64, waitSeconds: Int) throws(RemoteError) -> WireKVChanges {
        try locked { () throws(RemoteError) in
            if _offline { throw RemoteError.unreachable("the memory remote is offline") }
            let deadline = Date(timeIntervalSinceNow: TimeInterval(waitSeconds))
            while kvSeq <= since && !_offline && cond.wait(until: deadline) {}
            if _offline { throw RemoteError.unreachable("the memory remote is offline") }
            let entries = kv.values.filter { $0.seq > since }.sorted { $0.seq < $1.seq }
            return WireKVChanges(entries: entries, seq: kvSeq)
        }
    }
}

// MARK: - Recently Deleted and version history

extension MemoryRemote {
    /// The clock of the history's `at` (ns since the epoch); the system's by default.
    public var clock: @Sendable () -> Int64 {
        get { locked { _clock } }
        set { locked { _clock = newValue } }
    }

    /// What `collectPass` keeps of the history.
    public var retention: HistoryRetention {
        get { locked { _retention } }
        set { locked { _retention = newValue } }
    }

    /// A collector's pass at `now`, past every blob's grace, as the stub's: the retention first, then every
    /// manifest and blob that no live item, conflict version or kept history row names (and no manifest left
    /// names, for a chunk) goes. Answers what went: SHA256, or SHA256.chunks for a manifest.
    @discardableResult
    public func collectPass(now: Int64) -> [String] {
        locked {
            retainLocked(now: now)
            var named = Set(historyRows.values.flatMap { $0.map(\.sha256) })
            for item in items.values where !item.deleted { named.insert(item.sha256); named.formUnion(item.conflicts.map(\.sha256)) }
            var removed: [String] = []
            for sha in manifests.keys.sorted() where !named.contains(sha) {
                manifests[sha] = nil
                removed.append(sha + ".chunks")
            }
            let chunks = Set(manifests.values.flatMap(\.chunkHashes))
            for sha in blobs.keys.sorted() where !named.contains(sha) && !chunks.contains(sha) {
                blobs[sha] = nil
                removed.append(sha)
            }
            return removed
        }
    }

    public func history(id: String) throws(RemoteError) -> [WireVersion] {
        try locked { () throws(RemoteError) in
            try checkOnline()
            guard WireRules.isValidID(id) else { throw Self.bad("bad item id") }
            guard items[id] != nil else { throw RemoteError.notFound("no such item \(id)") }
            return (historyRows[id] ?? []).reversed()
        }
    }

    public func trash() throws(RemoteError) -> [WireVersion] {
        try locked { () throws(RemoteError) in
            try checkOnline()
            return trashLocked(parent: nil)
        }
    }

    public func restore(ids: [String], device: String) throws(RemoteError) -> [WireItem] {
        try locked { () throws(RemoteError) in
            try checkOnline()
            try checkHistoryIDs(ids)
            guard HistoryRules.isValidDevice(device) else { throw Self.bad("bad device name") }
            let unique = uniqueIDs(ids)
            for id in unique { // every refusal before any change, as the stub's one transaction
                guard let item = items[id] else { throw RemoteError.notFound("no such item \(id)") }
                if item.deleted && trashRowLocked(item) == nil { throw RemoteError.notFound("\(id) is not in Recently Deleted") }
            }
            let whole = wholeBatchesLocked(unique)
            var answer: [WireItem] = []
            for id in whole { restoreLocked(id, device: device, asked: Set(whole), into: &answer) }
            return answer
        }
    }

    public func emptyTrash(ids: [String]) throws(RemoteError) -> Int {
        try locked { () throws(RemoteError) in
            try checkOnline()
            try checkHistoryIDs(ids)
            let unique = uniqueIDs(ids)
            if let unknown = unique.first(where: { items[$0] == nil }) { throw RemoteError.notFound("no such item \(unknown)") }
            var emptied = Set<String>()
            for id in wholeBatchesLocked(unique) {
                guard let row = trashRowLocked(items[id]!), !emptied.contains(id) else { continue }
                for gone in [row] + deletedWithLocked(row) where emptied.insert(gone.id).inserted { historyRows[gone.id] = nil }
            }
            return emptied.count
        }
    }

    public func emptyTrash() throws(RemoteError) -> Int {
        try locked { () throws(RemoteError) in
            try checkOnline()
            let all = trashLocked(parent: nil)
            for row in all { historyRows[row.id] = nil }
            return all.count
        }
    }

    /// Makes `shares()` answer these (as if the owner had shared folders on another device).
    public func setShares(_ shares: [WireShare]) { locked { shareRecords = shares } }

    public func shares() throws(RemoteError) -> [WireShare] {
        try locked { () throws(RemoteError) in
            if _offline { throw RemoteError.unreachable("the memory remote is offline") }
            return shareRecords
        }
    }

    /// As the stub's (docs/HISTORY.md "Deleting an app's data"): every live item outside the root's Documents
    /// (with `documents`, all but the root) deleted by `device`, each folder after what it held, as one batch.
    public func deleteData(documents: Bool, device: String) throws(RemoteError) -> WireDataDeleted {
        try locked { () throws(RemoteError) in
            try checkOnline()
            guard HistoryRules.isValidDevice(device) else { throw Self.bad("bad device name") }
            var found: [WireItem] = []
            var folders = [WireRules.rootID]
            while let folder = folders.popLast() {
                for child in liveChildren(of: folder).sorted(by: { $0.id < $1.id })
                where documents || folder != WireRules.rootID || child.name != WireRules.documentsName {
                    found.append(child)
                    if child.kind == .dir { folders.append(child.id) }
                }
            }
            let batch = WireDataBatch(documentsToo: documents)
            let deleted = found.reversed().map { item -> WireItem in
                var tomb = item
                tomb.deleted = true
                tomb.device = device
                return store(tomb, batch: batch)
            }
            return WireDataDeleted(deleted: deleted, batch: deleted.isEmpty ? nil : batch)
        }
    }

    // MARK: history internals (lock held)

    /// `ids`, then every other item in Recently Deleted of a deletion of the app's data one of them is in.
    private func wholeBatchesLocked(_ ids: [String]) -> [String] {
        let batches = Set(ids.compactMap { items[$0].flatMap(trashRowLocked)?.batch })
        guard !batches.isEmpty else { return ids }
        var all = ids, seen = Set(ids)
        for row in trashLocked(parent: nil).reversed() where row.batch.map(batches.contains) == true && seen.insert(row.id).inserted {
            all.append(row.id)
        }
        return all
    }

    /// Whether a kept history row names the content.
    private func historyNames(_ sha256: String) -> Bool {
        historyRows.values.contains { $0.contains { $0.sha256 == sha256 } }
    }

    /// The item's names from the root, joined by `/`.
    private func pathLocked(_ item: WireItem) -> String {
        var names: [String] = []
        var cursor: WireItem? = item
        var seen = Set<String>()
        while let c = cursor, let parent = c.parent, seen.insert(c.id).inserted {
            names.append(c.name)
            cursor = items[parent]
        }
        return names.reversed().joined(separator: "/")
    }

    private func checkHistoryIDs(_ ids: [String]) throws(RemoteError) {
        guard (1...HistoryRules.maxIDs).contains(ids.count) else { throw Self.bad("give 1 to \(HistoryRules.maxIDs) ids") }
        if let bad = ids.first(where: { !WireRules.isValidID($0) }) { throw Self.bad("bad item id \(bad.prefix(80))") }
    }

    private func uniqueIDs(_ ids: [String]) -> [String] {
        var seen = Set<String>()
        return ids.filter { seen.insert($0).inserted }
    }

    /// The delete row of an item in Recently Deleted, or nil.
    private func trashRowLocked(_ item: WireItem) -> WireVersion? {
        guard item.deleted, let last = historyRows[item.id]?.last, last.version == item.version, last.deleted else { return nil }
        return last
    }

    private func trashLocked(parent: String?) -> [WireVersion] {
        items.values.compactMap(trashRowLocked).filter { parent == nil || $0.parent == parent }
            .sorted { $0.version > $1.version }
    }

    /// What was deleted in the folder at most `HistoryRules.folderWindow` before it (of its batch only, for a
    /// folder a deletion of the app's data took), parents before children.
    private func deletedWithLocked(_ folder: WireVersion) -> [WireVersion] {
        guard folder.kind == .dir else { return [] }
        var found: [WireVersion] = []
        var folders = [folder.id]
        var seen: Set<String> = [folder.id]
        while let next = folders.popLast() {
            for row in trashLocked(parent: next)
            where row.at >= folder.at - HistoryRules.folderWindow && row.at <= folder.at && row.batch == folder.batch
                && seen.insert(row.id).inserted {
                found.append(row)
                if row.kind == .dir { folders.append(row.id) }
            }
        }
        return found
    }

    /// One id asked for, checked already: answered as it is when live, else brought back with its folders above
    /// and what was deleted with it below.
    private func restoreLocked(_ id: String, device: String, asked: Set<String>, into answer: inout [WireItem]) {
        let item = items[id]!
        guard item.deleted, let row = trashRowLocked(item) else { return note(item, &answer) }
        var chain: [WireItem] = []
        var cursor = item.parent
        while let p = cursor, let folder = items[p], folder.deleted { chain.append(folder); cursor = folder.parent }
        for folder in chain.reversed() {
            let folderRow = trashRowLocked(folder)
            reviveLocked(folder, device: device, into: &answer)
            if asked.contains(folder.id), let folderRow { reviveDeletedLocked(with: folderRow, device: device, into: &answer) }
        }
        reviveLocked(item, device: device, into: &answer)
        reviveDeletedLocked(with: row, device: device, into: &answer)
    }

    private func reviveDeletedLocked(with row: WireVersion, device: String, into answer: inout [WireItem]) {
        for gone in deletedWithLocked(row) {
            guard let tomb = items[gone.id], tomb.deleted, tomb.version == gone.version else { continue }
            reviveLocked(tomb, device: device, into: &answer)
        }
    }

    /// The tombstone live again as a new version, where it was, under a free name, without conflict versions.
    private func reviveLocked(_ tomb: WireItem, device: String, into answer: inout [WireItem]) {
        var item = tomb
        item.deleted = false
        item.device = device
        item.conflicts = []
        if let parent = item.parent {
            var n = 1
            while let holder = liveChild(of: parent, named: n == 1 ? tomb.name : HistoryRules.numberedName(tomb.name, n)),
                  holder.id != tomb.id { n += 1 }
            item.name = n == 1 ? tomb.name : HistoryRules.numberedName(tomb.name, n)
        }
        note(store(item), &answer)
    }

    private func note(_ item: WireItem, _ answer: inout [WireItem]) {
        if !answer.contains(where: { $0.id == item.id }) { answer.append(item) }
    }

    /// The retention pass of the stub's collector, at `now`.
    private func retainLocked(now: Int64) {
        for (id, rows) in historyRows {
            let gone = Set(_retention.expired(rows.map { HistoryStamp(id: id, version: $0.version, at: $0.at, deleted: $0.deleted) },
                                              now: now))
            if gone.isEmpty { continue }
            let kept = rows.filter { !gone.contains($0.version) }
            historyRows[id] = kept.isEmpty ? nil : kept
        }
    }
}

// MARK: - Rewind

extension MemoryRemote {
    /// As the stub's (StubHistory.swift): `RewindPlanner`'s plan over this remote's state, its versions stored
    /// under the one lock, none for a dry run.
    public func rewind(folder: String, to: Int64, dryRun: Bool, device: String) throws(RemoteError) -> [WireRewindChange] {
        try locked { () throws(RemoteError) in
            try checkOnline()
            let request = WireRewindRequest(folder: folder, to: to, dryRun: dryRun, device: device)
            let plan: RewindPlan
            do {
                plan = try RewindPlanner.plan(request, now: _clock(), source: RewindView(remote: self))
            } catch let refusal as RewindRefusal {
                throw Self.remoteError(refusal)
            } catch {
                // The planner reads this remote's own memory, which cannot fail: one bridge from its untyped throws.
                throw .server(status: 500, message: "the rewind's plan failed: \(error)")
            }
            if !dryRun { for item in plan.writes { _ = store(item) } }
            return plan.changes
        }
    }

    /// A refusal as the HTTP client would take the stub's answer.
    private static func remoteError(_ refusal: RewindRefusal) -> RemoteError {
        switch refusal.status {
        case 404: return .notFound(refusal.message)
        case 409: return .conflict(refusal.message, current: nil)
        case 500...: return .server(status: refusal.status, message: refusal.message)
        default: return .rejected(status: refusal.status, message: refusal.message)
        }
    }

    /// The remote's state, read with its lock held, as a rewind reads it.
    private struct RewindView: RewindSource {
        let remote: MemoryRemote

        func item(_ id: String) -> WireItem? { remote.items[id] }

        func liveChildren(_ parent: String) -> [WireItem] { remote.liveChildren(of: parent) }

        func liveChild(_ parent: String, named name: String) -> WireItem? { remote.liveChild(of: parent, named: name) }

        func oldestKept(_ id: String) -> Int64? { remote.historyRows[id]?.map(\.at).min() }

        func version(_ id: String, atOrBefore at: Int64) -> WireVersion? {
            remote.historyRows[id]?.last { $0.at <= at }
        }

        func versions(in parent: String, atOrBefore at: Int64) -> [WireVersion] {
            remote.historyRows.values.compactMap { rows in rows.last { $0.at <= at } }.filter { $0.parent == parent }
        }

        func holdsContent(sha256: String, size: Int64) -> Bool {
            let held = remote.blobs[sha256].map { Int64($0.count) } ?? remote.manifests[sha256]?.size
            return held == size
        }
    }
}
