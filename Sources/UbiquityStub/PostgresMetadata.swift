// The metadata storage on PostgreSQL (libpq), shared by every server process given the same
// `--metadata postgresql://...` URL, and its notifier on LISTEN/NOTIFY.
//
// What must hold: a writing transaction runs at READ COMMITTED behind the container row it locks FOR UPDATE
// first (StubStore does that), so writers to one container are serialised by the database whichever server
// they came through, and a sequence number commits with its row; it ends with a NOTIFY, which PostgreSQL
// delivers at commit. A reading transaction is REPEATABLE READ, one snapshot for the feed and its token. A
// connection that fails is dropped; a transaction that failed before its COMMIT was sent is run again once on a
// fresh connection, otherwise the request fails as ServerFailure.unavailable (503) and the client retries. The
// listener has its own connection and reconnects on its own; after any gap it wakes every waiter once.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the idle pool's is a leaf.
import CPostgres
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// A failed statement or connection.
struct PostgresError: CustomStringConvertible {
    let sqlState: String
    let message: String
    var description: String { "PostgreSQL \(sqlState): \(message)" }
}

/// One libpq connection; used by one thread at a time.
final class PGConnection {
    let handle: OpaquePointer

    init(url: String) throws(ServerFailure) {
        guard let c = PQconnectdb(url) else { throw .unavailable("out of memory") }
        guard PQstatus(c) == CONNECTION_OK else {
            let why = String(cString: PQerrorMessage(c)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(c)
            throw .unavailable(why)
        }
        handle = c
        _ = try? exec("SET client_min_messages = warning")
    }

    deinit { PQfinish(handle) }

    var isHealthy: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Runs one statement with text parameters and answers its rows.
    @discardableResult
    func exec(_ sql: String, _ params: [String?] = []) throws(ServerFailure) -> PGRows {
        let copies = params.map { $0.map { strdup($0) } ?? nil }
        defer { for c in copies { free(c) } }
        let values = copies.map { UnsafePointer<CChar>($0) }
        let result = values.withUnsafeBufferPointer {
            PQexecParams(handle, sql, Int32(params.count), nil, $0.baseAddress, nil, nil, 0)
        }
        guard let result else { throw lost() }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? ""
            let message = String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQclear(result)
            if !isHealthy || state.hasPrefix("08") || state.hasPrefix("57P") { throw .unavailable(message) }
            throw ServerFailure(PostgresError(sqlState: state, message: message))
        }
        return PGRows(result)
    }

    private func lost() -> ServerFailure {
        .unavailable(String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

/// A statement's rows, as text; freed with the value.
final class PGRows {
    private let result: OpaquePointer
    init(_ result: OpaquePointer) { self.result = result }
    deinit { PQclear(result) }

    var count: Int { Int(PQntuples(result)) }
    func isNull(_ row: Int, _ col: Int) -> Bool { PQgetisnull(result, Int32(row), Int32(col)) != 0 }
    func text(_ row: Int, _ col: Int) -> String { String(cString: PQgetvalue(result, Int32(row), Int32(col))) }
    func optionalText(_ row: Int, _ col: Int) -> String? { isNull(row, col) ? nil : text(row, col) }
    func int(_ row: Int, _ col: Int) -> Int64 { Int64(text(row, col)) ?? 0 }
    func bool(_ row: Int, _ col: Int) -> Bool { text(row, col) == "t" }
}

final class PostgresMetadata: StubMetadata, Sendable {
    static let channel = "ubiquity_changes"
    private let url: String
    /// Connections kept for reuse.
    private let idle: Locked<[PGConnection]>
    private let listener: PostgresNotifier
    var notifier: any ChangeNotifier { listener }

    /// `password` (from a file, never from a command line) is added to the URL for libpq only.
    init(url: String, password: String? = nil) throws(ServerFailure) {
        let url = Self.connectionString(url, password: password)
        self.url = url
        let conn = try PGConnection(url: url)
        try Self.createSchema(conn)
        idle = Locked([conn])
        listener = PostgresNotifier(url: url)
    }

    /// The URL with `password` as its query parameter, percent-encoded.
    static func connectionString(_ url: String, password: String?) -> String {
        guard let password else { return url }
        let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)
        let encoded = password.utf8.map { unreserved.contains($0) ? String(UnicodeScalar($0)) : String(format: "%%%02X", $0) }.joined()
        return url + (url.contains("?") ? "&" : "?") + "password=" + encoded
    }

    private static func createSchema(_ c: PGConnection) throws(ServerFailure) {
        try c.exec("BEGIN")
        // Servers starting together must not race on CREATE ... IF NOT EXISTS.
        try c.exec("SELECT pg_advisory_xact_lock(8021974)")
        let hadHistory = try c.exec("SELECT to_regclass('history') IS NOT NULL").bool(0, 0)
        for sql in [
            "CREATE TABLE IF NOT EXISTS containers (id TEXT PRIMARY KEY, seq BIGINT NOT NULL)",
            """
            CREATE TABLE IF NOT EXISTS items (
                container TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, name TEXT NOT NULL, kind TEXT NOT NULL,
                mode BIGINT NOT NULL, mtime BIGINT NOT NULL, size BIGINT NOT NULL, sha256 TEXT NOT NULL,
                version BIGINT NOT NULL, deleted BOOLEAN NOT NULL, device TEXT NOT NULL,
                xattrs TEXT NOT NULL, conflicts TEXT NOT NULL, target TEXT,
                PRIMARY KEY (container, id))
            """,
            "CREATE UNIQUE INDEX IF NOT EXISTS items_by_version ON items (container, version)",
            "CREATE UNIQUE INDEX IF NOT EXISTS items_live_names ON items (container, parent, name) WHERE NOT deleted",
            """
            CREATE TABLE IF NOT EXISTS kv (container TEXT NOT NULL, key TEXT NOT NULL, value TEXT,
                mtime BIGINT NOT NULL, device TEXT NOT NULL, deleted BOOLEAN NOT NULL, seq BIGINT NOT NULL,
                PRIMARY KEY (container, key))
            """,
            "CREATE INDEX IF NOT EXISTS kv_by_seq ON kv (container, seq)",
            """
            CREATE TABLE IF NOT EXISTS applied_changes (container TEXT NOT NULL, item TEXT NOT NULL,
                device TEXT NOT NULL, change TEXT NOT NULL, digest TEXT NOT NULL, version BIGINT NOT NULL,
                PRIMARY KEY (container, item, device))
            """,
        ] + AccountTables.statements + HistoryTable.statements(integer: "BIGINT", boolean: "BOOLEAN")
            // Tables made before rows kept xattrs gain the column, NULL in their old rows (xattrs unknown).
            // and before deletions of an app's data, the batch column (NULL: no batch).
            + ["ALTER TABLE history ADD COLUMN IF NOT EXISTS xattrs TEXT",
               "ALTER TABLE history ADD COLUMN IF NOT EXISTS batch TEXT"] { try c.exec(sql) }
        // Stores made before history get the table with one row per live item, as of the upgrade.
        if !hadHistory {
            try c.exec(HistoryTable.backfill(now: nowNanoseconds(), notDeleted: "false", orIgnore: ("", " ON CONFLICT DO NOTHING")))
        }
        try c.exec("COMMIT")
    }

    func write<T>(_ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        try transaction("BEGIN", body)
    }

    func read<T>(_ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        try transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", body)
    }

    /// Runs `body` between `begin` and COMMIT on a pooled connection, again once on a fresh one when the
    /// connection failed before the COMMIT went out.
    private func transaction<T>(_ begin: String, _ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        var attempt = 0
        while true {
            attempt += 1
            let conn = try take()
            let tx = PostgresTransaction(conn: conn)
            var committing = false
            do {
                try conn.exec(begin)
                let result = try body(tx)
                if tx.wrote { try conn.exec("SELECT pg_notify($1, '')", [Self.channel]) }
                committing = true
                try conn.exec("COMMIT")
                give(conn)
                return result
            } catch {
                if conn.isHealthy {
                    _ = try? conn.exec("ROLLBACK")
                    give(conn)
                }
                if case .unavailable = error {
                    idle.withLock { $0.removeAll() } // after a restart every pooled connection is stale
                    if !committing && attempt < 2 { continue }
                }
                throw error
            }
        }
    }

    /// A session-level advisory lock (`pg_advisory_lock` of the name's 64-bit hash) on a connection of its own,
    /// held while `body` runs. A connection lost meanwhile lets the lock go with its session: it is not given
    /// back, and the failure to unlock is not the body's.
    func withSharedLock<T>(_ name: String, _ body: () throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        let conn = try take()
        do {
            try conn.exec("SELECT pg_advisory_lock(hashtextextended($1, 0))", [name])
        } catch {
            if conn.isHealthy { give(conn) }
            throw error
        }
        defer {
            if (try? conn.exec("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [name])) != nil { give(conn) }
        }
        return try body()
    }

    /// Each transaction has a connection of its own (made when none is idle): none waits for another's turn
    /// here, only for the rows it locks.
    var othersWaiting: Bool { false }

    private func take() throws(ServerFailure) -> PGConnection {
        if let c = idle.withLock({ $0.popLast() }), c.isHealthy { return c }
        return try PGConnection(url: url)
    }

    private func give(_ c: PGConnection) {
        idle.withLock { if $0.count < 16 { $0.append(c) } }
    }

    func close() {
        listener.close()
        idle.withLock { $0.removeAll() }
    }
}

/// The primitives as SQL on one connection inside its transaction.
private final class PostgresTransaction: MetadataTransaction {
    let conn: PGConnection
    /// Set by every write, so the commit notifies the other servers.
    private(set) var wrote = false
    static let columns = "id, parent, name, kind, mode, mtime, size, sha256, version, deleted, device, xattrs, conflicts, target"

    init(conn: PGConnection) { self.conn = conn }

    private static func decodeItem(_ r: PGRows, _ i: Int) throws(ServerFailure) -> WireItem {
        WireItem(id: r.text(i, 0), parent: r.optionalText(i, 1), name: r.text(i, 2),
                 kind: ItemKind(rawValue: r.text(i, 3)) ?? .file, mode: UInt32(truncatingIfNeeded: r.int(i, 4)),
                 mtime: r.int(i, 5), size: r.int(i, 6), sha256: r.text(i, 7), version: r.int(i, 8),
                 deleted: r.bool(i, 9), device: r.text(i, 10), xattrs: try MetadataCoding.xattrs(r.text(i, 11)),
                 conflicts: try MetadataCoding.conflicts(r.text(i, 12)), target: r.optionalText(i, 13))
    }

    private func items(_ sql: String, _ params: [String?]) throws(ServerFailure) -> [WireItem] {
        let r = try conn.exec(sql, params)
        return try (0..<r.count).map { (i) throws(ServerFailure) in try Self.decodeItem(r, i) }
    }

    func savepoint<T>(_ body: () throws(ServerFailure) -> T) throws(ServerFailure) -> T {
        try conn.exec("SAVEPOINT entry")
        do {
            let result = try body()
            try conn.exec("RELEASE SAVEPOINT entry")
            return result
        } catch {
            // A failed rollback (the connection gone) is what the caller must hear of: the transaction is lost.
            try conn.exec("ROLLBACK TO SAVEPOINT entry")
            try conn.exec("RELEASE SAVEPOINT entry")
            throw error
        }
    }

    private func int64(_ sql: String, _ params: [String?]) throws(ServerFailure) -> Int64? {
        let r = try conn.exec(sql, params)
        return r.count > 0 && !r.isNull(0, 0) ? r.int(0, 0) : nil
    }

    func containerSeq(_ cid: String) throws(ServerFailure) -> Int64? {
        try int64("SELECT seq FROM containers WHERE id = $1", [cid])
    }

    func lockContainer(_ cid: String) throws(ServerFailure) -> Int64? {
        try int64("SELECT seq FROM containers WHERE id = $1 FOR UPDATE", [cid])
    }

    func createContainer(_ cid: String) throws(ServerFailure) -> Bool {
        let r = try conn.exec("INSERT INTO containers (id, seq) VALUES ($1, 0) ON CONFLICT (id) DO NOTHING RETURNING id", [cid])
        return r.count > 0
    }

    func nextSeq(_ cid: String) throws(ServerFailure) -> Int64 {
        wrote = true
        guard let seq = try int64("UPDATE containers SET seq = seq + 1 WHERE id = $1 RETURNING seq", [cid]) else {
            throw .refused(404, "no such container")
        }
        return seq
    }

    func item(_ cid: String, _ id: String) throws(ServerFailure) -> WireItem? {
        try items("SELECT \(Self.columns) FROM items WHERE container = $1 AND id = $2", [cid, id]).first
    }

    func liveChild(_ cid: String, parent: String, name: String, except: String?) throws(ServerFailure) -> WireItem? {
        try items("SELECT \(Self.columns) FROM items WHERE container = $1 AND parent = $2 AND name = $3 AND NOT deleted AND id <> $4 LIMIT 1",
                  [cid, parent, name, except ?? ""]).first
    }

    func anyLiveChild(_ cid: String, parent: String) throws(ServerFailure) -> WireItem? {
        try items("SELECT \(Self.columns) FROM items WHERE container = $1 AND parent = $2 AND NOT deleted LIMIT 1",
                  [cid, parent]).first
    }

    func writeItem(_ cid: String, _ item: WireItem) throws(ServerFailure) {
        wrote = true
        try conn.exec("""
            INSERT INTO items (container, \(Self.columns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
            ON CONFLICT (container, id) DO UPDATE SET parent = excluded.parent, name = excluded.name,
              kind = excluded.kind, mode = excluded.mode, mtime = excluded.mtime, size = excluded.size,
              sha256 = excluded.sha256, version = excluded.version, deleted = excluded.deleted,
              device = excluded.device, xattrs = excluded.xattrs, conflicts = excluded.conflicts, target = excluded.target
            """, [cid, item.id, item.parent, item.name, item.kind.rawValue, String(item.mode), String(item.mtime),
                  String(item.size), item.sha256, String(item.version), item.deleted ? "t" : "f", item.device,
                  try MetadataCoding.json(item.xattrs), try MetadataCoding.json(item.conflicts), item.target])
    }

    func items(_ cid: String, after since: Int64, limit: Int) throws(ServerFailure) -> [WireItem] {
        try items("SELECT \(Self.columns) FROM items WHERE container = $1 AND version > $2 ORDER BY version LIMIT $3",
                  [cid, String(since), String(limit)])
    }

    private static func decodeKV(_ r: PGRows, _ i: Int) throws(ServerFailure) -> WireKVEntry {
        WireKVEntry(key: r.text(i, 0), value: try MetadataCoding.kvValue(r.optionalText(i, 1)), mtime: r.int(i, 2),
                    device: r.text(i, 3), deleted: r.bool(i, 4), seq: r.int(i, 5))
    }

    private func kv(_ sql: String, _ params: [String?]) throws(ServerFailure) -> [WireKVEntry] {
        let r = try conn.exec(sql, params)
        return try (0..<r.count).map { (i) throws(ServerFailure) in try Self.decodeKV(r, i) }
    }

    func kvEntry(_ cid: String, _ key: String) throws(ServerFailure) -> WireKVEntry? {
        try kv("SELECT key, value, mtime, device, deleted, seq FROM kv WHERE container = $1 AND key = $2", [cid, key]).first
    }

    func kvLiveSizes(_ cid: String) throws(ServerFailure) -> [String: Int] {
        var live: [String: Int] = [:]
        let r = try conn.exec("SELECT key, value FROM kv WHERE container = $1 AND NOT deleted", [cid])
        for i in 0..<r.count { live[r.text(i, 0)] = try MetadataCoding.kvValue(r.optionalText(i, 1))?.byteSize ?? 0 }
        return live
    }

    func kvSeq(_ cid: String) throws(ServerFailure) -> Int64 {
        try int64("SELECT coalesce(max(seq), 0) FROM kv WHERE container = $1", [cid]) ?? 0
    }

    func kvPut(_ cid: String, _ entry: WireKVEntry) throws(ServerFailure) {
        wrote = true
        try conn.exec("""
            INSERT INTO kv (container, key, value, mtime, device, deleted, seq) VALUES ($1, $2, $3, $4, $5, $6, $7)
            ON CONFLICT (container, key) DO UPDATE SET value = excluded.value, mtime = excluded.mtime,
              device = excluded.device, deleted = excluded.deleted, seq = excluded.seq
            """, [cid, entry.key, try entry.value.map { (value) throws(ServerFailure) in try MetadataCoding.json(value) }, String(entry.mtime),
                  entry.device, entry.deleted ? "t" : "f", String(entry.seq)])
    }

    func kvEntries(_ cid: String, after since: Int64) throws(ServerFailure) -> [WireKVEntry] {
        try kv("SELECT key, value, mtime, device, deleted, seq FROM kv WHERE container = $1 AND seq > $2 ORDER BY seq",
               [cid, String(since)])
    }

    func appliedChange(_ cid: String, item: String, device: String) throws(ServerFailure) -> AppliedChange? {
        let r = try conn.exec("SELECT change, digest, version FROM applied_changes WHERE container = $1 AND item = $2 AND device = $3",
                              [cid, item, device])
        guard r.count > 0 else { return nil }
        return AppliedChange(device: device, change: r.text(0, 0), digest: r.text(0, 1), version: r.int(0, 2))
    }

    func recordChange(_ cid: String, item: String, _ change: AppliedChange) throws(ServerFailure) {
        wrote = true
        _ = try conn.exec("""
            INSERT INTO applied_changes (container, item, device, change, digest, version) VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (container, item, device) DO UPDATE SET change = excluded.change, digest = excluded.digest,
                version = excluded.version
            """, [cid, item, change.device, change.change, change.digest, String(change.version)])
    }

    func containerIDs() throws(ServerFailure) -> [String] {
        let r = try conn.exec("SELECT id FROM containers ORDER BY id")
        return (0..<r.count).map { r.text($0, 0) }
    }

    func namesBlob(_ cid: String, _ sha256: String) throws(ServerFailure) -> Bool {
        // A hash inside the conflicts' JSON counts as a reference (erring only towards keeping).
        if try int64("SELECT 1 FROM items WHERE container = $1 AND NOT deleted AND (sha256 = $2 OR strpos(conflicts, $2) > 0) LIMIT 1",
                     [cid, sha256]) != nil { return true }
        return try int64("SELECT 1 FROM history WHERE container = $1 AND sha256 = $2 LIMIT 1", [cid, sha256]) != nil
    }

    // MARK: History

    private static func decodeVersion(_ r: PGRows, _ i: Int) throws(ServerFailure) -> WireVersion {
        // Stored xattrs that do not decode are a damaged row: an error, as for an item, never a version without them.
        try WireVersion(id: r.text(i, 0), version: r.int(i, 1), at: r.int(i, 2), path: r.text(i, 3), deleted: r.bool(i, 4),
                    parent: r.optionalText(i, 5), name: r.text(i, 6), kind: ItemKind(rawValue: r.text(i, 7)) ?? .file,
                    mode: UInt32(truncatingIfNeeded: r.int(i, 8)), mtime: r.int(i, 9), size: r.int(i, 10),
                    sha256: r.text(i, 11), device: r.text(i, 12), target: r.optionalText(i, 13),
                    xattrs: r.optionalText(i, 14).map { (text) throws(ServerFailure) in try MetadataCoding.xattrs(text) },
                    batch: r.optionalText(i, 15).flatMap(WireDataBatch.init))
    }

    private func versions(_ sql: String, _ params: [String?]) throws(ServerFailure) -> [WireVersion] {
        let r = try conn.exec(sql, params)
        return try (0..<r.count).map { (i) throws(ServerFailure) in try Self.decodeVersion(r, i) }
    }

    func appendHistory(_ cid: String, _ row: WireVersion) throws(ServerFailure) {
        wrote = true
        try conn.exec("INSERT INTO history (container, \(HistoryTable.columns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
                      [cid, row.id, String(row.version), String(row.at), row.path, row.deleted ? "t" : "f", row.parent,
                       row.name, row.kind.rawValue, String(row.mode), String(row.mtime), String(row.size), row.sha256,
                       row.device, row.target, try row.xattrs.map { (value) throws(ServerFailure) in try MetadataCoding.json(value) },
                       row.batch?.description])
    }

    func history(_ cid: String, _ id: String) throws(ServerFailure) -> [WireVersion] {
        try versions("SELECT \(HistoryTable.columns) FROM history WHERE container = $1 AND id = $2 ORDER BY version DESC",
                     [cid, id])
    }

    func trash(_ cid: String, parent: String?) throws(ServerFailure) -> [WireVersion] {
        let columns = HistoryTable.columns.split(separator: ",").map { "h." + $0.trimmingCharacters(in: .whitespaces) }
        return try versions("""
            SELECT \(columns.joined(separator: ", ")) FROM history h
            JOIN items i ON i.container = h.container AND i.version = h.version
            WHERE h.container = $1 AND i.deleted \(parent == nil ? "" : "AND h.parent = $2") ORDER BY h.version DESC
            """, [cid] + (parent.map { [$0] } ?? []))
    }

    func historyStamps(_ cid: String, olderThrough: Int64, deletedThrough: Int64) throws(ServerFailure) -> [HistoryStamp] {
        let r = try conn.exec("""
            SELECT id, version, at, deleted FROM history WHERE container = $1 AND id IN (
              SELECT h.id FROM history h JOIN items i ON i.container = h.container AND i.id = h.id
              WHERE h.container = $1 AND h.at <= greatest($2::bigint, $3::bigint)
                AND ((h.version <> i.version AND h.at <= $2::bigint) OR (h.version = i.version AND i.deleted AND h.at <= $3::bigint)))
            ORDER BY id, version
            """, [cid, String(olderThrough), String(deletedThrough)])
        return (0..<r.count).map { HistoryStamp(id: r.text($0, 0), version: r.int($0, 1), at: r.int($0, 2), deleted: r.bool($0, 3)) }
    }

    func deleteHistoryRows(_ cid: String, versions: [Int64]) throws(ServerFailure) -> Int {
        var gone = 0
        for start in stride(from: 0, to: versions.count, by: 1000) {
            let some = versions[start..<min(start + 1000, versions.count)].map(String.init).joined(separator: ",")
            gone += try conn.exec("DELETE FROM history WHERE container = $1 AND version = ANY($2::bigint[]) RETURNING version",
                                  [cid, "{" + some + "}"]).count
        }
        return gone
    }

    func deleteHistory(_ cid: String, id: String) throws(ServerFailure) -> Int {
        try conn.exec("DELETE FROM history WHERE container = $1 AND id = $2 RETURNING version", [cid, id]).count
    }

    func namedContents(_ cid: String) throws(ServerFailure) -> [NamedContent] {
        var named: [NamedContent] = []
        let live = try conn.exec("SELECT sha256, size, conflicts FROM items WHERE container = $1 AND NOT deleted AND kind = 'file'", [cid])
        for i in 0..<live.count {
            named.append(NamedContent(sha256: live.text(i, 0), size: live.int(i, 1), holder: .live))
            for c in try MetadataCoding.conflicts(live.text(i, 2)) {
                named.append(NamedContent(sha256: c.sha256, size: c.size, holder: .live))
            }
        }
        let kept = try conn.exec("""
            SELECT h.sha256, h.size, i.deleted FROM history h JOIN items i ON i.container = h.container AND i.id = h.id
            WHERE h.container = $1 AND h.kind = 'file'
            """, [cid])
        for i in 0..<kept.count {
            named.append(NamedContent(sha256: kept.text(i, 0), size: kept.int(i, 1), holder: kept.bool(i, 2) ? .trash : .history))
        }
        return named
    }

    // MARK: Rewind

    func liveChildren(_ cid: String, parent: String) throws(ServerFailure) -> [WireItem] {
        try items("SELECT \(Self.columns) FROM items WHERE container = $1 AND parent = $2 AND NOT deleted", [cid, parent])
    }

    func liveItems(_ cid: String, naming sha256: String) throws(ServerFailure) -> [WireItem] {
        try items("SELECT \(Self.columns) FROM items WHERE container = $1 AND NOT deleted AND (sha256 = $2 OR strpos(conflicts, $2) > 0)",
                  [cid, sha256])
    }

    func historyRow(_ cid: String, _ id: String, through: Int64) throws(ServerFailure) -> WireVersion? {
        try versions("""
            SELECT \(HistoryTable.columns) FROM history WHERE container = $1 AND id = $2 AND at <= $3::bigint
            ORDER BY version DESC LIMIT 1
            """, [cid, id, String(through)]).first
    }

    func historyChildren(_ cid: String, parent: String, through: Int64) throws(ServerFailure) -> [WireVersion] {
        let columns = HistoryTable.columns.split(separator: ",").map { "h." + $0.trimmingCharacters(in: .whitespaces) }
        return try versions("""
            SELECT \(columns.joined(separator: ", ")) FROM history h
            WHERE \(HistoryTable.newestThrough(container: "$1", parent: "$2", time: "$3::bigint")) ORDER BY h.version
            """, [cid, parent, String(through)])
    }

    func setting(_ key: String) throws(ServerFailure) -> String? {
        let r = try conn.exec("SELECT value FROM settings WHERE key = $1", [key])
        return r.count > 0 ? r.text(0, 0) : nil
    }

    func claimSetting(_ key: String, _ value: String) throws(ServerFailure) -> Bool {
        // A second server claiming at once waits on the first's row, then finds it and inserts nothing.
        try conn.exec("INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING RETURNING key",
                      [key, value]).count > 0
    }

    func users() throws(ServerFailure) -> [StubUser] {
        let r = try conn.exec("SELECT name, prefix, created FROM users ORDER BY name")
        return (0..<r.count).map { StubUser(name: r.text($0, 0), prefix: r.text($0, 1), created: r.int($0, 2)) }
    }

    func insertUser(_ user: StubUser) throws(ServerFailure) -> Bool {
        try conn.exec("INSERT INTO users (name, prefix, created) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING name",
                      [user.name, user.prefix, String(user.created)]).count > 0
    }

    func deleteUser(_ name: String) throws(ServerFailure) -> Bool {
        try conn.exec("DELETE FROM shares WHERE owner = $1 OR participant = $1", [name])
        try conn.exec("DELETE FROM devices WHERE owner = $1", [name])
        try conn.exec("DELETE FROM user_limits WHERE name = $1", [name])
        return try conn.exec("DELETE FROM users WHERE name = $1 RETURNING name", [name]).count > 0
    }

    func insertDevice(_ device: StubDevice, keyHash: String) throws(ServerFailure) -> Bool {
        try conn.exec("INSERT INTO devices (owner, name, key_hash, created, revoked) VALUES ($1, $2, $3, $4, NULL) "
                      + "ON CONFLICT DO NOTHING RETURNING name",
                      [device.owner, device.name, keyHash, String(device.created)]).count > 0
    }

    private static let shareColumns = "id, container, folder, owner, participant, read_only, created"

    private static func decodeShares(_ r: PGRows) -> [StubShare] {
        (0..<r.count).map {
            StubShare(id: r.text($0, 0), container: r.text($0, 1), folder: r.text($0, 2), owner: r.text($0, 3),
                      participant: r.text($0, 4), readOnly: r.int($0, 5) != 0, created: r.int($0, 6))
        }
    }

    func upsertShare(_ share: StubShare) throws(ServerFailure) -> StubShare {
        let r = try conn.exec("""
            INSERT INTO shares (\(Self.shareColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7)
            ON CONFLICT (container, folder, participant) DO UPDATE SET read_only = excluded.read_only
            RETURNING \(Self.shareColumns)
            """, [share.id, share.container, share.folder, share.owner, share.participant, share.readOnly ? "1" : "0",
                  String(share.created)])
        return Self.decodeShares(r).first ?? share
    }

    func deleteShare(container: String, folder: String, participant: String) throws(ServerFailure) -> Bool {
        try conn.exec("DELETE FROM shares WHERE container = $1 AND folder = $2 AND participant = $3 RETURNING id",
                      [container, folder, participant]).count > 0
    }

    func deleteShare(id: String, participant: String) throws(ServerFailure) -> Bool {
        try conn.exec("DELETE FROM shares WHERE id = $1 AND participant = $2 RETURNING id", [id, participant]).count > 0
    }

    func shares(user: String) throws(ServerFailure) -> [StubShare] {
        Self.decodeShares(try conn.exec("SELECT \(Self.shareColumns) FROM shares WHERE owner = $1 OR participant = $1 "
                                        + "ORDER BY created, id", [user]))
    }

    func shares(container cid: String) throws(ServerFailure) -> [StubShare] {
        Self.decodeShares(try conn.exec("SELECT \(Self.shareColumns) FROM shares WHERE container = $1 ORDER BY created, id",
                                        [cid]))
    }

    private static func decodeDevice(_ r: PGRows, _ i: Int) -> StubDevice {
        StubDevice(owner: r.text(i, 0), name: r.text(i, 1), created: r.int(i, 2), revoked: r.isNull(i, 3) ? nil : r.int(i, 3))
    }

    func devices(owner: String?) throws(ServerFailure) -> [StubDevice] {
        let r = try conn.exec("SELECT owner, name, created, revoked FROM devices WHERE $1::text IS NULL OR owner = $1 "
                              + "ORDER BY owner, name", [owner])
        return (0..<r.count).map { Self.decodeDevice(r, $0) }
    }

    func revokeDevice(owner: String, name: String, at: Int64) throws(ServerFailure) -> Bool {
        try conn.exec("UPDATE devices SET revoked = $3 WHERE owner = $1 AND name = $2 AND revoked IS NULL RETURNING name",
                      [owner, name, String(at)]).count > 0
    }

    func device(keyHash: String) throws(ServerFailure) -> (StubDevice, String)? {
        let r = try conn.exec("SELECT d.owner, d.name, d.created, d.revoked, u.prefix FROM devices d "
                              + "JOIN users u ON u.name = d.owner WHERE d.key_hash = $1", [keyHash])
        return r.count > 0 ? (Self.decodeDevice(r, 0), r.text(0, 4)) : nil
    }

    func limits(_ user: String) throws(ServerFailure) -> LimitSettings {
        let r = try conn.exec("SELECT storage, containers, items FROM user_limits WHERE name = $1", [user])
        guard r.count > 0 else { return LimitSettings() }
        func value(_ c: Int) -> Int64? { r.isNull(0, c) ? nil : r.int(0, c) }
        return LimitSettings(storage: value(0), containers: value(1), items: value(2))
    }

    func setLimits(_ user: String, _ limits: LimitSettings) throws(ServerFailure) {
        try conn.exec("INSERT INTO user_limits (name, storage, containers, items) VALUES ($1, $2, $3, $4) "
                      + "ON CONFLICT (name) DO UPDATE SET storage = $2, containers = $3, items = $4",
                      [user, limits.storage.map(String.init), limits.containers.map(String.init), limits.items.map(String.init)])
    }

    func liveItemCount(_ cid: String) throws(ServerFailure) -> Int64 {
        try conn.exec("SELECT count(*) FROM items WHERE container = $1 AND NOT deleted", [cid]).int(0, 0)
    }

    func anyInTrash(_ cid: String) throws(ServerFailure) -> Bool {
        try conn.exec("""
            SELECT 1 FROM history h JOIN items i ON i.container = h.container AND i.version = h.version
            WHERE h.container = $1 AND i.deleted LIMIT 1
            """, [cid]).count > 0
    }
}

/// LISTEN on a dedicated connection in a thread of its own; each notification, and each reconnection (which
/// may have missed some), wakes this process's waiters. Local commits wake them at once as well.
final class PostgresNotifier: ChangeNotifier, Sendable {
    private let local = LocalNotifier()
    private let url: String
    private let loop = Loop(name: "pg-listen")

    init(url: String) {
        self.url = url
        loop.start { [self] in listen() }
    }

    var generation: UInt64 { local.generation }
    func wait(after seen: UInt64, until deadline: Date) { local.wait(after: seen, until: deadline) }
    func committed(_ cid: String) { local.bump() }
    var isStopping: Bool { local.isStopping }
    func setStopping(_ value: Bool) { local.setStopping(value) }
    /// Stops listening, waiting for the loop's current poll (a quarter second) to end.
    func close() { loop.stopAndJoin(timeout: 5) }

    private func listen() {
        var conn: PGConnection?
        while !loop.isStopping {
            if conn == nil {
                conn = try? PGConnection(url: url)
                if let c = conn, (try? c.exec("LISTEN \(PostgresMetadata.channel)")) != nil {
                    local.bump()
                } else {
                    conn = nil
                    loop.pause(nanoseconds: 250_000_000)
                    continue
                }
            }
            guard let c = conn, c.isHealthy else { conn = nil; continue }
            var pfd = pollfd(fd: PQsocket(c.handle), events: Int16(POLLIN), revents: 0)
            if poll(&pfd, 1, 250) > 0 {
                if PQconsumeInput(c.handle) == 0 { conn = nil; continue }
                var got = false
                while let n = PQnotifies(c.handle) { PQfreemem(n); got = true }
                if got { local.bump() }
            }
        }
    }
}
