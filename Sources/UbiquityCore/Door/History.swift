// Recently Deleted and version history (docs/HISTORY.md), as the adapter asks for them: the remote keeps them,
// so each call is a request to the remote, run off the caller's thread (a few at a time) and answered through a
// completion.
//
// What must hold: no call blocks its caller (a FUSE worker) on the network: the request runs on its own thread,
// and while the remote is known to be unreachable the answer comes at once, as for an open offline. What a
// restore made live is applied here as a pull would apply it, before the completion runs, so the caller sees
// the restored items at once; other devices see them through the feed, as any change.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): none held across the request; the
// restored items are applied by the pull side's step, which takes the container's lock.
import Foundation
import UbiquityBase

extension Container {
    public typealias Answer<T> = @Sendable (Result<T, CoreError>) -> Void

    /// Every item in Recently Deleted (its delete: path, time, device), newest first.
    public func recentlyDeleted(done: @escaping Answer<[WireVersion]>) {
        askRemote("the list of Recently Deleted", done: done) { remote throws(RemoteError) in try remote.trash() }
    }

    /// The kept versions of an item, newest first.
    public func history(_ id: String, done: @escaping Answer<[WireVersion]>) {
        askRemote("the history of \(path(of: id))", done: done) { remote throws(RemoteError) in try remote.history(id: id) }
    }

    /// Brings items back from Recently Deleted (a folder with what was deleted with it): answers the items
    /// made live, applied here already.
    public func restoreFromTrash(_ ids: [String], done: @escaping Answer<[WireItem]>) {
        let device = config.device
        askRemote("the restore", done: done) { [weak self] remote throws(RemoteError) in
            let restored = try remote.restore(ids: ids, device: device)
            self?.sync.applyFetched(restored)
            return restored
        }
    }

    /// Removes items (nil: every item) from Recently Deleted for good; answers how many went.
    public func emptyTrash(_ ids: [String]?, done: @escaping Answer<Int>) {
        askRemote("emptying Recently Deleted", done: done) { remote throws(RemoteError) in
            if let ids { return try remote.emptyTrash(ids: ids) }
            return try remote.emptyTrash()
        }
    }

    /// Brings the folder's subtree back to its state on the remote at `to` (ns since the epoch), as new versions
    /// that reach every device through the feed (with `dryRun`, nothing written); answers what changes.
    public func rewind(_ folder: String, to: Int64, dryRun: Bool, done: @escaping Answer<[WireRewindChange]>) {
        let device = config.device
        askRemote("the rewind of \(path(of: folder))", done: done) { remote throws(RemoteError) in
            try remote.rewind(folder: folder, to: to, dryRun: dryRun, device: device)
        }
    }

    /// Deletes the app's data on the remote (everything outside `Documents/`; with `documents`, everything) as
    /// one entry of Recently Deleted: answers the deletes, applied here already, as a restore's items are.
    public func deleteData(documents: Bool, done: @escaping Answer<WireDataDeleted>) {
        let device = config.device
        askRemote("deleting the app's data", done: done) { [weak self] remote throws(RemoteError) in
            let answer = try remote.deleteData(documents: documents, device: device)
            self?.sync.applyFetched(answer.deleted)
            return answer
        }
    }

    // MARK: past versions as files

    /// Fetches a past version's content (verified) for one open, calling `done` once it is here or failed.
    public func fetchPast(_ content: PastContent, done: @escaping @Sendable (Result<Void, CoreError>) -> Void) {
        if content.size == 0 { return done(.success(())) }
        downloads.wait(for: content.description, done: done)
    }

    /// Opens the copy `fetchPast` brought, read-only, and lets go of its name: it lives as long as the
    /// descriptor. A past version of no bytes needs no copy.
    public func openPast(_ content: PastContent) throws(CoreError) -> FileDescriptor {
        if content.size == 0 { return try makeStagingFile(prefix: "past") }
        let key = content.description, path = paths.past(key)
        defer {
            removeLeftover(path)
            update { s in s.transfers[key] = nil }
        }
        do { return try FileDescriptor.open(path, O_RDONLY) } catch { throw CoreError(error) }
    }

    /// Makes a past version the file's current content, as a local edit that syncs like any (`mv` of a past
    /// version onto its file). Needs the copy `fetchPast` brought (`.wouldBlock` otherwise).
    public func restorePast(_ id: String, _ content: PastContent) throws(CoreError) {
        try refuseChangeInAShare()
        let key = content.description
        defer { update { s in s.transfers[key] = nil } }
        if content.size == 0 {
            // Nothing to fetch: an empty copy stands for it.
            do { try FileDescriptor.open(paths.past(key), O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600).close() } catch {
                throw CoreError(error)
            }
        }
        try replaceContent(id, from: paths.past(key), size: content.size)
    }

    /// Runs `body` against the remote off the caller's thread (`remoteAsks`) and answers through `done`; at once,
    /// with the cause, while the remote is known to be unreachable.
    func askRemote<T>(_ what: String, done: @escaping Answer<T>,
                              _ body: @escaping @Sendable (RemoteClient) throws(RemoteError) -> T) {
        if let since = offlineSince {
            return done(.failure(.io("\(what) needs the remote, unreachable since \(iso8601(nanoseconds: since))")))
        }
        let remote = self.remote, log = self.log
        Container.remoteAsks.addOperation {
            do throws(RemoteError) { done(.success(try body(remote))) } catch {
                log.warning("\(what) failed: \(error)")
                done(.failure(Container.historyError(error, what)))
            }
        }
    }

    /// Where requests to the remote made for the adapter run: a few at a time, so that a burst of them (a file
    /// manager opening many folders under `.versions`) queues rather than starts a thread each.
    private static let remoteAsks: OperationQueue = {
        let queue = OperationQueue()
        queue.name = "remote-ask"
        queue.maxConcurrentOperationCount = 4
        return queue
    }()

    private static func historyError(_ error: RemoteError, _ what: String) -> CoreError {
        switch error {
        case .notFound: return .notFound
        case .rejected(_, let message): return .invalidArgument(message)
        // Refused for what the remote holds now (a content no longer kept, a name taken): nothing was changed.
        case .conflict(let message, _): return .busy(message)
        default: return .remote(error)
        }
    }
}

/// A past version's content, fetched for one open under `.versions` or `.trash`: named by its hash and size
/// (and a token of its own, so that two opens never share a copy), as a download key `~SHA~SIZE~TOKEN`, which
/// no item id can be (they hold no `~`).
public struct PastContent: Sendable, CustomStringConvertible {
    public let sha256: String
    public let size: Int64
    let token: String

    public init(sha256: String, size: Int64) {
        self.sha256 = sha256
        self.size = size
        token = randomHex(bytes: 8)
    }

    init?(parsing key: String) {
        let parts = key.split(separator: "~", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0].isEmpty, let size = Int64(parts[2]) else { return nil }
        sha256 = String(parts[1])
        self.size = size
        token = String(parts[3])
    }

    public var description: String { "~\(sha256)~\(size)~\(token)" }
}
