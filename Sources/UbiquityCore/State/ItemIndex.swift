// The index of items by id, compact enough for a million items (about 150 bytes each, against 1.5 KB as a
// dictionary of `Item`s): each item is a fixed-size `PackedItem` in pages of slots, found through an open-
// addressing table of slot numbers. Ids, parents and hashes are codes, not Strings: the 32 hex digits of an id
// are 16 bytes, a sha256 is 32. What is rare (xattrs, conflicts, a link target, an access time, a folder's entry
// time, a local hash other than the remote's, a remote size other than the shown size, a hash that is not 64
// hex digits) sits in a side table by slot.
//
// What must hold:
// - `index[id] = item` and then `index[id]` gives back an equal `Item`, for every field and every value
//   (ItemIndexTests round-trips each one); nothing of an item is lost by packing it.
// - A code stands for exactly one id: 32 lowercase hex digits not starting with 16 f's pack into the code
//   itself; every other id gets a number in `IDTable.shared` (which only grows), coded with `hi` all ones.
// - The hash table holds slot + 1 of every live slot (0: empty), at most half full; removal shifts the probe
//   chain back, so a lookup stops at the first empty bucket. A free slot is in `free` and not live.
// - While a mutation runs, every write records what it overwrote (`undo`), for `rollBack`.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `IDTable`'s is a leaf.
import Foundation
import UbiquityBase

/// An item id in 16 bytes (see the header).
struct ItemCode: Hashable {
    var hi: UInt64
    var lo: UInt64

    /// The parent of the root.
    static let none = ItemCode(hi: .max, lo: .max)

    init(hi: UInt64, lo: UInt64) {
        self.hi = hi
        self.lo = lo
    }

    init(_ id: String) {
        if let (hi, lo) = Hex.parse128(id), hi != .max { self.init(hi: hi, lo: lo) } else {
            self.init(hi: .max, lo: IDTable.shared.number(of: id))
        }
    }

    init(_ id: String?) { self = id.map { ItemCode($0) } ?? .none }

    /// The code of the id spelled by these UTF-8 bytes.
    init(bytes b: UnsafeBufferPointer<UInt8>) {
        if b.count == 32, let hi = Hex.word(b, 0), let lo = Hex.word(b, 16), hi != .max { self.init(hi: hi, lo: lo) } else {
            self.init(hi: .max, lo: IDTable.shared.number(of: String(decoding: b, as: UTF8.self)))
        }
    }

    var string: String { hi == .max ? IDTable.shared.string(lo) : Hex.format(hi, lo) }
    var optionalString: String? { self == .none ? nil : string }
}

/// Strings given numbers, for ids that do not pack and for device names. Numbers are never reused.
final class IDTable: Sendable {
    static let shared = IDTable()
    static let devices = IDTable()

    private struct Table {
        var strings: [String] = []
        /// By bytes: two canonically equivalent spellings are two ids.
        var numbers: [[UInt8]: UInt64] = [:]
        /// The bytes last asked for by `number(of: bytes)`, and their number.
        var last: (bytes: [UInt8], number: UInt64)?

        mutating func number(of key: [UInt8], _ s: @autoclosure () -> String) -> UInt64 {
            if let n = numbers[key] { return n }
            let n = UInt64(strings.count)
            strings.append(s())
            numbers[key] = n
            return n
        }
    }
    private let table = Locked(Table())

    func number(of s: String) -> UInt64 {
        let key = Array(s.utf8)
        return table.withLock { $0.number(of: key, s) }
    }

    /// The number of the string spelled by these UTF-8 bytes (the load of the store; the last one is kept, as
    /// most rows name the same device as the one before).
    func number(of bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        table.withLock { t in
            if let last = t.last, last.bytes.elementsEqual(bytes) { return last.number }
            let key = Array(bytes)
            let n = t.number(of: key, String(decoding: bytes, as: UTF8.self))
            t.last = (key, n)
            return n
        }
    }

    func string(_ n: UInt64) -> String { table.withLock { $0.strings[Int(n)] } }
}

/// Lowercase hex digits to and from 64-bit words.
/// The open-addressing tables of the index and of the name tables: entry numbers plus one (0: an empty
/// bucket), linear probing, a power-of-two size.
enum ProbeTable {
    /// Empties bucket `hole` and shifts back every entry of the chain after it that may sit in it (linear
    /// probing's deletion). `hash` is the hash of an entry (by its number), taken modulo the table's size.
    static func empty(_ table: inout [Int32], at hole: Int, hash: (Int32) -> Int) {
        var hole = hole
        table[hole] = 0
        var j = hole
        while true {
            j = (j + 1) & (table.count - 1)
            if table[j] == 0 { return }
            let h = hash(table[j] - 1) & (table.count - 1)
            let between = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j)
            if !between {
                table[hole] = table[j]
                table[j] = 0
                hole = j
            }
        }
    }
}

enum Hex {
    /// The 128 bits of exactly 32 lowercase hex digits; nil for anything else.
    static func parse128(_ s: String) -> (UInt64, UInt64)? {
        var s = s
        return s.withUTF8 { b in
            guard b.count == 32, let hi = word(b, 0), let lo = word(b, 16) else { return nil }
            return (hi, lo)
        }
    }

    /// 4 words from exactly 64 lowercase hex digits.
    static func parse256(_ s: String) -> (UInt64, UInt64, UInt64, UInt64)? {
        var s = s
        return s.withUTF8 { b in
            guard b.count == 64, let w0 = word(b, 0), let w1 = word(b, 16), let w2 = word(b, 32), let w3 = word(b, 48)
            else { return nil }
            return (w0, w1, w2, w3)
        }
    }

    /// The word of the 16 digits at `start`; nil if one is not a lowercase hex digit.
    static func word(_ b: UnsafeBufferPointer<UInt8>, _ start: Int) -> UInt64? {
        var w: UInt64 = 0
        for i in start..<start + 16 {
            let c = b[i]
            let v: UInt8
            if c &- 48 < 10 { v = c &- 48 } else if c &- 97 < 6 { v = c &- 87 } else { return nil }
            w = w << 4 | UInt64(v)
        }
        return w
    }

    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    static func format(_ words: UInt64...) -> String {
        String(unsafeUninitializedCapacity: words.count * 16) { buf in
            for (w, word) in words.enumerated() {
                for i in 0..<16 { buf[w * 16 + i] = digits[Int(word >> (60 - 4 * UInt64(i)) & 0xf)] }
            }
            return words.count * 16
        }
    }
}

/// A sha256 as 32 bytes.
struct Digest: Equatable {
    var a: UInt64 = 0, b: UInt64 = 0, c: UInt64 = 0, d: UInt64 = 0

    init?(_ s: String) {
        guard let w = Hex.parse256(s) else { return nil }
        (a, b, c, d) = w
    }
    init?(bytes w: UnsafeBufferPointer<UInt8>) {
        guard w.count == 64, let a = Hex.word(w, 0), let b = Hex.word(w, 16), let c = Hex.word(w, 32),
              let d = Hex.word(w, 48) else { return nil }
        (self.a, self.b, self.c, self.d) = (a, b, c, d)
    }

    init() {}

    var string: String { Hex.format(a, b, c, d) }
}

/// One item as the index holds it (see the header); `Extras` hold the rare fields.
struct PackedItem {
    var code: ItemCode
    var parent: ItemCode
    var name: String
    var mtime: Int64
    var ctime: Int64
    var size: Int64
    var remoteVersion: Int64
    var remoteSHA: Digest
    var mode: UInt32
    var device: UInt32
    var kind: ItemKind
    var flags: Flags

    struct Flags: OptionSet {
        let rawValue: UInt16
        static let live = Flags(rawValue: 1 << 0)
        static let hasLocal = Flags(rawValue: 1 << 1)
        static let dirty = Flags(rawValue: 1 << 2)
        static let metaDirty = Flags(rawValue: 1 << 3)
        static let deleted = Flags(rawValue: 1 << 4)
        static let pinned = Flags(rawValue: 1 << 5)
        static let excluded = Flags(rawValue: 1 << 6)
        static let localOnlyAbove = Flags(rawValue: 1 << 7)
        static let extras = Flags(rawValue: 1 << 8)
        /// The remote hash is in `remoteSHA` (else empty, or in the extras).
        static let remoteDigest = Flags(rawValue: 1 << 9)
        /// The local hash equals the remote one (else nil, or in the extras).
        static let localIsRemote = Flags(rawValue: 1 << 10)
    }

    static let free = PackedItem(code: .none, parent: .none, name: "", mtime: 0, ctime: 0, size: 0, remoteVersion: 0,
                                 remoteSHA: Digest(), mode: 0, device: 0, kind: .file, flags: [])

    /// The fields of an `Item` that do not fit the packed form; nil when there are none.
    struct Extras {
        var xattrs: [String: [UInt8]] = [:]
        var conflicts: [WireConflict] = []
        var target: String?
        var atime: Int64?
        var owner: Owner?
        var entriesMTime: Int64 = 0
        var localSHA: String?
        var remoteSHA: String?
        var remoteSize: Int64?
        var cappedModeBits: UInt32 = 0
    }

    init(code: ItemCode, parent: ItemCode, name: String, mtime: Int64, ctime: Int64, size: Int64,
         remoteVersion: Int64, remoteSHA: Digest, mode: UInt32, device: UInt32, kind: ItemKind, flags: Flags) {
        (self.code, self.parent, self.name, self.mtime, self.ctime, self.size) = (code, parent, name, mtime, ctime, size)
        (self.remoteVersion, self.remoteSHA, self.mode, self.device) = (remoteVersion, remoteSHA, mode, device)
        (self.kind, self.flags) = (kind, flags)
    }

    /// Packs `item`; the second part is what did not fit.
    static func pack(_ item: Item) -> (PackedItem, Extras?) {
        var flags: Flags = [.live]
        let pairs: [(Bool, Flags)] = [(item.hasLocal, .hasLocal), (item.dirty, .dirty), (item.metaDirty, .metaDirty),
                                      (item.deleted, .deleted), (item.pinned, .pinned), (item.excluded, .excluded),
                                      (item.localOnlyAbove, .localOnlyAbove)]
        for (on, flag) in pairs where on { flags.insert(flag) }
        var extras = Extras(xattrs: item.xattrs, conflicts: item.conflicts, target: item.target, atime: item.atime,
                            owner: item.owner, entriesMTime: item.entriesMTime, cappedModeBits: item.cappedModeBits)
        var digest = Digest()
        if let d = Digest(item.remoteSHA) { digest = d; flags.insert(.remoteDigest) } else if !item.remoteSHA.isEmpty {
            extras.remoteSHA = item.remoteSHA
        }
        if let local = item.localSHA {
            if local.utf8.elementsEqual(item.remoteSHA.utf8) { flags.insert(.localIsRemote) } else { extras.localSHA = local }
        }
        if item.remoteSize != item.size { extras.remoteSize = item.remoteSize }
        let rare = !extras.xattrs.isEmpty || !extras.conflicts.isEmpty || extras.target != nil || extras.atime != nil
            || extras.owner != nil || extras.entriesMTime != 0 || extras.localSHA != nil || extras.remoteSHA != nil
            || extras.remoteSize != nil || extras.cappedModeBits != 0
        if rare { flags.insert(.extras) }
        let packed = PackedItem(code: ItemCode(item.id), parent: ItemCode(item.parent), name: item.name,
                                mtime: item.mtime, ctime: item.ctime, size: item.size, remoteVersion: item.remoteVersion,
                                remoteSHA: digest, mode: item.mode, device: UInt32(IDTable.devices.number(of: item.device)),
                                kind: item.kind, flags: flags)
        return (packed, rare ? extras : nil)
    }

    /// The item this packs, with its extras.
    func unpack(_ extras: Extras?) -> Item {
        let x = extras ?? Extras()
        let remote = flags.contains(.remoteDigest) ? remoteSHA.string : (x.remoteSHA ?? "")
        return Item(id: code.string, parent: parent.optionalString, name: name, kind: kind, mode: mode, mtime: mtime,
                    ctime: ctime, size: size, remoteVersion: remoteVersion, remoteSHA: remote,
                    remoteSize: x.remoteSize ?? size, device: IDTable.devices.string(UInt64(device)),
                    hasLocal: flags.contains(.hasLocal), localSHA: flags.contains(.localIsRemote) ? remote : x.localSHA,
                    dirty: flags.contains(.dirty), metaDirty: flags.contains(.metaDirty),
                    deleted: flags.contains(.deleted), pinned: flags.contains(.pinned), xattrs: x.xattrs,
                    conflicts: x.conflicts, target: x.target, atime: x.atime, owner: x.owner,
                    entriesMTime: x.entriesMTime,
                    excluded: flags.contains(.excluded), localOnlyAbove: flags.contains(.localOnlyAbove),
                    cappedModeBits: x.cappedModeBits)
    }

    /// Local-only by itself, as `Item.isLocalOnlyItself`, from the packed fields.
    var isLocalOnlyItself: Bool {
        kind == .fifo || kind == .socket || flags.contains(.excluded)
            || WireRules.staysOnOneDevice(name, inRoot: { parent.optionalString == WireRules.rootID })
    }
}

/// The index of items by id. While a mutation runs, every write records what it overwrote, for a rollback.
struct ItemIndex {
    private static let pageBits = 12
    private static let pageSize = 1 << pageBits
    private var pages: [ContiguousArray<PackedItem>] = []
    private var extras: [Int32: PackedItem.Extras] = [:]
    /// Slot + 1 of every live item, by the hash of its code (0: empty).
    private var table = [Int32](repeating: 0, count: 16)
    private var free: [Int32] = []
    private var slots = 0
    private(set) var count = 0
    var undo: [(String, Item?)]?

    subscript(id: String) -> Item? {
        get { slot(of: ItemCode(id)).map(item(at:)) }
        set {
            let code = ItemCode(id)
            let found = slot(of: code)
            if undo != nil {
                let old = found.map { item(at: $0) }
                undo!.append((id, old))
            }
            switch (found, newValue) {
            case (let s?, let item?): store(item, code: code, at: s)
            case (let s?, nil): remove(code, at: s)
            case (nil, let item?):
                var (p, x) = PackedItem.pack(item)
                p.code = code
                insert(p, x, code: code)
            case (nil, nil): break
            }
        }
    }

    /// Every live item not deleted that has a parent, folder by folder: the parent's id and entry count, then
    /// each entry's code, name and kind, without unpacking it.
    func forEachPlaced(_ body: (_ parent: String, _ size: Int, _ code: ItemCode, _ name: String, _ isDirectory: Bool) -> Void) {
        var byParent: [ItemCode: [Int32]] = [:]
        for s in liveSlots {
            let p = packed(s)
            guard !p.flags.contains(.deleted), p.parent != .none else { continue }
            byParent[p.parent, default: []].append(s)
        }
        for (parent, slots) in byParent {
            let id = parent.string
            for s in slots {
                let p = packed(s)
                body(id, slots.count, p.code, p.name, p.kind == .dir)
            }
        }
    }

    /// The item with this code.
    subscript(code code: ItemCode) -> Item? { slot(of: code).map(item(at:)) }

    /// The items whose packed flags include `flag` (.pinned, or .extras for the rare fields), unpacked.
    func values(with flag: PackedItem.Flags) -> [Item] {
        liveSlots.filter { flags($0).contains(flag) }.map(item(at:))
    }

    /// Adds an item packed from a row of the store (the load at start: its id is new, nothing to undo).
    mutating func insertLoaded(_ p: PackedItem) { insert(p, nil, code: p.code) }

    /// The kind of an item, without unpacking it.
    func kind(of id: String) -> ItemKind? { slot(of: ItemCode(id)).map { packed($0).kind } }

    /// Every item, unpacked one at a time as the sequence is walked (a scan of a million items does not hold
    /// a million `Item`s at once).
    var values: Values { Values(index: self, slots: liveSlots) }

    struct Values: Sequence {
        let index: ItemIndex
        let slots: [Int32]
        func makeIterator() -> AnyIterator<Item> {
            var inner = slots.makeIterator()
            return AnyIterator { inner.next().map(index.item(at:)) }
        }
        var underestimatedCount: Int { slots.count }
    }

    /// Makes room for `n` items in all (before a load, so the table is not rebuilt on the way).
    mutating func reserve(_ n: Int) {
        while table.count < 2 * n { grow() }
    }

    mutating func rollBack() {
        guard let list = undo else { return }
        undo = nil
        for (id, old) in list.reversed() { self[id] = old }
    }

    /// Sets `localOnlyAbove` on every item from its parents (a walk up each chain, remembering the answer per
    /// folder), as `Item.markLocalOnlyAbove` does.
    mutating func markLocalOnlyAbove() {
        var known: [ItemCode: Bool] = [:]
        func localOnly(_ code: ItemCode) -> Bool {
            if let k = known[code] { return k }
            guard let s = slot(of: code) else { return false }
            let p = packed(s)
            let answer = p.isLocalOnlyItself || (p.parent != .none && localOnly(p.parent))
            known[code] = answer
            return answer
        }
        for s in liveSlots {
            let parent = packed(s).parent
            let above = parent != .none && localOnly(parent)
            update(s) { if above { $0.flags.insert(.localOnlyAbove) } else { $0.flags.remove(.localOnlyAbove) } }
        }
    }

    // MARK: slots

    private var liveSlots: [Int32] {
        var out: [Int32] = []
        out.reserveCapacity(count)
        for s in 0..<slots where flags(Int32(s)).contains(.live) { out.append(Int32(s)) }
        return out
    }

    private func packed(_ s: Int32) -> PackedItem {
        pages[Int(s) >> ItemIndex.pageBits][Int(s) & (ItemIndex.pageSize - 1)]
    }

    // One field of a slot, read without copying the whole item (and retaining its name).
    private func code(_ s: Int32) -> ItemCode { ItemIndex.code(s, in: pages) }
    private static func code(_ s: Int32, in pages: [ContiguousArray<PackedItem>]) -> ItemCode {
        pages[Int(s) >> pageBits][Int(s) & (pageSize - 1)].code
    }
    private func flags(_ s: Int32) -> PackedItem.Flags {
        pages[Int(s) >> ItemIndex.pageBits][Int(s) & (ItemIndex.pageSize - 1)].flags
    }

    private mutating func update(_ s: Int32, _ change: (inout PackedItem) -> Void) {
        change(&pages[Int(s) >> ItemIndex.pageBits][Int(s) & (ItemIndex.pageSize - 1)])
    }

    private func item(at s: Int32) -> Item {
        let p = packed(s)
        return p.unpack(p.flags.contains(.extras) ? extras[s] : nil)
    }

    /// Packs `item` into slot `s`, under the code it is found by.
    private mutating func store(_ item: Item, code: ItemCode, at s: Int32) {
        var (p, x) = PackedItem.pack(item)
        p.code = code
        update(s) { $0 = p }
        extras[s] = x
    }

    private mutating func insert(_ p: PackedItem, _ x: PackedItem.Extras?, code: ItemCode) {
        if 2 * (count + 1) > table.count { grow() }
        let s: Int32
        if let reused = free.popLast() { s = reused } else {
            s = Int32(slots)
            slots += 1
            if Int(s) >> ItemIndex.pageBits == pages.count {
                var page = ContiguousArray<PackedItem>()
                page.reserveCapacity(ItemIndex.pageSize)
                page.append(contentsOf: repeatElement(PackedItem.free, count: ItemIndex.pageSize))
                pages.append(page)
            }
        }
        update(s) { $0 = p }
        extras[s] = x
        var b = bucket(code)
        while table[b] != 0 { b = (b + 1) & (table.count - 1) }
        table[b] = s + 1
        count += 1
    }

    private mutating func remove(_ code: ItemCode, at s: Int32) {
        update(s) { $0 = .free }
        extras[s] = nil
        free.append(s)
        count -= 1
        var hole = bucket(code)
        while table[hole] != s + 1 { hole = (hole + 1) & (table.count - 1) }
        ProbeTable.empty(&table, at: hole) { [pages] in ItemIndex.hash(ItemIndex.code($0, in: pages)) }
    }

    private func slot(of code: ItemCode) -> Int32? {
        var b = bucket(code)
        while table[b] != 0 {
            let s = table[b] - 1
            if self.code(s) == code { return s }
            b = (b + 1) & (table.count - 1)
        }
        return nil
    }

    private func bucket(_ code: ItemCode) -> Int { ItemIndex.hash(code) & (table.count - 1) }

    private static func hash(_ code: ItemCode) -> Int {
        let h = (code.hi &* 0x9E37_79B9_7F4A_7C15) ^ (code.lo &* 0xC2B2_AE3D_27D4_EB4F)
        return Int(truncatingIfNeeded: h ^ (h >> 29))
    }

    /// Doubles the table and places every live slot again.
    private mutating func grow() {
        table = [Int32](repeating: 0, count: table.count * 2)
        for s in liveSlots {
            var b = bucket(code(s))
            while table[b] != 0 { b = (b + 1) & (table.count - 1) }
            table[b] = s + 1
        }
    }
}
