// A value that can only be reached while holding its lock: `withLock` hands it out `inout` for the length of
// one closure, so code that has not taken the lock has no way to read or write it.
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
