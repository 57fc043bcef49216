// Names of a directory's entries, compared byte for byte as POSIX file systems do. Swift's String equality
// treats canonically equivalent strings (NFC "é" and NFD "e" + accent) as equal; a file system must not, or
// two distinct names would collide.
//
// What must hold: two names are the same entry only when they are the same bytes (`sameName`): no
// normalisation and no case folding. The count of subdirectories stays exact because an item's kind never
// changes: each name set is sorted once (`unsorted`), and a name set again or removed leaves `directoryNames`
// first. The tables of the core's state (`Listings`, State.swift) are reached only under the container's lock.
// Ids are held as `ItemCode`s (ItemIndex.swift): 16 bytes an entry, no String of their own.
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

    private var map: [ByteKey: ItemCode] = [:]
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
        get { map[ByteKey(name)]?.string }
        set {
            let key = ByteKey(name)
            directoryNames.remove(key)
            if newValue != nil { unsorted.append(key) }
            map[key] = newValue.map { ItemCode($0) }
        }
    }

    /// Gives `name` to `code`, whose kind is known (the load of the store: the entry is sorted at once),
    /// unless `keepOld` prefers the code that holds the name already.
    mutating func add(_ name: String, _ code: ItemCode, isDirectory: Bool, keepOld: (ItemCode) -> Bool) {
        let key = ByteKey(name)
        if let old = map.updateValue(code, forKey: key), keepOld(old) {
            map[key] = old
            return
        }
        if isDirectory { directoryNames.insert(key) } else { directoryNames.remove(key) }
    }

    mutating func reserve(_ n: Int) { map.reserveCapacity(n) }

    /// How many entries are directories; `isDirectory` tells the kind of an item by id.
    mutating func directoryCount(_ isDirectory: (String) -> Bool) -> Int {
        for key in unsorted {
            if let code = map[key], isDirectory(code.string) { directoryNames.insert(key) }
        }
        unsorted = []
        return directoryNames.count
    }

    var isEmpty: Bool { map.isEmpty }
    var count: Int { map.count }
    var values: [String] { map.values.map(\.string) }

    func makeIterator() -> AnyIterator<(key: String, value: String)> {
        var inner = map.makeIterator()
        return AnyIterator { inner.next().map { (key: $0.key.name, value: $0.value.string) } }
    }
}
