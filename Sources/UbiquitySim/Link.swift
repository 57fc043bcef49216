// One device's network path to the shared remote, injecting faults drawn from the scheduler's generator:
// partitions (every call refused), dropped requests (the remote never saw it), dropped responses (the remote
// applied it, the device sees an error), duplicated deliveries of item writes and deletes (the device sees the
// answer to the second copy), stale feed answers (an older page of the feed arrives, as from a lagging
// cache), slow transfers (a download cut off part way, resumed later with a range) and corrupt downloads.
// Content in chunks meets the same faults chunk by chunk (an upload cut after some chunks are stored, its
// manifest never committed; a chunk download cut half way or served with a byte wrong), and three of its own:
// a chunk missing when a download asks for it (404, as if collected), a chunk collected between the ask and the
// commit (the commit answers 409), and a crash of the device inside a transfer (before the remote sees the
// request or after it applied it; the device restarts from its store after the step, World.run). And a slow
// answer: an item write applied, and before its answer comes back, other devices act and the device's own
// puller runs, as its threads do beside a push in flight (`World.meanwhile`).
//
// What must hold: a fault is drawn only from `World.rng`, so the same plan strikes the same faults; `calm`
// turns every fault off, a partition refuses every call. Each fault is counted. A thrown fault is always
// `.unreachable` (or the remote's own answer to a chunk gone: 404, 409), an error the core must retry; a corrupt
// download returns wrong bytes the core must refuse by their hash. The faults of one request strike each chunk
// at a fifth of their rate (`perChunk`): a transfer of five chunks meets about those of one whole blob. Every
// item write that lands, a duplicate's first copy and one whose answer is dropped included, is told to
// `World.reached`, so the model knows what the remote saw. Behind the faults the link passes calls to one
// shared `MemoryRemote` unchanged, change ids included (a duplicate's second copy, or a retry after a dropped
// answer, is answered as already applied when the core sends its change's id); a chunk is collected there only
// when nothing names it (`MemoryRemote.collect`). Without background transfers the core sends a file's chunks
// one at a time on the step's thread, so the link is never called from two threads.
import Foundation
import UbiquityBase
@_spi(Simulation) import UbiquityCore
import UbiquityTesting

public struct FaultRates: Sendable, CustomStringConvertible {
    public var dropRequest = 0.0
    public var dropResponse = 0.0
    public var duplicate = 0.0
    public var staleFeed = 0.0
    public var slowTransfer = 0.0
    public var corrupt = 0.0
    /// A chunk the remote lacks when a download asks for it, or collected before the commit of a manifest.
    public var missingChunk = 0.0
    /// The device crashes inside a chunk transfer or a manifest's commit.
    public var crashInTransfer = 0.0
    /// An item write's answer is slow: the remote applied it, and before the device hears so, other devices
    /// act and the device's own puller runs (`World.meanwhile`).
    public var slowAnswer = 0.0

    public init(dropRequest: Double = 0, dropResponse: Double = 0, duplicate: Double = 0, staleFeed: Double = 0,
                slowTransfer: Double = 0, corrupt: Double = 0, missingChunk: Double = 0, crashInTransfer: Double = 0,
                slowAnswer: Double = 0) {
        self.dropRequest = dropRequest; self.dropResponse = dropResponse; self.duplicate = duplicate
        self.staleFeed = staleFeed; self.slowTransfer = slowTransfer; self.corrupt = corrupt
        self.missingChunk = missingChunk; self.crashInTransfer = crashInTransfer; self.slowAnswer = slowAnswer
    }

    public var description: String {
        String(format: "dropRequest %.2f dropResponse %.2f duplicate %.2f staleFeed %.2f slow %.2f corrupt %.2f "
               + "missingChunk %.2f crashInTransfer %.2f slowAnswer %.2f",
               dropRequest, dropResponse, duplicate, staleFeed, slowTransfer, corrupt, missingChunk, crashInTransfer,
               slowAnswer)
    }
}

final class SimLink: RemoteClient, @unchecked Sendable {
    // @unchecked: a run is one thread (Random.swift); the core only needs its remote to be Sendable.
    let remote: MemoryRemote
    let device: String
    unowned let world: World
    var partitioned = false
    /// No faults (while the run quiesces).
    var calm = false
    /// The device crashed inside a transfer: every call fails until World.run restarts it after the step.
    var crashed = false
    /// Feed positions this device asked for lately, for stale answers.
    private var asked: [String?] = []

    init(remote: MemoryRemote, device: String, world: World) {
        self.remote = remote
        self.device = device
        self.world = world
    }

    private var rates: FaultRates { world.rates }
    private func roll(_ p: Double) -> Bool { !calm && world.rng.chance(p) }

    /// How much of a request's faults one chunk meets.
    private static let perChunk = 0.2

    /// One request through the faults of the path; `exposure`: the share of a whole request's faults it meets.
    private func call<T>(_ what: String, exposure: Double = 1, _ body: () throws(RemoteError) -> T) throws(RemoteError) -> T {
        if crashed { throw RemoteError.unreachable("the device crashed") }
        if partitioned {
            world.count("partitioned call")
            throw RemoteError.unreachable("partitioned")
        }
        if roll(rates.dropRequest * exposure) {
            world.count("dropped request")
            throw RemoteError.unreachable("request lost")
        }
        let result: T
        do { result = try body() } catch {
            if roll(rates.dropResponse * exposure) { world.count("dropped response"); throw RemoteError.unreachable("answer lost") }
            throw error
        }
        if roll(rates.dropResponse * exposure) {
            world.count("dropped response")
            throw RemoteError.unreachable("answer lost")
        }
        return result
    }

    /// A request of a chunk transfer (a chunk up or down, a manifest's commit): as `call`, and the device may
    /// crash in it, before the remote sees it or after the remote applied it.
    private func transfer<T>(_ what: String, exposure: Double, _ body: () throws(RemoteError) -> T) throws(RemoteError) -> T {
        try call(what, exposure: exposure) { () throws(RemoteError) in
            guard roll(rates.crashInTransfer * exposure) else { return try body() }
            world.count("crash in transfer")
            crashed = true
            if world.rng.chance(0.5) { _ = try? body() }
            throw RemoteError.unreachable("the device crashed")
        }
    }

    func openContainer() throws(RemoteError) -> WireContainer { try call("open") { () throws(RemoteError) in try remote.openContainer() } }

    func changes(since token: String?, waitSeconds: Int) throws(RemoteError) -> WireChanges {
        try call("changes") { () throws(RemoteError) in
            var since = token
            if asked.last != token { asked.append(token); if asked.count > 6 { asked.removeFirst() } }
            if asked.count > 1 && roll(rates.staleFeed) {
                since = asked[world.rng.int(asked.count - 1)]
                world.count("stale feed answer")
            }
            return try remote.changes(since: since, waitSeconds: 0)
        }
    }

    func item(_ id: String) throws(RemoteError) -> WireItem { try call("item") { () throws(RemoteError) in try remote.item(id) } }

    func putItem(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws(RemoteError) -> WireItem {
        try call("put") { () throws(RemoteError) in
            if roll(rates.duplicate) {
                world.count("duplicated write")
                if let first = try? remote.putItem(item, ifMatch: ifMatch, change: change) { world.reached(device, first) }
            }
            let stored = try remote.putItem(item, ifMatch: ifMatch, change: change)
            world.reached(device, stored)
            simLog.debug("remote: \(device) put \(item.id.prefix(6)) '\(item.name)' in \((item.parent ?? "-").prefix(6)) over "
                         + "\(ifMatch ?? 0): \(stored.version)")
            if !batching && roll(rates.slowAnswer) { world.meanwhile(device, item: item.id) }
            return stored
        }
    }

    /// A batch as single calls through the faults above; its answer may be slow once all of it is applied (as
    /// a server applies a batch in one transaction, nobody sees a part of it before the rest).
    func batch(_ entries: [WireBatchEntry]) throws(RemoteError) -> [BatchResult] {
        batching = true
        let results: [BatchResult]
        do { results = try batchAsSingleCalls(entries) } catch {
            batching = false
            throw error
        }
        batching = false
        let written = zip(entries, results).compactMap { entry, result -> String? in
            if case .success = result, entry.op == .put { return entry.id }
            return nil
        }
        if !written.isEmpty && roll(rates.slowAnswer) { world.meanwhile(device, item: written[world.rng.int(written.count)]) }
        return results
    }
    private var batching = false

    func deleteItem(_ id: String, ifMatch: Int64, change: WireChangeID?) throws(RemoteError) -> WireItem {
        try call("delete") { () throws(RemoteError) in
            if roll(rates.duplicate) {
                world.count("duplicated write")
                _ = try? remote.deleteItem(id, ifMatch: ifMatch, change: change)
            }
            let tombstone = try remote.deleteItem(id, ifMatch: ifMatch, change: change)
            simLog.debug("remote: \(device) delete \(id.prefix(6)) over \(ifMatch): \(tombstone.version)")
            return tombstone
        }
    }

    func hasBlob(sha256: String) throws(RemoteError) -> Bool { try call("head") { () throws(RemoteError) in try remote.hasBlob(sha256: sha256) } }

    func uploadBlob(sha256: String, size: Int64, fromFile path: String, progress: TransferProgress?) throws(RemoteError) {
        try call("upload") { () throws(RemoteError) in
            if roll(rates.slowTransfer) {
                world.count("slow upload cut")
                throw RemoteError.unreachable("upload timed out")
            }
            try remote.uploadBlob(sha256: sha256, size: size, fromFile: path, progress: progress)
        }
    }

    func downloadBlob(sha256: String, offset: Int64, to fd: FileDescriptor, progress: TransferProgress?) throws(RemoteError) {
        try call("download") { () throws(RemoteError) in
            guard let whole = sha256 == emptySHA256 ? [] : remote.blob(sha256), offset <= Int64(whole.count) else {
                return try remote.downloadBlob(sha256: sha256, offset: offset, to: fd, progress: progress)
            }
            var rest = Array(whole[Int(offset)...])
            if rest.count >= 2 && roll(rates.slowTransfer) {
                world.count("slow download cut")
                try landing { () throws(Errno) in try fd.writeAll(Array(rest[..<(rest.count / 2)])) }
                _ = progress?(offset + Int64(rest.count / 2))
                throw RemoteError.unreachable("download timed out")
            }
            if !rest.isEmpty && roll(rates.corrupt) {
                world.count("corrupt download")
                rest[rest.count / 2] ^= 0x5a
                try landing { () throws(Errno) in try fd.writeAll(rest) }
                _ = progress?(offset + Int64(rest.count))
                return
            }
            try remote.downloadBlob(sha256: sha256, offset: offset, to: fd, progress: progress)
        }
    }

    /// A write of downloaded bytes here, its failure as the HTTP client's would be.
    private func landing(_ body: () throws(Errno) -> Void) throws(RemoteError) {
        do { try body() } catch { throw .landing(error) }
    }

    /// Writes `bytes` at `offset` of `fd`, as `landing`.
    private func landing(_ bytes: [UInt8], at offset: Int64, of fd: FileDescriptor) throws(RemoteError) {
        let written = bytes.withUnsafeBytes { b in Result { () throws(Errno) in try fd.writeAll(b, at: offset) } }
        do { try written.get() } catch { throw .landing(error) }
    }

    // MARK: content in chunks

    func missingChunks(_ sha256s: [String]) throws(RemoteError) -> Set<String> {
        try call("chunks/missing") { () throws(RemoteError) in
            let missing = try remote.missingChunks(sha256s)
            world.count("ok chunk held already", sha256s.count - missing.count)
            return missing
        }
    }

    func uploadChunk(sha256: String, size: Int64, fromFile path: String, at offset: Int64,
                     progress: TransferProgress?) throws(RemoteError) {
        try transfer("upload chunk", exposure: Self.perChunk) { () throws(RemoteError) in
            if roll(rates.slowTransfer * Self.perChunk) {
                world.count("chunk upload cut")
                throw RemoteError.unreachable("upload timed out")
            }
            try remote.uploadChunk(sha256: sha256, size: size, fromFile: path, at: offset, progress: progress)
            world.count(calm ? "ok chunk uploaded, calm" : "ok chunk uploaded")
        }
    }

    func downloadChunk(sha256: String, to fd: FileDescriptor, at fileOffset: Int64,
                       progress: TransferProgress?) throws(RemoteError) {
        try transfer("download chunk", exposure: Self.perChunk) { () throws(RemoteError) in
            if roll(rates.missingChunk * Self.perChunk) {
                world.count("chunk missing")
                throw RemoteError.notFound("blob \(sha256)")
            }
            guard var bytes = remote.blob(sha256) else {
                return try remote.downloadChunk(sha256: sha256, to: fd, at: fileOffset, progress: progress)
            }
            if bytes.count >= 2 && roll(rates.slowTransfer * Self.perChunk) {
                world.count("chunk download cut")
                try landing(Array(bytes.prefix(bytes.count / 2)), at: fileOffset, of: fd)
                _ = progress?(Int64(bytes.count / 2))
                throw RemoteError.unreachable("download timed out")
            }
            if !bytes.isEmpty && roll(rates.corrupt * Self.perChunk) {
                world.count("corrupt chunk")
                bytes[bytes.count / 2] ^= 0x5a
                try landing(bytes, at: fileOffset, of: fd)
                _ = progress?(Int64(bytes.count))
                return
            }
            try remote.downloadChunk(sha256: sha256, to: fd, at: fileOffset, progress: progress)
            world.count(calm ? "ok chunk downloaded, calm" : "ok chunk downloaded")
        }
    }

    /// A chunk may be collected first (`missingChunk`): one of the manifest's that nothing names yet, such as
    /// one this very upload sent (the remote then refuses the commit, naming it).
    func putManifest(_ manifest: WireManifest) throws(RemoteError) {
        try transfer("commit manifest", exposure: 1) { () throws(RemoteError) in
            let hashes = manifest.chunkHashes
            if !hashes.isEmpty && roll(rates.missingChunk) {
                let first = world.rng.int(hashes.count)
                if let gone = hashes.indices.lazy.map({ hashes[(first + $0) % hashes.count] }).first(where: remote.collect) {
                    world.count("chunk collected")
                    simLog.debug("remote: chunk \(gone.prefix(8)) collected before \(device) commits \(manifest.sha256.prefix(8))")
                }
            }
            try remote.putManifest(manifest)
            world.count("ok manifest committed")
            if manifest.chunks.contains(where: \.isHole) { world.count("ok manifest with holes") }
        }
    }

    func manifest(sha256: String) throws(RemoteError) -> WireManifest? {
        try call("manifest") { () throws(RemoteError) in
            let manifest = try remote.manifest(sha256: sha256)
            if let manifest { world.count("ok chunk listed in a manifest fetched", manifest.chunkHashes.count) }
            return manifest
        }
    }

    // MARK: Recently Deleted and version history

    // Passed straight to the remote, without faults: the core asks them on threads of their own (Door/History.swift),
    // and a fault would draw from `World.rng`, which only the run's thread may.

    func history(id: String) throws(RemoteError) -> [WireVersion] { try remote.history(id: id) }

    func trash() throws(RemoteError) -> [WireVersion] { try remote.trash() }

    func restore(ids: [String], device: String) throws(RemoteError) -> [WireItem] { try remote.restore(ids: ids, device: device) }

    func emptyTrash(ids: [String]) throws(RemoteError) -> Int { try remote.emptyTrash(ids: ids) }

    func emptyTrash() throws(RemoteError) -> Int { try remote.emptyTrash() }

    func rewind(folder: String, to: Int64, dryRun: Bool, device: String) throws(RemoteError) -> [WireRewindChange] {
        try remote.rewind(folder: folder, to: to, dryRun: dryRun, device: device)
    }
}
