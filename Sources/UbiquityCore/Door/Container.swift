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
    /// Set when this container is the view of a folder another user shares with this one (docs/SHARING.md):
    /// whose it is and how it is shared. Every change here is refused at once (`refuseChangeInAShare`): read-only,
    /// and read-write until writing through a share is built.
    public var sharedWithMe: SharedWithMe?
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
    /// The remote's records of this container's shared folders, as last fetched (Sharing.swift).
    let shareRecords = Locked(ShareRecords())
    /// The remote's refusal of the last share command on a folder, by folder id (Sharing.swift).
    let shareErrors = Locked<[String: String]>([:])
    /// In a share's view: what runs once the share has ended (`onShareEnd`).
    let shareEnd = Locked<(@Sendable () -> Void)?>(nil)

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
            do { try sync.pullUntilCaughtUp() } catch where isStoreDiskFull(error) {
                Logger("sync").warning("the store's disk is full: remote changes wait until there is room")
            }
        }
        trimHeap() // give back what loading and the first sync left free
        sync.start()
        if config.environment.backgroundTransfers { // also without limits: a full disk needs it
            evictor.start(for: self)
            evictor.wake()
        }
        downloadPinned()
        refreshShares()
    }

    /// Starts the downloads of pinned files whose newest version is not local.
    func downloadPinned() {
        let pinnedStale = read { s in s.items.values(with: .pinned).filter { $0.kind == .file && !$0.isCurrent }.map(\.id) }
        for id in pinnedStale { downloads.start(id) }
    }

    /// Number of items with changes not yet acknowledged by the remote.
    public var pendingChanges: Int { get throws(StoreError) { try sync.pendingCount } }

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
        do { try checkpointer.run() } catch { throw CoreError(error) }
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
        try transaction(roomFor: { _ in room }, .core, body)
    }

    /// `mutate` for an operation that cannot fail by itself: a failed commit is logged (what it changed in
    /// memory is rolled back with it).
    @discardableResult
    func mutate<T>(room: FullDiskRoom = .freeSpace, _ body: (inout CoreState) -> T) -> T? {
        do { return try mutate(room: room) { s throws(CoreError) in body(&s) } } catch {
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
        try transaction(roomFor: { _ in room }, .sync, body)
    }

    /// `mutate` whose room depends on the state it finds: decided in the same hold of the lock.
    func mutate<T>(roomFor: (CoreState) -> FullDiskRoom,
                   _ body: (inout CoreState) throws(CoreError) -> T) throws(CoreError) -> T {
        try transaction(roomFor: roomFor, .core, body)
    }

    private func transaction<T, E: Error>(roomFor: (CoreState) -> FullDiskRoom, _ errors: TransactionErrors<E>,
                                          _ body: (inout CoreState) throws(E) -> T) throws(E) -> T {
        let (result, effects) = withState { s -> (Result<T, E>, Effects) in
            let result: Result<T, E>
            do throws(E) { result = .success(try s.transact(room: roomFor(s), errors, body)) } catch { result = .failure(error) }
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
        try refuseChangeInAShare()
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
        try refuseChangeInAShare()
        try CoreState.checkName(name)
        return try mutate(room: .withReserveInPlace) { (s: inout CoreState) throws(CoreError) -> Item in
            try s.create(parent: parent, name: name, kind: kind, mode: mode, target: target, owner: owner)
        }
    }

    /// Removes a file (`directory` false) or an empty directory (`directory` true). Answers the save it
    /// completes when the file is the backup of a save by rename (CoreState.saveOverBackup), nil otherwise.
    @discardableResult
    public func remove(parent: String, name: String, directory: Bool) throws(CoreError) -> SavedOver? {
        try refuseChangeInAShare()
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
        try refuseChangeInAShare()
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
        try refuseChangeInAShare()
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
        try refuseChangeInAShare()
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
