// The bounded transfer scheduler: keys wait in one FIFO queue and at most `width` worker threads take them,
// oldest first, and run the work for each. What must hold:
// - Never more than `width` workers live at once, however many keys wait (a pin of a folder of 10,000 files
//   queues 10,000 keys, not 10,000 threads). A worker starts when a key arrives and fewer than `width` run,
//   and ends when it finds the queue empty, so an idle container holds no transfer thread.
// - Every key submitted is run exactly once, in the order submitted. The scheduler does not merge repeated
//   keys: its owner (Downloads) submits a key only when no transfer of it is queued or running.
// - The lock guards the queue and the counts only; the work runs outside it. After `stop`, no key is taken.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the queue's is a leaf.
import Foundation
import UbiquityBase

final class TransferScheduler: Sendable {
    private struct Queue {
        /// Keys not yet taken, from `head` on (the taken ones before it are dropped in batches).
        var keys: [String] = []
        var head = 0
        var live = 0
        var peak = 0
        var stopped = false
        /// The workers started, by number; each takes itself out when it ends.
        var workers: [Int: Loop] = [:]
        var nextWorker = 0
    }

    let width: Int
    private let name: String
    private let work: @Sendable (String) -> Void
    private let queue = Locked(Queue())

    /// `work` runs on the workers, once per key submitted.
    init(width: Int, name: String, work: @escaping @Sendable (String) -> Void) {
        precondition(width > 0, "a scheduler needs at least one worker")
        self.width = width
        self.name = name
        self.work = work
    }

    /// Worker threads running now.
    var liveWorkers: Int { queue.withLock { $0.live } }
    /// The most worker threads that ever ran at once.
    var peakWorkers: Int { queue.withLock { $0.peak } }
    /// Keys waiting for a worker.
    var waiting: Int { queue.withLock { $0.keys.count - $0.head } }

    /// Queues a key; starts a worker if fewer than `width` run. False (nothing queued) once stopped.
    @discardableResult
    func submit(_ key: String) -> Bool {
        let (accepted, worker): (Bool, (Int, Loop)?) = queue.withLock { q in
            guard !q.stopped else { return (false, nil) }
            q.keys.append(key)
            guard q.live < width else { return (true, nil) }
            q.live += 1
            q.peak = max(q.peak, q.live)
            q.nextWorker += 1
            let loop = Loop(name: name)
            q.workers[q.nextWorker] = loop
            return (true, (q.nextWorker, loop))
        }
        guard let (number, loop) = worker else { return accepted }
        loop.start(stackSize: 512 << 10) { [self] in
            while let key = take(worker: number) { work(key) }
        }
        return true
    }

    /// Takes no more keys and waits up to `seconds` in all for the transfers running to end.
    func stop(timeout seconds: Double) {
        let workers = queue.withLock { q in
            q.stopped = true
            return Array(q.workers.values)
        }
        let deadline = Date(timeIntervalSinceNow: seconds)
        for w in workers { w.stopAndJoin(timeout: max(0, deadline.timeIntervalSinceNow)) }
    }

    /// The oldest waiting key, or nil when none waits or the scheduler stopped: the worker then ends (counted
    /// out in the same step, so a key submitted just after is never left without a worker).
    private func take(worker: Int) -> String? {
        queue.withLock { q in
            guard q.head < q.keys.count, !q.stopped else {
                q.keys.removeAll()
                q.head = 0
                q.live -= 1
                q.workers[worker] = nil
                return nil
            }
            let key = q.keys[q.head]
            q.head += 1
            if q.head >= 1024 && q.head * 2 >= q.keys.count {
                q.keys.removeFirst(q.head)
                q.head = 0
            }
            return key
        }
    }
}
