// The key-value store (NSUbiquitousKeyValueStore) of one container on this device. Its values live in the
// backing store's database (tables kv_local and kv_meta, on a connection of its own: the store is not under
// the Container's lock), so a write acknowledged is durable and queued; a pusher thread sends pending writes,
// a feed thread long-polls the remote's kv feed. Both sides apply last-writer-wins (the later writing-device
// timestamp, ties by device name), so every device ends with the same value; a delete is a write (a tombstone).
// Changes that came from elsewhere are kept as a bounded list of change records (Apple's reasons), for
// `ubiquityfs kv watch`.
//
// What must hold: `tables` (a Locked) holds the connection and the change records, and no lock but the log's is
// taken under it (lock order: a leaf but for the log); no
// network call runs under it (`putKV` and `kvChanges` run between two holds). `set` checks `KVLimits` and writes
// before it returns. A merge (`apply`) keeps the winner by `wins(over:)` alone; a local pending write that loses
// is dropped. The feed position (`seq`) moves in the same transaction as the entries it covers, and an answer
// read against a position reset meanwhile is dropped. A write the remote refuses for good is dropped here and
// the feed read again from 0. A database error in `value` or `keys` is logged as an error and thrown for the
// caller to answer.
import Foundation
import UbiquityBase

/// Why values changed under the program, as Apple names the reasons.
public enum KVChangeReason: String, Codable, Sendable {
    case serverChange = "ServerChange"
    case initialSyncChange = "InitialSyncChange"
    case quotaViolationChange = "QuotaViolationChange"
    case accountChange = "AccountChange"
}

/// One change record: the reason and the keys changed.
public struct KVChange: Codable, Equatable, Sendable {
    public var seq: Int64
    public var reason: KVChangeReason
    public var keys: [String]
}

public final class KeyValueStore: Sendable {
    private let tables: Locked<Tables>
    private let device: String
    private let remote: KeyValueRemote?
    private let log = Logger("kv")
    /// The wall clock of its writes' times (the environment's, as the container's: a test or a simulation
    /// may give its own).
    private let clock: @Sendable () -> Int64
    private let pusher = Loop(name: "kv-push", priority: .background)
    private let feeder = Loop(name: "kv-feed", priority: .background)
    static let keptChanges = 1000

    /// Opens the store's tables in `directory`'s database. `account` names the remote account and container
    /// the store is bound to: when it differs from the one recorded, the old values are dropped (AccountChange).
    public init(directory: String, device: String, account: String, remote: KeyValueRemote?,
                environment: CoreEnvironment = CoreEnvironment()) throws {
        self.device = device
        self.remote = remote
        self.clock = environment.clock
        let db = try Database(path: directory + "/state.sqlite")
        try db.exec("""
            PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
            CREATE TABLE IF NOT EXISTS kv_local(key TEXT PRIMARY KEY, value TEXT, mtime INTEGER NOT NULL,
              device TEXT NOT NULL, deleted INTEGER NOT NULL, pending INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS kv_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """)
        tables = Locked(Tables(db: db))
        try tables.withLock { try $0.bind(account) }
    }

    // MARK: the program's side

    /// The value of a key, nil when there is none.
    /// A key's value (nil: no such key). A store that cannot be read throws, logged: never "no such key".
    public func value(_ key: String) throws(CoreError) -> KVValue? {
        do { return try tables.withLock { t throws(StoreError) in try t.row(key) }.flatMap { $0.deleted ? nil : $0.value } } catch {
            log.error("kv: cannot read \(key): \(error)")
            throw CoreError(error)
        }
    }

    /// The live keys, sorted.
    public func keys() throws(CoreError) -> [String] {
        do { return try tables.withLock { t throws(StoreError) in try t.liveSizes() }.keys.sorted() } catch {
            log.error("kv: cannot list the keys: \(error)")
            throw CoreError(error)
        }
    }

    /// Sets (or with nil deletes) a key; durable and queued when it returns. Over a limit: nothing is stored.
    public func set(_ key: String, _ value: KVValue?) throws(CoreError) {
        guard !key.isEmpty, !key.utf8.contains(0x2f), !key.utf8.contains(0), key != ".", key != ".." else { throw .invalidName }
        try tables.withLock { t throws(CoreError) in
            if let v = KVLimits.violation(key: key, value: value, live: try onStore { () throws(StoreError) in try t.liveSizes() }) {
                throw Self.coreError(v)
            }
            let old = try onStore { () throws(StoreError) in try t.row(key) }
            if value == nil && (old == nil || old!.deleted) { throw .notFound }
            // Later than what this device has seen for the key, so a write made after another stays later.
            let mtime = max(clock(), (old?.mtime ?? 0) + 1)
            try onStore { () throws(StoreError) in
                try t.write(WireKVEntry(key: key, value: value, mtime: mtime, device: device, deleted: value == nil),
                            pending: true)
            }
        }
        pusher.wake()
    }

    public static func coreError(_ v: KVLimits.Violation) -> CoreError {
        switch v {
        case .keyTooLong: return .nameTooLong
        case .valueTooLarge: return .fileTooBig
        case .tooManyKeys, .overTotal: return .quotaExceeded(v.message)
        }
    }

    /// The change records kept, oldest first.
    public func changeRecords() -> [KVChange] { tables.withLock { $0.changes } }

    // MARK: threads

    /// Starts the pusher and the feed (no-op without a remote).
    public func start() {
        guard remote != nil else { return }
        pusher.start { [self] in pushLoop() }
        feeder.start { [self] in feedLoop() }
    }

    /// Stops both loops, waiting a few seconds at most for a write in flight (the feed's long poll is left).
    public func stop() {
        pusher.stop()
        feeder.stop()
        pusher.join(timeout: 5)
        feeder.join(timeout: 5)
    }

    private func pushLoop() {
        while !pusher.isStopping {
            // A journal that cannot be read is logged and read again after the pause, never taken as empty.
            let work: [WireKVEntry]
            do { work = try tables.withLock { try $0.pending() } } catch {
                log.error("kv: cannot read the writes waiting to upload: \(error)")
                work = []
            }
            if work.isEmpty {
                pusher.pause(nanoseconds: 5_000_000_000)
                continue
            }
            var failed = false
            for entry in work where !failed && !pusher.isStopping { failed = !push(entry) }
            if failed { pusher.pause(nanoseconds: 1_000_000_000) }
        }
    }

    /// Sends one pending write; false when the remote could not be reached (try again later).
    private func push(_ entry: WireKVEntry) -> Bool {
        guard let remote else { return false }
        do {
            let winner = try remote.putKV(entry)
            tables.withLock { t in
                do {
                    if winner.sameWrite(as: entry) {
                        try t.db.query("UPDATE kv_local SET pending = 0 WHERE key = ? AND mtime = ? AND device = ?",
                                       [.text(entry.key), .int(entry.mtime), .text(entry.device)])
                    } else if try t.apply(winner) {
                        t.record(.serverChange, [entry.key])
                    }
                } catch { log.error("kv: cannot record the answer for \(entry.key): \(error)") }
            }
            return true
        } catch let error as RemoteError {
            if error.isTransient { return false }
            refused(entry, error)
            return true
        } catch {
            return false
        }
    }

    /// A write the remote refused (over its quota, or malformed): dropped here too, the remote's value comes
    /// back with the feed read again from the start.
    private func refused(_ entry: WireKVEntry, _ error: RemoteError) {
        log.warning("kv: the remote refused \(entry.key): \(error)")
        tables.withLock { t in
            do {
                try t.db.query("DELETE FROM kv_local WHERE key = ? AND mtime = ? AND device = ?",
                               [.text(entry.key), .int(entry.mtime), .text(entry.device)])
                try t.setMeta("seq", "0")
            } catch { log.error("kv: cannot drop the refused \(entry.key): \(error)") }
            if case .rejected(413, _) = error { t.record(.quotaViolationChange, [entry.key]) }
        }
    }

    private func feedLoop() {
        guard let remote else { return }
        while !feeder.isStopping {
            // The initial sync answers at once, even with nothing on the remote; later reads long-poll.
            do {
                let (since, synced) = try tables.withLock { t in
                    (Int64(try t.meta("seq") ?? "0") ?? 0, try t.meta("synced") != nil)
                }
                guard let answer = try feeder.away({ try remote.kvChanges(since: since, waitSeconds: synced ? 20 : 0) })
                else { return }
                try tables.withLock { t in try t.take(answer, since: since) }
            } catch {
                // A store that cannot take the feed in waits as an unreachable remote does, never asks again at once.
                if !(error is RemoteError) { log.error("kv: cannot take the feed in: \(error)") }
                feeder.pause(nanoseconds: 1_000_000_000)
            }
        }
    }
}

/// The store's tables and its change records: what `KeyValueStore.tables` guards.
private struct Tables {
    let db: Database
    var changes: [KVChange] = []
    var nextChange: Int64 = 1
    private let log = Logger("kv")

    init(db: Database) { self.db = db }

    /// Applies a feed answer; the first one of a fresh store is the initial sync.
    mutating func take(_ answer: WireKVChanges, since: Int64) throws(StoreError) {
        guard Int64(try meta("seq") ?? "0") ?? 0 == since else { return } // reset meanwhile: read again
        var changed: [String] = []
        try typed {
            try db.transaction {
                for e in answer.entries where try apply(e) { changed.append(e.key) }
                try setMeta("seq", String(answer.seq))
            }
        }
        if try meta("synced") == nil {
            try setMeta("synced", "1")
            record(.initialSyncChange, changed)
        } else if !changed.isEmpty {
            record(.serverChange, changed)
        }
    }

    // MARK: merging

    /// Applies a write from elsewhere by last-writer-wins; true when the key's visible value changed. A local
    /// pending write that loses is dropped.
    func apply(_ e: WireKVEntry) throws(StoreError) -> Bool {
        let old = try row(e.key)
        if let old, old.entry.sameWrite(as: e) {
            try typed { try db.query("UPDATE kv_local SET pending = 0 WHERE key = ?", [.text(e.key)]) }
            return false
        }
        if let old, !e.wins(over: old.entry) { return false }
        try write(e, pending: false)
        let before = old.flatMap { $0.deleted ? nil : $0.value }
        return before != (e.deleted ? nil : e.value)
    }

    mutating func record(_ reason: KVChangeReason, _ keys: [String]) {
        changes.append(KVChange(seq: nextChange, reason: reason, keys: keys))
        nextChange += 1
        if changes.count > KeyValueStore.keptChanges { changes.removeFirst(changes.count - KeyValueStore.keptChanges) }
        log.info("kv: \(reason.rawValue) \(keys.joined(separator: " "))")
    }

    // MARK: tables

    struct Row {
        var entry: WireKVEntry
        var pending: Bool
        var deleted: Bool { entry.deleted }
        var value: KVValue? { entry.value }
        var mtime: Int64 { entry.mtime }
    }

    /// A stored value; one that does not decode throws (read as absent, a deleted key would be pushed).
    private static func decode(_ text: String?, of key: String) throws(StoreError) -> KVValue? {
        guard let text else { return nil }
        do { return try JSONDecoder().decode(KVValue.self, from: Data(text.utf8)) } catch {
            throw StoreError.badValue(id: key, column: "kv value", cause: "\(error)")
        }
    }

    func row(_ key: String) throws(StoreError) -> Row? {
        var found: Row?
        try typed { try db.forEach("SELECT value, mtime, device, deleted, pending FROM kv_local WHERE key = ?", [.text(key)]) { r in
            found = Row(entry: WireKVEntry(key: key, value: try Self.decode(r.optionalText(0), of: key), mtime: r.int(1),
                                           device: r.text(2), deleted: r.int(3) != 0), pending: r.int(4) != 0)
        } }
        return found
    }

    func pending() throws(StoreError) -> [WireKVEntry] {
        var out: [WireKVEntry] = []
        try typed { try db.forEach("SELECT key, value, mtime, device, deleted FROM kv_local WHERE pending = 1") { r in
            out.append(WireKVEntry(key: r.text(0), value: try Self.decode(r.optionalText(1), of: r.text(0)), mtime: r.int(2),
                                   device: r.text(3), deleted: r.int(4) != 0))
        } }
        return out
    }

    /// Live key -> byte size of its value.
    func liveSizes() throws(StoreError) -> [String: Int] {
        var out: [String: Int] = [:]
        try typed { try db.forEach("SELECT key, value FROM kv_local WHERE deleted = 0") { r in
            out[r.text(0)] = try Self.decode(r.optionalText(1), of: r.text(0))?.byteSize ?? 0
        } }
        return out
    }

    func write(_ e: WireKVEntry, pending: Bool) throws(StoreError) {
        let json: String?
        do { json = try e.value.map { String(decoding: try JSONEncoder.wire.encode($0), as: UTF8.self) } } catch {
            throw .badValue(id: e.key, column: "kv value", cause: "does not encode: \(error)")
        }
        try typed { try db.query("""
            INSERT INTO kv_local(key, value, mtime, device, deleted, pending) VALUES(?, ?, ?, ?, ?, ?)
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, mtime = excluded.mtime, device = excluded.device,
              deleted = excluded.deleted, pending = excluded.pending
            """, [.text(e.key), json.map { .text($0) } ?? .null, .int(e.mtime), .text(e.device),
                  .int(e.deleted ? 1 : 0), .int(pending ? 1 : 0)]) }
    }

    func meta(_ key: String) throws(StoreError) -> String? {
        var found: String?
        try typed { try db.forEach("SELECT value FROM kv_meta WHERE key = ?", [.text(key)]) { found = $0.text(0) } }
        return found
    }

    func setMeta(_ key: String, _ value: String) throws(StoreError) {
        try typed { try db.query("INSERT INTO kv_meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                                 [.text(key), .text(value)]) }
    }

    /// Binds the store to `account`; a store bound to another drops its values and syncs afresh.
    mutating func bind(_ account: String) throws(StoreError) {
        let old = try meta("account")
        if old == account { return }
        if old != nil {
            let keys = try liveSizes().keys.sorted()
            try typed { try db.transaction { try db.exec("DELETE FROM kv_local; DELETE FROM kv_meta;") } }
            record(.accountChange, keys)
        }
        try setMeta("account", account)
    }
}
