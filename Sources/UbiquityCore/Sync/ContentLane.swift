// The content lane: the content of large files (those that go up in chunks: over the container's chunk
// format's `chunkedAbove`) goes up on threads of their own, so that the push loop goes on with everything else
// (a small file saved while a film uploads is on the remote in seconds, not after it). `parallel` uploads run
// at once, each taking the next file queued, so one long upload (a film, the hash of a terabyte-long sparse
// file) holds back none of the files queued after it.
//
// What must hold: the lane only uploads content (blobs, chunks, manifests: named by their hash, they change no
// item and no name), never an item; the item's put stays with the push loop and its rules. A content the lane
// uploaded is used by the put only for the content generation it was read at: a change since asks the lane
// again. An item the lane holds (queued, in flight, or waiting to try again after a failure) is not handed out
// by `nextPushableBatch`, so the push loop does not spin on it; the lane wakes the push loop when one is done.
// The lane runs only while the loops run: a driver that steps the container (the simulation) uploads inline.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the lane's lock is a leaf; the
// container's steps are called with it released.
import Foundation
import UbiquityBase

final class ContentLane: Sendable {
    /// A content the lane uploaded: its hash and size, read at content generation `generation`.
    struct Uploaded: Equatable {
        var generation: Int
        var sha256: String
        var size: Int64
    }

    private struct State {
        var queue: [String] = []
        var inFlight: Set<String> = []
        var uploaded: [String: Uploaded] = [:]
        /// Items whose upload failed, with the time (the environment's clock) of their next try.
        var retryAt: [String: Int64] = [:]
    }

    /// Taken strongly for one upload at a time, as the loops take it (SyncLoops' `owner`): a container let go
    /// of after `stop` is freed once the upload in flight ends.
    private weak let container: Container?
    private let environment: CoreEnvironment
    /// How many uploads run at once.
    static let parallel = 3
    private let loops = (0..<ContentLane.parallel).map { _ in Loop(name: "upload", priority: .background) }
    private let state = Locked(State())
    private let log = Logger("push")

    init(container: Container) {
        self.container = container
        self.environment = container.config.environment
    }

    func start(onUploaded: @escaping @Sendable () -> Void) {
        for loop in loops { loop.start { [self] in run(loop, onUploaded) } }
    }
    func stop() { for loop in loops { loop.stop() } }
    /// True when every upload thread ended within `seconds` (in all).
    func join(timeout seconds: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        return loops.allSatisfy { $0.join(timeout: max(0, deadline.timeIntervalSinceNow)) }
    }

    /// True while the lane runs: large content goes up on it, not inline.
    var isRunning: Bool { loops.allSatisfy { $0.isRunning && !$0.isStopping } }

    /// The items the lane holds: the push loop leaves them until the lane is done with them.
    var held: Set<String> {
        state.withLock { s in Set(s.queue).union(s.retryAt.keys).union(s.inFlight) }
    }

    /// The content uploaded for `id` at `generation`, taken (once); nil when there is none for it yet, and
    /// then the lane is asked to upload it.
    func take(_ id: String, generation: Int) -> Uploaded? {
        let found: Uploaded? = state.withLock { s in
            guard let done = s.uploaded[id] else { return nil }
            s.uploaded[id] = nil
            return done.generation == generation ? done : nil
        }
        if found == nil { ask(id) }
        return found
    }

    private func ask(_ id: String) {
        state.withLock { s in
            if !s.inFlight.contains(id) && !s.queue.contains(id) && s.retryAt[id] == nil { s.queue.append(id) }
        }
        for loop in loops { loop.wake() }
    }

    private func run(_ loop: Loop, _ onUploaded: @Sendable () -> Void) {
        var backoff = Backoff.sync
        while !loop.isStopping {
            let now = environment.clock()
            guard let id = next(now: now) else {
                loop.pause(nanoseconds: nextRetry(after: now) ?? 60_000_000_000)
                continue
            }
            guard let container else { return }
            log.info("upload of \(container.path(of: id)) on the content lane")
            switch upload(id, container) {
            case .uploaded(let done):
                backoff.reset()
                state.withLock { s in s.inFlight.remove(id); s.uploaded[id] = done }
                container.clearUploadFailure(id)
                onUploaded()
            case .stopped:
                state.withLock { s in _ = s.inFlight.remove(id) }
                onUploaded() // the push loop takes the item again once its writes pause
            case .failed(let error):
                log.warning("upload of \(container.path(of: id)) failed: \(error)")
                container.recordUploadFailure(id, error)
                let at = now + backoff.delay(in: environment)
                state.withLock { s in s.inFlight.remove(id); s.retryAt[id] = at }
            }
        }
    }

    /// The next item to upload (a retry that is due first), marked in flight.
    private func next(now: Int64) -> String? {
        state.withLock { s in
            if let due = s.retryAt.first(where: { $0.value <= now })?.key {
                s.retryAt[due] = nil
                s.inFlight.insert(due)
                return due
            }
            guard !s.queue.isEmpty else { return nil }
            let id = s.queue.removeFirst()
            s.inFlight.insert(id)
            return id
        }
    }

    /// How long until the next retry is due, if one waits.
    private func nextRetry(after now: Int64) -> Int64? {
        state.withLock { s in s.retryAt.values.min().map { max($0 - now, 1_000_000) } }
    }

    private enum Outcome { case uploaded(Uploaded), stopped, failed(Error) }

    private func upload(_ id: String, _ container: Container) -> Outcome {
        let path = container.path(of: id) // before: a file deleted meanwhile has none
        do {
            guard let done = try Pusher(container: container, id: id).uploadContentAlone() else { return .stopped }
            return .uploaded(done)
        } catch where Pusher.isStopped(error) {
            log.info("upload of \(path) stopped: the file changed or was deleted meanwhile")
            return .stopped
        } catch {
            return .failed(error)
        }
    }
}
