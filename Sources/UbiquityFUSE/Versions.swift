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
// What must hold: a virtual node is worked out afresh from the core's index at each request (`node`), never
// kept, so it cannot outlive the version it shows; an id that no longer resolves is not found. A version opens
// read-only, fetched first when its copy is not here, under the same download policy as an open (Callers.swift).
// Nothing here changes the core except `discardConflict` (rm) and `promoteConflict` (mv onto its own file only;
// elsewhere in the mount EXDEV, so that mv copies).
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

extension FileSystem {
    static let versionsName = WireRules.versionsFolder

    static func versionsDirID(_ item: String) -> String { NodeID.versionsDir(item: item).description }
    static func versionID(_ item: String, _ conflict: String) -> String {
        NodeID.version(item: item, conflict: conflict).description
    }

    /// The node behind an id, if it (still) exists.
    func node(_ id: String) -> Node? {
        switch NodeID(parsing: id) {
        case .kvDir, .kvKey, .kvChanges:
            // (A key-value store that cannot be read was logged; where the caller can be told, it is: kvChild.)
            return try? kvNode(id) ?? nil
        case .trashDir: return .trashDir
        case .trashList: return .trashList
        case .trashItem(let itemID): return trash.read { $0.entries[itemID] }.map { .trashItem($0) }
        case .announced: return nil
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
        case .item(let itemID):
            // A file deleted while open is still there for its descriptors (fstat, fchmod, ftruncate).
            return (core.item(itemID) ?? core.unlinkedItem(itemID)).map { .real($0) }
        }
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

    /// The children of a directory node, by name, with the kind of each real item (nil: ask `node`). A real
    /// folder's entries come in one read of the core, without a copy of each item (a folder may hold 100,000).
    func children(_ id: String) throws(CoreError) -> [(name: String, id: String, kind: ItemKind?)] {
        guard let node = node(id) else { throw .notFound }
        switch node {
        case .real(let item):
            guard item.isDirectory else { throw .notDirectory }
            var list: [(name: String, id: String, kind: ItemKind?)] = try core.listEntries(item.id).map { ($0.name, $0.id, $0.kind) }
            if item.id == core.rootID {
                list.insert((FileSystem.versionsName, FileSystem.versionsDirID(item.id), nil), at: 0)
                if kv != nil { list.insert((FileSystem.kvName, FileSystem.kvDirID, nil), at: 1) }
                list.insert((FileSystem.trashName, FileSystem.trashDirID, nil), at: kv != nil ? 2 : 1)
            }
            return list
        case .versionsDir(let item):
            if !item.isDirectory {
                return versionNames(item).map { ($0.name, FileSystem.versionID(item.id, $0.conflict.id), nil) }
                    + pastVersions(item).map { ($0.name, FileSystem.pastVersionID(item.id, $0.version.version), nil) }
            }
            let wanted = leadsToConflicts()
            return try core.list(item.id).filter { wanted.contains($0.id) }.map { ($0.name, FileSystem.versionsDirID($0.id), nil) }
        case .kvDir(let typed):
            return try kvChildren(typed: typed).map { ($0.name, $0.id, nil) }
        case .trashDir:
            return [(FileSystem.trashListName, FileSystem.trashListID, nil)] + trashEntries("")
        case .trashItem(let v):
            guard v.kind == .dir else { throw .notDirectory }
            return trashEntries(v.id)
        case .version, .pastVersion, .kvKey, .kvChanges, .trashList:
            throw .notDirectory
        }
    }

    /// One child of a directory node.
    func child(_ parent: String, _ name: String) throws(CoreError) -> (id: String, node: Node)? {
        if let found = try kvChild(parent, name) { return found }
        if isKVID(parent) { return nil }
        if let found = trashChild(parent, name) { return found }
        if parent == core.rootID && sameName(name, FileSystem.versionsName) {
            return node(FileSystem.versionsDirID(parent)).map { (FileSystem.versionsDirID(parent), $0) }
        }
        guard case .versionsDir(let mirrored) = NodeID(parsing: parent) else {
            return core.lookup(parent: parent, name: name).map { ($0.id, .real($0)) }
        }
        // Under a folder's mirror, every item of the folder has its mirror, listed or not.
        if let folder = core.item(mirrored), folder.isDirectory {
            guard let item = core.lookup(parent: folder.id, name: name) else { return nil }
            return node(FileSystem.versionsDirID(item.id)).map { (FileSystem.versionsDirID(item.id), $0) }
        }
        guard let match = try children(parent).first(where: { sameName($0.name, name) }), let n = node(match.id) else {
            return nil
        }
        return (match.id, n)
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

    /// A name split before its extension (`notes.txt`: `notes`, `.txt`; a leading dot starts no extension).
    static func stemAndExtension(_ name: String) -> (Substring, Substring) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (Substring(name), "") }
        return (name[..<dot], name[dot...])
    }

    /// Attributes of a node, whose id is `id`.
    func attributes(_ node: Node, of id: String) -> stat {
        let number = inodes.number(id)
        switch node {
        case .real(let item):
            return attributes(item)
        case .versionsDir(let item):
            return virtualAttributes(number: number, mode: S_IFDIR | FileSystem.versionsDirMode(item), size: 4096,
                                     mtime: item.mtime, owner: core.config.owner(of: item))
        case .version(let item, let c):
            // Versions are not the container's own files: no blocks, so `du` of the mount leaves them out.
            return virtualAttributes(number: number, mode: S_IFREG | (mode_t(item.mode) & 0o555), size: c.size, mtime: c.mtime,
                                     owner: core.config.owner(of: item))
        case .pastVersion(let item, let v):
            return virtualAttributes(number: number, mode: S_IFREG | (mode_t(item.mode) & 0o555), size: v.size, mtime: v.mtime,
                                     owner: core.config.owner(of: item))
        case .kvDir(let typed):
            var st = virtualAttributes(number: number, mode: S_IFDIR | 0o755, size: 4096, mtime: nowNanoseconds())
            if !typed { st.st_nlink = 3 } // and .json's `..`
            return st
        case .kvKey(let key, let typed):
            // (A value that cannot be read shows as empty: the read of it then fails with EIO.)
            return virtualAttributes(number: number, mode: S_IFREG | 0o644, size: Int64(((try? kvBytes(key, typed: typed)) ?? []).count),
                                     mtime: nowNanoseconds())
        case .kvChanges:
            return virtualAttributes(number: number, mode: S_IFREG | 0o444, size: Int64(kvChangeBytes().count),
                                     mtime: nowNanoseconds())
        case .trashDir:
            // The mounting user's alone (Part 21): what was deleted from folders closed to others, and its
            // paths and hashes in `.list`, must not be read through it by them (a root mount has allow_other).
            return virtualAttributes(number: number, mode: S_IFDIR | 0o700, size: 4096, mtime: nowNanoseconds())
        case .trashItem(let v):
            return trashAttributes(v, number: number)
        case .trashList:
            // Made at its open (a request to the remote): a stat asks nothing, and reads go on to the end.
            return virtualAttributes(number: number, mode: S_IFREG | 0o400, size: 0, mtime: nowNanoseconds())
        }
    }

    /// The mode of the folder under .versions that stands for `item`: no more open than the item itself. A
    /// folder's own bits without write; a conflicted file's read bits, each with the search bit beside it.
    static func versionsDirMode(_ item: Item) -> mode_t {
        let mode = mode_t(item.mode)
        if item.isDirectory { return mode & 0o555 }
        return (mode & 0o444) | ((mode & 0o444) >> 2)
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

    // MARK: operations on versions

    /// Opens a version read-only, fetching its content first if needed.
    func openVersion(_ item: Item, _ c: WireConflict, flags: Int32, _ caller: Caller, waiter: Waiter,
                     done: @escaping Completion<Opened>) {
        if flags & O_ACCMODE != O_RDONLY { return done(.failure(.core(.readOnly))) }
        let finish: @Sendable () -> Void = { [self] in
            done(Result { () throws(AdapterError) in
                let fd = try adapting { () throws(CoreError) in try core.openConflictVersion(item: item.id, conflict: c.id) }
                let fh = addHandle(OpenFile(id: FileSystem.versionID(item.id, c.id), fd: fd, writable: false))
                return Opened(fh: fh, keepCache: true)
            })
        }
        if core.hasLocalConflict(item.id, c.id) { return finish() }
        if !downloadPolicy.mayDownload(caller.pid) { return done(.failure(.core(.wouldBlock))) }
        waitFor(waiter, start: { done in core.fetchConflict(item.id, c.id, done: done) },
                failed: { done(.failure($0)) }, then: finish)
    }

    /// `rm` of a version: discard it everywhere.
    func unlinkVersion(_ parent: String, _ name: String) throws(CoreError) {
        guard let (_, node) = try child(parent, name) else { throw .notFound }
        guard case .version(let item, let c) = node else { throw .readOnly }
        try core.discardConflict(item.id, c.id)
    }

    /// `mv` of a version onto its file's live path: make it current (fetching it first when it is not here).
    /// Elsewhere in the mount: EXDEV, so that `mv` copies it instead (and then discards it).
    func renameVersion(_ parent: String, _ name: String, _ newParent: String, _ newName: String, waiter: Waiter,
                       done: @escaping Completion<Void>) {
        do throws(CoreError) {
            guard let (_, node) = try child(parent, name) else { throw CoreError.notFound }
            if case .pastVersion(let item, let v) = node {
                return renamePastVersion(item, v, newParent, newName, waiter: waiter, done: done)
            }
            // Out of Recently Deleted: `mv` copies it, then its `rm` removes it from there.
            if case .trashItem = node { throw CoreError.crossDevice("an entry of Recently Deleted is copied out") }
            guard case .version(let item, let c) = node else { throw CoreError.readOnly }
            guard newParent == item.parent, sameName(newName, item.name) else {
                throw CoreError.crossDevice("a version moves in place only onto its own file")
            }
            do throws(CoreError) {
                try core.promoteConflict(item.id, c.id)
                done(.success(()))
            } catch .wouldBlock {
                waitFor(waiter, start: { done in core.fetchConflict(item.id, c.id, done: done) },
                        failed: { done(.failure($0)) }) { [self] in
                    done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try core.promoteConflict(item.id, c.id) } })
                }
            }
        } catch {
            done(.failure(.core(error)))
        }
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
