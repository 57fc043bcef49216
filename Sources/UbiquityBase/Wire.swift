// The wire model shared by the remote stub and the remote client. docs/WIRE.md is its prose twin:
// change both together.
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

/// Answer of `GET .../changes`.
public struct WireChanges: Codable, Equatable, Sendable {
    public var items: [WireItem]
    public var token: String
    public var more: Bool
    public init(items: [WireItem], token: String, more: Bool) {
        self.items = items; self.token = token; self.more = more
    }
}

/// Body of an error answer: a plain message, and the item that stands in the way where there is one.
public struct WireError: Codable, Equatable, Sendable {
    public var error: String
    public var current: WireItem?
    public init(error: String, current: WireItem? = nil) { self.error = error; self.current = current }
}

/// Rules every name and id must follow, on both sides of the wire.
public enum WireRules {
    public static let rootID = "root"
    public static let documentsID = "documents"
    public static let maxNameBytes = 255
    public static let maxXattrBytes = 64 * 1024
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
