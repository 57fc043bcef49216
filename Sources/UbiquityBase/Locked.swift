// A value that can only be reached while holding its lock: `withLock` hands it out `inout` for the length of
// one closure, so code that has not taken the lock has no way to read or write it. A thread may also wait, lock
// let go, until the value is ready (`wait`); a change made with `notifying: true` wakes such waiters.
//
// What must hold: `state` is read or written only between `cond.lock()` and `unlock()`, which is what makes the
// `@unchecked Sendable` true. The lock is not recursive: a body that calls `withLock` on the same value again
// deadlocks. A body runs with the lock held, so it must be short and must not wait for another thread that may
// want the same lock (the core's rules for `Container.state` are in UbiquityCore/State.swift).
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): each value's lock sits where its owner says.
import Foundation

public final class Locked<State>: @unchecked Sendable {
    // @unchecked: `state` is only touched between lock() and unlock() below.
    private let cond = NSCondition()
    private var state: State

    public init(_ state: State) { self.state = state }

    /// Runs `body` with the state, holding the lock; with `notifying`, then wakes every thread in `wait`. `body`
    /// must not call `withLock` on the same value again.
    @inline(__always)
    public func withLock<T, E: Error>(notifying: Bool = false, _ body: (inout State) throws(E) -> T) throws(E) -> T {
        cond.lock()
        defer {
            if notifying { cond.broadcast() }
            cond.unlock()
        }
        return try body(&state)
    }

    /// Waits until `ready` holds for the state or `deadline` passes (nil: no deadline), letting go of the lock
    /// while it waits, then runs `body` holding it (whether or not `ready` held: `body` looks again).
    public func wait<T, E: Error>(until deadline: Date?, for ready: (State) -> Bool,
                                  then body: (inout State) throws(E) -> T) throws(E) -> T {
        cond.lock()
        defer { cond.unlock() }
        while !ready(state) {
            if let deadline {
                if !cond.wait(until: deadline) { break }
            } else {
                cond.wait()
            }
        }
        return try body(&state)
    }
}
