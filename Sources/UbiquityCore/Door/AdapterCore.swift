// All that the FUSE adapter may call of the core (`FileSystem.core`), as one protocol per role, each about the
// size of a file system's metadata door: the container's own facts, names and attributes, content, status and
// actions, conflict versions, and Recently Deleted with history. `AdapterCore` is all of them; Container is
// their one implementation; the push and pull sides (`Container.pushSide`, `.pullSide`), the loops and the
// simulation's steps (`@_spi(Simulation)`) are not part of it, so the adapter cannot reach them.
//
// What must hold: each call that changes anything is one operation of the core (one `mutate`, one transaction)
// and throws only `CoreError`; a call that waits for content or for the remote takes a completion and never
// blocks. Descriptors
// and figures come back, never a path into the store (AdapterServices.swift).
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// The container itself: its root, its configuration, the observer of changes from elsewhere, its store's disk.
public protocol ContainerFacts: AnyObject, Sendable {
    var rootID: String { get }
    var config: ContainerConfig { get }
    /// Told of changes from elsewhere, to invalidate the kernel's caches. Held weakly.
    var observer: ContainerObserver? { get set }
    func rootAttributes() throws(CoreError) -> [(name: String, value: String)]
    /// Pauses or resumes the container's sync (the root's `syncPaused`).
    func setSyncPaused(_ paused: Bool) throws(CoreError)
    func storeFileSystemStats() throws(CoreError) -> statvfs
    func makeStagingFile(prefix: String) throws(CoreError) -> FileDescriptor
}

/// Items by id and by name, listings, and the changes of the namespace and of attributes.
public protocol NamesAndAttributes: AnyObject, Sendable {
    func item(_ id: String) -> Item?
    func unlinkedItem(_ id: String) -> Item?
    func lookup(parent: String, name: String) -> Item?
    func path(of id: String) -> String
    func list(_ id: String) throws(CoreError) -> [Item]
    func listEntries(_ id: String) throws(CoreError) -> [(name: String, id: String, kind: ItemKind)]
    func subdirectoryCount(_ id: String) -> Int
    func createFile(parent: String, name: String, mode: UInt32, owner: Owner?) throws(CoreError) -> Item
    func createAndOpen(parent: String, name: String, mode: UInt32, owner: Owner?) throws(CoreError) -> (Item, FileDescriptor)
    func makeDirectory(parent: String, name: String, mode: UInt32, owner: Owner?) throws(CoreError) -> Item
    func createSymlink(parent: String, name: String, target: String, owner: Owner?) throws(CoreError) -> Item
    func createLocalNode(parent: String, name: String, kind: ItemKind, mode: UInt32, owner: Owner?) throws(CoreError) -> Item
    /// A remove or a rename that completes a save by rename answers it (SavedOver), nil otherwise.
    func remove(parent: String, name: String, directory: Bool) throws(CoreError) -> SavedOver?
    func rename(parent: String, name: String, newParent: String, newName: String, noReplace: Bool) throws(CoreError) -> SavedOver?
    func exchange(parent: String, name: String, newParent: String, newName: String) throws(CoreError)
    func setAttributes(_ id: String, size: Int64?, mode: UInt32?, mtime: Int64?, atime: Int64?,
                       owner: Owner?) throws(CoreError) -> Item
}

/// A file's content: opens (which may wait for a download), writes, flushes, syncs and releases.
public protocol ContentDoor: AnyObject, Sendable {
    func open(_ id: String, writable: Bool, truncate: Bool, staleOK: Bool, noDownload: Bool) throws(CoreError) -> Container.Opening
    func fetch(_ id: String, done: @escaping @Sendable (Result<Void, CoreError>) -> Void)
    func write<T>(_ id: String, through fd: FileDescriptor?, _ body: () -> T) throws(CoreError) -> T
    func openedForUnseenWrites(_ id: String) throws(CoreError) -> Int?
    func flushed(_ id: String, wroteUnseen: Bool, through fd: FileDescriptor?) throws(CoreError)
    func synced(_ id: String, wroteUnseen: Bool, through fd: FileDescriptor?) throws(CoreError)
    func syncedDirectory() throws(CoreError)
    func release(_ id: String, through fd: FileDescriptor, _ r: Container.Release) throws(CoreError)
    func localStat(_ item: Item) -> stat?
    func contentFileIdentity(_ id: String) -> (device: UInt64, inode: UInt64)?
}

/// The `user.ubiquity.*` status, user xattrs, and the actions on an item (evict, download, pin, exclude).
public protocol StatusAndActions: AnyObject, Sendable {
    func status(_ id: String) throws(CoreError) -> ItemStatus
    func userXattr(_ id: String, _ name: String) throws(CoreError) -> [UInt8]
    func userXattrNames(_ id: String) -> [String]
    func setUserXattr(_ id: String, _ name: String, _ value: [UInt8], create: Bool, replace: Bool) throws(CoreError)
    func removeUserXattr(_ id: String, _ name: String) throws(CoreError)

    func evict(_ id: String) throws(CoreError)
    func requestDownload(_ id: String) throws(CoreError)
    func setPinned(_ id: String, _ on: Bool) throws(CoreError)
    func setExcludedFromSync(_ id: String, _ on: Bool) throws(CoreError)
}

/// Conflict versions: listed, opened, fetched, evicted, discarded, promoted.
public protocol ConflictsAndVersions: AnyObject, Sendable {
    func conflictedItems() -> [Item]
    func hasLocalConflict(_ id: String, _ conflict: String) -> Bool
    func openConflictVersion(item id: String, conflict: String) throws(CoreError) -> FileDescriptor
    func fetchConflict(_ id: String, _ conflict: String, done: @escaping @Sendable (Result<Void, CoreError>) -> Void)
    func evictConflict(_ id: String, _ conflict: String)
    func discardConflict(_ id: String, _ conflict: String) throws(CoreError)
    func promoteConflict(_ id: String, _ conflict: String) throws(CoreError)
    func resolveKeepingCurrent(_ id: String) throws(CoreError)
}

/// Recently Deleted, history, rewind and past versions: requests to the remote, answered through a completion.
public protocol HistoryAndTrash: AnyObject, Sendable {
    func recentlyDeleted(done: @escaping Container.Answer<[WireVersion]>)
    func history(_ id: String, done: @escaping Container.Answer<[WireVersion]>)
    func restoreFromTrash(_ ids: [String], done: @escaping Container.Answer<[WireItem]>)
    func emptyTrash(_ ids: [String]?, done: @escaping Container.Answer<Int>)
    func rewind(_ folder: String, to: Int64, dryRun: Bool, done: @escaping Container.Answer<[WireRewindChange]>)
    func deleteData(documents: Bool, done: @escaping Container.Answer<WireDataDeleted>)
    func fetchPast(_ content: PastContent, done: @escaping @Sendable (Result<Void, CoreError>) -> Void)
    func openPast(_ content: PastContent) throws(CoreError) -> FileDescriptor
    func restorePast(_ id: String, _ content: PastContent) throws(CoreError)
}

/// Shared folders on the owner's side (Sharing.swift): the remote's records, and the attributes they give.
public protocol SharedFolders: AnyObject, Sendable {
    func shareList(done: @escaping Container.Answer<[WireShare]>)
    func leaveShare(done: @escaping Container.Answer<Void>)
    func addShare(_ id: String, user: String, readOnly: Bool, done: @escaping Container.Answer<WireShare>)
    func removeShare(_ id: String, user: String, done: @escaping Container.Answer<Void>)
    func shareAttributes(_ id: String) -> [(name: String, value: String)]
}

/// All the adapter may call.
public typealias AdapterCore = ContainerFacts & NamesAndAttributes & ContentDoor & StatusAndActions
    & ConflictsAndVersions & HistoryAndTrash & SharedFolders

extension Container: ContainerFacts, NamesAndAttributes, ContentDoor, StatusAndActions, ConflictsAndVersions,
    HistoryAndTrash, SharedFolders {}
