// Recently Deleted as files (docs/HISTORY.md): beside `.list`, `MOUNT/.trash/` holds every deleted file, folder
// and symbolic link of the container, from any device: at the top what was deleted where its folder still is
// (or is not in Recently Deleted), and inside a deleted folder what was deleted in it. A file reads as its
// content at its delete (fetched at the open, as a past version); `user.ubiquity.deletedAt`, `deletedBy` and
// `originalPath` say when, where and what; `rm` (or `rm -rf`) of an entry removes it from Recently Deleted
// for good, on every device.
//
// What must hold: the list comes from the remote, never asked on a FUSE worker: an opendir of `.trash`, or a
// lookup under it of a name not known yet, asks the remote off the FUSE worker and answers once it has (offline: what
// was heard last, and the cause in the log). What was heard last is kept (`TrashCache`) for the requests that
// follow. Two entries of one folder never share a name: the newest delete keeps it, older ones are named
// `stem (deleted YYYY-MM-DD HH.MM.SS).ext` (and a number when that is taken too); `.list` keeps its name.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

/// Recently Deleted as a tree of named entries.
struct TrashListing {
    /// Each entry's delete, by item id.
    private(set) var entries: [String: WireVersion] = [:]
    /// The entries of each folder, by name, newest delete first ("": `.trash` itself).
    private(set) var folders: [String: [(name: String, id: String)]] = [:]

    init(_ deletes: [WireVersion] = []) {
        for v in deletes where [.file, .dir, .symlink].contains(v.kind) { entries[v.id] = v }
        var grouped: [String: [WireVersion]] = [:]
        for v in entries.values {
            let folder = v.parent.flatMap { entries[$0]?.kind == .dir ? $0 : nil } ?? ""
            grouped[folder, default: []].append(v)
        }
        for (folder, list) in grouped {
            var used: Set<String> = folder.isEmpty ? [TrashTree.listName] : []
            folders[folder] = list.sorted { ($0.at, $0.id) > ($1.at, $1.id) }.map { (TrashListing.name($0, &used), $0.id) }
        }
    }

    private static func name(_ v: WireVersion, _ used: inout Set<String>) -> String {
        if used.insert(v.name).inserted { return v.name }
        let (stem, ext) = FileSystem.stemAndExtension(v.name)
        let base = "\(stem) (deleted \(localTime(v.at)))"
        var name = base + ext, n = 2
        while !used.insert(name).inserted { name = "\(base) \(n)\(ext)"; n += 1 }
        return name
    }

    /// The entry named `name` in `folder` ("": `.trash`).
    func child(_ folder: String, _ name: String) -> WireVersion? {
        folders[folder]?.first(where: { sameName($0.name, name) }).flatMap { entries[$0.id] }
    }

    /// Takes out an entry and everything under it (emptied).
    mutating func remove(_ id: String) {
        guard let v = entries.removeValue(forKey: id) else { return }
        for key in folders.keys { folders[key]?.removeAll { $0.id == id } }
        for (_, child) in folders.removeValue(forKey: v.id) ?? [] { remove(child) }
    }
}

/// What the remote last told of Recently Deleted.
final class TrashCache: Sendable {
    private let tree = Locked(TrashListing())
    func read<T>(_ body: (TrashListing) -> T) -> T { tree.withLock { body($0) } }
    func remember(_ deletes: [WireVersion]) { tree.withLock { $0 = TrashListing(deletes) } }
    func remove(_ id: String) { tree.withLock { $0.remove(id) } }
}

/// `.trash`: `.list` and the entries of Recently Deleted.
struct TrashTree: VirtualTree {
    let fs: FileSystem
    var core: any AdapterCore { fs.core }
    var trash: TrashCache { fs.trash }

    static let listName = ".list"

    var folderName: String { WireRules.trashFolder }
    var folderID: NodeID { .trashDir }
    /// Not in the view of a folder shared with this user: its Recently Deleted is the owner's.
    var isShown: Bool { core.config.sharedWithMe == nil }

    func owns(_ id: NodeID) -> Bool {
        switch id {
        case .trashDir, .trashList, .trashItem: return true
        default: return false
        }
    }

    func node(_ id: NodeID) -> Node? {
        switch id {
        case .trashDir: return .trashDir
        case .trashList: return .trashList
        case .trashItem(let itemID): return trash.read { $0.entries[itemID] }.map { .trashItem($0) }
        default: return nil
        }
    }

    /// The folder of the listing a node id stands for ("" for `.trash`); nil for `.list`.
    static func folder(_ id: NodeID) -> String? {
        switch id {
        case .trashDir: return ""
        case .trashItem(let item): return item
        default: return nil
        }
    }

    func children(_ id: NodeID, _ node: Node) throws(CoreError) -> [Listed] {
        switch node {
        case .trashDir: return [(TrashTree.listName, NodeID.trashList.description, nil)] + entries("")
        case .trashItem(let v) where v.kind == .dir: return entries(v.id)
        default: throw .notDirectory
        }
    }

    /// The entries of `.trash` or of a folder in it, as listed.
    private func entries(_ folder: String) -> [Listed] {
        trash.read { t in (t.folders[folder] ?? []).map { ($0.name, NodeID.trashItem($0.id).description, t.entries[$0.id]?.kind) } }
    }

    func child(_ parent: NodeID, _ name: String) -> (id: String, node: Node)? {
        guard let folder = TrashTree.folder(parent) else { return nil }
        if folder.isEmpty && name == TrashTree.listName { return (NodeID.trashList.description, .trashList) }
        return trash.read { $0.child(folder, name) }.map { (NodeID.trashItem($0.id).description, .trashItem($0)) }
    }

    /// `.trash` is listed, and any folder in it looked in, once the remote has told Recently Deleted.
    func remoteListing(_ id: NodeID, opening: Bool) -> RemoteAsk? {
        guard let folder = TrashTree.folder(id), folder.isEmpty || !opening else { return nil }
        return { [self] in refresh(then: $0) }
    }

    /// Asks the remote for Recently Deleted, remembers it, then runs `then` (also when the remote did not
    /// answer: what was heard last stays, and the cause is logged).
    private func refresh(then: @escaping @Sendable () -> Void) {
        core.recentlyDeleted { [fs] result in
            switch result {
            case .success(let deletes): fs.trash.remember(deletes)
            case .failure(let error): fs.log.info("Recently Deleted is not listed afresh: \(error)")
            }
            then()
        }
    }

    /// Attributes of an entry of the trash tree: read-only, owned by the mounting user.
    func attributes(_ node: Node, number: UInt64) -> stat {
        switch node {
        case .trashDir:
            // The mounting user's alone (Part 21): what was deleted from folders closed to others, and its
            // paths and hashes in `.list`, must not be read through it by them (a root mount has allow_other).
            return fs.virtualAttributes(number: number, mode: S_IFDIR | 0o700, size: 4096, mtime: nowNanoseconds())
        case .trashList:
            // Made at its open (a request to the remote): a stat asks nothing, and reads go on to the end.
            return fs.virtualAttributes(number: number, mode: S_IFREG | 0o400, size: 0, mtime: nowNanoseconds())
        case .trashItem(let v):
            switch v.kind {
            case .dir:
                return fs.virtualAttributes(number: number, mode: S_IFDIR | (mode_t(v.mode) & 0o555), size: 4096, mtime: v.mtime)
            case .symlink:
                return fs.virtualAttributes(number: number, mode: S_IFLNK | 0o777, size: Int64(v.target?.utf8.count ?? 0),
                                            mtime: v.mtime)
            default:
                return fs.virtualAttributes(number: number, mode: S_IFREG | (mode_t(v.mode) & 0o555), size: v.size, mtime: v.mtime)
            }
        default:
            return stat()
        }
    }

    func readlink(_ node: Node) throws(CoreError) -> String {
        guard case .trashItem(let v) = node, let target = v.target else { throw .invalidArgument("not a symbolic link") }
        return target
    }

    /// The status of an entry: when, on which device and from where it was deleted.
    func statusAttributes(_ node: Node) -> [String: String] {
        guard case .trashItem(let v) = node else { return [:] }
        return [StatusAttribute.prefix + "deletedAt": iso8601(nanoseconds: v.at),
                StatusAttribute.prefix + "deletedBy": v.device,
                StatusAttribute.prefix + "originalPath": v.path]
    }

    func open(_ id: String, _ node: Node, flags: Int32, _ caller: Caller, waiter: Waiter,
              done: @escaping Completion<Opened>) {
        switch node {
        case .trashList: openList(flags: flags, done: done)
        case .trashItem(let v) where v.kind == .file:
            fs.openPast(PastContent(sha256: v.sha256, size: v.size), id, flags: flags, caller, waiter: waiter, done: done)
        default: done(.failure(.core(.isDirectory)))
        }
    }

    /// Opens `.trash/.list`, read-only, once the remote has answered.
    private func openList(flags: Int32, done: @escaping Completion<Opened>) {
        if flags & O_ACCMODE != O_RDONLY { return done(.failure(.core(.readOnly))) }
        core.recentlyDeleted { [fs] result in
            done(Result { () throws(AdapterError) in
                try adapting { () throws(CoreError) in
                    let lines = FileSystem.jsonLines(try result.get())
                    let fd = try fs.core.makeStagingFile(prefix: "trash")
                    do throws(Errno) { try fd.writeAll(lines) } catch {
                        fd.close()
                        throw CoreError(error)
                    }
                    let file = FileSystem.OpenFile(id: NodeID.trashList.description, fd: fd, writable: false)
                    return Opened(fh: fs.addHandle(file), directIO: true)
                }
            })
        }
    }

    /// `rm` or `rmdir` of an entry of the trash tree: removes it (with what is in it) from Recently Deleted for
    /// good, on the remote, then from what is shown. A folder that still shows entries is not empty.
    func remove(in parent: NodeID, _ name: String, directory: Bool, done: @escaping Completion<Void>) {
        guard let folder = TrashTree.folder(parent) else { return done(.failure(.core(.readOnly))) }
        guard let v = trash.read({ $0.child(folder, name) }) else {
            let error: CoreError = folder.isEmpty && name == TrashTree.listName ? .readOnly : .notFound
            return done(.failure(.core(error)))
        }
        if directory && v.kind != .dir { return done(.failure(.core(.notDirectory))) }
        if !directory && v.kind == .dir { return done(.failure(.core(.isDirectory))) }
        if directory && !(trash.read { $0.folders[v.id] ?? [] }).isEmpty { return done(.failure(.core(.notEmpty))) }
        core.emptyTrash([v.id]) { [trash] result in
            if case .success = result { trash.remove(v.id) }
            done(result.map { _ in }.mapError { .core($0) })
        }
    }

    /// Out of Recently Deleted: `mv` copies an entry (EXDEV), then its `rm` removes it from there.
    func rename(_ parent: NodeID, _ name: String, to newParent: String, _ newName: String, waiter: Waiter,
                done: @escaping Completion<Void>) {
        guard let (_, node) = child(parent, name) else { return done(.failure(.core(.notFound))) }
        guard case .trashItem = node else { return done(.failure(.core(.readOnly))) }
        done(.failure(.core(.crossDevice("an entry of Recently Deleted is copied out"))))
    }

    /// `restore` and `emptyTrash` on `.trash`: the ids, one a line (`all` empties everything); `deleteData`:
    /// `data` deletes everything outside Documents/, `all` everything, as one entry of Recently Deleted.
    /// (On `.trash`, not the root: the answer waits for the kernel to take the notices of the deletes, which
    /// wait for the root's lock that a request on the root itself would hold.)
    func setxattr(_ id: NodeID, _ name: String, _ value: [UInt8], done: @escaping Completion<Void>) {
        guard case .trashDir = id, [TrashTree.restoreAttribute, TrashTree.emptyAttribute, TrashTree.deleteDataAttribute].contains(name) else {
            return done(.failure(.core(.readOnly)))
        }
        // The kernel's caches learn of the restored (deleted) items, the notices queued as they were applied,
        // before the answer: a listing right after shows them. (Not a request's thread: the remote's.)
        let answer: @Sendable (Result<Void, CoreError>) -> Void = { [notifier = fs.notifier] result in
            notifier.sync {}
            done(result.mapError { .core($0) })
        }
        let text = String(decoding: value, as: UTF8.self)
        if name == TrashTree.deleteDataAttribute {
            guard text == "data" || text == "all" else {
                return done(.failure(.core(.invalidArgument("deleteData takes data or all"))))
            }
            return core.deleteData(documents: text == "all") { answer($0.map { _ in }) }
        }
        let ids = text.split(whereSeparator: { $0 == "\n" || $0 == "," })
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !ids.isEmpty else { return done(.failure(.core(.invalidArgument("no item ids given")))) }
        if name == TrashTree.restoreAttribute {
            return core.restoreFromTrash(ids) { answer($0.map { _ in }) }
        }
        core.emptyTrash(ids == ["all"] ? nil : ids) { answer($0.map { _ in }) }
    }

    static let restoreAttribute = StatusAttribute.prefix + "restore"
    static let emptyAttribute = StatusAttribute.prefix + "emptyTrash"
    static let deleteDataAttribute = StatusAttribute.prefix + "deleteData"
}
