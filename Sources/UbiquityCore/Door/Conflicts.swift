// Conflict versions of files: the contents that lost a concurrent change, kept on the remote until a person
// resolves them. Here: listing them, their local copies, and the three ways to resolve (discard one, make one
// current, keep the current content and discard all).
//
// What must hold: a resolution changes the item and records the resolved version (`rememberResolved`) in one
// operation, as a local change (`saveLocalChange`, so it is pushed) and only on a live item that lists that
// version. A promote refuses a file open for writing, needs the version's copy local, bumps the content
// generation (an upload in flight then leaves the item dirty) and renames the copy over the content last,
// inside the operation, so a failed rename rolls the change back. Copies of versions no longer listed are
// removed only after the commit (`pruneConflictFiles`, through `onCommit`).
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

extension Container {
    /// Live files that have unresolved conflict versions.
    public func conflictedItems() -> [Item] {
        read { s in s.items.values(with: .extras).filter { !$0.deleted && !$0.conflicts.isEmpty } }
    }

    /// True if the conflict version's content is stored here.
    public func hasLocalConflict(_ id: String, _ conflict: String) -> Bool {
        FileManager.default.fileExists(atPath: paths.conflict(id, conflict))
    }

    /// Fetches a conflict version's content, calling `done` once it is local or failed.
    public func fetchConflict(_ id: String, _ conflict: String,
                              done: @escaping @Sendable (Result<Void, CoreError>) -> Void) {
        downloads.wait(for: id + "." + conflict, done: done)
    }

    /// Drops the local copy of a conflict version (it stays on the remote).
    public func evictConflict(_ id: String, _ conflict: String) {
        paths.evictConflict(id, conflict)
    }

    /// Discards one conflict version, here and, once pushed, on every device.
    public func discardConflict(_ id: String, _ conflict: String) throws(CoreError) {
        try refuseChangeInAShare()
        try mutate(room: .evictions) { (s: inout CoreState) throws(CoreError) in
            guard var item = s.items[id], !item.deleted else { throw .notFound }
            guard item.conflicts.contains(where: { $0.id == conflict }) else { throw .notFound }
            item.conflicts.removeAll { $0.id == conflict }
            item.metaDirty = true
            try s.rememberResolved([conflict])
            try s.saveLocalChange(item)
        }
        evictConflict(id, conflict)
    }

    /// Makes a conflict version the file's current content: a local edit that replaces the content, and the
    /// version is resolved. Needs the version's content local (`.wouldBlock` otherwise: fetch it first).
    public func promoteConflict(_ id: String, _ conflict: String) throws(CoreError) {
        try refuseChangeInAShare()
        guard let c = item(id)?.conflicts.first(where: { $0.id == conflict }) else { throw .notFound }
        try replaceContent(id, from: paths.conflict(id, conflict), size: c.size) { (s, item) throws(CoreError) in
            guard item.conflicts.contains(where: { $0.id == conflict }) else { throw .notFound }
            item.conflicts.removeAll { $0.id == conflict }
            try s.rememberResolved([conflict])
        }
    }

    /// Makes the file at `source` (of `size` bytes) the item's current content: a local edit that replaces
    /// the content, with `also` changing the item in the same operation. `.wouldBlock` when `source` is not here.
    func replaceContent(_ id: String, from source: String, size: Int64,
                        also: (inout CoreState, inout Item) throws(CoreError) -> Void = { _, _ in }) throws(CoreError) {
        try mutate { (s: inout CoreState) throws(CoreError) in
            guard var item = s.items[id], !item.deleted else { throw .notFound }
            guard item.kind == .file else { throw .isDirectory }
            if (s.handles[id]?.writers ?? 0) > 0 { throw .busy("\(item.name) is open for writing") }
            guard FileManager.default.fileExists(atPath: source) else { throw .wouldBlock }
            try also(&s, &item)
            item.hasLocal = true
            item.dirty = true
            item.localSHA = nil
            item.size = size
            let now = self.now()
            item.mtime = now
            item.ctime = now
            item.metaDirty = true
            s.contentGeneration[id, default: 0] += 1
            try s.saveLocalChange(item)
            // Last: a failed rename rolls the change back.
            do throws(Errno) { try renameFile(source, paths.content(id)) } catch { throw CoreError(error) }
            s.recountContent(id)
            s.notice(.changed(id, content: true))
        }
        // Durable after the lock, as a download's install (see Container.installDownload).
        syncContentDirectory()
    }
}

extension CoreState {
    /// Drops from a remote state the conflict versions this device resolved (a version can come back when an edit
    /// elsewhere revives a file this device resolved and then deleted); true when the resolution must be pushed
    /// again.
    func keepResolutions(_ item: inout Item) -> Bool {
        let kept = item.conflicts.filter { !discardedConflicts.contains($0.id) }
        guard kept.count != item.conflicts.count else { return false }
        item.conflicts = kept
        item.metaDirty = true
        return true
    }

    /// Removes local copies of conflict versions that are no longer listed, once the change is committed.
    mutating func pruneConflictFiles(_ id: String, old: [WireConflict], new: [WireConflict]) {
        let kept = Set(new.map(\.id))
        let gone = old.filter { !kept.contains($0.id) }.map(\.id)
        if gone.isEmpty { return }
        onCommit { s in for c in gone { s.evictConflict(id, c) } }
    }

    func evictConflict(_ id: String, _ conflict: String) { paths.evictConflict(id, conflict) }
}

extension StorePaths {
    /// Drops the local copy of a conflict version and any partial download of it.
    func evictConflict(_ id: String, _ conflict: String) {
        removeLeftover(self.conflict(id, conflict))
        removeStaleStaging(id + "." + conflict)
    }
}

extension WireConflict {
    /// True when both name the same write (content, size, time and device), whatever their ids: two devices
    /// that lost the same race keep the same content as a version each.
    public func isSameWrite(as other: WireConflict) -> Bool {
        sha256 == other.sha256 && size == other.size && mtime == other.mtime && device == other.device
    }
}
