// The mount's own trees beside the container's items: `.versions` (conflict and past versions: Versions.swift,
// PastVersions.swift), `.kvstore` (the key-value store: KeyValueFiles.swift) and `.trash` (Recently Deleted:
// TrashFiles.swift, TrashTree.swift). Each is a `VirtualTree`. A request names a node id; the adapter parses it
// once (`route`) and hands the request to the tree that owns the node, or to the core when the node is an
// item's. What a tree does not do, the protocol's defaults answer: EROFS for a change, nothing for the rest.
//
// What must hold: a tree's nodes are worked out afresh from their ids at each request, never kept, so none
// outlives what it shows; their ids never equal an item's (NodeID.swift). Each tree's folder sits in the root
// under one of `WireRules.mountRootNames`, the one list the server keeps too, so no item takes those names. A
// tree reaches the core only through the adapter's door (`fs.core`), as the rest of the adapter does.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

/// What an inode stands for.
enum Node {
    case real(Item)
    /// The mirror of item `of` under .versions (the root's mirror is .versions itself).
    case versionsDir(of: Item)
    case version(of: Item, conflict: WireConflict)
    /// A kept past version of a file (PastVersions.swift).
    case pastVersion(of: Item, WireVersion)
    /// `.kvstore` (typed: `.kvstore/.json`), one of its keys, and `.kvstore/.changes` (KeyValueFiles.swift).
    case kvDir(typed: Bool)
    case kvKey(String, typed: Bool)
    case kvChanges
    /// `.trash` and its `.list` (TrashFiles.swift).
    case trashDir
    case trashList
    /// An entry of Recently Deleted (TrashTree.swift).
    case trashItem(WireVersion)

    /// The type bits of its mode (S_IFDIR, S_IFREG, S_IFLNK, ...), as listings report them.
    var fileType: mode_t {
        switch self {
        case .real(let item): return FileSystem.fileType(item.kind)
        case .versionsDir, .kvDir, .trashDir: return S_IFDIR
        case .version, .pastVersion, .kvKey, .kvChanges, .trashList: return S_IFREG
        case .trashItem(let v): return FileSystem.fileType(v.kind)
        }
    }

    var isVirtual: Bool {
        if case .real = self { return false }
        return true
    }
}

/// One entry of a listing: its name, its node's id, and its kind when it is an item (nil: ask its node).
typealias Listed = (name: String, id: String, kind: ItemKind?)

/// Asks the remote for what a listing shows, off the FUSE worker, then runs its argument (also when the
/// remote did not answer: what was heard last stays).
typealias RemoteAsk = (@escaping @Sendable () -> Void) -> Void

/// One of the mount's own trees. Its requests come here already parsed (`NodeID`), each for a node it owns.
protocol VirtualTree {
    /// The tree's folder in the root, one of `WireRules.mountRootNames`, and that folder's node.
    var folderName: String { get }
    var folderID: NodeID { get }
    /// Whether the root shows the folder (the key-value store's only when the container has one).
    var isShown: Bool { get }
    func owns(_ id: NodeID) -> Bool

    /// The node behind an id, if it (still) exists.
    func node(_ id: NodeID) throws(CoreError) -> Node?
    /// The children of folder node `node` (whose id is `id`), in listing order.
    func children(_ id: NodeID, _ node: Node) throws(CoreError) -> [Listed]
    /// The child `name` of folder `parent`.
    func child(_ parent: NodeID, _ name: String) throws(CoreError) -> (id: String, node: Node)?
    func attributes(_ node: Node, number: UInt64) -> stat
    /// How to ask the remote first, when folder `id`'s listing (`opening`) or a lookup in it needs it.
    func remoteListing(_ id: NodeID, opening: Bool) -> RemoteAsk?

    func open(_ id: String, _ node: Node, flags: Int32, _ caller: Caller, waiter: Waiter,
              done: @escaping Completion<Opened>)
    func create(in parent: NodeID, _ name: String) throws(CoreError) -> (Entry, Opened)
    func remove(in parent: NodeID, _ name: String, directory: Bool, done: @escaping Completion<Void>)
    /// rename(2) of `name` in `parent`, a folder of this tree, to an item's folder `newParent`.
    func rename(_ parent: NodeID, _ name: String, to newParent: String, _ newName: String, waiter: Waiter,
                done: @escaping Completion<Void>)
    func setattr(_ id: String, _ node: Node, _ changes: AttributeChanges, fh: UInt64?) throws(AdapterError) -> Attributes
    func readlink(_ node: Node) throws(CoreError) -> String

    /// The handles of its nodes: a write, a flush, the release.
    func write(_ data: WriteData, at offset: off_t, _ file: FileSystem.OpenFile) throws(AdapterError) -> Int
    func flush(_ file: FileSystem.OpenFile) throws(CoreError)
    func release(_ file: FileSystem.OpenFile)

    /// The status attributes a node shows, by full name.
    func statusAttributes(_ node: Node) -> [String: String]
    /// setxattr(2) on node `id`.
    func setxattr(_ id: NodeID, _ name: String, _ value: [UInt8], done: @escaping Completion<Void>)
}

extension VirtualTree {
    var isShown: Bool { true }
    func remoteListing(_ id: NodeID, opening: Bool) -> RemoteAsk? { nil }
    func create(in parent: NodeID, _ name: String) throws(CoreError) -> (Entry, Opened) { throw .readOnly }
    func remove(in parent: NodeID, _ name: String, directory: Bool, done: @escaping Completion<Void>) {
        done(.failure(.core(.readOnly)))
    }
    func rename(_ parent: NodeID, _ name: String, to newParent: String, _ newName: String, waiter: Waiter,
                done: @escaping Completion<Void>) {
        done(.failure(.core(.readOnly)))
    }
    func setattr(_ id: String, _ node: Node, _ changes: AttributeChanges, fh: UInt64?) throws(AdapterError) -> Attributes {
        throw .core(.readOnly)
    }
    func readlink(_ node: Node) throws(CoreError) -> String { throw .invalidArgument("not a symbolic link") }
    func write(_ data: WriteData, at offset: off_t, _ file: FileSystem.OpenFile) throws(AdapterError) -> Int {
        throw .badHandle
    }
    func flush(_ file: FileSystem.OpenFile) throws(CoreError) {}
    func release(_ file: FileSystem.OpenFile) {}
    func statusAttributes(_ node: Node) -> [String: String] { [:] }
    func setxattr(_ id: NodeID, _ name: String, _ value: [UInt8], done: @escaping Completion<Void>) {
        done(.failure(.core(.readOnly)))
    }
}

/// Where the requests on a node go.
enum Route {
    /// To the core: an item's node.
    case item
    /// To the virtual tree that owns the node.
    case tree(any VirtualTree, NodeID)
    /// Nowhere: a node that stands for nothing (a handle the announcer opened).
    case none
}

extension FileSystem {
    /// The mount's own trees, in the order the root lists their folders.
    var trees: [any VirtualTree] { [VersionsTree(fs: self), KeyValueTree(fs: self), TrashTree(fs: self)] }

    /// Where requests on node `id` go.
    func route(_ id: String) -> Route {
        let parsed = NodeID(parsing: id)
        if case .item = parsed { return .item }
        guard let tree = trees.first(where: { $0.owns(parsed) }) else { return .none }
        return .tree(tree, parsed)
    }

    /// The node behind an id, if it (still) exists. A tree that cannot be read throws (EIO), never "not found".
    func node(_ id: String) throws(CoreError) -> Node? {
        switch route(id) {
        case .item:
            // A file deleted while open is still there for its descriptors (fstat, fchmod, ftruncate).
            return (core.item(id) ?? core.unlinkedItem(id)).map { .real($0) }
        case .tree(let tree, let parsed): return try tree.node(parsed)
        case .none: return nil
        }
    }

    /// The children of a directory node, by name, with the kind of each real item (nil: ask `node`). A real
    /// folder's entries come in one read of the core, without a copy of each item (a folder may hold 100,000);
    /// the root's begin with the trees' folders.
    func children(_ id: String) throws(CoreError) -> [Listed] {
        guard let node = try node(id) else { throw .notFound }
        switch (node, route(id)) {
        case (.real(let item), _):
            guard item.isDirectory else { throw .notDirectory }
            let folders: [Listed] = item.id == core.rootID
                ? trees.filter(\.isShown).map { ($0.folderName, $0.folderID.description, nil) } : []
            return try folders + core.listEntries(item.id).map { ($0.name, $0.id, $0.kind) }
        case (_, .tree(let tree, let parsed)):
            return try tree.children(parsed, node)
        default:
            throw .notFound
        }
    }

    /// One child of a directory node.
    func child(_ parent: String, _ name: String) throws(CoreError) -> (id: String, node: Node)? {
        switch route(parent) {
        case .item:
            if parent == core.rootID, let tree = trees.first(where: { sameName(name, $0.folderName) }) {
                return try tree.node(tree.folderID).map { (tree.folderID.description, $0) }
            }
            return core.lookup(parent: parent, name: name).map { ($0.id, .real($0)) }
        case .tree(let tree, let parsed): return try tree.child(parsed, name)
        case .none: return nil
        }
    }

    /// Attributes of a node, whose id is `id`.
    func attributes(_ node: Node, of id: String) -> stat {
        if case .real(let item) = node { return attributes(item) }
        guard case .tree(let tree, _) = route(id) else { return stat() }
        return tree.attributes(node, number: inodes.number(id))
    }

    /// How to ask the remote first for the listing of the folder behind `ino` (`opening`), or before a lookup
    /// in it, when a tree keeps it from the remote (a file's past versions, Recently Deleted).
    func remoteListing(_ ino: UInt64, opening: Bool) -> RemoteAsk? {
        guard let id = inodes.id(ino), case .tree(let tree, let parsed) = route(id) else { return nil }
        return tree.remoteListing(parsed, opening: opening)
    }

    /// Attributes of a read-only virtual node, owned by `owner` (nil: the mounting user, for the nodes that
    /// stand for no item).
    func virtualAttributes(number: UInt64, mode: mode_t, size: Int64, mtime: Int64, owner: Owner? = nil) -> stat {
        var st = stat()
        st.st_ino = UInt(number)
        st.st_mode = mode
        st.st_nlink = mode & S_IFMT == S_IFDIR ? 2 : 1
        st.st_uid = (owner ?? core.config.owner).uid
        st.st_gid = (owner ?? core.config.owner).gid
        st.st_size = off_t(size)
        st.st_blksize = 4096
        st.st_mtim = timespec(tv_sec: Int(mtime / 1_000_000_000), tv_nsec: Int(mtime % 1_000_000_000))
        st.st_atim = st.st_mtim
        st.st_ctim = st.st_mtim
        return st
    }

    /// A name split before its extension (`notes.txt`: `notes`, `.txt`; a leading dot starts no extension).
    static func stemAndExtension(_ name: String) -> (Substring, Substring) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (Substring(name), "") }
        return (name[..<dot], name[dot...])
    }
}

/// A modification time as local `YYYY-MM-DD HH.MM.SS`.
func localTime(_ ns: Int64) -> String {
    var t = time_t(ns / 1_000_000_000)
    var tm = tm()
    localtime_r(&t, &tm)
    return String(format: "%04d-%02d-%02d %02d.%02d.%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec)
}
