// Recently Deleted and history in the mount (docs/HISTORY.md): `MOUNT/.trash/` is a hidden folder whose
// `.list` reads as the remote's Recently Deleted, one JSON object a line (`ubiquityfs trash list` reads it);
// `setfattr -n user.ubiquity.restore -v IDS MOUNT/.trash` brings items back and `user.ubiquity.emptyTrash`
// (IDS, or `all`) removes them for good (IDS: item ids, one a line). `getfattr -n user.ubiquity.history FILE`
// reads a file's kept versions as JSON, newest first (`ubiquityfs history`). `setfattr -n user.ubiquity.rewind
// -v NS DIR` brings a folder back to its state at NS (ns since the epoch), and `getfattr -n
// user.ubiquity.rewind:NS DIR` answers, changing nothing, what that would change (`ubiquityfs rewind`). None of
// these is listed, so that `getfattr -d` asks the remote nothing.
//
// What must hold: each of these is a request to the remote, answered through a completion (the core runs it
// off the FUSE worker), so no FUSE worker waits on the network; offline they fail at once with EIO and the
// cause in the log. `.list` is made at its open (a private unlinked file in the store's staging) and shows
// size 0 (direct I/O: reads go on to its end), so a `stat` asks the remote nothing.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

extension FileSystem {
    static let trashName = WireRules.trashFolder
    static let trashListName = ".list"
    static let trashDirID = NodeID.trashDir.description
    static let trashListID = NodeID.trashList.description
    static let restoreAttribute = StatusAttribute.prefix + "restore"
    static let emptyTrashAttribute = StatusAttribute.prefix + "emptyTrash"
    static let historyAttribute = StatusAttribute.prefix + "history"
    static let rewindAttribute = StatusAttribute.prefix + "rewind"

    /// The child `name` of `.trash` or of a folder in it (or `.trash` in the root); nil when `parent` is none.
    func trashChild(_ parent: String, _ name: String) -> (id: String, node: Node)?? {
        if parent == core.rootID && sameName(name, FileSystem.trashName) { return .some((FileSystem.trashDirID, .trashDir)) }
        guard let folder = FileSystem.trashFolder(parent) else { return nil }
        if folder.isEmpty && name == FileSystem.trashListName { return .some((FileSystem.trashListID, .trashList)) }
        return .some(trash.read { $0.child(folder, name) }.map { (FileSystem.trashItemID($0.id), .trashItem($0)) })
    }

    /// Opens `.trash/.list`, read-only, once the remote has answered.
    func openTrashList(flags: Int32, done: @escaping Completion<Opened>) {
        if flags & O_ACCMODE != O_RDONLY { return done(.failure(.core(.readOnly))) }
        core.recentlyDeleted { [self] result in
            done(Result { () throws(AdapterError) in
                try adapting { () throws(CoreError) in
                    let fd = try core.makeStagingFile(prefix: "trash")
                    do { try fd.writeAll(FileSystem.jsonLines(try result.get())) } catch {
                        fd.close()
                        throw CoreError.from(error)
                    }
                    return Opened(fh: addHandle(OpenFile(id: FileSystem.trashListID, fd: fd, writable: false)), directIO: true)
                }
            })
        }
    }

    /// The versions as the mount shows them: one JSON object a line.
    static func jsonLines(_ versions: [WireVersion]) -> [UInt8] {
        var out: [UInt8] = []
        for v in versions { out += ((try? Array(JSONEncoder.wire.encode(v))) ?? []) + [0x0a] }
        return out
    }

    /// True for the attributes answered through the remote (set on `.trash`; `history` and `rewind` of an item).
    func asksRemote(_ id: String, _ name: String) -> Bool {
        if id == FileSystem.trashDirID { return name == FileSystem.restoreAttribute || name == FileSystem.emptyTrashAttribute }
        return !isVirtual(id) && (name == FileSystem.historyAttribute || name.hasPrefix(FileSystem.rewindAttribute))
    }

    /// The time a rewind attribute names (`rewind:NS` read, `rewind` set to NS); nil when it names none.
    static func rewindTime(_ name: String, value: [UInt8]?) -> Int64? {
        if let value { return name == rewindAttribute ? Int64(String(decoding: value, as: UTF8.self)) : nil }
        guard name.hasPrefix(rewindAttribute + ":") else { return nil }
        return Int64(name.dropFirst(rewindAttribute.count + 1))
    }

    /// `rewind` set on a folder: brings it back to its state at the time the value names.
    func setRewind(_ id: String, _ name: String, _ value: [UInt8], done: @escaping Completion<Void>) {
        guard let to = FileSystem.rewindTime(name, value: value) else {
            return done(.failure(.core(.invalidArgument("rewind takes a time in ns since the epoch"))))
        }
        core.rewind(id, to: to, dryRun: false) { done($0.map { _ in }.mapError { .core($0) }) }
    }

    /// `rewind:NS` read on a folder: what a rewind to NS would change, as `{"changes": [...], "left": N}` (those
    /// that do not fit in an attribute's 64 KiB are left out, and counted).
    func readRewind(_ id: String, _ name: String, done: @escaping Completion<[UInt8]>) {
        guard let to = FileSystem.rewindTime(name, value: nil) else { return done(.failure(.core(.noAttribute))) }
        core.rewind(id, to: to, dryRun: true) { result in
            done(result.mapError { .core($0) }.map { changes in
                struct Preview: Encodable { var changes: [WireRewindChange]; var left: Int }
                return FileSystem.fittingAnAttribute(changes) { kept, left in
                    (try? Array(JSONEncoder.wire.encode(Preview(changes: kept, left: left)))) ?? []
                }
            })
        }
    }

    /// `restore` and `emptyTrash` on `.trash`: the ids, one a line (`all` empties everything).
    func setTrashAttribute(_ name: String, _ value: [UInt8], done: @escaping Completion<Void>) {
        let ids = String(decoding: value, as: UTF8.self).split(whereSeparator: { $0 == "\n" || $0 == "," })
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !ids.isEmpty else { return done(.failure(.core(.invalidArgument("no item ids given")))) }
        // The kernel's caches learn of the restored items (the notices queued as they were applied) before the
        // answer: a listing right after a restore shows them. (Not a request's thread: the remote's.)
        let answer: @Sendable (Result<Void, CoreError>) -> Void = { [notifier] result in
            notifier.sync {}
            done(result.mapError { .core($0) })
        }
        if name == FileSystem.restoreAttribute {
            return core.restoreFromTrash(ids) { answer($0.map { _ in }) }
        }
        core.emptyTrash(ids == ["all"] ? nil : ids) { answer($0.map { _ in }) }
    }

    /// `history` of an item: its kept versions as one JSON array, newest first; those that do not fit in an
    /// attribute's 64 KiB are left out from the oldest on.
    func readHistory(_ id: String, done: @escaping Completion<[UInt8]>) {
        core.history(id) { result in
            done(result.mapError { .core($0) }.map { versions in
                FileSystem.fittingAnAttribute(versions) { kept, _ in (try? Array(JSONEncoder.wire.encode(kept))) ?? [] }
            })
        }
    }

    /// The largest value of an extended attribute the kernel passes (XATTR_SIZE_MAX).
    static let attributeLimit = 65536

    /// `items` encoded by `encode` (given those kept and how many were left out), the last ones left out until
    /// it fits in an attribute.
    static func fittingAnAttribute<T>(_ items: [T], _ encode: ([T], Int) -> [UInt8]) -> [UInt8] {
        var kept = items[...]
        while true {
            let bytes = encode(Array(kept), items.count - kept.count)
            if bytes.count <= attributeLimit || kept.isEmpty { return bytes }
            kept.removeLast(max(1, kept.count / 8))
        }
    }
}
