// Names of a directory's entries, compared byte for byte as POSIX file systems do. Swift's String equality
// treats canonically equivalent strings (NFC "é" and NFD "e" + accent) as equal; a file system must not, or
// two distinct names would collide.
/// True if two names are the same bytes (not merely canonically equivalent).
public func sameName(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }

struct NameTable: Sequence, ExpressibleByDictionaryLiteral {
    /// A name hashed and compared by its bytes (keeping the one String, not a copy of its bytes).
    private struct ByteKey: Hashable {
        let name: String
        init(_ name: String) { self.name = name }
        static func == (a: ByteKey, b: ByteKey) -> Bool { sameName(a.name, b.name) }
        func hash(into hasher: inout Hasher) {
            for byte in name.utf8 { hasher.combine(byte) }
        }
    }

    private var map: [ByteKey: String] = [:]

    typealias Key = String
    typealias Value = String

    init(dictionaryLiteral elements: (String, String)...) {
        for (name, id) in elements { map[ByteKey(name)] = id }
    }

    /// The id of the entry with exactly this name.
    subscript(_ name: String) -> String? {
        get { map[ByteKey(name)] }
        set { map[ByteKey(name)] = newValue }
    }

    var isEmpty: Bool { map.isEmpty }
    var count: Int { map.count }
    var values: [String] { Array(map.values) }

    func makeIterator() -> AnyIterator<(key: String, value: String)> {
        var inner = map.makeIterator()
        return AnyIterator { inner.next().map { (key: $0.key.name, value: $0.value) } }
    }
}
