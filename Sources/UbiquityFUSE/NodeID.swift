// The id the adapter gives a node: an item's id, or one of a virtual node's (the versions directory, the
// key-value folder, the trash folder), which the core never sees.
//
// What must hold: a virtual id never equals an item id (item ids are hex and hold no ':'), `NodeID(parsing:)`
// and `description` are each other's inverse, and no other code builds or takes apart these strings.
import UbiquityCore

enum NodeID: Equatable, CustomStringConvertible {
    case item(String)
    /// The mirror of an item under `.versions` (the root's mirror is `.versions` itself).
    case versionsDir(item: String)
    case version(item: String, conflict: String)
    /// A kept past version of a file, by its version number on the remote (PastVersions.swift).
    case pastVersion(item: String, version: Int64)
    /// `.kvstore` (typed: `.kvstore/.json`), one of its keys, and `.kvstore/.changes`.
    case kvDir(typed: Bool)
    case kvKey(String, typed: Bool)
    case kvChanges
    /// `.trash` and `.trash/.list` (TrashFiles.swift).
    case trashDir
    case trashList
    /// An entry of Recently Deleted under `.trash`, by its item id (TrashTree.swift).
    case trashItem(String)
    /// A handle the announcer opened (Watchers.swift): it stands for nothing.
    case announced

    init(parsing id: String) {
        if id == "kvc:" { self = .kvChanges; return }
        if id == "t:" { self = .trashDir; return }
        if id == "tl:" { self = .trashList; return }
        if id == "an:" { self = .announced; return }
        if id.hasPrefix("ti:") { self = .trashItem(String(id.dropFirst(3))); return }
        if id.hasPrefix("kvj:") { self = NodeID.keyValue(String(id.dropFirst(4)), typed: true); return }
        if id.hasPrefix("kv:") { self = NodeID.keyValue(String(id.dropFirst(3)), typed: false); return }
        if id.hasPrefix("v:") { self = .versionsDir(item: String(id.dropFirst(2))); return }
        if id.hasPrefix("p:") {
            let parts = id.dropFirst(2).split(separator: ":", maxSplits: 1).map(String.init)
            if parts.count == 2, let version = Int64(parts[1]) { self = .pastVersion(item: parts[0], version: version); return }
        }
        if id.hasPrefix("c:") {
            let parts = id.dropFirst(2).split(separator: ":", maxSplits: 1).map(String.init)
            if parts.count == 2 { self = .version(item: parts[0], conflict: parts[1]); return }
        }
        self = .item(id)
    }

    private static func keyValue(_ key: String, typed: Bool) -> NodeID {
        key.isEmpty ? .kvDir(typed: typed) : .kvKey(key, typed: typed)
    }

    var description: String {
        switch self {
        case .item(let id): return id
        case .versionsDir(let item): return "v:" + item
        case .version(let item, let conflict): return "c:" + item + ":" + conflict
        case .pastVersion(let item, let version): return "p:" + item + ":" + String(version)
        case .kvDir(let typed): return typed ? "kvj:" : "kv:"
        case .kvKey(let key, let typed): return (typed ? "kvj:" : "kv:") + key
        case .kvChanges: return "kvc:"
        case .trashDir: return "t:"
        case .trashList: return "tl:"
        case .trashItem(let item): return "ti:" + item
        case .announced: return "an:"
        }
    }

    /// True for every node but an item's.
    var isVirtual: Bool {
        if case .item = self { return false }
        return true
    }

    /// True for the key-value folder's nodes.
    var isKeyValue: Bool {
        switch self {
        case .kvDir, .kvKey, .kvChanges: return true
        default: return false
        }
    }
}
