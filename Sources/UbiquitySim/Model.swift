// What the simulation remembers of the operations it made, to judge the end state. The rules, precisely:
//
// NOTHING LOST. Every content a device closed or flushed (create, write, append, a write left open and then
// closed, truncate, promote) is recorded as (item, SHA-256). At the end it must be the current content of some
// live file or one of its conflict versions on the remote, unless it was deliberately superseded: some device,
// while that content was what it showed for the item (its current content: the local bytes while dirty, else
// the remote's; or a conflict version it listed), replaced the content (write, append, truncate, a write
// opened, promote of a conflict version), removed the item (unlink, rmdir, rename over it), or resolved that
// conflict version (discard, keep-current). Writes carry a unique tag, so a SHA names one write.
//
// NO RESURRECTION. A delete (unlink, rmdir, rename over) by device E of item I is contested when another
// device D made a deliberate operation on I (any edit, rename, move, chmod, conflict resolution, or for a
// directory: any of those on an item below it, creating or moving an item below it) that E had not seen when
// it deleted: the operation had not reached the remote, or reached it at a version newer than E's version of
// I (for an operation on a directory through an item below: newer than E's feed position). An operation below
// a directory counts for it because the operation wins over the delete of that item, which deleting the
// directory took, and the item needs its directories back. For the same reason an item whose delete was
// contested and that is live at the end brings back the directories above it where the remote has it (an
// edit made while the item was elsewhere lands where the item is by then). An uncontested delete must hold at
// the end: I is not live on the remote. A resolved conflict version (discard, promote, keep-current) is listed
// nowhere at the end.
import Foundation

struct Model {
    struct Written { var item, sha, device: String; var step: Int; var what: String }
    /// An operation on `item`, or on `child` below the directory `item` (`via`: the child's parent then).
    struct Op { var item, device: String; var step: Int; var child, via: String?; var reachedVersion: Int64? }
    struct Delete { var item, device: String; var step: Int; var sawVersion: Int64; var feed: Int64 }

    var written: [Written] = []
    var superseded: Set<String> = []
    var ops: [Op] = []
    var deletes: [Delete] = []
    /// Resolved conflict version ids: by whom and when.
    var resolved: [String: (device: String, step: Int)] = [:]
    var writeCounter = 0

    static func key(_ item: String, _ sha: String) -> String { item + "/" + sha }

    mutating func op(_ device: String, _ item: String, step: Int, child: String? = nil, via: String? = nil) {
        ops.append(Op(item: item, device: device, step: step, child: child, via: via, reachedVersion: nil))
    }

    mutating func resolve(_ conflict: String, _ device: String, _ step: Int) {
        if resolved[conflict] == nil { resolved[conflict] = (device, step) }
    }

    /// A write of `item` (below `parent`) by `device` was applied at `version`: its operations so far have
    /// reached the remote.
    mutating func reached(device: String, item: String, parent: String?, version: Int64) {
        for i in ops.indices where ops[i].device == device && ops[i].reachedVersion == nil {
            if ops[i].child == nil ? ops[i].item == item : (ops[i].child == item && ops[i].via == parent) {
                ops[i].reachedVersion = version
            }
        }
    }

    /// The operation of another device that makes the delete contested, if any.
    func contest(_ d: Delete) -> Op? {
        ops.first { op in
            guard op.item == d.item, op.device != d.device else { return false }
            guard let v = op.reachedVersion else { return true }
            return op.child == nil ? v > d.sawVersion : v > d.feed
        }
    }
}
