// The pull side's steps on the container's state: applying a page of the remote's change feed (SyncLoops.swift's
// pull loop) and the remote changes refused for now, each method one whole locked step.
//
// What must hold here: the methods of `Container` take the container lock themselves and hold it across no
// network call; those of `CoreState` run inside one operation. A remote state is applied against the item as it
// is now (`applyRemoteItem`), which is also how the pusher takes a remote state it fetched.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the container's lock (after a content gate,
// before the leaves).
import Foundation
import UbiquityBase

private let pullLog = Logger("sync")

/// The pull loop's steps on the container's state (`Container.pullSide`).
struct PullSide: SyncSide {
    unowned let container: Container
}

extension Container {
    /// The pull side's steps on this container's state.
    var pullSide: PullSide { PullSide(container: self) }
}

// MARK: the puller

extension PullSide {
    /// The feed position last applied.
    var feedToken: String? { get throws { try read { s in try s.store.meta("token") } } }

    /// Applies remote items and the feed position they bring (nil: items fetched one by one) in steps: each
    /// step is one store transaction of up to `mostItemsPerStep` items, and the position is recorded with the
    /// last. A step ends early once another thread waits for the container's lock (a request of the mount) and
    /// it has held the lock `stepNanoseconds`: a request waits a few milliseconds at most behind a burst from
    /// elsewhere (Part 19), and a pull nobody waits for commits no more often than before. Applying a page in
    /// steps is safe: the feed is in version order, so what is applied before a crash or a failure is a shorter
    /// page, and an item applied twice is skipped the second time (its version is not newer). Pinned files whose
    /// content changed start downloading after each step. On a full store disk the rest waits (the caller tries
    /// again later) and leaves the store's reserve alone: the evictor needs it to make room, and the pusher to
    /// record the uploads that let it.
    func applyRemote(_ items: [WireItem], token: String?) throws {
        let newest = items.map(\.version).max()
        var start = items.startIndex
        repeat {
            let end = min(start + PullSide.mostItemsPerStep, items.endIndex)
            let last = end == items.endIndex
            start += try applyRemoteStep(items[start..<end], token: last ? token : nil, newest: last ? newest : nil)
            if start < end { container.giveWay() }
        } while start < items.endIndex
    }

    /// The most items applied in one hold of the container's lock (a page of the feed holds up to 1,000).
    static let mostItemsPerStep = 1_000
    /// How long a step holds the lock at least before it lets a waiting request in (each step costs a commit).
    static let stepNanoseconds: Int64 = 2_000_000

    /// Applies `items` in order, until another thread waits for the lock once the step has held it
    /// `stepNanoseconds` (at least one item); once all are applied, the feed position `token` (given with the
    /// last step of a page). Answers how many it applied.
    private func applyRemoteStep(_ items: ArraySlice<WireItem>, token: String?, newest: Int64?) throws -> Int {
        do {
            return try mutateThrowing(room: .withReserveInPlace) { s in
                var applied = 0
                let start = monotonicNanoseconds()
                for w in items {
                    try s.applyRemoteItem(w)
                    applied += 1
                    if applied < items.count && container.othersWaiting
                        && monotonicNanoseconds() - start >= PullSide.stepNanoseconds { return applied }
                }
                if let token { try s.store.setMeta("token", token) }
                if token != nil, let newest {
                    s.settledDeletes = s.settledDeletes.filter { $0.value > newest }
                }
                s.storeFullSince = nil
                return applied
            }
        } catch {
            if isStoreDiskFull(error) {
                update { s in if s.storeFullSince == nil { s.storeFullSince = s.now() } }
                container.evictor.wake()
            }
            throw error
        }
    }

    /// The feed has nothing newer than what was applied.
    func markCaughtUp() { mutate { (s: inout CoreState) in s.caughtUp = true } }

    /// Takes the ids of the remote changes the puller refused (see SyncLoops.refetchRefused).
    func takeRefused() throws -> [String] { try mutateThrowing { s in try s.store.takeRefused() } }

    /// Marks again refused changes that could not be fetched.
    func markRefused(_ ids: ArraySlice<String>) throws {
        try mutateThrowing { s in for id in ids { try s.store.markRefused(id) } }
    }

}

/// Applying a remote state: steps inside one operation.
extension CoreState {
    /// Applies the remote's newest state of one item. The rule the puller and the pusher share: the pusher
    /// takes a remote state through it as a pull would.
    mutating func applyRemoteItem(_ w: WireItem) throws {
        if w.id == rootID || w.parent == nil { return }
        guard var item = items[w.id] else { return try addRemoteItem(w) }
        // A local-only item's remote copy is not this device's concern any more (its delete may be on the way),
        // unless a restore elsewhere brought it back.
        if item.isLocalOnly, try !takesBack(&item, w) { return }
        if w.version <= item.remoteVersion { return }
        pullLog.debug("apply \(w.id) version \(w.version) sha \(w.sha256.prefix(8)) (here: base \(item.remoteVersion)\(item.isPending ? ", pending" : ""))")
        if item.isPending {
            // The pusher meets this version as a 412 and resolves it then; a delete on both sides is quiet. A
            // push already landed meets no 412: then the version is fetched again once the item stops pending
            // (`refetchSkippedVersions`).
            skippedWhilePending[item.id] = max(skippedWhilePending[item.id] ?? 0, w.version)
            // Back on the remote by another device's doing: no longer only this device's to bring back.
            if !w.deleted && item.isDirectory { try store.forgetRevived(item.id) }
            if item.deleted && w.deleted { try store.delete(item.id); items[item.id] = nil }
            try takeMetadataWhileContentPending(&item, w)
            return
        }
        if w.deleted { return try removeRemotelyDeleted(item, tombstone: w) }
        let contentChanged = w.sha256 != item.remoteSHA
        if isKeptOut(w) {
            pullLog.info("\(item.name): the remote moved or renamed it where it would be local-only here; it stays")
            return
        }
        // The remote moved the item below a directory that is below the item here (moved by a change not yet
        // pushed): taking it would make a cycle, and every walk up the tree would spin. The item stays where
        // it is for now; the remote refuses the pending move, which then gives way (Pusher.giveWay), and the
        // refused change is fetched again (SyncLoops.refetchRefused).
        if item.parent != w.parent, let p = w.parent, isAncestor(item.id, of: p) {
            pullLog.info("\(item.name): the remote's move would make a cycle here; taken once the local move gives way")
            try store.markRefused(item.id)
            return
        }
        // Also "moved" when detached here (`place`): it takes its name back.
        let moved = item.place != w.place || children[w.parent!]?[w.name] != item.id
        if moved { try unlink(item) }
        let oldConflicts = item.conflicts
        item.adopt(w, capping: config.arrivingModeCap)
        let resolvedAgain = keepResolutions(&item)
        pruneConflictFiles(item.id, old: oldConflicts, new: item.conflicts)
        if moved { try place(&item) }
        if resolvedAgain { try store.saveChanged(item) } else { try store.save(item) }
        items[item.id] = item
        notice(.changed(item.id, content: contentChanged, elsewhere: true))
        // Kept current: a pinned file, and a local copy a program holds open (a reader following it, such as
        // `tail -F`, then reads the new bytes: a version that only lengthens the file is appended in place).
        if contentChanged && item.kind == .file && (isPinned(item.id) || (item.hasLocal && (handles[item.id]?.open ?? 0) > 0)) {
            startDownload(item.id)
        }
    }

    /// A file whose change here is its content alone takes a move, rename, mode or xattrs made elsewhere at
    /// once, as the pusher's merge takes them later (`mergePush`, `recordConflict`): until then this device
    /// would show the file where it no longer is, and a folder it left here empty that is not empty on the
    /// remote (an rmdir here would delete it there). Its base version stays, so the pusher still meets the
    /// remote's version and merges the content onto it. Not where the remote's place is not one here (a folder
    /// not yet known or deleted here, below the item itself, a local-only folder).
    mutating func takeMetadataWhileContentPending(_ item: inout Item, _ w: WireItem) throws {
        guard !item.metaDirty, !item.deleted, !item.isLocalOnly, !w.deleted, let p = w.parent,
              let dir = items[p], dir.isDirectory, !dir.deleted, !isAncestor(item.id, of: p), !isKeptOut(w)
        else { return }
        // Its time is its content's, written here: what else differs is what it takes.
        let remote = w.metadata
        var here = item.metadata
        here.mtime = remote.mtime
        guard here != remote else { return }
        try takeRemoteMetadata(&item, from: w)
        try store.saveChanged(item)
        items[item.id] = item
    }

    /// A file this device moved where it stays local (the desktop's Trash, a `.nosync` folder) after it was
    /// uploaded, whose delete went up, brought back live by a restore elsewhere (Part 17): the remote's place
    /// wins, so the file is where every device has it. Not when it changed here since or is local-only by itself
    /// (its own `.nosync` name), nor a folder (what is in it is local-only with it): then it stays, and the
    /// restore is not seen here.
    mutating func takesBack(_ item: inout Item, _ w: WireItem) throws -> Bool {
        guard item.kind == .file, w.kind == .file, !w.deleted, !item.isLocalOnlyItself, !item.dirty,
              item.remoteVersion == 0, let base = try store.leftRemoteBase(item.id), w.version > base, !isKeptOut(w)
        else { return false }
        pullLog.info("\(item.name): restored on another device, it leaves this device's local-only folder")
        try forgetDesktopTrashRecord(of: item)
        item.localOnlyAbove = false
        item.metaDirty = false
        item.remoteVersion = base
        return true
    }

    /// Takes an item this device does not have.
    mutating func addRemoteItem(_ w: WireItem) throws {
        if w.deleted || (settledDeletes[w.id].map { w.version <= $0 } ?? false) { return }
        if isKeptOut(w) {
            pullLog.info("\(w.name): not taken, it would be local-only here")
            return
        }
        // Stale items may still name it as their parent here (a deleted folder that comes back): not below
        // one of them. Taken once their newer state has moved them (refetchRefused).
        if let p = w.parent, isAncestor(w.id, of: p) {
            try store.markRefused(w.id)
            return
        }
        var item = Item(id: w.id, parent: w.parent, name: w.name, kind: w.kind, mode: 0, mtime: w.mtime,
                        ctime: now(), size: 0, remoteVersion: 0, remoteSHA: "", remoteSize: 0,
                        device: "", hasLocal: w.kind != .file, localSHA: nil, dirty: false, metaDirty: false,
                        deleted: false, pinned: false, xattrs: [:], conflicts: [])
        item.adopt(w, capping: config.arrivingModeCap)
        try place(&item)
        if item.kind == .file && isPinned(item.parent!) { startDownload(item.id) }
        if keepResolutions(&item) { try store.saveChanged(item) } else { try store.save(item) }
        items[item.id] = item
    }

    /// Removes an item the remote deleted; a directory holding local changes below is kept (edit wins) and
    /// revived on the remote by the pusher, written over the tombstone. Clean items still below it here are
    /// stale (the remote deletes only empty directories): their newer state follows in the feed.
    mutating func removeRemotelyDeleted(_ item: Item, tombstone: WireItem) throws {
        if item.isDirectory, try hasLocalChanges(below: item.id) {
            return try reviveDeletedFolder(item, tombstone: tombstone)
        }
        try removeHere(item)
    }

    /// Drops an item from this device with nothing to push: its row, its name (the kernel's caches are told),
    /// its content and its leftovers.
    mutating func removeHere(_ item: Item) throws {
        try store.delete(item.id)
        items[item.id] = nil
        try unlink(item)
        releaseContent(of: item)
        let id = item.id
        let conflicts = item.conflicts.map(\.id)
        onCommit { s in
            s.removeStaleStaging(id)
            for c in conflicts { s.evictConflict(id, c) }
        }
    }

    /// Keeps a folder deleted elsewhere that holds local changes: it goes back up over the tombstone.
    ///
    mutating func reviveDeletedFolder(_ item: Item, tombstone: WireItem) throws {
        var revived = item
        revived.metaDirty = true
        revived.remoteVersion = tombstone.version
        // It comes back where the remote last had it, under a free name: its place here may have gone to
        // another item meanwhile (see `place`).
        if let p = tombstone.parent, let dir = items[p], dir.isDirectory, !dir.deleted, !isAncestor(item.id, of: p) {
            try unlink(revived)
            revived.parent = p
            revived.name = tombstone.name
        }
        revived.localOnlyAbove = isLocalOnlyFolder(revived.parent)
        if children[revived.parent!]?[revived.name] != revived.id {
            if children[revived.parent!]?[revived.name] != nil {
                revived.name = freeName(revived.name, in: revived.parent!)
            }
            children.list(revived.id, in: revived.parent!, as: revived.name)
            notice(.added(parent: revived.parent!, name: revived.name))
        }
        try store.saveChanged(revived)
        try store.markRevived(item.id, over: tombstone.version)
        items[item.id] = revived
    }
}
