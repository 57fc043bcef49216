// Recently Deleted and history in the mount (docs/HISTORY.md): `MOUNT/.trash/` is a hidden folder whose
// `.list` reads as the remote's Recently Deleted, one JSON object a line (`ubiquityfs trash list` reads it);
// `setfattr -n user.ubiquity.restore -v IDS MOUNT/.trash` brings items back and `user.ubiquity.emptyTrash`
// (IDS, or `all`) removes them for good (IDS: item ids, one a line). `getfattr -n user.ubiquity.history FILE`
// reads a file's kept versions as JSON, newest first (`ubiquityfs history`). `setfattr -n user.ubiquity.rewind
// -v NS DIR` brings a folder back to its state at NS (ns since the epoch), and `getfattr -n
// user.ubiquity.rewind:NS DIR` answers, changing nothing, what that would change (`ubiquityfs rewind`). None of
// these is listed, so that `getfattr -d` asks the remote nothing. `.trash`, `.list`, restore and emptyTrash are
// TrashTree's (TrashTree.swift); history and rewind, attributes of items, are here.
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
    static let historyAttribute = StatusAttribute.prefix + "history"
    static let rewindAttribute = StatusAttribute.prefix + "rewind"

    /// The versions as the mount shows them: one JSON object a line.
    static func jsonLines(_ versions: [WireVersion]) -> [UInt8] {
        var out: [UInt8] = []
        for v in versions { out += ((try? Array(JSONEncoder.wire.encode(v))) ?? []) + [0x0a] }
        return out
    }

    /// True for the attributes of an item answered through the remote (`history` and `rewind`; the trash's
    /// `restore`, `emptyTrash` and `deleteData` are TrashTree's).
    func asksRemote(_ id: String, _ name: String) -> Bool {
        guard case .item = route(id) else { return false }
        return name == FileSystem.historyAttribute || name.hasPrefix(FileSystem.rewindAttribute)
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
