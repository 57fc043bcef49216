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
// the size and a buffer too small ERANGE (`replyXattr`), for a get and a list alike. A list names only what a
// get then answers (absent errors and action names are not listed); a link, fifo or socket lists nothing.
import CFuse
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
    private func replyXattr(_ reply: Reply, _ bytes: [UInt8], _ size: Int) {
        if size == 0 { return reply.xattrSize(bytes.count) }
        if bytes.count > size { return reply.fail(AdapterError.bufferTooSmall) }
        bytes.withUnsafeBytes { reply.bytes($0) }
    }

    func getxattr(_ reply: Reply, _ ino: UInt64, _ name: String, _ size: Int) {
        guard let id = inodes.id(ino) else { return reply.fail(.notFound) }
        if isVirtual(id) {
            guard let value = versionAttributes(id)[name] else { return reply.fail(.noAttribute) }
            return replyXattr(reply, Array(value.utf8), size)
        }
        do {
            if name.hasPrefix(StatusAttribute.prefix) {
                let key = String(name.dropFirst(StatusAttribute.prefix.count))
                try lookAtPassthroughWriters(id)
                if id == core.rootID, let value = try core.rootAttributes().first(where: { $0.name == key })?.value {
                    return replyXattr(reply, Array(value.utf8), size)
                }
                guard let attr = StatusAttribute(rawValue: key), let value = attr.value(try core.status(id)) else {
                    return reply.fail(.noAttribute)
                }
                return replyXattr(reply, Array(value.utf8), size)
            }
            guard name.hasPrefix("user.") else { return reply.fail(.noAttribute) }
            replyXattr(reply, try core.userXattr(id, name), size)
        } catch { reply.fail(error) }
    }

    func listxattr(_ reply: Reply, _ ino: UInt64, _ size: Int) {
        guard let id = inodes.id(ino) else { return reply.fail(.notFound) }
        if isVirtual(id) {
            return replyXattr(reply, versionAttributes(id).keys.sorted().flatMap { Array($0.utf8) + [0] }, size)
        }
        // The kernel allows user.* attributes on files and directories only: a link, fifo or socket lists none.
        if let item = core.item(id), !item.isDirectory && !item.hasContent { return replyXattr(reply, [], size) }
        do {
            let status = try core.status(id)
            var list = [UInt8]()
            for attr in StatusAttribute.allCases where attr.value(status) != nil {
                list += Array(attr.fullName.utf8) + [0]
            }
            if id == core.rootID {
                for attr in try core.rootAttributes() { list += Array((StatusAttribute.prefix + attr.name).utf8) + [0] }
            }
            for name in core.userXattrNames(id) { list += Array(name.utf8) + [0] }
            replyXattr(reply, list, size)
        } catch { reply.fail(error) }
    }

    func setxattr(_ reply: Reply, _ ino: UInt64, _ name: String, _ value: UnsafeRawBufferPointer, _ flags: Int32) {
        guard let id = inodes.id(ino) else { return reply.fail(.notFound) }
        if isVirtual(id) { return setVersionAttribute(reply, id, name) }
        let bytes = [UInt8](value)
        do throws(CoreError) {
            if name.hasPrefix(StatusAttribute.prefix) {
                let known = try setStatus(id, String(name.dropFirst(StatusAttribute.prefix.count)),
                                          String(decoding: bytes, as: UTF8.self))
                if !known { return reply.fail(AdapterError.unknownAttribute) }
            } else if name.hasPrefix("user.") {
                try core.setUserXattr(id, name, bytes, create: flags & Int32(XATTR_CREATE) != 0,
                                      replace: flags & Int32(XATTR_REPLACE) != 0)
            } else {
                return reply.fail(.unsupported("only user.* attributes can be set"))
            }
            reply.ok()
        } catch { reply.fail(error) }
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
        guard let attr = StatusAttribute(rawValue: key) else { return false }
        guard attr.accepts(text) else { throw CoreError.invalidArgument("\(text) is not a value of \(key)") }
        if attr == .pinned { try core.setPinned(id, text == "1") }
        if attr == .isExcludedFromSync { try core.setExcludedFromSync(id, text == "1") }
        return true
    }

    func removexattr(_ reply: Reply, _ ino: UInt64, _ name: String) {
        guard let id = inodes.id(ino) else { return reply.fail(.notFound) }
        if isVirtual(id) { return reply.fail(.readOnly) }
        do {
            if name.hasPrefix(StatusAttribute.prefix) {
                let key = String(name.dropFirst(StatusAttribute.prefix.count))
                guard StatusAttribute(rawValue: key) != nil else { return reply.fail(.noAttribute) }
                return reply.ok()
            }
            guard name.hasPrefix("user.") else { return reply.fail(.noAttribute) }
            try core.removeUserXattr(id, name)
            reply.ok()
        } catch { reply.fail(error) }
    }
}

extension FileSystem {
    /// The status a version file shows: whether its content is stored here.
    func versionAttributes(_ id: String) -> [String: String] {
        guard case .version(let item, let c) = node(id) else { return [:] }
        let local = core.hasLocalConflict(item.id, c.id)
        return [StatusAttribute.isUbiquitous.fullName: "1",
                StatusAttribute.downloadingStatus.fullName: local ? "current" : "notDownloaded"]
    }

    /// Evict and download work on version files; everything else under .versions is read-only.
    func setVersionAttribute(_ reply: Reply, _ id: String, _ name: String) {
        guard case .version(let item, let c) = node(id) else { return reply.fail(.readOnly) }
        switch name {
        case StatusAttribute.prefix + ActionAttribute.evict.rawValue:
            core.evictConflict(item.id, c.id)
        case StatusAttribute.prefix + ActionAttribute.download.rawValue:
            core.fetchConflict(item.id, c.id) { _ in }
        default:
            return reply.fail(.readOnly)
        }
        reply.ok()
    }
}
