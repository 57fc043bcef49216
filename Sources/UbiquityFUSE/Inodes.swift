// The inode table: FUSE node ids for the core's stable item ids, with the kernel's lookup counts, and the inode
// number (`st_ino`, `d_ino`) each node shows. The two are different things. A node id names the kernel's inode
// while the kernel holds it: every entry reply adds one lookup; forget subtracts; the node id is dropped at zero,
// and is never given out twice (an item forgotten and met again gets a new one), so entry replies keep
// generation 0. The inode number is a property of the item (`number`): a function of its id, so it stays the
// same across forgets, remounts, evictions and renames, on every mount of the store, and is never another
// item's (ids are 128 random bits). GNU tar, git, rsync -H and find rely on it, and the kernel forgets inodes
// whenever memory is short. One event renumbers an item: its content replaced while programs held the old
// one open (`retire`), which is what a file replaced by a rename is on ext4: the holders keep the old number
// through the old node, the name leads to a new number (so `tail -F` follows the new file). That count is kept
// for the mount's life only: after a remount such an item shows its first number again. The root is node 1
// and inode 1, and is permanent.
//
// What must hold: all state is read and changed under `table`'s lock, a leaf (nothing is called while it is held).
// `remember` counts each entry reply (given back with `forget` when the reply does not reach the kernel) and
// `forget` takes the kernel's counts, so the counts are the kernel's; an underflow is a bug (asserted in a debug
// build, clamped in a release one). Node ids only grow (`next`), and both maps drop a node together, but for a
// retired node (`retire`) and the node a save by rename left unlinked (`merge`), which `byID` has already let
// go while the kernel still holds them.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): a leaf.
import Foundation
import UbiquityBase

/// Every loop thread uses it; all its state is in `table`.
final class InodeTable: Sendable {
    static let rootIno: UInt64 = 1
    private let rootID: String
    private let table: Locked<Table>

    init(rootID: String) {
        self.rootID = rootID
        table = Locked(Table(rootID: rootID))
    }

    /// The inode number programs see for the node `id` (an item's or a virtual node's id), whether or not the
    /// kernel holds it.
    func number(_ id: String) -> UInt64 {
        number(id, renumbered: id == rootID ? 0 : table.withLock { $0.renumbered[id] ?? 0 })
    }

    /// The inode number shown through node `ino`: its item's as it was when the node was made (a retired node
    /// keeps the number its holders saw); nil: not held.
    func number(ofNode ino: UInt64) -> UInt64? {
        guard let (id, renumbered) = table.withLock({ $0.byIno[ino].map { ($0.id, $0.renumbered) } }) else { return nil }
        return number(id, renumbered: renumbered)
    }

    /// 1 for the root, else 62 bits of the FNV-1a hash of the id (and of how often it was renumbered), with bit
    /// 62 set for virtual nodes (so no virtual node shares an item's number), never 0 or 1. Item ids are 128
    /// random bits: two items share a number with odds of about n²/2⁶³ (one in ten million for a million items).
    private func number(_ id: String, renumbered: UInt32) -> UInt64 {
        if id == rootID { return InodeTable.rootIno }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in id.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        if renumbered > 0 { for byte in "#\(renumbered)".utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 } }
        let number = hash & (1 << 62 - 1) | (NodeID(parsing: id).isVirtual ? 1 << 62 : 0)
        return number < 2 ? number + 2 : number
    }

    /// The item id of an inode the kernel holds.
    func id(_ ino: UInt64) -> String? { table.withLock { $0.byIno[ino]?.id } }

    /// The inode of an item if the kernel knows it.
    func known(_ id: String) -> UInt64? { table.withLock { $0.byID[id] } }

    /// The inode for an item, counting one more lookup by the kernel (call once per entry reply).
    func remember(_ id: String) -> UInt64 { table.withLock { $0.remember(id) } }

    /// Gives the item of `ino` a new node, and a new inode number, at its next lookup; `ino` stays the item's,
    /// with the number it had, for the kernel's handles and lookups on it until they are forgotten
    /// (FileSystem.inodeHoldsAnotherContent says why).
    func retire(_ ino: UInt64) {
        guard ino != InodeTable.rootIno else { return }
        table.withLock { t in
            guard let id = t.byIno[ino]?.id, t.byID[id] == ino else { return }
            t.byID[id] = nil
            t.renumbered[id, default: 0] += 1
        }
    }

    /// After a save by rename (SavedOver): the node of the new file `moved`, which the kernel now has at the
    /// file's name, stands for the file `id` that went on with its content, and shows its number; the node `id`
    /// had, which the kernel takes as unlinked, stays `id`'s until forgotten.
    func merge(_ moved: String, into id: String) {
        table.withLock { t in
            guard let ino = t.byID[moved] else { return }
            t.byID[moved] = nil
            t.byID[id] = ino
            t.byIno[ino] = (id, t.byIno[ino]!.lookups, t.renumbered[id] ?? 0)
        }
    }

    /// The kernel dropped `count` lookups of an inode.
    func forget(_ ino: UInt64, _ count: UInt64) {
        guard ino != InodeTable.rootIno else { return }
        table.withLock { $0.forget(ino, count) }
    }

    /// Keeps the attributes of folder `id`, removed while the kernel holds its inode, for fstat(2) through
    /// descriptors still open on it (with link count 0, as ext4 answers: xfstests generic/035); they go with
    /// the inode.
    func keepRemoved(_ id: String, _ attributes: stat) {
        var st = attributes
        st.st_nlink = 0
        table.withLock { t in if let ino = t.byID[id] { t.removed[ino] = st } }
    }

    /// The attributes kept by `keepRemoved` for an inode.
    func removed(_ ino: UInt64) -> stat? { table.withLock { $0.removed[ino] } }

    /// Number of inodes the kernel holds (for tests and the status of the daemon).
    var count: Int { table.withLock { $0.byIno.count } }

    private struct Table {
        var byID: [String: UInt64] = [:]
        var byIno: [UInt64: (id: String, lookups: UInt64, renumbered: UInt32)] = [:]
        var removed: [UInt64: stat] = [:]
        /// How often each item was renumbered (`retire`), for the items that were.
        var renumbered: [String: UInt32] = [:]
        var next: UInt64 = 2

        init(rootID: String) {
            byID[rootID] = InodeTable.rootIno
            byIno[InodeTable.rootIno] = (rootID, 1, 0)
        }

        mutating func remember(_ id: String) -> UInt64 {
            if let ino = byID[id] {
                byIno[ino]!.lookups += 1
                return ino
            }
            let ino = next
            next += 1
            byID[id] = ino
            byIno[ino] = (id, 1, renumbered[id] ?? 0)
            return ino
        }

        mutating func forget(_ ino: UInt64, _ count: UInt64) {
            guard var entry = byIno[ino] else { return }
            assert(entry.lookups >= count, "lookup count underflow on inode \(ino)")
            entry.lookups -= min(count, entry.lookups)
            if entry.lookups == 0 {
                byIno[ino] = nil
                removed[ino] = nil
                if byID[entry.id] == ino { byID[entry.id] = nil } // not the newer inode of a retired one
            } else {
                byIno[ino] = entry
            }
        }
    }
}
