// Extended attributes: the status names under `user.ubiquity.` (Apple's NSURL ubiquitous keys), the actions
// that `setfattr` triggers, and the user's own `user.*` attributes, which are synced with the item.
//
// Errno of each refusal (README, "Status attributes"):
//   a bad value for `pinned`, `isExcludedFromSync` or `resolve`, or a malformed
//   value for a status name                                                         EINVAL
//   an unknown `user.ubiquity.` name (set)                                        ENOTSUP
//   reading an absent error, an action name or an unknown name                    ENODATA
//   evicting content not yet uploaded, open for writing, pinned, or local-only     EBUSY
//   isExcludedFromSync=1 while a file it takes along is not downloaded (the
//   downloads start)                                                               EBUSY
//   names outside `user.`                                                           ENOTSUP (set), ENODATA (get)
// Writing a status name with a well-formed value, or removing one, is accepted and changes nothing: the
// status is the file system's to say, and `cp -a` or `rsync -X` copying a file within the mount write them.
// `isExcludedFromSync` is the one status name that is also a setting: 1 makes the item local-only, 0 ubiquitous.
//
// What must hold: a `user.ubiquity.` name never becomes one of the item's own attributes: it is read from the
// core's status or sets a setting, so what it shows is the core's and it is never synced. A size-0 probe answers
// the size and a buffer too small ERANGE (`Reply.xattr`), for a get and a list alike. A list names only what a
// get then answers (absent errors and action names are not listed); a link, fifo or socket lists nothing.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

enum StatusAttribute: String, CaseIterable {
    case isUbiquitous, downloadingStatus, isDownloading, percentDownloaded, isUploaded, isUploading,
         percentUploaded, hasUnresolvedConflicts, downloadingError, uploadingError, pinned, isExcludedFromSync

    static let prefix = "user.ubiquity."
    var fullName: String { StatusAttribute.prefix + rawValue }

    /// The value shown for an item, nil where the attribute is absent (errors when there are none).
    func value(_ s: ItemStatus) -> String? {
        func flag(_ b: Bool) -> String { b ? "1" : "0" }
        switch self {
        case .isUbiquitous: return flag(s.isUbiquitous)
        case .downloadingStatus: return s.downloadingStatus.rawValue
        case .isDownloading: return flag(s.isDownloading)
        case .percentDownloaded: return String(s.percentDownloaded)
        case .isUploaded: return flag(s.isUploaded)
        case .isUploading: return flag(s.isUploading)
        case .percentUploaded: return String(s.percentUploaded)
        case .hasUnresolvedConflicts: return flag(s.hasUnresolvedConflicts)
        case .downloadingError: return s.downloadingError
        case .uploadingError: return s.uploadingError
        case .pinned: return flag(s.pinned)
        case .isExcludedFromSync: return flag(s.isExcludedFromSync)
        }
    }

    /// True if `text` is a value this attribute can have.
    func accepts(_ text: String) -> Bool {
        switch self {
        case .downloadingStatus: return DownloadingStatus(rawValue: text) != nil
        case .isUbiquitous, .isDownloading, .isUploaded, .isUploading, .hasUnresolvedConflicts, .pinned,
             .isExcludedFromSync:
            return text == "0" || text == "1"
        case .percentDownloaded, .percentUploaded: return Int(text).map { (0...100).contains($0) } ?? false
        case .downloadingError, .uploadingError: return !text.isEmpty
        }
    }
}

/// What `setfattr -n user.ubiquity.ACTION` does.
enum ActionAttribute: String {
    case evict, download, resolve
}

extension FileSystem {
    /// getxattr(2), answered through `done`: at once, but for an attribute the remote answers (TrashFiles.swift).
    func getxattr(_ ino: UInt64, _ name: String, done: @escaping Completion<[UInt8]>) {
        if let id = inodes.id(ino) {
            if asksRemote(id, name) {
                return name == FileSystem.historyAttribute ? readHistory(id, done: done) : readRewind(id, name, done: done)
            }
            if name == FileSystem.sharesAttribute, isShareRequest(id, name) { return readShares(done: done) }
        }
        done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try getxattr(ino, name) } })
    }

    /// setxattr(2), answered through `done`: at once, but for an action the remote carries out (TrashFiles.swift).
    func setxattr(_ ino: UInt64, _ name: String, _ value: [UInt8], flags: Int32, done: @escaping Completion<Void>) {
        guard let id = inodes.id(ino) else { return done(.failure(.core(.notFound))) }
        switch route(id) {
        case .item: break
        case .tree(let tree, let parsed): return tree.setxattr(parsed, name, value, done: done)
        case .none: return done(.failure(.core(.readOnly)))
        }
        if asksRemote(id, name) { return setRewind(id, name, value, done: done) }
        if isShareRequest(id, name), name != FileSystem.sharesAttribute { return setShare(id, name, value, done: done) }
        done(Result { () throws(AdapterError) in try setItemXattr(id, name, value, flags: flags) })
    }

    /// An extended attribute's value (Reply.xattr answers a size probe or ERANGE).
    func getxattr(_ ino: UInt64, _ name: String) throws(CoreError) -> [UInt8] {
        guard let id = inodes.id(ino) else { throw .notFound }
        if let shown = try virtualStatus(id) {
            guard let value = shown[name] else { throw .noAttribute }
            return Array(value.utf8)
        }
        if name.hasPrefix(StatusAttribute.prefix) {
            let key = String(name.dropFirst(StatusAttribute.prefix.count))
            try lookAtPassthroughWriters(id)
            if id == core.rootID, let value = try rootAttributes().first(where: { $0.name == key })?.value {
                return Array(value.utf8)
            }
            if let attr = StatusAttribute(rawValue: key) {
                guard let value = attr.value(try core.status(id)) else { throw .noAttribute }
                return Array(value.utf8)
            }
            guard let value = core.shareAttributes(id).first(where: { $0.name == key })?.value else { throw .noAttribute }
            return Array(value.utf8)
        }
        guard name.hasPrefix("user.") else { throw .noAttribute }
        return try core.userXattr(id, name)
    }

    /// The names of a node's extended attributes, each ended by a NUL.
    func listxattr(_ ino: UInt64) throws(CoreError) -> [UInt8] {
        guard let id = inodes.id(ino) else { throw .notFound }
        if let shown = try virtualStatus(id) { return shown.keys.sorted().flatMap { Array($0.utf8) + [0] } }
        // The kernel allows user.* attributes on files and directories only: a link, fifo or socket lists none.
        if let item = core.item(id), !item.isDirectory && !item.hasContent { return [] }
        let status = try core.status(id)
        var list = [UInt8]()
        for attr in StatusAttribute.allCases where attr.value(status) != nil {
            list += Array(attr.fullName.utf8) + [0]
        }
        if id == core.rootID {
            for attr in try rootAttributes() { list += Array((StatusAttribute.prefix + attr.name).utf8) + [0] }
        }
        for attr in core.shareAttributes(id) { list += Array((StatusAttribute.prefix + attr.name).utf8) + [0] }
        for name in core.userXattrNames(id) { list += Array(name.utf8) + [0] }
        return list
    }

    /// The root's setting that pauses (1) or resumes (0) the container's sync (`ubiquityfs pause|resume`).
    static let syncPausedAttribute = "syncPaused"

    /// setxattr(2)'s XATTR_CREATE and XATTR_REPLACE (Linux's values, from <sys/xattr.h>).
    static let xattrCreate: Int32 = 1, xattrReplace: Int32 = 2

    /// setxattr(2) on an item.
    private func setItemXattr(_ id: String, _ name: String, _ value: [UInt8], flags: Int32) throws(AdapterError) {
        if name.hasPrefix(StatusAttribute.prefix) {
            let known = try adapting { () throws(CoreError) in try setStatus(id, String(name.dropFirst(StatusAttribute.prefix.count)),
                                                      String(decoding: value, as: UTF8.self)) }
            if !known { throw .unknownAttribute }
        } else if name.hasPrefix("user.") {
            try adapting { () throws(CoreError) in
                try core.setUserXattr(id, name, value, create: flags & FileSystem.xattrCreate != 0,
                                      replace: flags & FileSystem.xattrReplace != 0)
            }
        } else {
            throw .core(.unsupported("only user.* attributes can be set"))
        }
    }

    /// Sets a status attribute or runs an action; false when `key` names neither.
    private func setStatus(_ id: String, _ key: String, _ text: String) throws(CoreError) -> Bool {
        if let action = ActionAttribute(rawValue: key) {
            switch action {
            case .evict: try core.evict(id)
            case .download: try core.requestDownload(id)
            case .resolve:
                guard text == "keep-current" else { throw CoreError.invalidArgument("resolve takes keep-current") }
                try core.resolveKeepingCurrent(id)
            }
            return true
        }
        if key == FileSystem.syncPausedAttribute {
            guard id == core.rootID else { throw CoreError.invalidArgument("\(key) is set on the container's root") }
            guard text == "0" || text == "1" else { throw CoreError.invalidArgument("\(key) takes 0 or 1") }
            try core.setSyncPaused(text == "1")
            return true
        }
        // A share's attributes, which `cp -a` copies along, are the remote's to say: written, they change nothing.
        if Container.shareAttributeNames.contains(key) { return true }
        guard let attr = StatusAttribute(rawValue: key) else { return false }
        guard attr.accepts(text) else { throw CoreError.invalidArgument("\(text) is not a value of \(key)") }
        if attr == .pinned { try core.setPinned(id, text == "1") }
        if attr == .isExcludedFromSync { try core.setExcludedFromSync(id, text == "1") }
        return true
    }

    func removexattr(_ ino: UInt64, _ name: String) throws(CoreError) {
        guard let id = inodes.id(ino) else { throw .notFound }
        guard case .item = route(id) else { throw .readOnly }
        if name.hasPrefix(StatusAttribute.prefix) {
            let key = String(name.dropFirst(StatusAttribute.prefix.count))
            guard StatusAttribute(rawValue: key) != nil || Container.shareAttributeNames.contains(key) else { throw .noAttribute }
            return
        }
        guard name.hasPrefix("user.") else { throw .noAttribute }
        try core.removeUserXattr(id, name)
    }
}

extension FileSystem {
    /// The root's attributes: the core's, then the account's (usage and quota), when the daemon gives them.
    func rootAttributes() throws(CoreError) -> [(name: String, value: String)] {
        try core.rootAttributes() + (accountAttributes?() ?? [])
    }

    /// The status attributes a virtual node shows (none when it is gone); nil for an item's node.
    func virtualStatus(_ id: String) throws(CoreError) -> [String: String]? {
        switch route(id) {
        case .item: return nil
        case .tree(let tree, let parsed): return try tree.node(parsed).map(tree.statusAttributes) ?? [:]
        case .none: return [:]
        }
    }
}
