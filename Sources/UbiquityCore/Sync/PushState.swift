// The push side's steps on the container's state: what the push loop and the pusher (Pusher.swift,
// PushBatch.swift) read and record, each method one whole locked step named by what it does.
//
// What must hold here: the methods without `Locked` in their name take the container lock themselves (through
// `withLock`, or `mutate` when they queue notices) and hold it across no network call; those with `Locked`
// expect it held. The pusher decides; what it decides is recorded here, against the item as it is now, which may
// have changed since the push began.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the container's lock (after a content gate,
// before the leaves).
import Foundation
import UbiquityBase

private let pushLog = Logger("push")

/// The push loop's and the pusher's steps on the container's state: what they may read and record, and
/// nothing else of the container (`Container.pushSide`).
struct PushSide: SyncSide {
    unowned let container: Container
}

extension Container {
    /// The push side's steps on this container's state.
    var pushSide: PushSide { PushSide(container: self) }
}

// MARK: the push loop

extension PushSide {
    /// What to push so that `id` can go: the item itself, or the new folder it waits for (the highest one not
    /// on the remote yet). Nil while a program writes it.
    func firstToPush(toFree id: String) -> String? { read { s in s.firstToPushNow(toFree: id) } }

    /// Up to `limit` pending items whose parent the remote knows and which nobody is writing, oldest first.
    /// A directory with changes of its own goes before the items below it: it may have to be revived on the
    /// remote first (deleted there while this device added to it), or nothing can be put in it; the highest
    /// such directory first (one further up may be new: its subtree waits for it). Not a directory deleted here:
    /// the deletes of what was below it must go first. An item whose parent is new waits for a later call (the
    /// parent's create must be answered first). The journal is read only up to the `limit`th pushable item (it
    /// may hold thousands, under the lock).
    /// Items in `skipping` (those the content lane holds, or waiting for it) are left for a later call.
    func nextPushableBatch(limit: Int, skipping: Set<String> = []) throws -> [String] {
        let batch = try pushableBatch(limit: limit, skipping: skipping)
        if !batch.isEmpty || read({ $0.timedAfterEntries.isEmpty }) { return batch }
        try pushTimesAfterEntries()
        return try pushableBatch(limit: limit, skipping: skipping)
    }

    /// Once nothing else waits to go up, the folders timed after their entries go up once more, with the time
    /// they have (see `timedAfterEntries`): those with no such folder in them first, the folders above them at
    /// the next call. So each folder's version follows those of the folders in it, and a device that takes them
    /// all in one pull places a sub-folder before its folder's time comes, not after (it showed the time the
    /// sub-folder arrived). (A batch puts an item's pending folders before it, so one round would not do.)
    private func pushTimesAfterEntries() throws {
        try mutateThrowing { s in
            guard try s.store.pendingCount() == 0 else { return }
            let owed = s.timedAfterEntries.filter { s.owesTimeAfterEntries($0) }
            let deepest = owed.filter { id in !owed.contains { $0 != id && s.isAncestor(id, of: $0) } }
            for id in deepest {
                guard var dir = s.items[id] else { continue }
                dir.metaDirty = true
                try s.saveLocalChange(dir)
            }
            s.timedAfterEntries = owed.subtracting(deepest)
        }
    }

    private func pushableBatch(limit: Int, skipping: Set<String>) throws -> [String] {
        try read { s in
            let pushable = { (id: String) in !skipping.contains(id) && s.isPushable(id) }
            var oldest: [String] = []
            _ = try s.store.firstPending { id in
                if pushable(id) { oldest.append(id) }
                return oldest.count >= limit
            }
            var picked: [String] = []
            var seen: Set<String> = []
            for id in oldest {
                var above: [String] = []
                var cursor = s.items[id]?.parent
                while let p = cursor, p != s.rootID, let dir = s.items[p], !dir.deleted, !dir.isLocalOnly {
                    if try pushable(p) && s.store.isPending(p) { above.append(p) }
                    cursor = dir.parent
                }
                for next in above.reversed() + [id] where seen.insert(next).inserted { picked.append(next) }
            }
            return Array(picked.prefix(limit))
        }
    }

    /// Number of items with changes not yet on the remote.
    var pendingPushCount: Int { get throws(StoreError) { try read { s throws(StoreError) in try s.changesToPush() } } }
}

// MARK: the pusher: reads

extension PushSide {
    /// The item as it is now and its content generation, taken together.
    func pushSnapshot(_ id: String) -> PushSnapshot? {
        read { s in s.items[id].map { PushSnapshot(item: $0, generation: s.contentGeneration[id] ?? 0) } }
    }

    /// True while the content of generation `generation` is still what the item waits to upload: not deleted
    /// and not changed since (an upload in flight stops otherwise).
    func isStillToUpload(_ id: String, generation: Int) -> Bool {
        read { s in
            guard let item = s.items[id], !item.deleted, item.dirty else { return false }
            return (s.contentGeneration[id] ?? 0) == generation
        }
    }

    /// True when `id` is one of `ids` or lies below one of them here.
    func liesBelow(_ id: String, anyOf ids: Set<String>) -> Bool {
        read { s in ids.contains { s.isAncestor($0, of: id) } }
    }

    /// True when the create of an item not yet acknowledged was sent (it may have landed).
    func createWasSent(_ id: String) throws -> Bool { try read { s in try s.store.createWasSent(id) } }

    /// The state this device first sent to create the item, if recorded.
    func sentCreate(_ id: String) throws -> WireItem? {
        guard let sent = try read({ s in try s.store.sentCreate(id) }) else { return nil }
        // The one written by a version that recorded only that a create went carries no state: "1".
        if sent == "1" { return nil }
        do { return try JSONDecoder().decode(WireItem.self, from: Data(sent.utf8)) } catch {
            throw StoreError.badValue(id: "sent:" + id, column: "meta", cause: "\(error)")
        }
    }

    /// True when every conflict version the remote lists is one the item lists, or one resolved here.
    func hasSeenConflicts(_ listed: [WireConflict], listedBy item: Item) -> Bool {
        read { s in
            listed.allSatisfy { c in item.conflicts.contains { $0.id == c.id } || s.discardedConflicts.contains(c.id) }
        }
    }

    /// True when the item is a live folder here whose create has not landed on the remote yet.
    func isUnpushedFolder(_ id: String) -> Bool {
        read { s in
            s.items[id].map { $0.isDirectory && !$0.deleted && !$0.isLocalOnly && $0.remoteVersion == 0 } ?? false
        }
    }

    /// True when a child in the way of directory `parent`'s delete has a change here that takes it out.
    func isTakenOut(_ child: String, of parent: String) -> Bool {
        read { s in
            guard let item = s.items[child], item.isPending else { return false }
            return item.deleted || item.parent != parent
        }
    }

    /// True when the item is local-only here and the remote still holds a copy of it to delete.
    func hasRemoteCopyToDelete(_ id: String) -> Bool {
        read { s in s.items[id].map { $0.isLocalOnly && $0.isPending } ?? false }
    }

    /// True when the item holding a name on the remote has left that place here, by a change still to push.
    func hasMovedAway(_ holder: WireItem) -> Bool {
        read { s in
            // Only against the remote version this device last saw: a holder changed elsewhere since is a
            // conflict of its own, settled at its own turn, not ahead of it.
            guard let here = s.items[holder.id], here.isPending, here.remoteVersion == holder.version else {
                return false
            }
            return here.deleted || here.place != holder.place
        }
    }

    /// True when the remote lists the content being pushed as a conflict version of this device (see
    /// `listsAsConflictNow`).
    func listsAsConflict(_ current: WireItem, pushed: Item) -> Bool {
        read { s in s.listsAsConflictNow(current, pushed: pushed) }
    }

    /// Shows the progress of the item's upload in its status.
    func setUploadProgress(_ id: String, uploading: Bool, done: Int64, total: Int64) {
        update { s in
            s.updateTransfer(id) {
                $0.isUploading = uploading
                $0.uploadedBytes = done
                $0.uploadTotal = total
            }
        }
    }
}

// MARK: the pusher: deletes

extension PushSide {
    /// Takes an item out of the push journal when it has nothing left to push, or is gone.
    func dropFromJournal(_ id: String) throws {
        try mutateThrowing { s in
            if let item = s.items[id] {
                if !item.isPending { try s.store.save(item) }
            } else {
                try s.store.delete(id)
            }
        }
    }

    /// Forgets an item whose delete the remote has (at version `tombstone`, when known).
    func forgetDeleted(_ id: String, tombstone: Int64? = nil) throws {
        try mutateThrowing { s in try s.forgetDeletedLocked(id, tombstone: tombstone) }
    }

    /// Brings back an item deleted here that the remote kept, as the remote has it. Where the remote has it
    /// below an item that lies below it here (moved by this device, not pushed yet), taking that place would
    /// make a cycle: it comes back where it was, at a version before the remote's, and the remote's state is
    /// fetched again once the other has moved (`refetchRefused`).
    func restoreDeleted(_ id: String, as w: WireItem) throws {
        try mutateThrowing { s in
            guard var item = s.items[id] else { return }
            item.deleted = false
            item.dirty = false
            item.metaDirty = false
            item.hasLocal = !item.hasContent
            item.localSHA = nil
            if let p = w.parent, p != item.parent, s.isAncestor(id, of: p) {
                item.remoteVersion = min(item.remoteVersion, w.version - 1)
                try s.store.markRefused(id)
            } else {
                item.adopt(w, capping: s.config.arrivingModeCap)
                // Conflict versions resolved here before the delete stay resolved on the item that came back.
                let kept = w.conflicts.filter { !s.discardedConflicts.contains($0.id) }
                if kept != w.conflicts {
                    s.pruneConflictFiles(id, old: item.conflicts, new: kept)
                    item.conflicts = kept
                    item.metaDirty = true
                }
            }
            // It takes back the remote's name; a local item made since under that name moves to a free one
            // (renaming the item that came back instead would be a change of this device, newer than the
            // state another device may have deleted).
            try s.place(&item)
            // Back in the journal only if there is still something to push; a journal row for a clean item
            // would have the push loop pick it again and again.
            if item.isPending { try s.store.saveChanged(item) } else { try s.store.save(item) }
            s.items[id] = item
        }
    }

    /// The remote copy of a local-only item is gone, or left to the other devices: the item is a plain local
    /// one (remote version 0). `base` is the remote version a return to the remote is written against (the
    /// tombstone, or the version this device had of a copy left there); nil when the remote has none.
    /// Deleted here meanwhile, the item is forgotten; made ubiquitous again meanwhile, it goes up at once.
    func leftRemote(_ id: String, base: Int64?) throws {
        try mutateThrowing { s in
            guard var cur = s.items[id] else { return }
            if cur.deleted {
                try s.store.delete(id)
                s.items[id] = nil
                return
            }
            try s.store.forgetCreateSent(id)
            if let base { try s.store.markLeftRemote(id, base: base) }
            cur.remoteVersion = 0
            if !cur.isLocalOnly { try s.becomeUbiquitous(&cur) }
            try s.store.saveChanged(cur)
            s.items[id] = cur
        }
    }

    /// Removes an item deleted elsewhere after this device's change to it landed, unless it changed here since
    /// the push began (anything but its name) or gained children here. Returns true when removed.
    func removeIfUnchangedSincePush(_ id: String, tombstone: WireItem, snap: PushSnapshot,
                                    pushed: Item) throws -> Bool {
        try mutateThrowing { s in
            guard let cur = s.items[id], !cur.deleted, (s.contentGeneration[id] ?? 0) == snap.generation,
                  cur.metadata.named(pushed.name) == pushed.metadata, cur.conflicts == pushed.conflicts,
                  (s.children[id] ?? [:]).isEmpty else { return false }
            pushLog.info("\(s.path(of: id)) was deleted elsewhere after this device's change landed: removed")
            try s.removeRemotelyDeleted(cur, tombstone: tombstone)
            return true
        }
    }
}

// MARK: the pusher: writes

extension PushSide {
    /// Sets the version the next conditional write is made against.
    func rebasePush(_ id: String, version: Int64) throws {
        try mutateThrowing { s in
            guard var cur = s.items[id] else { return }
            cur.remoteVersion = version
            try s.store.save(cur)
            s.items[id] = cur
        }
    }

    /// Records the puts about to be sent, in one transaction; answers the ids of items gone meanwhile (not to
    /// be sent). Each put is kept among its item's last few (`landedPut` finds the one a 412 names as this
    /// device's landed change), and a create (`ifMatch` nil) is also marked sent, so that a local delete from
    /// now on leaves a tombstone (the create may land).
    func markSent(_ puts: [(item: WireItem, ifMatch: Int64?, change: WireChangeID)]) throws -> Set<String> {
        if puts.isEmpty { return [] }
        return try mutateThrowing { s -> Set<String> in
            var gone: Set<String> = []
            for put in puts {
                let id = put.item.id
                guard s.items[id] != nil else { gone.insert(id); continue }
                if put.ifMatch == nil { try s.store.markCreateSent(id, try Self.json(put.item)) }
                var kept = try Self.sentPuts(s.store, id)
                if kept.last?.change == put.change.id { continue }
                kept.append(SentPut(change: put.change.id, item: put.item))
                if kept.count > SentPut.kept { kept.removeFirst(kept.count - SentPut.kept) }
                try s.store.setSentPuts(id, try Self.json(kept))
            }
            return gone
        }
    }

    /// The item as this device sent it in the put whose change id is `change`, when it is among those kept.
    func landedPut(_ id: String, change: String) throws -> WireItem? {
        try read { s in try Self.sentPuts(s.store, id).last { $0.change == change }?.item }
    }

    private static func json(_ value: some Encodable) throws -> String {
        String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
    }

    private static func sentPuts(_ store: Store, _ id: String) throws -> [SentPut] {
        guard let text = try store.sentPuts(id) else { return [] }
        do { return try JSONDecoder().decode([SentPut].self, from: Data(text.utf8)) } catch {
            throw StoreError.badValue(id: "puts:" + id, column: "meta", cause: "\(error)")
        }
    }

    /// At the end of a push: whether versions the puller skipped while their items were pending are to be
    /// fetched again (`CoreState.refetchSkippedVersions`). A store that cannot take the marks keeps them for the
    /// next push, logged.
    func takeRefetchDue() -> Bool {
        // (A transaction only when an item with a version skipped has stopped pending: most pushes have none.)
        guard read({ s in s.skippedWhilePending.keys.contains { s.items[$0]?.isPending != true } }) else { return false }
        do { return try mutateThrowing { s in try s.refetchSkippedVersions() } } catch {
            pushLog.error("the versions skipped while their items were pending are not marked to fetch again: \(error)")
            return false
        }
    }

    /// The remote forgot the item: its create is to be sent afresh.
    func forgetCreateSent(_ id: String) throws { try mutateThrowing { s in try s.store.forgetCreateSent(id) } }

    /// Records what the remote stored. Content and metadata changed here after the snapshot stay pending.
    func acknowledgePush(_ id: String, stored: WireItem, snap: PushSnapshot, pushed: Item) throws {
        try mutateThrowing { s in try s.acknowledgePushLocked(id, stored: stored, snap: snap, pushed: pushed) }
    }

    /// Records what the remote answered to a batch, in one transaction: the puts it stored (as
    /// `acknowledgePush`) and the deletes it has (as `forgetDeleted`).
    func acknowledgeBatch(puts: [(snap: PushSnapshot, pushed: Item, stored: WireItem)],
                          deletes: [(id: String, tombstone: Int64?)]) throws {
        if puts.isEmpty && deletes.isEmpty { return }
        try mutateThrowing { s in
            for p in puts {
                try s.acknowledgePushLocked(p.snap.item.id, stored: p.stored, snap: p.snap, pushed: p.pushed)
            }
            for d in deletes { try s.forgetDeletedLocked(d.id, tombstone: d.tombstone) }
        }
    }

    /// Lets a folder kept over its delete elsewhere go when nothing it was kept for is left below it
    /// (`isNeedlessRevival`): it is removed here as the remote has it, and nothing goes up. True when it went.
    func dropNeedlessRevival(_ id: String) throws -> Bool {
        // Looked at first under the read lock: every folder's push passes here, and nearly none is a revival.
        guard try read({ s in try s.items[id].map { try s.isNeedlessRevival($0) } ?? false }) else { return false }
        return try mutateThrowing { s in
            guard let dir = s.items[id], try s.isNeedlessRevival(dir) else { return false }
            pushLog.info("\(dir.name): deleted elsewhere, kept here for changes in it that are no longer there: it goes")
            try s.removeHere(dir)
            return true
        }
    }

    /// Acknowledges what of a put (a create, or a change) that landed unanswered is unchanged here since it
    /// was sent, then, when nothing is left to push, takes the remote's newer state as a pull would. Nil when
    /// done; otherwise whether the metadata but the name changed here since the put was sent (what is left is
    /// pushed against `current`).
    func acknowledgeLandedPut(_ id: String, sent: WireItem, current: WireItem, snap: PushSnapshot,
                              pushed: Item) throws -> Bool? {
        let metaChanged = try mutateThrowing { s -> Bool? in
            guard var cur = s.items[id], !cur.deleted else { return true }
            if cur.kind == .file && cur.dirty && pushed.remoteSHA == sent.sha256
                && (s.contentGeneration[id] ?? 0) == snap.generation {
                cur.dirty = false
                cur.localSHA = sent.sha256
                cur.size = sent.size
            }
            let onlyRenamed = cur.metadata.named(sent.name) == sent.metadata && cur.conflicts == sent.conflicts
            // What the rules compare is the metadata but the name: the puller may have renamed the item out of
            // the way of another that took its name meanwhile. That name goes up, unless the remote moved the
            // item since: then the move wins, as it would over the puller's name.
            let movedThere = !current.deleted && current.place != sent.place
            if cur.metadata == sent.metadata && cur.conflicts == sent.conflicts || onlyRenamed && movedThere {
                cur.metaDirty = false
            }
            cur.remoteSHA = sent.sha256
            cur.remoteSize = sent.size
            cur.device = sent.device
            try s.store.save(cur)
            s.items[id] = cur
            if cur.isPending { return !onlyRenamed }
            try s.applyRemoteItem(current)
            // The puller may have refused the remote's place (a cycle here): the item is on the remote all the
            // same, and its place here goes there as a move (which gives way if the remote refuses it too).
            if var left = s.items[id], left.remoteVersion == 0 {
                left.remoteVersion = current.version
                left.metaDirty = true
                try s.store.saveChanged(left)
                s.items[id] = left
            }
            return nil
        }
        return metaChanged
    }

    /// Another item holds the name on the remote: this one takes the next free name in its folder, unless it
    /// left `place` here since (that newer place is what the next try pushes).
    func takeFreeName(_ id: String, ifStillAt expected: ItemPlace) throws {
        try mutateThrowing { s in
            guard var cur = s.items[id], let parent = cur.parent, cur.place == expected else { return }
            try s.unlink(cur)
            cur.name = s.freeName(cur.name, in: parent, avoiding: cur.name)
            cur.metaDirty = true
            try s.store.saveChanged(cur)
            s.items[id] = cur
            s.children.list(id, in: parent, as: cur.name)
            s.notice(.added(parent: parent, name: cur.name))
        }
    }

    /// The remote refused the item's place (`why`): unless it left `place` here since, it goes back where the
    /// remote has it (an item holding that name here is stale: `place` unlists it), or else to the top of the
    /// container under a name free here.
    func moveBack(_ id: String, ifStillAt expected: ItemPlace, toWhereRemoteHas current: WireItem?,
                  why: String) throws {
        try mutateThrowing { s in
            guard var cur = s.items[id], !cur.deleted, cur.place == expected else { return }
            var target = (parent: WireRules.documentsID, name: cur.name)
            if let current, !current.deleted, let p = current.parent, let dir = s.items[p], dir.isDirectory,
               !dir.deleted, !s.isAncestor(id, of: p) {
                // Not the name of a step aside (Pusher.stepAside): the item keeps its own there.
                target = (p, current.name == WireRules.asideName(id) ? cur.name : current.name)
            } else if s.children[target.parent]?[target.name] != nil {
                target.name = s.freeName(target.name, in: target.parent)
            }
            pushLog.info("\(s.path(of: id)): the remote refused its place (\(why)); it goes back")
            try s.unlink(cur)
            cur.parent = target.parent
            cur.name = target.name
            try s.place(&cur)
            try s.store.saveChanged(cur)
            s.items[id] = cur
        }
    }
}

// MARK: the pusher: conflicts

extension PushSide {
    /// An item that lost its name here to another item (`isDetached`) takes the remote's place before its
    /// change is resolved against `current`: that name is no change of this device to push.
    func takePlaceIfDetached(_ id: String, from current: WireItem) throws {
        try mutateThrowing { s in
            guard !current.deleted, var cur = s.items[id], !cur.deleted, s.isDetached(cur) else { return }
            try s.takeRemotePlace(&cur, from: current)
            try s.store.save(cur)
            s.items[id] = cur
        }
    }

    /// This device's change goes on top of the remote's version `current` (or revives its tombstone), keeping
    /// what the remote changed: its content, unless changed here; its metadata, unless changed here.
    func mergePush(_ id: String, onto current: WireItem, snap: PushSnapshot, pushed: Item) throws {
        try mutateThrowing { s in
            guard var cur = s.items[id] else { return }
            let newContent = !current.deleted && current.sha256 != cur.remoteSHA
            if !current.deleted {
                // The content of the version the next write goes on top of, also while dirty: the next 412
                // compares with it to tell whether the remote's content changed since.
                cur.remoteSHA = current.sha256
                cur.remoteSize = current.size
            }
            if !cur.dirty && !current.deleted {
                cur.size = current.size
                cur.device = current.device
                // A content written elsewhere comes with its time, as a pull takes it. Kept, the older time went up
                // with this device's change of other things (a conflict version discarded here) over the newer
                // one, and a delete made elsewhere on top of the newer one took that for an edit it had not seen.
                if newContent { cur.mtime = current.mtime }
                if cur.hasLocal && cur.localSHA != current.sha256 { s.notice(.changed(id, content: true, elsewhere: true)) }
            }
            if !cur.metaDirty && !current.deleted { try s.takeRemoteMetadata(&cur, from: current) }
            // Reviving a tombstone: the conflict versions it lists went with the delete (whoever deleted saw
            // them); those this device knows come back with its edit.
            let conflicts = current.deleted
                ? cur.conflicts.filter { !s.discardedConflicts.contains($0.id) }
                : s.mergedConflicts(local: cur.conflicts, remote: current.conflicts)
            try s.forgetUnpushed(listed: current.conflicts)
            s.pruneConflictFiles(id, old: cur.conflicts, new: conflicts)
            cur.conflicts = conflicts
            if !current.deleted { s.settleIfSame(&cur, as: current, snap: snap, pushed: pushed) }
            if cur.conflicts != current.conflicts { cur.metaDirty = true }
            cur.remoteVersion = current.version
            try s.store.save(cur)
            s.items[id] = cur
        }
    }

    /// Both sides changed the content: the loser is listed as a conflict version on top of `current`; when
    /// `theirsWins`, their content becomes current and ours is kept as that version.
    func recordConflict(_ id: String, against current: WireItem, loser: WireConflict, theirsWins: Bool,
                        snap: PushSnapshot, pushed: Item) throws {
        try mutateThrowing { s in
            guard var cur = s.items[id] else { return }
            cur.remoteVersion = current.version
            try s.forgetUnpushed(listed: current.conflicts)
            var conflicts = s.mergedConflicts(local: cur.conflicts, remote: current.conflicts)
            if !conflicts.contains(where: { $0.isSameWrite(as: loser) }) {
                try s.rememberUnpushed([loser.id])
                conflicts.append(loser)
            }
            s.pruneConflictFiles(id, old: cur.conflicts, new: conflicts)
            cur.conflicts = conflicts
            // A rename or move made elsewhere stands when this device changed only the content, as in a merge.
            if !cur.metaDirty { try s.takeRemoteMetadata(&cur, from: current) }
            cur.metaDirty = true
            if theirsWins {
                if (s.contentGeneration[id] ?? 0) == snap.generation {
                    cur.dirty = false
                    cur.localSHA = pushed.remoteSHA
                }
                cur.takeContent(of: current)
                cur.mtime = current.mtime
                s.notice(.changed(id, content: true, elsewhere: true))
            }
            try s.store.saveChanged(cur)
            s.items[id] = cur
        }
    }

    /// Takes the remote's state `current` as the puller would when it lists this very write as this device's
    /// conflict version and the item did not change here since. Returns whether it did.
    func settleLandedAsConflict(_ id: String, current: WireItem, snap: PushSnapshot, pushed: Item) throws -> Bool {
        let settled = try mutateThrowing { s -> Bool in
            guard s.listsAsConflictNow(current, pushed: pushed), var cur = s.items[id], !cur.deleted,
                  (s.contentGeneration[id] ?? 0) == snap.generation, cur.metadata == pushed.metadata,
                  cur.conflicts == pushed.conflicts,
                  !cur.conflicts.contains(where: { s.unpushedConflicts.contains($0.id) }) else { return false }
            pushLog.info("\(s.path(of: id)): this change landed and was kept as a conflict version elsewhere")
            cur.dirty = false
            cur.metaDirty = false
            cur.localSHA = pushed.remoteSHA
            try s.store.save(cur)
            s.items[id] = cur
            try s.applyRemoteItem(current)
            return true
        }
        return settled
    }
}

/// Which item may go up now, and what its acknowledgement records: steps inside one operation.
extension CoreState {
    /// The items with changes not yet on the remote: the journal, and the folders that owe one more push
    /// after their entries (`timedAfterEntries`) while they are out of it.
    func changesToPush() throws(StoreError) -> Int {
        let owed = timedAfterEntries.filter { owesTimeAfterEntries($0) && items[$0]?.isPending == false }
        return try store.pendingCount() + owed.count
    }

    /// True when folder `id` still owes the push of the time set after its entries.
    func owesTimeAfterEntries(_ id: String) -> Bool {
        guard timedAfterEntries.contains(id), let dir = items[id] else { return false }
        return dir.isDirectory && !dir.deleted && !dir.isLocalOnly
    }

    /// See `PushSide.forgetDeleted`.
    mutating func forgetDeletedLocked(_ id: String, tombstone: Int64?) throws {
        try store.delete(id)
        items[id] = nil
        if let tombstone { settledDeletes[id] = tombstone }
    }

    /// The versions the puller skipped (their items pending here) of items no longer pending, whatever settled
    /// them (a push answered, a delete forgotten, a refusal resolved by taking the remote's state then): each
    /// newer than what the item holds now (or, forgotten, than its delete) is marked to fetch again, as the
    /// feed has moved past it (`SyncLoops.refetchRefused`). Answers whether any was.
    mutating func refetchSkippedVersions() throws -> Bool {
        let settled = skippedWhilePending.filter { items[$0.key]?.isPending != true }
        let due = settled.filter { id, skipped in skipped > items[id]?.remoteVersion ?? settledDeletes[id] ?? 0 }
        for id in due.keys { try store.markRefused(id) }
        // (Once committed: a commit that fails, and the transaction tried again, finds them all still there.)
        onCommit { s in for id in settled.keys { s.skippedWhilePending[id] = nil } }
        return !due.isEmpty
    }

    /// See `Container.acknowledgePush`.
    mutating func acknowledgePushLocked(_ id: String, stored: WireItem, snap: PushSnapshot, pushed: Item) throws {
        guard var cur = items[id] else { return }
        cur.remoteVersion = stored.version
        cur.remoteSHA = stored.sha256
        cur.remoteSize = stored.size
        cur.device = stored.device
        pruneConflictFiles(id, old: cur.conflicts, new: stored.conflicts)
        cur.conflicts = stored.conflicts
        try forgetUnpushed(listed: stored.conflicts)
        let unchanged = (contentGeneration[id] ?? 0) == snap.generation
        if snap.item.dirty && unchanged && cur.dirty {
            cur.dirty = false
            cur.localSHA = stored.sha256
            cur.size = stored.size
        }
        if cur.metadata == pushed.metadata { cur.metaDirty = false }
        try store.save(cur)
        // A detached item (it lost its name here to another, `place`) waits for its newer state in the feed to
        // place it; once its own put landed none comes (this is its newest): it takes the name it pushed, when
        // that is free here.
        if isDetached(cur), let p = cur.parent, children[p]?[cur.name] == nil, let dir = items[p], dir.isDirectory, !dir.deleted {
            children.list(cur.id, in: p, as: cur.name)
            notice(.added(parent: p, name: cur.name))
            try entriesChanged(in: p, remote: true)
        }
        // Every put sent before this answer made a version older than this one: none is needed any more.
        try store.forgetSentPuts(id)
        items[id] = cur
        updateTransfer(id) { $0.uploadError = nil }
    }

    /// True when the item can go now: no program is writing it (or a snapshot of it is due), and its parent is
    /// on the remote (a delete goes by id: where the item was does not matter, its folder may be gone already).
    ///
    func isPushable(_ id: String) -> Bool {
        guard let item = items[id] else { return false }
        // Not before it is written here (the next pass writes it first): a crash must not find it gone
        // from the remote and back here.
        if store.keepsDelete(id) { return false }
        // The delete of a local-only item's remote copy goes by id, and no write here holds it up.
        if item.isLocalOnly { return true }
        if isBeingWritten(id) { return false }
        if item.deleted { return true }
        // A folder made here goes first. A folder this device no longer has at all (its delete went up and was
        // forgotten while this item, edited here, won over its own delete elsewhere) never will: the item goes,
        // and the remote's refusal of its place moves it to the top of the container (Pusher.giveWay).
        if let p = item.parent, p != rootID, let parent = items[p], parent.remoteVersion == 0 { return false }
        return true
    }

    func firstToPushNow(toFree id: String) -> String? {
        if isPushable(id) { return id }
        guard let item = items[id], !item.deleted, !isBeingWritten(id),
              let p = item.parent, let parent = items[p], !parent.deleted, parent.remoteVersion == 0
        else { return nil }
        return firstToPushNow(toFree: p)
    }

    /// True when the remote lists the content being pushed, written at the same time, as a conflict version
    /// of this device that this device has not resolved: that write landed.
    func listsAsConflictNow(_ current: WireItem, pushed: Item) -> Bool {
        let write = WireConflict(id: "", sha256: pushed.remoteSHA, size: pushed.remoteSize, mtime: pushed.mtime,
                                 device: config.device)
        return current.conflicts.contains { $0.isSameWrite(as: write) && !discardedConflicts.contains($0.id) }
    }
}

/// A put this device sent: its change id and the item as sent. Those sent since the item's last answer are
/// kept (the newest few), for the puts sent again from one base while answers were lost.
struct SentPut: Codable {
    static let kept = 16
    var change: String
    var item: WireItem
}
