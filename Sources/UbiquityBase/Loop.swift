// One background loop on a thread of its own, run the same way everywhere: a name (seen in `top -H`, gdb and
// the logs), a priority (below the threads answering requests, for work nobody waits on), a wake that cuts its
// pause short, a stop it sees at its next look, and a join that waits for it.
//
// What must hold: the flags are a `Locked` value, a leaf lock: no code runs under it but the flag updates here,
// and every change of them wakes the threads waiting on them (a pause, a join). Once `join` has returned true,
// the body touches nothing of its owner again: it has ended, or it is inside `away` (a wait that holds nothing
// of the owner, such as a long poll) and returns from it with nil.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): a loop's lock is a leaf.
import Foundation

public final class Loop: Sendable {
    private struct Flags {
        var started = false
        var woken = false
        var stopping = false
        var running = false
        var away = false
    }

    /// How the loop's thread competes for the CPU.
    public enum Priority: Sendable {
        /// As the threads answering requests: work a request waits for (a download an open waits on).
        case asRequests
        /// Below them (nice `Loop.backgroundNice`): work nobody waits for now (large uploads, evicting), which
        /// then takes what the CPU has left while programs use the mount, and all of it when they do not. Not for
        /// a loop that holds a lock requests wait for: set lower, it held the lock while the CPU went elsewhere.
        case background
    }
    /// The nice value of a background loop's thread.
    public static let backgroundNice: Int32 = 10

    /// Names the calling thread and sets its priority, as a loop's thread does when it begins (also for a
    /// thread of its own that is not a loop's: the announcer's).
    public static func enterThread(named name: String, priority: Priority) {
        nameCurrentThread(name)
        if priority == .background { lowerCurrentThreadPriority(to: backgroundNice) }
    }

    public let name: String
    public let priority: Priority
    private let flags = Locked(Flags())

    public init(name: String, priority: Priority = .asRequests) {
        self.name = name
        self.priority = priority
    }

    /// Starts `body` on a new thread named after the loop; a loop starts once (a second start is ignored). The
    /// body runs until it sees `isStopping` (or `away` answers nil) and returns.
    public func start(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        let first: Bool = change { f in
            defer { f.started = true; f.running = true }
            return !f.started
        }
        guard first else { return }
        let thread = Thread { [self] in
            Loop.enterThread(named: name, priority: priority)
            body()
            change { $0.running = false; $0.away = false }
        }
        if let stackSize { thread.stackSize = stackSize }
        thread.start()
    }

    /// True once `stop` was called.
    public var isStopping: Bool { flags.withLock { $0.stopping } }

    /// True while the body runs (started and not yet returned).
    public var isRunning: Bool { flags.withLock { $0.running } }

    /// Cuts the loop's current or next `pause` short.
    public func wake() { change { $0.woken = true } }

    /// Takes a wake that came since the last one was taken: true if there was one.
    public func takeWake() -> Bool {
        flags.withLock { f in
            defer { f.woken = false }
            return f.woken
        }
    }

    /// Sleeps until woken, stopped or `nanoseconds` have passed (a wake that came before the call counts), and
    /// takes the wake: true if woken.
    @discardableResult
    public func pause(nanoseconds: Int64) -> Bool {
        let deadline = Date(timeIntervalSinceNow: Double(max(nanoseconds, 0)) / 1e9)
        return flags.wait(until: deadline, for: { $0.woken || $0.stopping }) { f in
            defer { f.woken = false }
            return f.woken
        }
    }

    /// Runs a wait that holds and touches nothing of the loop's owner (a long poll on the network): a `join`
    /// does not wait for it to end. Answers nil when the loop was stopped meanwhile: the caller then returns at
    /// once, touching nothing of its owner, and the body's result is dropped.
    public func away<T>(_ body: () throws -> T) rethrows -> T? {
        change { $0.away = true }
        let result = try body()
        let stopped = change { f in
            f.away = false
            return f.stopping
        }
        return stopped ? nil : result
    }

    /// Asks the loop to end: its pause returns at once, and `isStopping` is true from now on.
    public func stop() { change { $0.stopping = true } }

    /// Waits up to `seconds` for the body to have returned, or to be inside `away`; true if it did (or the loop
    /// never started). A loop that did not end in time goes on until it sees the stop.
    @discardableResult
    public func join(timeout seconds: Double) -> Bool {
        let done: (Flags) -> Bool = { !$0.running || $0.away }
        return flags.wait(until: Date(timeIntervalSinceNow: seconds), for: done) { done($0) }
    }

    /// Stops the loop and waits for it, as `stop` and `join` do.
    @discardableResult
    public func stopAndJoin(timeout seconds: Double) -> Bool {
        stop()
        return join(timeout: seconds)
    }

    /// Changes the flags and wakes every thread waiting on them.
    private func change<T>(_ body: (inout Flags) -> T) -> T { flags.withLock(notifying: true, body) }
}
