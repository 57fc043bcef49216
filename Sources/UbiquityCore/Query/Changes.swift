// The change stream of the live query: the ids of items added, changed or removed (by a local request, the
// puller, the pusher or a transfer's progress) since the last drain. The container feeds it under its own
// lock with a cheap set insert; a consumer (the daemon's query server) drains it in batches, so a burst of
// changes to one item, or 10,000 creates, costs one entry each and arrives as a few batches.
//
// What must hold: `kept`'s lock is a leaf: nothing is called while it is held, so the container may note a change
// while holding its own lock (the store's writes and `updateTransfer` do) and the order is always the
// container's lock, then this one. While nobody follows, nothing is kept (`note` drops the id), so the set
// cannot grow without a reader. A drain hands out each id once; an id noted again after it comes out again.
import Foundation
import UbiquityBase

public final class ItemChanges: Sendable {
    private struct Kept {
        var pending: Set<String> = []
        /// Nothing is kept while nobody follows the container: the set must not grow for ever.
        var followed = false
    }
    private let kept = Locked(Kept())

    public init() {}

    /// Records that item `id` changed (its entry, attributes, content or transfer state). Lock order: the
    /// container's lock, then this one.
    func note(_ id: String) {
        kept.withLock { k in if k.followed { k.pending.insert(id) } }
    }

    /// Starts or stops keeping changes; stopping forgets what was kept.
    public func follow(_ on: Bool) {
        kept.withLock { k in
            k.followed = on
            if !on { k.pending = [] }
        }
    }

    /// The ids changed since the last drain, and forgets them.
    public func drain() -> Set<String> {
        kept.withLock { k in
            defer { k.pending = [] }
            return k.pending
        }
    }
}
