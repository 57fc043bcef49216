// What one live query shows (docs/QUERY.md): which items match its filter, and, batch by batch, which of the
// items changed since the last are added, changed or removed for it. The daemon's query server renders and
// sends; this part holds no socket and is the same for every client.
//
// What must hold: a client is told only what differs from what it was shown: an item is added when it first
// matches, changed only when its rendering differs, removed (with the last path it was shown at) when it stops
// matching or is gone. A filter looks at the path and name alone, so it answers the same for every client: the
// scope by the `Documents/` prefix, the name by fnmatch(3) without flags. No lock: a `QueryView` belongs to the
// one thread serving its client.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// A scope (Apple's: documents is what is under `Documents/`, data everything else; the `Documents` folder
/// itself is only in all) and a name pattern (fnmatch(3)).
public struct QueryFilter: Sendable {
    public enum Scope: String, Sendable { case documents, data, all }
    public let scope: Scope
    public let name: String?

    public init(scope: Scope, name: String?) {
        self.scope = scope
        self.name = name
    }

    public func matches(path: String, name itemName: String) -> Bool {
        let inDocuments = path.hasPrefix("Documents/")
        switch scope {
        case .documents: if !inDocuments { return false }
        case .data: if inDocuments || path == WireRules.documentsName { return false }
        case .all: break
        }
        return name.map { fnmatch($0, itemName, 0) == 0 } ?? true
    }
}

/// One item as a query shows it: its rendering (made once for every client) and what a filter needs.
public struct QueryEntry: Sendable {
    public let path: String
    public let name: String
    public let isDirectory: Bool
    public let rendered: String

    public init(path: String, name: String, isDirectory: Bool, rendered: String) {
        self.path = path
        self.name = name
        self.isDirectory = isDirectory
        self.rendered = rendered
    }
}

/// The items one client was shown, and what a batch changes of them.
public struct QueryView: Sendable {
    public let filter: QueryFilter
    /// Each item shown, with its path (for a removal) and what was shown (shown again only when it differs).
    private(set) var shown: [String: (path: String, rendered: String)] = [:]

    public init(filter: QueryFilter) { self.filter = filter }

    public var count: Int { shown.count }

    /// Records an item of the gathering; false if the filter leaves it out.
    public mutating func gather(_ id: String, _ e: QueryEntry) -> Bool {
        guard filter.matches(path: e.path, name: e.name) else { return false }
        shown[id] = (e.path, e.rendered)
        return true
    }

    /// What the client must be told of the items now `entries` and the items `gone`: renderings of the added
    /// and changed, and (id, last path shown) of the removed.
    public mutating func batch(_ entries: [String: QueryEntry], gone: Set<String>)
        -> (added: [String], changed: [String], removed: [(id: String, path: String)]) {
        var added: [String] = [], changed: [String] = [], removed: [(id: String, path: String)] = []
        for (id, e) in entries {
            if filter.matches(path: e.path, name: e.name) {
                if let was = shown[id] {
                    if was.rendered != e.rendered { changed.append(e.rendered) }
                } else {
                    added.append(e.rendered)
                }
                shown[id] = (e.path, e.rendered)
            } else if let was = shown.removeValue(forKey: id) {
                removed.append((id, was.path))
            }
        }
        for id in gone {
            if let was = shown.removeValue(forKey: id) { removed.append((id, was.path)) }
        }
        return (added, changed, removed)
    }
}
