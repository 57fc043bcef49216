// The stub's business rules: containers, items, the change feed, the key-value store and blobs, over the
// metadata storage of StubMetadata.swift (SQLite here, or PostgreSQL shared by several servers) and the
// content-addressed blobs of BlobStore.swift (files here, or an S3 bucket).
//
// What must hold: each public method does its work in one metadata transaction, so a request sees and makes one whole
// state, and every item or key write is announced to the notifier after it commits. An item write locks its container
// first and takes the container's next sequence number as its version in the same transaction as its row (`store`), so
// the feed never skips or repeats a change, whichever server wrote it; unique indexes keep versions and live names
// unique in the database too. `store` is the one funnel of every new version: it appends the version's history row
// (docs/HISTORY.md) in the same transaction, stamped with the store's clock and the item's path then (StubHistory.swift
// reads, restores, rewinds and retains that history). A conditional write is checked inside that transaction (If-Match, a live
// parent directory, no cycle, a free name) and refused with 412, 422 or 409 and the item in the way. A put or delete
// with a change id is checked against the last change applied for its item and device first (`throwIfApplied`): a retry
// is answered as applied and changes nothing; a write records its id in its own transaction (`recordChange`). An item
// names only a blob that the blob store holds whole, at its size, or a manifest stored at its size (`blobSize`). A blob
// or manifest is collected only inside a writing transaction of its container and only when no live item, conflict
// version or kept history row names it (`collectBlob`), so no item write (a restore included) can come to name one that
// is being removed. A manifest is stored only once every data chunk it names is stored at its size, checked and stored
// under its container's manifest lock (`putManifest`), which a collection pass holds while it decides which chunks to
// remove. A long poll holds no transaction while it waits.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): a container's manifest lock comes before
// the metadata's transactions (a collection pass takes them inside it); `manifestLocks` is a leaf.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// How a write is conditioned: `If-Match: V` or `If-None-Match: *`.
enum WriteCondition {
    case ifMatch(Int64)
    case ifNoneMatch

    /// The condition as a header line: part of what tells a retry of a change from another change.
    var wire: String {
        switch self {
        case .ifMatch(let v): return "If-Match: \(v)"
        case .ifNoneMatch: return "If-None-Match: *"
        }
    }
}

/// A batch entry as the store applies it: its inline content already written to a verified temporary file
/// (`blob`, removed when the entry is let go unless it was moved into place), or the refusal found while
/// checking it. Unchecked: its blob writer is finished before the batch is applied, and only read after (the
/// blob store's part of a batch runs on several threads, one entry on one thread).
struct StubBatchEntry: @unchecked Sendable {
    var entry: WireBatchEntry
    var blob: BlobWriter?
    var refusal: StubFailure?
    /// The blob was stored by this entry (the store did not hold it).
    var storedBlob = false

    /// A put that may only create (no If-Match): a new item, for the item limit.
    var isCreate: Bool { entry.op == .put && entry.ifMatch == nil }
}

final class StubStore: Sendable {
    let meta: any StubMetadata
    let blobs: BlobStore
    let tmpDir: String
    /// How long a long poll waits before looking again when no notification came (another server's commit).
    let recheckInterval: TimeInterval
    /// Each container's manifest lock (`withManifestLock`), made at its first use.
    private let manifestLocks = Locked<[String: NSLock]>([:])
    /// The server's clock (ns since the epoch): the `at` of history rows and the `now` of retention.
    let clock: @Sendable () -> Int64
    /// What each container stores, for the users' limits (Quotas.swift).
    let meter: UsageMeter

    /// `metadata` nil is the embedded default, `DATA/stub.sqlite`; `blobs` nil the files under `DATA/blobs`.
    init(dataDir: String, metadata: (any StubMetadata)? = nil, blobs: BlobStore? = nil,
         recheckSeconds: TimeInterval = 1, clock: @escaping @Sendable () -> Int64 = nowNanoseconds) throws {
        recheckInterval = recheckSeconds
        self.clock = clock
        meter = UsageMeter(clock: clock)
        tmpDir = dataDir + "/tmp"
        self.blobs = try blobs ?? FileBlobStore(dir: dataDir + "/blobs", tmpDir: tmpDir)
        try makeDirectories(tmpDir)
        // Leftovers of uploads cut short by a crash.
        for name in folderNames(tmpDir, for: "uploads cut short to remove") { removeLeftover(tmpDir + "/" + name) }
        meta = try metadata ?? SQLiteMetadata(path: dataDir + "/stub.sqlite")
    }

    deinit { meta.close() }

    // MARK: Transactions and waking

    /// One writing transaction on container `cid`, locked first; a missing container is 404.
    func writing<T>(_ cid: String, _ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        let result = try meta.write { (tx) throws(ServerFailure) in
            guard try tx.lockContainer(cid) != nil else { throw .refused(404, "no such container") }
            return try body(tx)
        }
        meta.notifier.committed(cid)
        return result
    }

    /// One reading transaction on container `cid`; a missing container is 404.
    func reading<T>(_ cid: String, _ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        try meta.read { (tx) throws(ServerFailure) in
            guard try tx.containerSeq(cid) != nil else { throw .refused(404, "no such container") }
            return try body(tx)
        }
    }

    /// Answers `look()` at once when it finds something or `wait` is 0, else looks again on every change
    /// noticed and at least every `recheckInterval`, until it finds something, `wait` seconds pass or the
    /// server stops.
    func polling<T>(wait: Int, _ look: () throws(ServerFailure) -> (T, found: Bool)) throws(ServerFailure) -> T {
        let notifier = meta.notifier
        let deadline = Date(timeIntervalSinceNow: TimeInterval(wait))
        while true {
            let seen = notifier.generation
            let (answer, found) = try look()
            if found || wait <= 0 || notifier.isStopping || Date() >= deadline { return answer }
            notifier.wait(after: seen, until: min(deadline, Date(timeIntervalSinceNow: recheckInterval)))
        }
    }

    /// Wakes long polls so they notice the server stopping; `false` lets them wait again.
    func setStopping(_ value: Bool) { meta.notifier.setStopping(value) }

    var isStopping: Bool { meta.notifier.isStopping }

    // MARK: Containers

    func containerExists(_ cid: String) throws(ServerFailure) -> Bool {
        try meta.read { (tx) throws(ServerFailure) in try tx.containerSeq(cid) != nil }
    }

    /// Creates the container (root and Documents) unless it exists; answers the feed position now.
    func ensureContainer(_ cid: String) throws(ServerFailure) -> WireContainer {
        guard ContainerScope.isValidStoredID(cid) else { throw .refused(400, "bad container id") }
        if let seq = try meta.read({ (tx) throws(ServerFailure) in try tx.containerSeq(cid) }) {
            return WireContainer(container: cid, root: WireRules.rootID, token: String(seq))
        }
        try blobs.addContainer(cid)
        let now = nowNanoseconds()
        let seq = try meta.write { (tx) throws(ServerFailure) -> Int64 in
            if try tx.createContainer(cid) {
                _ = try tx.lockContainer(cid)
                let root = WireItem(id: WireRules.rootID, parent: nil, name: "", kind: .dir, mode: 0o755, mtime: now,
                                    size: 0, sha256: "", device: "stub")
                let docs = WireItem(id: WireRules.documentsID, parent: WireRules.rootID, name: WireRules.documentsName, kind: .dir,
                                    mode: 0o755, mtime: now, size: 0, sha256: "", device: "stub")
                _ = try store(tx, cid, root)
                _ = try store(tx, cid, docs)
            }
            return try tx.containerSeq(cid) ?? 0
        }
        meta.notifier.committed(cid)
        return WireContainer(container: cid, root: WireRules.rootID, token: String(seq))
    }

    // MARK: Items

    func item(_ cid: String, _ id: String) throws(ServerFailure) -> WireItem {
        try reading(cid) { (tx) throws(ServerFailure) in
            guard let item = try tx.item(cid, id) else { throw .refused(404, "no such item") }
            return item
        }
    }

    /// Stores `item` at the container's next version (the container is locked by the transaction), and appends
    /// that version to its history with the clock's time and the item's path (its parent's, `parentPath`, when
    /// the caller knows it).
    func store(_ tx: any MetadataTransaction, _ cid: String, _ item: WireItem, parentPath: String? = nil,
               batch: WireDataBatch? = nil) throws(ServerFailure) -> WireItem {
        var stored = item
        stored.version = try tx.nextSeq(cid)
        try tx.writeItem(cid, stored)
        let path = if let parentPath { Self.joined(parentPath, stored.name) } else { try self.path(tx, cid, of: stored) }
        try tx.appendHistory(cid, WireVersion(stored, at: clock(), path: path, batch: batch))
        return stored
    }

    /// The item's names from the root, joined by `/` (the root's path is ""), walking its parents as they are.
    func path(_ tx: any MetadataTransaction, _ cid: String, of item: WireItem) throws(ServerFailure) -> String {
        var names: [String] = []
        var cursor: WireItem? = item
        var seen = Set<String>()
        while let c = cursor, let parent = c.parent, seen.insert(c.id).inserted {
            names.append(c.name)
            cursor = try tx.item(cid, parent)
        }
        return names.reversed().joined(separator: "/")
    }

    private static func joined(_ parentPath: String, _ name: String) -> String {
        parentPath.isEmpty ? name : parentPath + "/" + name
    }

    /// Checks the parts of an item that do not depend on the rest of the tree, and normalises it.
    private func validated(_ tx: any MetadataTransaction, _ cid: String, _ id: String, _ body: WireItem) throws(ServerFailure) -> WireItem {
        var item = body
        guard item.id == id else { throw .refused(400, "the id in the body differs from the path") }
        if id == WireRules.rootID {
            guard item.parent == nil, item.name == "", item.kind == .dir else {
                throw .refused(400, "the root has no parent and no name")
            }
        } else {
            guard let parent = item.parent, WireRules.isValidID(parent) else { throw .refused(400, "bad parent id") }
            guard WireRules.isValidName(item.name) else { throw .refused(400, "bad name") }
            if let why = WireRules.reservedNameProblem(item.name, parent: parent) { throw .refused(400, why) }
        }
        item.mode &= WireRules.sharedModeBits // (setuid, setgid and sticky never travel)
        item.deleted = false
        guard item.device.utf8.count <= 255 else { throw .refused(400, "device name too long") }
        if let problem = WireRules.kindProblem(item) { throw .refused(400, problem) }
        switch item.kind {
        case .dir:
            item.size = 0; item.sha256 = ""
        case .file:
            try checkContent(tx, cid, sha256: item.sha256, size: item.size, what: "content")
        case .symlink, .fifo, .socket:
            break // checked above: a link's fields follow from its target, and the others are refused
        }
        var xattrBytes = 0
        for (key, value) in item.xattrs {
            guard !key.isEmpty, let decoded = Data(base64Encoded: value) else { throw .refused(400, "bad xattr \(key)") }
            xattrBytes += WireRules.xattrBytes(name: key, valueBytes: decoded.count)
        }
        guard xattrBytes <= WireRules.maxXattrBytes else { throw .refused(400, "xattrs larger than 64 KiB") }
        var conflictIDs = Set<String>()
        for c in item.conflicts {
            guard WireRules.isValidID(c.id), conflictIDs.insert(c.id).inserted else {
                throw .refused(400, "bad or repeated conflict id")
            }
            try checkContent(tx, cid, sha256: c.sha256, size: c.size, what: "conflict \(c.id)")
        }
        return item
    }

    /// A file's hash must name a blob or a manifest on the stub of the same size (the empty hash needs no blob).
    private func checkContent(_ tx: any MetadataTransaction, _ cid: String, sha256: String, size: Int64,
                              what: String) throws(ServerFailure) {
        guard isSHA256Hex(sha256), size >= 0 else { throw .refused(400, "bad hash or size of \(what)") }
        if sha256 == emptySHA256 {
            guard size == 0 else { throw .refused(400, "size of \(what) does not match its blob") }
            return
        }
        guard let blobSize = try blobSize(cid, sha256) else { throw .refused(400, "blob missing for \(what)") }
        guard blobSize == size else { throw .refused(400, "size of \(what) does not match its blob") }
    }

    /// Creates or updates an item, conditionally: the rules of WIRE.md "Conditional writes".
    /// With a `change` id, a retry of the change last applied for the item and device throws `.applied`.
    func putItem(_ cid: String, _ id: String, _ body: WireItem, _ condition: WriteCondition,
                 change: WireChangeID? = nil) throws(ServerFailure) -> WireItem {
        try askBlobStore(cid, about: body)
        return try writing(cid) { (tx) throws(ServerFailure) in try put(tx, cid, id, body, condition, change: change) }
    }

    /// Asks the blob store about the contents an item names, outside any transaction (for S3 a round trip
    /// each; the check inside then finds them known).
    private func askBlobStore(_ cid: String, about body: WireItem) throws(ServerFailure) {
        for sha in [body.sha256] + body.conflicts.map(\.sha256) where isSHA256Hex(sha) { _ = try blobs.size(cid, sha) }
    }

    /// `putItem` inside a write transaction of the container.
    private func put(_ tx: any MetadataTransaction, _ cid: String, _ id: String, _ body: WireItem,
                     _ condition: WriteCondition, change: WireChangeID?) throws(ServerFailure) -> WireItem {
        let digest = WireApplied.digest(condition: condition.wire, item: body)
        try throwIfApplied(tx, cid, id, change, digest: digest)
        let item = try validated(tx, cid, id, body)
        let existing = try tx.item(cid, id)
        switch condition {
        case .ifNoneMatch:
            if let existing { throw try moved(tx, cid, change, "the item exists", current: existing) }
        case .ifMatch(let version):
            guard let existing else { throw .refused(404, "no such item") }
            guard existing.version == version else {
                throw try moved(tx, cid, change, "the item is at version \(existing.version)", current: existing)
            }
            guard existing.kind == item.kind else { throw .refused(400, "an item cannot change kind") }
        }
        if let parentID = item.parent { try checkPlace(tx, cid, id, parentID, item.name) }
        let stored = try store(tx, cid, item)
        try recordChange(tx, cid, id, change, digest: digest, version: stored.version)
        return stored
    }

    /// The new parent is a live directory, not the item nor below it, and holds no other live `name`.
    private func checkPlace(_ tx: any MetadataTransaction, _ cid: String, _ id: String, _ parentID: String,
                            _ name: String) throws(ServerFailure) {
        guard let parent = try tx.item(cid, parentID), !parent.deleted, parent.kind == .dir else {
            throw .refused(422, "the parent is not a live directory")
        }
        var cursor: String? = parentID
        var steps = 0
        while let c = cursor {
            if c == id { throw .refused(422, "an item cannot move below itself") }
            steps += 1
            if steps > 100_000 { throw .refused(500, "the tree is too deep") }
            cursor = try tx.item(cid, c)?.parent
        }
        if let holder = try tx.liveChild(cid, parent: parentID, name: name, except: id) {
            throw .refused(409, "the name is taken", current: holder)
        }
    }

    /// Deletes an item seen at `version`, leaving a tombstone.
    func deleteItem(_ cid: String, _ id: String, ifMatch version: Int64, device: String,
                    change: WireChangeID? = nil) throws(ServerFailure) -> WireItem {
        try writing(cid) { (tx) throws(ServerFailure) in try delete(tx, cid, id, ifMatch: version, device: device, change: change) }
    }

    /// `deleteItem` inside a write transaction of the container.
    private func delete(_ tx: any MetadataTransaction, _ cid: String, _ id: String, ifMatch version: Int64,
                        device: String, change: WireChangeID?) throws(ServerFailure) -> WireItem {
        let digest = WireApplied.digest(condition: "delete \(version)", item: nil)
        try throwIfApplied(tx, cid, id, change, digest: digest)
        guard id != WireRules.rootID else { throw .refused(400, "the root cannot be deleted") }
        guard let existing = try tx.item(cid, id) else { throw .refused(404, "no such item") }
        if existing.deleted { throw try moved(tx, cid, change, "the item is already deleted", current: existing) }
        guard existing.version == version else {
            throw try moved(tx, cid, change, "the item is at version \(existing.version)", current: existing)
        }
        if existing.kind == .dir, let child = try tx.anyLiveChild(cid, parent: id) {
            throw .refused(409, "the directory is not empty", current: child)
        }
        let stored = try store(tx, cid, try tombstone(tx, cid, of: existing, device: device))
        try recordChange(tx, cid, id, change, digest: digest, version: stored.version)
        return stored
    }

    /// The delete of a live item by `device`: where it was (an item set aside under its aside name during a
    /// move goes back to the name it had).
    func tombstone(_ tx: any MetadataTransaction, _ cid: String, of existing: WireItem, device: String) throws(ServerFailure) -> WireItem {
        var tomb = existing
        tomb.deleted = true
        tomb.device = device
        if existing.name == WireRules.asideName(existing.id),
           let before = try tx.history(cid, existing.id).first(where: { !$0.deleted && $0.name != existing.name }) {
            tomb.parent = before.parent
            tomb.name = before.name
        }
        return tomb
    }

    // MARK: Batch

    /// Applies a batch's entries in order, each by the code of its single route, all in one transaction of
    /// the container (one commit, one lock) with a savepoint each: one refused entry changes nothing and the
    /// next go on. The blob store's part comes first, outside the transaction (inline contents stored, the
    /// contents named asked about: for S3 round trips, which must not hold the container's lock). Applies the
    /// entries in order until `deadline`: the entries left then, or from one that fails for the server's own
    /// reasons (a database restarting, the blob store away), are answered 503 unapplied, to be sent again, and
    /// the ones before are committed, so that a slow batch finishes within the client's timeout and what it
    /// applied is acknowledged. A first entry that fails so fails the request, and so does a failed commit
    /// (then nothing was applied). Once it has applied entries for `turnSeconds` while other requests wait
    /// for the store (`StubMetadata.othersWaiting`), it ends the same way: one client's long batch stalls no
    /// other for longer than that.
    func batch(_ cid: String, _ entries: [StubBatchEntry], deadline: Date) throws(ServerFailure) -> [WireBatchResult] {
        let (entries, failure) = preparingBlobs(cid, entries)
        var upTo = entries.count, why = ""
        if let failure {
            if failure.index == 0 { throw failure.error }
            upTo = failure.index
            why = "not applied (\(failure.error)): send it again"
        }
        var results: [WireBatchResult] = []
        try writing(cid) { (tx) throws(ServerFailure) in
            results = [] // (a transaction run again on a fresh connection starts over)
            let turnEnd = Date(timeIntervalSinceNow: Self.turnSeconds)
            for (i, entry) in entries[..<upTo].enumerated() {
                if i > 0 && Date() >= deadline {
                    results += Self.unapplied(upTo - i, "the batch ran out of time: not applied, send it again")
                    return
                }
                if i > 0 && Date() >= turnEnd && meta.othersWaiting {
                    results += Self.unapplied(upTo - i, "the batch gave its turn to other requests: not applied, send it again")
                    return
                }
                do throws(ServerFailure) {
                    results.append(WireBatchResult(status: 200, item: try tx.savepoint { () throws(ServerFailure) in
                        try apply(tx, cid, entry)
                    }))
                } catch .applied(let answer) {
                    results.append(WireBatchResult(status: 208, current: answer.current, applied: answer.applied))
                } catch .refused(let f) where f.isEntrysOwn {
                    results.append(WireBatchResult(status: f.status, error: f.message, current: f.current, yours: f.yours))
                } catch where i > 0 {
                    results += Self.unapplied(upTo - i, "not applied (\(error)): send it again")
                    return
                }
            }
        }
        return results + Self.unapplied(entries.count - upTo, why)
    }

    /// How long a batch applies entries while other requests wait for the store.
    static let turnSeconds: TimeInterval = 0.05

    private static func unapplied(_ count: Int, _ why: String) -> [WireBatchResult] {
        Array(repeating: WireBatchResult(status: 503, error: why), count: count)
    }

    /// The blob store's part of every entry, eight at a time (for S3 each a round trip or more), and the first
    /// entry whose part failed for the server's own reasons, with why.
    private func preparingBlobs(_ cid: String, _ entries: [StubBatchEntry])
        -> ([StubBatchEntry], failure: (index: Int, error: ServerFailure)?) {
        let prepared = Locked(entries)
        let failures = Locked([Int: ServerFailure]())
        let lanes = min(8, entries.count)
        DispatchQueue.concurrentPerform(iterations: lanes) { lane in
            for i in stride(from: lane, to: entries.count, by: lanes) {
                var entry = entries[i]
                do throws(ServerFailure) {
                    try prepareBlobs(cid, &entry)
                } catch {
                    failures.withLock { $0[i] = error }
                    continue
                }
                prepared.withLock { $0[i] = entry }
            }
        }
        let first = failures.withLock { $0.min { $0.key < $1.key } }
        return (prepared.withLock { $0 }, first.map { (index: $0.key, error: $0.value) })
    }

    /// The blob store's part of a put entry: its inline content stored (content that does not match its hash
    /// refuses the entry) and the contents its item names asked about.
    private func prepareBlobs(_ cid: String, _ prepared: inout StubBatchEntry) throws(ServerFailure) {
        guard prepared.refusal == nil, prepared.entry.op == .put, let item = prepared.entry.item else { return }
        do {
            if let blob = prepared.blob {
                prepared.storedBlob = try blobs.put(cid, item.sha256, size: blob.written, tmpPath: blob.tmpPath,
                                                    replacing: false)
                if prepared.storedBlob { meter.stored(cid, bytes: blob.written) }
            }
            try askBlobStore(cid, about: item)
        } catch .refused(let f) where f.isEntrysOwn {
            prepared.refusal = f
        }
    }

    private func apply(_ tx: any MetadataTransaction, _ cid: String, _ prepared: StubBatchEntry) throws(ServerFailure) -> WireItem {
        if let refusal = prepared.refusal { throw .refused(refusal) }
        let entry = prepared.entry
        switch entry.op {
        case .delete:
            guard WireRules.isValidID(entry.id) else { throw .refused(400, "bad item id") }
            guard let version = entry.ifMatch, version >= 0 else { throw .refused(400, "If-Match version needed") }
            return try delete(tx, cid, entry.id, ifMatch: version, device: entry.device ?? "",
                              change: try checked(entry.changeID))
        case .put:
            guard WireRules.isValidID(entry.id) else { throw .refused(400, "bad item id") }
            guard let item = entry.item else { throw .refused(400, "a put needs an item") }
            let condition: WriteCondition = entry.ifMatch.map { .ifMatch($0) } ?? .ifNoneMatch
            if case .ifMatch(let v) = condition, v < 0 { throw .refused(400, "bad If-Match version") }
            return try put(tx, cid, entry.id, item, condition, change: try checked(entry.changeID))
        }
    }

    private func checked(_ change: WireChangeID?) throws(ServerFailure) -> WireChangeID? {
        if let change, !WireRules.isValidID(change.id) { throw .refused(400, "bad change id") }
        return change
    }

    // MARK: Applied changes

    /// Throws `.applied` when `change` is the last change recorded for its item and device: a retry. The
    /// same id with another digest (another change under a reused id) is refused with 400.
    private func throwIfApplied(_ tx: any MetadataTransaction, _ cid: String, _ id: String, _ change: WireChangeID?,
                                digest: String) throws(ServerFailure) {
        guard let change, let last = try tx.appliedChange(cid, item: id, device: change.device),
              last.change == change.id else { return }
        guard last.digest == digest else { throw .refused(400, "change id \(change.id) reused for another change") }
        guard let current = try tx.item(cid, id) else { return }
        throw .applied(WireApplied(applied: last.version, current: current))
    }

    /// The 412 of a write whose condition no longer holds, with the asking device's last change applied to the
    /// item when it sent a change id (its answer may have been lost: then `current` may be that change's work).
    private func moved(_ tx: any MetadataTransaction, _ cid: String, _ change: WireChangeID?, _ message: String,
                       current: WireItem) throws(ServerFailure) -> ServerFailure {
        let last = try change.flatMap { (c) throws(ServerFailure) in try tx.appliedChange(cid, item: current.id, device: c.device) }
        return .refused(412, message, current: current,
                        yours: last.map { WireLastChange(change: $0.change, version: $0.version) })
    }

    /// Records `change` as the last change applied for its item and device (inside the write's transaction).
    private func recordChange(_ tx: any MetadataTransaction, _ cid: String, _ id: String, _ change: WireChangeID?,
                              digest: String, version: Int64) throws(ServerFailure) {
        guard let change else { return }
        try tx.recordChange(cid, item: id, AppliedChange(device: change.device, change: change.id, digest: digest,
                                                          version: version))
    }

    // MARK: Change feed

    /// Items newer than `since`, waiting up to `wait` seconds for one when there are none.
    func changes(_ cid: String, since: Int64, limit: Int, wait: Int) throws(ServerFailure) -> WireChanges {
        try polling(wait: wait) { () throws(ServerFailure) in
            try reading(cid) { (tx) throws(ServerFailure) in
                let seq = try tx.containerSeq(cid) ?? 0
                var items = try tx.items(cid, after: since, limit: limit + 1)
                let more = items.count > limit
                if more { items.removeLast(items.count - limit) }
                let token = more ? items[items.count - 1].version : seq
                return (WireChanges(items: items, token: String(token), more: more), seq > since)
            }
        }
    }

    // MARK: Key-value store

    /// Applies one write by last-writer-wins and answers the winner: the stored entry when it is later (the
    /// write is then dropped), else the write at the next feed position. A value that would pass Apple's limits
    /// is refused with 413 and stores nothing.
    func putKV(_ cid: String, _ entry: WireKVEntry) throws(ServerFailure) -> WireKVEntry {
        guard KVLimits.isValidKey(entry.key) else { throw .refused(400, KVLimits.keyProblem(entry.key)) }
        guard entry.deleted == (entry.value == nil) else { throw .refused(400, "a value, or deleted, not both") }
        return try writing(cid) { (tx) throws(ServerFailure) in
            if let current = try tx.kvEntry(cid, entry.key), !entry.wins(over: current) { return current }
            if let v = KVLimits.violation(key: entry.key, value: entry.value, live: try tx.kvLiveSizes(cid)) {
                throw .refused(413, "quota: " + v.message)
            }
            var stored = entry
            stored.seq = try tx.kvSeq(cid) + 1
            try tx.kvPut(cid, stored)
            return stored
        }
    }

    /// Entries written after `since`, waiting up to `wait` seconds for one when there are none.
    func kvChanges(_ cid: String, since: Int64, wait: Int) throws(ServerFailure) -> WireKVChanges {
        try polling(wait: wait) { () throws(ServerFailure) in
            try reading(cid) { (tx) throws(ServerFailure) in
                let seq = try tx.kvSeq(cid)
                let entries = seq > since ? try tx.kvEntries(cid, after: since) : []
                return (WireKVChanges(entries: entries, seq: max(seq, entries.last?.seq ?? 0)), seq > since)
            }
        }
    }

    // MARK: Blobs

    /// The blob's size, else the size of the manifest stored under the hash (an item names either alike), else
    /// nil.
    func blobSize(_ cid: String, _ sha256: String) throws(ServerFailure) -> Int64? {
        if let size = try blobs.size(cid, sha256) { return size }
        return try manifest(cid, sha256)?.size
    }

    /// What a blob GET of `sha256` serves: the blob, else the content of the manifest stored under the hash
    /// (its chunks in order, zeros for its holes); nil when neither is stored, or when a chunk the manifest
    /// names is not (set aside as damaged): then an upload of the content sends the chunk again.
    func content(_ cid: String, _ sha256: String) throws(ServerFailure) -> StoredContent? {
        if let size = try blobs.size(cid, sha256) {
            let whole = ContentSegment(start: 0, length: size, blob: sha256)
            return StoredContent(size: size, segments: size == 0 ? [] : [whole])
        }
        guard let manifest = try manifest(cid, sha256) else { return nil }
        var seen = Set<String>()
        for chunk in manifest.chunks {
            guard let sha = chunk.sha256, seen.insert(sha).inserted else { continue }
            if try blobs.size(cid, sha) == nil { return nil }
        }
        var start: Int64 = 0
        let segments = manifest.chunks.map { chunk in
            defer { start += chunk.size }
            return ContentSegment(start: start, length: chunk.size, blob: chunk.sha256)
        }
        return StoredContent(size: manifest.size, segments: segments)
    }

    /// Stores a verified temporary file as the blob (outside any transaction: it may be a long upload);
    /// answers false when the blob was already there.
    /// `replacing`: the stored blob was found damaged (`blobIsSound`), and these bytes replace it.
    func commitBlob(_ cid: String, _ sha256: String, size: Int64, tmpPath: String, replacing: Bool = false) throws(ServerFailure) -> Bool {
        guard try containerExists(cid) else { throw .refused(404, "no such container") }
        let created = try blobs.put(cid, sha256, size: size, tmpPath: tmpPath, replacing: replacing)
        if created { meter.stored(cid, bytes: size) }
        return created
    }

    /// Why a blob GET of `sha256` finds nothing: its stored copy, or one of its chunks', was found corrupt and
    /// set aside (until a device uploads it again), or it is simply not there.
    func absence(_ cid: String, _ sha256: String) throws(ServerFailure) -> String {
        var damaged = blobs.wasSetAside(cid, sha256)
        if !damaged, let manifest = try manifest(cid, sha256) {
            damaged = manifest.chunks.contains { $0.sha256.map { blobs.wasSetAside(cid, $0) } ?? false }
        }
        return damaged ? "no such blob: its stored copy was corrupt and is set aside until a device uploads it again"
            : "no such blob"
    }

    /// Sets aside a blob a read found not to hash to its name: from now on it counts as absent (a GET answers
    /// 404, `chunks/missing` lists it), and the next upload of any file holding it stores it again.
    func setAsideDamaged(_ cid: String, _ sha256: String, size: Int64) {
        do { try blobs.setAsideDamaged(cid, sha256, size: size) } catch {
            Logger("stub").error("cannot set aside the damaged blob \(sha256) of \(cid): \(error)")
        }
    }

    /// Whether the stored blob's bytes hash to its name (all of them read from the blob store).
    func blobIsSound(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) -> Bool {
        try blobs.isSound(cid, sha256, size: size)
    }

    /// Every container's id.
    func containerIDs() throws(ServerFailure) -> [String] {
        try meta.read { (tx) throws(ServerFailure) in try tx.containerIDs() }
    }

    /// The stored ids of the containers of the user with `prefix` ("": the single-token store's user).
    func containerIDs(prefix: String) throws(ServerFailure) -> [String] {
        try containerIDs().filter { prefix.isEmpty ? !$0.contains("~") : $0.hasPrefix(prefix) }
    }

    /// Whether the container holds anything: an item in its root, a key, or something in Recently Deleted. (A
    /// container whose data was deleted whole, and whose Recently Deleted was emptied since, holds nothing.)
    func holdsAnything(_ cid: String) throws(ServerFailure) -> Bool {
        try reading(cid) { (tx) throws(ServerFailure) in
            if try tx.anyLiveChild(cid, parent: WireRules.rootID) != nil { return true }
            if try !tx.kvLiveSizes(cid).isEmpty { return true }
            return try tx.anyInTrash(cid)
        }
    }

    /// What the user with `prefix` stores now (as `UsageMeter` counts it), against `limits`.
    func usage(user: String, prefix: String, limits: UserLimits) throws(ServerFailure) -> UserUsage {
        let cids = try containerIDs(prefix: prefix)
        var usage = UserUsage(user: user, storage: 0, containers: Int64(cids.count), items: 0, limits: limits)
        for cid in cids {
            usage.storage += try meter.bytes(cid) { () throws(ServerFailure) in try blobs.list(cid).reduce(0) { $0 + $1.size } }
            usage.items += try meter.items(cid) { () throws(ServerFailure) in try meta.read { (tx) throws(ServerFailure) in try tx.liveItemCount(cid) } }
        }
        return usage
    }

    /// Removes the blob (or the manifest) with `delete` if no live item, no conflict version of one and no kept
    /// history row names it, inside a writing transaction of its container (which item writes there wait for); answers whether it
    /// was removed.
    func collectBlob(_ cid: String, _ sha256: String, delete: () throws(ServerFailure) -> Void) throws(ServerFailure) -> Bool {
        try writing(cid) { (tx) throws(ServerFailure) in
            guard try !tx.namesBlob(cid, sha256) else { return false }
            try delete()
            return true
        }
    }

    // MARK: Manifests

    /// The manifest stored under the hash, or nil; one that does not decode as the manifest of that hash is
    /// the server's trouble (500).
    func manifest(_ cid: String, _ sha256: String) throws(ServerFailure) -> WireManifest? {
        guard let json = try blobs.manifest(cid, sha256) else { return nil }
        guard let manifest = try? JSONDecoder().decode(WireManifest.self, from: Data(json)),
              manifest.sha256 == sha256 else {
            throw .refused(500, "the stored manifest \(sha256) does not decode")
        }
        return manifest
    }

    /// Stores a well-formed manifest (the caller checked `problem`), replacing one stored before, once every
    /// data chunk it names is stored as a blob of its size: else 409 naming the first that is not. Answers
    /// whether it is new.
    func putManifest(_ cid: String, _ manifest: WireManifest) throws(ServerFailure) -> Bool {
        guard try containerExists(cid) else { throw .refused(404, "no such container") }
        let json = Array(try ServerFailure.coding("a manifest") { try JSONEncoder.wire.encode(manifest) })
        return try withManifestLock(cid) { () throws(ServerFailure) in
            var checked = Set<WireChunk>()
            for chunk in manifest.chunks where checked.insert(chunk).inserted {
                guard let sha = chunk.sha256 else { continue } // a hole
                guard try blobs.size(cid, sha) == chunk.size else { throw .refused(409, "chunk \(sha) is not stored") }
            }
            return try blobs.putManifest(cid, manifest.sha256, json: json)
        }
    }

    /// Runs `body` holding the container's manifest lock: a manifest's put while it checks its chunks and
    /// stores it, a collection pass while it finds the chunks the manifests keep and removes the others. So a
    /// put either finds its chunk removed (409, and the client uploads it again) or its manifest is seen by the
    /// pass. This server's lock, then the one every server sharing the metadata store sees.
    func withManifestLock<T>(_ cid: String, _ body: () throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        let lock = manifestLocks.withLock { locks in
            if let lock = locks[cid] { return lock }
            let lock = NSLock()
            locks[cid] = lock
            return lock
        }
        lock.lock()
        defer { lock.unlock() }
        return try meta.withSharedLock("ubiquityfs manifests " + cid, body)
    }

    // MARK: Seeding

    /// Adds `folders` folders below the root, `perFolder[i]` empty files in the i-th, in one transaction
    /// (`remote seed --items`, for measuring a large container without pushing it item by item). Every file
    /// holds the empty content, which needs no blob; names are `NAME_PREFIX-%07d.txt`, unique per folder.
    func seedMany(_ cid: String, perFolder: [Int], device: String, mtime: Int64) throws(ServerFailure) -> Int {
        try writing(cid) { (tx) throws(ServerFailure) in
            var count = 0
            for (f, files) in perFolder.enumerated() {
                let dir = WireItem(id: randomHex(bytes: 16), parent: WireRules.rootID,
                                   name: String(format: "folder-%05d", f), kind: .dir, mode: 0o755,
                                   mtime: mtime, size: 0, sha256: "", device: device)
                _ = try store(tx, cid, dir, parentPath: "")
                for i in 0..<files {
                    _ = try store(tx, cid, WireItem(
                        id: randomHex(bytes: 16), parent: dir.id, name: String(format: "document-%07d.txt", i),
                        kind: .file, mode: 0o644, mtime: mtime, size: 0, sha256: emptySHA256, device: device),
                                  parentPath: dir.name)
                }
                count += files + 1
            }
            return count
        }
    }

    /// Finds or creates the directories along `dirs` below the root, then creates or replaces the leaf.
    func seed(_ cid: String, dirs: [String], leaf: String?, content: (sha256: String, size: Int64)?,
              device: String, mtime: Int64, mode: UInt32? = nil) throws(ServerFailure) -> WireItem {
        try writing(cid) { (tx) throws(ServerFailure) in
            var parent = WireRules.rootID
            func makeDir(_ name: String, under parent: String) throws(ServerFailure) -> WireItem {
                if let existing = try tx.liveChild(cid, parent: parent, name: name, except: nil) {
                    guard existing.kind == .dir else { throw .refused(409, "\(name) is a file", current: existing) }
                    return existing
                }
                let dir = WireItem(id: randomHex(bytes: 16), parent: parent, name: name, kind: .dir, mode: 0o755,
                                   mtime: mtime, size: 0, sha256: "", device: device)
                return try store(tx, cid, dir)
            }
            for name in dirs { parent = try makeDir(name, under: parent).id }
            guard let leaf else {
                guard let root = try tx.item(cid, parent) else { throw .refused(404, "no root") }
                return root
            }
            guard let content else {
                var dir = try makeDir(leaf, under: parent)
                if let mode, dir.mode != mode {
                    dir.mode = mode
                    dir = try store(tx, cid, dir)
                }
                return dir
            }
            try checkContent(tx, cid, sha256: content.sha256, size: content.size, what: leaf)
            var file: WireItem
            if let existing = try tx.liveChild(cid, parent: parent, name: leaf, except: nil) {
                guard existing.kind == .file else { throw .refused(409, "\(leaf) is a directory", current: existing) }
                file = existing
                file.sha256 = content.sha256; file.size = content.size; file.mtime = mtime; file.device = device
                if let mode { file.mode = mode }
            } else {
                file = WireItem(id: randomHex(bytes: 16), parent: parent, name: leaf, kind: .file, mode: mode ?? 0o644,
                                mtime: mtime, size: content.size, sha256: content.sha256, device: device)
            }
            return try store(tx, cid, file)
        }
    }
}

/// Writes a blob's bytes to a temporary file while hashing them.
final class BlobWriter {
    let tmpPath: String
    private let fd: FileDescriptor
    private var hasher: SHA256Hasher? = SHA256Hasher()
    private(set) var written: Int64 = 0
    private(set) var failure: Errno?
    private var closed = false

    init(tmpDir: String) throws(ServerFailure) {
        tmpPath = tmpDir + "/" + randomHex(bytes: 12) + ".part"
        fd = try ServerFailure.file("creating \(tmpPath)", try FileDescriptor.open(tmpPath, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600))
    }

    deinit { discard() }

    func write(_ buffer: UnsafeRawBufferPointer) {
        guard failure == nil, !closed else { return }
        do {
            try fd.writeAll(buffer)
            hasher?.update(buffer)
            written += Int64(buffer.count)
        } catch {
            failure = error
        }
    }

    /// Closes the file and answers the hash of what was written; the file stays for the caller to move.
    func finish() throws(ServerFailure) -> String {
        if let failure { throw ServerFailure(failure, "writing \(tmpPath)") }
        guard !closed, var h = hasher.take() else { throw .refused(500, "upload already finished") }
        fd.close(); closed = true
        return h.finalizeHex()
    }

    /// Closes and removes the temporary file (harmless after a successful move).
    func discard() {
        if !closed { fd.close(); closed = true }
        removeLeftover(tmpPath)
    }
}
