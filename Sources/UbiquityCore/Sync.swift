// The two background loops of a container: the puller applies the remote's change feed to the index, the
// pusher sends the journal of local changes to the remote, oldest first. Conflicts found by the pusher (the
// remote's version moved on) are resolved by the rules of the README: later modification time wins, ties to
// the greater device name, the loser kept as a conflict version; edit wins over delete.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

final class SyncLoops: @unchecked Sendable {
    private unowned let container: Container
    private let log = Logger("sync")
    private let wake = NSCondition()
    private var pushRequested = false
    private var stopping = false
    private var threads: [Thread] = []
    /// Left when the push loop has ended: `stop` waits for it, so the container is let go of promptly.
    private let pushRunning = DispatchGroup()

    init(container: Container) { self.container = container }

    func start() {
        // The push loop keeps the container alive until it has seen `stop` (which waits for that): an owner
        // that lets go of it right after stopping must not pull it from under the loop between two of its looks
        // at `stopping`.
        // (Held weakly by the thread itself, which its Thread object keeps for as long as the loops exist.)
        pushRunning.enter()
        for name in ["pull", "push"] {
            let t = Thread { [self, weak owner = container] in
                if name == "pull" { return pullLoop() }
                if let owner { withExtendedLifetime(owner) { pushLoop() } }
                pushRunning.leave()
            }
            t.name = name
            t.start()
            threads.append(t)
        }
        wakePusher()
    }

    /// Stops both loops; waits a few seconds at most for the push loop (an upload in flight may hold it).
    func stop() {
        wake.lock(); stopping = true; wake.broadcast(); wake.unlock()
        _ = pushRunning.wait(timeout: .now() + 5)
    }

    private var isStopping: Bool { wake.lock(); defer { wake.unlock() }; return stopping }

    func wakePusher() {
        wake.lock(); pushRequested = true; wake.broadcast(); wake.unlock()
    }

    /// Sleeps up to `nanoseconds`, returning early when woken or stopping.
    private func pause(_ nanoseconds: Int64) {
        wake.lock()
        if !pushRequested && !stopping {
            _ = wake.wait(until: Date(timeIntervalSinceNow: Double(nanoseconds) / 1e9))
        }
        wake.unlock()
    }

    // MARK: pull

    /// The feed position last applied (the store is used under the container lock only).
    var feedToken: String? { get throws { try container.withLock { try container.store.meta("token") } } }

    /// Applies the feed until the remote has nothing newer (used at start, without waiting).
    func pullUntilCaughtUp() throws {
        while true {
            let batch = try container.remote.changes(since: feedToken, waitSeconds: 0)
            apply(batch)
            if !batch.more { return }
        }
    }

    private func pullLoop() {
        var backoff: Int64 = 500_000_000
        var failed = false
        while !isStopping {
            do {
                // After a failure the first look is a quick one (no long poll), so a remote that is back is
                // noticed at once rather than when the long poll ends.
                let batch = try container.remote.changes(since: feedToken,
                                                         waitSeconds: failed ? 0 : container.config.pollWaitSeconds)
                if isStopping { return }
                container.remoteAnswered()
                failed = false
                apply(batch)
                backoff = 500_000_000
            } catch {
                if isStopping { return } // the container may be going: touch nothing of it
                log.warning("change feed: \(error)")
                failed = true
                let down: Bool
                if case RemoteError.unreachable = error { down = true } else { down = false }
                if down { container.remoteUnreachable() } else { container.remoteAnswered() }
                // While the remote is away, look again often enough that opens wait for it only briefly.
                sleepUnlessStopping(down ? min(backoff, 2_000_000_000) : backoff)
                backoff = min(backoff * 2, 30_000_000_000)
            }
        }
    }

    private func sleepUnlessStopping(_ nanoseconds: Int64) {
        let end = monotonicNanoseconds() + nanoseconds
        while !isStopping && monotonicNanoseconds() < end { usleep(100_000) }
    }

    /// Applies one batch of remote items and records the new feed position, in one store transaction; then
    /// the changes refused before, whose obstacle the batch may have moved.
    func apply(_ batch: WireChanges) {
        apply(batch.items, token: batch.token)
        if !batch.more { container.withLock { container.caughtUp = true } }
        refetchRefused()
    }

    /// Applies remote items, and the feed position they bring (nil: items fetched one by one, no position).
    func apply(_ items: [WireItem], token: String?) {
        var toDownload: [String] = []
        container.mutate {
            do {
                try container.store.transaction {
                    for w in items { try applyOne(w, toDownload: &toDownload) }
                    if let token { try container.store.setMeta("token", token) }
                }
                if token != nil, let newest = items.map(\.version).max() {
                    container.settledDeletes = container.settledDeletes.filter { $0.value > newest }
                }
            } catch {
                log.error("cannot apply remote changes: \(error)")
            }
        }
        for id in toDownload { container.downloads.start(id) }
        if !items.isEmpty { wakePusher() }
    }

    /// Fetches again, one by one, the items whose remote change the puller refused (a move that would have
    /// made a cycle here) and applies them: the local move in the way may have given way since. A change
    /// still refused is marked again. A failure to reach the remote leaves the marks for the next time.
    func refetchRefused() {
        let ids: [String]
        do { ids = try container.withLock { try container.store.takeRefused() } } catch {
            return log.error("cannot read the remote changes to fetch again: \(error)")
        }
        var items: [WireItem] = []
        for (i, id) in ids.enumerated() {
            do { items.append(try container.remote.item(id)) } catch RemoteError.notFound {
                continue
            } catch {
                do { try container.withLock { for rest in ids[i...] { try container.store.markRefused(rest) } } } catch {
                    log.error("cannot keep the remote changes to fetch again (\(ids[i...].count) lost): \(error)")
                }
                break
            }
        }
        if !items.isEmpty { apply(items, token: nil) }
    }

    /// Applies the remote's newest state of one item. Expects the container lock held.
    func applyOne(_ w: WireItem, toDownload: inout [String]) throws {
        let c = container
        if w.id == c.rootID || w.parent == nil { return }
        guard var item = c.items[w.id] else {
            if w.deleted || (c.settledDeletes[w.id].map { w.version <= $0 } ?? false) { return }
            if c.isKeptOut(w) {
                log.info("\(w.name): not taken, it would be local-only here")
                return
            }
            // Stale items may still name it as their parent here (a deleted folder that comes back): not below
            // one of them. Taken once their newer state has moved them (refetchRefused).
            if let p = w.parent, c.isAncestor(w.id, of: p) {
                try c.store.markRefused(w.id)
                return
            }
            var item = Item(id: w.id, parent: w.parent, name: w.name, kind: w.kind, mode: w.mode, mtime: w.mtime,
                            ctime: c.now(), size: 0, remoteVersion: 0, remoteSHA: "", remoteSize: 0,
                            device: "", hasLocal: w.kind != .file, localSHA: nil, dirty: false, metaDirty: false,
                            deleted: false, pinned: false, xattrs: [:], conflicts: [])
            item.adopt(w)
            item.parent = c.interned(item.parent)
            try c.place(&item)
            if item.kind == .file && c.isPinnedLocked(item.parent!) { toDownload.append(item.id) }
            if c.keepResolutions(&item) { try c.store.saveChanged(item) } else { try c.store.save(item) }
            c.items[item.id] = item
            return
        }
        // A local-only item's remote copy is not this device's concern any more (its delete may be on the way).
        if item.isLocalOnly { return }
        if w.version <= item.remoteVersion { return }
        if item.isPending {
            // The pusher meets this version as a 412 and resolves it then; a delete on both sides is quiet.
            if item.deleted && w.deleted { try c.store.delete(item.id); c.items[item.id] = nil }
            return
        }
        if w.deleted {
            try removeRemotelyDeleted(item, tombstone: w)
            return
        }
        let contentChanged = w.sha256 != item.remoteSHA
        if c.isKeptOut(w) {
            log.info("\(item.name): the remote moved or renamed it where it would be local-only here; it stays")
            return
        }
        // The remote moved the item below a directory that is below the item here (moved by a change not yet
        // pushed): taking it would make a cycle, and every walk up the tree would spin. The item stays where
        // it is for now; the remote refuses the pending move, which then gives way (Pusher.giveWay), and the
        // refused change is fetched again (refetchRefused).
        if item.parent != w.parent, let p = w.parent, c.isAncestor(item.id, of: p) {
            log.info("\(item.name): the remote's move would make a cycle here; taken once the local move gives way")
            try c.store.markRefused(item.id)
            return
        }
        // Also "moved" when detached here (`place`): it takes its name back.
        let moved = item.parent != w.parent || !sameName(item.name, w.name) || c.children[w.parent!]?[w.name] != item.id
        if moved { c.unlink(item) }
        let oldConflicts = item.conflicts
        item.adopt(w)
        item.parent = c.interned(item.parent)
        let resolvedAgain = c.keepResolutions(&item)
        c.pruneConflictFiles(item.id, old: oldConflicts, new: item.conflicts)
        if moved { try c.place(&item) }
        if resolvedAgain { try c.store.saveChanged(item) } else { try c.store.save(item) }
        c.items[item.id] = item
        c.notice(.changed(item.id, content: contentChanged))
        if contentChanged && item.kind == .file && c.isPinnedLocked(item.id) {
            toDownload.append(item.id)
        }
    }

    /// Removes an item the remote deleted; a directory holding local changes below is kept (edit wins) and
    /// revived on the remote by the pusher, written over the tombstone. Clean items still below it here are
    /// stale (the remote deletes only empty directories): their newer state follows in the feed. Expects the
    /// lock held.
    func removeRemotelyDeleted(_ item: Item, tombstone: WireItem) throws {
        let c = container
        if item.isDirectory && hasLocalChanges(below: item.id) {
            var revived = item
            revived.metaDirty = true
            revived.remoteVersion = tombstone.version
            // It comes back where the remote last had it, under a free name: its place here may have gone to
            // another item meanwhile (see `place`).
            if let p = tombstone.parent, let dir = c.items[p], dir.isDirectory, !dir.deleted,
               !c.isAncestor(item.id, of: p) {
                c.unlink(revived)
                revived.parent = p
                revived.name = tombstone.name
            }
            revived.localOnlyAbove = c.isLocalOnlyFolder(revived.parent)
            if c.children[revived.parent!]?[revived.name] != revived.id {
                if c.children[revived.parent!]?[revived.name] != nil {
                    revived.name = c.freeName(revived.name, in: revived.parent!)
                }
                c.children[revived.parent!, default: [:]][revived.name] = revived.id
                c.notice(.added(parent: revived.parent!, name: revived.name))
            }
            try c.store.saveChanged(revived)
            c.items[item.id] = revived
            return
        }
        try c.store.delete(item.id)
        c.items[item.id] = nil
        c.unlink(item)
        c.releaseContent(of: item)
        c.downloads.removeStaleStaging(item.id)
        for conflict in item.conflicts { c.evictConflict(item.id, conflict.id) }
    }

    /// True when a live item below the directory has changes not yet pushed, or lives here only (a fifo kept
    /// in a folder deleted elsewhere keeps the folder, as an edit would). Expects the lock held.
    private func hasLocalChanges(below id: String) -> Bool {
        for child in (container.children[id] ?? [:]).values {
            guard let item = container.items[child] else { continue }
            if (item.isPending && !item.deleted) || item.isLocalOnly { return true }
            if item.isDirectory && hasLocalChanges(below: child) { return true }
        }
        return false
    }

    // MARK: push

    private func pushLoop() {
        var backoff: Int64 = 500_000_000
        while !isStopping {
            // Gather a burst of changes (an editor's save, `tar x`) for a moment, so that it goes up together
            // and the uploads do not compete with the burst for the machine.
            usleep(100_000)
            wake.lock(); pushRequested = false; wake.unlock()
            let outcome = pushAll()
            switch outcome {
            case .idle:
                backoff = 500_000_000
                pause(min(60_000_000_000, container.nextSnapshotDue() ?? .max))
            case .failed, .storeFailed:
                pause(backoff)
                backoff = min(backoff * 2, 30_000_000_000)
            }
        }
    }

    /// `storeFailed`: the journal could not be read; the pusher backs off and tries again, as for a failed push.
    enum PushOutcome { case idle, failed, storeFailed }

    /// Pushes every pending item that can go now, oldest first. A failure to read the journal is logged and
    /// shown on the mount root (`uploadingError`) until a pass reads it again.
    func pushAll() -> PushOutcome {
        while !isStopping {
            let next: String?
            do { next = try nextPushable() } catch {
                log.error("cannot read the changes waiting to upload: \(error)")
                container.recordUploadFailure(container.rootID, error)
                return .storeFailed
            }
            container.clearUploadFailure(container.rootID)
            guard let id = next else { return .idle }
            do {
                try Pusher(container: container, id: id).run()
            } catch {
                log.warning("upload of \(container.path(of: id)) failed: \(error)")
                container.recordUploadFailure(id, error)
                return .failed
            }
        }
        return .idle
    }

    /// True when the item can go now: no program is writing it (or a snapshot of it is due), and its parent is
    /// on the remote (a delete goes by id: where the item was does not matter, its folder may be gone already).
    /// Expects the lock held.
    func isPushable(_ id: String) -> Bool {
        guard let item = container.items[id] else { return false }
        // The delete of a local-only item's remote copy goes by id, and no write here holds it up.
        if item.isLocalOnly { return true }
        if container.isBeingWritten(id) { return false }
        if item.deleted { return true }
        if let p = item.parent, p != container.rootID, (container.items[p]?.remoteVersion ?? 0) == 0 { return false }
        return true
    }

    /// What to push so that `id` can go: the item itself, or the new folder it waits for (the highest one not
    /// on the remote yet). Nil while a program writes it. Expects the lock held.
    func pushFirst(toFree id: String) -> String? {
        if isPushable(id) { return id }
        guard let item = container.items[id], !item.deleted, !container.isBeingWritten(id),
              let p = item.parent, let parent = container.items[p], !parent.deleted, parent.remoteVersion == 0
        else { return nil }
        return pushFirst(toFree: p)
    }

    /// The oldest pending item whose parent the remote knows and which nobody is writing.
    func nextPushable() throws -> String? {
        return try container.withLock {
            let ids = try container.store.pendingIDs()
            let pushable = isPushable
            // A directory with changes of its own goes before the items below it: it may have to be revived on
            // the remote first (deleted there while this device added to it), or nothing can be put in it.
            // Not a directory deleted here: the deletes of what was below it must go first.
            // The highest such directory goes first: one further up may be new (its subtree waits for it).
            guard var id = ids.first(where: pushable) else { return nil }
            let pending = Set(ids)
            var cursor = container.items[id]?.parent
            while let p = cursor, p != container.rootID, let dir = container.items[p], !dir.deleted, !dir.isLocalOnly {
                if pending.contains(p) && pushable(p) { id = p }
                cursor = dir.parent
            }
            return id
        }
    }

    /// Number of items with changes not yet on the remote.
    var pendingCount: Int { get throws { try container.withLock { try container.store.pendingIDs().count } } }
}
