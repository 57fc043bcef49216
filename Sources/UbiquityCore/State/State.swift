// The core's shared state, and the one way to reach it: `Container.state`, a `Locked<CoreState>`.
//
// What must hold:
// - Everything that more than one thread reads or writes (the index of items and names, handle counts,
//   transfers, the accounting of the local store, and the Store, the only door to the database) is a field of
//   `CoreState`. Code that has not taken the lock has no `CoreState` to call, so "expects the lock held" is a
//   type, not a comment: every helper that needs the lock is a method of `CoreState`.
// - `Container.mutate` runs one operation: one SQLite transaction, committed before the lock is let go. When
//   the operation throws, the transaction rolls back and so does every change it made to `items` and
//   `children` (they record what they overwrite while a mutation runs), so memory and the database never
//   disagree: a rename over a file that meets a full disk leaves both names as they were. Other fields
//   (handles, transfers, marks) are memory only and are not rolled back. `Container.update` changes memory
//   alone, without a transaction, on the hot paths; `Container.read` only looks.
// - File-system effects that cannot be undone (removing or moving a content file) are queued with `onCommit`
//   and run after the commit, still under the lock; one that must come before the commit (a save by rename
//   moves content files first, so no crash loses the saved bytes) queues its undoing with `onRollBack`.
//   Notices to the observer and wake-ups of the loops are delivered after the lock is let go.
// - No network call and no wait for another thread ever happens inside `withLock`.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): this is the container's lock: after a content
// gate and `Backings`, before the leaves.
import Foundation
import UbiquityBase

/// Live items by parent and name. Read through the subscript; written through `list` and `unlist`, which
/// record what they overwrote while a mutation runs (never the whole folder: a folder may hold 100,000 names).
struct Listings {
    private var tables: [String: NameTable] = [:]
    fileprivate var undo: [(parent: String, name: String, id: String?)]?

    subscript(parent: String) -> NameTable? { tables[parent] }

    /// Gives `name` in `parent` to `id` (nil: takes it away).
    mutating func set(_ parent: String, _ name: String, _ id: String?) {
        let old = tables[parent]?[name]
        if old == id { return }
        undo?.append((parent, name, old))
        tables[parent, default: [:]][name] = id
    }

    mutating func list(_ id: String, in parent: String, as name: String) { set(parent, name, id) }

    /// Lists an entry whose kind is known, at the load of the store (nothing to undo then), unless `keepOld`
    /// prefers the entry that holds the name already. `size` is the folder's count of entries, for its table.
    mutating func listLoaded(_ code: ItemCode, in parent: String, size: Int, as name: String, isDirectory: Bool,
                             keepOld: (ItemCode) -> Bool) {
        if tables[parent] == nil {
            var table: NameTable = [:]
            table.reserve(size)
            tables[parent] = table
        }
        tables[parent]!.add(name, code, isDirectory: isDirectory, keepOld: keepOld)
    }

    /// How many of a folder's entries are folders (counted once, then kept by the table).
    mutating func directoryCount(in parent: String, _ isDirectory: (String) -> Bool) -> Int {
        tables[parent]?.directoryCount(isDirectory) ?? 0
    }
    mutating func unlist(_ name: String, in parent: String) { set(parent, name, nil) }

    fileprivate mutating func rollBack() {
        guard let list = undo else { return }
        undo = nil
        for entry in list.reversed() { tables[entry.parent, default: [:]][entry.name] = entry.id }
    }
}

/// Work that waits for the lock to be let go.
struct Effects {
    var notices: [Notice] = []
    var wakePusher = false
    var wakeEvictor = false
    /// Downloads asked for by a mutation (a pinned folder, a local-only change).
    var downloads: [String] = []
}

struct CoreState {
    let store: Store
    let config: ContainerConfig
    let log = Logger("core")

    /// Every item by id, live ones and local tombstones waiting to be pushed.
    var items = ItemIndex()
    /// Live items by parent and name.
    var children = Listings()
    /// Open handles per item: total and writable.
    var handles: [String: (open: Int, writers: Int)] = [:]
    /// New files saved by rename over another (`save(_:over:at:)`) while open, each to the file their handles
    /// became: the adapter learns of the save after it is made, so a handle may still name the new file. Each
    /// entry goes once that file has no handle open (all it took over are closed then).
    var handedOver: [String: String] = [:]
    /// Bumped on every local content change, so the pusher can tell whether what it uploaded is still current.
    var contentGeneration: [String: Int] = [:]
    var transfers: [String: TransferState] = [:]
    /// The items whose last push the remote refused for the user's quota (`TransferState.overQuota`), kept by
    /// `updateTransfer`.
    var quotaRefused: Set<String> = []
    /// Items deleted (here or elsewhere) while programs still hold them open, as they were, with `deleted` set:
    /// as on ext4 the descriptors keep working until the last close, on content moved aside to `unlinkedPath`.
    var unlinked: [String: Item] = [:]
    /// Files open for writing: the time of the last write, and whether an fsync came since the last snapshot
    /// (Snapshots.swift).
    var lastWrite: [String: Int64] = [:]
    var fsyncedSinceSnapshot: Set<String> = []
    /// Conflict versions resolved here (kept in the store, so a crash does not forget them): a rebase on a newer
    /// remote version, or an edit elsewhere reviving a file resolved and then deleted here, does not bring them
    /// back. Conflict ids are random and never reused, so the set only grows (by a few bytes a resolution).
    var discardedConflicts: Set<String> = []
    /// Files renamed here in the last moments: where each was, and when (Container.swift, saveOverBackup).
    var movedAway: [String: (parent: String, name: String, at: Int64)] = [:]
    /// Conflict versions this device added to a file's list (the losing side of a conflict it resolved) that the
    /// remote has not stored yet (kept in the store): a later push that meets a newer remote version lists them
    /// on top of the remote's list, which cannot have them. One left behind by a delete is never listed again.
    var unpushedConflicts: Set<String> = []
    /// Items deleted here whose delete the remote acknowledged at the given version, until the change feed has
    /// passed it: a page of the feed fetched before the delete must not bring them back.
    var settledDeletes: [String: Int64] = [:]
    /// The newest remote version the puller skipped for each item pending here (the pusher meets such a version as
    /// a 412; but a push that landed before it does not): once the item is no longer pending (its push answered,
    /// its delete forgotten, a refusal settled), one newer than what it then holds is fetched again at the end
    /// of the push (`refetchSkippedVersions`). Memory only: after a restart, a put that landed unanswered takes
    /// the remote's newer state anyway (`acknowledgeLandedPut`).
    var skippedWhilePending: [String: Int64] = [:]
    /// Folders whose time was set explicitly while entries of theirs still waited to go up (tar x, cp -a and
    /// rsync -a set a folder's time after filling it): each goes up once more after them, so that the devices
    /// that take those entries first show the time set, not the time the entries arrived (Model.adopt). Kept
    /// in memory only: after a restart the folder shows its entries' time elsewhere, nothing worse.
    var timedAfterEntries: Set<String> = []
    /// Since when (wall clock, ns) the remote cannot be reached, as the change feed last found; nil while it
    /// answers. While set, an open takes what is local at once instead of waiting out the download timeout.
    var offlineSince: Int64?
    /// The remote refused this device's key (revoked, or wrong) at its last answer; cleared by any answer that
    /// took it. Every change waits, and the root's `uploadingError` says why.
    var keyRefused = false
    /// Sync of this container is paused (`ubiquityfs pause`; kept in the store's meta `syncPaused`): local work
    /// goes on and its changes wait, nothing goes to or comes from the remote until it resumes.
    var syncPaused = false
    /// Since when remote changes wait for room on the store's disk; nil while they are applied.
    var storeFullSince: Int64?
    /// Copies evicted on a full disk before their record was written (`evictCopyForRoom`).
    var unrecordedEvictions: Set<String> = []
    /// How many copies one operation may evict to find room for its record.
    static let evictionsForRoom = 4
    /// The store's meta key of `syncPaused`.
    static let syncPausedKey = "syncPaused"
    /// False until the remote's feed has been applied to the end once: the tree that arrives in a fresh store is
    /// the remote's as it is, not a change of its folders' entries (their mtimes stay the synced ones).
    var caughtUp = false
    /// Bytes of local content and the last use of each file (Cache.swift).
    var cache = CacheAccount()
    var effects = Effects()
    private var commitActions: [(inout CoreState) -> Void] = []
    private var rollBackActions: [(inout CoreState) -> Void] = []

    init(store: Store, config: ContainerConfig) {
        self.store = store
        self.config = config
    }

    var rootID: String { WireRules.rootID }
    var paths: StorePaths { store.paths }

    /// The injected wall clock (ns since the epoch).
    func now() -> Int64 { config.environment.clock() }

    mutating func notice(_ n: Notice) { effects.notices.append(n) }
    mutating func wakePusher() { effects.wakePusher = true }
    mutating func wakeEvictor() { effects.wakeEvictor = true }
    mutating func startDownload(_ id: String) { effects.downloads.append(id) }
    func removeStaleStaging(_ key: String) { paths.removeStaleStaging(key) }

    /// Runs `action` once the mutation's transaction has committed (under the lock); dropped on a rollback.
    mutating func onCommit(_ action: @escaping (inout CoreState) -> Void) { commitActions.append(action) }

    /// Runs `action` if the mutation's transaction rolls back (after the store's rollback, the last queued
    /// first); dropped on a commit.
    mutating func onRollBack(_ action: @escaping (inout CoreState) -> Void) { rollBackActions.append(action) }

    // MARK: one mutation

    /// Runs one operation as one transaction: its store writes commit together, or neither they nor its changes
    /// of the index happen. What a full disk lets it use is its `room` (FullDiskRoom): the free space with or
    /// without the reserve in place, or the reserve (given up for one more try) and then copies that may go,
    /// evicted before their records (`evictCopyForRoom`, up to `evictionsForRoom` times). Called by
    /// `Container.mutate` under the lock.
    mutating func transact<T, E: Error>(room: FullDiskRoom, _ errors: TransactionErrors<E>,
                                        _ body: (inout CoreState) throws(E) -> T) throws(E) -> T {
        if room == .withReserveInPlace && !store.hasRoom {
            wakeEvictor()
            throw errors.noSpace
        }
        var retried = false
        var evictions = 0
        while true {
            items.undo = []
            children.undo = []
            commitActions = []
            rollBackActions = []
            let before = effects
            do throws(E) {
                store.begin()
                defer { store.keepsRowsBack = false }
                let result = try body(&self)
                try errors.store { () throws(StoreError) in
                    try writeKeptBackIfDue()
                    saveDueLastUses()
                    try store.commit()
                }
                items.undo = nil
                children.undo = nil
                rollBackActions = []
                let actions = commitActions
                commitActions = []
                for action in actions { action(&self) }
                releaseContentOfWrittenDeletes()
                if !unrecordedEvictions.isEmpty { recordEvictedCopies() }
                return result
            } catch {
                store.rollBack()
                items.rollBack()
                children.rollBack()
                commitActions = []
                let undo = rollBackActions
                rollBackActions = []
                for action in undo.reversed() { action(&self) }
                effects = before
                guard room == .evictions, errors.isNoSpace(error) else { throw error }
                if !retried && store.giveUpReserve() { retried = true; continue }
                if evictions < CoreState.evictionsForRoom && evictCopyForRoom() { evictions += 1; continue }
                throw error
            }
        }
    }
}

/// The error type of a transaction (`CoreState.transact`): how a failure of the store becomes one, and which
/// ones are a full disk (that room is made for). The door's operations throw CoreError; the sync loops' throw
/// what they meet (a remote's error, the store's), which they sort by its type.
struct TransactionErrors<E: Error> {
    let fromStore: (StoreError) -> E
    let isNoSpace: (E) -> Bool
    /// The refusal of an operation that may only run while the store keeps its reserve.
    let noSpace: E

    /// Runs store work inside a transaction, its failure as an E.
    func store<T>(_ body: () throws(StoreError) -> T) throws(E) -> T {
        do { return try body() } catch { throw fromStore(error) }
    }

    static var core: TransactionErrors<CoreError> {
        .init(fromStore: CoreError.init, isNoSpace: { $0 == .noSpace }, noSpace: .noSpace)
    }
    static var sync: TransactionErrors<any Error> {
        .init(fromStore: { $0 }, isNoSpace: isStoreDiskFull, noSpace: CoreError.noSpace)
    }
}

/// Whether an error the sync loops met in a transaction is a full disk under the store: the store's own, a
/// file's, or the core's. (A transfer's is `RemoteError.localDiskFull`: Downloads.isDiskFull.)
func isStoreDiskFull(_ error: any Error) -> Bool {
    switch error {
    case let e as CoreError: return e == .noSpace
    case let e as StoreError: if case .full = e { return true } else { return false }
    case let e as SQLiteError: return e.isDiskFull // the store's check reads its database itself
    case let e as Errno: return e == .noSpace
    default: return false
    }
}

extension CoreState {
    /// Writes the rows kept back (Store.keptBack) in the open operation's transaction when they are due: once
    /// the oldest is a second old (not in an operation that keeps its own rows back) or once too many are kept,
    /// while the store has room. (The deletes kept back go with any operation's first write: Store.write.)
    mutating func writeKeptBackIfDue() throws(StoreError) {
        guard store.hasKeptBack else { return }
        let old = !store.keepsRowsBack && now() - store.keptSince > Store.keptBackNanoseconds
        if (old || store.isKeptBackFull) && store.hasRoom { try store.writeKeptBack() }
    }

    /// Empties the content files of deleted items whose deletes the commit just made wrote (Store.keptBack),
    /// unless the item is live here again with a copy (a newer row replaced its delete). Thousands come at once
    /// after an `rm -rf`: with background transfers they are moved out of the content folder here (a download
    /// of the item brought back later lands in a place of its own) and emptied on the spares' own thread, not
    /// under the lock nor on the thread of the request whose commit wrote them.
    mutating func releaseContentOfWrittenDeletes() {
        let ids = store.takeReleasedContent().filter { id in !(items[id].map { !$0.deleted && $0.hasLocal } ?? false) }
        guard !ids.isEmpty else { return }
        guard config.environment.backgroundTransfers else {
            for id in ids { paths.spares.give(paths.content(id)); recountContent(id) }
            return
        }
        for id in ids { cache.set(id, 0) }
        paths.spares.giveLater(ids.compactMap { paths.spares.setAside(paths.content($0), as: $0) })
    }
}

/// What an operation may use when the store's disk is full. The reserve (Store.swift) is there so that what
/// leads to free space can still be recorded; what a program does must not give it up, or the program's next
/// writes would take the room (a program filling the disk took it so, 1 MiB a time).
enum FullDiskRoom: Sendable {
    /// What takes new space: a new item, a remote change. Runs only while the reserve is in place (made again
    /// first if there is room), so that no room a delete freed goes to it; `.noSpace` otherwise, and the
    /// evictor wakes.
    case withReserveInPlace
    /// A program's change of what exists (an open, a write's mark, a close's size, a rename, a mode): the free
    /// space, and a full disk is its `.noSpace`.
    case freeSpace
    /// What leads to free space (a delete, an eviction, a truncation, the sync's own records, which make copies
    /// evictable, a download's): gives up the reserve and runs once more, then evicts copies that may go.
    case evictions
}
