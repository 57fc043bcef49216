// The stub's metadata storage and its notification of new changes, each behind one small interface, so the
// business rules (StubStore) stay in one place above them and work the same on every engine.
//
// What must hold: a `write` transaction begins by locking its container's row (`lockContainer`), so writes to
// one container are serialised by the database across every server process on it, and the sequence number it
// takes (`nextSeq`) commits in the same transaction as the row that carries it: a reader can never see a later
// feed entry before an earlier one. A `read` transaction sees one snapshot. A body that throws rolls back.
// `ChangeNotifier.committed` is called after each write commits; a notification that never arrives only
// delays a waiter until its next re-check, never loses a change.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the notifier's is a leaf.
import Foundation
import UbiquityBase

/// The storage of items, the feed and the key-value store, as transactions of a few primitives.
protocol StubMetadata: AnyObject, Sendable {
    /// One writing transaction; the body locks the container it writes with `lockContainer` first.
    func write<T>(_ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T
    /// One reading transaction on a consistent snapshot.
    func read<T>(_ body: (any MetadataTransaction) throws(ServerFailure) -> T) throws(ServerFailure) -> T
    /// How other servers' commits reach this process's long polls.
    var notifier: any ChangeNotifier { get }
    /// Runs `body` (outside any transaction) holding the lock named `name` as every server on this metadata
    /// store sees it; within one process the caller holds its own lock of that name first.
    func withSharedLock<T>(_ name: String, _ body: () throws(ServerFailure) -> T) throws(ServerFailure) -> T
    /// Whether other requests wait for the transaction running now to end (asked by it, to give its turn up).
    /// On PostgreSQL transactions run side by side, and only those on one container wait for each other there.
    var othersWaiting: Bool { get }
    func close()
}

/// The primitives a transaction offers. Items come back whole; rows never outlive the call.
protocol MetadataTransaction {
    /// Runs `body` inside a savepoint of the transaction: what it wrote is undone when it throws, the rest of
    /// the transaction kept.
    func savepoint<T>(_ body: () throws(ServerFailure) -> T) throws(ServerFailure) -> T
    /// The container's last sequence number, nil when there is no such container.
    func containerSeq(_ cid: String) throws(ServerFailure) -> Int64?
    /// Same, holding the container's row locked until the transaction ends.
    func lockContainer(_ cid: String) throws(ServerFailure) -> Int64?
    /// Creates the container at sequence 0; false when it exists already.
    func createContainer(_ cid: String) throws(ServerFailure) -> Bool
    /// Advances the container's sequence and answers the new number.
    func nextSeq(_ cid: String) throws(ServerFailure) -> Int64
    func item(_ cid: String, _ id: String) throws(ServerFailure) -> WireItem?
    /// The live item named `name` in `parent`, other than `except` (names compare byte-wise).
    func liveChild(_ cid: String, parent: String, name: String, except: String?) throws(ServerFailure) -> WireItem?
    /// Any one live item in `parent`.
    func anyLiveChild(_ cid: String, parent: String) throws(ServerFailure) -> WireItem?
    /// Inserts or replaces the item's row as given (its version already set).
    func writeItem(_ cid: String, _ item: WireItem) throws(ServerFailure)
    /// Items whose version is above `since`, in version order, at most `limit`.
    func items(_ cid: String, after since: Int64, limit: Int) throws(ServerFailure) -> [WireItem]

    func kvEntry(_ cid: String, _ key: String) throws(ServerFailure) -> WireKVEntry?
    /// Every live key with its value's size.
    func kvLiveSizes(_ cid: String) throws(ServerFailure) -> [String: Int]
    /// The key-value feed's last position.
    func kvSeq(_ cid: String) throws(ServerFailure) -> Int64
    /// Inserts or replaces the entry as given (its seq already set).
    func kvPut(_ cid: String, _ entry: WireKVEntry) throws(ServerFailure)
    func kvEntries(_ cid: String, after since: Int64) throws(ServerFailure) -> [WireKVEntry]

    /// The last change with an id applied to the item by `device` (idempotent retries), if any.
    func appliedChange(_ cid: String, item: String, device: String) throws(ServerFailure) -> AppliedChange?
    /// Records `change` as the last one applied to the item by its device (replacing the one before).
    func recordChange(_ cid: String, item: String, _ change: AppliedChange) throws(ServerFailure)
    /// Every container's id.
    func containerIDs() throws(ServerFailure) -> [String]
    /// Whether a live item, a conflict version of one, or a kept history row names the blob (blobs themselves
    /// live in BlobStore).
    func namesBlob(_ cid: String, _ sha256: String) throws(ServerFailure) -> Bool

    // History (docs/HISTORY.md): one row per version stored, appended in the transaction that stores it.

    /// Appends the row of a version just stored.
    func appendHistory(_ cid: String, _ row: WireVersion) throws(ServerFailure)
    /// The item's kept rows, newest first.
    func history(_ cid: String, _ id: String) throws(ServerFailure) -> [WireVersion]
    /// Recently Deleted: the row of each item whose current version is a delete with its row kept, newest
    /// first; with `parent`, only those deleted from that folder.
    func trash(_ cid: String, parent: String?) throws(ServerFailure) -> [WireVersion]
    /// For retention: every row of each item that has an older row (not its current version) stored at or
    /// before `olderThrough`, or whose current version is a delete stored at or before `deletedThrough`.
    func historyStamps(_ cid: String, olderThrough: Int64, deletedThrough: Int64) throws(ServerFailure) -> [HistoryStamp]
    /// Deletes the rows of these versions; answers how many went.
    @discardableResult
    func deleteHistoryRows(_ cid: String, versions: [Int64]) throws(ServerFailure) -> Int
    /// Deletes every row of the item; answers how many went.
    @discardableResult
    func deleteHistory(_ cid: String, id: String) throws(ServerFailure) -> Int
    /// The contents (files' hashes with their sizes) named by live items, their conflict versions and history
    /// rows, each with who names it, for `remote usage`.
    func namedContents(_ cid: String) throws(ServerFailure) -> [NamedContent]

    // Rewind (StubHistory.swift): the subtree now and at a time.

    /// The live items in `parent`.
    func liveChildren(_ cid: String, parent: String) throws(ServerFailure) -> [WireItem]
    /// The live items whose content or a conflict's is `sha256` (a share view's blob reads, ShareViews.swift).
    func liveItems(_ cid: String, naming sha256: String) throws(ServerFailure) -> [WireItem]
    /// The item's newest kept row stored at or before `through`.
    func historyRow(_ cid: String, _ id: String, through: Int64) throws(ServerFailure) -> WireVersion?
    /// Each item's newest kept row stored at or before `through`, of the items whose that row is in `parent`
    /// (deletes included).
    func historyChildren(_ cid: String, parent: String, through: Int64) throws(ServerFailure) -> [WireVersion]

    // Accounts (Accounts.swift).
    func setting(_ key: String) throws(ServerFailure) -> String?
    /// Sets `key` to `value` unless it is set already; false when it was.
    func claimSetting(_ key: String, _ value: String) throws(ServerFailure) -> Bool
    func users() throws(ServerFailure) -> [StubUser]
    /// False when the name (or the prefix) is taken.
    func insertUser(_ user: StubUser) throws(ServerFailure) -> Bool
    /// Deletes the user, its devices and the shares it owns or takes part in; false when there was no such user.
    func deleteUser(_ name: String) throws(ServerFailure) -> Bool
    /// False when the user has a device of that name already.
    func insertDevice(_ device: StubDevice, keyHash: String) throws(ServerFailure) -> Bool
    /// Every device of `owner`, or of every user, by user and name.
    func devices(owner: String?) throws(ServerFailure) -> [StubDevice]
    func revokeDevice(owner: String, name: String, at: Int64) throws(ServerFailure) -> Bool
    /// The device whose key hashes to `keyHash`, with its user's prefix.
    func device(keyHash: String) throws(ServerFailure) -> (StubDevice, String)?
    /// Stores a share, or changes the permission of the one of its folder and participant; answers it as stored.
    func upsertShare(_ share: StubShare) throws(ServerFailure) -> StubShare
    /// Removes the share of `folder` with `participant`; false when there was none.
    func deleteShare(container: String, folder: String, participant: String) throws(ServerFailure) -> Bool
    /// Removes share `id` of `participant`; false when there was none.
    func deleteShare(id: String, participant: String) throws(ServerFailure) -> Bool
    /// The shares `user` owns or takes part in, oldest first.
    func shares(user: String) throws(ServerFailure) -> [StubShare]
    /// The shares of folders of container `cid`.
    func shares(container cid: String) throws(ServerFailure) -> [StubShare]
    /// The limits set for the user (each nil where the standard one holds).
    func limits(_ user: String) throws(ServerFailure) -> LimitSettings
    func setLimits(_ user: String, _ limits: LimitSettings) throws(ServerFailure)
    /// The container's live items (for the item limit, Quotas.swift).
    func liveItemCount(_ cid: String) throws(ServerFailure) -> Int64
    /// Whether anything of the container is in Recently Deleted.
    func anyInTrash(_ cid: String) throws(ServerFailure) -> Bool
}

/// The accounts' tables, the same on every engine (INTEGER is 64 bits in both).
enum AccountTables {
    static let statements = [
        "CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, prefix TEXT NOT NULL UNIQUE, created BIGINT NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS devices (owner TEXT NOT NULL, name TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE,
            created BIGINT NOT NULL, revoked BIGINT, PRIMARY KEY (owner, name))
        """,
        // A user's limits (Quotas.swift); a NULL, or no row, is the standard limit.
        "CREATE TABLE IF NOT EXISTS user_limits (name TEXT PRIMARY KEY, storage BIGINT, containers BIGINT, items BIGINT)",
        // Folders shared with other users (Shares.swift): one row per folder and participant.
        """
        CREATE TABLE IF NOT EXISTS shares (id TEXT PRIMARY KEY, container TEXT NOT NULL, folder TEXT NOT NULL,
            owner TEXT NOT NULL, participant TEXT NOT NULL, read_only BIGINT NOT NULL, created BIGINT NOT NULL,
            UNIQUE (container, folder, participant))
        """,
        "CREATE INDEX IF NOT EXISTS shares_by_owner ON shares (owner)",
        "CREATE INDEX IF NOT EXISTS shares_by_participant ON shares (participant)",
    ]
}

/// The history table, the same on every engine but for its integer and boolean types: keyed by version (unique in
/// its container), indexed by item and by time as docs/HISTORY.md says, by hash for `namesBlob` (each collection
/// asks it of every candidate blob) and by parent for what a folder's restore brings back with it.
enum HistoryTable {
    static func statements(integer: String, boolean: String) -> [String] {
        [
            """
            CREATE TABLE IF NOT EXISTS history (container TEXT NOT NULL, version \(integer) NOT NULL, id TEXT NOT NULL,
                at \(integer) NOT NULL, deleted \(boolean) NOT NULL, parent TEXT, name TEXT NOT NULL, path TEXT NOT NULL,
                kind TEXT NOT NULL, mode \(integer) NOT NULL, size \(integer) NOT NULL, sha256 TEXT NOT NULL,
                mtime \(integer) NOT NULL, device TEXT NOT NULL, target TEXT, xattrs TEXT, batch TEXT,
                PRIMARY KEY (container, version))
            """,
            "CREATE INDEX IF NOT EXISTS history_by_item ON history (container, id, version)",
            "CREATE INDEX IF NOT EXISTS history_by_time ON history (container, at)",
            "CREATE INDEX IF NOT EXISTS history_by_sha ON history (container, sha256)",
            "CREATE INDEX IF NOT EXISTS history_by_parent ON history (container, parent, version)",
        ]
    }

    static let columns = "id, version, at, path, deleted, parent, name, kind, mode, mtime, size, sha256, device, target, xattrs, batch"

    /// Fills a history table made for a store that had items already: one row per live item, its current
    /// version as if stored at `now`, so that a rewind knows every item there was at the upgrade (without it,
    /// an item unchanged since then had no row, and a rewind took it for one made after its time). Rows that
    /// are there already stay (servers starting together). `notDeleted` is the engine's false for `deleted`.
    static func backfill(now: Int64, notDeleted: String, orIgnore: (prefix: String, suffix: String)) -> String {
        """
        WITH RECURSIVE paths(container, id, path) AS (
          SELECT container, id, '' FROM items WHERE parent IS NULL
          UNION ALL
          SELECT i.container, i.id, CASE WHEN p.path = '' THEN i.name ELSE p.path || '/' || i.name END
          FROM items i JOIN paths p ON i.container = p.container AND i.parent = p.id WHERE i.deleted = \(notDeleted))
        INSERT \(orIgnore.prefix)INTO history (container, version, id, at, deleted, parent, name, path, kind, mode, size,
          sha256, mtime, device, target, xattrs)
        SELECT i.container, i.version, i.id, \(now), i.deleted, i.parent, i.name, p.path, i.kind, i.mode, i.size,
          i.sha256, i.mtime, i.device, i.target, i.xattrs
        FROM items i JOIN paths p ON p.container = i.container AND p.id = i.id\(orIgnore.suffix)
        """
    }

    /// The item's newest row at or before a time, of the items whose that row is in a parent: the condition on
    /// the row `h`, with the container, the parent and the time as the parameters `container`, `parent`, `time`.
    static func newestThrough(container: String, parent: String, time: String) -> String {
        """
        h.container = \(container) AND h.parent = \(parent) AND h.at <= \(time) AND h.version = (SELECT max(x.version)
          FROM history x WHERE x.container = \(container) AND x.id = h.id AND x.at <= \(time))
        """
    }
}

/// Who names a content: a live item (or a conflict version of one), a history row of a live item, or one of a
/// deleted item (Recently Deleted).
enum ContentHolder: Int, Comparable {
    case live, history, trash
    static func < (a: ContentHolder, b: ContentHolder) -> Bool { a.rawValue < b.rawValue }
}

/// A content (a blob, or a manifest of that hash) named in a container.
struct NamedContent: Equatable {
    let sha256: String
    let size: Int64
    let holder: ContentHolder
}

/// A change id as the remote remembers it: who made it, the digest of what it asked, the version it made.
struct AppliedChange: Equatable {
    let device: String
    let change: String
    let digest: String
    let version: Int64
}

/// Wakes this process's long polls when a change commits, here or (for shared engines) on another server.
protocol ChangeNotifier: AnyObject, Sendable {
    /// Grows by at least one on every change noticed; read it before looking, wait on it after.
    var generation: UInt64 { get }
    /// Returns when the generation has passed `seen`, at `deadline`, or when stopping.
    func wait(after seen: UInt64, until deadline: Date)
    /// Called after a write to `cid` committed in this process.
    func committed(_ cid: String)
    var isStopping: Bool { get }
    func setStopping(_ value: Bool)
}

/// The in-process notifier: a generation every local commit counts up, waking every waiter.
final class LocalNotifier: ChangeNotifier, Sendable {
    private struct Flags {
        var generation: UInt64 = 0
        var stopping = false
    }
    private let flags = Locked(Flags())

    var generation: UInt64 { flags.withLock { $0.generation } }

    func wait(after seen: UInt64, until deadline: Date) {
        flags.wait(until: deadline, for: { $0.generation > seen || $0.stopping }, then: { _ in })
    }

    func committed(_ cid: String) { bump() }

    /// Counts one change and wakes every waiter.
    func bump() { flags.withLock(notifying: true) { $0.generation &+= 1 } }

    var isStopping: Bool { flags.withLock { $0.stopping } }

    func setStopping(_ value: Bool) { flags.withLock(notifying: true) { $0.stopping = value } }
}

/// Items and key-value entries as JSON columns, the same on every engine.
enum MetadataCoding {
    static func json<T: Encodable>(_ value: T) throws(ServerFailure) -> String {
        String(decoding: try ServerFailure.coding("a row's JSON") { try JSONEncoder.wire.encode(value) }, as: UTF8.self)
    }

    static func xattrs(_ text: String) throws(ServerFailure) -> [String: String] {
        try ServerFailure.coding("stored xattrs") { try JSONDecoder().decode([String: String].self, from: Data(text.utf8)) }
    }

    static func conflicts(_ text: String) throws(ServerFailure) -> [WireConflict] {
        try ServerFailure.coding("stored conflicts") { try JSONDecoder().decode([WireConflict].self, from: Data(text.utf8)) }
    }

    static func kvValue(_ text: String?) throws(ServerFailure) -> KVValue? {
        guard let text else { return nil }
        return try ServerFailure.coding("a stored value") { try JSONDecoder().decode(KVValue.self, from: Data(text.utf8)) }
    }
}
