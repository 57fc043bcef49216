// A value used by one thread at a time, in the order the threads asked for it (first come, first served), where
// a plain lock lets the thread that just let go take it straight back and starve the others. A holder may ask
// whether others are waiting, to let go early.
//
// What must hold: `value` is touched only by the thread whose ticket is `serving`, between its turn's start and
// end; `next`, `serving` and `sleepers` only under `lock`. A thread whose turn has not come when it takes its
// ticket registers a semaphore of its own in the same step, so the turn before it, ending, wakes that thread
// alone (a signal before its wait is kept by the semaphore). A body must not take a turn on the same value
// again (it would wait for itself).
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `lock` is a leaf, held only to take a
// ticket or pass the turn on, never while the body runs.
import Foundation

public final class Turns<Value>: @unchecked Sendable {
    // @unchecked: `value` is only reached by the turn's holder, the rest only under `lock`.
    private let lock = NSLock()
    private var next = 0
    private var serving = 0
    private var sleepers: [Int: DispatchSemaphore] = [:]
    private let value: Value

    public init(_ value: Value) { self.value = value }

    /// Runs `body` with the value once every thread that asked before has had its turn.
    public func withTurn<T, E: Error>(_ body: (Value) throws(E) -> T) throws(E) -> T {
        lock.lock()
        let ticket = next
        next += 1
        let sleeper = serving == ticket ? nil : DispatchSemaphore(value: 0)
        sleepers[ticket] = sleeper
        lock.unlock()
        sleeper?.wait()
        defer {
            lock.lock()
            serving += 1
            let woken = sleepers.removeValue(forKey: serving)
            lock.unlock()
            woken?.signal()
        }
        return try body(value)
    }

    /// Whether other threads wait for a turn (asked by the holder: then the waiters are the others).
    public var othersWaiting: Bool {
        lock.lock()
        defer { lock.unlock() }
        return next - serving > 1
    }
}
