// Local-only items (Apple's `.nosync` rule and `isExcludedFromSync`): a fifo or socket, a name ending in
// `.nosync`, an item the user excluded, and everything below such a folder live on this device only
// (`Item.isLocalOnly`). So does the desktop's trash folder in the root (`WireRules.isDesktopTrashName`, made or
// renamed there), so what a file manager moves to the Trash leaves the remote, into Recently Deleted on every
// device. An item that becomes local-only after it was uploaded leaves the remote (its delete
// is pushed; other devices see it deleted) and keeps its local copy, complete and never evicted; one that
// becomes ubiquitous again is pushed as new, written over its old tombstone when it has one.
//
// What must hold: a change of whether an item is local-only is saved for it and everything below it in one
// operation, folders first when they come back and last when they leave (the remote takes what is in a folder
// only once the folder is there, and deletes only empty folders). An item becomes local-only only with the
// newest content of every file it takes along: else the flag is refused (`.busy`, their downloads started
// after the lock) and a move too (`.crossDevice`). The root and Documents never become local-only; a remote
// item that would be local-only here is kept out (`isKeptOut`); eviction refuses local-only files.
import Foundation
import UbiquityBase

extension CoreState {
    /// True when the folder `id` is local-only (so is everything below it).
    func isLocalOnlyFolder(_ id: String?) -> Bool {
        id.flatMap { items[$0] }?.isLocalOnly ?? false
    }

    /// The files at and below `item` whose newest content is not here (a local-only item's local copy is its
    /// only one).
    func filesNotCurrent(at item: Item) -> [String] {
        if item.hasContent { return item.isCurrent ? [] : [item.id] }
        guard item.isDirectory else { return [] }
        return (children[item.id] ?? [:]).values.flatMap { child in
            items[child].map { $0.isLocalOnly ? [] : filesNotCurrent(at: $0) } ?? []
        }
    }

    /// Saves `item`, changed here from `before` (its flag, name or place), and when that changed whether it is
    /// local-only, brings everything below it along.
    mutating func saveLocalOnlyChange(_ item: Item, was before: Item) throws(CoreError) {
        var item = item
        item.localOnlyAbove = isLocalOnlyFolder(item.parent)
        guard item.isLocalOnly != before.isLocalOnly else { return try saveLocalChange(item) }
        var order: [Item] = []
        try collectLocalOnlyChange(item, into: &order)
        // The remote takes what is in a folder only once the folder is there, and deletes only empty folders.
        if item.isLocalOnly { order.reverse() }
        do {
            for changed in order { try store.saveChanged(changed) }
        } catch { throw CoreError(error) }
        for changed in order { items[changed.id] = changed }
        if item.isLocalOnly { log.info("\(item.name) is local-only now: it leaves the remote") }
        wakePusher()
    }

    /// Appends `item`, in its new state, and every item below it whose state changes with it, parents first.
    private mutating func collectLocalOnlyChange(_ item: Item, into order: inout [Item]) throws(CoreError) {
        var item = item
        if !item.isLocalOnly { try becomeUbiquitous(&item) }
        order.append(item)
        for childID in (children[item.id] ?? [:]).values {
            guard var child = items[childID] else { continue }
            let was = child.isLocalOnly
            child.localOnlyAbove = item.isLocalOnly
            // Local-only by itself (a nested .nosync folder, a fifo): it and what is below it stay as they are.
            if child.isLocalOnly == was { items[childID] = child; continue }
            try collectLocalOnlyChange(child, into: &order)
        }
    }

    /// Makes a local-only item ubiquitous again: all of it goes up, over its old tombstone when the remote
    /// deleted it, on top of the version it had when an edit elsewhere kept it there (a conflict then), and a
    /// copy the remote has not deleted yet is simply updated.
    func becomeUbiquitous(_ item: inout Item) throws(CoreError) {
        if item.remoteVersion == 0 {
            do { item.remoteVersion = try store.leftRemoteBase(item.id) ?? 0 } catch { throw CoreError(error) }
            if item.hasContent {
                item.dirty = true
                item.localSHA = nil
            }
        }
        item.metaDirty = true
    }

    /// A file leaving the desktop's trash folder (`.Trash-UID/files/NAME`) other than by the desktop (a restore
    /// elsewhere) leaves its record there too (`.Trash-UID/info/NAME.trashinfo`, the freedesktop.org trash
    /// specification's), or the desktop's Trash would list a file that is not in it.
    mutating func forgetDesktopTrashRecord(of item: Item) throws {
        guard let filesID = item.parent, let files = items[filesID], files.name == "files",
              let trashID = files.parent, let trash = items[trashID], trash.parent == rootID,
              WireRules.isDesktopTrashName(trash.name), let infoID = children[trashID]?["info"],
              let recordID = children[infoID]?[item.name + ".trashinfo"], let record = items[recordID],
              record.kind == .file, record.isLocalOnly else { return }
        try removeHere(record)
    }

    /// True when a remote item must not be taken here: it would be local-only here (inside a folder that is
    /// local-only here, or named `.nosync` or as the root's desktop trash). It stays on the remote, unseen on
    /// this device.
    func isKeptOut(_ w: WireItem) -> Bool {
        WireRules.staysOnOneDevice(w.name, parent: w.parent) || isLocalOnlyFolder(w.parent)
    }
}

extension CoreState {
    /// A move that would make files whose newest content is not here local-only is refused (`.crossDevice`):
    /// mv then copies them, which downloads them, rather than keep a copy that is not here.
    func checkLocalOnlyMove(_ item: Item, to parent: String, name: String) throws(CoreError) {
        var moved = item
        moved.parent = parent
        moved.name = name
        moved.localOnlyAbove = isLocalOnlyFolder(parent)
        guard moved.isLocalOnly && !item.isLocalOnly else { return }
        let missing = filesNotCurrent(at: item).count
        if missing > 0 { throw .crossDevice("\(missing) file(s) to keep on this device only are not downloaded") }
    }
}

extension Container {
    /// Sets or clears the user's excluded flag (`isExcludedFromSync`) of a file or folder. Making an item
    /// local-only needs the newest content of every file it takes along here: while some is not, their
    /// downloads start and the change is refused (`.busy`), as an eviction refuses what it cannot let go.
    public func setExcludedFromSync(_ id: String, _ on: Bool) throws(CoreError) {
        var missing: [String] = []
        try mutate { (s: inout CoreState) throws(CoreError) in
            guard var item = s.items[id], !item.deleted else { throw .notFound }
            if id == rootID || id == WireRules.documentsID {
                throw .invalidArgument("the container's own folders cannot be local-only")
            }
            guard item.excluded != on else { return }
            let before = item
            item.excluded = on
            if !before.isLocalOnly && item.isLocalOnly {
                missing = s.filesNotCurrent(at: item)
                if !missing.isEmpty { return }
            }
            item.ctime = now()
            try s.saveLocalOnlyChange(item, was: before)
        }
        guard !missing.isEmpty else { return }
        for file in missing { downloads.start(file) }
        throw .busy("\(missing.count) file(s) to keep on this device only are not downloaded yet; "
            + "they are downloading: try again when they are")
    }
}
