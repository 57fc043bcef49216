// Step entry points for a deterministic driver (the simulator): each does one unit of the background work
// on the calling thread and returns, so a scheduler decides what runs when. Production uses `start` and its
// threads instead; these share the code the threads run (`apply`, `Pusher`, `Downloads.transfer`).
//
// What must hold: a step starts no thread and runs on the caller's, reaching the state only through `read` and
// `mutate`, as the threads do, so what a driver sees is what the threads would do in that order. A failed push
// step is recorded as the item's upload error and leaves it in the journal (a journal that cannot be read is
// recorded on the root). The paths handed out here are for a driver that damages files on purpose (the
// simulation); nothing else may write through them. All of it is `@_spi(Simulation)`: only code that imports
// the core with `@_spi(Simulation) import UbiquityCore` (the simulator, the tests) sees it.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the container's lock, as the loops take it.
import UbiquityBase

extension Container {
    /// What one push step did.
    @_spi(Simulation) public enum PushStep: Equatable, Sendable {
        /// Nothing can be pushed now.
        case idle
        /// One item was pushed (or its conflict resolved and settled).
        case pushed(String)
        /// The push of that item failed; it stays in the journal.
        case failed(String, String)
    }

    /// Fetches one page of the change feed without waiting and applies it. Returns true when more pages wait.
    @_spi(Simulation) public func pullOnce() throws -> Bool {
        let batch = try remote.changes(since: sync.feedToken, waitSeconds: 0)
        try sync.apply(batch)
        return batch.more
    }

    /// Pushes the oldest pushable pending items, as the push loop does: one, or many in one batch.
    @_spi(Simulation) public func pushOnce() -> PushStep {
        writeKeptBack() // as the push loop does first (a new folder's time, a new file not closed yet)
        let next: [String]
        do { next = try pushSide.nextPushableBatch(limit: WireBatchLimits.maxEntries) } catch {
            recordUploadFailure(rootID, error)
            return .failed(rootID, "\(error)")
        }
        guard let first = next.first else { return .idle }
        do {
            try sync.push(next)
            return .pushed(first)
        } catch {
            let failure = error as? BatchPushFailure
            recordUploadFailure(failure?.id ?? first, failure?.error ?? error)
            return .failed(failure?.id ?? first, "\(failure?.error ?? error)")
        }
    }

    /// One attempt to fetch an item's current content (`ID`) or a conflict version (`ID.CONFLICT`).
    @_spi(Simulation) public func downloadOnce(_ key: String) -> Result<Void, CoreError> { downloads.runOnce(key) }

    /// Without background transfers: the downloads asked for (pins, requests) and not yet fetched.
    @_spi(Simulation) public var requestedDownloads: [String] { downloads.book.withLock { $0.requested } }

    /// Whether the delete of `id` made here is kept back, not written yet (Store.keptBack): a crash now loses it.
    @_spi(Simulation) public func keepsDeleteBack(_ id: String) -> Bool { read { $0.store.keepsDelete(id) } }

    /// Every item of the in-memory index, tombstones waiting to be pushed included, by id.
    @_spi(Simulation) public func indexSnapshot() -> [Item] { read { s in s.items.values.sorted { $0.id < $1.id } } }

    /// Ids in the pending journal, oldest first.
    @_spi(Simulation) public func pendingIDs() throws -> [String] { try read { s in try s.store.pendingIDs() } }

    /// Every item as the store holds it (the simulation checks the index against it).
    @_spi(Simulation) public func storedItems() throws -> [Item] { try read { s in try s.store.loadItems() } }

    /// Where the store keeps an item's content, a conflict version's copy, all content, and downloads in flight
    /// (the simulation reads and damages these files as a crash or another program would).
    @_spi(Simulation) public func contentPath(_ id: String) -> String { paths.content(id) }
    @_spi(Simulation) public func conflictPath(_ id: String, _ conflict: String) -> String { paths.conflict(id, conflict) }
    @_spi(Simulation) public var contentDirectory: String { paths.content }
    @_spi(Simulation) public var stagingDirectory: String { paths.staging }

    /// Checks the store as `ubiquityfs check` does, under the lock (tests of a live container).
    @_spi(Simulation) public func checkStore(repair: Bool) throws -> CheckReport {
        try mutateThrowing { s in try s.store.check(repair: repair) }
    }

    /// The feed position last applied.
    @_spi(Simulation) public var feedPosition: String? { get throws { try sync.feedToken } }
}
