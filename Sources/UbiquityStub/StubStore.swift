// The stub's state: containers, items and blobs in one SQLite database plus content-addressed blob files.
// Every method takes the store's lock; the lock is also the condition long polls wait on.
//
// What must hold: each public method does all its work under `cond`, so a request sees and makes one whole
// state, and every item or key write wakes the long polls. An item write takes the container's next sequence
// number as its version in the same transaction as its row (`writeLocked`), so the feed never skips or repeats a
// change; unique indexes keep versions and live names unique in the database too. A conditional write is checked
// under the lock (If-Match, a live parent directory, no cycle, a free name) and refused with 412, 422 or 409 and
// the item in the way. An item names only a blob that is stored with its size; a blob's row is written only
// after its verified file is in place. A put or delete with a change id is checked against the last change
// applied for its item and device first (`appliedChangeLocked`): a retry is answered as applied and changes
// nothing; a write records its id in its own transaction (`recordChangeLocked`).
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// A refusal that maps onto an HTTP status and an error body.
struct StubFailure: Error, CustomStringConvertible {
    let status: Int
    let message: String
    let current: WireItem?
    init(_ status: Int, _ message: String, current: WireItem? = nil) {
        self.status = status; self.message = message; self.current = current
    }
    var description: String { "\(status) \(message)" }
}

/// A retry of a change already applied: answered `208` with what it made and the item now (not a failure).
struct StubApplied: Error {
    let answer: WireApplied
}

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

/// The first column of the first row as an integer. (Rows are read inside `forEach`: a Row does not outlive
/// its statement.)
private func int64(_ db: Database, _ sql: String, _ params: [SQLValue]) throws -> Int64? {
    var value: Int64?
    try db.forEach(sql, params) { row in if value == nil { value = row.int(0) } }
    return value
}

final class StubStore: @unchecked Sendable {
    private let db: Database
    let blobsDir: String
    let tmpDir: String
    private let cond = NSCondition()
    private var stopping = false

    init(dataDir: String) throws {
        blobsDir = dataDir + "/blobs"
        tmpDir = dataDir + "/tmp"
        try makeDirectories(blobsDir)
        try makeDirectories(tmpDir)
        // Leftovers of uploads cut short by a crash.
        if let names = try? FileManager.default.contentsOfDirectory(atPath: tmpDir) {
            for name in names { try? removeFile(tmpDir + "/" + name) }
        }
        db = try Database(path: dataDir + "/stub.sqlite")
        try db.exec("PRAGMA journal_mode=WAL")
        try db.exec("PRAGMA synchronous=NORMAL")
        try db.exec("""
            CREATE TABLE IF NOT EXISTS containers (id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS items (
                container TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, name TEXT NOT NULL, kind TEXT NOT NULL,
                mode INTEGER NOT NULL, mtime INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL,
                version INTEGER NOT NULL, deleted INTEGER NOT NULL, device TEXT NOT NULL,
                xattrs TEXT NOT NULL, conflicts TEXT NOT NULL,
                PRIMARY KEY (container, id));
            CREATE UNIQUE INDEX IF NOT EXISTS items_by_version ON items (container, version);
            CREATE UNIQUE INDEX IF NOT EXISTS items_live_names ON items (container, parent, name) WHERE deleted = 0;
            CREATE TABLE IF NOT EXISTS blobs (container TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
                PRIMARY KEY (container, sha256));
            """)
        // A symbolic link's target (NULL for every other kind); stores made before links lack the column.
        try db.addColumnIfMissing("items", "target", "TEXT")
        try db.exec("""
            CREATE TABLE IF NOT EXISTS kv (container TEXT NOT NULL, key TEXT NOT NULL, value TEXT,
                mtime INTEGER NOT NULL, device TEXT NOT NULL, deleted INTEGER NOT NULL, seq INTEGER NOT NULL,
                PRIMARY KEY (container, key));
            CREATE INDEX IF NOT EXISTS kv_by_seq ON kv (container, seq);
            """)
        try db.exec("""
            CREATE TABLE IF NOT EXISTS applied_changes (container TEXT NOT NULL, item TEXT NOT NULL,
                device TEXT NOT NULL, change TEXT NOT NULL, digest TEXT NOT NULL, version INTEGER NOT NULL,
                PRIMARY KEY (container, item, device));
            """)
    }

    // MARK: Locking and waking

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        cond.lock(); defer { cond.unlock() }
        return try body()
    }

    /// Wakes long polls so they notice the server stopping; `false` lets them wait again.
    func setStopping(_ value: Bool) {
        locked { stopping = value; cond.broadcast() }
    }

    var isStopping: Bool { locked { stopping } }

    // MARK: Containers

    private func seqLocked(_ cid: String) throws -> Int64? {
        try int64(db, "SELECT seq FROM containers WHERE id = ?", [.text(cid)])
    }

    func containerExists(_ cid: String) throws -> Bool {
        try locked { try seqLocked(cid) != nil }
    }

    /// Creates the container (root and Documents) unless it exists; answers the feed position now.
    func ensureContainer(_ cid: String) throws -> WireContainer {
        guard WireRules.isValidContainerID(cid) else { throw StubFailure(400, "bad container id") }
        return try locked {
            if let seq = try seqLocked(cid) {
                return WireContainer(container: cid, root: WireRules.rootID, token: String(seq))
            }
            try makeDirectories(blobsDir + "/" + cid)
            let now = nowNanoseconds()
            try db.transaction {
                try db.query("INSERT INTO containers (id, seq) VALUES (?, 0)", [.text(cid)])
                let root = WireItem(id: WireRules.rootID, parent: nil, name: "", kind: .dir, mode: 0o755, mtime: now,
                                    size: 0, sha256: "", device: "stub")
                let docs = WireItem(id: WireRules.documentsID, parent: WireRules.rootID, name: "Documents", kind: .dir,
                                    mode: 0o755, mtime: now, size: 0, sha256: "", device: "stub")
                _ = try writeLocked(cid, root)
                _ = try writeLocked(cid, docs)
            }
            cond.broadcast()
            return WireContainer(container: cid, root: WireRules.rootID, token: try String(seqLocked(cid) ?? 0))
        }
    }

    // MARK: Items

    private static let columns = "id, parent, name, kind, mode, mtime, size, sha256, version, deleted, device, xattrs, conflicts, target"

    /// A stored item; xattrs or conflicts that do not decode throw (served empty, a client would take them).
    private static func decodeRow(_ r: Row) throws -> WireItem {
        let xattrs = try JSONDecoder().decode([String: String].self, from: Data(r.text(11).utf8))
        let conflicts = try JSONDecoder().decode([WireConflict].self, from: Data(r.text(12).utf8))
        return WireItem(id: r.text(0), parent: r.optionalText(1), name: r.text(2),
                        kind: ItemKind(rawValue: r.text(3)) ?? .file, mode: UInt32(truncatingIfNeeded: r.int(4)),
                        mtime: r.int(5), size: r.int(6), sha256: r.text(7), version: r.int(8), deleted: r.int(9) != 0,
                        device: r.text(10), xattrs: xattrs, conflicts: conflicts, target: r.optionalText(13))
    }

    private func itemLocked(_ cid: String, _ id: String) throws -> WireItem? {
        var found: WireItem?
        try db.forEach("SELECT \(Self.columns) FROM items WHERE container = ? AND id = ?", [.text(cid), .text(id)]) {
            found = try Self.decodeRow($0)
        }
        return found
    }

    /// The live item named `name` in directory `parent`, other than `except` (names compare byte-wise).
    private func liveChildLocked(_ cid: String, parent: String, name: String, except: String? = nil) throws -> WireItem? {
        var found: WireItem?
        try db.forEach("SELECT \(Self.columns) FROM items WHERE container = ? AND parent = ? AND name = ? AND deleted = 0 AND id != ?",
                       [.text(cid), .text(parent), .text(name), .text(except ?? "")]) { found = try Self.decodeRow($0) }
        return found
    }

    func item(_ cid: String, _ id: String) throws -> WireItem {
        try locked {
            guard try seqLocked(cid) != nil else { throw StubFailure(404, "no such container") }
            guard let item = try itemLocked(cid, id) else { throw StubFailure(404, "no such item") }
            return item
        }
    }

    /// Stores `item` at the container's next version and wakes long polls' waiters (the caller broadcasts).
    private func writeLocked(_ cid: String, _ item: WireItem) throws -> WireItem {
        guard let seq = try seqLocked(cid) else { throw StubFailure(404, "no such container") }
        var stored = item
        stored.version = seq + 1
        let xattrs = String(decoding: try JSONEncoder.wire.encode(stored.xattrs), as: UTF8.self)
        let conflicts = String(decoding: try JSONEncoder.wire.encode(stored.conflicts), as: UTF8.self)
        try db.query("UPDATE containers SET seq = ? WHERE id = ?", [.int(stored.version), .text(cid)])
        try db.query("INSERT OR REPLACE INTO items (container, \(Self.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            .text(cid), .text(stored.id), stored.parent.map { .text($0) } ?? .null, .text(stored.name),
            .text(stored.kind.rawValue), .int(Int64(stored.mode)), .int(stored.mtime), .int(stored.size),
            .text(stored.sha256), .int(stored.version), .int(stored.deleted ? 1 : 0), .text(stored.device),
            .text(xattrs), .text(conflicts), stored.target.map { .text($0) } ?? .null,
        ])
        return stored
    }

    /// Checks the parts of an item that do not depend on the rest of the tree, and normalises it.
    private func validatedLocked(_ cid: String, _ id: String, _ body: WireItem) throws -> WireItem {
        var item = body
        guard item.id == id else { throw StubFailure(400, "the id in the body differs from the path") }
        if id == WireRules.rootID {
            guard item.parent == nil, item.name == "", item.kind == .dir else {
                throw StubFailure(400, "the root has no parent and no name")
            }
        } else {
            guard let parent = item.parent, WireRules.isValidID(parent) else { throw StubFailure(400, "bad parent id") }
            guard WireRules.isValidName(item.name) else { throw StubFailure(400, "bad name") }
        }
        item.mode &= 0o7777
        item.deleted = false
        guard item.device.utf8.count <= 255 else { throw StubFailure(400, "device name too long") }
        if let problem = WireRules.kindProblem(item) { throw StubFailure(400, problem) }
        switch item.kind {
        case .dir:
            item.size = 0; item.sha256 = ""
        case .file:
            try checkContentLocked(cid, sha256: item.sha256, size: item.size, what: "content")
        case .symlink, .fifo, .socket:
            break // checked above: a link's fields follow from its target, and the others are refused
        }
        var xattrBytes = 0
        for (key, value) in item.xattrs {
            guard !key.isEmpty, Data(base64Encoded: value) != nil else { throw StubFailure(400, "bad xattr \(key)") }
            xattrBytes += key.utf8.count + value.utf8.count
        }
        guard xattrBytes <= WireRules.maxXattrBytes else { throw StubFailure(400, "xattrs larger than 64 KiB") }
        var conflictIDs = Set<String>()
        for c in item.conflicts {
            guard WireRules.isValidID(c.id), conflictIDs.insert(c.id).inserted else {
                throw StubFailure(400, "bad or repeated conflict id")
            }
            try checkContentLocked(cid, sha256: c.sha256, size: c.size, what: "conflict \(c.id)")
        }
        return item
    }

    /// A file's hash must name a blob on the stub of the same size (the empty hash needs no blob).
    private func checkContentLocked(_ cid: String, sha256: String, size: Int64, what: String) throws {
        guard isSHA256Hex(sha256), size >= 0 else { throw StubFailure(400, "bad hash or size of \(what)") }
        if sha256 == emptySHA256 {
            guard size == 0 else { throw StubFailure(400, "size of \(what) does not match its blob") }
            return
        }
        guard let blobSize = try blobSizeLocked(cid, sha256) else { throw StubFailure(400, "blob missing for \(what)") }
        guard blobSize == size else { throw StubFailure(400, "size of \(what) does not match its blob") }
    }

    /// Creates or updates an item, conditionally: the rules of WIRE.md "Conditional writes".
    func putItem(_ cid: String, _ id: String, _ body: WireItem, _ condition: WriteCondition,
                 change: WireChangeID? = nil, digest: String = "") throws -> WireItem {
        try locked {
            guard try seqLocked(cid) != nil else { throw StubFailure(404, "no such container") }
            try throwIfAppliedLocked(cid, id, change, digest: digest)
            let item = try validatedLocked(cid, id, body)
            let existing = try itemLocked(cid, id)
            switch condition {
            case .ifNoneMatch:
                if let existing { throw StubFailure(412, "the item exists", current: existing) }
            case .ifMatch(let version):
                guard let existing else { throw StubFailure(404, "no such item") }
                guard existing.version == version else {
                    throw StubFailure(412, "the item is at version \(existing.version)", current: existing)
                }
                guard existing.kind == item.kind else { throw StubFailure(400, "an item cannot change kind") }
            }
            if let parentID = item.parent {
                guard let parent = try itemLocked(cid, parentID), !parent.deleted, parent.kind == .dir else {
                    throw StubFailure(422, "the parent is not a live directory")
                }
                // No cycles: the new parent must not be the item or lie below it.
                var cursor: String? = parentID
                var steps = 0
                while let c = cursor {
                    if c == id { throw StubFailure(422, "an item cannot move below itself") }
                    steps += 1
                    if steps > 100_000 { throw StubFailure(500, "the tree is too deep") }
                    cursor = try itemLocked(cid, c)?.parent
                }
                if let holder = try liveChildLocked(cid, parent: parentID, name: item.name, except: id) {
                    throw StubFailure(409, "the name is taken", current: holder)
                }
            }
            let stored = try db.transaction {
                let stored = try writeLocked(cid, item)
                try recordChangeLocked(cid, id, change, digest: digest, version: stored.version)
                return stored
            }
            cond.broadcast()
            return stored
        }
    }

    /// Deletes an item seen at `version`, leaving a tombstone.
    func deleteItem(_ cid: String, _ id: String, ifMatch version: Int64, device: String,
                    change: WireChangeID? = nil, digest: String = "") throws -> WireItem {
        try locked {
            guard try seqLocked(cid) != nil else { throw StubFailure(404, "no such container") }
            try throwIfAppliedLocked(cid, id, change, digest: digest)
            guard id != WireRules.rootID else { throw StubFailure(400, "the root cannot be deleted") }
            guard let existing = try itemLocked(cid, id) else { throw StubFailure(404, "no such item") }
            if existing.deleted { throw StubFailure(412, "the item is already deleted", current: existing) }
            guard existing.version == version else {
                throw StubFailure(412, "the item is at version \(existing.version)", current: existing)
            }
            if existing.kind == .dir {
                var child: WireItem?
                try db.forEach("SELECT \(Self.columns) FROM items WHERE container = ? AND parent = ? AND deleted = 0 LIMIT 1",
                               [.text(cid), .text(id)]) { child = try Self.decodeRow($0) }
                if let child { throw StubFailure(409, "the directory is not empty", current: child) }
            }
            var tomb = existing
            tomb.deleted = true
            tomb.device = device
            let stored = try db.transaction {
                let stored = try writeLocked(cid, tomb)
                try recordChangeLocked(cid, id, change, digest: digest, version: stored.version)
                return stored
            }
            cond.broadcast()
            return stored
        }
    }

    // MARK: Applied changes

    /// Throws `StubApplied` when `change` is the last change recorded for its item and device: a retry.
    private func throwIfAppliedLocked(_ cid: String, _ id: String, _ change: WireChangeID?, digest: String) throws {
        guard let change, let version = try appliedChangeLocked(cid, id, change, digest: digest) else { return }
        guard let current = try itemLocked(cid, id) else { return }
        throw StubApplied(answer: WireApplied(applied: version, current: current))
    }

    /// The version the change made, when it is the last one applied for (container, item, device); the same
    /// id with another digest (another change under a reused id) is refused with 400.
    private func appliedChangeLocked(_ cid: String, _ id: String, _ change: WireChangeID, digest: String) throws -> Int64? {
        var found: (String, Int64)?
        try db.forEach("SELECT digest, version FROM applied_changes WHERE container = ? AND item = ? AND device = ? AND change = ?",
                       [.text(cid), .text(id), .text(change.device), .text(change.id)]) { found = ($0.text(0), $0.int(1)) }
        guard let (stored, version) = found else { return nil }
        guard stored == digest else { throw StubFailure(400, "change id \(change.id) reused for another change") }
        return version
    }

    /// Records `change` as the last change applied for its item and device (inside the write's transaction).
    private func recordChangeLocked(_ cid: String, _ id: String, _ change: WireChangeID?, digest: String,
                                    version: Int64) throws {
        guard let change else { return }
        try db.query("INSERT OR REPLACE INTO applied_changes (container, item, device, change, digest, version) VALUES (?, ?, ?, ?, ?, ?)",
                     [.text(cid), .text(id), .text(change.device), .text(change.id), .text(digest), .int(version)])
    }

    // MARK: Change feed

    /// Items newer than `since`, waiting up to `wait` seconds for one when there are none.
    func changes(_ cid: String, since: Int64, limit: Int, wait: Int) throws -> WireChanges {
        try locked {
            guard var seq = try seqLocked(cid) else { throw StubFailure(404, "no such container") }
            if seq <= since && wait > 0 {
                let deadline = Date(timeIntervalSinceNow: TimeInterval(wait))
                while seq <= since && !stopping {
                    if !cond.wait(until: deadline) { break }
                    seq = try seqLocked(cid) ?? seq
                }
                seq = try seqLocked(cid) ?? seq
            }
            var items: [WireItem] = []
            try db.forEach("SELECT \(Self.columns) FROM items WHERE container = ? AND version > ? ORDER BY version LIMIT ?",
                           [.text(cid), .int(since), .int(Int64(limit) + 1)]) { items.append(try Self.decodeRow($0)) }
            let more = items.count > limit
            if more { items.removeLast(items.count - limit) }
            let token = more ? items[items.count - 1].version : seq
            return WireChanges(items: items, token: String(token), more: more)
        }
    }

    // MARK: Key-value store

    private static func decodeKV(_ r: Row) throws -> WireKVEntry {
        let value = try r.optionalText(1).map { try JSONDecoder().decode(KVValue.self, from: Data($0.utf8)) }
        return WireKVEntry(key: r.text(0), value: value, mtime: r.int(2), device: r.text(3), deleted: r.int(4) != 0,
                           seq: r.int(5))
    }

    private func kvLocked(_ cid: String, _ key: String) throws -> WireKVEntry? {
        var found: WireKVEntry?
        try db.forEach("SELECT key, value, mtime, device, deleted, seq FROM kv WHERE container = ? AND key = ?",
                       [.text(cid), .text(key)]) { found = try Self.decodeKV($0) }
        return found
    }

    private func kvSeqLocked(_ cid: String) throws -> Int64 {
        try int64(db, "SELECT coalesce(max(seq), 0) FROM kv WHERE container = ?", [.text(cid)]) ?? 0
    }

    /// Applies one write by last-writer-wins and answers the winner: the stored entry when it is later (the
    /// write is then dropped), else the write at the next feed position. A value that would pass Apple's limits
    /// is refused with 413 and stores nothing.
    func putKV(_ cid: String, _ entry: WireKVEntry) throws -> WireKVEntry {
        guard KVLimits.isValidKey(entry.key) else { throw StubFailure(400, KVLimits.Violation.keyTooLong.message) }
        guard entry.deleted == (entry.value == nil) else { throw StubFailure(400, "a value, or deleted, not both") }
        return try locked {
            guard try seqLocked(cid) != nil else { throw StubFailure(404, "no such container") }
            if let current = try kvLocked(cid, entry.key), !entry.wins(over: current) { return current }
            var live: [String: Int] = [:]
            try db.forEach("SELECT key, value FROM kv WHERE container = ? AND deleted = 0", [.text(cid)]) { r in
                let v = try r.optionalText(1).map { try JSONDecoder().decode(KVValue.self, from: Data($0.utf8)) }
                live[r.text(0)] = v?.byteSize ?? 0
            }
            if let v = KVLimits.violation(key: entry.key, value: entry.value, live: live) {
                throw StubFailure(413, "quota: " + v.message)
            }
            var stored = entry
            stored.seq = try kvSeqLocked(cid) + 1
            let json = try entry.value.map { String(decoding: try JSONEncoder.wire.encode($0), as: UTF8.self) }
            try db.query("""
                INSERT INTO kv (container, key, value, mtime, device, deleted, seq) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(container, key) DO UPDATE SET value = excluded.value, mtime = excluded.mtime,
                  device = excluded.device, deleted = excluded.deleted, seq = excluded.seq
                """, [.text(cid), .text(entry.key), json.map { .text($0) } ?? .null, .int(entry.mtime),
                      .text(entry.device), .int(entry.deleted ? 1 : 0), .int(stored.seq)])
            cond.broadcast()
            return stored
        }
    }

    /// Entries written after `since`, waiting up to `wait` seconds for one when there are none.
    func kvChanges(_ cid: String, since: Int64, wait: Int) throws -> WireKVChanges {
        try locked {
            guard try seqLocked(cid) != nil else { throw StubFailure(404, "no such container") }
            var seq = try kvSeqLocked(cid)
            if seq <= since && wait > 0 {
                let deadline = Date(timeIntervalSinceNow: TimeInterval(wait))
                while seq <= since && !stopping {
                    if !cond.wait(until: deadline) { break }
                    seq = try kvSeqLocked(cid)
                }
            }
            var entries: [WireKVEntry] = []
            try db.forEach("SELECT key, value, mtime, device, deleted, seq FROM kv WHERE container = ? AND seq > ? ORDER BY seq",
                           [.text(cid), .int(since)]) { entries.append(try Self.decodeKV($0)) }
            return WireKVChanges(entries: entries, seq: max(seq, entries.last?.seq ?? 0))
        }
    }

    // MARK: Blobs

    /// The blob file's path; both parts are validated before they are used.
    func blobPath(_ cid: String, _ sha256: String) -> String {
        precondition(WireRules.isValidContainerID(cid) && isSHA256Hex(sha256))
        return blobsDir + "/" + cid + "/" + sha256
    }

    private func blobSizeLocked(_ cid: String, _ sha256: String) throws -> Int64? {
        if sha256 == emptySHA256 { return 0 }
        return try int64(db, "SELECT size FROM blobs WHERE container = ? AND sha256 = ?", [.text(cid), .text(sha256)])
    }

    /// The blob's size, or nil when the stub does not hold it.
    func blobSize(_ cid: String, _ sha256: String) throws -> Int64? {
        try locked { try blobSizeLocked(cid, sha256) }
    }

    /// Moves a verified temporary file into place; answers false when the blob was already there.
    func commitBlob(_ cid: String, _ sha256: String, size: Int64, tmpPath: String) throws -> Bool {
        try locked {
            guard try seqLocked(cid) != nil else { throw StubFailure(404, "no such container") }
            if try blobSizeLocked(cid, sha256) != nil {
                try? removeFile(tmpPath)
                return false
            }
            try renameFile(tmpPath, blobPath(cid, sha256))
            try db.query("INSERT OR REPLACE INTO blobs (container, sha256, size) VALUES (?, ?, ?)",
                         [.text(cid), .text(sha256), .int(size)])
            return true
        }
    }

    // MARK: Seeding

    /// Finds or creates the directories along `dirs` below the root, then creates or replaces the leaf.
    func seed(_ cid: String, dirs: [String], leaf: String?, content: (sha256: String, size: Int64)?,
              device: String, mtime: Int64, mode: UInt32? = nil) throws -> WireItem {
        try locked {
            var parent = WireRules.rootID
            func makeDir(_ name: String, under parent: String) throws -> WireItem {
                if let existing = try liveChildLocked(cid, parent: parent, name: name) {
                    guard existing.kind == .dir else { throw StubFailure(409, "\(name) is a file", current: existing) }
                    return existing
                }
                let dir = WireItem(id: randomHex(bytes: 16), parent: parent, name: name, kind: .dir, mode: 0o755,
                                   mtime: mtime, size: 0, sha256: "", device: device)
                return try db.transaction { try writeLocked(cid, dir) }
            }
            defer { cond.broadcast() }
            for name in dirs { parent = try makeDir(name, under: parent).id }
            guard let leaf else {
                guard let root = try itemLocked(cid, parent) else { throw StubFailure(404, "no root") }
                return root
            }
            guard let content else {
                var dir = try makeDir(leaf, under: parent)
                if let mode, dir.mode != mode {
                    dir.mode = mode
                    dir = try db.transaction { try writeLocked(cid, dir) }
                }
                return dir
            }
            _ = try checkContentLocked(cid, sha256: content.sha256, size: content.size, what: leaf)
            var file: WireItem
            if let existing = try liveChildLocked(cid, parent: parent, name: leaf) {
                guard existing.kind == .file else { throw StubFailure(409, "\(leaf) is a directory", current: existing) }
                file = existing
                file.sha256 = content.sha256; file.size = content.size; file.mtime = mtime; file.device = device
                if let mode { file.mode = mode }
            } else {
                file = WireItem(id: randomHex(bytes: 16), parent: parent, name: leaf, kind: .file, mode: mode ?? 0o644,
                                mtime: mtime, size: content.size, sha256: content.sha256, device: device)
            }
            return try db.transaction { try writeLocked(cid, file) }
        }
    }
}

/// Writes a blob's bytes to a temporary file while hashing them.
final class BlobWriter {
    let tmpPath: String
    private let fd: FileDescriptor
    private var hasher: SHA256Hasher? = SHA256Hasher()
    private(set) var written: Int64 = 0
    private(set) var failure: Error?
    private var closed = false

    init(tmpDir: String) throws {
        tmpPath = tmpDir + "/" + randomHex(bytes: 12) + ".part"
        fd = try FileDescriptor.open(tmpPath, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
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
    func finish() throws -> String {
        if let failure { throw failure }
        guard !closed, var h = hasher.take() else { throw StubFailure(500, "upload already finished") }
        fd.close(); closed = true
        return h.finalizeHex()
    }

    /// Closes and removes the temporary file (harmless after a successful move).
    func discard() {
        if !closed { fd.close(); closed = true }
        try? removeFile(tmpPath)
    }
}
