// A value that can only be reached while holding its lock: `withLock` hands it out `inout` for the length of
// one closure, so code that has not taken the lock has no way to read or write it.
//
// What must hold: `state` is read or written only between `mutex.lock()` and `unlock()`, which is what makes the
// `@unchecked Sendable` true. The lock is an NSLock, not recursive: a body that calls `withLock` on the same
// value again deadlocks. A body runs with the lock held, so it must be short and must not wait for another thread
// that may want the same lock (the core's rules for `Container.state` are in UbiquityCore/State.swift).
import Foundation

public final class Locked<State>: @unchecked Sendable {
    // @unchecked: `state` is only touched between lock() and unlock() below.
    private let mutex = NSLock()
    private var state: State

    public init(_ state: State) { self.state = state }

    /// Runs `body` with the state, holding the lock. `body` must not call `withLock` on the same value again.
    @inline(__always)
    public func withLock<T, E: Error>(_ body: (inout State) throws(E) -> T) throws(E) -> T {
        mutex.lock()
        defer { mutex.unlock() }
        return try body(&state)
    }
}
