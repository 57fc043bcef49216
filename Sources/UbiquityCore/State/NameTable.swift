// Names of a directory's entries, compared byte for byte as POSIX file systems do. Swift's String equality
// treats canonically equivalent strings (NFC "é" and NFD "e" + accent) as equal; a file system must not, or
// two distinct names would collide.
//
// What must hold: two names are the same entry only when they are the same bytes (`sameName`): no
// normalisation and no case folding. The count of subdirectories stays exact because an item's kind never
// changes: each name set is sorted once (`unsorted`), and a name set again or removed leaves `directoryNames`
// first. The tables of the core's state (`Listings`, State.swift) are reached only under the container's lock.
// Ids are held as `ItemCode`s (ItemIndex.swift), no String of their own; the names and codes sit in two arrays
// found through an open-addressing table of entry numbers (`NameMap`, about 40 bytes an entry, where a
// dictionary took 65): an entry is free exactly when its code is `.none`, the table holds entry + 1 of every
// used entry (0: empty) and is at most half full, and a removal shifts the probe chain back.
import Glibc

/// True if two names are the same bytes (not merely canonically equivalent).
public func sameName(_ a: String, _ b: String) -> Bool {
    var a = a, b = b
    return a.withUTF8 { x in
        b.withUTF8 { y in x.count == y.count && (x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0) }
    }
}

struct NameTable: Sequence, ExpressibleByDictionaryLiteral {
    /// A name hashed and compared by its bytes (keeping the one String, not a copy of its bytes).
    private struct ByteKey: Hashable {
        let name: String
        init(_ name: String) { self.name = name }
        static func == (a: ByteKey, b: ByteKey) -> Bool { sameName(a.name, b.name) }
        func hash(into hasher: inout Hasher) {
            // One call for all the bytes; a name without contiguous bytes is copied first, so equal bytes always
            // hash alike.
            let done: Void? = name.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
            if done == nil { Array(name.utf8).withUnsafeBytes { hasher.combine(bytes: $0) } }
        }
    }

    private var map = NameMap()
    /// The names whose entry is a directory, among the entries sorted so far; the names set since (an item's
    /// kind never changes, so each entry is sorted once, when the directories are next counted). Together they
    /// keep the count of subdirectories exact at a cost per entry set, not per count.
    private var directoryNames: Set<ByteKey> = []
    private var unsorted: [ByteKey] = []

    typealias Key = String
    typealias Value = String

    init(dictionaryLiteral elements: (String, String)...) {
        for (name, id) in elements { self[name] = id }
    }

    /// The id of the entry with exactly this name.
    subscript(_ name: String) -> String? {
        get { map[name]?.string }
        set {
            let key = ByteKey(name)
            directoryNames.remove(key)
            if let newValue {
                unsorted.append(key)
                map.updateValue(ItemCode(newValue), forKey: name)
            } else {
                map.remove(name)
            }
        }
    }

    /// Gives `name` to `code`, whose kind is known (the load of the store: the entry is sorted at once),
    /// unless `keepOld` prefers the code that holds the name already.
    mutating func add(_ name: String, _ code: ItemCode, isDirectory: Bool, keepOld: (ItemCode) -> Bool) {
        let key = ByteKey(name)
        if let old = map.updateValue(code, forKey: name), keepOld(old) {
            map.updateValue(old, forKey: name)
            return
        }
        if isDirectory { directoryNames.insert(key) } else { directoryNames.remove(key) }
    }

    mutating func reserve(_ n: Int) { map.reserve(n) }

    /// How many entries are directories; `isDirectory` tells the kind of an item by id.
    mutating func directoryCount(_ isDirectory: (String) -> Bool) -> Int {
        for key in unsorted {
            if let code = map[key.name], isDirectory(code.string) { directoryNames.insert(key) }
        }
        unsorted = []
        return directoryNames.count
    }

    var isEmpty: Bool { map.isEmpty }
    var count: Int { map.count }
    var values: [String] { map.entries.map { $0.code.string } }

    func makeIterator() -> AnyIterator<(key: String, value: String)> {
        var inner = map.entries.makeIterator()
        return AnyIterator { inner.next().map { (key: $0.name, value: $0.code.string) } }
    }
}

/// Names to codes, by bytes (see the header).
private struct NameMap {
    private var names: [String] = []
    private var codes: [ItemCode] = []
    private var free: [Int32] = []
    private var table = [Int32](repeating: 0, count: 8)
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    subscript(name: String) -> ItemCode? { find(name).map { codes[Int(table[$0] - 1)] } }

    /// The used entries, in no particular order.
    var entries: [(name: String, code: ItemCode)] {
        codes.indices.filter { codes[$0] != .none }.map { (names[$0], codes[$0]) }
    }

    mutating func reserve(_ n: Int) {
        names.reserveCapacity(n)
        codes.reserveCapacity(n)
        while table.count < 2 * n { grow() }
    }

    /// Gives `name` to `code`; answers the code it had.
    @discardableResult
    mutating func updateValue(_ code: ItemCode, forKey name: String) -> ItemCode? {
        if let b = find(name) {
            let e = Int(table[b] - 1)
            defer { codes[e] = code }
            return codes[e]
        }
        if 2 * (count + 1) > table.count { grow() }
        let e: Int
        if let reused = free.popLast() {
            e = Int(reused)
            (names[e], codes[e]) = (name, code)
        } else {
            e = names.count
            names.append(name)
            codes.append(code)
        }
        place(e)
        count += 1
        return nil
    }

    mutating func remove(_ name: String) {
        guard let hole = find(name) else { return }
        let e = Int(table[hole] - 1)
        (names[e], codes[e]) = ("", .none)
        free.append(Int32(e))
        count -= 1
        ProbeTable.empty(&table, at: hole) { NameMap.hash(names[Int($0)]) }
    }

    /// The bucket that holds `name`.
    private func find(_ name: String) -> Int? {
        var b = bucket(name)
        while table[b] != 0 {
            if sameName(names[Int(table[b] - 1)], name) { return b }
            b = (b + 1) & (table.count - 1)
        }
        return nil
    }

    private mutating func place(_ e: Int) {
        var b = bucket(names[e])
        while table[b] != 0 { b = (b + 1) & (table.count - 1) }
        table[b] = Int32(e + 1)
    }

    private func bucket(_ name: String) -> Int { NameMap.hash(name) & (table.count - 1) }

    private static func hash(_ name: String) -> Int {
        var hasher = Hasher()
        var name = name
        name.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        return hasher.finalize()
    }

    private mutating func grow() {
        table = [Int32](repeating: 0, count: table.count * 2)
        for e in codes.indices where codes[e] != .none { place(e) }
    }
}
