// The wire model shared by the remote stub and the remote client. docs/WIRE.md is its prose twin:
// change both together.
//
// What must hold: both sides check the same rules (`WireRules`, `KVLimits`), so a name, id, target or key valid
// on a device is valid on the remote and the other way round. Fields and their JSON names change only together
// with docs/WIRE.md and both sides (stub and client); bodies are encoded with `JSONEncoder.wire` (sorted keys).
// Conflicts of the key-value store are settled by `wins(over:)` alone (later mtime, then the greater device),
// the same on every device and on the remote. This file is plain values: no I/O, no lock.
import Foundation

/// What an item is. `fifo` and `socket` are core-only: such nodes live on one device and are never sent (the
/// remote refuses them).
public enum ItemKind: String, Codable, Sendable {
    case file, dir, symlink, fifo, socket
}

/// One unresolved conflict version of a file: a content that lost, kept until a person resolves it.
public struct WireConflict: Codable, Equatable, Hashable, Sendable {
    /// Stable id of this conflict version (unique within its item).
    public var id: String
    public var sha256: String
    public var size: Int64
    /// Modification time of the losing content, ns since the epoch.
    public var mtime: Int64
    /// The device that wrote the losing content.
    public var device: String

    public init(id: String, sha256: String, size: Int64, mtime: Int64, device: String) {
        self.id = id; self.sha256 = sha256; self.size = size; self.mtime = mtime; self.device = device
    }
}

/// An item as the remote stores it: the newest state of one file or directory.
public struct WireItem: Codable, Equatable, Sendable {
    public var id: String
    /// Parent id; nil only for the root.
    public var parent: String?
    public var name: String
    public var kind: ItemKind
    public var mode: UInt32
    /// Modification time, ns since the epoch.
    public var mtime: Int64
    public var size: Int64
    /// SHA-256 of the content (lowercase hex); for a directory, the empty string.
    public var sha256: String
    /// The container sequence number of this item's last change; 0 in a request.
    public var version: Int64
    public var deleted: Bool
    /// The device that made this version.
    public var device: String
    /// The user's own extended attributes (`user.*` but not `user.ubiquity.*`), values in base64.
    public var xattrs: [String: String]
    public var conflicts: [WireConflict]
    /// A symbolic link's target, exactly as written; absent (nil) for every other kind.
    public var target: String?

    public init(id: String, parent: String?, name: String, kind: ItemKind, mode: UInt32, mtime: Int64,
                size: Int64, sha256: String, version: Int64 = 0, deleted: Bool = false, device: String = "",
                xattrs: [String: String] = [:], conflicts: [WireConflict] = [], target: String? = nil) {
        self.id = id; self.parent = parent; self.name = name; self.kind = kind; self.mode = mode
        self.mtime = mtime; self.size = size; self.sha256 = sha256; self.version = version
        self.deleted = deleted; self.device = device; self.xattrs = xattrs; self.conflicts = conflicts
        self.target = target
    }
}

/// Answer of `PUT /v1/containers/{cid}`.
public struct WireContainer: Codable, Equatable, Sendable {
    public var container: String
    public var root: String
    public var token: String
    public init(container: String, root: String, token: String) {
        self.container = container; self.root = root; self.token = token
    }
}

/// Answer of `GET /v1/containers`: the ids of the containers of the request's user, sorted.
public struct WireContainerList: Codable, Equatable, Sendable {
    public var containers: [String]
    public init(containers: [String]) { self.containers = containers }
}

/// Answer of `GET /v1/usage`: what the key's user stores, against their quota. `used` is what the quota counts
/// (every stored chunk of every container, each once); a container's figures are its content by what names it
/// (a chunk named by a live file and a kept version counts once, where it lives).
public struct WireUsage: Codable, Equatable, Sendable {
    public var used: Int64
    public var quota: Int64
    public var containers: [WireContainerUsage]
    public init(used: Int64, quota: Int64, containers: [WireContainerUsage]) {
        self.used = used; self.quota = quota; self.containers = containers
    }
}

/// One container's bytes on the remote: its live files under `Documents/`, its other live files (the app's
/// data), its kept past versions, and Recently Deleted.
public struct WireContainerUsage: Codable, Equatable, Sendable {
    public var container: String
    public var documents: Int64
    public var data: Int64
    public var versions: Int64
    public var deleted: Int64
    public init(container: String, documents: Int64, data: Int64, versions: Int64, deleted: Int64) {
        self.container = container; self.documents = documents; self.data = data
        self.versions = versions; self.deleted = deleted
    }
    public var total: Int64 { documents + data + versions + deleted }
}

/// Answer of `GET .../changes`.
public struct WireChanges: Codable, Equatable, Sendable {
    public var items: [WireItem]
    public var token: String
    public var more: Bool
    public init(items: [WireItem], token: String, more: Bool) {
        self.items = items; self.token = token; self.more = more
    }
}

/// Body of an error answer: a plain message, and the item that stands in the way where there is one; for a
/// 412 of a write with a change id, also the asking device's last change applied to the item (`yours`).
public struct WireError: Codable, Equatable, Sendable {
    public var error: String
    public var current: WireItem?
    public var yours: WireLastChange?
    public init(error: String, current: WireItem? = nil, yours: WireLastChange? = nil) {
        self.error = error; self.current = current; self.yours = yours
    }
}

/// The last change a device made to an item that the remote applied: its id and the version it made. A 412
/// carries it so that a device whose answer was lost can tell its own landed change from another device's.
public struct WireLastChange: Codable, Equatable, Sendable {
    public var change: String
    public var version: Int64
    public init(change: String, version: Int64) { self.change = change; self.version = version }
}

/// One entry of `POST .../batch`: a conditional put (create or update) or delete of one item, as the single
/// routes take it. A put with `ifMatch` nil is create-only (`If-None-Match: *`); a delete needs `ifMatch`.
/// A file's content may come inline (`content`, base64 on the wire, at most `WireBatchLimits.maxInlineBytes`):
/// it is stored as a blob before the item that names it.
public struct WireBatchEntry: Codable, Equatable, Sendable {
    public enum Op: String, Codable, Sendable { case put, delete }
    public var op: Op
    /// The item's id (for a put, the body's id must equal it).
    public var id: String
    /// A put's body (version and deleted ignored); nil for a delete.
    public var item: WireItem?
    /// The version last seen (`If-Match`); nil on a put: create only.
    public var ifMatch: Int64?
    /// A file's content, inline.
    public var content: Data?
    /// A delete: the device named in the tombstone (`X-Device`).
    public var device: String?
    /// The client-chosen id of this change (`X-Change-ID` of the single routes, see `WireChangeID`).
    public var change: String?

    public init(op: Op, id: String, item: WireItem? = nil, ifMatch: Int64? = nil, content: Data? = nil,
                device: String? = nil, change: String? = nil) {
        self.op = op; self.id = id; self.item = item; self.ifMatch = ifMatch; self.content = content
        self.device = device; self.change = change
    }

    public static func put(_ item: WireItem, ifMatch: Int64?, content: [UInt8]? = nil,
                           change: WireChangeID? = nil) -> WireBatchEntry {
        WireBatchEntry(op: .put, id: item.id, item: item, ifMatch: ifMatch, content: content.map { Data($0) },
                       device: change?.device, change: change?.id)
    }

    public static func delete(_ id: String, ifMatch: Int64, device: String? = nil,
                              change: WireChangeID? = nil) -> WireBatchEntry {
        WireBatchEntry(op: .delete, id: id, ifMatch: ifMatch, device: device ?? change?.device, change: change?.id)
    }

    /// The change id as the single routes take it: `change` with `device` (a put without one: the body's).
    public var changeID: WireChangeID? {
        change.map { WireChangeID(id: $0, device: device ?? item?.device ?? "") }
    }
}

/// Body of `POST .../batch`.
public struct WireBatch: Codable, Equatable, Sendable {
    public var entries: [WireBatchEntry]
    public init(entries: [WireBatchEntry]) { self.entries = entries }
}

/// The answer to one batch entry: the status the single route would give, and its body: the stored item
/// (200), the error and the item in the way (and for a 412 `yours`, as `WireError`), or for a change applied
/// before (208) the version it made (`applied`) and the item as it is now (`current`).
public struct WireBatchResult: Codable, Equatable, Sendable {
    public var status: Int
    public var item: WireItem?
    public var error: String?
    public var current: WireItem?
    public var applied: Int64?
    public var yours: WireLastChange?
    public init(status: Int, item: WireItem? = nil, error: String? = nil, current: WireItem? = nil,
                applied: Int64? = nil, yours: WireLastChange? = nil) {
        self.status = status; self.item = item; self.error = error; self.current = current; self.applied = applied
        self.yours = yours
    }
}

/// Answer of `POST .../batch`: one result per entry, in order.
public struct WireBatchAnswer: Codable, Equatable, Sendable {
    public var results: [WireBatchResult]
    public init(results: [WireBatchResult]) { self.results = results }
}

/// The sizes a batch may reach.
public enum WireBatchLimits {
    /// Entries in one request.
    public static let maxEntries = 1000
    /// One entry's inline content.
    public static let maxInlineBytes = 64 * 1024
    /// All inline content of one request (its base64 takes a third more).
    public static let maxInlineTotal = 4 << 20
    /// The request body.
    public static let maxBodyBytes = 8 << 20
}

/// One piece of a version kept in chunks (docs/CHUNKS.md): `size` bytes stored as the blob `sha256`, or, with
/// no hash, a hole of `size` zeros that is never sent or stored.
public struct WireChunk: Codable, Equatable, Hashable, Sendable {
    public var sha256: String?
    public var size: Int64
    public init(sha256: String?, size: Int64) { self.sha256 = sha256; self.size = size }
    public var isHole: Bool { sha256 == nil }
}

/// A version of more than one chunk: its chunks in order, and the whole content's SHA-256 and size, which the
/// item names as it names a blob (`PUT|GET .../manifests/{sha256}`).
public struct WireManifest: Codable, Equatable, Sendable {
    public var sha256: String
    public var size: Int64
    public var chunks: [WireChunk]
    public init(sha256: String, size: Int64, chunks: [WireChunk]) {
        self.sha256 = sha256; self.size = size; self.chunks = chunks
    }

    /// Why the manifest is malformed, or nil: every data chunk a hash and 1 to `WireChunkLimits.maxChunkBytes`
    /// bytes, every hole at least one byte, the sizes adding up to `size`, at most `maxChunks` chunks and
    /// `maxFileBytes` bytes.
    public var problem: String? {
        guard isSHA256Hex(sha256) else { return "bad manifest hash" }
        guard (0...WireChunkLimits.maxFileBytes).contains(size) else {
            return "a file holds at most \(WireChunkLimits.maxFileBytes >> 40) TiB (holes included)"
        }
        guard !chunks.isEmpty, chunks.count <= WireChunkLimits.maxChunks else {
            return "a manifest holds 1 to \(WireChunkLimits.maxChunks) chunks"
        }
        var total: Int64 = 0
        for (i, c) in chunks.enumerated() {
            if let sha = c.sha256 {
                guard isSHA256Hex(sha) else { return "chunk \(i): bad hash" }
                guard c.size > 0, c.size <= WireChunkLimits.maxChunkBytes else { return "chunk \(i): bad size" }
            } else if c.size <= 0 {
                return "chunk \(i): bad hole size"
            }
            let (sum, overflow) = total.addingReportingOverflow(c.size)
            guard !overflow else { return "the chunks' sizes overflow" }
            total = sum
        }
        return total == size ? nil : "the chunks add up to \(total) bytes, not \(size)"
    }

    /// Each data chunk's hash once, in order of first use.
    public var chunkHashes: [String] {
        var seen = Set<String>()
        return chunks.compactMap(\.sha256).filter { seen.insert($0).inserted }
    }
}

/// `POST .../chunks/missing`: the hashes asked about, and in the answer those the remote lacks.
public struct WireChunkList: Codable, Equatable, Sendable {
    public var chunks: [String]
    public init(chunks: [String]) { self.chunks = chunks }
}

/// The sizes chunks and manifests may reach.
public enum WireChunkLimits {
    /// A chunk's bytes (the standard format cuts at 4 MiB at most; a little room for a later one). No chunk
    /// format may cut larger (`ChunkFormat.problem`).
    public static let maxChunkBytes: Int64 = 8 << 20
    /// A file's size, holes included: about the most ext4 holds with 4 KiB blocks (a device could seldom keep
    /// more), and an end to a sparse file of exabytes whose zeros a reader would be sent without end.
    public static let maxFileBytes: Int64 = 16 << 40
    /// Chunks in one manifest: 64 GiB (the largest blob) at the standard format's smallest cut, 256 KiB. A
    /// file that a smaller format cuts into more goes up as one blob.
    public static let maxChunks = 262_144
    /// A manifest's JSON body.
    public static let maxManifestBytes = 32 << 20
    /// Hashes asked about in one request.
    public static let maxAsk = 10_000
    /// A file larger than this goes up in chunks in the standard format (one smaller is one chunk: a blob, as
    /// before chunks); a container goes by its own format, `ContainerConfig.chunkFormat`.
    public static var chunkedAbove: Int64 { ChunkFormat.standard.chunkedAbove }
}

/// The identity of one change (an item's put or delete) as its device chose it: sent in `X-Change-ID` and
/// `X-Device`, and again, unchanged, on every retry of the same change, so the remote can tell a retry from a
/// new change. `id` follows the item id rule (`WireRules.isValidID`).
public struct WireChangeID: Equatable, Hashable, Sendable {
    public var id: String
    public var device: String
    public init(id: String, device: String) { self.id = id; self.device = device }
}

/// Answer `208` of a put or delete whose change id the remote already applied (a retry after a lost answer):
/// `applied` is the version that change made, `current` the item as it is now (newer when it changed since).
public struct WireApplied: Codable, Equatable, Sendable {
    public var applied: Int64
    public var current: WireItem
    public init(applied: Int64, current: WireItem) { self.applied = applied; self.current = current }

    /// What the remote compares to tell a retry of a change from another change under the same id: the
    /// condition (`If-Match: V`, `If-None-Match: *` or `delete V`) and the item sent (version and `deleted`
    /// left out, as the remote ignores them), hashed.
    public static func digest(condition: String, item: WireItem?) -> String {
        var bytes = Array(condition.utf8)
        if var item {
            item.version = 0
            item.deleted = false
            bytes.append(0x0a)
            bytes += (try? JSONEncoder.wire.encode(item)).map(Array.init) ?? []
        }
        return sha256Hex(bytes)
    }
}

/// Rules every name and id must follow, on both sides of the wire.
public enum WireRules {
    public static let rootID = "root"
    public static let documentsID = "documents"
    /// The name of the root's folder of documents; what is outside it is the app's data.
    public static let documentsName = "Documents"
    public static let maxNameBytes = 255
    /// The most an item's user attributes may take, counted by `xattrBytes`.
    public static let maxXattrBytes = 64 * 1024

    /// What one attribute counts against `maxXattrBytes`, the same on both sides of the wire: its name's
    /// UTF-8 bytes and its value's bytes (the value itself, not its base64).
    public static func xattrBytes(name: String, valueBytes: Int) -> Int { name.utf8.count + valueBytes }
    public static let maxJSONBytes = 1 << 20
    /// A symbolic link's target: PATH_MAX (4096) less the terminating NUL, as the kernel takes them.
    public static let maxTargetBytes = 4095

    /// A valid symbolic link target: 1 to 4095 bytes, no NUL (any other byte, `/` included, is allowed).
    public static func isValidTarget(_ target: String) -> Bool {
        let n = target.utf8.count
        return n > 0 && n <= maxTargetBytes && !target.utf8.contains(0)
    }

    /// Why a wire item's kind-specific fields are wrong, or nil: a link carries its target, its size is the
    /// target's length in bytes, and it has no content or conflict versions; other kinds carry no target;
    /// fifos and sockets are never sent.
    public static func kindProblem(_ item: WireItem) -> String? {
        switch item.kind {
        case .symlink:
            guard let target = item.target else { return "a symbolic link needs a target" }
            guard isValidTarget(target) else { return "bad symbolic link target (1 to 4095 bytes, no NUL)" }
            guard item.size == Int64(target.utf8.count) else { return "a link's size is its target's length" }
            guard item.sha256.isEmpty, item.conflicts.isEmpty else { return "a symbolic link has no content" }
        case .fifo, .socket:
            return "fifos and sockets are local-only"
        case .file, .dir:
            if item.target != nil { return "only a symbolic link has a target" }
        }
        return nil
    }

    /// A valid item name: 1 to 255 bytes of UTF-8, no `/` or NUL, not `.` or `..`.
    public static func isValidName(_ name: String) -> Bool {
        let n = name.utf8.count
        return n > 0 && n <= maxNameBytes && name != "." && name != ".."
            && !name.utf8.contains(0x2f) && !name.utf8.contains(0)
    }

    /// The mode bits that travel: read, write and search. Setuid, setgid and sticky are this device's alone (as
    /// the owner is): another device's user, or whoever holds a token, could otherwise hand this one a
    /// setuid file (`cp -a` out of the mount by root kept it).
    public static let sharedModeBits: UInt32 = 0o777

    /// The name an item takes for a moment in its folder on the remote to free its own name (a device's push of
    /// an exchange or a rotation of names); its next push gives it its place. A delete that comes first leaves
    /// the tombstone under the place it had before (Recently Deleted lists and restores it there).
    public static func asideName(_ id: String) -> String { ".\(id).moving" }

    /// The end of a name that keeps an item on one device (Apple's `.nosync` rule).
    public static let noSyncSuffix = ".nosync"
    /// The ends of the names of an SQLite database's companions (`t.db-wal`, `t.db-shm`, `t.db-journal`): they
    /// belong to the database as one program on one machine has it open (a write-ahead log, a shared-memory
    /// index, a rollback journal), and mean nothing, or harm, anywhere else. The database file travels (SQLite
    /// writes what was committed into it at its checkpoints and last close); they stay on their device.
    public static let databaseCompanionSuffixes = ["-wal", "-shm", "-journal"]

    /// True for a name that keeps an item on one device: `.nosync`, and a database's companions.
    public static func staysOnOneDevice(_ name: String) -> Bool {
        name.hasSuffix(noSyncSuffix)
            || databaseCompanionSuffixes.contains { name.count > $0.count && name.hasSuffix($0) }
    }

    /// True for a name that keeps an item on one device in folder `parent`: those of `staysOnOneDevice`, and
    /// the desktop's trash folders in the root (each device's own, as each disk has its own).
    public static func staysOnOneDevice(_ name: String, parent: String?) -> Bool {
        staysOnOneDevice(name, inRoot: { parent == rootID })
    }

    /// The same, where finding whether the folder is the root costs more than a look at the name.
    public static func staysOnOneDevice(_ name: String, inRoot: () -> Bool) -> Bool {
        staysOnOneDevice(name) || (isDesktopTrashName(name) && inRoot())
    }

    /// True for the names of the freedesktop.org trash specification's per-mount trash folders (`.Trash`,
    /// `.Trash-UID`), which `gio trash` (GNOME Files' Delete) makes in a mount's root and moves items into.
    public static func isDesktopTrashName(_ name: String) -> Bool {
        if name == ".Trash" { return true }
        guard name.hasPrefix(".Trash-") else { return false }
        let uid = name.utf8.dropFirst(7)
        return !uid.isEmpty && uid.count <= 10 && uid.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }
    /// The mount's own folders in its root: conflict and past versions, the key-value store, Recently Deleted.
    public static let versionsFolder = ".versions", keyValueFolder = ".kvstore", trashFolder = ".trash"
    /// The names the mount gives to folders of its own in its root.
    public static let mountRootNames = [versionsFolder, keyValueFolder, trashFolder]

    /// Why no item on the remote may have this name in folder `parent`, or nil: a name the mount gives a meaning
    /// of its own, one list for the server and the mount. `.versions`, `.kvstore` and `.trash` in the root would
    /// show twice there (and `kv set` would write an ordinary file); a name ending in `.nosync`, `-wal`, `-shm` or
    /// `-journal`, and `.Trash` or `.Trash-UID` in the root, mark an item no device shows or uploads
    /// (`staysOnOneDevice`).
    public static func reservedNameProblem(_ name: String, parent: String) -> String? {
        if parent == rootID && mountRootNames.contains(where: { Array($0.utf8) == Array(name.utf8) }) {
            return "\(name) is the name of the mount's own folder in the root"
        }
        if staysOnOneDevice(name, parent: parent) {
            return "\(name) is kept on one device only (a .nosync name, a database's -wal, -shm or -journal, or a "
                + "desktop's trash folder in the root)"
        }
        return nil
    }

    /// A valid item id: 1 to 64 of [A-Za-z0-9_-].
    public static func isValidID(_ id: String) -> Bool {
        let n = id.utf8.count
        return n > 0 && n <= 64 && id.utf8.allSatisfy { isAlnum($0) || $0 == 0x2d || $0 == 0x5f }
    }

    /// A valid container id, reverse-DNS like `iCloud.com.example.notes`: 3 to 255 of [A-Za-z0-9.-_],
    /// starting with a letter or digit, at least one dot, no empty label.
    public static func isValidContainerID(_ id: String) -> Bool {
        let n = id.utf8.count
        guard n >= 3 && n <= 255, let first = id.utf8.first, isAlnum(first) else { return false }
        guard id.utf8.allSatisfy({ isAlnum($0) || $0 == 0x2e || $0 == 0x2d || $0 == 0x5f }) else { return false }
        let labels = id.split(separator: ".", omittingEmptySubsequences: false)
        return labels.count >= 2 && labels.allSatisfy { !$0.isEmpty }
    }

    private static func isAlnum(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)
    }
}

extension JSONEncoder {
    /// The encoder used for the wire: sorted keys, so bodies are stable.
    public static var wire: JSONEncoder {
        let e = JSONEncoder(); e.outputFormatting = [.sortedKeys]; return e
    }
}

// MARK: - The key-value store

/// A property-list value of the key-value store. On the wire each value carries its type:
/// `{"type":"integer","value":5}`; a date is ns since the epoch, data is base64, an array's and a dictionary's
/// elements are typed values themselves.
public indirect enum KVValue: Equatable, Sendable {
    case string(String)
    case integer(Int64)
    case real(Double)
    case boolean(Bool)
    /// Nanoseconds since the epoch.
    case date(Int64)
    case data([UInt8])
    case array([KVValue])
    case dictionary([String: KVValue])

    /// The bytes the value counts for against the quota: a string's or data's bytes, 8 for a number or a date,
    /// 1 for a boolean, the sum of the elements (and of a dictionary's keys) for a container.
    public var byteSize: Int {
        switch self {
        case .string(let s): return s.utf8.count
        case .data(let d): return d.count
        case .integer, .real, .date: return 8
        case .boolean: return 1
        case .array(let a): return a.reduce(0) { $0 + $1.byteSize }
        case .dictionary(let d): return d.reduce(0) { $0 + $1.key.utf8.count + $1.value.byteSize }
        }
    }
}

extension KVValue {
    /// The value a text file of a key stands for: a string of exactly these bytes, or data when they are not
    /// UTF-8 (the file view's text rule, which `ubiquityfs kv` follows too).
    public init(text bytes: [UInt8]) {
        self = String(validating: bytes, as: UTF8.self).map { .string($0) } ?? .data(bytes)
    }
}

extension KVValue: Codable {
    private enum CodingKeys: String, CodingKey { case type, value }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        switch try c.decode(String.self, forKey: .type) {
        case "string": self = .string(try c.decode(String.self, forKey: .value))
        case "integer": self = .integer(try c.decode(Int64.self, forKey: .value))
        case "real": self = .real(try c.decode(Double.self, forKey: .value))
        case "boolean": self = .boolean(try c.decode(Bool.self, forKey: .value))
        case "date": self = .date(try c.decode(Int64.self, forKey: .value))
        case "data":
            guard let d = Data(base64Encoded: try c.decode(String.self, forKey: .value)) else {
                throw DecodingError.dataCorruptedError(forKey: .value, in: c, debugDescription: "bad base64")
            }
            self = .data(Array(d))
        case "array": self = .array(try c.decode([KVValue].self, forKey: .value))
        case "dictionary": self = .dictionary(try c.decode([String: KVValue].self, forKey: .value))
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .type, in: c, debugDescription: "unknown type \(other)")
        }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .string(let s): try c.encode("string", forKey: .type); try c.encode(s, forKey: .value)
        case .integer(let i): try c.encode("integer", forKey: .type); try c.encode(i, forKey: .value)
        case .real(let r): try c.encode("real", forKey: .type); try c.encode(r, forKey: .value)
        case .boolean(let b): try c.encode("boolean", forKey: .type); try c.encode(b, forKey: .value)
        case .date(let d): try c.encode("date", forKey: .type); try c.encode(d, forKey: .value)
        case .data(let d): try c.encode("data", forKey: .type); try c.encode(Data(d).base64EncodedString(), forKey: .value)
        case .array(let a): try c.encode("array", forKey: .type); try c.encode(a, forKey: .value)
        case .dictionary(let d): try c.encode("dictionary", forKey: .type); try c.encode(d, forKey: .value)
        }
    }
}

/// One key's newest write: a value, or a delete (a tombstone, `value` nil). The later `mtime` wins, ties broken
/// by the greater `device`; `seq` is the remote's feed position of the write (0 in a request).
public struct WireKVEntry: Codable, Equatable, Sendable {
    public var key: String
    public var value: KVValue?
    /// The writing device's clock at the write, ns since the epoch.
    public var mtime: Int64
    public var device: String
    public var deleted: Bool
    public var seq: Int64

    public init(key: String, value: KVValue?, mtime: Int64, device: String, deleted: Bool = false, seq: Int64 = 0) {
        self.key = key; self.value = value; self.mtime = mtime; self.device = device; self.deleted = deleted
        self.seq = seq
    }

    /// True when this write wins over `other`: the later timestamp, then the greater device name.
    public func wins(over other: WireKVEntry) -> Bool {
        (mtime, device) > (other.mtime, other.device)
    }

    /// True when both are the same write.
    public func sameWrite(as other: WireKVEntry) -> Bool { mtime == other.mtime && device == other.device }
}

/// Answer of `GET .../kv?since=SEQ`: the entries written after SEQ, in feed order, and the position now.
public struct WireKVChanges: Codable, Equatable, Sendable {
    public var entries: [WireKVEntry]
    public var seq: Int64
    public init(entries: [WireKVEntry], seq: Int64) { self.entries = entries; self.seq = seq }
}

/// Apple's limits of the key-value store, checked on the device and again on the remote.
public enum KVLimits {
    public static let maxKeyBytes = 64
    public static let maxKeys = 1024
    /// The whole store (keys and values), and so each value.
    public static let maxTotalBytes = 1 << 20
    /// A request body carrying one value: a 1 MB value may take more as JSON (base64, escapes).
    public static let maxBodyBytes = 8 << 20

    public enum Violation: Error, Equatable, Sendable {
        case keyTooLong, valueTooLarge, tooManyKeys, overTotal
        public var message: String {
            switch self {
            case .keyTooLong: return "key too long (over \(maxKeyBytes) bytes)"
            case .valueTooLarge: return "value too large (over 1 MB)"
            case .tooManyKeys: return "over the quota (more than \(maxKeys) keys)"
            case .overTotal: return "over the quota (more than 1 MB in all)"
            }
        }
    }

    /// What is wrong with a key that is not valid (`isValidKey`).
    public static func keyProblem(_ key: String) -> String {
        key.utf8.count > maxKeyBytes ? Violation.keyTooLong.message : "bad key (no / or NUL, not . or ..)"
    }

    /// A valid key: 1 to 64 bytes of UTF-8, no `/` or NUL, not `.` or `..` (a key is a file name in the
    /// mount's `.kvstore`).
    public static func isValidKey(_ key: String) -> Bool {
        let n = key.utf8.count
        return n > 0 && n <= maxKeyBytes && !key.utf8.contains(0x2f) && !key.utf8.contains(0) && key != "." && key != ".."
    }

    /// What `key = value` would break in a store whose live entries are `live` (key -> byte size of its
    /// value), or nil. A nil value (a delete) breaks nothing.
    public static func violation(key: String, value: KVValue?, live: [String: Int]) -> Violation? {
        if key.utf8.count > maxKeyBytes { return .keyTooLong }
        guard let value else { return nil }
        let size = value.byteSize
        if size > maxTotalBytes { return .valueTooLarge }
        var others = live
        others[key] = nil
        if others.count + 1 > maxKeys { return .tooManyKeys }
        let total = others.reduce(0) { $0 + $1.key.utf8.count + $1.value } + key.utf8.count + size
        if total > maxTotalBytes { return .overTotal }
        return nil
    }
}

// MARK: - History (docs/HISTORY.md, docs/WIRE.md "History")

/// One kept version of an item: the item as the remote stored it then (without its conflict versions; its
/// xattrs are kept for a rewind but not sent), when (`at`, the server's clock, ns since the epoch) and where
/// (`path`, its names from the root joined by `/`; for a delete, the path it had when deleted).
public struct WireVersion: Codable, Equatable, Sendable {
    public var id: String
    public var version: Int64
    public var at: Int64
    public var path: String
    public var deleted: Bool
    public var parent: String?
    public var name: String
    public var kind: ItemKind
    public var mode: UInt32
    public var mtime: Int64
    public var size: Int64
    public var sha256: String
    public var device: String
    /// A symbolic link's target; absent for every other kind.
    public var target: String?
    /// The item's xattrs then (as `WireItem.xattrs`), which a rewind brings back. The remote keeps them but does
    /// not send them (not in `CodingKeys`): nil when read from the wire, and for a version the remote stored
    /// before it kept them (a rewind then leaves the item's xattrs as they are).
    public var xattrs: [String: String]? = nil
    /// The one deletion of an app's data this delete was part of (`POST .../delete-data`): every delete of it
    /// is one entry of Recently Deleted, restored and emptied whole. Absent for every other version.
    public var batch: WireDataBatch? = nil

    private enum CodingKeys: String, CodingKey {
        case id, version, at, path, deleted, parent, name, kind, mode, mtime, size, sha256, device, target, batch
    }

    public init(id: String, version: Int64, at: Int64, path: String, deleted: Bool, parent: String?, name: String,
                kind: ItemKind, mode: UInt32, mtime: Int64, size: Int64, sha256: String, device: String,
                target: String? = nil, xattrs: [String: String]? = nil, batch: WireDataBatch? = nil) {
        self.id = id; self.version = version; self.at = at; self.path = path; self.deleted = deleted
        self.parent = parent; self.name = name; self.kind = kind; self.mode = mode; self.mtime = mtime
        self.size = size; self.sha256 = sha256; self.device = device; self.target = target
        self.xattrs = xattrs; self.batch = batch
    }

    /// The version of `item` as stored at `at`, at `path` (in `batch`, for a delete of the app's data).
    public init(_ item: WireItem, at: Int64, path: String, batch: WireDataBatch? = nil) {
        self.init(id: item.id, version: item.version, at: at, path: path, deleted: item.deleted, parent: item.parent,
                  name: item.name, kind: item.kind, mode: item.mode, mtime: item.mtime, size: item.size,
                  sha256: item.sha256, device: item.device, target: item.target, xattrs: item.xattrs, batch: batch)
    }
}

/// Answer of `GET .../history/{id}`: the item's kept versions, newest first.
public struct WireHistory: Codable, Equatable, Sendable {
    public var versions: [WireVersion]
    public init(versions: [WireVersion]) { self.versions = versions }
}

/// Answer of `GET .../trash`: the delete of every item in Recently Deleted, newest first.
public struct WireTrash: Codable, Equatable, Sendable {
    public var items: [WireVersion]
    public init(items: [WireVersion]) { self.items = items }
}

/// Body of `POST .../trash/restore`: 1 to `HistoryRules.maxIDs` ids, and the device the restore's versions name.
public struct WireRestoreRequest: Codable, Equatable, Sendable {
    public var ids: [String]
    public var device: String
    public init(ids: [String], device: String) { self.ids = ids; self.device = device }
}

/// Answer of `POST .../trash/restore`: every item the restore made live (with the folders above and the tree
/// below that came back with it), and those asked about that were live already, as they are.
public struct WireRestored: Codable, Equatable, Sendable {
    public var restored: [WireItem]
    public init(restored: [WireItem]) { self.restored = restored }
}

/// Body of `POST .../trash/empty`: `ids` (1 to `HistoryRules.maxIDs`) or `all: true`, not both.
public struct WireEmptyTrashRequest: Codable, Equatable, Sendable {
    public var ids: [String]?
    public var all: Bool?
    public init(ids: [String]? = nil, all: Bool? = nil) { self.ids = ids; self.all = all }
}

/// Answer of `POST .../trash/empty`: how many items left Recently Deleted.
public struct WireEmptied: Codable, Equatable, Sendable {
    public var emptied: Int
    public init(emptied: Int) { self.emptied = emptied }
}

/// Body of `POST .../rewind` (docs/HISTORY.md "Rewind"): bring the subtree of `folder` (a live directory) back
/// to its state at `to` (ns since the epoch, the remote's clock), as new versions made by `device`; with
/// `dryRun`, only answer what would change.
public struct WireRewindRequest: Codable, Equatable, Sendable {
    public var folder: String
    public var to: Int64
    public var dryRun: Bool
    public var device: String

    public init(folder: String, to: Int64, dryRun: Bool, device: String) {
        self.folder = folder; self.to = to; self.dryRun = dryRun; self.device = device
    }
}

/// One item a rewind changes (or would change): `path` is its path after the rewind, before it for a delete.
public struct WireRewindChange: Codable, Hashable, Sendable {
    /// What happens to the item, one word per item (the first that applies, in this order).
    public enum What: String, Codable, Hashable, Sendable {
        /// Deleted since: live again (as a restore brings it back), as it was.
        case restore
        /// Its content (a link's target) goes back, and whatever else changed with it.
        case content
        /// Its parent or name goes back (an item moved in goes back out), and its mode, time and xattrs.
        case move
        /// Only its mode, modification time or xattrs go back.
        case metadata
        /// Came into the folder after the time, created after it: to Recently Deleted.
        case delete
    }

    public var id: String
    public var path: String
    public var what: What

    public init(id: String, path: String, what: What) {
        self.id = id; self.path = path; self.what = what
    }
}

/// Answer of `POST .../rewind`: every item changed (with `dryRun`, that would be), parents before children,
/// deletes last.
public struct WireRewound: Codable, Equatable, Sendable {
    public var changes: [WireRewindChange]
    public init(changes: [WireRewindChange]) { self.changes = changes }
}

/// One deletion of an app's data (`POST .../delete-data`), as its deletes in Recently Deleted name it:
/// `data-` (everything outside Documents/) or `all-` (everything), then a random id of 32 hex digits.
public struct WireDataBatch: Codable, Hashable, Sendable, CustomStringConvertible {
    public let description: String

    public init?(_ text: String) {
        let parts = text.split(separator: "-", maxSplits: 1)
        guard parts.count == 2, ["data", "all"].contains(parts[0]), parts[1].utf8.count == 32,
              parts[1].utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else { return nil }
        description = text
    }

    /// A new batch id, random.
    public init(documentsToo: Bool) { description = (documentsToo ? "all-" : "data-") + randomHex(bytes: 16) }

    /// True when the batch deleted Documents/ too.
    public var documentsToo: Bool { description.hasPrefix("all-") }

    public init(from decoder: Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let batch = WireDataBatch(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "bad batch id"))
        }
        self = batch
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}

/// Body of `POST .../delete-data`: delete everything of the container outside `Documents/` (with `documents`,
/// everything but the root), as deletes by `device`.
public struct WireDeleteDataRequest: Codable, Equatable, Sendable {
    public var documents: Bool
    public var device: String
    public init(documents: Bool, device: String) { self.documents = documents; self.device = device }
}

/// Answer of `POST .../delete-data`: the deletes it made, children before their folders (none when there was
/// nothing to delete; `batch` is then absent).
public struct WireDataDeleted: Codable, Equatable, Sendable {
    public var deleted: [WireItem]
    public var batch: WireDataBatch?
    public init(deleted: [WireItem], batch: WireDataBatch?) { self.deleted = deleted; self.batch = batch }
}

// MARK: Shares (docs/WIRE.md "Shares")

/// A folder of one user's container shared with another user of the remote. `name` is the folder's name now;
/// a participant learns nothing else of where it lies.
public struct WireShare: Codable, Equatable, Sendable {
    public var id: String
    /// The container's id as both users name it (sharing is within one app's container id).
    public var container: String
    public var folder: String
    public var name: String
    public var owner: String
    public var user: String
    public var readOnly: Bool
    public var created: Int64
    public init(id: String, container: String, folder: String, name: String, owner: String, user: String,
                readOnly: Bool, created: Int64) {
        self.id = id; self.container = container; self.folder = folder; self.name = name; self.owner = owner
        self.user = user; self.readOnly = readOnly; self.created = created
    }
}

/// Body of `POST /v1/containers/{cid}/shares`: the folder, the user it is shared with, and how.
public struct WireShareRequest: Codable, Equatable, Sendable {
    public var folder: String
    public var user: String
    public var readOnly: Bool
    public init(folder: String, user: String, readOnly: Bool) { self.folder = folder; self.user = user; self.readOnly = readOnly }
}

/// Body of `POST /v1/containers/{cid}/shares/remove`.
public struct WireShareRemoval: Codable, Equatable, Sendable {
    public var folder: String
    public var user: String
    public init(folder: String, user: String) { self.folder = folder; self.user = user }
}

/// Body of `POST /v1/shares/leave`: the share a participant leaves.
public struct WireShareLeave: Codable, Equatable, Sendable {
    public var id: String
    public init(id: String) { self.id = id }
}

/// Answer of `GET /v1/shares`: the shares the user owns and those they take part in.
public struct WireShareList: Codable, Equatable, Sendable {
    public var shares: [WireShare]
    public init(shares: [WireShare]) { self.shares = shares }
}

/// Answer of `POST .../shares/remove` and `POST /v1/shares/leave`.
public struct WireSharesRemoved: Codable, Equatable, Sendable {
    public var removed: Int
    public init(removed: Int) { self.removed = removed }
}

public enum WireShareRules {
    /// A share's id: 32 lowercase hex digits.
    public static func isValidID(_ id: String) -> Bool {
        id.utf8.count == 32 && id.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
    /// How far a walk up from a folder goes at most (the server refuses a move that would make a cycle; this
    /// bounds the walk whatever is stored).
    public static let maxDepth = 4096
}
