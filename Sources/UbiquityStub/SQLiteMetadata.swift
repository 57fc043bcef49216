// The embedded metadata storage: one SQLite file, `DATA/stub.sqlite`, in the schema the stub has always used
// (an existing data directory opens unchanged). One process owns the file; its one connection serves every
// transaction in turn, first come first served (so one client's long batch, which gives its turn up while others
// wait, never stalls another's request for long), so a transaction sees and makes one whole state, and commits
// wake the in-process notifier.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the connection's, then the notifier's (a commit
// wakes it).
import Foundation
import UbiquityBase

final class SQLiteMetadata: StubMetadata, Sendable {
    /// The connection, one transaction at a time, in the order they asked.
    private let connection: Turns<Database>
    private let local = LocalNotifier()
    var notifier: any ChangeNotifier { local }

    init(path: String) throws(ServerFailure) {
        let raw = try ServerFailure.database { try Database(path: path) }
        let db = SQLiteConnection(db: raw)
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
            CREATE TABLE IF NOT EXISTS applied_changes (container TEXT NOT NULL, item TEXT NOT NULL,
                device TEXT NOT NULL, change TEXT NOT NULL, digest TEXT NOT NULL, version INTEGER NOT NULL,
                PRIMARY KEY (container, item, device));
            """)
        for sql in AccountTables.statements { try db.exec(sql) }
        // Stores made before history get the table with one row per live item, as of the upgrade.
        let hadHistory = try db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'history'").count > 0
        for sql in HistoryTable.statements(integer: "INTEGER", boolean: "INTEGER") { try db.exec(sql) }
        if !hadHistory {
            try db.exec(HistoryTable.backfill(now: nowNanoseconds(), notDeleted: "0", orIgnore: ("OR IGNORE ", "")))
        }
        // Tables made before rows kept xattrs gain the column, NULL in their old rows (xattrs unknown).
        try db.addColumnIfMissing("history", "xattrs", "TEXT")
        // and before deletions of an app's data, the batch column (NULL: no batch).
        try db.addColumnIfMissing("history", "batch", "TEXT")
        connection = Turns(raw)
    }

    func write<T>(_ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        try connection.withTurn { (db) throws(ServerFailure) in
            try ServerFailure.database { try db.transaction { try body(SQLiteTransaction(db: SQLiteConnection(db: db))) } }
        }
    }

    func read<T>(_ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        try connection.withTurn { (db) throws(ServerFailure) in try body(SQLiteTransaction(db: SQLiteConnection(db: db))) }
    }

    var othersWaiting: Bool { connection.othersWaiting }

    func close() {}

    /// One server per SQLite store (its data folder): the caller's own lock is the only one there is.
    func withSharedLock<T>(_ name: String, _ body: () throws(ServerFailure) -> T) throws(ServerFailure) -> T { try body() }
}

/// UbiquityBase's Database, its failures as ServerFailures.
private struct SQLiteConnection {
    let db: Database

    func exec(_ sql: String) throws(ServerFailure) { try ServerFailure.database { try db.exec(sql) } }

    @discardableResult
    func query(_ sql: String, _ params: [SQLValue] = []) throws(ServerFailure) -> [Values] {
        try ServerFailure.database { try db.query(sql, params) }
    }

    func forEach(_ sql: String, _ params: [SQLValue] = [], _ body: (Row) throws(ServerFailure) -> Void) throws(ServerFailure) {
        try ServerFailure.database { try db.forEach(sql, params) { (r) throws(ServerFailure) in try body(r) } }
    }

    func first<T>(_ sql: String, _ params: [SQLValue] = [], _ pick: (Row) throws(ServerFailure) -> T?) throws(ServerFailure) -> T? {
        try ServerFailure.database { try db.first(sql, params) { (r) throws(ServerFailure) in try pick(r) } }
    }

    func addColumnIfMissing(_ table: String, _ column: String, _ definition: String) throws(ServerFailure) {
        try ServerFailure.database { try db.addColumnIfMissing(table, column, definition) }
    }

    var changes: Int { db.changes }
}

/// The primitives on the one connection, called under the metadata's lock.
private struct SQLiteTransaction: MetadataTransaction {
    let db: SQLiteConnection
    static let columns = "id, parent, name, kind, mode, mtime, size, sha256, version, deleted, device, xattrs, conflicts, target"

    func savepoint<T>(_ body: () throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        try db.exec("SAVEPOINT entry")
        do {
            let result = try body()
            try db.exec("RELEASE entry")
            return result
        } catch {
            try db.exec("ROLLBACK TO entry")
            try db.exec("RELEASE entry")
            throw error
        }
    }

    private func int64(_ sql: String, _ params: [SQLValue]) throws(ServerFailure) -> Int64? {
        try db.first(sql, params) { $0.int(0) }
    }

    /// A stored item; xattrs or conflicts that do not decode throw (served empty, a client would take them).
    private static func decodeRow(_ r: Row) throws(ServerFailure) -> WireItem {
        WireItem(id: r.text(0), parent: r.optionalText(1), name: r.text(2),
                 kind: ItemKind(rawValue: r.text(3)) ?? .file, mode: UInt32(truncatingIfNeeded: r.int(4)),
                 mtime: r.int(5), size: r.int(6), sha256: r.text(7), version: r.int(8), deleted: r.int(9) != 0,
                 device: r.text(10), xattrs: try MetadataCoding.xattrs(r.text(11)),
                 conflicts: try MetadataCoding.conflicts(r.text(12)), target: r.optionalText(13))
    }

    private func oneItem(_ sql: String, _ params: [SQLValue]) throws(ServerFailure) -> WireItem? {
        var found: WireItem?
        try db.forEach(sql, params) { (r) throws(ServerFailure) in if found == nil { found = try Self.decodeRow(r) } }
        return found
    }

    func containerSeq(_ cid: String) throws(ServerFailure) -> Int64? {
        try int64("SELECT seq FROM containers WHERE id = ?", [.text(cid)])
    }

    func lockContainer(_ cid: String) throws(ServerFailure) -> Int64? { try containerSeq(cid) }

    func createContainer(_ cid: String) throws(ServerFailure) -> Bool {
        try db.query("INSERT OR IGNORE INTO containers (id, seq) VALUES (?, 0)", [.text(cid)])
        return db.changes > 0
    }

    func nextSeq(_ cid: String) throws(ServerFailure) -> Int64 {
        try db.query("UPDATE containers SET seq = seq + 1 WHERE id = ?", [.text(cid)])
        guard let seq = try containerSeq(cid) else { throw .refused(404, "no such container") }
        return seq
    }

    func item(_ cid: String, _ id: String) throws(ServerFailure) -> WireItem? {
        try oneItem("SELECT \(Self.columns) FROM items WHERE container = ? AND id = ?", [.text(cid), .text(id)])
    }

    func liveChild(_ cid: String, parent: String, name: String, except: String?) throws(ServerFailure) -> WireItem? {
        try oneItem("SELECT \(Self.columns) FROM items WHERE container = ? AND parent = ? AND name = ? AND deleted = 0 AND id != ?",
                    [.text(cid), .text(parent), .text(name), .text(except ?? "")])
    }

    func anyLiveChild(_ cid: String, parent: String) throws(ServerFailure) -> WireItem? {
        try oneItem("SELECT \(Self.columns) FROM items WHERE container = ? AND parent = ? AND deleted = 0 LIMIT 1",
                    [.text(cid), .text(parent)])
    }

    func writeItem(_ cid: String, _ item: WireItem) throws(ServerFailure) {
        try db.query("INSERT OR REPLACE INTO items (container, \(Self.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            .text(cid), .text(item.id), item.parent.map { .text($0) } ?? .null, .text(item.name),
            .text(item.kind.rawValue), .int(Int64(item.mode)), .int(item.mtime), .int(item.size),
            .text(item.sha256), .int(item.version), .int(item.deleted ? 1 : 0), .text(item.device),
            .text(try MetadataCoding.json(item.xattrs)), .text(try MetadataCoding.json(item.conflicts)),
            item.target.map { .text($0) } ?? .null,
        ])
    }

    func items(_ cid: String, after since: Int64, limit: Int) throws(ServerFailure) -> [WireItem] {
        var items: [WireItem] = []
        try db.forEach("SELECT \(Self.columns) FROM items WHERE container = ? AND version > ? ORDER BY version LIMIT ?",
                       [.text(cid), .int(since), .int(Int64(limit))]) { (r) throws(ServerFailure) in items.append(try Self.decodeRow(r)) }
        return items
    }

    private static func decodeKV(_ r: Row) throws(ServerFailure) -> WireKVEntry {
        WireKVEntry(key: r.text(0), value: try MetadataCoding.kvValue(r.optionalText(1)), mtime: r.int(2),
                    device: r.text(3), deleted: r.int(4) != 0, seq: r.int(5))
    }

    func kvEntry(_ cid: String, _ key: String) throws(ServerFailure) -> WireKVEntry? {
        var found: WireKVEntry?
        try db.forEach("SELECT key, value, mtime, device, deleted, seq FROM kv WHERE container = ? AND key = ?",
                       [.text(cid), .text(key)]) { (r) throws(ServerFailure) in found = try Self.decodeKV(r) }
        return found
    }

    func kvLiveSizes(_ cid: String) throws(ServerFailure) -> [String: Int] {
        var live: [String: Int] = [:]
        try db.forEach("SELECT key, value FROM kv WHERE container = ? AND deleted = 0", [.text(cid)]) { (r) throws(ServerFailure) in
            live[r.text(0)] = try MetadataCoding.kvValue(r.optionalText(1))?.byteSize ?? 0
        }
        return live
    }

    func kvSeq(_ cid: String) throws(ServerFailure) -> Int64 {
        try int64("SELECT coalesce(max(seq), 0) FROM kv WHERE container = ?", [.text(cid)]) ?? 0
    }

    func kvPut(_ cid: String, _ entry: WireKVEntry) throws(ServerFailure) {
        let json = try entry.value.map { (value) throws(ServerFailure) in try MetadataCoding.json(value) }
        try db.query("""
            INSERT INTO kv (container, key, value, mtime, device, deleted, seq) VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(container, key) DO UPDATE SET value = excluded.value, mtime = excluded.mtime,
              device = excluded.device, deleted = excluded.deleted, seq = excluded.seq
            """, [.text(cid), .text(entry.key), json.map { .text($0) } ?? .null, .int(entry.mtime),
                  .text(entry.device), .int(entry.deleted ? 1 : 0), .int(entry.seq)])
    }

    func kvEntries(_ cid: String, after since: Int64) throws(ServerFailure) -> [WireKVEntry] {
        var entries: [WireKVEntry] = []
        try db.forEach("SELECT key, value, mtime, device, deleted, seq FROM kv WHERE container = ? AND seq > ? ORDER BY seq",
                       [.text(cid), .int(since)]) { (r) throws(ServerFailure) in entries.append(try Self.decodeKV(r)) }
        return entries
    }

    func appliedChange(_ cid: String, item: String, device: String) throws(ServerFailure) -> AppliedChange? {
        var found: AppliedChange?
        try db.forEach("SELECT change, digest, version FROM applied_changes WHERE container = ? AND item = ? AND device = ?",
                       [.text(cid), .text(item), .text(device)]) {
            found = AppliedChange(device: device, change: $0.text(0), digest: $0.text(1), version: $0.int(2))
        }
        return found
    }

    func recordChange(_ cid: String, item: String, _ change: AppliedChange) throws(ServerFailure) {
        try db.query("INSERT OR REPLACE INTO applied_changes (container, item, device, change, digest, version) VALUES (?, ?, ?, ?, ?, ?)",
                     [.text(cid), .text(item), .text(change.device), .text(change.change), .text(change.digest),
                      .int(change.version)])
    }

    func containerIDs() throws(ServerFailure) -> [String] {
        var ids: [String] = []
        try db.forEach("SELECT id FROM containers ORDER BY id", []) { ids.append($0.text(0)) }
        return ids
    }

    func namesBlob(_ cid: String, _ sha256: String) throws(ServerFailure) -> Bool {
        // A hash inside the conflicts' JSON counts as a reference (erring only towards keeping).
        if try int64("SELECT 1 FROM items WHERE container = ? AND deleted = 0 AND (sha256 = ? OR instr(conflicts, ?) > 0) LIMIT 1",
                     [.text(cid), .text(sha256), .text(sha256)]) != nil { return true }
        return try int64("SELECT 1 FROM history WHERE container = ? AND sha256 = ? LIMIT 1", [.text(cid), .text(sha256)]) != nil
    }

    // MARK: History

    private static func decodeVersion(_ r: Row) throws(ServerFailure) -> WireVersion {
        // Stored xattrs that do not decode are a damaged row: an error, as for an item, never a version without them.
        try WireVersion(id: r.text(0), version: r.int(1), at: r.int(2), path: r.text(3), deleted: r.int(4) != 0,
                    parent: r.optionalText(5), name: r.text(6), kind: ItemKind(rawValue: r.text(7)) ?? .file,
                    mode: UInt32(truncatingIfNeeded: r.int(8)), mtime: r.int(9), size: r.int(10), sha256: r.text(11),
                    device: r.text(12), target: r.optionalText(13),
                    xattrs: r.optionalText(14).map { (text) throws(ServerFailure) in try MetadataCoding.xattrs(text) },
                    batch: r.optionalText(15).flatMap(WireDataBatch.init))
    }

    private func versions(_ sql: String, _ params: [SQLValue]) throws(ServerFailure) -> [WireVersion] {
        var rows: [WireVersion] = []
        try db.forEach(sql, params) { (r) throws(ServerFailure) in rows.append(try Self.decodeVersion(r)) }
        return rows
    }

    func appendHistory(_ cid: String, _ row: WireVersion) throws(ServerFailure) {
        try db.query("INSERT INTO history (container, \(HistoryTable.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            .text(cid), .text(row.id), .int(row.version), .int(row.at), .text(row.path), .int(row.deleted ? 1 : 0),
            row.parent.map { .text($0) } ?? .null, .text(row.name), .text(row.kind.rawValue), .int(Int64(row.mode)),
            .int(row.mtime), .int(row.size), .text(row.sha256), .text(row.device), row.target.map { .text($0) } ?? .null,
            try row.xattrs.map { (value) throws(ServerFailure) in .text(try MetadataCoding.json(value)) } ?? .null,
            row.batch.map { .text($0.description) } ?? .null,
        ])
    }

    func history(_ cid: String, _ id: String) throws(ServerFailure) -> [WireVersion] {
        try versions("SELECT \(HistoryTable.columns) FROM history WHERE container = ? AND id = ? ORDER BY version DESC",
                     [.text(cid), .text(id)])
    }

    func trash(_ cid: String, parent: String?) throws(ServerFailure) -> [WireVersion] {
        let columns = HistoryTable.columns.split(separator: ",").map { "h." + $0.trimmingCharacters(in: .whitespaces) }
        return try versions("""
            SELECT \(columns.joined(separator: ", ")) FROM history h
            JOIN items i ON i.container = h.container AND i.version = h.version
            WHERE h.container = ? AND i.deleted = 1 \(parent == nil ? "" : "AND h.parent = ?") ORDER BY h.version DESC
            """, [.text(cid)] + (parent.map { [.text($0)] } ?? []))
    }

    func historyStamps(_ cid: String, olderThrough: Int64, deletedThrough: Int64) throws(ServerFailure) -> [HistoryStamp] {
        var stamps: [HistoryStamp] = []
        try db.forEach("""
            SELECT id, version, at, deleted FROM history WHERE container = ?1 AND id IN (
              SELECT h.id FROM history h JOIN items i ON i.container = h.container AND i.id = h.id
              WHERE h.container = ?1 AND h.at <= max(?2, ?3)
                AND ((h.version <> i.version AND h.at <= ?2) OR (h.version = i.version AND i.deleted = 1 AND h.at <= ?3)))
            ORDER BY id, version
            """, [.text(cid), .int(olderThrough), .int(deletedThrough)]) {
            stamps.append(HistoryStamp(id: $0.text(0), version: $0.int(1), at: $0.int(2), deleted: $0.int(3) != 0))
        }
        return stamps
    }

    func deleteHistoryRows(_ cid: String, versions: [Int64]) throws(ServerFailure) -> Int {
        var gone = 0
        for v in versions {
            try db.query("DELETE FROM history WHERE container = ? AND version = ?", [.text(cid), .int(v)])
            gone += db.changes
        }
        return gone
    }

    func deleteHistory(_ cid: String, id: String) throws(ServerFailure) -> Int {
        try db.query("DELETE FROM history WHERE container = ? AND id = ?", [.text(cid), .text(id)])
        return db.changes
    }

    func namedContents(_ cid: String) throws(ServerFailure) -> [NamedContent] {
        var named: [NamedContent] = []
        try db.forEach("SELECT sha256, size, conflicts FROM items WHERE container = ? AND deleted = 0 AND kind = 'file'",
                       [.text(cid)]) { (r) throws(ServerFailure) in
            named.append(NamedContent(sha256: r.text(0), size: r.int(1), holder: .live))
            for c in try MetadataCoding.conflicts(r.text(2)) {
                named.append(NamedContent(sha256: c.sha256, size: c.size, holder: .live))
            }
        }
        try db.forEach("""
            SELECT h.sha256, h.size, i.deleted FROM history h JOIN items i ON i.container = h.container AND i.id = h.id
            WHERE h.container = ? AND h.kind = 'file'
            """, [.text(cid)]) {
            named.append(NamedContent(sha256: $0.text(0), size: $0.int(1), holder: $0.int(2) != 0 ? .trash : .history))
        }
        return named
    }

    // MARK: Rewind

    func liveChildren(_ cid: String, parent: String) throws(ServerFailure) -> [WireItem] {
        var items: [WireItem] = []
        try db.forEach("SELECT \(Self.columns) FROM items WHERE container = ? AND parent = ? AND deleted = 0",
                       [.text(cid), .text(parent)]) { (r) throws(ServerFailure) in items.append(try Self.decodeRow(r)) }
        return items
    }

    func liveItems(_ cid: String, naming sha256: String) throws(ServerFailure) -> [WireItem] {
        var items: [WireItem] = []
        try db.forEach("""
            SELECT \(Self.columns) FROM items WHERE container = ? AND deleted = 0 AND (sha256 = ? OR instr(conflicts, ?) > 0)
            """, [.text(cid), .text(sha256), .text(sha256)]) { (r) throws(ServerFailure) in items.append(try Self.decodeRow(r)) }
        return items
    }

    func historyRow(_ cid: String, _ id: String, through: Int64) throws(ServerFailure) -> WireVersion? {
        try versions("""
            SELECT \(HistoryTable.columns) FROM history WHERE container = ? AND id = ? AND at <= ?
            ORDER BY version DESC LIMIT 1
            """, [.text(cid), .text(id), .int(through)]).first
    }

    func historyChildren(_ cid: String, parent: String, through: Int64) throws(ServerFailure) -> [WireVersion] {
        let columns = HistoryTable.columns.split(separator: ",").map { "h." + $0.trimmingCharacters(in: .whitespaces) }
        return try versions("""
            SELECT \(columns.joined(separator: ", ")) FROM history h
            WHERE \(HistoryTable.newestThrough(container: "?1", parent: "?2", time: "?3")) ORDER BY h.version
            """, [.text(cid), .text(parent), .int(through)])
    }

    func setting(_ key: String) throws(ServerFailure) -> String? {
        try db.first("SELECT value FROM settings WHERE key = ?", [.text(key)]) { $0.text(0) }
    }

    func claimSetting(_ key: String, _ value: String) throws(ServerFailure) -> Bool {
        try db.query("INSERT OR IGNORE INTO settings (key, value) VALUES (?, ?)", [.text(key), .text(value)])
        return db.changes > 0
    }

    func users() throws(ServerFailure) -> [StubUser] {
        var users: [StubUser] = []
        try db.forEach("SELECT name, prefix, created FROM users ORDER BY name", []) {
            users.append(StubUser(name: $0.text(0), prefix: $0.text(1), created: $0.int(2)))
        }
        return users
    }

    func insertUser(_ user: StubUser) throws(ServerFailure) -> Bool {
        try db.query("INSERT OR IGNORE INTO users (name, prefix, created) VALUES (?, ?, ?)",
                     [.text(user.name), .text(user.prefix), .int(user.created)])
        return db.changes > 0
    }

    func deleteUser(_ name: String) throws(ServerFailure) -> Bool {
        try db.query("DELETE FROM shares WHERE owner = ?1 OR participant = ?1", [.text(name)])
        try db.query("DELETE FROM devices WHERE owner = ?", [.text(name)])
        try db.query("DELETE FROM user_limits WHERE name = ?", [.text(name)])
        try db.query("DELETE FROM users WHERE name = ?", [.text(name)])
        return db.changes > 0
    }

    func insertDevice(_ device: StubDevice, keyHash: String) throws(ServerFailure) -> Bool {
        try db.query("INSERT OR IGNORE INTO devices (owner, name, key_hash, created, revoked) VALUES (?, ?, ?, ?, NULL)",
                     [.text(device.owner), .text(device.name), .text(keyHash), .int(device.created)])
        return db.changes > 0
    }

    private static func decodeDevice(_ r: Row) -> StubDevice {
        StubDevice(owner: r.text(0), name: r.text(1), created: r.int(2), revoked: r.isNull(3) ? nil : r.int(3))
    }

    func devices(owner: String?) throws(ServerFailure) -> [StubDevice] {
        var devices: [StubDevice] = []
        try db.forEach("SELECT owner, name, created, revoked FROM devices WHERE ?1 IS NULL OR owner = ?1 ORDER BY owner, name",
                       [owner.map { .text($0) } ?? .null]) { devices.append(Self.decodeDevice($0)) }
        return devices
    }

    func revokeDevice(owner: String, name: String, at: Int64) throws(ServerFailure) -> Bool {
        try db.query("UPDATE devices SET revoked = ? WHERE owner = ? AND name = ? AND revoked IS NULL",
                     [.int(at), .text(owner), .text(name)])
        return db.changes > 0
    }

    func device(keyHash: String) throws(ServerFailure) -> (StubDevice, String)? {
        try db.first("SELECT d.owner, d.name, d.created, d.revoked, u.prefix FROM devices d "
                     + "JOIN users u ON u.name = d.owner WHERE d.key_hash = ?", [.text(keyHash)]) {
            (Self.decodeDevice($0), $0.text(4))
        }
    }

    private static let shareColumns = "id, container, folder, owner, participant, read_only, created"

    private static func decodeShare(_ r: Row) -> StubShare {
        StubShare(id: r.text(0), container: r.text(1), folder: r.text(2), owner: r.text(3), participant: r.text(4),
                  readOnly: r.int(5) != 0, created: r.int(6))
    }

    func upsertShare(_ share: StubShare) throws(ServerFailure) -> StubShare {
        try db.query("""
            INSERT INTO shares (\(Self.shareColumns)) VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (container, folder, participant) DO UPDATE SET read_only = excluded.read_only
            """, [.text(share.id), .text(share.container), .text(share.folder), .text(share.owner),
                  .text(share.participant), .int(share.readOnly ? 1 : 0), .int(share.created)])
        return try db.first("SELECT \(Self.shareColumns) FROM shares WHERE container = ? AND folder = ? AND participant = ?",
                            [.text(share.container), .text(share.folder), .text(share.participant)]) { Self.decodeShare($0) } ?? share
    }

    func deleteShare(container: String, folder: String, participant: String) throws(ServerFailure) -> Bool {
        try db.query("DELETE FROM shares WHERE container = ? AND folder = ? AND participant = ?",
                     [.text(container), .text(folder), .text(participant)])
        return db.changes > 0
    }

    func deleteShare(id: String, participant: String) throws(ServerFailure) -> Bool {
        try db.query("DELETE FROM shares WHERE id = ? AND participant = ?", [.text(id), .text(participant)])
        return db.changes > 0
    }

    func shares(user: String) throws(ServerFailure) -> [StubShare] {
        var shares: [StubShare] = []
        try db.forEach("SELECT \(Self.shareColumns) FROM shares WHERE owner = ?1 OR participant = ?1 ORDER BY created, id",
                       [.text(user)]) { shares.append(Self.decodeShare($0)) }
        return shares
    }

    func shares(container cid: String) throws(ServerFailure) -> [StubShare] {
        var shares: [StubShare] = []
        try db.forEach("SELECT \(Self.shareColumns) FROM shares WHERE container = ? ORDER BY created, id",
                       [.text(cid)]) { shares.append(Self.decodeShare($0)) }
        return shares
    }

    func limits(_ user: String) throws(ServerFailure) -> LimitSettings {
        try db.first("SELECT storage, containers, items FROM user_limits WHERE name = ?", [.text(user)]) { (r) throws(ServerFailure) in
            LimitSettings(storage: r.isNull(0) ? nil : r.int(0), containers: r.isNull(1) ? nil : r.int(1),
                          items: r.isNull(2) ? nil : r.int(2))
        } ?? LimitSettings()
    }

    func setLimits(_ user: String, _ limits: LimitSettings) throws(ServerFailure) {
        func value(_ v: Int64?) -> SQLValue { v.map { .int($0) } ?? .null }
        try db.query("INSERT OR REPLACE INTO user_limits (name, storage, containers, items) VALUES (?, ?, ?, ?)",
                     [.text(user), value(limits.storage), value(limits.containers), value(limits.items)])
    }

    func liveItemCount(_ cid: String) throws(ServerFailure) -> Int64 {
        try db.first("SELECT count(*) FROM items WHERE container = ? AND deleted = 0", [.text(cid)]) { $0.int(0) } ?? 0
    }

    func anyInTrash(_ cid: String) throws(ServerFailure) -> Bool {
        try db.first("""
            SELECT 1 FROM history h JOIN items i ON i.container = h.container AND i.version = h.version
            WHERE h.container = ? AND i.deleted = 1 LIMIT 1
            """, [.text(cid)]) { $0.int(0) } != nil
    }
}
