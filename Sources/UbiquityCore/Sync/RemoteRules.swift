// The rules of a remote state that the puller and the pusher share: how an item takes the remote's metadata and
// place, when it is detached here, and when a push and the remote agree. Steps inside one operation.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): run under the container's lock.
import Foundation
import UbiquityBase

/// The rules the puller and the pusher share: steps inside one operation.
extension CoreState {
    /// True when a live item below the directory has changes not yet pushed, or lives here only (a fifo kept
    /// in a folder deleted elsewhere keeps the folder, as an edit would). A folder kept over its delete elsewhere
    /// (`isRevival`) counts only for what it holds.
    func hasLocalChanges(below id: String) throws(StoreError) -> Bool {
        for child in (children[id] ?? [:]).values {
            guard let item = items[child] else { continue }
            if item.isLocalOnly { return true }
            if item.isPending && !item.deleted, try !isRevival(item) { return true }
            if item.isDirectory, try hasLocalChanges(below: child) { return true }
        }
        return false
    }

    /// True for a folder deleted on the remote that this device keeps, to put back over its tombstone, for the
    /// changes below it (`reviveDeletedFolder`), while that revival has not gone up.
    func isRevival(_ item: Item) throws(StoreError) -> Bool {
        guard item.isDirectory, item.metaDirty, !item.deleted, item.remoteVersion != 0 else { return false }
        return try store.revivedOver(item.id) == item.remoteVersion
    }

    /// True for a revival with no change left below it: it was kept for changes that have gone since (pushed
    /// elsewhere, moved out by the remote, undone here), and would come back empty on every device where it was
    /// deleted. It goes as the remote has it (`PushSide.dropNeedlessRevival`).
    func isNeedlessRevival(_ item: Item) throws(StoreError) -> Bool {
        guard try isRevival(item) else { return false }
        return try !hasLocalChanges(below: item.id)
    }

    /// Only the content changed here: the item takes the remote's name, place, mode and attributes.
    mutating func takeRemoteMetadata(_ cur: inout Item, from current: WireItem) throws {
        try takeRemotePlace(&cur, from: current)
        cur.takeMode(current.mode, capping: config.arrivingModeCap)
        cur.xattrs = Xattrs.fromWire(current.xattrs)
        notice(.changed(cur.id, content: false, elsewhere: true))
    }

    /// True when the item lost its name here to another item (`place`): its name is no choice of this device,
    /// and its newer state, yet to come in the feed, has its place.
    func isDetached(_ item: Item) -> Bool {
        item.parent.map { children[$0]?[item.name] != item.id } ?? false
    }

    /// The item takes the remote's name and place. Not below itself here (another item's move not yet pushed):
    /// its place here goes up as a move instead, and gives way if the remote refuses it.
    mutating func takeRemotePlace(_ cur: inout Item, from current: WireItem) throws {
        let moved = cur.place != current.place || isDetached(cur)
        if moved, let p = current.parent, items[p] == nil || isAncestor(cur.id, of: p) {
            cur.metaDirty = true
        } else if moved {
            try unlink(cur)
            cur.parent = current.parent
            cur.name = current.name
            try place(&cur)
        }
    }

    /// What is left to push of an item equal to the remote's live version is not pushed: the remote has it
    /// already (this device's write landed and its answer was lost, or the same change was made there). Writing
    /// it again would make a newer version that overrides what other devices did to the item since (a delete).
    ///
    mutating func settleIfSame(_ cur: inout Item, as current: WireItem, snap: PushSnapshot, pushed: Item) {
        if cur.dirty && cur.kind == .file && pushed.remoteSHA == current.sha256 && cur.mtime == current.mtime
            && (contentGeneration[cur.id] ?? 0) == snap.generation {
            cur.dirty = false
            cur.localSHA = current.sha256
            cur.takeContent(of: current)
        }
        if cur.metaDirty && cur.metadata == current.metadata { cur.metaDirty = false }
    }
}

/// A side of sync (PullSide, PushSide): its steps reach the container's state only as every operation does,
/// through the container's `read`, `mutate` and `update` (State.swift).
protocol SyncSide {
    var container: Container { get }
}

extension SyncSide {
    func read<T, E: Error>(_ body: (CoreState) throws(E) -> T) throws(E) -> T { try container.read(body) }

    @discardableResult
    func mutate<T>(room: FullDiskRoom = .freeSpace, _ body: (inout CoreState) -> T) -> T? {
        container.mutate(room: room, body)
    }

    func update<T>(_ body: (inout CoreState) -> T) -> T { container.update(body) }

    func mutateThrowing<T>(room: FullDiskRoom = .evictions, _ body: (inout CoreState) throws -> T) throws -> T {
        try container.mutateThrowing(room: room, body)
    }
}
