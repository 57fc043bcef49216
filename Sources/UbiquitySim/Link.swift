// One device's network path to the shared remote, injecting faults drawn from the scheduler's generator:
// partitions (every call refused), dropped requests (the remote never saw it), dropped responses (the remote
// applied it, the device sees an error), duplicated deliveries of item writes and deletes (the device sees the
// answer to the second copy), stale feed answers (an older page of the feed arrives, as from a lagging
// cache), slow transfers (a download cut off part way, resumed later with a range) and corrupt downloads.
//
// What must hold: a fault is drawn only from `World.rng`, so the same plan strikes the same faults; `calm`
// turns every fault off, a partition refuses every call. Each fault is counted. A thrown fault is always
// `.unreachable`, a transient error the core must retry; a corrupt download returns wrong bytes the core must
// refuse by their hash. Every item write that lands, a duplicate's first copy and one whose answer is dropped
// included, is told to `World.reached`, so the model knows what the remote saw. Behind the faults the link
// passes calls to one shared `MemoryRemote` unchanged, change ids included (a duplicate's second copy, or a
// retry after a dropped answer, is answered as already applied when the core sends its change's id).
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

    public init(dropRequest: Double = 0, dropResponse: Double = 0, duplicate: Double = 0, staleFeed: Double = 0,
                slowTransfer: Double = 0, corrupt: Double = 0) {
        self.dropRequest = dropRequest; self.dropResponse = dropResponse; self.duplicate = duplicate
        self.staleFeed = staleFeed; self.slowTransfer = slowTransfer; self.corrupt = corrupt
    }

    public var description: String {
        String(format: "dropRequest %.2f dropResponse %.2f duplicate %.2f staleFeed %.2f slow %.2f corrupt %.2f",
               dropRequest, dropResponse, duplicate, staleFeed, slowTransfer, corrupt)
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
    /// Feed positions this device asked for lately, for stale answers.
    private var asked: [String?] = []

    init(remote: MemoryRemote, device: String, world: World) {
        self.remote = remote
        self.device = device
        self.world = world
    }

    private var rates: FaultRates { world.rates }
    private func roll(_ p: Double) -> Bool { !calm && world.rng.chance(p) }

    private func call<T>(_ what: String, _ body: () throws -> T) throws -> T {
        if partitioned {
            world.count("partitioned call")
            throw RemoteError.unreachable("partitioned")
        }
        if roll(rates.dropRequest) {
            world.count("dropped request")
            throw RemoteError.unreachable("request lost")
        }
        let result: T
        do { result = try body() } catch {
            if roll(rates.dropResponse) { world.count("dropped response"); throw RemoteError.unreachable("answer lost") }
            throw error
        }
        if roll(rates.dropResponse) {
            world.count("dropped response")
            throw RemoteError.unreachable("answer lost")
        }
        return result
    }

    func openContainer() throws -> WireContainer { try call("open") { try remote.openContainer() } }

    func changes(since token: String?, waitSeconds: Int) throws -> WireChanges {
        try call("changes") {
            var since = token
            if asked.last != token { asked.append(token); if asked.count > 6 { asked.removeFirst() } }
            if asked.count > 1 && roll(rates.staleFeed) {
                since = asked[world.rng.int(asked.count - 1)]
                world.count("stale feed answer")
            }
            return try remote.changes(since: since, waitSeconds: 0)
        }
    }

    func item(_ id: String) throws -> WireItem { try call("item") { try remote.item(id) } }

    func putItem(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws -> WireItem {
        try call("put") {
            if roll(rates.duplicate) {
                world.count("duplicated write")
                if let first = try? remote.putItem(item, ifMatch: ifMatch, change: change) { world.reached(device, first) }
            }
            let stored = try remote.putItem(item, ifMatch: ifMatch, change: change)
            world.reached(device, stored)
            simLog.debug("remote: \(device) put \(item.id.prefix(6)) '\(item.name)' over \(ifMatch ?? 0): "
                         + "\(stored.version)")
            return stored
        }
    }

    func deleteItem(_ id: String, ifMatch: Int64, change: WireChangeID?) throws -> WireItem {
        try call("delete") {
            if roll(rates.duplicate) {
                world.count("duplicated write")
                _ = try? remote.deleteItem(id, ifMatch: ifMatch, change: change)
            }
            let tombstone = try remote.deleteItem(id, ifMatch: ifMatch, change: change)
            simLog.debug("remote: \(device) delete \(id.prefix(6)) over \(ifMatch): \(tombstone.version)")
            return tombstone
        }
    }

    func hasBlob(sha256: String) throws -> Bool { try call("head") { try remote.hasBlob(sha256: sha256) } }

    func uploadBlob(sha256: String, size: Int64, fromFile path: String, progress: TransferProgress?) throws {
        try call("upload") {
            if roll(rates.slowTransfer) {
                world.count("slow upload cut")
                throw RemoteError.unreachable("upload timed out")
            }
            try remote.uploadBlob(sha256: sha256, size: size, fromFile: path, progress: progress)
        }
    }

    func downloadBlob(sha256: String, offset: Int64, to fd: FileDescriptor, progress: TransferProgress?) throws {
        try call("download") {
            guard let whole = sha256 == emptySHA256 ? [] : remote.blob(sha256), offset <= Int64(whole.count) else {
                return try remote.downloadBlob(sha256: sha256, offset: offset, to: fd, progress: progress)
            }
            var rest = Array(whole[Int(offset)...])
            if rest.count >= 2 && roll(rates.slowTransfer) {
                world.count("slow download cut")
                try fd.writeAll(Array(rest[..<(rest.count / 2)]))
                _ = progress?(offset + Int64(rest.count / 2))
                throw RemoteError.unreachable("download timed out")
            }
            if !rest.isEmpty && roll(rates.corrupt) {
                world.count("corrupt download")
                rest[rest.count / 2] ^= 0x5a
                try fd.writeAll(rest)
                _ = progress?(offset + Int64(rest.count))
                return
            }
            try remote.downloadBlob(sha256: sha256, offset: offset, to: fd, progress: progress)
        }
    }
}
