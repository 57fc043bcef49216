// Names of a directory's entries, compared byte for byte as POSIX file systems do. Swift's String equality
// treats canonically equivalent strings (NFC "é" and NFD "e" + accent) as equal; a file system must not, or
// two distinct names would collide.
/// True if two names are the same bytes (not merely canonically equivalent).
public func sameName(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }

struct NameTable: Sequence, ExpressibleByDictionaryLiteral {
    private struct ByteKey: Hashable {
        let bytes: [UInt8]
        init(_ name: String) { bytes = Array(name.utf8) }
    }

    private var map: [ByteKey: (name: String, id: String)] = [:]

    typealias Key = String
    typealias Value = String

    init(dictionaryLiteral elements: (String, String)...) {
        for (name, id) in elements { map[ByteKey(name)] = (name, id) }
    }

    /// The id of the entry with exactly this name.
    subscript(_ name: String) -> String? {
        get { map[ByteKey(name)]?.id }
        set { map[ByteKey(name)] = newValue.map { (name, $0) } }
    }

    var isEmpty: Bool { map.isEmpty }
    var count: Int { map.count }
    var values: [String] { map.values.map(\.id) }

    func makeIterator() -> AnyIterator<(key: String, value: String)> {
        var inner = map.values.makeIterator()
        return AnyIterator { inner.next().map { (key: $0.name, value: $0.id) } }
    }
}
