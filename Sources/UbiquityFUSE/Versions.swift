// The hidden versions directory: `MOUNT/.versions/<path of a file>/` holds one read-only file per unresolved
// conflict version of that file, named `stem (device, YYYY-MM-DD HH.MM.SS).ext`, and its past versions
// (PastVersions.swift). Every live item has its folder there, but listings show only those that lead to
// conflict versions, so `ls` and `find` of .versions ask the remote nothing. Its nodes are virtual (not
// in the store, never uploaded), with ids that cannot clash with item ids (NodeID.swift): the mirror of a
// directory (or of a conflicted file) under .versions, and one conflict version.
// Virtual entries are never cached by the kernel (timeouts 0), so they follow resolutions at once. A version
// has its file's owner and mode without write and setuid bits; a folder under .versions its item's owner and
// no more than its item's read and search bits, so .versions shows nobody what the live tree hides.
// Writes under .versions fail with EROFS, except `rm` of a version (discard it) and `mv` of a version onto
// its file's live path (make it current).
//
// What must hold: a node is worked out afresh from the core's index at each request (`node`), never kept, so
// it cannot outlive the version it shows; an id that no longer resolves is not found. A version opens
// read-only, fetched first when its copy is not here, under the same download policy as an open (Callers.swift).
// Nothing here changes the core except `discardConflict` (rm) and `promoteConflict` (mv onto its own file only;
// elsewhere in the mount EXDEV, so that mv copies).
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

/// `.versions`: the mirror of every live item, a conflicted file's versions, and a file's past versions.
struct VersionsTree: VirtualTree {
    let fs: FileSystem
    var core: any AdapterCore { fs.core }

    var folderName: String { WireRules.versionsFolder }
    var folderID: NodeID { .versionsDir(item: core.rootID) }

    func owns(_ id: NodeID) -> Bool {
        switch id {
        case .versionsDir, .version, .pastVersion: return true
        default: return false
        }
    }

    func node(_ id: NodeID) -> Node? {
        switch id {
        case .versionsDir(let itemID):
            // Every live item has its mirror (a file's holds its past versions); listings show only those that
            // lead to conflicts.
            guard let item = core.item(itemID), !item.deleted else { return nil }
            return .versionsDir(of: item)
        case .pastVersion(let itemID, let version):
            guard let item = core.item(itemID), !item.deleted,
                  let v = pastVersions(item).first(where: { $0.version.version == version }) else { return nil }
            return .pastVersion(of: item, v.version)
        case .version(let itemID, let conflict):
            guard let item = core.item(itemID), let c = item.conflicts.first(where: { $0.id == conflict }) else {
                return nil
            }
            return .version(of: item, conflict: c)
        default:
            return nil
        }
    }

    func children(_ id: NodeID, _ node: Node) throws(CoreError) -> [Listed] {
        guard case .versionsDir(let item) = node else { throw .notDirectory }
        if !item.isDirectory {
            return versionNames(item).map { ($0.name, NodeID.version(item: item.id, conflict: $0.conflict.id).description, nil) }
                + pastVersions(item).map { ($0.name, NodeID.pastVersion(item: item.id, version: $0.version.version).description, nil) }
        }
        let wanted = leadsToConflicts()
        return try core.list(item.id).filter { wanted.contains($0.id) }
            .map { ($0.name, NodeID.versionsDir(item: $0.id).description, nil) }
    }

    func child(_ parent: NodeID, _ name: String) throws(CoreError) -> (id: String, node: Node)? {
        guard case .versionsDir(let mirrored) = parent else { return nil }
        // Under a folder's mirror, every item of the folder has its mirror, listed or not.
        if let folder = core.item(mirrored), folder.isDirectory {
            guard let item = core.lookup(parent: folder.id, name: name) else { return nil }
            let id = NodeID.versionsDir(item: item.id)
            return node(id).map { (id.description, $0) }
        }
        guard let parentNode = node(parent),
              let match = try children(parent, parentNode).first(where: { sameName($0.name, name) }),
              let found = node(NodeID(parsing: match.id)) else {
            return nil
        }
        return (match.id, found)
    }

    func attributes(_ node: Node, number: UInt64) -> stat {
        switch node {
        case .versionsDir(let item):
            return fs.virtualAttributes(number: number, mode: S_IFDIR | VersionsTree.folderMode(item), size: 4096,
                                        mtime: item.mtime, owner: core.config.owner(of: item))
        case .version(let item, let c):
            // Versions are not the container's own files: no blocks, so `du` of the mount leaves them out.
            return fs.virtualAttributes(number: number, mode: S_IFREG | (mode_t(item.mode) & 0o555), size: c.size,
                                        mtime: c.mtime, owner: core.config.owner(of: item))
        case .pastVersion(let item, let v):
            return fs.virtualAttributes(number: number, mode: S_IFREG | (mode_t(item.mode) & 0o555), size: v.size,
                                        mtime: v.mtime, owner: core.config.owner(of: item))
        default:
            return stat()
        }
    }

    /// The mode of the folder under .versions that stands for `item`: no more open than the item itself. A
    /// folder's own bits without write; a conflicted file's read bits, each with the search bit beside it.
    static func folderMode(_ item: Item) -> mode_t {
        let mode = mode_t(item.mode)
        if item.isDirectory { return mode & 0o555 }
        return (mode & 0o444) | ((mode & 0o444) >> 2)
    }

    /// Ids of every conflicted file and every directory above one.
    func leadsToConflicts() -> Set<String> {
        var ids = Set<String>()
        for item in core.conflictedItems() {
            var cur: Item? = item
            while let c = cur, ids.insert(c.id).inserted, let p = c.parent { cur = core.item(p) }
        }
        return ids
    }

    /// The names of a file's conflict versions, oldest first, made unique.
    func versionNames(_ item: Item) -> [(name: String, conflict: WireConflict)] {
        let (stem, ext) = FileSystem.stemAndExtension(item.name)
        var used = Set<String>()
        return item.conflicts.sorted { ($0.mtime, $0.device, $0.id) < ($1.mtime, $1.device, $1.id) }.map { c in
            let base = "\(stem) (\(c.device.replacingOccurrences(of: "/", with: "-")), \(localTime(c.mtime)))"
            var name = base + ext, n = 2
            while !used.insert(name).inserted { name = "\(base) \(n)\(ext)"; n += 1 }
            return (name, c)
        }
    }

    // MARK: operations on versions

    func open(_ id: String, _ node: Node, flags: Int32, _ caller: Caller, waiter: Waiter,
              done: @escaping Completion<Opened>) {
        switch node {
        case .version(let item, let c): openVersion(item, c, flags: flags, caller, waiter: waiter, done: done)
        case .pastVersion(_, let v):
            fs.openPast(PastContent(sha256: v.sha256, size: v.size), id, flags: flags, caller, waiter: waiter, done: done)
        default: done(.failure(.core(.isDirectory)))
        }
    }

    /// Opens a version read-only, fetching its content first if needed.
    private func openVersion(_ item: Item, _ c: WireConflict, flags: Int32, _ caller: Caller, waiter: Waiter,
                             done: @escaping Completion<Opened>) {
        if flags & O_ACCMODE != O_RDONLY { return done(.failure(.core(.readOnly))) }
        let finish: @Sendable () -> Void = { [fs] in
            done(Result { () throws(AdapterError) in
                let fd = try adapting { () throws(CoreError) in try fs.core.openConflictVersion(item: item.id, conflict: c.id) }
                let id = NodeID.version(item: item.id, conflict: c.id).description
                return Opened(fh: fs.addHandle(FileSystem.OpenFile(id: id, fd: fd, writable: false)), keepCache: true)
            })
        }
        if core.hasLocalConflict(item.id, c.id) { return finish() }
        if !fs.downloadPolicy.mayDownload(caller.pid) { return done(.failure(.core(.wouldBlock))) }
        fs.waitFor(waiter, start: { done in core.fetchConflict(item.id, c.id, done: done) },
                   failed: { done(.failure($0)) }, then: finish)
    }

    /// `rm` of a version: discard it everywhere.
    func remove(in parent: NodeID, _ name: String, directory: Bool, done: @escaping Completion<Void>) {
        done(Result { () throws(AdapterError) in
            try adapting { () throws(CoreError) in
                if directory { throw .readOnly }
                guard let (_, node) = try child(parent, name) else { throw .notFound }
                guard case .version(let item, let c) = node else { throw .readOnly }
                try core.discardConflict(item.id, c.id)
            }
        })
    }

    /// `mv` of a version onto its file's live path: make it current (fetching it first when it is not here).
    /// Elsewhere in the mount: EXDEV, so that `mv` copies it instead (and then discards it).
    func rename(_ parent: NodeID, _ name: String, to newParent: String, _ newName: String, waiter: Waiter,
                done: @escaping Completion<Void>) {
        do throws(CoreError) {
            guard let (_, node) = try child(parent, name) else { throw CoreError.notFound }
            if case .pastVersion(let item, let v) = node {
                return renamePastVersion(item, v, newParent, newName, waiter: waiter, done: done)
            }
            guard case .version(let item, let c) = node else { throw CoreError.readOnly }
            guard newParent == item.parent, sameName(newName, item.name) else {
                throw CoreError.crossDevice("a version moves in place only onto its own file")
            }
            do throws(CoreError) {
                try core.promoteConflict(item.id, c.id)
                done(.success(()))
            } catch .wouldBlock {
                fs.waitFor(waiter, start: { done in core.fetchConflict(item.id, c.id, done: done) },
                           failed: { done(.failure($0)) }) { [core] in
                    done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try core.promoteConflict(item.id, c.id) } })
                }
            }
        } catch {
            done(.failure(.core(error)))
        }
    }

    /// The status a version file shows: whether its content is stored here.
    func statusAttributes(_ node: Node) -> [String: String] {
        guard case .version(let item, let c) = node else { return [:] }
        let local = core.hasLocalConflict(item.id, c.id)
        return [StatusAttribute.isUbiquitous.fullName: "1",
                StatusAttribute.downloadingStatus.fullName: local ? "current" : "notDownloaded"]
    }

    /// Evict and download work on version files; everything else under .versions is read-only.
    func setxattr(_ id: NodeID, _ name: String, _ value: [UInt8], done: @escaping Completion<Void>) {
        guard case .version(let item, let c)? = node(id) else { return done(.failure(.core(.readOnly))) }
        switch name {
        case StatusAttribute.prefix + ActionAttribute.evict.rawValue:
            core.evictConflict(item.id, c.id)
        case StatusAttribute.prefix + ActionAttribute.download.rawValue:
            core.fetchConflict(item.id, c.id) { _ in }
        default:
            return done(.failure(.core(.readOnly)))
        }
        done(.success(()))
    }
}
