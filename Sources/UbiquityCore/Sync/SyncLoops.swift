// The two background loops of a container: the puller applies the remote's change feed to the index, the
// pusher sends the journal of local changes to the remote, oldest first. Conflicts found by the pusher (the
// remote's version moved on) are resolved by the rules of the README: later modification time wins, ties to
// the greater device name, the loser kept as a conflict version; edit wins over delete.
//
// What must hold here: the loops hold no container lock across a network call or a wait; every read or write
// of the container's state is one named step of PullState.swift or PushState.swift (the rules of applying a
// remote state, shared with the pusher, are in RemoteRules.swift).
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the container's lock only inside one step
// of PullState.swift or PushState.swift; `lastWake` is a leaf.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

final class SyncLoops: Sendable {
    // @unchecked: `container` is unowned, touched by a loop only while the loop holds it (`owner`); the rest is
    // immutable or a Loop or a Locked.
    /// The container's own calls (pullUntilCaughtUp, applyFetched, ...) run while it is alive.
    private unowned let container: Container
    /// What the loops hold: they take it strongly for one pass at a time, never across a pause or a long poll,
    /// so a container let go of after `stop` is freed at once (its store closed and unlocked).
    private weak let owner: Container?
    private let environment: CoreEnvironment
    private let log = Logger("sync")
    // At the priority of the threads answering requests, not below: both take the container's lock for steps of
    // milliseconds, and a thread set below them held it while the CPU went elsewhere, so requests waited on it
    // longer (their steps give way to waiting requests instead: PullSide.applyRemote).
    private let puller = Loop(name: "pull")
    private let pusher = Loop(name: "push")
    /// Where large content goes up, beside the push loop (ContentLane.swift).
    let lane: ContentLane
    /// When the pusher was last woken (the environment's clock): how a burst is seen to go on.
    private let lastWake = Locked<Int64>(0)

    init(container: Container) {
        self.container = container
        self.owner = container
        self.environment = container.config.environment
        self.lane = ContentLane(container: container)
    }

    func start() {
        puller.start { [self] in pullLoop() }
        pusher.start { [self] in pushLoop() }
        lane.start { [weak self] in self?.pusher.wake() }
        wakePusher()
    }

    /// Stops both loops and waits a few seconds at most for each to let go of the container (an upload in
    /// flight may hold the push loop; a long poll holds nothing of it).
    func stop() {
        puller.stop()
        pusher.stop()
        lane.stop()
        if !puller.join(timeout: 5) { log.warning("the pull loop did not stop within 5 s") }
        if !pusher.join(timeout: 5) { log.warning("the push loop did not stop within 5 s (an upload in flight)") }
        if !lane.join(timeout: 5) { log.warning("the content lane did not stop within 5 s (an upload in flight)") }
    }

    private var isStopping: Bool { puller.isStopping }

    /// Wakes both loops (sync resumed).
    func wake() {
        puller.wake()
        wakePusher()
    }

    /// How long a loop sleeps while sync is paused, unless woken by the resume.
    static let pausedNanoseconds: Int64 = 60_000_000_000

    func wakePusher() {
        let now = environment.clock()
        lastWake.withLock { $0 = now }
        pusher.wake()
    }

    /// Runs one pass of a loop holding the container; nil once it is gone or the loop is stopping.
    private func withOwner<T>(_ body: () -> T) -> T? {
        guard !isStopping, let owner else { return nil }
        return withExtendedLifetime(owner) { body() }
    }

    /// A burst of changes is gathered until it pauses this long...
    static let burstQuietNanoseconds: Int64 = 200_000_000
    /// ...or has gone on this long: then what is pending goes up while the burst continues.
    static let burstHoldNanoseconds: Int64 = 2_000_000_000

    /// Waits for a burst of changes (an editor's save, `tar x`, `rm -rf`) to pause, or to have gone on for a few
    /// seconds, so that it goes up in full batches and the uploads compete with it for the machine as little as
    /// they can.
    private func gatherBurst() {
        let start = environment.clock()
        repeat {
            environment.sleep(100_000_000)
            let last = lastWake.withLock { $0 }
            let now = environment.clock()
            if now - last >= SyncLoops.burstQuietNanoseconds || now - start >= SyncLoops.burstHoldNanoseconds { return }
        } while !isStopping
    }

    // MARK: pull

    /// The feed position last applied.
    var feedToken: String? { get throws { try container.pullSide.feedToken } }

    /// Applies the feed until the remote has nothing newer (used at start, without waiting).
    func pullUntilCaughtUp() throws {
        while true {
            let batch = try container.remote.changes(since: feedToken, waitSeconds: 0)
            try apply(batch)
            if !batch.more { return }
        }
    }

    /// What the pull loop carries from one look at the feed to the next.
    private struct PullState {
        var backoff = Backoff.sync
        /// The last look failed: the next one is a quick one.
        var failed = false
        /// Remote changes wait for room on the store's disk.
        var waitingForRoom = false
    }
    /// How often the pull loop looks again for room on a full store disk.
    static let roomPollNanoseconds: Int64 = 2_000_000_000

    /// Long-polls the change feed and applies what it brings. The poll holds nothing of the container (`away`),
    /// so a stop does not wait for it.
    private func pullLoop() {
        var pull = PullState()
        while true {
            // Paused: no look at the feed until the resume wakes the loop.
            guard let paused = withOwner({ container.isSyncPaused }) else { return }
            if paused {
                puller.pause(nanoseconds: SyncLoops.pausedNanoseconds)
                continue
            }
            // After a failure the first look is a quick one (no long poll), so a remote that is back is
            // noticed at once rather than when the long poll ends.
            guard let ask = withOwner({ () -> (RemoteClient, Result<String?, Error>, Int) in
                (container.remote, Result { try feedToken }, pull.failed ? 0 : container.config.pollWaitSeconds)
            }) else { return }
            let (remote, token, wait) = ask
            guard let answer = puller.away({ Result { try remote.changes(since: try token.get(), waitSeconds: wait) } })
            else { return }
            guard let pause = withOwner({ take(answer, &pull) }) else { return }
            sleepUnlessStopping(pause)
        }
    }

    /// Applies a feed answer, or notes its failure; answers how long to wait before the next look.
    private func take(_ answer: Result<WireChanges, Error>, _ pull: inout PullState) -> Int64 {
        do {
            let batch = try answer.get()
            container.remoteAnswered()
            pull.failed = false
            // Paused while the long poll was out: its answer is dropped (the feed position stays, so the resume
            // asks for it again).
            if container.isSyncPaused { return 0 }
            try apply(batch)
            if pull.waitingForRoom { log.info("the store has room again: remote changes are applied") }
            pull.waitingForRoom = false
            pull.backoff.reset()
            return 0
        } catch where isStoreDiskFull(error) {
            // The store's disk is full: the changes wait (the feed position stays) while the evictor and
            // the pusher make room, and are fetched again once the reserve is back.
            if !pull.waitingForRoom { log.warning("the store's disk is full: remote changes wait until there is room") }
            pull.waitingForRoom = true
            return SyncLoops.roomPollNanoseconds
        } catch {
            log.warning("change feed: \(error)")
            pull.failed = true
            let down: Bool
            if case RemoteError.unreachable = error { down = true } else { down = false }
            if down { container.remoteUnreachable() }
            else if case RemoteError.unauthorized = error { container.remoteRefusedKey() }
            else { container.remoteAnswered() }
            // A share's view whose feed is not found any more (the share is gone), or whose key is refused (revoked,
            // or its user removed): this user is out, and the view ends.
            if container.config.sharedWithMe != nil, RemoteError.endsAView(error) { container.shareEnded() }
            // While the remote is away, look again every second at most: opens wait for it only briefly, and
            // what waited goes within a second of its return (`remoteAnswered` wakes the pusher). A look at a
            // remote that is away is one refused connection, or one that times out.
            let wait = pull.backoff.delay(in: environment)
            return down ? min(wait, 1_000_000_000) : wait
        }
    }

    /// Sleeps through the environment, in steps of 0.1 s so that a stop is seen soon.
    private func sleepUnlessStopping(_ nanoseconds: Int64) {
        var left = nanoseconds
        while !isStopping && left > 0 {
            let step = min(left, 100_000_000)
            environment.sleep(step)
            left -= step
        }
    }

    /// Applies one batch of remote items and records the new feed position, in one store transaction; then
    /// the changes refused before, whose obstacle the batch may have moved.
    func apply(_ batch: WireChanges) throws {
        try apply(batch.items, token: batch.token)
        if !batch.more { container.pullSide.markCaughtUp() }
        refetchRefused()
    }

    /// Applies items fetched one by one (no feed position): the entry for the pusher, which takes a remote
    /// state it fetched as a pull would take it.
    func applyFetched(_ items: [WireItem]) {
        do { try apply(items, token: nil) } catch { log.error("cannot apply remote changes: \(error)") }
    }

    /// Applies remote items, and the feed position they bring (nil: items fetched one by one, no position).
    private func apply(_ items: [WireItem], token: String?) throws {
        try container.pullSide.applyRemote(items, token: token)
        // A remote change may let a local one go up (a place refused before). Not a local change: the pusher
        // gathers bursts of those, and a burst from elsewhere must not keep it from seeing a local one pause.
        if !items.isEmpty { pusher.wake() }
    }

    /// Fetches again, one by one, the items whose remote change the puller refused (a move that would have
    /// made a cycle here) or skipped while a push of the item that landed before it was still unanswered
    /// (`CoreState.skippedWhilePending`), and applies them: the local move in the way may have given way since.
    /// A change still refused is marked again. A failure to reach the remote leaves the marks for the next time.
    func refetchRefused() {
        let ids: [String]
        do { ids = try container.pullSide.takeRefused() } catch {
            return log.error("cannot read the remote changes to fetch again: \(error)")
        }
        var items: [WireItem] = []
        for (i, id) in ids.enumerated() {
            do { if let item = try container.remote.itemIfPresent(id) { items.append(item) } } catch {
                do { try container.pullSide.markRefused(ids[i...]) } catch {
                    log.error("cannot keep the remote changes to fetch again (\(ids[i...].count) lost): \(error)")
                }
                break
            }
        }
        if !items.isEmpty { applyFetched(items) }
    }

    // MARK: push

    private func pushLoop() {
        var backoff = Backoff.sync
        while true {
            guard let pause = withOwner({ () -> Int64 in
                if container.isSyncPaused { return SyncLoops.pausedNanoseconds } // until the resume wakes it
                gatherBurst()
                _ = pusher.takeWake()
                switch pushAll() {
                case .idle:
                    backoff.reset()
                    return min(60_000_000_000, container.nextSnapshotDue() ?? .max)
                case .stopped:
                    return 0 // the next burst gathered: the writes that stopped an upload pause first
                case .failed, .storeFailed:
                    return backoff.delay(in: environment)
                }
            }) else { return }
            // On the loop's wake, not the environment's sleep: a nudge (the network is back, a new change)
            // must cut the wait short.
            if pause > 0 { pusher.pause(nanoseconds: pause) }
        }
    }

    /// `storeFailed`: the journal could not be read; the pusher backs off and tries again, as for a failed push.
    /// `stopped`: an upload stopped because its file changed meanwhile; the pass ends without a failure.
    enum PushOutcome { case idle, stopped, failed, storeFailed }

    /// Pushes every pending item that can go now, oldest first, many at a time in one batch request; not those
    /// whose content (or one they wait for) uploads on the content lane: a later pass, when the lane is done. A
    /// failure to read the journal is logged and shown on the mount root (`uploadingError`) until a pass reads it
    /// again.
    func pushAll() -> PushOutcome {
        container.writeKeptBack() // new files not closed yet: their rows go into the journal first
        var aside: Set<String> = []
        // (Paused between batches too: a pause made while the pass gathered its burst holds from the next batch.)
        while !isStopping && !container.isSyncPaused {
            let next: [String]
            do {
                next = try container.pushSide.nextPushableBatch(limit: WireBatchLimits.maxEntries,
                                                                skipping: aside.union(lane.held))
            } catch {
                log.error("cannot read the changes waiting to upload: \(error)")
                container.recordUploadFailure(container.rootID, error)
                return .storeFailed
            }
            container.clearUploadFailure(container.rootID)
            if next.isEmpty { return .idle }
            do { aside.formUnion(try push(next)) } catch let failure as BatchPushFailure where failure.error is UploadStopped {
                return .stopped
            } catch let failure as BatchPushFailure {
                log.warning("upload of \(container.path(of: failure.id)) failed: \(failure.error)")
                container.recordUploadFailure(failure.id, failure.error)
                if case RemoteError.unauthorized? = failure.error as? RemoteError { container.remoteRefusedKey() }
                return .failed
            } catch {
                return .failed // not thrown: `push` names the item of every failure
            }
        }
        return .idle
    }

    /// Pushes items `nextPushableBatch` gave: one by Pusher, more in one batch. A failure is thrown as a
    /// BatchPushFailure naming its item. Answers the items left for the content lane.
    @discardableResult
    func push(_ ids: [String]) throws -> Set<String> {
        defer { if container.pushSide.takeRefetchDue() { refetchRefused() } }
        guard ids.count > 1 else {
            guard let id = ids.first else { return [] }
            do { try Pusher(container: container, id: id).run() } catch is UploadAside { return [id] } catch {
                throw BatchPushFailure(id: id, error: error)
            }
            return []
        }
        return try BatchPusher(container: container, ids: ids).run()
    }

    /// Number of items with changes not yet on the remote.
    var pendingCount: Int { get throws(StoreError) { try container.pushSide.pendingPushCount } }
}
