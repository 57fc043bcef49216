// The one door from the sync core to a remote. The HTTP client (UbiquityHTTP), the in-process fakes of the
// tests and, later, an object-store client all implement it, so the core never knows which it talks to.
// Every call throws RemoteError only (untyped `throws`: typed throws crashes this compiler here). Calls block
// the calling thread; the core calls them only from its transfer and sync threads, never from a file-system
// request.
//
// What must hold: an implementation maps each of its failures onto one `RemoteError`, so that `isTransient` is
// true only for what may succeed later (unreachable, server, corrupt): the core retries those and takes the
// others as answers. An update or a delete is conditional (`ifMatch`, the version last seen); a lost one
// answers `.preconditionFailed` with the remote's current state (and, for a write with a change id, this
// device's last change the remote applied to the item: `yours`). A put or delete may carry the change's id
// (`WireChangeID`); a retry of a change the remote already applied answers `.alreadyApplied`, which the caller
// takes as the success whose answer was lost. `downloadBlob` does not verify: the caller
// checks every byte (Downloads.swift). The conformance suite holds every implementation to the same answers.
// Recently Deleted and version history (docs/HISTORY.md) are read and changed through `history`, `trash`,
// `restore`, `emptyTrash` and `rewind`; a remote that keeps no history throws `.notFound` from each.
import Foundation
import UbiquityBase

public enum RemoteError: Error, Equatable, CustomStringConvertible {
    /// The remote could not be reached or did not answer in time.
    case unreachable(String)
    /// The token was refused.
    case unauthorized
    /// The container, item or blob does not exist.
    case notFound(String)
    /// The conditional write lost: `current` is the remote's current state of the item; `yours` this device's
    /// last change applied to it there, when the write carried a change id and there is one.
    case preconditionFailed(current: WireItem?, yours: WireLastChange? = nil)
    /// This change (by its id) was applied before (its answer was lost): at `version`; `current` is the item now.
    case alreadyApplied(version: Int64, current: WireItem)
    /// Another live item holds the name, or a directory is not empty.
    case conflict(String, current: WireItem?)
    /// The item cannot go where it was sent: its parent is not a live directory there, or lies below it.
    case misplaced(String)
    /// The remote refused the request as malformed or too large.
    case rejected(status: Int, message: String)
    /// Bytes did not hash to what was promised.
    case corrupt(String)
    /// The remote had trouble (5xx).
    case server(status: Int, message: String)
    /// The caller cancelled the transfer.
    case cancelled
    /// The remote refused to store more for this user (its quota, or its limit on items or containers): the
    /// change stays queued here and is tried again later (not `isTransient`: it backs off, as a refusal).
    case overQuota(String)
    /// The bytes that arrived could not be written here: the local disk is full.
    case localDiskFull(String)
    /// A file here that the transfer reads or writes failed (not the remote's doing), with the errno.
    case localFile(String, cause: Errno)

    public var description: String {
        switch self {
        case .unreachable(let m): return "remote unreachable: \(m)"
        case .unauthorized: return "the remote refused the token"
        case .notFound(let m): return "not found on the remote: \(m)"
        case .preconditionFailed: return "the item changed on the remote"
        case .alreadyApplied(let v, _): return "the change was already applied (version \(v))"
        case .conflict(let m, _): return "conflict on the remote: \(m)"
        case .misplaced(let m): return "the remote refused the place: \(m)"
        case .rejected(let s, let m): return "the remote refused the request (\(s)): \(m)"
        case .corrupt(let m): return "corrupt data: \(m)"
        case .server(let s, let m): return "remote error (\(s)): \(m)"
        case .cancelled: return "cancelled"
        case .overQuota(let m): return m.hasPrefix("over quota") ? m : "over quota: \(m)"
        case .localDiskFull(let m): return "no space left here: \(m)"
        case .localFile(let m, let cause): return "\(m): \(cause)"
        }
    }

    public var isOverQuota: Bool { if case .overQuota = self { return true } else { return false } }

    /// A failed write of a download's bytes here: a full disk is `localDiskFull`.
    public static func landing(_ error: Errno) -> RemoteError {
        error == .noSpace ? .localDiskFull("cannot write the downloaded bytes: \(error)")
            : .localFile("cannot write the downloaded bytes", cause: error)
    }

    /// Worth trying again later: the network or the server, not the request.
    public var isTransient: Bool {
        switch self {
        case .unreachable, .server, .corrupt: return true
        default: return false
        }
    }
}

/// Progress of one transfer: called with the bytes done so far; return false to cancel.
public typealias TransferProgress = (Int64) -> Bool

/// The answer to one entry of a batch: what its single call would have answered (the stored item or the
/// tombstone, or the refusal).
public typealias BatchResult = Result<WireItem, RemoteError>

public protocol RemoteClient: AnyObject, Sendable {
    /// Ensures the container exists; returns its root id and the feed position now.
    func openContainer() throws(RemoteError) -> WireContainer
    /// Changes after `token` (nil: from the start), waiting up to `waitSeconds` when there are none.
    func changes(since token: String?, waitSeconds: Int) throws(RemoteError) -> WireChanges
    /// The current state of one item (also a tombstone).
    func item(_ id: String) throws(RemoteError) -> WireItem
    /// Creates (`ifMatch` nil) or updates (`ifMatch` the version last seen) an item. With a `change` id, a
    /// retry of a change already applied throws `.alreadyApplied`.
    func putItem(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws(RemoteError) -> WireItem
    /// Deletes an item seen at version `ifMatch`; returns the tombstone. `change` as for `putItem`.
    func deleteItem(_ id: String, ifMatch: Int64, change: WireChangeID?) throws(RemoteError) -> WireItem
    /// Applies many puts and deletes in order, each atomically and on its own (a later entry may depend on an
    /// earlier one), and answers each as its single call would, in order. A thrown error is the whole answer
    /// lost: any number of the first entries may have been applied.
    func batch(_ entries: [WireBatchEntry]) throws(RemoteError) -> [BatchResult]
    /// True if the remote already holds the blob.
    func hasBlob(sha256: String) throws(RemoteError) -> Bool
    /// Uploads the file at `path` (whose content hashes to `sha256` and has `size` bytes) as a blob.
    func uploadBlob(sha256: String, size: Int64, fromFile path: String,
                    progress: TransferProgress?) throws(RemoteError)
    /// Downloads the blob's bytes from `offset` on, appending them to the open file `fd` (which is positioned at
    /// `offset`), calling `progress` with the absolute byte count. Does not verify the hash: the caller does.
    func downloadBlob(sha256: String, offset: Int64, to fd: FileDescriptor,
                      progress: TransferProgress?) throws(RemoteError)

    // Content in chunks (docs/CHUNKS.md). A remote without them throws `.notFound` from each: the caller then
    // moves the whole content as one blob.

    /// Those of the chunk hashes the remote does not hold.
    func missingChunks(_ sha256s: [String]) throws(RemoteError) -> Set<String>
    /// Uploads `size` bytes of the file at `path`, from `offset`, as the blob (a chunk) `sha256`.
    func uploadChunk(sha256: String, size: Int64, fromFile path: String, at offset: Int64,
                     progress: TransferProgress?) throws(RemoteError)
    /// Downloads the whole blob (a chunk) `sha256` into `fd` at `fileOffset`, whatever the descriptor's position
    /// (so that several chunks may land in one file at once), calling `progress` with the chunk's bytes so far.
    /// Does not verify.
    func downloadChunk(sha256: String, to fd: FileDescriptor, at fileOffset: Int64, progress: TransferProgress?) throws(RemoteError)
    /// Commits a version kept in chunks, once every data chunk it names is on the remote (else
    /// `.conflict` naming the chunk that is not).
    func putManifest(_ manifest: WireManifest) throws(RemoteError)
    /// The chunks of the version `sha256`; nil when that version is one blob.
    func manifest(sha256: String) throws(RemoteError) -> WireManifest?

    // Recently Deleted and version history (docs/HISTORY.md).

    /// The item's kept versions, newest first (`.notFound` for an item the remote never had).
    func history(id: String) throws(RemoteError) -> [WireVersion]
    /// The delete of every item in Recently Deleted, newest first.
    func trash() throws(RemoteError) -> [WireVersion]
    /// Brings items back from Recently Deleted as new versions made by `device` (docs/HISTORY.md "Restore");
    /// answers every item made live, and those asked about that were live already. `.notFound` (and nothing
    /// restored) for an id the remote never had or one no longer in Recently Deleted.
    func restore(ids: [String], device: String) throws(RemoteError) -> [WireItem]
    /// Removes these items (a folder with what was deleted with it) from Recently Deleted; answers how many went.
    func emptyTrash(ids: [String]) throws(RemoteError) -> Int
    /// Removes every item from Recently Deleted; answers how many went.
    func emptyTrash() throws(RemoteError) -> Int
    /// Brings the subtree of the live folder `folder` back to its state at `to` (ns since the epoch, the remote's
    /// clock) as new versions made by `device` (docs/HISTORY.md "Rewind"); answers what changed, or with
    /// `dryRun` what would (nothing written). `.rejected(400)` for a time in the future or before the folder's
    /// oldest kept version and for a folder that is not a live directory, `.notFound` for an unknown folder,
    /// `.conflict` for a content no longer kept: nothing is written then.
    func rewind(folder: String, to: Int64, dryRun: Bool, device: String) throws(RemoteError) -> [WireRewindChange]
    /// Deletes everything outside `Documents/` (with `documents`, everything but the root) as deletes made by
    /// `device`, in one step and as one entry of Recently Deleted (docs/HISTORY.md "Deleting an app's data");
    /// answers the deletes, children before their folders.
    func deleteData(documents: Bool, device: String) throws(RemoteError) -> WireDataDeleted

    // Shared folders (docs/SHARING.md): the remote's records of them.

    /// The shares the key's user owns or takes part in, of every container.
    func shares() throws(RemoteError) -> [WireShare]
    /// Shares folder `folder` of this container with user `user` (again: changes how); answers the share.
    func addShare(folder: String, user: String, readOnly: Bool) throws(RemoteError) -> WireShare
    /// Stops sharing folder `folder` of this container with `user` (`.notFound` when it was not).
    func removeShare(folder: String, user: String) throws(RemoteError)
    /// The key's user leaves share `id`, made with them (`.notFound` when it is not theirs).
    func leaveShare(id: String) throws(RemoteError)
}

extension RemoteClient {
    public func history(id: String) throws(RemoteError) -> [WireVersion] { throw RemoteError.notFound("history") }
    public func trash() throws(RemoteError) -> [WireVersion] { throw RemoteError.notFound("history") }
    public func restore(ids: [String], device: String) throws(RemoteError) -> [WireItem] { throw RemoteError.notFound("history") }
    public func emptyTrash(ids: [String]) throws(RemoteError) -> Int { throw RemoteError.notFound("history") }
    public func emptyTrash() throws(RemoteError) -> Int { throw RemoteError.notFound("history") }
    public func rewind(folder: String, to: Int64, dryRun: Bool, device: String) throws(RemoteError) -> [WireRewindChange] {
        throw RemoteError.notFound("history")
    }
    public func deleteData(documents: Bool, device: String) throws(RemoteError) -> WireDataDeleted { throw RemoteError.notFound("history") }
}

extension RemoteClient {
    public func shares() throws(RemoteError) -> [WireShare] { throw RemoteError.notFound("shares") }
    public func addShare(folder: String, user: String, readOnly: Bool) throws(RemoteError) -> WireShare {
        throw RemoteError.notFound("shares")
    }
    public func removeShare(folder: String, user: String) throws(RemoteError) { throw RemoteError.notFound("shares") }
    public func leaveShare(id: String) throws(RemoteError) { throw RemoteError.notFound("shares") }
}

extension RemoteClient {
    public func missingChunks(_ sha256s: [String]) throws(RemoteError) -> Set<String> { throw RemoteError.notFound("chunks") }
    public func uploadChunk(sha256: String, size: Int64, fromFile path: String, at offset: Int64,
                            progress: TransferProgress?) throws(RemoteError) {
        throw RemoteError.notFound("chunks")
    }
    /// For a remote that writes a download at the descriptor's position (`fd` then serves this call alone).
    public func downloadChunk(sha256: String, to fd: FileDescriptor, at fileOffset: Int64,
                              progress: TransferProgress?) throws(RemoteError) {
        guard lseek(fd.raw, off_t(fileOffset), SEEK_SET) == off_t(fileOffset) else {
            throw RemoteError.localFile("cannot seek to \(fileOffset)", cause: .current)
        }
        try downloadBlob(sha256: sha256, offset: 0, to: fd, progress: progress)
    }
    public func putManifest(_ manifest: WireManifest) throws(RemoteError) { throw RemoteError.notFound("chunks") }
    public func manifest(sha256: String) throws(RemoteError) -> WireManifest? { nil }
}

extension RemoteClient {
    /// The current state of one item, nil for an item the remote does not know.
    public func itemIfPresent(_ id: String) throws(RemoteError) -> WireItem? {
        do { return try item(id) } catch {
            if case .notFound = error { return nil }
            throw error
        }
    }

    /// A put without a change id (a client that does not retry by id).
    public func putItem(_ item: WireItem, ifMatch: Int64?) throws(RemoteError) -> WireItem {
        try putItem(item, ifMatch: ifMatch, change: nil)
    }
    /// A delete without a change id.
    public func deleteItem(_ id: String, ifMatch: Int64) throws(RemoteError) -> WireItem {
        try deleteItem(id, ifMatch: ifMatch, change: nil)
    }

    /// A batch as single calls (the default, for remotes without a batch of their own).
    public func batch(_ entries: [WireBatchEntry]) throws(RemoteError) -> [BatchResult] { try batchAsSingleCalls(entries) }

    /// A batch as single calls: inline content is uploaded as a blob first unless the remote has it. A transient
    /// failure ends the batch, as a lost answer.
    public func batchAsSingleCalls(_ entries: [WireBatchEntry]) throws(RemoteError) -> [BatchResult] {
        var results: [BatchResult] = []
        for entry in entries {
            do {
                results.append(.success(try applyOne(entry)))
            } catch {
                if error.isTransient { throw error }
                results.append(.failure(error))
            }
        }
        return results
    }

    private func applyOne(_ entry: WireBatchEntry) throws(RemoteError) -> WireItem {
        switch entry.op {
        case .delete:
            guard let version = entry.ifMatch else {
                throw RemoteError.rejected(status: 400, message: "If-Match version needed")
            }
            return try deleteItem(entry.id, ifMatch: version, change: entry.changeID)
        case .put:
            guard let item = entry.item, item.id == entry.id else {
                throw RemoteError.rejected(status: 400, message: "the id in the body differs from the entry's")
            }
            if let content = entry.content { try uploadInline(Array(content), sha256: item.sha256) }
            return try putItem(item, ifMatch: entry.ifMatch, change: entry.changeID)
        }
    }

    /// Uploads inline content through a temporary file (the remote verifies its hash).
    private func uploadInline(_ bytes: [UInt8], sha256: String) throws(RemoteError) {
        if bytes.isEmpty { return }
        if try hasBlob(sha256: sha256) { return }
        let path = NSTemporaryDirectory() + "/ubiquity-inline-" + randomHex(bytes: 8)
        do {
            let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
            defer { fd.close() }
            try fd.writeAll(bytes)
        } catch {
            removeLeftover(path)
            throw RemoteError.localFile("cannot stage inline content", cause: error)
        }
        defer { removeLeftover(path) }
        try uploadBlob(sha256: sha256, size: Int64(bytes.count), fromFile: path, progress: nil)
    }
}

/// The remote's key-value store of the container (its own door: a remote without one leaves the store local).
public protocol KeyValueRemote: AnyObject, Sendable {
    /// Writes one entry by last-writer-wins; answers the winner (the stored entry when it was later).
    /// A write over Apple's limits is refused with `.rejected(status: 413, ...)`.
    func putKV(_ entry: WireKVEntry) throws -> WireKVEntry
    /// Entries written after `since`, waiting up to `waitSeconds` when there are none.
    func kvChanges(since: Int64, waitSeconds: Int) throws -> WireKVChanges
}
