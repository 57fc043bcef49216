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
struct TrashTree {
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
            var used: Set<String> = folder.isEmpty ? [FileSystem.trashListName] : []
            folders[folder] = list.sorted { ($0.at, $0.id) > ($1.at, $1.id) }.map { (TrashTree.name($0, &used), $0.id) }
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
    private let tree = Locked(TrashTree())
    func read<T>(_ body: (TrashTree) -> T) -> T { tree.withLock { body($0) } }
    func remember(_ deletes: [WireVersion]) { tree.withLock { $0 = TrashTree(deletes) } }
    func remove(_ id: String) { tree.withLock { $0.remove(id) } }
}

extension FileSystem {
    static func trashItemID(_ item: String) -> String { NodeID.trashItem(item).description }

    /// The folder of the trash tree a node id stands for ("" for `.trash`); nil for any other node.
    static func trashFolder(_ id: String) -> String? {
        switch NodeID(parsing: id) {
        case .trashDir: return ""
        case .trashItem(let item): return item
        default: return nil
        }
    }

    /// The entries of `.trash` or of a folder in it, as listed.
    func trashEntries(_ folder: String) -> [(name: String, id: String, kind: ItemKind?)] {
        trash.read { t in (t.folders[folder] ?? []).map { ($0.name, FileSystem.trashItemID($0.id), t.entries[$0.id]?.kind) } }
    }

    /// Asks the remote for Recently Deleted, remembers it, then runs `then` (also when the remote did not
    /// answer: what was heard last stays, and the cause is logged).
    func refreshTrash(then: @escaping @Sendable () -> Void) {
        core.recentlyDeleted { [self] result in
            switch result {
            case .success(let deletes): trash.remember(deletes)
            case .failure(let error): log.info("Recently Deleted is not listed afresh: \(error)")
            }
            then()
        }
    }

    /// Attributes of an entry of the trash tree: read-only, owned by the mounting user.
    func trashAttributes(_ v: WireVersion, number: UInt64) -> stat {
        switch v.kind {
        case .dir:
            return virtualAttributes(number: number, mode: S_IFDIR | (mode_t(v.mode) & 0o555), size: 4096, mtime: v.mtime)
        case .symlink:
            return virtualAttributes(number: number, mode: S_IFLNK | 0o777, size: Int64(v.target?.utf8.count ?? 0), mtime: v.mtime)
        default:
            return virtualAttributes(number: number, mode: S_IFREG | (mode_t(v.mode) & 0o555), size: v.size, mtime: v.mtime)
        }
    }

    /// The status of an entry: when, on which device and from where it was deleted.
    static func trashEntryAttributes(_ v: WireVersion) -> [String: String] {
        [StatusAttribute.prefix + "deletedAt": iso8601(nanoseconds: v.at),
         StatusAttribute.prefix + "deletedBy": v.device,
         StatusAttribute.prefix + "originalPath": v.path]
    }

    /// `rm` or `rmdir` of an entry of the trash tree: removes it (with what is in it) from Recently Deleted for
    /// good, on the remote, then from what is shown. A folder that still shows entries is not empty.
    func emptyTrashEntry(_ folder: String, _ name: String, directory: Bool, done: @escaping Completion<Void>) {
        guard let v = trash.read({ $0.child(folder, name) }) else {
            let error: CoreError = folder.isEmpty && name == FileSystem.trashListName ? .readOnly : .notFound
            return done(.failure(.core(error)))
        }
        if directory && v.kind != .dir { return done(.failure(.core(.notDirectory))) }
        if !directory && v.kind == .dir { return done(.failure(.core(.isDirectory))) }
        if directory && !(trash.read { $0.folders[v.id] ?? [] }).isEmpty { return done(.failure(.core(.notEmpty))) }
        core.emptyTrash([v.id]) { [self] result in
            if case .success = result { trash.remove(v.id) }
            done(result.map { _ in }.mapError { .core($0) })
        }
    }
}
