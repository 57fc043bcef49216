// The backing store of one device and container: an SQLite database (WAL) holding every item with its remote
// and local state plus the journal of pending changes, content files for local copies, and a staging area
// where downloads land before they are verified and moved into place.
//
// Layout:  DIR/state.sqlite   items, pending journal, meta (feed token, container, device)
//          DIR/content/<id>   the local copy of a file (complete, or dirty local edits)
//          DIR/staging/       downloads in flight; emptied at start
//          DIR/past/          verified copies of past versions, each fetched for one open and unlinked by it;
//                             emptied at start
//          DIR/lock           locked by the one daemon using the store (StoreLock, below)
//          DIR/reserve        1 MiB kept free for the database: given up when the disk is full, so that what
//                             frees space (deletes, evictions, uploads' answers) can still be recorded
// The store does no locking of its own: the Container serialises every call.
// Every database failure leaves it as a StoreError of its case, with SQLite's code and message; a stored value
// that does not decode throws `badValue`, never reads as empty or absent (a later push would send that).
//
// What must hold: once a Container has opened the store (`writesNeedTransaction`) every write runs inside an
// operation's transaction (`begin`/`commit`, never nested); a write outside one is a bug, stopped in a debug
// build and logged in a release one. A local change moves the item to the end of the journal in the same write
// as its row (`saveChanged`); a local-only item is only saved. Every write and delete of an item is told to the
// live query's stream. On a full disk the reserve is given up for one more try of an operation that frees
// space (FullDiskRoom), and made again after the next commit. The database is never fsynced under the
// container's lock: `Checkpointer` (below) does it on a connection of its own.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): runs under the container's lock;
// `StoreLock.held` and the `Checkpointer` are leaves.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

public final class Store {
    public let directory: String
    let db: Database
    private let lock: StoreLock
    private var nextSeq: Int64 = 1
    /// Told the id of every item written or deleted (the live query's change stream).
    var changes: ItemChanges?

    /// Where the store's files are (immutable: safe to read without the container's lock).
    let paths: StorePaths
    var contentDirectory: String { paths.content }
    var stagingDirectory: String { paths.staging }
    func contentPath(_ id: String) -> String { paths.content(id) }
    func conflictPath(_ id: String, _ conflict: String) -> String { paths.conflict(id, conflict) }

    /// Opens the store at `directory`, creating it if needed, and takes its lock.
    /// Throws a plain message if another daemon holds the store, or the database cannot be read.
    public init(directory: String) throws(StoreError) {
        self.directory = directory
        self.paths = StorePaths(directory: directory, spares: SpareFiles(directory: directory + "/spare"))
        self.checkpointer = Checkpointer(path: directory + "/state.sqlite")
        for folder in ["", "/content", "/staging", "/past", "/spare"] {
            do { try makeDirectories(directory + folder) } catch {
                throw .unusable(directory: directory, cause: "cannot make \(directory + folder): \(error)")
            }
        }
        lock = try StoreLock(directory: directory)
        do {
            db = try Database(path: directory + "/state.sqlite")
            try db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF;")
            try createSchema()
            _ = try db.query("SELECT count(*) FROM items")
        } catch {
            throw StoreError.unusable(directory: directory, cause: "\(error)")
        }
        nextSeq = (try values("SELECT coalesce(max(seq), 0) FROM pending") { $0.int(0) }.first ?? 0) + 1
        try clearStaging()
        keepReserve()
    }

    private var reservePath: String { directory + "/reserve" }
    /// The size of the reserve.
    static let reserveBytes: Int64 = 1 << 20
    private var hasReserve = false
    /// Why the reserve could not be made last time, when the cause was other than a lack of room.
    private var reserveFailure: String?

    /// Whether the reserve is in place, making it again first if there is room for it: false while the disk is
    /// too full for it. What only takes space (remote changes) waits for this, so that the reserve and what
    /// eviction frees go to what leads to room: upload answers, evictions, deletes.
    var hasRoom: Bool {
        if hasReserve && access(reservePath, F_OK) != 0 { hasReserve = false } // removed by someone else
        keepReserve()
        return hasReserve
    }

    /// Makes sure the reserve file exists (quietly does nothing when there is no room for it; any other cause
    /// is logged, once until it changes).
    private func keepReserve() {
        guard !hasReserve else { return }
        do {
            let fd = try FileDescriptor.open(reservePath, O_WRONLY | O_CREAT, mode: 0o600)
            let rc = posix_fallocate(fd.raw, 0, off_t(Store.reserveBytes))
            fd.close()
            hasReserve = rc == 0
            if !hasReserve { removeLeftover(reservePath) }
            noteReserveFailure(rc == 0 || rc == ENOSPC || rc == EDQUOT ? nil : "\(Errno(rc))")
        } catch {
            noteReserveFailure(error == .noSpace || error == .quota ? nil : "\(error)")
        }
    }

    /// Logs why the reserve cannot be made, when that is new.
    private func noteReserveFailure(_ cause: String?) {
        if let cause, cause != reserveFailure {
            Logger("store").warning("cannot make the reserve file \(reservePath): \(cause)")
        }
        reserveFailure = cause
    }

    /// Runs a database write; when the disk is full, gives up the reserve and tries once more. Inside a
    /// transaction the write is not retried alone (SQLite may have rolled the transaction back): the
    /// transaction's owner retries the whole of it (`giveUpReserve`).
    @discardableResult
    private func withReserve<T>(_ body: () throws -> T) throws(StoreError) -> T {
        try write { () throws(StoreError) in try withReserveUnchecked(body) }
    }

    private func withReserveUnchecked<T>(_ body: () throws -> T) throws(StoreError) -> T {
        try typed {
            do {
                let result = try body()
                if !inTransaction { keepReserve() }
                return result
            } catch let error as SQLiteError where error.isDiskFull && hasReserve && !inTransaction {
                removeLeftover(reservePath) // gone already is as good: the retry only needs the room
                hasReserve = false
                return try body()
            }
        }
    }

    // MARK: transactions (Container.mutate: one per operation)

    private var inTransaction = false
    /// Set once a Container has opened the store: from then on every write belongs to one of its operations.
    var writesNeedTransaction = false

    /// A write outside `Container.mutate` is a bug of the core (it would commit alone, and no rollback of the
    /// operation around it would undo it): stops a debug build, and is logged in a release one.
    private func checkInTransaction() {
        guard writesNeedTransaction && !inTransaction else { return }
        assertionFailure("a store write outside Container.mutate")
        Logger("store").error("a store write outside an operation's transaction")
    }

    /// The first failure inside the open transaction. SQLite rolls a transaction back by itself on some
    /// failures (a full disk, an I/O error): every later write of the operation then fails with that cause,
    /// rather than run outside any transaction, and so does the commit.
    private var transactionFailure: StoreError?

    /// Runs one write of the store; the first of an operation opens its SQLite transaction.
    private func write<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        checkInTransaction()
        if inTransaction && !begun {
            try typed { try db.query("BEGIN IMMEDIATE") }
            begun = true
            // The deletes kept back go first, before the rows of this operation: in the journal a folder's
            // delete stays after its files', and a create after the delete that freed its name.
            try writeKeptDeletes()
        }
        if inTransaction, db.isAutocommit, let failure = transactionFailure { throw failure }
        do { return try body() } catch {
            if inTransaction && transactionFailure == nil { transactionFailure = error }
            throw error
        }
    }

    /// Whether the open operation has begun its SQLite transaction: only at its first write, so that an
    /// operation that writes nothing (a close, a flush of what is recorded already) costs no transaction. Its
    /// reads before that write see the same rows: only this connection writes the core's tables, under the
    /// container's lock.
    private var begun = false

    /// Opens an operation. Its transaction is immediate: the write lock is taken at its start (waiting out the
    /// key-value store's connection, which writes the same database), so a transaction that reads and then
    /// writes never fails on a snapshot that another connection's commit made stale.
    func begin() {
        precondition(!inTransaction, "transactions do not nest")
        keptUndo = []
        releasedAtBegin = releasedContent
        inTransaction = true
        begun = false
        transactionFailure = nil
    }

    /// A commit that fails leaves the operation open: its owner rolls it back.
    func commit() throws(StoreError) {
        if db.isAutocommit, let failure = transactionFailure { throw failure }
        if begun {
            try typed { try db.query("COMMIT") }
            commits += 1
        }
        begun = false
        inTransaction = false
        keptUndo = []
        keepReserve()
    }

    /// Whether the open operation has written anything (so its commit costs a transaction anyway).
    var hasBegun: Bool { begun }

    /// Transactions committed since the store opened (what a test of an operation's cost counts).
    private(set) var commits = 0

    /// Rolls back the open transaction, if it began and SQLite has not already rolled it back.
    func rollBack() {
        guard inTransaction else { return }
        inTransaction = false
        for (id, row) in keptUndo.reversed() { _ = setKept(id, row) }
        keptUndo = []
        releasedContent = releasedAtBegin
        begun = false
        if !db.isAutocommit { try? db.exec("ROLLBACK") }
    }

    /// After a transaction failed on a full disk: frees the reserve so that one more try can succeed; false
    /// when the reserve is gone already.
    func giveUpReserve() -> Bool {
        guard hasReserve else { return false }
        removeLeftover(reservePath)
        hasReserve = false
        return true
    }

    private func createSchema() throws(StoreError) {
        try typed { try db.exec("""
        CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS items(
          id TEXT PRIMARY KEY, parent TEXT, name TEXT NOT NULL, kind TEXT NOT NULL, mode INTEGER NOT NULL,
          mtime INTEGER NOT NULL, ctime INTEGER NOT NULL, size INTEGER NOT NULL,
          remote_version INTEGER NOT NULL, remote_sha TEXT NOT NULL, remote_size INTEGER NOT NULL,
          device TEXT NOT NULL, has_local INTEGER NOT NULL, local_sha TEXT, dirty INTEGER NOT NULL,
          meta_dirty INTEGER NOT NULL, deleted INTEGER NOT NULL, pinned INTEGER NOT NULL,
          xattrs TEXT NOT NULL, conflicts TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS pending(id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS pending_seq ON pending(seq);
        CREATE TABLE IF NOT EXISTS last_used(id TEXT PRIMARY KEY, at INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS chunk_places(
          id TEXT NOT NULL, offset INTEGER NOT NULL, size INTEGER NOT NULL, sha TEXT NOT NULL,
          PRIMARY KEY(id, offset));
        CREATE INDEX IF NOT EXISTS chunk_places_sha ON chunk_places(sha);
        """) }
        for (name, type) in Store.addedColumns { try typed { try db.addColumnIfMissing("items", name, type) } }
    }

    /// Columns added since the first schema, with what an older row holds in them: a store made by an older
    /// version opens, and its items read as they did (no link target, atime as mtime, no entry change seen,
    /// owned by the mounting user).
    private static let addedColumns = [
        ("target", "TEXT"),
        ("atime", "INTEGER"),
        ("entries_mtime", "INTEGER NOT NULL DEFAULT 0"),
        ("excluded", "INTEGER NOT NULL DEFAULT 0"),
        ("uid", "INTEGER"),
        ("gid", "INTEGER"),
        ("capped_mode", "INTEGER NOT NULL DEFAULT 0"),
    ]

    /// Removes every leftover of an interrupted download (nothing in staging is ever served) and every copy of a
    /// past version an open did not come to take.
    private func clearStaging() throws(StoreError) {
        for folder in [stagingDirectory, paths.past] {
            let names: [String]
            do { names = try FileManager.default.contentsOfDirectory(atPath: folder) } catch {
                throw .unusable(directory: directory, cause: "cannot list its folder \(folder): \(error)")
            }
            for name in names {
                // One left behind is never served, only in the way of nothing: logged, not fatal.
                do { try removeFile(folder + "/" + name) } catch {
                    Logger("store").warning("cannot remove \(folder)/\(name): \(error)")
                }
            }
        }
    }

    /// Runs a query and reads each row inside the callback: a Row is only valid there (the rows
    /// `Database.query` returns outlive their statement and must not be read).
    private func values<T>(_ sql: String, _ params: [SQLValue] = [], _ read: (Row) throws(StoreError) -> T) throws(StoreError) -> [T] {
        var out: [T] = []
        try typed { try db.forEach(sql, params) { out.append(try read($0)) } }
        return out
    }

    // MARK: meta

    func meta(_ key: String) throws(StoreError) -> String? {
        try values("SELECT value FROM meta WHERE key = ?", [.text(key)]) { $0.text(0) }.first
    }

    func setMeta(_ key: String, _ value: String) throws(StoreError) {
        try withReserve {
            try db.query("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                         [.text(key), .text(value)])
        }
    }

    /// Records which container the store holds (by the daemon, before a Container opens the store).
    public func bind(container: String) throws(StoreError) { try setMeta("container", container) }

    func removeMeta(_ key: String) throws(StoreError) {
        _ = try write { () throws(StoreError) in try typed { try db.query("DELETE FROM meta WHERE key = ?", [.text(key)]) } }
    }

    /// Sets of ids kept in `meta` under a key prefix ("resolved:", "unpushed:", "refused:").
    private func insertIDs(_ prefix: String, _ ids: [String]) throws(StoreError) {
        try withReserve {
            try db.transaction {
                for id in ids { try db.query("INSERT OR REPLACE INTO meta(key, value) VALUES(?, '1')", [.text(prefix + id)]) }
            }
        }
    }

    private func deleteIDs(_ prefix: String, _ ids: [String]) throws(StoreError) {
        try write { () throws(StoreError) in try typed { try db.transaction { for id in ids { try db.query("DELETE FROM meta WHERE key = ?", [.text(prefix + id)]) } } } }
    }

    /// The ids under `prefix`, read as a range of the key's index (a LIKE would scan every key, and `meta` holds
    /// one per item created here): the keys from `prefix` up to, not including, the prefix with its last
    /// character, a ":", turned into the next one.
    private func ids(_ prefix: String) throws(StoreError) -> [String] {
        precondition(prefix.hasSuffix(":"), "id prefixes end in a colon")
        return try values("SELECT key FROM meta WHERE key >= ? AND key < ? ORDER BY key",
                          [.text(prefix), .text(prefix.dropLast() + ";")]) {
            String($0.text(0).dropFirst(prefix.count))
        }
    }

    /// Conflict versions resolved on this device, remembered across restarts (see Container.discardedConflicts).
    func markResolved(_ conflicts: [String]) throws(StoreError) { try insertIDs("resolved:", conflicts) }
    func resolvedConflicts() throws(StoreError) -> [String] { try ids("resolved:") }

    /// Conflict versions added here and not yet stored by the remote (see Container.unpushedConflicts):
    /// `added` true remembers them, false forgets them.
    func markUnpushed(_ conflicts: [String], added: Bool) throws(StoreError) {
        if added { try insertIDs("unpushed:", conflicts) } else { try deleteIDs("unpushed:", conflicts) }
    }
    func unpushedConflicts() throws(StoreError) -> [String] { try ids("unpushed:") }

    /// Remote changes the puller could not take yet (see SyncLoops.refetchRefused), by item id.
    func markRefused(_ id: String) throws(StoreError) { try insertIDs("refused:", [id]) }
    func takeRefused() throws(StoreError) -> [String] {
        let refused = try ids("refused:")
        try deleteIDs("refused:", refused)
        return refused
    }

    /// Marks an item whose create was sent: the remote may hold it even if no answer came back. `what` is the
    /// state sent (encoded by the caller); the first one sent is kept, as the one that may have landed first.
    func markCreateSent(_ id: String, _ what: String = "1") throws(StoreError) {
        try withReserve {
            try db.query("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO NOTHING",
                         [.text("sent:" + id), .text(what)])
        }
    }
    func createWasSent(_ id: String) throws(StoreError) -> Bool { try meta("sent:" + id) != nil }
    /// The state recorded by `markCreateSent`.
    func sentCreate(_ id: String) throws(StoreError) -> String? { try meta("sent:" + id) }
    /// The remote does not hold the item (any more): a create sent before is not there.
    func forgetCreateSent(_ id: String) throws(StoreError) { try removeMeta("sent:" + id) }

    /// The last puts sent for an item, encoded by the caller (`PushSide.markSent`, PushState.swift).
    func sentPuts(_ id: String) throws(StoreError) -> String? { try meta("puts:" + id) }
    func setSentPuts(_ id: String, _ puts: String) throws(StoreError) { try setMeta("puts:" + id, puts) }
    func forgetSentPuts(_ id: String) throws(StoreError) { try removeMeta("puts:" + id) }

    /// A local-only item whose remote copy is gone (or left to other devices): made ubiquitous again, it is
    /// written against remote version `base` (its tombstone: the remote keeps the id).
    func markLeftRemote(_ id: String, base: Int64) throws(StoreError) {
        try setMeta("gone:" + id, String(base))
    }
    /// A folder deleted on the remote (tombstone `version`) kept here for the changes below it, to go back up over
    /// its tombstone (`CoreState.reviveDeletedFolder`).
    func markRevived(_ id: String, over version: Int64) throws(StoreError) {
        try setMeta("revived:" + id, String(version))
    }
    /// The tombstone recorded by `markRevived`, until the folder's revival lands or the remote's newer state
    /// replaces it.
    func revivedOver(_ id: String) throws(StoreError) -> Int64? {
        guard let text = try meta("revived:" + id) else { return nil }
        guard let version = Int64(text) else { throw StoreError.badValue(id: "revived:" + id, column: "meta", cause: text) }
        return version
    }
    func forgetRevived(_ id: String) throws(StoreError) { try removeMeta("revived:" + id) }

    /// The version recorded by `markLeftRemote` (kept until the item is removed: a newer one replaces it).
    func leftRemoteBase(_ id: String) throws(StoreError) -> Int64? {
        guard let text = try meta("gone:" + id) else { return nil }
        guard let base = Int64(text) else { throw StoreError.badValue(id: "gone:" + id, column: "meta", cause: text) }
        return base
    }

    // MARK: items

    private static let columns = """
        id, parent, name, kind, mode, mtime, ctime, size, remote_version, remote_sha, remote_size, device,
        has_local, local_sha, dirty, meta_dirty, deleted, pinned, xattrs, conflicts, target, atime, entries_mtime,
        excluded, uid, gid, capped_mode
        """

    /// An upsert, not INSERT OR REPLACE: a row saved again is updated where it lies (the same rowid, its id's
    /// index entry untouched), where a replace deleted it and inserted it anew, writing more pages per commit.
    private static let insertItem = "INSERT INTO items(\(columns)) VALUES("
        + Array(repeating: "?", count: 27).joined(separator: ",") + ") ON CONFLICT(id) DO UPDATE SET "
        + columns.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.dropFirst()
            .map { "\($0) = excluded.\($0)" }.joined(separator: ", ")

    /// Every item in the store, each knowing whether a folder above it is local-only.
    func loadItems() throws(StoreError) -> [Item] {
        var byID: [String: Item] = [:]
        try forEachItem { byID[$0.id] = $0 }
        Item.markLocalOnlyAbove(&byID)
        return Array(byID.values)
    }

    /// How many item rows the store holds.
    func itemCount() throws(StoreError) -> Int {
        try typed { try db.first("SELECT count(*) FROM items") { Int($0.int(0)) } } ?? 0
    }

    /// Reads every item row, one at a time (`localOnlyAbove` is not set: it depends on the parents).
    func forEachItem(_ body: (Item) throws(StoreError) -> Void) throws(StoreError) {
        try typed { try db.forEach("SELECT \(Store.columns) FROM items") { try body(try Store.item($0)) } }
    }

    /// Reads every item row into `index` (the load at start; `localOnlyAbove` is not set). A row of the common
    /// kind is packed straight from its columns; one with rare fields (xattrs, conflicts, a target...) is
    /// decoded as an `Item` first.
    func load(into index: inout ItemIndex) throws(StoreError) {
        try typed { try db.forEach("SELECT \(Store.columns) FROM items") { row in
            if let packed = Store.packed(row) { return index.insertLoaded(packed) }
            let item = try Store.item(row)
            index[item.id] = item
        } }
    }

    private static func item(_ row: Row) throws(StoreError) -> Item {
        let id = row.text(0)
        return Item(
            id: id, parent: row.optionalText(1), name: row.text(2),
            kind: ItemKind(rawValue: row.text(3)) ?? .file, mode: UInt32(row.int(4)),
            mtime: row.int(5), ctime: row.int(6), size: row.int(7),
            remoteVersion: row.int(8), remoteSHA: row.text(9), remoteSize: row.int(10), device: row.text(11),
            hasLocal: row.int(12) != 0, localSHA: row.optionalText(13), dirty: row.int(14) != 0,
            metaDirty: row.int(15) != 0, deleted: row.int(16) != 0, pinned: row.int(17) != 0,
            xattrs: try Store.decodeXattrs(row.text(18), of: id),
            conflicts: try Store.decodeConflicts(row.text(19), of: id),
            target: row.optionalText(20),
            atime: row.isNull(21) ? nil : row.int(21), owner: Store.owner(row),
            entriesMTime: row.int(22), excluded: row.int(23) != 0, cappedModeBits: UInt32(truncatingIfNeeded: row.int(26)))
    }

    /// The owner kept in columns 24 and 25 (both set or both null).
    private static func owner(_ row: Row) -> Owner? {
        if row.isNull(24) { return nil }
        return Owner(uid: UInt32(truncatingIfNeeded: row.int(24)), gid: UInt32(truncatingIfNeeded: row.int(25)))
    }

    /// The packed form of a row that has none of the rare fields (PackedItem.Extras), else nil.
    private static func packed(_ row: Row) -> PackedItem? {
        let empty = row.withText(18) { $0.elementsEqual("{}".utf8) } && row.withText(19) { $0.elementsEqual("[]".utf8) }
        guard empty, row.isNull(20), row.isNull(21), row.isNull(24), row.int(22) == 0, row.int(10) == row.int(7),
              row.int(26) == 0 else {
            return nil
        }
        var flags: PackedItem.Flags = [.live]
        let bits: [(Int32, PackedItem.Flags)] = [(12, .hasLocal), (14, .dirty), (15, .metaDirty), (16, .deleted),
                                                 (17, .pinned), (23, .excluded)]
        for (column, flag) in bits where row.int(column) != 0 { flags.insert(flag) }
        var digest = Digest()
        let remote: Bool = row.withText(9) { b in
            guard let d = Digest(bytes: b) else { return b.isEmpty }
            digest = d
            flags.insert(.remoteDigest)
            return true
        }
        guard remote else { return nil }
        if !row.isNull(13) {
            guard row.withText(13, { local in row.withText(9) { local.elementsEqual($0) } }) else { return nil }
            flags.insert(.localIsRemote)
        }
        guard let kind = row.withText(3, { ItemKind(rawValue: String(decoding: $0, as: UTF8.self)) }) else { return nil }
        return PackedItem(
            code: row.withText(0) { ItemCode(bytes: $0) }, parent: row.isNull(1) ? .none : row.withText(1) { ItemCode(bytes: $0) },
            name: row.text(2), mtime: row.int(5), ctime: row.int(6), size: row.int(7), remoteVersion: row.int(8),
            remoteSHA: digest, mode: UInt32(row.int(4)), device: row.withText(11) { UInt32(IDTable.devices.number(of: $0)) },
            kind: kind, flags: flags)
    }

    /// Writes one item; adds it to the pending journal when it has changes to push, removes it otherwise.
    func save(_ item: Item) throws(StoreError) {
        if keepBack(item, toJournalEnd: false) { return }
        let kept = setKept(item.id, nil)
        try withReserve {
            try db.transaction {
                try write(item)
                if kept?.toJournalEnd == true { try moveToJournalEnd(item) }
            }
        }
        changes?.note(item.id)
    }

    private func write(_ item: Item) throws {
        try db.query(Store.insertItem, [
            .text(item.id), item.parent.map { .text($0) } ?? .null, .text(item.name), .text(item.kind.rawValue),
            .int(Int64(item.mode)), .int(item.mtime), .int(item.ctime), .int(item.size),
            .int(item.remoteVersion), .text(item.remoteSHA), .int(item.remoteSize), .text(item.device),
            .int(item.hasLocal ? 1 : 0), item.localSHA.map { .text($0) } ?? .null, .int(item.dirty ? 1 : 0),
            .int(item.metaDirty ? 1 : 0), .int(item.deleted ? 1 : 0), .int(item.pinned ? 1 : 0),
            .text(Store.encodeXattrs(item.xattrs)), .text(Store.encodeConflicts(item.conflicts)),
            item.target.map { .text($0) } ?? .null,
            item.atime.map { .int($0) } ?? .null, .int(item.entriesMTime), .int(item.excluded ? 1 : 0),
            item.owner.map { .int(Int64($0.uid)) } ?? .null, item.owner.map { .int(Int64($0.gid)) } ?? .null,
            .int(Int64(item.cappedModeBits)),
        ])
        if !item.isPending {
            try db.query("DELETE FROM pending WHERE id = ?", [.text(item.id)])
        } else {
            // A pending item is always in the journal, where it keeps its place if it has one already: an item
            // that becomes local-only while its create is in flight has the delete of that create to push.
            try db.query("INSERT OR IGNORE INTO pending(id, seq) VALUES(?, ?)", [.text(item.id), .int(nextSeq)])
            nextSeq += 1
        }
    }

    /// Saves an item with a local change and moves it to the end of the pending journal (a local-only item
    /// is only saved: it is in the journal only while the remote holds a copy to delete).
    func saveChanged(_ item: Item) throws(StoreError) {
        if item.isLocalOnly { return try save(item) }
        if keepBack(item, toJournalEnd: true) { return }
        _ = setKept(item.id, nil)
        try withReserve {
            try db.transaction {
                try write(item)
                try moveToJournalEnd(item)
            }
        }
        changes?.note(item.id)
    }

    private func moveToJournalEnd(_ item: Item) throws {
        if item.isLocalOnly { return }
        try db.query("INSERT INTO pending(id, seq) VALUES(?, ?) ON CONFLICT(id) DO UPDATE SET seq = excluded.seq",
                     [.text(item.id), .int(nextSeq)])
        nextSeq += 1
    }

    // MARK: rows kept back (a new file until its close, a delete)

    /// An item row held back from the database: written at the next flush point, moved to the end of the
    /// pending journal then if a `saveChanged` asked for that. `item` nil: the item is removed for good then.
    private struct KeptRow {
        var id: String
        var item: Item?
        var toJournalEnd: Bool
        var order: Int
        /// Its content file is emptied once the row is written (`releaseContentWhenWritten`).
        var releasesContent = false
        /// A delete: a tombstone to push, or an item removed for good.
        var isDelete: Bool { item?.deleted ?? true }
    }

    /// Rows that operations run with `keepsRowsBack` saved (a new file's create, its attributes and write marks
    /// before its close; a delete): `writeKeptBack` writes them in one transaction with whatever else it
    /// commits: a file's own at its flush, fsync or release (its close then fails if they cannot be written: a
    /// full disk); all of them at the push loop's next pass (with the reserve if need be: a file written while
    /// full is uploaded and evicted only once its row is in), at any commit once the oldest is a second old
    /// while the store has room (on a full disk a row that cannot be written must not fail every later
    /// operation), and once `keptBackLimit` are kept. The deletes kept back go with any commit that writes
    /// anything: a name a delete freed and a later committed row took is never claimed twice after a crash.
    /// So creating, chmod, chown and utimens of a file before its close cost one commit, a delete none of its
    /// own, and what a program closed is durable as before; a crash loses only rows of files no program had
    /// closed yet (their content files are orphans then, removed at the next start) and deletes of the last
    /// second (those files are back whole: their content goes only once the delete is written).
    private var keptBack: [String: KeptRow] = [:]
    private var keptOrder = 0
    /// How many of the rows kept back are deletes.
    private var keptDeletes = 0
    /// The open operation's changes of `keptBack`, earlier row first: its rollback puts them back.
    private var keptUndo: [(id: String, row: KeptRow?)] = []
    /// When the oldest row kept back was kept (the core's clock, ns).
    private(set) var keptSince: Int64 = 0
    /// Set by the core for one operation (`CoreState.transact`): its item saves are kept back.
    var keepsRowsBack = false
    /// How long a row stays kept back at most: the first commit after that writes it.
    static let keptBackNanoseconds: Int64 = 1_000_000_000
    /// How many rows are kept back at most (some 10 MB): the next commit writes them (`rm -rf` of a large tree).
    static let keptBackLimit = 32_768
    /// The core's clock (ns since the epoch), for `keptSince`.
    var clock: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1e9) }
    /// Whether any row is kept back.
    var hasKeptBack: Bool { !keptBack.isEmpty }
    /// Whether so many rows are kept back that the next commit writes them.
    var isKeptBackFull: Bool { keptBack.count >= Store.keptBackLimit }
    /// Whether any delete is kept back.
    var hasKeptDeletes: Bool { keptDeletes > 0 }

    /// Whether `id` has a row kept back.
    func isKeptBack(_ id: String) -> Bool { keptBack[id] != nil }

    /// Whether the row kept back for `id` is its delete.
    func keepsDelete(_ id: String) -> Bool { keptBack[id]?.isDelete == true }

    /// Content files of deleted items whose delete is written now (or replaced by a newer row): to empty once
    /// the operation commits (`takeReleasedContent`).
    private var releasedContent: [String] = []
    private var releasedAtBegin: [String] = []

    /// Replaces the row kept back for `id` (nil: none), noting the change for a rollback.
    private func setKept(_ id: String, _ row: KeptRow?) -> KeptRow? {
        let old: KeptRow? = if let row { keptBack.updateValue(row, forKey: id) } else { keptBack.removeValue(forKey: id) }
        if inTransaction { keptUndo.append((id, old)) }
        keptDeletes += (row?.isDelete == true ? 1 : 0) - (old?.isDelete == true ? 1 : 0)
        if old?.releasesContent == true && row?.releasesContent != true { releasedContent.append(id) }
        return old
    }

    private func keepBack(_ item: Item, toJournalEnd: Bool) -> Bool {
        keep(item.id, item, toJournalEnd: toJournalEnd)
    }

    private func keep(_ id: String, _ item: Item?, toJournalEnd: Bool) -> Bool {
        guard keepsRowsBack && inTransaction else { return false }
        checkInTransaction()
        if keptBack.isEmpty { keptSince = clock() }
        let earlier = keptBack[id]
        keptOrder += 1
        // A row that goes to the journal's end is written after those kept before it (a folder's delete after
        // its files'), even when an earlier row of it (its entries' time) was kept first.
        _ = setKept(id, KeptRow(id: id, item: item, toJournalEnd: toJournalEnd || earlier?.toJournalEnd == true,
                                order: toJournalEnd ? keptOrder : earlier?.order ?? keptOrder,
                                releasesContent: earlier?.releasesContent == true))
        changes?.note(id)
        return true
    }

    /// The content file of `id`, whose delete is kept back, is emptied only once that delete is written: a
    /// crash before brings the file back whole.
    func releaseContentWhenWritten(_ id: String) {
        guard var row = keptBack[id], row.isDelete else { return }
        row.releasesContent = true
        _ = setKept(id, row)
    }

    /// The ids whose content files may be emptied now (their deletes are committed); called after a commit.
    func takeReleasedContent() -> [String] {
        defer { releasedContent = [] }
        return releasedContent
    }

    /// Writes the rows kept back (only those of `ids` and the deletes, when given), in the order they were first
    /// kept, in the open operation's transaction.
    func writeKeptBack(only ids: Set<String>? = nil) throws(StoreError) {
        let rows = keptBack.values.filter { $0.isDelete || ids?.contains($0.id) ?? true }.sorted { $0.order < $1.order }
        try write(rows)
    }

    /// Writes the deletes kept back, in the open operation's transaction.
    func writeKeptDeletes() throws(StoreError) {
        guard hasKeptDeletes else { return }
        try write(keptBack.values.filter(\.isDelete).sorted { $0.order < $1.order })
    }

    private func write(_ rows: [KeptRow]) throws(StoreError) {
        guard !rows.isEmpty else { return }
        try withReserve {
            try db.transaction {
                for row in rows {
                    guard let item = row.item else { try removeRows(of: row.id); continue }
                    try write(item)
                    if row.toJournalEnd { try moveToJournalEnd(item) }
                }
            }
        }
        for row in rows { _ = setKept(row.id, nil) }
    }

    /// Removes an item for good.
    func delete(_ id: String) throws(StoreError) {
        if keep(id, nil, toJournalEnd: false) { return }
        _ = setKept(id, nil)
        try withReserve {
            try db.transaction { try removeRows(of: id) }
        }
        changes?.note(id)
    }

    private func removeRows(of id: String) throws {
        try db.query("DELETE FROM items WHERE id = ?", [.text(id)])
        try db.query("DELETE FROM pending WHERE id = ?", [.text(id)])
        try db.query("DELETE FROM meta WHERE key IN (?, ?, ?, ?)",
                     [.text("sent:" + id), .text("puts:" + id), .text("gone:" + id), .text("revived:" + id)])
        try db.query("DELETE FROM last_used WHERE id = ?", [.text(id)])
        try db.query("DELETE FROM chunk_places WHERE id = ?", [.text(id)])
    }

    // MARK: where chunks lie in local files (to copy rather than fetch)

    /// Records the chunks of the content file of `id` (its hashed chunks, where they start), replacing what was
    /// recorded for it: a hint, checked by the hash of what is read there before any use.
    func placeChunks(of id: String, _ chunks: [Chunk]) throws(StoreError) {
        try withReserve {
            try db.transaction {
                try db.query("DELETE FROM chunk_places WHERE id = ?", [.text(id)])
                for chunk in chunks {
                    guard let sha = chunk.sha256 else { continue }
                    try db.query("INSERT OR REPLACE INTO chunk_places(id, offset, size, sha) VALUES(?, ?, ?, ?)",
                                 [.text(id), .int(chunk.offset), .int(chunk.size), .text(sha)])
                }
            }
        }
    }

    /// Where the chunk `sha` was recorded in the content files, a few places at most.
    func chunkPlaces(_ sha: String) throws(StoreError) -> [(id: String, offset: Int64, size: Int64)] {
        try values("SELECT id, offset, size FROM chunk_places WHERE sha = ? LIMIT 4", [.text(sha)]) {
            ($0.text(0), $0.int(1), $0.int(2))
        }
    }

    // MARK: last use of local copies (the order of eviction)

    /// The last open or close of each file with a recorded one (ns since the epoch).
    func lastUsedTimes() throws(StoreError) -> [String: Int64] {
        var times: [String: Int64] = [:]
        try typed { try db.forEach("SELECT id, at FROM last_used") { times[$0.text(0)] = $0.int(1) } }
        return times
    }

    /// Records last uses, in one transaction.
    func saveLastUsed(_ times: [String: Int64]) throws(StoreError) {
        try withReserve {
            try db.transaction {
                for (id, at) in times {
                    try db.query("INSERT INTO last_used(id, at) VALUES(?, ?) ON CONFLICT(id) DO UPDATE SET at = excluded.at",
                                 [.text(id), .int(at)])
                }
            }
        }
    }

    /// The pending journal, oldest change first.
    func pendingIDs() throws(StoreError) -> [String] {
        try values("SELECT id FROM pending ORDER BY seq") { $0.text(0) }
    }

    /// The oldest pending id that `take` accepts, reading the journal no further.
    func firstPending(where take: (String) -> Bool) throws(StoreError) -> String? {
        try typed { try db.first("SELECT id FROM pending ORDER BY seq") { row in
            let id = row.text(0)
            return take(id) ? id : nil
        } }
    }

    func isPending(_ id: String) throws(StoreError) -> Bool {
        if let row = keptBack[id], row.item == nil || row.toJournalEnd { return row.item != nil }
        return try typed { try db.first("SELECT 1 FROM pending WHERE id = ?", [.text(id)]) { _ in true } } ?? false
    }

    /// The journal's length, with the rows kept back that go into it (new files, which are not in it yet).
    func pendingCount() throws(StoreError) -> Int {
        let kept = keptBack.values.count { $0.toJournalEnd }
        return kept + (try typed { try db.first("SELECT count(*) FROM pending") { Int($0.int(0)) } } ?? 0)
    }

    /// Makes every change committed so far durable (see `Checkpointer`); called for fsync, outside any lock.
    let checkpointer: Checkpointer


    // MARK: encoding

    // A dictionary of strings and an array of plain structs always encode: the `try!` cannot trap. Most items
    // have neither xattrs nor conflicts: their text is written (and read) without an encoder (the same text).
    static func encodeXattrs(_ x: [String: [UInt8]]) -> String {
        if x.isEmpty { return "{}" }
        return String(decoding: try! JSONEncoder.wire.encode(Xattrs.toWire(x)), as: UTF8.self)
    }

    /// The xattrs stored for item `id`; a value that does not decode throws (an empty set would be pushed).
    static func decodeXattrs(_ s: String, of id: String) throws(StoreError) -> [String: [UInt8]] {
        if s == "{}" { return [:] }
        let wire = try decode([String: String].self, s, id: id, column: "xattrs")
        var xattrs: [String: [UInt8]] = [:]
        for (name, value) in wire {
            guard let data = Data(base64Encoded: value) else {
                throw .badValue(id: id, column: "xattrs", cause: "a value is not base64")
            }
            xattrs[name] = [UInt8](data)
        }
        return xattrs
    }

    static func encodeConflicts(_ c: [WireConflict]) -> String {
        if c.isEmpty { return "[]" }
        return String(decoding: try! JSONEncoder.wire.encode(c), as: UTF8.self)
    }

    /// The conflict versions stored for item `id`; a value that does not decode throws.
    static func decodeConflicts(_ s: String, of id: String) throws(StoreError) -> [WireConflict] {
        if s == "[]" { return [] }
        return try decode([WireConflict].self, s, id: id, column: "conflicts")
    }

    private static func decode<T: Decodable>(_ type: T.Type, _ s: String, id: String, column: String) throws(StoreError) -> T {
        do { return try JSONDecoder().decode(type, from: Data(s.utf8)) } catch {
            throw StoreError.badValue(id: id, column: column, cause: "\(error)")
        }
    }
}

/// A failure of the store, with its cause: the database's own code and message, or the row that does not decode.
public enum StoreError: Error, Equatable, CustomStringConvertible {
    /// Another daemon holds the store's lock.
    case inUse(directory: String)
    /// The database cannot be opened or read at all.
    case unusable(directory: String, cause: String)
    /// The database stayed locked past the busy timeout.
    case busy(SQLiteError)
    /// The disk (or quota) is full.
    case full(SQLiteError)
    /// The database file is damaged, or is not a database.
    case corrupt(SQLiteError)
    /// A constraint refused the write.
    case constraint(SQLiteError)
    /// Reading or writing the database file failed, or any other database error.
    case io(SQLiteError)
    /// A stored value that does not decode: `column` of the item (or meta key) `id`.
    case badValue(id: String, column: String, cause: String)

    /// The case of a database error, by its primary result code.
    public init(_ error: SQLiteError) {
        switch error.kind {
        case .busy: self = .busy(error)
        case .full: self = .full(error)
        case .corrupt: self = .corrupt(error)
        case .constraint: self = .constraint(error)
        case .other: self = .io(error)
        }
    }

    public var description: String {
        switch self {
        case .inUse(let dir): return "the store \(dir) is in use by another ubiquityfs daemon"
        case .unusable(let dir, let cause):
            return "the store database \(dir)/state.sqlite cannot be used (\(cause)); "
                + "move the store aside to start afresh (ubiquityfs check --store \(dir))"
        case .busy(let e): return "the store database is busy: \(e)"
        case .full(let e): return "the store's disk is full: \(e)"
        case .corrupt(let e): return "the store database is damaged: \(e)"
        case .constraint(let e): return "the store refused the write: \(e)"
        case .io(let e): return "the store database failed: \(e)"
        case .badValue(let id, let column, let cause): return "the stored \(column) of \(id) does not decode: \(cause)"
        }
    }
}

/// Runs store work on UbiquityBase's Database, the one bridge from its untyped throws: its own failures are
/// SQLiteErrors, each turned into the StoreError of its case, and the row readers the store gives it throw
/// StoreErrors. It throws nothing else; should it, that reads as a database failure (`io`), cause kept.
@discardableResult
func typed<T>(_ body: () throws -> T) throws(StoreError) -> T {
    do {
        return try body()
    } catch let error as SQLiteError {
        throw StoreError(error)
    } catch let error as StoreError {
        throw error
    } catch {
        throw .io(SQLiteError(code: 1, message: "\(error)"))
    }
}

/// The paths of a store's files.
struct StorePaths: Sendable {
    let directory: String
    /// Empty content files kept for new files (SpareFiles).
    let spares: SpareFiles
    /// Downloads staged since staging was last found without any (it is emptied at start): a delete looks for
    /// partial downloads to remove only then, not with a listing of the folder at every `rm`.
    let staged = StagedDownloads()

    /// Free bytes on the store's file system (for an unprivileged writer); nil when it cannot be read.
    var freeBytes: Int64? {
        var vfs = statvfs()
        guard statvfs(directory, &vfs) == 0 else { return nil }
        return Int64(vfs.f_bavail) * Int64(vfs.f_frsize)
    }
    /// The bytes the store's disk holds in all, as this user may use them (its reserved blocks left out).
    var capacityBytes: Int64? {
        var vfs = statvfs()
        guard statvfs(directory, &vfs) == 0 else { return nil }
        return (Int64(vfs.f_blocks) - Int64(vfs.f_bfree) + Int64(vfs.f_bavail)) * Int64(vfs.f_frsize)
    }
    var content: String { directory + "/content" }
    var staging: String { directory + "/staging" }
    func content(_ id: String) -> String { content + "/" + id }
    /// The local copy of one conflict version of an item.
    func conflict(_ id: String, _ conflict: String) -> String { content + "/" + id + "." + conflict }
    /// Where the content of an unlinked item that is still open lives (removed at the next start if left).
    func unlinked(_ id: String) -> String { content(id) + ".unlinked" }
    /// Verified copies of past versions fetched for one open each (`PastContent`); emptied at start.
    var past: String { directory + "/past" }
    func past(_ key: String) -> String { past + "/" + key }

    /// Removes partial downloads of other versions of the same key: a transfer cut off part way leaves its
    /// staging file for a resume, but once the item has a newer version that file is never used again.
    /// Without `path`: every partial download of the key and, for an item, of its conflict versions (the item
    /// or the version is gone).
    func removeStaleStaging(_ key: String, keeping path: String = "") {
        guard let generation = staged.sinceNone else { return }
        let names = folderNames(staging, for: "partial downloads to remove")
        for name in names
        where (name.hasPrefix(key + "-") || (path.isEmpty && name.hasPrefix(key + "."))) && staging + "/" + name != path {
            removeLeftover(staging + "/" + name)
        }
        if names.isEmpty { staged.foundNone(at: generation) }
    }
}

/// Empty content files kept for reuse in STORE/spare: the content file of a deleted file that nothing holds open
/// is emptied and moved there, and a new file takes one instead of creating its own. A file system allocates
/// no inode and frees none for them: on ext4 without a journal, each new inode was found by scanning past every
/// inode freed in the last minute in that group (where a flat content folder puts them all), so that a `tar x`
/// after an `rm -rf` paid for each file it had deleted. At most `kept` are kept, only of small files (emptying a
/// large one under the container's lock takes longer than its unlink, and a write into the blocks just freed
/// was slower: 1.6 GB/s against 4.3 for 1 GiB); the rest are removed.
final class SpareFiles: Sendable {
    private let directory: String
    private struct Pool {
        var names: [String] = []
        var next = 0
    }
    private let pool: Locked<Pool>
    static let kept = 16_384
    static let largestKept: Int64 = 64 << 10

    /// The spares left by an earlier run are kept; files set aside and not given yet are removed.
    init(directory: String) {
        self.directory = directory
        let all = folderNames(directory, for: "spare content files")
        for name in all where Int(name) == nil { removeLeftover(directory + "/" + name) }
        let names = all.filter { Int($0) != nil }
        pool = Locked(Pool(names: names, next: names.compactMap { Int($0) }.max() ?? 0))
    }

    /// Moves the content file at `path` out of its folder, into this one under a name that is no spare's (to
    /// be given later); nil when it is not there.
    func setAside(_ path: String, as id: String) -> String? {
        let aside = directory + "/going-" + id
        return rename(path, aside) == 0 ? aside : nil
    }

    var count: Int { pool.withLock { $0.names.count } }

    /// Moves a spare to `path` (where nothing is) with the time now, as a new file would have; false when none
    /// is left or the move failed (the caller creates the file).
    func take(to path: String) -> Bool {
        guard let name = pool.withLock({ $0.names.popLast() }) else { return false }
        guard rename(directory + "/" + name, path) == 0 else { return false }
        utimensat(AT_FDCWD, path, nil, 0)
        return true
    }

    private let queue = DispatchQueue(label: "ubiquityfs.spares", qos: .utility)

    /// Gives the files at `paths` (`give`) on the spares' own thread, in order. Those left undone at a stop are
    /// orphans at the next start (`removeOrphanContent`).
    func giveLater(_ paths: [String]) {
        queue.async { for path in paths { self.give(path) } }
    }

    /// Waits until the files given later are given.
    func settle() { queue.sync {} }

    /// Empties the content file at `path` (which nothing holds open) and keeps it as a spare, or removes it
    /// when enough are kept (or it cannot be emptied and moved).
    func give(_ path: String) {
        var st = stat()
        guard stat(path, &st) == 0, Int64(st.st_size) <= SpareFiles.largestKept else { return removeLeftover(path) }
        let name: String? = pool.withLock { p in
            guard p.names.count < SpareFiles.kept else { return nil }
            p.next += 1
            return String(p.next)
        }
        guard let name, truncate(path, 0) == 0, rename(path, directory + "/" + name) == 0 else {
            return removeLeftover(path)
        }
        pool.withLock { $0.names.append(name) }
    }
}

/// Counts downloads staged (`Downloads.land`, once its file is there), and whether any may be in the staging
/// folder since a listing found it empty.
final class StagedDownloads: Sendable {
    private let state = Locked((staged: 0, emptyAt: 0))

    func add() { state.withLock { $0.staged += 1 } }

    /// The count now if a download was staged since the folder was last found empty, else nil.
    var sinceNone: Int? { state.withLock { $0.staged == $0.emptyAt ? nil : $0.staged } }

    /// A listing, begun when the count was `generation`, found the folder empty: no download was staged since
    /// unless the count moved meanwhile.
    func foundNone(at generation: Int) { state.withLock { if $0.staged == generation { $0.emptyAt = generation } } }
}

/// The lock that keeps a store to one daemon: a POSIX record lock on DIR/lock, held for the life of this value.
///
/// Why a record lock and not flock(2): flock's lock belongs to the open file description, which every child
/// process holds from its fork until its exec closes it, so a store closed and opened again in one process (a
/// simulated crash, a test) could find it "in use" by a child that some other thread was just starting. A
/// record lock belongs to the process and is never inherited. Record locks do not exclude within one process,
/// so the directories locked here are also kept in a process-wide set, checked before the file is opened:
/// closing any descriptor of the lock file would drop the process's lock, so a second opener must never open it.
public final class StoreLock: Sendable {
    /// The lock file's name in the store.
    public static let fileName = "lock"
    private static let held = Locked<Set<String>>([])
    private let fd: Int32
    private let key: String

    /// Takes the lock of the store at `directory` (which exists), or throws `inUse`.
    init(directory: String) throws(StoreError) {
        guard let resolved = realpath(directory, nil) else {
            throw .unusable(directory: directory, cause: "cannot resolve the path: \(Errno.current)")
        }
        let key = String(cString: resolved)
        free(resolved)
        guard Self.held.withLock({ $0.insert(key).inserted }) else { throw .inUse(directory: directory) }
        let fd = Glibc.open(key + "/" + Self.fileName, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        var range = flock(l_type: Int16(F_WRLCK), l_whence: Int16(SEEK_SET), l_start: 0, l_len: 0, l_pid: 0)
        guard fd >= 0, fcntl(fd, F_SETLK, &range) == 0 else {
            let failure: StoreError = fd < 0 ? .unusable(directory: directory, cause: "cannot open its lock file: \(Errno.current)")
                                             : .inUse(directory: directory)
            if fd >= 0 { Glibc.close(fd) }
            Self.held.withLock { _ = $0.remove(key) }
            throw failure
        }
        self.fd = fd
        self.key = key
    }

    deinit {
        Glibc.close(fd)
        Self.held.withLock { _ = $0.remove(key) }
    }
}

/// Makes committed changes durable (they are otherwise durable at the next checkpoint: WAL mode with
/// synchronous=NORMAL): a checkpoint syncs the log first. It runs on a database connection of its own, so an
/// fsync waits for the disk without holding the container's lock; a passive checkpoint never blocks a writer.
final class Checkpointer: Sendable {
    private let path: String
    /// Opened at the first checkpoint.
    private let db = Locked<Database?>(nil)

    init(path: String) { self.path = path }

    func run() throws(StoreError) {
        try typed {
            try db.withLock { db in
                if db == nil { db = try Database(path: path) }
                try db!.exec("PRAGMA wal_checkpoint(PASSIVE)")
            }
        }
    }
}
