// Pushes one pending item to the remote: its delete, or its content and metadata as one conditional write
// (or goes on from the refusal a batch met for it, PushBatch.swift).
// A lost condition (412) is a conflict, resolved here by the rules of the README so that every device,
// computing from the same two versions, reaches the same result.
//
// What must hold here: this file decides, the container records. Every read or write of the container's
// state is one locked step of PushState.swift, named by what it does; the pusher holds no lock across a
// network call, and reaches the puller only through its entries (`applyFetched`, `refetchRefused`).
// Each put and delete carries its change's id (`changeID`), a function of what is sent and its condition, so a
// retry of the same change (after a lost answer, a restart included) sends the same id and a new change a new
// one; a retry the remote already applied is acknowledged as the lost answer would have been.
import Foundation
import UbiquityBase

/// What is being pushed: the item as it was when the push began, and its content generation then.
struct PushSnapshot {
    var item: Item
    var generation: Int
}

/// An upload stopped because its file changed or was deleted meanwhile. No failure: the change that stopped it
/// is pending itself, and the push loop takes it once the writes pause (a retry at once would stop again).
struct UploadStopped: Error, CustomStringConvertible {
    var description: String { "the file changed or was deleted during its upload" }
}

/// The content goes up on the content lane (ContentLane.swift): the push of this item, and of one that waits
/// for it, goes on once the lane is done. No failure.
struct UploadAside: Error, CustomStringConvertible {
    var description: String { "the content is uploading on the content lane" }
}

struct Pusher {
    let container: Container
    /// The steps of the push side on the container's state: all the pusher records.
    private var push: PushSide { container.pushSide }
    let id: String
    /// The items whose push waits for this one to leave a name it holds on the remote, in the order they met it.
    let waiting: [String]
    private let log = Logger("push")

    init(container: Container, id: String, waiting: [String] = []) {
        self.container = container
        self.id = id
        self.waiting = waiting
    }

    func run() throws {
        // Items pushed first once already to free this one's name (see nameTaken).
        var pushedFirst: Set<String> = []
        try run(attempts: 0, pushedFirst: &pushedFirst)
    }

    /// Goes on from a write a batch carried and the remote refused, as if this push had sent it (the first of
    /// its attempts): the refusal is settled by the same rules, then the push goes on as `run`.
    func runAfterRefusal(_ error: RemoteError, of entry: WireBatchEntry, snap: PushSnapshot, pushed: Item) throws {
        var pushedFirst: Set<String> = []
        if case .alreadyApplied(let version, let current) = error, entry.op == .put, let wire = entry.item {
            return try acknowledgeApplied(wire, version: version, current: current, snap: snap, pushed: pushed)
        }
        let done: Bool
        if entry.op == .delete {
            done = try deleteRefused(error, deleted: pushed)
        } else {
            guard let wire = entry.item else { throw error }
            done = try putRefused(error, wire: wire, snap: snap, pushed: pushed, pushedFirst: &pushedFirst)
        }
        if !done { try run(attempts: 1, pushedFirst: &pushedFirst) }
    }

    private func run(attempts start: Int, pushedFirst: inout Set<String>) throws {
        var attempts = start
        while let snap = push.pushSnapshot(id), snap.item.isPending {
            attempts += 1
            if attempts > 8 { throw RemoteError.server(status: 0, message: "conflict did not settle after 8 tries") }
            // A local-only item never goes up: only the delete of a copy the remote still holds.
            if snap.item.isLocalOnly {
                if try pushRemoteCopyDelete(snap.item) { return }
                continue
            }
            if snap.item.deleted {
                if try pushDelete(snap.item) { return }
                continue
            }
            if snap.item.isDirectory, try push.dropNeedlessRevival(id) { return }
            if try pushItem(snap, pushedFirst: &pushedFirst) { return }
        }
        // An item in the journal with nothing left to push (or gone) leaves it, so the pusher does not spin.
        try push.dropFromJournal(id)
    }

    /// Pushes the item that must go first so that `other` can go (see `PushSide.firstToPush`, PushState.swift), as a push
    /// this one waits for.
    private func pushFirst(_ other: String) throws {
        try Pusher(container: container, id: other, waiting: waiting + [id]).run()
    }

    // MARK: delete

    /// Returns true when done, false to look again.
    private func pushDelete(_ item: Item) throws -> Bool {
        if item.remoteVersion == 0 { return try deleteAfterUnansweredCreate(item) }
        do {
            let change = changeID(condition: "delete \(item.remoteVersion)", item: nil)
            let tombstone = try container.remote.deleteItem(id, ifMatch: item.remoteVersion, change: change)
            try push.forgetDeleted(id, tombstone: tombstone.version)
        } catch let error as RemoteError {
            return try deleteRefused(error, deleted: item)
        }
        return true
    }

    /// The remote refused the delete. Returns true when done, false to look again.
    private func deleteRefused(_ error: RemoteError, deleted item: Item) throws -> Bool {
        switch error {
        case .alreadyApplied(let version, let current):
            // This delete landed before, unanswered: done; what the remote did since is taken as pulled.
            try push.forgetDeleted(id, tombstone: version)
            if current.version > version { container.sync.applyFetched([current]) }
        case .notFound:
            try push.forgetDeleted(id)
        case .preconditionFailed(let current, let yours):
            return try deleteMeetsNewerVersion(current, yours: yours, deleted: item)
        case .conflict(_, let child):
            return try deleteMeetsChild(child, error: error)
        default:
            throw error
        }
        return true
    }

    /// A delete of an item the remote never acknowledged: if its create was sent and no answer came, whether
    /// it landed decides.
    private func deleteAfterUnansweredCreate(_ item: Item) throws -> Bool {
        guard try push.createWasSent(id) else {
            try push.forgetDeleted(id)
            return true
        }
        guard let current = try container.remote.itemIfPresent(id) else { try push.forgetDeleted(id); return true }
        if current.deleted { try push.forgetDeleted(id); return true }
        if !isOwnWrite(current, deleted: item) { try restore(current); return true }
        // It landed and nobody changed it since: delete that version.
        try push.rebasePush(id, version: current.version)
        return false
    }

    /// The remote has a newer version than the one deleted here. Returns true when done.
    private func deleteMeetsNewerVersion(_ current: WireItem?, yours: WireLastChange?,
                                         deleted item: Item) throws -> Bool {
        guard let current, !current.deleted else {
            try push.forgetDeleted(id, tombstone: current?.version)
            return true
        }
        // The remote says this device's own change made that version (its answer was lost), or it looks so.
        if yours?.version == current.version || isOwnWrite(current, deleted: item) {
            // The newer version is a write of this device whose answer was lost: the delete stands.
            try push.rebasePush(id, version: current.version)
            return false
        }
        // Edit against delete: the edit wins; the item comes back here as the remote has it.
        try restore(current)
        return true
    }

    /// The directory is not empty there. A child that this device moved out or deleted goes first; otherwise
    /// it gained children elsewhere: it is kept, and its new children arrive by the feed. Returns true when done.
    private func deleteMeetsChild(_ child: WireItem?, error: RemoteError) throws -> Bool {
        guard let child, child.id != id else { throw error }
        guard push.isTakenOut(child.id, of: id) else {
            try restore(try container.remote.item(id))
            return true
        }
        // Not while a program writes it, nor when that push waits for this one (a cycle, which the push of a
        // name in the way breaks): the delete waits (the push loop tries again later).
        guard let first = push.firstToPush(toFree: child.id), first != id, !waiting.contains(first),
              waiting.count < 32 else {
            throw error
        }
        try pushFirst(first)
        return false
    }

    /// True when nothing in the remote's version of an item deleted here is news to the delete: it was made
    /// by this device (a write whose answer was lost), or it is the very state deleted here (a move or a change
    /// of metadata whose answer was lost: its author stays the content's writer), maybe under the name of a
    /// step aside, and it lists no conflict version this device has not seen.
    private func isOwnWrite(_ current: WireItem, deleted item: Item) -> Bool {
        // A step aside (an exchange's or a rotation's, `stepAside`) changes nothing but the name.
        let name = current.name == WireRules.asideName(id) ? item.name : current.name
        let known = current.device == container.config.device
            || (current.sha256 == item.remoteSHA && current.metadata.named(name) == item.metadata)
        return known && push.hasSeenConflicts(current.conflicts, listedBy: item)
    }

    /// Brings back an item deleted here that the remote kept, as the remote has it. The folders the remote has
    /// it below are taken first where they still lie below it here (a stale state: their moves out are yet
    /// to come in the feed), so that it does not come back below itself.
    private func restore(_ w: WireItem) throws {
        if let p = w.parent, push.liesBelow(p, anyOf: [id]) { try takeRemoteFolders(from: p) }
        try push.restoreDeleted(id, as: w)
        log.info("\(container.path(of: id)) was changed elsewhere while deleted here: kept")
    }

    /// Fetches folder `first` and those above it on the remote, and takes them as a pull would, top first.
    private func takeRemoteFolders(from first: String) throws {
        container.sync.applyFetched(try remoteFolders(from: first).reversed())
    }

    /// Folder `first` and those above it as the remote has them now, below the root, nearest first.
    private func remoteFolders(from first: String?) throws -> [WireItem] {
        var chain: [WireItem] = []
        var next = first
        while let q = next, q != container.rootID, chain.count < 256 {
            let up = try container.remote.item(q)
            chain.append(up)
            next = up.parent
        }
        return chain
    }

    // MARK: a local-only item's remote copy

    /// Deletes the remote copy of an item that became local-only here (a folder's once what is below it is
    /// gone); the local copy stays. Returns true when done, false to look again.
    private func pushRemoteCopyDelete(_ item: Item) throws -> Bool {
        do {
            let tombstone = try container.remote.deleteItem(id, ifMatch: item.remoteVersion)
            try push.leftRemote(id, base: tombstone.version)
        } catch let error as RemoteError {
            switch error {
            case .notFound:
                try push.leftRemote(id, base: nil)
            case .preconditionFailed(let current, _):
                return try remoteCopyMeetsNewerVersion(current, localOnly: item)
            case .conflict(_, let child):
                return try remoteCopyMeetsChild(child, localOnly: item, error: error)
            default:
                throw error
            }
        }
        return true
    }

    /// The remote copy changed since this device last saw it. Returns true when done.
    private func remoteCopyMeetsNewerVersion(_ current: WireItem?, localOnly item: Item) throws -> Bool {
        guard let current, !current.deleted else {
            try push.leftRemote(id, base: current?.version)
            return true
        }
        // A write of this device whose answer was lost: the delete goes on top of it.
        if current.device == container.config.device {
            try push.rebasePush(id, version: current.version)
            return false
        }
        // Changed elsewhere before the delete came: that edit stays on the remote (edit wins over delete),
        // apart from the copy kept here; made ubiquitous again, this one goes on top of the version it had, and
        // so meets that edit as a conflict.
        log.info("\(container.path(of: id)) was changed elsewhere: that version stays on the remote")
        try push.leftRemote(id, base: item.remoteVersion)
        return true
    }

    /// The remote folder still holds a child: this device's own local-only child goes first; something added
    /// there by another device meanwhile keeps the folder on the remote for it. Returns true when done.
    private func remoteCopyMeetsChild(_ child: WireItem?, localOnly item: Item, error: RemoteError) throws -> Bool {
        guard let child, child.id != id else { throw error }
        if push.hasRemoteCopyToDelete(child.id) {
            try Pusher(container: container, id: child.id).run()
            return false
        }
        log.info("\(container.path(of: id)) holds items added elsewhere: it stays on the remote for them")
        try push.leftRemote(id, base: item.remoteVersion)
        return true
    }

    // MARK: create or update

    /// Returns true when done, false to look again.
    private func pushItem(_ snap: PushSnapshot, pushedFirst: inout Set<String>) throws -> Bool {
        var snap = snap
        var item = snap.item
        if item.dirty {
            let path = container.path(of: id) // before: a file deleted meanwhile has none
            do {
                if container.sync.lane.isRunning, item.size > container.config.chunkFormat.chunkedAbove {
                    let lane = container.sync.lane
                    guard let done = lane.take(id, generation: snap.generation) else { throw UploadAside() }
                    item.remoteSHA = done.sha256
                    item.remoteSize = done.size
                    item.size = done.size
                } else {
                    try uploadContent(of: &item, snap: &snap)
                }
            } catch where Pusher.isStopped(error) {
                log.info("upload of \(path) stopped: the file changed or was deleted meanwhile")
                throw UploadStopped()
            }
        }
        let wire = wireItem(item)
        let ifMatch = item.remoteVersion == 0 ? nil : item.remoteVersion
        let change = changeID(condition: ifMatch.map { "If-Match: \($0)" } ?? "If-None-Match: *", item: wire)
        // From the mark on, a local delete leaves a tombstone (the create may land) instead of forgetting the
        // item; an item deleted since the snapshot is not sent at all.
        if try !push.markSent([(wire, ifMatch, change)]).isEmpty { return true }
        let stored: WireItem
        do {
            stored = try container.remote.putItem(wire, ifMatch: ifMatch, change: change)
        } catch RemoteError.alreadyApplied(let version, let current) {
            log.debug("push \(id): already applied at version \(version)")
            try acknowledgeApplied(wire, version: version, current: current, snap: snap, pushed: item)
            return true
        } catch {
            log.debug("push \(id) (base \(item.remoteVersion), sha \(wire.sha256.prefix(8))): \(error)")
            return try putRefused(error, wire: wire, snap: snap, pushed: item, pushedFirst: &pushedFirst)
        }
        log.debug("push \(id) (base \(item.remoteVersion), sha \(wire.sha256.prefix(8))): stored at \(stored.version)")
        try push.acknowledgePush(id, stored: stored, snap: snap, pushed: item)
        return true
    }

    /// The id of a change: derived from what is sent and its condition, so every retry of the same change sends
    /// the same id (also after a restart) and a different change a different one (a condition's version is
    /// never sent again once the remote has moved past it).
    func changeID(condition: String, item: WireItem?) -> WireChangeID {
        let digest = WireApplied.digest(condition: "\(id)\n" + condition, item: item)
        return WireChangeID(id: String(digest.prefix(32)), device: container.config.device)
    }

    /// This very change landed before and its answer was lost: acknowledged as that answer would have been
    /// (the item as the change left it, at `version`); then the remote's newer state, which the puller passed
    /// over while this push was pending, is taken as a pull takes it (an edit or a delete made elsewhere since).
    private func acknowledgeApplied(_ wire: WireItem, version: Int64, current: WireItem, snap: PushSnapshot,
                                    pushed: Item) throws {
        var stored = wire
        stored.version = version
        try push.acknowledgePush(id, stored: stored, snap: snap, pushed: pushed)
        if current.version > version { container.sync.applyFetched([current]) }
    }

    /// Uploads the content the item waits to push, for the content lane: its hash and size, and the content
    /// generation they were read at; nil when the item has none to push (deleted, or no longer changed).
    func uploadContentAlone() throws -> ContentLane.Uploaded? {
        guard var snap = push.pushSnapshot(id), snap.item.dirty, !snap.item.deleted else { return nil }
        var item = snap.item
        try uploadContent(of: &item, snap: &snap)
        return ContentLane.Uploaded(generation: snap.generation, sha256: item.remoteSHA, size: item.remoteSize)
    }

    /// Uploads the item's content (the blob, unless the remote has it) and records its hash and size as
    /// what is pushed.
    private func uploadContent(of item: inout Item, snap: inout PushSnapshot) throws {
        let upload = try container.contentForUpload(id)
        defer { upload.done() }
        if let generation = upload.generation { snap.generation = generation }
        let generation = snap.generation
        let wanted = { [push, id] in push.isStillToUpload(id, generation: generation) }
        // Uploading from the first read of the copy: a large file is read and hashed whole before anything
        // goes (a terabyte-long sparse file's zeros too), and its status says so meanwhile, at 0%.
        push.setUploadProgress(id, uploading: true, done: 0, total: item.size)
        defer { push.setUploadProgress(id, uploading: false, done: 0, total: 0) }
        let (sha, size) = try send(upload.path, while: wanted)
        item.remoteSHA = sha
        item.remoteSize = size
        item.size = size
    }

    /// Uploads the file's content and answers its hash and size: a file larger than the container's chunk
    /// format says goes up as the chunks the remote lacks and its manifest (docs/CHUNKS.md), unless the remote
    /// keeps no chunks or the manifest is more than the wire carries (a small format's cut of a large file); a
    /// smaller one, or one for such a remote, as one blob.
    private func send(_ path: String, while wanted: @escaping () -> Bool) throws -> (String, Int64) {
        let format = container.config.chunkFormat
        if try fileSize(path) > format.chunkedAbove {
            let cut = try Chunker(format).cut(file: path, hashingWhole: true, while: wanted)
            let manifest = WireManifest(sha256: cut.sha256 ?? "", size: cut.size,
                                        chunks: cut.chunks.map { WireChunk(sha256: $0.sha256, size: $0.size) })
            if manifest.problem == nil, try uploadChunks(of: manifest, cut.chunks, path: path, while: wanted) {
                container.recordChunkPlaces(id, cut.chunks)
                return (manifest.sha256, cut.size)
            }
            try uploadBlob(sha: manifest.sha256, size: cut.size, path: path, while: wanted)
            return (manifest.sha256, cut.size)
        }
        let (sha, size) = try sha256OfFile(path, while: wanted)
        try uploadBlob(sha: sha, size: size, path: path, while: wanted)
        return (sha, size)
    }

    /// Uploads the chunks the remote lacks, each once and several at once, then commits the manifest; nothing
    /// when the remote holds the version already. A chunk collected between the ask and the commit (409) is
    /// asked for again. False when the remote keeps no chunks.
    private func uploadChunks(of manifest: WireManifest, _ chunks: [Chunk], path: String,
                              while wanted: @escaping () -> Bool) throws -> Bool {
        let remote = container.remote
        push.setUploadProgress(id, uploading: true, done: 0, total: manifest.size)
        defer { push.setUploadProgress(id, uploading: false, done: manifest.size, total: manifest.size) }
        if try remote.hasBlob(sha256: manifest.sha256) { return true }
        var attempt = 0
        while true {
            attempt += 1
            let missing: Set<String>
            do { missing = try remote.missingChunks(manifest.chunkHashes) } catch {
                if case .notFound = error { return false }
                throw error
            }
            var seen = Set<String>()
            let sending = chunks.filter { $0.sha256.map { missing.contains($0) && seen.insert($0).inserted } ?? false }
            let done = Locked(manifest.size - sending.reduce(0) { $0 + $1.size })
            try inParallel(sending, width: container.config.environment.chunkStreams) { [push, id] chunk, goOn in
                try remote.uploadChunk(sha256: chunk.sha256!, size: chunk.size, fromFile: path, at: chunk.offset) { _ in
                    wanted() && goOn()
                }
                done.withLock {  // (held while the progress is set, so that it only rises)
                    $0 += chunk.size
                    push.setUploadProgress(id, uploading: true, done: $0, total: manifest.size)
                }
            }
            do {
                try remote.putManifest(manifest)
                log.debug("push \(id): \(sending.count) of \(manifest.chunkHashes.count) chunks sent")
                return true
            } catch {
                guard case .conflict(let why, _) = error, attempt < 3 else { throw error }
                log.info("push \(id): \(why); asking again")
            }
        }
    }

    /// True for an upload stopped because its file was deleted or changed meanwhile.
    static func isStopped(_ error: Error) -> Bool {
        if case RemoteError.cancelled = error { return true }
        return (error as? Errno) == Errno(ECANCELED)
    }

    /// The remote's form of the item as this device pushes it.
    func wireItem(_ item: Item) -> WireItem {
        var wire = WireItem(id: id, parent: item.parent, name: item.name, kind: item.kind, mode: item.sharedMode,
                            mtime: item.mtime, size: item.kind == .dir ? 0 : item.remoteSize,
                            sha256: item.hasContent ? item.remoteSHA : "", device: container.config.device,
                            xattrs: Xattrs.toWire(item.xattrs), conflicts: item.conflicts, target: item.target)
        if !item.dirty { wire.device = item.device.isEmpty ? container.config.device : item.device }
        return wire
    }

    /// The remote refused the write. Returns true when done, false to look again.
    private func putRefused(_ error: RemoteError, wire: WireItem, snap: PushSnapshot, pushed item: Item,
                            pushedFirst: inout Set<String>) throws -> Bool {
        switch error {
        case .preconditionFailed(let current, let yours):
            if let current, let sent = try landed(yours, pushed: item) {
                return try resolveOverLanded(sent, current, snap: snap, pushed: item)
            }
            try resolve(current, snap: snap, pushed: item)
        case .notFound:
            // The remote forgot the item: create it afresh.
            try push.forgetCreateSent(id)
            try push.rebasePush(id, version: 0)
        case .conflict(_, let holder):
            return try nameTaken(by: holder, error: error, wire: wire, pushed: item, pushedFirst: &pushedFirst)
        case .misplaced(let why):
            return try giveWay(wire, pushed: item, why: why)
        default:
            throw error
        }
        return false
    }

    /// Another item holds the name on the remote. Returns true when done, false to look again.
    private func nameTaken(by holder: WireItem?, error: RemoteError, wire: WireItem, pushed item: Item,
                           pushedFirst: inout Set<String>) throws -> Bool {
        guard let holder, holder.id != id, push.hasMovedAway(holder) else {
            try takeFreeName(pushed: item)
            return false
        }
        // The item in the way leaves that name here (moved or deleted, not pushed yet): it goes first (or the
        // new folder it waits for, one at a time up the chain of new folders). Not while a program writes it:
        // this push waits (the push loop tries again later).
        let first = push.firstToPush(toFree: holder.id)
        // The one to go first was pushed once already and the name is still held (its own push settled
        // otherwise): this item takes a free name, as against any other holder.
        if let first, pushedFirst.contains(first) {
            try takeFreeName(pushed: item)
            return false
        }
        let cycle = waiting.contains(holder.id) || first.map({ $0 == id || waiting.contains($0) }) == true
        if try cycle || holdsOnRemote(holder, pushed: item) {
            // A cycle of moves (an exchange, a rotation, or one through a new folder), or a folder deleted
            // here that the remote has this item in: this item steps aside on the remote, so that the one
            // waiting for its name can take it (or the delete can land); its own place goes at its next push.
            // A new item (a folder made here that the holder moves into) is created aside the same way: it
            // took a free name for good before, and every device showed "d 2" for the "d" it was named here.
            try stepAside(wire, pushed: item)
            return true
        }
        guard let first else { throw error }
        // A chain this long is not a real one: let the push loop try again later rather than recurse on.
        if waiting.count >= 32 { throw error }
        pushedFirst.insert(first)
        try pushFirst(first)
        return false
    }

    /// True when the holder of the name is a folder deleted here that the remote still has this item in (at
    /// any depth): its delete waits for this item to leave it, as this item waits for its name.
    private func holdsOnRemote(_ holder: WireItem, pushed item: Item) throws -> Bool {
        guard item.remoteVersion != 0, holder.kind == .dir,
              push.pushSnapshot(holder.id)?.item.deleted == true else { return false }
        return try remoteFolders(from: container.remote.item(id).parent).contains { $0.id == holder.id }
    }

    /// The put of this device that landed without an answer, the remote having moved on from the version this
    /// one was sent against: the one the remote names as this device's last change (`yours`), or else a
    /// create (nobody else makes this id). Nil when none is known to have landed.
    private func landed(_ yours: WireLastChange?, pushed item: Item) throws -> WireItem? {
        if let yours, yours.version > item.remoteVersion {
            let sent = try push.landedPut(id, change: yours.change)
            let kept = sent == nil ? ", not among those kept" : ""
            log.debug("push \(id): this device's change \(yours.change.prefix(8)) landed at \(yours.version)\(kept)")
            if let sent { return sent }
        }
        return item.remoteVersion == 0 ? try push.sentCreate(id) : nil
    }

    /// A put of this device landed without an answer, and the remote may have moved on from it: another device
    /// changed or deleted the item after it saw it. What was sent is what this device and the remote have in
    /// common: what is unchanged here since is acknowledged as landed, and the remote's newer state is taken
    /// for it as a pull would take it; only what changed here since is pushed against it (a conflict, or edit
    /// against delete, only then). Returns true when done.
    private func resolveOverLanded(_ sent: WireItem, _ current: WireItem, snap: PushSnapshot,
                                   pushed: Item) throws -> Bool {
        guard let metaChanged = try push.acknowledgeLandedPut(id, sent: sent, current: current,
                                                                   snap: snap, pushed: pushed) else {
            return true
        }
        // The put that landed is the base now: its content is one the remote had (its version number may not
        // be known, only that `current` is at or after it), so a remote still holding it is no conflict.
        var base = snap
        base.item.remoteVersion = current.version
        base.item.remoteSHA = sent.sha256
        base.item.remoteSize = sent.size
        base.item.dirty = snap.item.kind == .file && pushed.remoteSHA != sent.sha256
        base.item.metaDirty = metaChanged
        try resolve(current, snap: base, pushed: pushed)
        return false
    }

    /// Puts the item on the remote under a name of its own in the folder it goes to (or in `folder`: where the
    /// remote has it), to free the name it holds there; it stays pending here, where it already has its new
    /// place. Other devices may see that name until the item's next push lands.
    private func stepAside(_ wire: WireItem, pushed: Item, in folder: String? = nil) throws {
        var aside = wire
        aside.name = WireRules.asideName(id)
        if let folder { aside.parent = folder }
        let ifMatch = pushed.remoteVersion == 0 ? nil : pushed.remoteVersion // (nil: a create)
        let change = changeID(condition: "aside " + (ifMatch.map { "If-Match: \($0)" } ?? "If-None-Match: *"), item: aside)
        if try !push.markSent([(aside, ifMatch, change)]).isEmpty { return }
        let stored: WireItem
        do { stored = try container.remote.putItem(aside, ifMatch: ifMatch, change: change) } catch {
            if case RemoteError.alreadyApplied(let version, _) = error {
                return try push.rebasePush(id, version: version)
            }
            throw error
        }
        log.info("\(container.path(of: id)) steps aside on the remote for a move that takes its name")
        try push.rebasePush(id, version: stored.version)
    }

    /// Puts folder `other` (pending here, waiting for a name in the folder it moved to) in that folder on the
    /// remote under a name of its own, when the remote has that folder and not below `other`. False when it
    /// cannot: the folder is new, or below `other` there.
    private func stepAsideToItsFolder(_ other: String) throws -> Bool {
        guard let snap = push.pushSnapshot(other), snap.item.isPending, !snap.item.deleted, snap.item.isDirectory,
              snap.item.remoteVersion != 0, let folder = snap.item.parent,
              let remoteFolder = try container.remote.itemIfPresent(folder), !remoteFolder.deleted,
              try !remoteFolders(from: folder).contains(where: { $0.id == other }) else { return false }
        let mover = Pusher(container: container, id: other, waiting: waiting + [id])
        try mover.stepAside(mover.wireItem(snap.item), pushed: snap.item)
        return true
    }

    /// Another item holds the name on the remote: this one takes the next free name, here and there.
    /// If the item moved or was renamed here since the snapshot (the puller may have moved it out of the
    /// way already), that newer place is what the next try pushes: it is not renamed again.
    private func takeFreeName(pushed: Item) throws {
        try push.takeFreeName(id, ifStillAt: pushed.place)
    }

    /// The remote refused the item's place. Returns true when done, false to look again. Either its parent is
    /// not there yet (a new folder here whose create waits in the journal, as when a program makes a folder
    /// and moves a file into it while the file's upload is under way): the parent goes first. Or the parent is
    /// gone there (deleted elsewhere while this device put the item in it): the parent's tombstone is applied
    /// here, which revives the parent since it holds this item (edit wins over delete), and the parent's push
    /// goes first. Or the parent lies below the item there: when this device moved a folder between them out
    /// from under the item, that move goes first (`moveOutFromBelow`), or, when that move waits for this one
    /// (for its name), this item steps aside where the remote has it; otherwise two devices each moved one
    /// folder into the other: the move that reached the remote first wins, and this item goes back to where
    /// the remote has it (or, if that place is gone or below it here too, to the top of the container). Then
    /// the remote changes the puller refused meanwhile follow.
    private func giveWay(_ wire: WireItem, pushed: Item, why: String) throws -> Bool {
        guard let parentID = pushed.parent else { return true }
        let parent = try container.remote.itemIfPresent(parentID)
        if parent == nil, push.isUnpushedFolder(parentID), !waiting.contains(parentID), waiting.count < 32 {
            try pushFirst(parentID)
            return false
        }
        if let parent, parent.deleted || parent.kind != .dir, push.pushSnapshot(parentID) == nil {
            // Its folder is gone here too: this device deleted it and that delete went up, while this item's
            // edit won over its own delete elsewhere. Nothing brings that folder back: the item goes to the top
            // of the container, as an item whose place cannot be had does.
            try push.moveBack(id, ifStillAt: pushed.place, toWhereRemoteHas: nil, why: why)
            return false
        }
        if let parent, parent.deleted || parent.kind != .dir {
            log.info("\(container.path(of: id)): its folder was deleted elsewhere; the folder comes back")
            container.sync.applyFetched([parent])
            // Revived, or pending already (its own push then meets the tombstone): that push goes first. Left
            // to the push loop, a delete that waits for this item (`deleteMeetsChild`) would never let it run.
            if push.pushSnapshot(parentID)?.item.isPending == true, !waiting.contains(parentID),
               waiting.count < 32 {
                try pushFirst(parentID)
                return false
            }
            return true
        }
        let first = try parent.flatMap(moveOutFromBelow)
        if let first, !waiting.contains(first), waiting.count < 32 {
            try pushFirst(first)
            return false
        }
        let current = try container.remote.itemIfPresent(id)
        if let first, waiting.contains(first) {
            // That move waits for this push, for a name: this item's, or one of a chain of names (a folder
            // turned upside down along with an exchange of names). The folder below goes first to its new folder
            // under a name of its own, where nothing is below it; this item then moves, and the folder's name
            // follows at its next push.
            if try stepAsideToItsFolder(first) { return false }
            // Its new folder is below it there too: this item steps aside where the remote has it, which frees
            // the name it holds; its own move goes at its next push, once nothing is below it.
            if let current, !current.deleted, current.version == pushed.remoteVersion {
                try stepAside(wire, pushed: pushed, in: current.parent)
                return true
            }
        }
        try push.moveBack(id, ifStillAt: pushed.place, toWhereRemoteHas: current, why: why)
        container.sync.refetchRefused()
        return true
    }

    /// When the remote has the new folder below this item (the item would move below itself there) and this
    /// device moved one of the folders between them out from under it, not pushed yet: the push that must go
    /// first (a folder turned upside down: B moved out of A, then A into B, A's entry first). Nil otherwise.
    private func moveOutFromBelow(_ parent: WireItem) throws -> String? {
        var chain: [WireItem] = []
        var cur = parent
        while cur.id != id {
            guard let up = cur.parent, chain.count < 256 else { return nil }
            chain.append(cur)
            guard let next = try container.remote.itemIfPresent(up) else { return nil }
            cur = next
        }
        for folder in chain where push.hasMovedAway(folder) {
            if let first = push.firstToPush(toFree: folder.id), first != id { return first }
        }
        return nil
    }

    /// Uploads the blob, unless the remote has it; stops (`.cancelled`) once `wanted` says no more.
    private func uploadBlob(sha: String, size: Int64, path: String, while wanted: @escaping () -> Bool) throws {
        push.setUploadProgress(id, uploading: true, done: 0, total: size)
        defer { push.setUploadProgress(id, uploading: false, done: size, total: size) }
        if size > 0, try !container.remote.hasBlob(sha256: sha) {
            try container.remote.uploadBlob(sha256: sha, size: size, fromFile: path) { done in
                push.setUploadProgress(id, uploading: true, done: done, total: size)
                return wanted()
            }
        }
    }

    // MARK: conflicts

    /// The remote moved on since this device last saw the item: merge, or keep both contents.
    private func resolve(_ current: WireItem?, snap: PushSnapshot, pushed: Item) throws {
        guard let current else { return try push.rebasePush(id, version: 0) }
        try push.takePlaceIfDetached(id, from: current)
        if current.deleted, try acceptDelete(current, snap: snap, pushed: pushed) { return }
        if !contentsConflict(current, snap: snap, pushed: pushed) {
            // Edit against delete (the edit revives it), a change on one side only, or the same content on both
            // sides: this device's change goes on top of the remote's version, keeping what the remote changed.
            return try push.mergePush(id, onto: current, snap: snap, pushed: pushed)
        }
        if try settleLanded(current, snap: snap, pushed: pushed) { return }
        try keepBothContents(current, snap: snap, pushed: pushed)
    }

    /// True when both sides changed a file's content to different contents: only then is one kept as a
    /// conflict version. Not against a tombstone (edit wins over delete).
    private func contentsConflict(_ current: WireItem, snap: PushSnapshot, pushed: Item) -> Bool {
        // A create that meets an item already there has no version of its own to compare with: its remoteSHA
        // (the empty content) is not a content the remote had, and an item emptied there is a change too.
        let theirContentUnchanged = snap.item.remoteVersion != 0 && current.sha256 == snap.item.remoteSHA
        return !(current.deleted || !snap.item.dirty || current.sha256 == pushed.remoteSHA || theirContentUnchanged
                 || current.kind != .file)
    }

    /// Both sides changed the content: the later modification wins, ties to the greater device name; the
    /// loser is listed as a conflict version.
    private func keepBothContents(_ current: WireItem, snap: PushSnapshot, pushed: Item) throws {
        let random = container.config.environment
        let mine = WireConflict(id: random.randomHex(8), sha256: pushed.remoteSHA, size: pushed.remoteSize,
                                mtime: pushed.mtime, device: container.config.device)
        let theirs = WireConflict(id: random.randomHex(8), sha256: current.sha256, size: current.size,
                                  mtime: current.mtime, device: current.device)
        let iWin = (mine.mtime, mine.device) > (theirs.mtime, theirs.device)
        log.info("conflict on \(container.path(of: id)): \(iWin ? "this device" : current.device) wins")
        try push.recordConflict(id, against: current, loser: iWin ? theirs : mine, theirsWins: !iWin,
                                     snap: snap, pushed: pushed)
    }

    /// The tombstone carries what this device changed in the state being pushed (its content when dirty, as
    /// the current content or as a conflict version of this device; its metadata when changed): this write
    /// already landed (its answer was lost) and another device deleted the item after it saw that change
    /// (having maybe moved or changed it further itself). Not a concurrent edit: the delete wins, as it would
    /// have had the answer arrived. False (edit wins) when anything of this device's change differs, here or
    /// there, but the name (the puller may have moved this item out of the way of a new item that took its
    /// name meanwhile), conflict versions discarded here (the delete takes every version with it), and the
    /// time of a content not changed here.
    private func acceptDelete(_ current: WireItem, snap: PushSnapshot, pushed: Item) throws -> Bool {
        let contentThere = !snap.item.dirty || pushed.kind == .dir || push.listsAsConflict(current, pushed: pushed)
            || (current.sha256 == pushed.remoteSHA && current.size == pushed.remoteSize)
        let conflictsThere = Set(pushed.conflicts.map(\.id)).isSubset(of: current.conflicts.map(\.id))
        // A file whose content this device did not change has its content's time: where the tombstone holds
        // another content (written elsewhere before the delete), the times differ by that write, not by a
        // change of this device's.
        var mine = pushed.metadata
        if !snap.item.dirty && pushed.kind == .file && current.sha256 != pushed.remoteSHA { mine.mtime = current.mtime }
        let metaThere = !snap.item.metaDirty
            || (current.metadata.named(pushed.name) == mine && conflictsThere)
        guard contentThere && metaThere else { return false }
        return try push.removeIfUnchangedSincePush(id, tombstone: current, snap: snap, pushed: pushed)
    }

    /// This very write is listed there as this device's conflict version: it landed (the answer was lost) and
    /// another device's write won over it since, having seen it. Unless the item changed here since, the
    /// remote's state is taken as the puller takes it: pushing again would add a second version of the same
    /// write and make a version newer than what that device did next (a delete).
    private func settleLanded(_ current: WireItem, snap: PushSnapshot, pushed: Item) throws -> Bool {
        try push.settleLandedAsConflict(id, current: current, snap: snap, pushed: pushed)
    }
}
