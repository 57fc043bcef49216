// Past versions of a file under `.versions` (docs/HISTORY.md): beside its conflict versions, the folder
// `MOUNT/.versions/PATH/` of a file holds one read-only file per kept earlier content of it, named
// `stem (vN, DEVICE, YYYY-MM-DD HH.MM.SS).ext` (N its version number on the remote, the time its mtime), which
// a conflict version's name (`stem (DEVICE, TIME).ext`) never matches. `cp` of one onto the live path writes
// it back as a new version; `mv` of one onto its own file does the same without a copy through the kernel.
//
// What must hold: the remote keeps the history, so the list comes from a request, never made on a FUSE
// worker: an opendir of a file's folder under `.versions`, or a lookup there of a name not known yet, asks the
// remote off the FUSE worker (Door/History.swift) and answers once it has (offline: the conflict versions
// only, and the cause in the log). What was heard last is kept per file (`HistoryCache`) for the requests that
// follow (getattr, lookup, open), which ask nothing. A past version is fetched (verified) at each open into a
// copy of its own that lives as long as the descriptor (`PastContent`).
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

/// The kept versions of each file as the remote last told them, newest first. Bounded: past `limit` files it
/// starts again (a listing asks again anyway).
final class HistoryCache: Sendable {
    private let known = Locked<[String: [WireVersion]]>([:])
    static let limit = 1024

    func versions(_ id: String) -> [WireVersion] { known.withLock { $0[id] ?? [] } }

    func remember(_ id: String, _ versions: [WireVersion]) {
        known.withLock { k in
            if k.count >= HistoryCache.limit && k[id] == nil { k.removeAll() }
            k[id] = versions
        }
    }
}

extension VersionsTree {
    /// The past contents of a file, oldest first, each named: of its kept versions, each one that brought
    /// content the version before it did not have (a rename or a chmod brings none), less the newest when it is
    /// what the file holds now.
    func pastVersions(_ item: Item) -> [(name: String, version: WireVersion)] {
        guard item.kind == .file else { return [] }
        var past: [WireVersion] = []
        for v in fs.histories.versions(item.id).reversed() where !v.deleted && v.kind == .file {
            if past.last?.sha256 != v.sha256 { past.append(v) }
        }
        if let last = past.last, !item.dirty, last.sha256 == item.remoteSHA { past.removeLast() }
        let (stem, ext) = FileSystem.stemAndExtension(item.name)
        return past.map { v in
            let device = v.device.replacingOccurrences(of: "/", with: "-")
            return ("\(stem) (v\(v.version), \(device), \(localTime(v.mtime)))\(ext)", v)
        }
    }

    /// A file's folder under `.versions` is listed, and looked in, once the remote has told its past versions.
    func remoteListing(_ id: NodeID, opening: Bool) -> RemoteAsk? {
        guard case .versionsDir(let item)? = node(id), item.kind == .file else { return nil }
        return { [self] in refreshHistory(item, then: $0) }
    }

    /// Asks the remote for a file's kept versions, remembers them, then runs `then` (also when the remote did not
    /// answer: what was known stays, and the cause is logged).
    func refreshHistory(_ item: Item, then: @escaping @Sendable () -> Void) {
        core.history(item.id) { [fs] result in
            switch result {
            case .success(let versions): fs.histories.remember(item.id, versions)
            case .failure(let error): fs.log.info("the past versions of \(fs.core.path(of: item.id)) are not listed: \(error)")
            }
            then()
        }
    }

    /// `mv` of a past version onto its own file: its content becomes the file's, as a new version (fetched
    /// first). Elsewhere in the mount EXDEV, so that `mv` copies (its `rm` of the version then fails: a past
    /// version stays until retention lets it go).
    func renamePastVersion(_ item: Item, _ v: WireVersion, _ newParent: String, _ newName: String, waiter: Waiter,
                           done: @escaping Completion<Void>) {
        guard newParent == item.parent, sameName(newName, item.name) else {
            return done(.failure(.core(.crossDevice("a past version moves in place only onto its own file"))))
        }
        let content = PastContent(sha256: v.sha256, size: v.size)
        fs.waitFor(waiter, start: { done in core.fetchPast(content, done: done) }, failed: { done(.failure($0)) }) { [core] in
            done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try core.restorePast(item.id, content) } })
        }
    }
}

extension FileSystem {
    /// Opens a past content (of a past version, or of a file in Recently Deleted: node `id`) read-only, once
    /// it is fetched (verified) into a copy of its own.
    func openPast(_ content: PastContent, _ id: String, flags: Int32, _ caller: Caller, waiter: Waiter,
                  done: @escaping Completion<Opened>) {
        if flags & O_ACCMODE != O_RDONLY { return done(.failure(.core(.readOnly))) }
        if !downloadPolicy.mayDownload(caller.pid) { return done(.failure(.core(.wouldBlock))) }
        waitFor(waiter, start: { done in core.fetchPast(content, done: done) }, failed: { done(.failure($0)) }) { [self] in
            done(Result { () throws(AdapterError) in
                let fd = try adapting { () throws(CoreError) in try core.openPast(content) }
                return Opened(fh: addHandle(OpenFile(id: id, fd: fd, writable: false)), keepCache: true)
            })
        }
    }
}
