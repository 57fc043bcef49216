// The state changes behind the door's local operations, as steps on `CoreState` (the lock held, inside one
// operation's transaction): loading the store at start, creating, deleting, renaming and exchanging items, a save
// by rename, attributes, free names and placing an item under its parent. The door (Door/Container.swift) calls
// them, each call inside one `mutate`; the pull and push sides (Sync/) use `place`, `unlink` and
// `freeName` too. They take no lock of their own: whoever calls one holds `Container.state`.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

extension CoreState {
    /// Reads the store into memory (at start, before any other thread).
    mutating func load() throws {
        // Row by row into the compact index (ItemIndex.swift), sized once: no other copy of the items is made.
        items.reserve(try store.itemCount() + 1)
        try store.load(into: &items)
        items.markLocalOnlyAbove()
        discardedConflicts = Set(try store.resolvedConflicts())
        caughtUp = try store.meta("token") != nil
        syncPaused = try store.meta(CoreState.syncPausedKey) == "1"
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
        do { try store.markResolved(ids) } catch { throw CoreError(error) }
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
                } catch { throw CoreError(error) }
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
        do { try store.writeKeptBack(only: ids) } catch { throw CoreError(error) }
    }

    /// Adds a new item to the index and the store, and wakes the pusher.
    mutating func insertNew(_ item: Item) throws(CoreError) {
        do { try store.saveChanged(item) } catch { throw CoreError(error) }
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
        do { try store.save(dir) } catch { throw CoreError(error) }
        items[id] = dir
        if remote { notice(.changed(id, content: false)) }
    }

    /// Deletes an item here: drops it at once if the remote never saw it, else keeps a tombstone to push (also
    /// when a create was sent without an answer: it may have landed).
    mutating func deleteLocally(_ item: Item) throws(CoreError) {
        let before = item
        var item = item
        do {
            if try item.remoteVersion == 0 ? !store.createWasSent(item.id) : false {
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
        } catch { throw CoreError(error) }
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
        do { return try !store.createWasSent(new.id) } catch { throw CoreError(error) }
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
        do { try store.delete(new.id) } catch { throw CoreError(error) }
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
        do throws(Errno) {
            if hadCopy { try renameFile(to, aside) }
            do throws(Errno) { try renameFile(from, to) } catch {
                if hadCopy { try? renameFile(aside, to) }
                throw error
            }
        } catch { throw CoreError(error) }
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
            do { try store.save(item) } catch { throw CoreError(error) }
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
        do { try store.saveChanged(item) } catch { throw CoreError(error) }
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
