// Pushes one pending item to the remote: its delete, or its content and metadata as one conditional write.
// A lost condition (412) is a conflict, resolved here by the rules of the README so that every device,
// computing from the same two versions, reaches the same result.
import Foundation
import UbiquityBase

struct Pusher {
    let container: Container
    let id: String
    /// The items whose push waits for this one to leave a name it holds on the remote, in the order they met it.
    let waiting: [String]
    private let log = Logger("push")

    init(container: Container, id: String, waiting: [String] = []) {
        self.container = container
        self.id = id
        self.waiting = waiting
    }

    /// A snapshot of what is being pushed, taken under the lock.
    private struct Snapshot {
        var item: Item
        var generation: Int
    }

    private func snapshot() -> Snapshot? {
        container.withLock {
            container.items[id].map { Snapshot(item: $0, generation: container.contentGeneration[id] ?? 0) }
        }
    }

    func run() throws {
        var attempts = 0
        // Items in the way of this one's name that were pushed first once already (see pushItem).
        var pushedFirst: Set<String> = []
        while let snap = snapshot(), snap.item.isPending {
            attempts += 1
            if attempts > 8 { throw RemoteError.server(status: 0, message: "conflict did not settle after 8 tries") }
            // A local-only item never goes up: only the delete of a copy the remote still holds.
            if snap.item.isLocalOnly {
                if try pushRemoteCopyDelete(snap.item) { return }
                continue
            }
            if snap.item.deleted {
                if try pushDelete(snap.item) { return }
                continue
            }
            if try pushItem(snap, pushedFirst: &pushedFirst) { return }
        }
        try dropFromJournal()
    }

    /// An item in the journal with nothing left to push (or gone) leaves it, so the pusher does not spin.
    private func dropFromJournal() throws {
        try container.withLock {
            if let item = container.items[id] {
                if !item.isPending { try container.store.save(item) }
            } else {
                try container.store.delete(id)
            }
        }
    }

    // MARK: delete

    /// Returns true when done, false to look again.
    private func pushDelete(_ item: Item) throws -> Bool {
        if item.remoteVersion == 0 {
            // Its create was sent and no answer came: look whether it landed.
            if try container.withLock({ try container.store.createWasSent(id) }) {
                let current: WireItem
                do { current = try container.remote.item(id) } catch RemoteError.notFound {
                    try finishDelete(); return true
                }
                if current.deleted { try finishDelete(); return true }
                if !isOwnWrite(current, deleted: item) { try restore(current); return true }
                // It landed and nobody changed it since: delete that version.
                try rebase(version: current.version)
                return false
            }
            try finishDelete()
            return true
        }
        do {
            let tombstone = try container.remote.deleteItem(id, ifMatch: item.remoteVersion)
            try finishDelete(tombstone: tombstone.version)
        } catch let error as RemoteError {
            switch error {
            case .notFound:
                try finishDelete()
            case .preconditionFailed(let current):
                guard let current, !current.deleted else {
                    try finishDelete(tombstone: current?.version)
                    return true
                }
                if isOwnWrite(current, deleted: item) {
                    // The newer version is a write of this device whose answer was lost: the delete stands.
                    try rebase(version: current.version)
                    return false
                }
                // Edit against delete: the edit wins; the item comes back here as the remote has it.
                try restore(current)
            case .conflict(_, let child):
                // The directory is not empty there. A child that this device moved out or deleted goes first;
                // otherwise it gained children elsewhere: it is kept, and its new children arrive by the feed.
                guard let child, child.id != id else { throw error }
                if takenOutHere(child.id) {
                    // Not while a program writes it, nor when that push waits for this one (a cycle, which the
                    // push of a name in the way breaks): the delete waits (the push loop tries again later).
                    guard let first = container.withLock({ container.sync.pushFirst(toFree: child.id) }),
                          first != id, !waiting.contains(first), waiting.count < 32 else {
                        throw error
                    }
                    try Pusher(container: container, id: first, waiting: waiting + [id]).run()
                    return false
                }
                try restore(try container.remote.item(id))
            default:
                throw error
            }
        }
        return true
    }

    // MARK: a local-only item's remote copy

    /// Deletes the remote copy of an item that became local-only here (a folder's once what is below it is
    /// gone); the local copy stays. Returns true when done, false to look again.
    private func pushRemoteCopyDelete(_ item: Item) throws -> Bool {
        do {
            let tombstone = try container.remote.deleteItem(id, ifMatch: item.remoteVersion)
            try leftRemote(base: tombstone.version)
        } catch let error as RemoteError {
            switch error {
            case .notFound:
                try leftRemote(base: nil)
            case .preconditionFailed(let current):
                guard let current, !current.deleted else { try leftRemote(base: current?.version); return true }
                // A write of this device whose answer was lost: the delete goes on top of it.
                if current.device == container.config.device { try rebase(version: current.version); return false }
                // Changed elsewhere before the delete came: that edit stays on the remote (edit wins over delete),
                // apart from the copy kept here; made ubiquitous again, this one goes on top of the version it
                // had, and so meets that edit as a conflict.
                log.info("\(container.path(of: id)) was changed elsewhere: that version stays on the remote")
                try leftRemote(base: item.remoteVersion)
            case .conflict(_, let child):
                guard let child, child.id != id else { throw error }
                let ours = container.withLock { container.items[child.id].map { $0.isLocalOnly && $0.isPending } ?? false }
                if ours {
                    try Pusher(container: container, id: child.id).run()
                    return false
                }
                // Something added there by another device meanwhile: the folder stays on the remote for it.
                log.info("\(container.path(of: id)) holds items added elsewhere: it stays on the remote for them")
                try leftRemote(base: item.remoteVersion)
            default:
                throw error
            }
        }
        return true
    }

    /// The remote copy of a local-only item is gone, or left to the other devices: the item is a plain local
    /// one (remote version 0). `base` is the remote version a return to the remote is written against (the
    /// tombstone, or the version this device had of a copy left there); nil when the remote has none.
    /// Deleted here meanwhile, the item is forgotten; made ubiquitous again meanwhile, it goes up at once.
    private func leftRemote(base: Int64?) throws {
        try container.mutate {
            guard var cur = container.items[id] else { return }
            if cur.deleted {
                try container.store.delete(id)
                container.items[id] = nil
                return
            }
            try container.store.forgetCreateSent(id)
            if let base { try container.store.markLeftRemote(id, base: base) }
            cur.remoteVersion = 0
            if !cur.isLocalOnly { try container.becomeUbiquitous(&cur) }
            try container.store.saveChanged(cur)
            container.items[id] = cur
        }
    }

    /// True when a child in the way of this directory's delete has a change here that takes it out.
    private func takenOutHere(_ child: String) -> Bool {
        container.withLock {
            guard let item = container.items[child], item.isPending else { return false }
            return item.deleted || item.parent != id
        }
    }

    /// True when the remote's version of an item deleted here was made by this device (a write whose answer
    /// was lost) and lists no conflict version this device has not seen: nothing in it is news to the delete.
    private func isOwnWrite(_ current: WireItem, deleted item: Item) -> Bool {
        guard current.device == container.config.device else { return false }
        return container.withLock {
            current.conflicts.allSatisfy { c in
                item.conflicts.contains { $0.id == c.id } || container.discardedConflicts.contains(c.id)
            }
        }
    }

    /// Forgets an item whose delete the remote has (at version `tombstone`, when known).
    private func finishDelete(tombstone: Int64? = nil) throws {
        try container.mutate {
            try container.store.delete(id)
            container.items[id] = nil
            if let tombstone { container.settledDeletes[id] = tombstone }
        }
    }

    /// Brings back an item deleted here that the remote kept, as the remote has it.
    private func restore(_ w: WireItem) throws {
        try container.mutate {
            guard var item = container.items[id] else { return }
            item.deleted = false
            item.dirty = false
            item.metaDirty = false
            item.hasLocal = !item.hasContent
            item.localSHA = nil
            item.adopt(w)
            // Conflict versions resolved here before the delete stay resolved on the item that came back.
            let kept = w.conflicts.filter { !container.discardedConflicts.contains($0.id) }
            if kept != w.conflicts {
                container.pruneConflictFiles(id, old: item.conflicts, new: kept)
                item.conflicts = kept
                item.metaDirty = true
            }
            // It takes back the remote's name; a local item made since under that name moves to a free one
            // (renaming the item that came back instead would be a change of this device, newer than the
            // state another device may have deleted).
            try container.place(&item)
            // Back in the journal only if there is still something to push; a journal row for a clean item
            // would have the push loop pick it again and again.
            if item.isPending { try container.store.saveChanged(item) } else { try container.store.save(item) }
            container.items[id] = item
        }
        log.info("\(container.path(of: id)) was changed elsewhere while deleted here: kept")
    }

    // MARK: create or update

    /// Returns true when done, false to look again.
    private func pushItem(_ snap: Snapshot, pushedFirst: inout Set<String>) throws -> Bool {
        var snap = snap
        var item = snap.item
        if item.dirty {
            let upload = try container.contentForUpload(id)
            defer { upload.done() }
            if let generation = upload.generation { snap.generation = generation }
            let (sha, size) = try sha256OfFile(upload.path)
            item.remoteSHA = sha
            item.remoteSize = size
            item.size = size
            try uploadBlob(sha: sha, size: size, path: upload.path)
        }
        var wire = WireItem(id: id, parent: item.parent, name: item.name, kind: item.kind, mode: item.mode,
                            mtime: item.mtime, size: item.kind == .dir ? 0 : item.remoteSize,
                            sha256: item.hasContent ? item.remoteSHA : "", device: container.config.device,
                            xattrs: item.xattrs.mapValues { Data($0).base64EncodedString() },
                            conflicts: item.conflicts, target: item.target)
        if !item.dirty { wire.device = item.device.isEmpty ? container.config.device : item.device }
        let stored: WireItem
        if item.remoteVersion == 0 {
            // From the mark on, a local delete leaves a tombstone (the create may land) instead of forgetting the
            // item; an item deleted since the snapshot is not sent at all.
            let exists = try container.withLock { () throws -> Bool in
                guard container.items[id] != nil else { return false }
                let sent = String(decoding: try JSONEncoder().encode(wire), as: UTF8.self)
                try container.store.markCreateSent(id, sent)
                return true
            }
            if !exists { return true }
        }
        do {
            stored = try container.remote.putItem(wire, ifMatch: item.remoteVersion == 0 ? nil : item.remoteVersion)
        } catch let error as RemoteError {
            switch error {
            case .preconditionFailed(let current):
                if item.remoteVersion == 0, let current, let sent = try sentCreate() {
                    return try resolveOverLandedCreate(sent, current, snap: snap, pushed: item)
                }
                try resolve(current, snap: snap, pushed: item)
            case .notFound:
                // The remote forgot the item: create it afresh.
                try container.withLock { try container.store.forgetCreateSent(id) }
                try rebase(version: 0)
            case .conflict(_, let holder):
                // Pushed first once and still in the way (its own push settled otherwise): this item takes a
                // free name, as against any other holder.
                guard let holder, holder.id != id, movedAwayHere(holder), !pushedFirst.contains(holder.id) else {
                    try takeFreeName(pushed: item)
                    return false
                }
                // The item in the way leaves that name here (moved or deleted, not pushed yet): it goes first (or
                // the new folder it waits for). Not while a program writes it: this push waits (the push loop tries
                // again later).
                let first = container.withLock { container.sync.pushFirst(toFree: holder.id) }
                if waiting.contains(holder.id) || first.map({ $0 == id || waiting.contains($0) }) == true {
                    // A cycle of moves (an exchange, a rotation, or one through a new folder): this item steps
                    // aside on the remote, so that the one waiting for its name can take it; its own place goes
                    // at its next push.
                    guard item.remoteVersion != 0 else { try takeFreeName(pushed: item); return false }
                    try stepAside(wire, pushed: item)
                    return true
                }
                guard let first else { throw error }
                // A chain this long is not a real one: let the push loop try again later rather than recurse on.
                if waiting.count >= 32 { throw error }
                pushedFirst.insert(holder.id)
                try Pusher(container: container, id: first, waiting: waiting + [id]).run()
            case .misplaced(let why):
                // Done for now: what must go first (a revived parent) is the next push's choice.
                try giveWay(pushed: item, why: why)
                return true
            default:
                throw error
            }
            return false
        }
        try acknowledge(stored, snap: snap, pushed: item)
        return true
    }

    /// The state this device first sent to create the item, if recorded.
    private func sentCreate() throws -> WireItem? {
        guard let sent = try container.withLock({ try container.store.sentCreate(id) }) else { return nil }
        // The one written by a version that recorded only that a create went carries no state: "1".
        if sent == "1" { return nil }
        do { return try JSONDecoder().decode(WireItem.self, from: Data(sent.utf8)) } catch {
            throw StoreError.badValue(id: "sent:" + id, column: "meta", cause: "\(error)")
        }
    }

    /// A create of this device landed (nobody else makes this id) without an answer, and the remote moved on
    /// from it: another device changed or deleted the item after it saw it. What was sent is what this device
    /// and the remote have in common: what is unchanged here since is acknowledged as landed, and the
    /// remote's newer state is taken for it as a pull would take it; only what changed here since is pushed
    /// against it (a conflict, or edit against delete, only then). Returns true when done.
    private func resolveOverLandedCreate(_ sent: WireItem, _ current: WireItem, snap: Snapshot,
                                         pushed: Item) throws -> Bool {
        var toDownload: [String] = []
        var metaChanged = true
        let pending = try container.mutate { () throws -> Bool in
            guard var cur = container.items[id], !cur.deleted else { return true }
            let xattrs = cur.xattrs.mapValues { Data($0).base64EncodedString() }
            if cur.kind == .file && cur.dirty && pushed.remoteSHA == sent.sha256
                && (container.contentGeneration[id] ?? 0) == snap.generation {
                cur.dirty = false
                cur.localSHA = sent.sha256
            }
            if cur.parent == sent.parent && sameName(cur.name, sent.name) && cur.mode == sent.mode
                && cur.mtime == sent.mtime && xattrs == sent.xattrs && cur.conflicts == sent.conflicts {
                cur.metaDirty = false
            }
            cur.remoteSHA = sent.sha256
            cur.remoteSize = sent.size
            cur.device = sent.device
            metaChanged = cur.metaDirty
            try container.store.save(cur)
            container.items[id] = cur
            if cur.isPending { return true }
            try container.sync.applyOne(current, toDownload: &toDownload)
            // The puller may have refused the remote's place (a cycle here): the item is on the remote all the
            // same, and its place here goes there as a move (which gives way if the remote refuses it too).
            if var left = container.items[id], left.remoteVersion == 0 {
                left.remoteVersion = current.version
                left.metaDirty = true
                try container.store.saveChanged(left)
                container.items[id] = left
            }
            return false
        }
        for id in toDownload { container.downloads.start(id) }
        if !pending { return true }
        var base = snap
        base.item.remoteSHA = sent.sha256
        base.item.remoteSize = sent.size
        base.item.dirty = snap.item.kind == .file && pushed.remoteSHA != sent.sha256
        base.item.metaDirty = metaChanged
        try resolve(current, snap: base, pushed: pushed)
        return false
    }

    /// True when the item holding a name on the remote has left that place here, by a change still to push.
    private func movedAwayHere(_ holder: WireItem) -> Bool {
        container.withLock {
            // Only against the remote version this device last saw: a holder changed elsewhere since is a
            // conflict of its own, settled at its own turn, not ahead of it.
            guard let here = container.items[holder.id], here.isPending, here.remoteVersion == holder.version else {
                return false
            }
            return here.deleted || here.parent != holder.parent || !sameName(here.name, holder.name)
        }
    }

    /// Puts the item on the remote under a name of its own in the folder it goes to, to free the name it holds
    /// there; it stays pending here, where it already has its new place. Other devices may see that name until
    /// the item's next push lands.
    private func stepAside(_ wire: WireItem, pushed: Item) throws {
        var aside = wire
        aside.name = ".\(id).moving"
        let stored = try container.remote.putItem(aside, ifMatch: pushed.remoteVersion)
        log.info("\(container.path(of: id)) steps aside on the remote for a move that takes its name")
        try rebase(version: stored.version)
    }

    /// Another item holds the name on the remote: this one takes the next free name, here and there.
    /// If the item moved or was renamed here since the snapshot (the puller may have moved it out of the
    /// way already), that newer place is what the next try pushes: it is not renamed again.
    private func takeFreeName(pushed: Item) throws {
            try container.mutate {
                guard var cur = container.items[id], let parent = cur.parent,
                      parent == pushed.parent, sameName(cur.name, pushed.name) else { return }
                container.unlink(cur)
                cur.name = container.freeName(cur.name, in: parent, avoiding: cur.name)
                cur.metaDirty = true
                try container.store.saveChanged(cur)
                container.items[id] = cur
                container.children[parent, default: [:]][cur.name] = id
                container.notice(.added(parent: parent, name: cur.name))
            }
    }

    /// The remote refused the item's place. Either its parent is gone there (deleted elsewhere while this
    /// device put the item in it): the parent's tombstone is applied here, which revives the parent since it
    /// holds this item (edit wins over delete), and the parent's push goes first. Or the parent lies below
    /// the item there (two devices each moved one folder into the other): the move that reached the remote
    /// first wins, and this item goes back to where the remote has it (or, if that place is gone or below it
    /// here too, to the top of the container). Then the remote changes the puller refused meanwhile follow.
    private func giveWay(pushed: Item, why: String) throws {
        guard let parentID = pushed.parent else { return }
        let parent: WireItem?
        do { parent = try container.remote.item(parentID) } catch RemoteError.notFound { parent = nil }
        if let parent, parent.deleted || parent.kind != .dir {
            log.info("\(container.path(of: id)): its folder was deleted elsewhere; the folder comes back")
            container.sync.apply([parent], token: nil)
            return
        }
        let current: WireItem?
        do { current = try container.remote.item(id) } catch RemoteError.notFound { current = nil }
        try container.mutate {
            guard var cur = container.items[id], !cur.deleted, cur.parent == pushed.parent,
                  sameName(cur.name, pushed.name) else { return }
            // Where the remote has it (an item holding that name here is stale: `place` unlists it), or else
            // the top of the container under a name free here.
            var target = (parent: WireRules.documentsID, name: cur.name)
            if let current, !current.deleted, let p = current.parent, let dir = container.items[p], dir.isDirectory,
               !dir.deleted, !container.isAncestor(id, of: p) {
                target = (p, current.name)
            } else if container.children[target.parent]?[target.name] != nil {
                target.name = container.freeName(target.name, in: target.parent)
            }
            log.info("\(container.pathLocked(id)): the remote refused its place (\(why)); it goes back")
            container.unlink(cur)
            cur.parent = target.parent
            cur.name = target.name
            try container.place(&cur)
            try container.store.saveChanged(cur)
            container.items[id] = cur
        }
        container.sync.refetchRefused()
    }

    private func uploadBlob(sha: String, size: Int64, path: String) throws {
        setUploading(true, done: 0, total: size)
        defer { setUploading(false, done: size, total: size) }
        if size > 0, try !container.remote.hasBlob(sha256: sha) {
            try container.remote.uploadBlob(sha256: sha, size: size, fromFile: path) { done in
                setUploading(true, done: done, total: size)
                return true
            }
        }
    }

    private func setUploading(_ on: Bool, done: Int64, total: Int64) {
        container.withLock {
            container.updateTransfer(id) {
                $0.isUploading = on
                $0.uploadedBytes = done
                $0.uploadTotal = total
            }
        }
    }

    /// Records what the remote stored. Content and metadata changed here after the snapshot stay pending.
    private func acknowledge(_ stored: WireItem, snap: Snapshot, pushed: Item) throws {
        try container.mutate {
            guard var cur = container.items[id] else { return }
            cur.remoteVersion = stored.version
            cur.remoteSHA = stored.sha256
            cur.remoteSize = stored.size
            cur.device = stored.device
            container.pruneConflictFiles(id, old: cur.conflicts, new: stored.conflicts)
            cur.conflicts = stored.conflicts
            try container.forgetUnpushed(listed: stored.conflicts)
            let unchanged = (container.contentGeneration[id] ?? 0) == snap.generation
            if snap.item.dirty && unchanged && cur.dirty {
                cur.dirty = false
                cur.localSHA = stored.sha256
                cur.size = stored.size
            }
            if cur.parent == pushed.parent && sameName(cur.name, pushed.name) && cur.mode == pushed.mode
                && cur.mtime == pushed.mtime && cur.xattrs == pushed.xattrs {
                cur.metaDirty = false
            }
            try container.store.save(cur)
            container.items[id] = cur
            container.updateTransfer(id) { $0.uploadError = nil }
        }
    }

    /// Sets the version the next conditional write is made against.
    private func rebase(version: Int64) throws {
        try container.mutate {
            guard var cur = container.items[id] else { return }
            cur.remoteVersion = version
            try container.store.save(cur)
            container.items[id] = cur
        }
    }

    /// The tombstone carries what this device changed in the state being pushed (its content when dirty, as
    /// the current content or as a conflict version of this device; its metadata when changed): this write
    /// already landed (its answer was lost) and another device deleted the item after it saw that change
    /// (having maybe moved or changed it further itself). Not a concurrent edit: the delete wins, as it would
    /// have had the answer arrived. False (edit wins) when anything of this device's change differs, here or
    /// there, but the name (the puller may have moved this item out of the way of a new item that took its
    /// name meanwhile).
    private func acceptDelete(_ current: WireItem, snap: Snapshot, pushed: Item) throws -> Bool {
        let xattrs = pushed.xattrs.mapValues { Data($0).base64EncodedString() }
        let contentThere = !snap.item.dirty || pushed.kind == .dir || container.withLock { keptAsConflict(current, pushed: pushed) }
            || (current.sha256 == pushed.remoteSHA && current.size == pushed.remoteSize)
        let metaThere = !snap.item.metaDirty
            || (current.parent == pushed.parent && current.mode == pushed.mode && current.mtime == pushed.mtime
                && current.xattrs == xattrs && current.conflicts == pushed.conflicts)
        guard contentThere && metaThere else { return false }
        return try container.mutate {
            guard let cur = container.items[id], !cur.deleted,
                  (container.contentGeneration[id] ?? 0) == snap.generation,
                  cur.parent == pushed.parent, cur.mode == pushed.mode,
                  cur.mtime == pushed.mtime, cur.xattrs == pushed.xattrs, cur.conflicts == pushed.conflicts,
                  (container.children[id] ?? [:]).isEmpty else { return false }
            log.info("\(container.pathLocked(id)) was deleted elsewhere after this device's change landed: removed")
            try container.sync.removeRemotelyDeleted(cur, tombstone: current)
            return true
        }
    }

    /// This very write is listed there as this device's conflict version: it landed (the answer was lost) and
    /// another device's write won over it since, having seen it. Unless the item changed here since, the
    /// remote's state is taken as the puller takes it: pushing again would add a second version of the same
    /// write and make a version newer than what that device did next (a delete).
    private func settleLanded(_ current: WireItem, snap: Snapshot, pushed: Item) throws -> Bool {
        var toDownload: [String] = []
        let settled = try container.mutate { () throws -> Bool in
            guard keptAsConflict(current, pushed: pushed), var cur = container.items[id], !cur.deleted,
                  (container.contentGeneration[id] ?? 0) == snap.generation, cur.parent == pushed.parent,
                  sameName(cur.name, pushed.name), cur.mode == pushed.mode, cur.mtime == pushed.mtime,
                  cur.xattrs == pushed.xattrs, cur.conflicts == pushed.conflicts,
                  !cur.conflicts.contains(where: { container.unpushedConflicts.contains($0.id) }) else { return false }
            log.info("\(container.pathLocked(id)): this change landed and was kept as a conflict version elsewhere")
            cur.dirty = false
            cur.metaDirty = false
            cur.localSHA = pushed.remoteSHA
            try container.store.save(cur)
            container.items[id] = cur
            try container.sync.applyOne(current, toDownload: &toDownload)
            return true
        }
        for id in toDownload { container.downloads.start(id) }
        return settled
    }

    /// True when the remote lists the content being pushed, written at the same time, as a conflict version
    /// of this device that this device has not resolved: that write landed. Expects the lock held.
    private func keptAsConflict(_ current: WireItem, pushed: Item) -> Bool {
        let write = WireConflict(id: "", sha256: pushed.remoteSHA, size: pushed.remoteSize, mtime: pushed.mtime,
                                 device: container.config.device)
        return current.conflicts.contains { $0.isSameWrite(as: write) && !container.discardedConflicts.contains($0.id) }
    }

    /// What is left to push of an item equal to the remote's live version is not pushed: the remote has it
    /// already (this device's write landed and its answer was lost, or the same change was made there). Writing
    /// it again would make a newer version that overrides what other devices did to the item since (a delete).
    private func settleIfSame(_ cur: inout Item, as current: WireItem, snap: Snapshot, pushed: Item) {
        if cur.dirty && cur.kind == .file && pushed.remoteSHA == current.sha256 && cur.mtime == current.mtime
            && (container.contentGeneration[id] ?? 0) == snap.generation {
            cur.dirty = false
            cur.localSHA = current.sha256
            cur.takeContent(of: current)
        }
        if cur.metaDirty && cur.parent == current.parent && sameName(cur.name, current.name) && cur.mode == current.mode
            && cur.mtime == current.mtime && cur.xattrs.mapValues({ Data($0).base64EncodedString() }) == current.xattrs {
            cur.metaDirty = false
        }
    }

    /// The remote moved on since this device last saw the item: merge, or keep both contents.
    private func resolve(_ current: WireItem?, snap: Snapshot, pushed: Item) throws {
        guard let current else { return try rebase(version: 0) }
        if current.deleted, try acceptDelete(current, snap: snap, pushed: pushed) { return }
        // A create that meets an item already there has no version of its own to compare with: its remoteSHA
        // (the empty content) is not a content the remote had, and an item emptied there is a change too.
        let theirContentUnchanged = snap.item.remoteVersion != 0 && current.sha256 == snap.item.remoteSHA
        if current.deleted || !snap.item.dirty || current.sha256 == pushed.remoteSHA || theirContentUnchanged
            || current.kind != .file {
            // Edit against delete (the edit revives it), a change on one side only, or the same content on both
            // sides: this device's change goes on top of the remote's version, keeping what the remote changed.
            return try container.mutate {
                guard var cur = container.items[id] else { return }
                if !current.deleted {
                    // The content of the version the next write goes on top of, also while dirty: the next 412
                    // compares with it to tell whether the remote's content changed since.
                    cur.remoteSHA = current.sha256
                    cur.remoteSize = current.size
                }
                if !cur.dirty && !current.deleted {
                    cur.size = current.size
                    cur.device = current.device
                    if cur.hasLocal && cur.localSHA != current.sha256 { container.notice(.changed(id, content: true)) }
                }
                if !cur.metaDirty && !current.deleted {
                    // Only the content changed here: take the remote's name, place, mode and attributes.
                    let moved = cur.parent != current.parent || !sameName(cur.name, current.name)
                    // Not below itself here (another item's move not yet pushed): its place here goes up as a
                    // move instead, and gives way if the remote refuses it.
                    if moved, let p = current.parent, container.items[p] == nil || container.isAncestor(id, of: p) {
                        cur.metaDirty = true
                    } else if moved {
                        container.unlink(cur)
                        cur.parent = current.parent
                        cur.name = current.name
                        try container.place(&cur)
                    }
                    cur.mode = current.mode
                    cur.xattrs = current.xattrs.compactMapValues { Data(base64Encoded: $0).map { [UInt8]($0) } }
                    container.notice(.changed(id, content: false))
                }
                // Reviving a tombstone: the conflict versions it lists went with the delete (whoever deleted saw
                // them); those this device knows come back with its edit.
                let conflicts = current.deleted
                    ? cur.conflicts.filter { !container.discardedConflicts.contains($0.id) }
                    : container.mergedConflicts(local: cur.conflicts, remote: current.conflicts)
                try container.forgetUnpushed(listed: current.conflicts)
                container.pruneConflictFiles(id, old: cur.conflicts, new: conflicts)
                cur.conflicts = conflicts
                if !current.deleted { settleIfSame(&cur, as: current, snap: snap, pushed: pushed) }
                if cur.conflicts != current.conflicts { cur.metaDirty = true }
                cur.remoteVersion = current.version
                try container.store.save(cur)
                container.items[id] = cur
            }
        }
        if try settleLanded(current, snap: snap, pushed: pushed) { return }
        // Both sides changed the content: the later modification wins, ties to the greater device name.
        let mine = WireConflict(id: container.config.environment.randomHex(8), sha256: pushed.remoteSHA, size: pushed.remoteSize,
                                mtime: pushed.mtime, device: container.config.device)
        let theirs = WireConflict(id: container.config.environment.randomHex(8), sha256: current.sha256, size: current.size,
                                  mtime: current.mtime, device: current.device)
        let iWin = (mine.mtime, mine.device) > (theirs.mtime, theirs.device)
        log.info("conflict on \(container.path(of: id)): \(iWin ? "this device" : current.device) wins")
        try container.mutate {
            guard var cur = container.items[id] else { return }
            cur.remoteVersion = current.version
            let loser = iWin ? theirs : mine
            try container.forgetUnpushed(listed: current.conflicts)
            var conflicts = container.mergedConflicts(local: cur.conflicts, remote: current.conflicts)
            if !conflicts.contains(where: { $0.isSameWrite(as: loser) }) {
                try container.rememberUnpushed([loser.id])
                conflicts.append(loser)
            }
            container.pruneConflictFiles(id, old: cur.conflicts, new: conflicts)
            cur.conflicts = conflicts
            cur.metaDirty = true
            if !iWin {
                // Their content becomes current; ours is kept as the conflict version just listed.
                let unchanged = (container.contentGeneration[id] ?? 0) == snap.generation
                if unchanged {
                    cur.dirty = false
                    cur.localSHA = pushed.remoteSHA
                }
                cur.takeContent(of: current)
                cur.mtime = current.mtime
                container.notice(.changed(id, content: true))
            }
            try container.store.saveChanged(cur)
            container.items[id] = cur
        }
    }
}
