// The bounded transfer scheduler: keys wait in one FIFO queue and at most `width` worker threads take them,
// oldest first, and run the work for each. What must hold:
// - Never more than `width` workers live at once, however many keys wait (a pin of a folder of 10,000 files
//   queues 10,000 keys, not 10,000 threads). A worker starts when a key arrives and fewer than `width` run,
//   and ends when it finds the queue empty, so an idle container holds no transfer thread.
// - Every key submitted is run exactly once, in the order submitted. The scheduler does not merge repeated
//   keys: its owner (Downloads) submits a key only when no transfer of it is queued or running.
// - The lock guards the queue and the counts only; the work runs outside it.
import Foundation

final class TransferScheduler: @unchecked Sendable {
    let width: Int
    private let name: String
    private let work: @Sendable (String) -> Void
    private let lock = NSLock()
    /// Keys not yet taken, from `head` on (the taken ones before it are dropped in batches).
    private var queue: [String] = []
    private var head = 0
    private var live = 0
    private var peak = 0

    /// `work` runs on the workers, once per key submitted.
    init(width: Int, name: String, work: @escaping @Sendable (String) -> Void) {
        precondition(width > 0, "a scheduler needs at least one worker")
        self.width = width
        self.name = name
        self.work = work
    }

    /// Worker threads running now.
    var liveWorkers: Int { lock.withLock { live } }
    /// The most worker threads that ever ran at once.
    var peakWorkers: Int { lock.withLock { peak } }
    /// Keys waiting for a worker.
    var waiting: Int { lock.withLock { queue.count - head } }

    /// Queues a key; starts a worker if fewer than `width` run.
    func submit(_ key: String) {
        let spawn: Bool = lock.withLock {
            queue.append(key)
            guard live < width else { return false }
            live += 1
            peak = max(peak, live)
            return true
        }
        if spawn { startWorker() }
    }

    private func startWorker() {
        let thread = Thread { [self] in
            while let key = take() { work(key) }
        }
        thread.name = name
        thread.stackSize = 512 << 10
        thread.start()
    }

    /// The oldest waiting key, or nil when none waits: the worker then ends (counted out in the same step, so a
    /// key submitted just after is never left without a worker).
    private func take() -> String? {
        lock.withLock {
            guard head < queue.count else {
                queue.removeAll()
                head = 0
                live -= 1
                return nil
            }
            let key = queue[head]
            head += 1
            if head >= 1024 && head * 2 >= queue.count {
                queue.removeFirst(head)
                head = 0
            }
            return key
        }
    }
}
