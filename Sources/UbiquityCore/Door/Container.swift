// The sync core's view of one container on this device: the in-memory index of every item over the store,
// the local operations a file system performs, and the hooks that the downloader, the pusher and the puller
// use. It knows nothing of FUSE or HTTP.
//
// Locking: one lock (`state`, a `Locked<CoreState>`, State.swift) guards `items`, `children`, `handles` and
// `transfers`, and every store write.
// Store writes are short local SQLite transactions; no network call or wait ever happens under the lock.
// Observer notifications are collected under the lock and delivered after it is released.
//
// What must hold: each local operation is one `mutate`: its checks (a live parent, the name free, the kind, not
// a directory into itself) and its changes run in one transaction, so a refusal or a failed store write leaves
// memory and the database as they were. A new file's empty content file is made before its row is saved (an
// orphan left by a failed save is removed at the next start, `removeOrphanContent`). A delete drops an item the
// remote never saw (and no create of it was sent), else keeps a tombstone to push; its staging and conflict
// copies go only after the commit (`onCommit`). Notices, wake-ups and downloads are delivered after the lock.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): a content gate, then `Backings`, then `state`,
// then the leaves.
import Foundation
import Synchronization
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// Told about changes that did not come from a local request, so the file system can drop kernel caches.
public protocol ContainerObserver: AnyObject, Sendable {
    /// Attributes, and content when `contentChanged`, of the item changed.
    func itemChanged(_ id: String, contentChanged: Bool)
    /// `name` in directory `parent` no longer refers to item `id` (a folder when `isDirectory`).
    func entryRemoved(parent: String, name: String, id: String, isDirectory: Bool)
    /// `name` in directory `parent` now refers to an item.
    func entryAdded(parent: String, name: String)
    /// The item's attributes, and its content when `contentChanged`, were changed by another device (told after
    /// `itemChanged`, which also follows downloads and evictions here). Names that come and go (the two
    /// above) always come from elsewhere: a pull, a restore, the pusher giving way.
    func changedElsewhere(_ id: String, contentChanged: Bool)
}

public struct ContainerConfig: Sendable {
    public var device: String
    /// How long an open waits for content before failing with EIO.
    public var downloadTimeoutSeconds: Int = 30
    public var maxConcurrentDownloads: Int = 4
    /// A file held open for writing goes up as a snapshot once it has had no write for this long (and at
    /// each fsync); nil: only after its last close.
    public var snapshotQuietSeconds: Int? = 3
    /// Long-poll wait of the change feed.
    public var pollWaitSeconds: Int = 25
    /// The local store limit (Cache.swift): local content above this many bytes is evicted, least recently used
    /// first, down to 90% of it. `.max`: no limit.
    public var cacheLimit: Int64 = .max
    /// Free space on the store's file system under this many bytes is given back the same way. 0: none kept.
    public var minFreeBytes: Int64 = 0
    /// Which files go up and down in chunks and where they are cut (docs/CHUNKS.md). Every device of a
    /// container must cut by the same format, or nothing dedupes: the standard one, unless a test or the
    /// simulation picks a smaller one to cut small files.
    public var chunkFormat = ChunkFormat.standard
    /// Clock, randomness and scheduling (Environment.swift); the defaults are the real ones.
    public var environment = CoreEnvironment()
    /// The mounting user: on this device the owner of every item that has no owner of its own here, as every
    /// item from another device has not (ownership is never synced).
    public var owner = Owner(uid: getuid(), gid: getgid())
    /// Mode bits (of 0o022, group and other write) that a mode from another device may not add to an item here
    /// (it may take them away): the mounting user's umask's, so that a folder made world-writable elsewhere
    /// does not let this machine's other users write into it. 0: every mode arrives as sent.
    public var arrivingModeCap: UInt32 = 0
    public init(device: String) { self.device = device }

    /// Who owns `item` on this device.
    public func owner(of item: Item) -> Owner { item.owner ?? owner }

    /// How `owner` is kept in an item: nil for the mounting user, so most items carry nothing.
    func kept(_ owner: Owner) -> Owner? { owner == self.owner ? nil : owner }
}

/// A pending notification for the observer.
enum Notice {
    /// `elsewhere`: a change that came from another device (not a download or an eviction here).
    case changed(String, content: Bool, elsewhere: Bool = false)
    case removed(parent: String, name: String, id: String, isDirectory: Bool)
    case added(parent: String, name: String)
}

public final class Container: @unchecked Sendable {
    // @unchecked: the mutable state is in `state` (a Locked); `downloads` and `sync` are set once in init (they
    // need `self`, so they cannot be `let`); `observer` and `querySocket` are set before the mount serves requests.
    public let remote: RemoteClient
    public let config: ContainerConfig
    public weak var observer: ContainerObserver?
    /// Every change, local or not, for the live query (Changes.swift).
    public let changes = ItemChanges()
    /// Where the daemon serves the live query, shown as the root's `querySocket` attribute; nil: not served.
    public var querySocket: String?
    let log = Logger("core")

    /// Everything shared between threads (State.swift): reached only through `read` and `mutate`.
    let state: Locked<CoreState>
    /// Where the store's files are; immutable, so read without the lock.
    let paths: StorePaths
    /// Makes committed changes durable at an fsync, without the lock.
    let checkpointer: Checkpointer
    let gates = ContentGates()

    var downloads: Downloads!
    var sync: SyncLoops!
    /// Keeps the store under its limit, when it has one and transfers run in the background.
    let evictor = Evictor()

    public var rootID: String { WireRules.rootID }

    /// The injected wall clock (ns since the epoch).
    func now() -> Int64 { config.environment.clock() }

    /// Opens the container's store. Call `start` to begin syncing.
    public init(store: Store, remote: RemoteClient, config: ContainerConfig) throws {
        self.remote = remote
        self.config = config
        self.paths = store.paths
        self.checkpointer = store.checkpointer
        store.changes = changes
        store.clock = config.environment.clock
        var s = CoreState(store: store, config: config)
        try s.load()
        do {
            try s.removeOrphanContent()
            try s.scanContent()
        } catch {
            throw StoreError.unusable(directory: store.directory, cause: "cannot list its content folder: \(error)")
        }
        store.writesNeedTransaction = true
        state = Locked(s)
        downloads = Downloads(container: self)
        sync = SyncLoops(container: self)
    }

    /// True when the store has never synced with the remote.
    public var isFresh: Bool { get throws { try read { s in try s.store.meta("token") == nil } } }

    /// Fetches the remote's current tree once (waiting for nothing), then starts the background loops.
    public func start(initialSync: Bool) throws {
        if initialSync {
            do { try sync.pullUntilCaughtUp() } catch where CoreError.from(error) == .noSpace {
                Logger("sync").warning("the store's disk is full: remote changes wait until there is room")
            }
        }
        trimHeap() // give back what loading and the first sync left free
        sync.start()
        if config.environment.backgroundTransfers { // also without limits: a full disk needs it
            evictor.start(for: self)
            evictor.wake()
        }
        let pinnedStale = read { s in s.items.values(with: .pinned).filter { $0.kind == .file && !$0.isCurrent }.map(\.id) }
        for id in pinnedStale { downloads.start(id) }
    }

    /// Number of items with changes not yet acknowledged by the remote.
    public var pendingChanges: Int { get throws { try sync.pendingCount } }

    /// Stops the background loops; in-flight transfers are abandoned (their staging files are removed at the next start).
    public func stop() {
        writeKeptBack()
        read { $0.paths.spares }.settle() // the content files of the deletes it wrote, emptied
        sync.stop()
        evictor.stop()
        downloads.stop()
        saveLastUses()
    }

    /// Writes the item rows kept back (Store.keptBack): before the pusher reads its journal, and at stop. On a
    /// full disk too (the reserve, then evictions): a file whose close the full disk refused is uploaded once its
    /// row is written, and can then be evicted to make room.
    func writeKeptBack() {
        do { try writeKeptBackOrFail() } catch {
            log.warning("the rows kept back (new files not closed yet, deletes) could not be saved: \(error)")
        }
    }

    private func writeKeptBackOrFail() throws(CoreError) {
        try mutate(room: .evictions) { (s: inout CoreState) throws(CoreError) in
            if s.store.hasKeptBack { try s.writeKeptBack() }
        }
    }

    /// fsync of a folder: the rows kept back (its deletes, its new files' creates) are written, and what was
    /// committed is made durable.
    public func syncedDirectory() throws(CoreError) {
        try writeKeptBackOrFail()
        do { try checkpointer.run() } catch { throw CoreError.from(error) }
    }

    // MARK: locking and effects

    /// Reads the state under the lock.
    @inline(__always)
    func read<T, E: Error>(_ body: (CoreState) throws(E) -> T) throws(E) -> T {
        try withState { (s: inout CoreState) throws(E) -> T in try body(s) }
    }

    /// Threads waiting for the state's lock now (`othersWaiting`).
    private let waiting = Atomic<Int>(0)

    /// Runs `body` holding the state's lock, counted in `waiting` until it has it.
    @inline(__always)
    private func withState<T, E: Error>(_ body: (inout CoreState) throws(E) -> T) throws(E) -> T {
        waiting.add(1, ordering: .relaxed)
        return try state.withLock { (s: inout CoreState) throws(E) -> T in
            waiting.subtract(1, ordering: .relaxed)
            return try body(&s)
        }
    }

    /// True when another thread waits for the state's lock: a long step under it (a page of remote changes)
    /// ends early and lets that thread in (PullSide.applyRemote, then `giveWay`).
    var othersWaiting: Bool { waiting.load(ordering: .relaxed) > 0 }

    /// Waits, a few milliseconds at most, until the threads waiting for the state's lock have it: a long task
    /// done in steps calls it between two steps, so that a request of the mount goes first. Without it the
    /// task's own thread took the lock again before a woken waiter could (the lock is not fair), and requests
    /// waited out the whole task.
    func giveWay() {
        for _ in 0..<Container.giveWayPolls where othersWaiting { usleep(100) }
    }
    private static let giveWayPolls = 50

    /// Runs one operation under the lock as one transaction (State.swift), then delivers what it queued for
    /// after the lock: notices to the observer, wake-ups of the pusher and the evictor, downloads to start.
    /// `room` is what a full disk lets it use (FullDiskRoom).
    func mutate<T>(room: FullDiskRoom = .freeSpace,
                   _ body: (inout CoreState) throws(CoreError) -> T) throws(CoreError) -> T {
        do { return try mutateThrowing(room: room, body) } catch { throw CoreError.from(error) }
    }

    /// `mutate` for an operation that cannot fail by itself: a failed commit is logged (what it changed in
    /// memory is rolled back with it).
    @discardableResult
    func mutate<T>(room: FullDiskRoom = .freeSpace, _ body: (inout CoreState) -> T) -> T? {
        do { return try mutateThrowing(room: room, body) } catch {
            log.error("a change could not be saved: \(error)")
            return nil
        }
    }

    /// A change of memory alone (progress, marks, counters): under the lock, without a transaction, for the
    /// hot paths (every write of a program, every chunk of a transfer). A store write in it is a bug, caught
    /// as one outside any transaction (Store.checkInTransaction).
    func update<T>(_ body: (inout CoreState) -> T) -> T {
        let (result, effects) = withState { s -> (T, Effects) in
            let result = body(&s)
            defer { s.effects = Effects() }
            return (result, s.effects)
        }
        deliver(effects)
        return result
    }

    /// `mutate` for an operation that throws errors other than CoreError: the sync loops', whose records lead
    /// to free space (an upload acknowledged makes its copy evictable), hence their room.
    func mutateThrowing<T>(room: FullDiskRoom = .evictions, _ body: (inout CoreState) throws -> T) throws -> T {
        let (result, effects) = withState { s -> (Result<T, Error>, Effects) in
            let result = Result { try s.transact(room: room, body) }
            defer { s.effects = Effects() }
            return (result, s.effects)
        }
        deliver(effects)
        return try result.get()
    }

    private func deliver(_ effects: Effects) {
        if effects.wakePusher { sync.wakePusher() }
        if effects.wakeEvictor { evictor.wake() }
        for id in effects.downloads { downloads.start(id) }
        guard let observer, !effects.notices.isEmpty else { return }
        for n in effects.notices {
            switch n {
            case .changed(let id, let content, let elsewhere):
                observer.itemChanged(id, contentChanged: content)
                if elsewhere { observer.changedElsewhere(id, contentChanged: content) }
            case .removed(let parent, let name, let id, let isDirectory):
                observer.entryRemoved(parent: parent, name: name, id: id, isDirectory: isDirectory)
            case .added(let parent, let name): observer.entryAdded(parent: parent, name: name)
            }
        }
    }

    // MARK: reading

    public func item(_ id: String) -> Item? {
        read { s in s.items[id].flatMap { $0.deleted ? nil : $0 } }
    }

    public func lookup(parent: String, name: String) -> Item? {
        read { s in s.children[parent]?[name].flatMap { s.items[$0] } }
    }

    /// The live children of a directory, sorted by name.
    public func list(_ id: String) throws(CoreError) -> [Item] {
        try read { (s) throws(CoreError) -> [Item] in
            _ = try s.liveDirectory(id)
            return (s.children[id] ?? [:]).sorted { $0.key < $1.key }.compactMap { s.items[$0.value] }
        }
    }

    /// The live children of a directory as name, id and kind, sorted by name as `list` sorts them: one read,
    /// without unpacking each item (ItemIndex.swift).
    public func listEntries(_ id: String) throws(CoreError) -> [(name: String, id: String, kind: ItemKind)] {
        try read { (s) throws(CoreError) -> [(name: String, id: String, kind: ItemKind)] in
            _ = try s.liveDirectory(id)
            return (s.children[id] ?? [:]).sorted { $0.key < $1.key }.compactMap { entry in
                s.items.kind(of: entry.value).map { (entry.key, entry.value, $0) }
            }
        }
    }

    /// How many live subdirectories a directory has (its link count is 2 more).
    public func subdirectoryCount(_ id: String) -> Int {
        withState { s in
            let items = s.items
            return s.children.directoryCount(in: id) { items[$0]?.isDirectory == true }
        }
    }

    /// The path of an item from the container root, for messages and the status command.
    public func path(of id: String) -> String {
        read { $0.path(of: id) }
    }

    // MARK: local changes

    // A new item belongs to `owner`, the process that made it (nil: the mounting user); see `CoreState.own`.

    public func makeDirectory(parent: String, name: String, mode: UInt32,
                              owner: Owner? = nil) throws(CoreError) -> Item {
        try create(parent: parent, name: name, kind: .dir, mode: mode, owner: owner)
    }

    /// Creates an empty file with local content.
    public func createFile(parent: String, name: String, mode: UInt32, owner: Owner? = nil) throws(CoreError) -> Item {
        try create(parent: parent, name: name, kind: .file, mode: mode, owner: owner)
    }

    /// Creates a symbolic link to `target`, kept exactly as given (relative or absolute; it need not exist).
    /// Its target never changes: POSIX replaces a link by a new one.
    public func createSymlink(parent: String, name: String, target: String,
                              owner: Owner? = nil) throws(CoreError) -> Item {
        if target.utf8.count > WireRules.maxTargetBytes { throw .nameTooLong }
        if !WireRules.isValidTarget(target) { throw .invalidArgument("bad link target") }
        return try create(parent: parent, name: name, kind: .symlink, mode: 0o777, target: target, owner: owner)
    }

    /// Creates a fifo or a socket: a local-only node (never uploaded) whose data the kernel carries.
    public func createLocalNode(parent: String, name: String, kind: ItemKind, mode: UInt32,
                                owner: Owner? = nil) throws(CoreError) -> Item {
        precondition(kind == .fifo || kind == .socket, "only fifos and sockets are local nodes")
        return try create(parent: parent, name: name, kind: kind, mode: mode, owner: owner)
    }

    /// creat(2) as one operation: the file is created and opened for writing in one transaction (one commit,
    /// and no push can start between the two without the writer counted).
    public func createAndOpen(parent: String, name: String, mode: UInt32,
                              owner: Owner? = nil) throws(CoreError) -> (Item, FileDescriptor) {
        try CoreState.checkName(name)
        return try mutate(room: .withReserveInPlace) {
            (s: inout CoreState) throws(CoreError) -> (Item, FileDescriptor) in
            s.store.keepsRowsBack = true // until its close (Store.keptBack)
            let item = try s.create(parent: parent, name: name, kind: .file, mode: mode, target: nil, owner: owner)
            guard case .opened(let fd) = try s.open(item.id, writable: true, truncate: false, staleOK: false,
                                                   noDownload: false) else {
                throw CoreError.io("a new file has no local content")
            }
            return (item, fd)
        }
    }

    /// Creates a new item in a live directory; a file gets an empty content file.
    private func create(parent: String, name: String, kind: ItemKind, mode: UInt32, target: String? = nil,
                        owner: Owner?) throws(CoreError) -> Item {
        try CoreState.checkName(name)
        return try mutate(room: .withReserveInPlace) { (s: inout CoreState) throws(CoreError) -> Item in
            try s.create(parent: parent, name: name, kind: kind, mode: mode, target: target, owner: owner)
        }
    }

    /// Removes a file (`directory` false) or an empty directory (`directory` true). Answers the save it
    /// completes when the file is the backup of a save by rename (CoreState.saveOverBackup), nil otherwise.
    @discardableResult
    public func remove(parent: String, name: String, directory: Bool) throws(CoreError) -> SavedOver? {
        let saved = try mutate(room: .evictions) { (s: inout CoreState) throws(CoreError) -> SavedOver? in
            _ = try s.liveDirectory(parent)
            guard let id = s.children[parent]?[name], let item = s.items[id] else { throw .notFound }
            if directory && !item.isDirectory { throw .notDirectory }
            if !directory && item.isDirectory { throw .isDirectory }
            if directory && !(s.children[id] ?? [:]).isEmpty { throw .notEmpty }
            if !directory, let saved = try s.saveOverBackup(item) { return saved }
            // Its rows wait for the next commit (Store.keptBack): an unlink costs no commit of its own. Not for a
            // file held open (its content moves aside at once) or one with conflict versions (their copies go),
            // nor on a disk short of room (the room it frees may be wanted at once).
            s.store.keepsRowsBack = s.handles[id] == nil && item.conflicts.isEmpty && s.hasAmpleRoom
            try s.deleteLocally(item)
            if s.store.keepsRowsBack { s.wakePusher() } // its pass writes them first, also for a local-only item
            return nil
        }
        if saved != nil { syncContentDirectory() } // durable after the lock, as replaceContent's rename
        return saved
    }

    /// rename(2): moves `name` in `parent` to `newName` in `newParent`, replacing a compatible target unless
    /// `noReplace`. One transaction: a failure (a full disk) leaves both names as they were. Answers the save
    /// when the moved file took the place of the one it replaced as its new content (a save by rename:
    /// CoreState.savesOver), nil for a plain rename.
    @discardableResult
    public func rename(parent: String, name: String, newParent: String, newName: String,
                       noReplace: Bool) throws(CoreError) -> SavedOver? {
        try CoreState.checkName(newName)
        let saved = try mutate { (s: inout CoreState) throws(CoreError) -> SavedOver? in
            try s.rename(parent: parent, name: name, newParent: newParent, newName: newName, noReplace: noReplace)
        }
        if saved != nil { syncContentDirectory() } // durable after the lock, as replaceContent's rename
        return saved
    }

    /// renameat2's RENAME_EXCHANGE: `name` in `parent` and `newName` in `newParent` swap places in one step.
    /// Both moves are pushed; the pusher lets one of them step aside on the remote while the other takes its
    /// name (see Pusher), so neither ends under another name.
    public func exchange(parent: String, name: String, newParent: String, newName: String) throws(CoreError) {
        try mutate { (s: inout CoreState) throws(CoreError) in
            try s.exchange(parent: parent, name: name, newParent: newParent, newName: newName)
        }
    }

    /// Changes mode, times and owner (metadata only; no content needed). Setting what is there already changes
    /// nothing, not even the ctime, and queues no upload (rsync sets every file's time again). The access time
    /// and the owner are this device's: a change of them alone is not pushed. (Who may change what, the
    /// caller has checked: the kernel does, with default_permissions.)
    /// With `size`, a truncation first, in the same transaction: a size other than 0 or the current one needs
    /// the content local (`.wouldBlock` otherwise: the caller fetches it and asks again).
    public func setAttributes(_ id: String, size: Int64? = nil, mode: UInt32?, mtime: Int64?, atime: Int64? = nil,
                              owner: Owner? = nil) throws(CoreError) -> Item {
        guard let size else {
            return try mutate { (s: inout CoreState) throws(CoreError) -> Item in
                s.store.keepsRowsBack = s.isNewFileNotClosed(id) // its chmod or utimens waits for its close
                return try s.setAttributes(id, mode: mode, mtime: mtime, atime: atime, owner: owner)
            }
        }
        return try gates.shared(id) { () throws(CoreError) -> Item in
            try mutate(room: .evictions) { (s: inout CoreState) throws(CoreError) -> Item in
                _ = try s.truncate(id, to: size)
                return try s.setAttributes(id, mode: mode, mtime: mtime, atime: atime, owner: owner)
            }
        }
    }
}

extension CoreState {
    /// Reads the store into memory (at start, before any other thread).
    mutating func load() throws {
        // Row by row into the compact index (ItemIndex.swift), sized once: no other copy of the items is made.
        items.reserve(try store.itemCount() + 1)
        try store.load(into: &items)
        items.markLocalOnlyAbove()
        discardedConflicts = Set(try store.resolvedConflicts())
        caughtUp = try store.meta("token") != nil
        unpushedConflicts = Set(try store.unpushedConflicts())
        if items[rootID] == nil {
            let root = Item(id: rootID, parent: nil, name: "", kind: .dir, mode: 0o755, mtime: now(),
                            ctime: now(), size: 0, remoteVersion: 0, remoteSHA: "", remoteSize: 0,
                            device: "", hasLocal: true, localSHA: nil, dirty: false, metaDirty: false,
                            deleted: false, pinned: false, xattrs: [:], conflicts: [])
            items[rootID] = root
            try store.save(root)
        }
        let index = items
        index.forEachPlaced { parent, size, code, name, isDirectory in
            // Two items may claim one name after a restart: `place` unlists a stale clean item without moving
            // it in the store (its newer state follows from the remote). The one whose place is this device's
            // choice (new, or moved here) keeps the name, else the one the remote gave it later: remote
            // versions count up across the container, and the unlisted one may have been written since.
            children.listLoaded(code, in: parent, size: size, as: name, isDirectory: isDirectory) { old in
                guard let other = index[code: old], let item = index[code: code] else { return false }
                return CoreState.claim(other) > CoreState.claim(item)
            }
        }
    }

    /// How strongly a loaded item claims its name against another one (see `load`).
    private static func claim(_ item: Item) -> (Int, Int64, String) {
        (item.remoteVersion == 0 || item.metaDirty ? 1 : 0, item.remoteVersion, item.id)
    }

    /// Removes content files no item owns: a file deleted while open keeps its content until the last close,
    /// and a daemon that stops before that close would otherwise leave it in the store for ever. Likewise the
    /// local copy of a conflict version no longer listed. An orphan that cannot be removed only takes space
    /// (nothing serves it) and is tried again at the next start: its failure is not an error.
    func removeOrphanContent() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: paths.content)
        for name in names {
            guard let key = ContentKey(parsing: name), let item = items[key.item], !item.deleted else {
                removeLeftover(paths.content + "/" + name)
                continue
            }
            if let conflict = key.conflict, !item.conflicts.contains(where: { $0.id == conflict }) {
                removeLeftover(paths.content + "/" + name)
            }
        }
    }

    /// Remembers conflict versions resolved here.
    mutating func rememberResolved(_ ids: [String]) throws(CoreError) {
        do { try store.markResolved(ids) } catch { throw CoreError.from(error) }
        discardedConflicts.formUnion(ids)
    }

    /// Remembers conflict versions added here, until the remote stores them.
    mutating func rememberUnpushed(_ ids: [String]) throws {
        try store.markUnpushed(ids, added: true)
        unpushedConflicts.formUnion(ids)
    }

    /// Forgets the conflict versions added here that the remote lists now.
    mutating func forgetUnpushed(listed: [WireConflict]) throws {
        let stored = listed.map(\.id).filter { unpushedConflicts.contains($0) }
        if stored.isEmpty { return }
        try store.markUnpushed(stored, added: false)
        unpushedConflicts.subtract(stored)
    }

    /// The conflict list to push on top of the remote's list `remote`: the remote's without the versions resolved
    /// here, and the versions added here (of `local`) that the remote does not have yet, under any id (another
    /// device may have kept the same write as a version first).
    func mergedConflicts(local: [WireConflict], remote: [WireConflict]) -> [WireConflict] {
        let listed = Set(remote.map(\.id))
        return remote.filter { !discardedConflicts.contains($0.id) }
            + local.filter { mine in
                unpushedConflicts.contains(mine.id) && !listed.contains(mine.id)
                    && !remote.contains { $0.isSameWrite(as: mine) }
            }
    }

    /// The path of an item from the container root.
    func path(of id: String) -> String {
        var parts: [String] = []
        var cur = items[id]
        while let c = cur, let p = c.parent { parts.append(c.name); cur = items[p] }
        return parts.reversed().joined(separator: "/")
    }

    static func checkName(_ name: String) throws(CoreError) {
        if name.utf8.count > WireRules.maxNameBytes { throw .nameTooLong }
        if !WireRules.isValidName(name) { throw .invalidName }
    }

    /// The live directory `id`, or the error a lookup in it gets.
    func liveDirectory(_ id: String) throws(CoreError) -> Item {
        guard let dir = items[id], !dir.deleted else { throw .notFound }
        guard dir.isDirectory else { throw .notDirectory }
        return dir
    }

    /// Creates a new item in a live directory (`name` checked by the caller); a file gets an empty content file.
    mutating func create(parent: String, name: String, kind: ItemKind, mode: UInt32,
                         target: String?, owner: Owner?) throws(CoreError) -> Item {
        let dir = try liveDirectory(parent)
        if children[parent]?[name] != nil { throw .exists }
        var item = newItem(parent: parent, name: name, kind: kind, mode: mode, target: target)
        own(&item, by: owner ?? config.owner, in: dir)
        item.localOnlyAbove = isLocalOnlyFolder(parent)
        if kind == .file {
            // Made before the item is saved: a failed save leaves an orphan, removed at the next start.
            if !paths.spares.take(to: paths.content(item.id)) {
                do {
                    let fd = try FileDescriptor.open(paths.content(item.id), O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
                    fd.close()
                } catch { throw CoreError.from(error) }
            }
        }
        try insertNew(item)
        return item
    }

    /// Gives a new item in `dir` its owner, as ext4 does: `creator`'s uid and gid, but in a setgid folder the
    /// folder's group, and a new folder there is setgid too. (The kernel has taken the setgid bit from a new
    /// file's mode already where the creator may not have it.)
    func own(_ item: inout Item, by creator: Owner, in dir: Item) {
        var owner = creator
        if dir.mode & CoreState.setGIDBit != 0 {
            owner.gid = config.owner(of: dir).gid
            if item.isDirectory { item.mode |= CoreState.setGIDBit }
        }
        item.owner = config.kept(owner)
    }

    static let setGIDBit: UInt32 = 0o2000

    func newItem(parent: String, name: String, kind: ItemKind, mode: UInt32, target: String?) -> Item {
        let now = self.now()
        // A link's size is its target's length; it has no content.
        let size = Int64(target?.utf8.count ?? 0)
        return Item(id: config.environment.randomHex(16), parent: parent, name: name, kind: kind, mode: mode & 0o7777,
                    mtime: now, ctime: now, size: size, remoteVersion: 0, remoteSHA: kind == .file ? emptySHA256 : "",
                    remoteSize: size, device: config.device, hasLocal: true, localSHA: nil, dirty: kind == .file,
                    metaDirty: true, deleted: false, pinned: false, xattrs: [:], conflicts: [], target: target)
    }

    /// A file whose row is kept back: created here and not closed yet (Store.keptBack). A folder's row kept back
    /// beside it (its entries' time) is not that: a chmod of the folder is written at once.
    func isNewFileNotClosed(_ id: String) -> Bool {
        items[id]?.kind == .file && store.isKeptBack(id)
    }

    /// Writes the item rows kept back (Store.keptBack; only those of `ids` and the deletes, when given) in this
    /// operation's transaction (their last uses go with it: `saveDueLastUses`).
    mutating func writeKeptBack(only ids: Set<String>? = nil) throws(CoreError) {
        do { try store.writeKeptBack(only: ids) } catch { throw CoreError.from(error) }
    }

    /// Adds a new item to the index and the store, and wakes the pusher.
    mutating func insertNew(_ item: Item) throws(CoreError) {
        do { try store.saveChanged(item) } catch { throw CoreError.from(error) }
        items[item.id] = item
        children.list(item.id, in: item.parent!, as: item.name)
        try entriesChanged(in: item.parent!)
        wakePusher()
    }

    /// Records that an entry of directory `id` was added, removed or renamed: its shown mtime and its ctime move
    /// on here, and are not synced (a folder's entries make no upload of the folder). `remote`: a change that
    /// did not come through the file system, whose cached attributes of the directory must then be dropped.
    /// Saved with whatever else the directory has pending (it keeps its place in the journal), in the
    /// operation's transaction.
    mutating func entriesChanged(in id: String, remote: Bool = false) throws(CoreError) {
        guard var dir = items[id], dir.isDirectory, !dir.deleted, caughtUp || !remote else { return }
        let now = self.now()
        dir.entriesMTime = now
        dir.ctime = now
        do { try store.save(dir) } catch { throw CoreError.from(error) }
        items[id] = dir
        if remote { notice(.changed(id, content: false)) }
    }

    /// Deletes an item here: drops it at once if the remote never saw it, else keeps a tombstone to push (also
    /// when a create was sent without an answer: it may have landed).
    mutating func deleteLocally(_ item: Item) throws(CoreError) {
        let before = item
        var item = item
        do {
            if try item.remoteVersion == 0 && !store.createWasSent(item.id) {
                try store.delete(item.id)
                items[item.id] = nil
            } else {
                item.deleted = true
                item.dirty = false
                item.hasLocal = false
                item.localSHA = nil
                try store.saveChanged(item)
                items[item.id] = item
                wakePusher()
            }
        } catch { throw CoreError.from(error) }
        children.unlist(item.name, in: item.parent!)
        try entriesChanged(in: item.parent!)
        releaseContent(of: before)
        let id = item.id
        let conflicts = item.conflicts
        onCommit { s in
            s.removeStaleStaging(id)
            for c in conflicts { s.evictConflict(id, c.id) }
        }
    }

    mutating func rename(parent: String, name: String, newParent: String, newName: String,
                         noReplace: Bool) throws(CoreError) -> SavedOver? {
        _ = try liveDirectory(parent)
        _ = try liveDirectory(newParent)
        guard let id = children[parent]?[name], var item = items[id] else { throw .notFound }
        if parent == newParent && sameName(name, newName) { return nil }
        if item.isDirectory && isAncestor(id, of: newParent) {
            throw .invalidArgument("cannot move a directory into itself")
        }
        try checkLocalOnlyMove(item, to: newParent, name: newName)
        if let targetID = children[newParent]?[newName], let target = items[targetID] {
            if noReplace { throw .exists }
            if target.isDirectory && !item.isDirectory { throw .isDirectory }
            if !target.isDirectory && item.isDirectory { throw .notDirectory }
            if target.isDirectory && !(children[targetID] ?? [:]).isEmpty { throw .notEmpty }
            if try savesOver(item, target) {
                try save(item, over: target, at: (newParent, newName))
                return SavedOver(new: id, kept: target.id)
            }
            try deleteLocally(target)
        }
        children.unlist(name, in: parent)
        let before = item
        item.parent = newParent
        item.name = newName
        item.ctime = now()
        item.metaDirty = true
        try saveLocalOnlyChange(item, was: before)
        children.list(id, in: newParent, as: newName)
        try entriesChanged(in: parent)
        if newParent != parent { try entriesChanged(in: newParent) }
        if item.kind == .file { movedAway(id, from: parent, name) }
        return nil
    }

    /// Remembers that file `id` left `name` in `parent` (its backup may come back as the file: saveOverBackup).
    /// Only the last moments' moves are kept.
    mutating func movedAway(_ id: String, from parent: String, _ name: String) {
        let now = now()
        if movedAway.count >= 256 { // (a loop of renames: pruned now and then, not at each)
            movedAway = movedAway.filter { now - $0.value.at < CoreState.backupWindow }
            if movedAway.count >= 256 { movedAway.removeAll() }
        }
        movedAway[id] = (parent, name, now)
    }

    /// How long after a file was renamed away its removal can complete a save (saveOverBackup).
    static let backupWindow: Int64 = 60_000_000_000

    /// The backup-then-rename save (vim's `backupcopy=no`, Word and others): the old file was renamed to a
    /// backup name moments ago, a new file took its name, and now the backup is removed. The old file then
    /// takes the new one's place and content as a save by rename (`save(_:over:at:)`) rather than going.
    mutating func saveOverBackup(_ old: Item) throws(CoreError) -> SavedOver? {
        guard let away = movedAway[old.id], now() - away.at < CoreState.backupWindow,
              let newID = children[away.parent]?[away.name], newID != old.id, let new = items[newID],
              try savesOver(new, old) else { return nil }
        try save(new, over: old, at: (away.parent, away.name))
        return SavedOver(new: newID, kept: old.id)
    }

    /// Whether renaming `new` over `target` is a save by rename (editors, atomic writers: a new file written
    /// beside the old one, then renamed over it), which keeps `target` as the file with `new`'s content: both
    /// are files in the container (not local-only), `new` was made here and has never reached the remote (no
    /// version, no create sent: nothing else knows it), and no program holds `target` open (the holders of a
    /// file renamed over keep what they opened, the old file). `new` may still be open: the kernel sends the
    /// release of a closed file after close(2) returns, so the rename can come first; its handles become the
    /// file's.
    func savesOver(_ new: Item, _ target: Item) throws(CoreError) -> Bool {
        guard new.kind == .file, target.kind == .file, !new.isLocalOnly, !target.isLocalOnly, new.hasLocal,
              new.remoteVersion == 0, handles[target.id] == nil else { return false }
        do { return try !store.createWasSent(new.id) } catch { throw CoreError.from(error) }
    }

    /// A save by rename (`savesOver`): `target` takes `new`'s content, mode, times, owner and attributes as
    /// a local edit, and the name `place` (where the save leaves the file), keeping its id, its history and
    /// its conflicts (a concurrent edit elsewhere becomes a conflict version, as for any edit); `new`, which
    /// nothing else knows, goes. Its content file becomes the target's before the commit (the target's own set
    /// aside in staging, dropped once committed), so no crash loses the saved bytes; a rollback (a full disk)
    /// puts both back. What memory alone holds (the new file's handles, which become the target's) changes once
    /// the commit is made.
    mutating func save(_ new: Item, over target: Item, at place: (parent: String, name: String)) throws(CoreError) {
        var item = target
        item.parent = place.parent
        item.name = place.name
        item.hasLocal = true
        item.dirty = true
        item.localSHA = nil
        item.size = new.size
        item.mode = new.mode
        item.mtime = new.mtime
        item.atime = new.atime
        item.owner = new.owner
        item.xattrs = new.xattrs
        item.ctime = now()
        item.metaDirty = true
        contentGeneration[target.id, default: 0] += 1
        do { try store.delete(new.id) } catch { throw CoreError.from(error) }
        items[new.id] = nil
        children.unlist(new.name, in: new.parent!)
        children.unlist(target.name, in: target.parent!)
        children.list(target.id, in: place.parent, as: place.name)
        try saveLocalChange(item)
        for folder in Set([new.parent!, target.parent!, place.parent]) { try entriesChanged(in: folder) }
        try moveContent(of: new.id, over: target.id)
        let (newID, id) = (new.id, target.id)
        onCommit { s in
            s.contentGeneration[newID] = nil
            s.movedAway[id] = nil
            if let moved = s.handles.removeValue(forKey: newID) {
                s.handles[id] = moved
                for (from, to) in s.handedOver where to == newID { s.handedOver[from] = id }
                s.handedOver[newID] = id
            }
            s.lastWrite[id] = s.lastWrite.removeValue(forKey: newID)
            if s.fsyncedSinceSnapshot.remove(newID) != nil { s.fsyncedSinceSnapshot.insert(id) }
            s.recountContent(newID)
            s.recountContent(id)
        }
        notice(.changed(target.id, content: true))
    }

    /// Moves the content file of `new` to be `id`'s, `id`'s own set aside until the commit (then removed) and
    /// both put back on a rollback.
    mutating func moveContent(of new: String, over id: String) throws(CoreError) {
        let (from, to, aside) = (paths.content(new), paths.content(id), paths.staging + "/" + id + ".before-save")
        let hadCopy = FileManager.default.fileExists(atPath: to)
        do {
            if hadCopy { try renameFile(to, aside) }
            do { try renameFile(from, to) } catch {
                if hadCopy { try? renameFile(aside, to) }
                throw error
            }
        } catch { throw CoreError.from(error) }
        onRollBack { _ in
            try? renameFile(to, from)
            if hadCopy { try? renameFile(aside, to) }
        }
        if hadCopy { onCommit { _ in removeLeftover(aside) } }
    }

    mutating func exchange(parent: String, name: String, newParent: String, newName: String) throws(CoreError) {
        _ = try liveDirectory(parent)
        _ = try liveDirectory(newParent)
        guard let id = children[parent]?[name], var item = items[id],
              let otherID = children[newParent]?[newName], var other = items[otherID] else { throw .notFound }
        if id == otherID { return }
        if (item.isDirectory && isAncestor(id, of: newParent)) || (other.isDirectory && isAncestor(otherID, of: parent)) {
            throw .invalidArgument("cannot move a directory into itself")
        }
        try checkLocalOnlyMove(item, to: newParent, name: newName)
        try checkLocalOnlyMove(other, to: parent, name: name)
        let (itemBefore, otherBefore) = (item, other)
        (item.parent, item.name, other.parent, other.name) = (newParent, newName, parent, name)
        item.ctime = now()
        other.ctime = item.ctime
        item.metaDirty = true
        other.metaDirty = true
        children.list(id, in: newParent, as: newName)
        children.list(otherID, in: parent, as: name)
        // Each may have crossed into or out of a local-only folder (saved with what is below it).
        try saveLocalOnlyChange(item, was: itemBefore)
        try saveLocalOnlyChange(other, was: otherBefore)
        try entriesChanged(in: parent)
        if newParent != parent { try entriesChanged(in: newParent) }
    }

    mutating func setAttributes(_ id: String, mode: UInt32?, mtime: Int64?, atime: Int64?,
                                owner: Owner?) throws(CoreError) -> Item {
        let gone = items[id]?.deleted ?? true
        guard var item = gone ? unlinked[id] : items[id] else { throw .notFound }
        let unchanged = item
        // What shows is compared: a time set to what `stat` says changes nothing.
        if let mode { item.mode = mode & 0o7777; item.cappedModeBits = 0 }
        // A time set explicitly is what shows, also on a directory whose entries changed later (tar, rsync
        // and cp -a set a folder's time after filling it).
        if let mtime, mtime != item.shownMTime { item.mtime = mtime; item.entriesMTime = 0 }
        if let atime, atime != item.shownATime { item.atime = atime }
        if let owner { item.owner = config.kept(owner) }
        if item == unchanged { return item }
        item.ctime = now()
        if gone { unlinked[id] = item; return item }
        // A folder's time set over the time its entries gave it goes up even when it is the time it had: the
        // other devices took those entries as they arrived, and show them until a new version of the folder.
        let folderTimeSet = mtime != nil && item.isDirectory && item.shownMTime != unchanged.shownMTime
        // The root's times, every access time and every owner are this device's alone: kept, not pushed.
        // (So are the setuid, setgid and sticky bits: WireRules.sharedModeBits.)
        if id == rootID || (item.metadata == unchanged.metadata && !folderTimeSet) {
            do { try store.save(item) } catch { throw CoreError.from(error) }
            items[id] = item
        } else {
            item.metaDirty = true
            try saveLocalChange(item)
            if folderTimeSet && hasPendingEntry(id) { timedAfterEntries.insert(id) }
        }
        // The content file carries the time too: a flush after this (the release of a handle closed just
        // before the utimens, as cp -p and rsync do) takes the time from the file and must find this one.
        if item.mtime != unchanged.mtime && item.hasContent && item.hasLocal {
            setFileTime(paths.content(id), item.mtime)
        }
        return item
    }

    /// True when an entry of directory `id` has a change still to go up.
    func hasPendingEntry(_ id: String) -> Bool {
        (children[id] ?? [:]).contains { items[$0.value]?.isPending == true }
    }

    /// True if `ancestor` is `id` or one of its ancestors.
    func isAncestor(_ ancestor: String, of id: String) -> Bool {
        var cur: String? = id
        while let c = cur {
            if c == ancestor { return true }
            cur = items[c]?.parent
        }
        return false
    }

    /// Persists a locally changed item and wakes the pusher.
    mutating func saveLocalChange(_ item: Item) throws(CoreError) {
        do { try store.saveChanged(item) } catch { throw CoreError.from(error) }
        items[item.id] = item
        wakePusher()
    }

    /// A name not taken in `parent`: `name 2.ext`, `name 3.ext`, and so on.
    func freeName(_ name: String, in parent: String, avoiding extra: String? = nil) -> String {
        var stem = Substring(name), ext = Substring("")
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            stem = name[..<dot]; ext = name[dot...]
        }
        var n = 2
        while true {
            let candidate = "\(stem) \(n)\(ext)"
            let taken = children[parent]?[candidate] != nil || extra.map { sameName(candidate, $0) } == true
            if !taken { return candidate }
            n += 1
        }
    }

    /// Takes an item out of its folder's listing, if the listing still names it: the puller may have given
    /// its name to another item already (see `place`).
    mutating func unlink(_ item: Item) throws {
        guard let parent = item.parent, children[parent]?[item.name] == item.id else { return }
        children.unlist(item.name, in: parent)
        notice(.removed(parent: parent, name: item.name, id: item.id, isDirectory: item.isDirectory))
        try entriesChanged(in: parent, remote: true)
    }

    /// Links an item under its parent, moving a pending local item that holds the name to a free name, and
    /// detaching a stale clean one (its own newer state follows in the feed). Between two clean items the
    /// newer remote state keeps the name, as at load (`claim`): a clean item placed at a state older than the
    /// holder's (one brought back where it was, see `restoreDeleted`) stays detached until its own newer
    /// state arrives.
    mutating func place(_ item: inout Item) throws {
        let parent = item.parent!
        item.localOnlyAbove = isLocalOnlyFolder(parent)
        if let otherID = children[parent]?[item.name], otherID != item.id, var other = items[otherID] {
            let otherIsNewer = other.remoteVersion > item.remoteVersion && !other.isPending && !item.isPending
            if otherIsNewer { return }
            children.unlist(item.name, in: parent)
            notice(.removed(parent: parent, name: other.name, id: other.id, isDirectory: other.isDirectory))
            if other.remoteVersion == 0 || other.isPending {
                other.name = freeName(other.name, in: parent, avoiding: item.name)
                other.metaDirty = true
                try store.saveChanged(other)
                items[other.id] = other
                children.list(other.id, in: parent, as: other.name)
                notice(.added(parent: parent, name: other.name))
            }
        }
        children.list(item.id, in: parent, as: item.name)
        notice(.added(parent: parent, name: item.name))
        try entriesChanged(in: parent, remote: true)
    }
}

/// Sets a file's modification time (nanoseconds since the epoch), leaving its access time.
private func setFileTime(_ path: String, _ mtime: Int64) {
    let omit = (1 << 30) - 2 // UTIME_OMIT, a macro Swift does not import
    var times = [timespec(tv_sec: 0, tv_nsec: omit),
                 timespec(tv_sec: Int(mtime / 1_000_000_000), tv_nsec: Int(mtime % 1_000_000_000))]
    _ = utimensat(AT_FDCWD, path, &times, 0)
}
