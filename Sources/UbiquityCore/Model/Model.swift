// The core's model of one container on one device: items with their remote and local state.
//
// Invariants (checked by `Store.check` and the tests):
// - every live item but the root has a live parent directory, and (parent, name) is unique among live items;
// - for a file, `hasLocal` is true exactly when `content/<id>` exists in the store and is complete;
// - `localSHA` is the hash of that content when it is a clean copy of some remote version, nil when dirty;
// - an item with `dirty`, `metaDirty` or `deleted` set has a row in the pending journal, unless it is local-only
//   (`isLocalOnly`): those never reach the remote; one the remote still holds (`remoteVersion` > 0) is in the
//   journal until its remote copy is deleted, after which it has `remoteVersion` 0;
// - `localOnlyAbove` is true exactly when a folder above the item is local-only (kept by the container);
// - only files have content: directories, links, fifos and sockets are metadata only (`hasLocal` true, no
//   content file); a link's `target` is set exactly when its kind is `.symlink`, its size is the target's length.
import Foundation
import UbiquityBase

public struct Item: Equatable, Sendable {
    public var id: String
    /// Parent id; nil only for the root.
    public var parent: String?
    public var name: String
    public var kind: ItemKind
    public var mode: UInt32
    public var mtime: Int64
    /// Change time of the local entry (not synced).
    public var ctime: Int64
    /// The size shown to programs: the local content's while dirty, else the newest remote version's.
    public var size: Int64

    /// The newest version of this item known from the remote; 0 when the remote has never seen it.
    public var remoteVersion: Int64
    /// Hash and size of the newest remote content.
    public var remoteSHA: String
    public var remoteSize: Int64
    /// The device that made the newest remote version.
    public var device: String

    public var hasLocal: Bool
    public var localSHA: String?
    /// Content changed here and not yet acknowledged by the remote.
    public var dirty: Bool
    /// Metadata (name, parent, mode, mtime, xattrs, conflicts) changed here and not yet acknowledged.
    public var metaDirty: Bool
    /// Deleted here; the delete is not yet acknowledged.
    public var deleted: Bool
    public var pinned: Bool

    /// The user's own extended attributes.
    public var xattrs: [String: [UInt8]]
    public var conflicts: [WireConflict]
    /// A symbolic link's target, exactly as written; nil for every other kind.
    public var target: String? = nil

    /// Access time (not synced: this device's, like ctime); nil until set here (utimens): it reads as mtime.
    /// Reads do not change it (the mount behaves as noatime).
    public var atime: Int64? = nil
    /// Who owns the item on this device (not synced, like atime); nil: the mounting user
    /// (`ContainerConfig.owner`), as every item that came from another device is.
    public var owner: Owner? = nil
    /// For a directory: when an entry was last added, removed or renamed in it on this device, by a local or a
    /// remote change (not synced, so a folder's entries do not make it an upload).
    public var entriesMTime: Int64 = 0
    /// The user's `isExcludedFromSync` flag (persisted, not synced): the item, and everything below a folder,
    /// stays on this device only.
    public var excluded = false
    /// A folder above the item is local-only (not persisted: the store and the container derive it from the
    /// parents, see `Item.markLocalOnlyAbove`).
    public var localOnlyAbove = false
    /// Group and other write bits the remote's mode has that this device's cap (`ContainerConfig.arrivingModeCap`)
    /// kept from arriving: sent back with every push of the item, so that a push from here never takes them from
    /// the other devices; a chmod here clears them (the mode is then the one set here).
    public var cappedModeBits: UInt32 = 0

    /// The modification time programs see: for a directory also the last change of its entries.
    public var shownMTime: Int64 { entriesMTime == 0 ? mtime : max(mtime, entriesMTime) } // 0: none (a time before 1970 stays)
    public var shownATime: Int64 { atime ?? mtime }

    public var isDirectory: Bool { kind == .dir }
    /// Only files have content to store, download, upload or evict.
    public var hasContent: Bool { kind == .file }
    /// Local-only by itself: a fifo or a socket (the kernel carries their data; only the node is ours), a name
    /// ending in `.nosync` (Apple's rule) or a database's companion's, a desktop's trash folder in the root
    /// (`WireRules.staysOnOneDevice`), or the user's excluded flag. Everything below such a folder is too.
    public var isLocalOnlyItself: Bool {
        kind == .fifo || kind == .socket || excluded || WireRules.staysOnOneDevice(name, parent: parent)
    }
    /// Lives on this device only: never uploaded, never evicted, never listed on other devices.
    public var isLocalOnly: Bool { localOnlyAbove || isLocalOnlyItself }
    /// Has changes to send to the remote. For a local-only item only one: the delete of the copy the remote
    /// still holds (it became local-only after it was uploaded); its local copy stays.
    public var isPending: Bool { isLocalOnly ? remoteVersion > 0 : (dirty || metaDirty || deleted) }

    /// Local content that is the newest remote version (or newer, while dirty).
    public var isCurrent: Bool { hasLocal && (dirty || localSHA == remoteSHA) }

    /// Takes the remote's content as current (its hash, size and author); the local copy stays as it is.
    mutating func takeContent(of w: WireItem) {
        remoteSHA = w.sha256
        remoteSize = w.size
        size = w.size
        device = w.device
    }

    /// Takes the remote's state of the item: place, metadata, and the newest remote content.
    public mutating func adopt(_ w: WireItem, capping cap: UInt32) {
        // A time set elsewhere shows as set, as a time set here does (Container.setAttributes). A folder's
        // new version also covers the entries that arrived before it: its device pushes a time set after
        // filling it once more after them (CoreState.timedAfterEntries).
        if w.mtime != mtime || kind == .dir { entriesMTime = 0 }
        parent = w.parent
        name = w.name
        takeMode(w.mode, capping: cap)
        mtime = w.mtime
        size = w.size
        remoteVersion = w.version
        remoteSHA = w.sha256
        remoteSize = w.size
        device = w.device
        xattrs = Xattrs.fromWire(w.xattrs)
        conflicts = w.conflicts
        target = w.target
    }

    /// Sets `localOnlyAbove` on every item of `items` from its parents (a walk up each chain, remembering the
    /// answer per folder).
    public static func markLocalOnlyAbove(_ items: inout [String: Item]) {
        var known: [String: Bool] = [:]
        func localOnly(_ id: String) -> Bool {
            if let k = known[id] { return k }
            guard let item = items[id] else { return false }
            let answer = item.isLocalOnlyItself || item.parent.map(localOnly) == true
            known[id] = answer
            return answer
        }
        for id in Array(items.keys) { items[id]!.localOnlyAbove = items[id]!.parent.map(localOnly) ?? false }
    }

    public var downloadingStatus: DownloadingStatus {
        if !hasContent || isCurrent { return .current }
        return hasLocal ? .downloaded : .notDownloaded
    }
}

/// An item's owner and group on this device.
public struct Owner: Equatable, Sendable {
    public var uid: UInt32
    public var gid: UInt32
    public init(uid: UInt32, gid: UInt32) { self.uid = uid; self.gid = gid }
}

/// Where an item is: its parent and its name there. Names compare byte for byte (`sameName`), not by
/// Unicode equivalence: an NFC and an NFD spelling of one word are two names, as on the remote.
struct ItemPlace: Equatable {
    var parent: String?
    var name: String

    static func == (a: ItemPlace, b: ItemPlace) -> Bool { a.parent == b.parent && sameName(a.name, b.name) }
}

/// The metadata a push sends besides the content and the conflict list: place, mode, modification time and
/// the user's attributes. Two states with equal metadata need no metadata push between them.
struct ItemMetadata: Equatable {
    var place: ItemPlace
    var mode: UInt32
    var mtime: Int64
    var xattrs: [String: [UInt8]]

    /// The same metadata in another place: for the rules that compare all but the place (or the name).
    func named(_ name: String) -> ItemMetadata {
        var m = self
        m.place.name = name
        return m
    }
}

extension Item {
    var place: ItemPlace { ItemPlace(parent: parent, name: name) }
    var metadata: ItemMetadata {
        ItemMetadata(place: place, mode: sharedMode, mtime: mtime, xattrs: xattrs)
    }

    /// A mode from the wire with the bits that are this device's alone (setuid, setgid, sticky) kept from
    /// `local`, and of the bits in `cap` (`ContainerConfig.arrivingModeCap`) only those `local` has already:
    /// another device can take them away here, never add them.
    static func mode(_ wire: UInt32, keepingLocalBitsOf local: UInt32, capping cap: UInt32) -> UInt32 {
        (wire & WireRules.sharedModeBits & ~(cap & ~local)) | (local & 0o7777 & ~WireRules.sharedModeBits)
    }

    /// Takes a mode from the wire (`mode(_:keepingLocalBitsOf:capping:)`), keeping the bits the cap held back
    /// in `cappedModeBits`.
    mutating func takeMode(_ wire: UInt32, capping cap: UInt32) {
        let taken = Item.mode(wire, keepingLocalBitsOf: mode, capping: cap)
        cappedModeBits = wire & WireRules.sharedModeBits & ~taken
        mode = taken
    }

    /// The mode the remote has, or gets at this device's next push: the one here with the bits the cap held back.
    var sharedMode: UInt32 { (mode | cappedModeBits) & WireRules.sharedModeBits }
}

extension WireItem {
    var place: ItemPlace { ItemPlace(parent: parent, name: name) }
    var metadata: ItemMetadata {
        ItemMetadata(place: place, mode: mode & WireRules.sharedModeBits, mtime: mtime, xattrs: Xattrs.fromWire(xattrs))
    }
}

/// The user's extended attributes as the core holds them (bytes) and as the wire and the store carry them
/// (base64). A wire value that is not base64 is dropped.
enum Xattrs {
    static func toWire(_ x: [String: [UInt8]]) -> [String: String] { x.mapValues { Data($0).base64EncodedString() } }
    static func fromWire(_ w: [String: String]) -> [String: [UInt8]] {
        w.compactMapValues { Data(base64Encoded: $0).map { [UInt8]($0) } }
    }
}

/// What a content file or a download is keyed by: an item's current content ("ITEM") or one of its conflict
/// versions ("ITEM.CONFLICT"). Item ids hold no dot.
struct ContentKey: CustomStringConvertible {
    var item: String
    var conflict: String?

    init(item: String, conflict: String? = nil) {
        self.item = item
        self.conflict = conflict
    }

    /// Nil for an empty key.
    init?(parsing key: String) {
        let parts = key.split(separator: ".", maxSplits: 1).map(String.init)
        guard let first = parts.first else { return nil }
        self.init(item: first, conflict: parts.count == 2 ? parts[1] : nil)
    }

    var description: String { conflict.map { item + "." + $0 } ?? item }
}

/// Apple's NSURLUbiquitousItemDownloadingStatus values.
public enum DownloadingStatus: String, Sendable {
    case current, downloaded, notDownloaded
}

/// Why a core operation failed. The FUSE adapter maps each case to one errno.
public enum CoreError: Error, Equatable, CustomStringConvertible {
    case notFound
    case exists
    case notEmpty
    case isDirectory
    case notDirectory
    case invalidName
    case nameTooLong
    /// A name or link target that is not valid UTF-8: refused, never rewritten (no other device could hold it).
    case illegalByteSequence
    /// The operation would move a directory into itself, or names the root.
    case invalidArgument(String)
    /// Refused while the item is in use or has changes not yet uploaded.
    case busy(String)
    /// The content is not local and the caller may not download it.
    case wouldBlock
    /// The content could not be fetched or stored.
    case io(String)
    case noSpace
    case notPermitted(String)
    case interrupted
    /// A read-only part of the file system (the versions directory).
    case readOnly
    /// A change this user may not make: a folder another user shares with them read-only.
    case accessDenied(String)
    /// No such extended attribute.
    case noAttribute
    /// An extended attribute value or list too large.
    case tooBig
    /// A file size or offset beyond what the store's file system holds.
    case fileTooBig
    /// The store's file system cannot do that (a fallocate mode).
    case unsupported(String)
    /// A rename that cannot be done in place (it would make content that is not local local-only): the caller
    /// copies instead (mv does on EXDEV).
    case crossDevice(String)
    /// The key-value store's quota (its key count or its total size) would pass.
    case quotaExceeded(String)
    /// The store's database failed, or holds a value that does not decode (a full disk is `noSpace`): the
    /// cause, kept for the log and the status.
    case store(StoreError)
    /// The remote failed: the cause, kept for the log and the status.
    case remote(RemoteError)
    /// A system call failed with an errno that has no case of its own.
    case system(Errno)

    public var description: String {
        switch self {
        case .notFound: return "no such item"
        case .exists: return "an item with that name exists"
        case .notEmpty: return "directory not empty"
        case .isDirectory: return "is a directory"
        case .notDirectory: return "not a directory"
        case .invalidName: return "invalid name"
        case .nameTooLong: return "name too long"
        case .illegalByteSequence: return "not valid UTF-8"
        case .invalidArgument(let m): return "invalid argument: \(m)"
        case .busy(let m): return "busy: \(m)"
        case .wouldBlock: return "content not local"
        case .io(let m): return "I/O error: \(m)"
        case .noSpace: return "no space left in the store"
        case .notPermitted(let m): return "not permitted: \(m)"
        case .interrupted: return "interrupted"
        case .readOnly: return "read-only"
        case .accessDenied(let m): return "permission denied: \(m)"
        case .noAttribute: return "no such attribute"
        case .tooBig: return "attribute too large"
        case .fileTooBig: return "file too large"
        case .unsupported(let m): return "not supported: \(m)"
        case .crossDevice(let m): return "cannot be moved in place: \(m)"
        case .quotaExceeded(let m): return m
        case .store(let e): return "I/O error: \(e)"
        case .remote(let e): return "I/O error: \(e)"
        case .system(let e): return "I/O error: \(e)"
        }
    }

    // The errors met below the core each map to their case here, one initializer per type, cause kept: the
    // store's, a system call's, the remote's. They are the only maps: nothing reads an untyped error.

    /// A failure of the store: a full disk is `noSpace`, the rest keep their case.
    public init(_ e: StoreError) {
        if case .full = e { self = .noSpace } else { self = .store(e) }
    }

    /// A system call's errno: those with a case of their own take it.
    public init(_ e: Errno) {
        switch e {
        case .noSpace: self = .noSpace
        case .fileTooBig: self = .fileTooBig
        case .notSupported: self = .unsupported("\(e)")
        case .invalid: self = .invalidArgument("\(e)")
        default: self = .system(e)
        }
    }

    /// A failure of the remote.
    public init(_ e: RemoteError) { self = .remote(e) }
}

/// Runs work on the store, a failure as the CoreError of its case.
@discardableResult
func onStore<T>(_ body: () throws(StoreError) -> T) throws(CoreError) -> T {
    do { return try body() } catch { throw CoreError(error) }
}

/// Runs system calls on the store's files, a failure as the CoreError of its errno.
@discardableResult
func onFiles<T>(_ body: () throws(Errno) -> T) throws(CoreError) -> T {
    do { return try body() } catch { throw CoreError(error) }
}

/// Runs calls to the remote, a failure as `.remote`.
func onRemote<T>(_ body: () throws(RemoteError) -> T) throws(CoreError) -> T {
    do { return try body() } catch { throw .remote(error) }
}

/// Live transfer state of one item, for the status attributes.
public struct TransferState: Equatable, Sendable {
    public var isDownloading = false
    public var downloadedBytes: Int64 = 0
    public var downloadTotal: Int64 = 0
    public var downloadError: String?
    public var isUploading = false
    public var uploadedBytes: Int64 = 0
    public var uploadTotal: Int64 = 0
    public var uploadError: String?
    /// The last push failed for the user's quota on the remote (`RemoteError.overQuota`); false with no error.
    public var overQuota = false
    public init() {}
}

/// Everything `getfattr` shows about an item.
public struct ItemStatus: Equatable, Sendable {
    public var downloadingStatus: DownloadingStatus
    public var isDownloading: Bool
    public var percentDownloaded: Int
    public var isUploaded: Bool
    public var isUploading: Bool
    public var percentUploaded: Int
    public var hasUnresolvedConflicts: Bool
    public var downloadingError: String?
    public var uploadingError: String?
    public var pinned: Bool
    /// False for a local-only item (`Item.isLocalOnly`).
    public var isUbiquitous: Bool = true
    /// The user's excluded flag of the item itself.
    public var isExcludedFromSync: Bool = false
}

/// Percent of `done` in `total`, 100 for an empty total.
func percent(_ done: Int64, _ total: Int64) -> Int {
    total <= 0 ? 100 : Int(min(100, done * 100 / total))
}

/// A save by rename (CoreState.savesOver): the new file `new` went, and the file `kept` took its place, as that
/// file with the new one's content.
public struct SavedOver: Equatable, Sendable {
    public let new: String
    public let kept: String
}
