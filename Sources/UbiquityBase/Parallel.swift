// The parts of one transfer on a few threads at once: the chunks of one file, up or down.
//
// What must hold: at most `width` threads run `body`, each part once, taken in order; after the first failure no
// part starts and the parts still running are told to stop (`goOn` answers false); `inParallel` returns only
// once every thread has ended, then throws that first failure. The lock guards the next part and the failure
// only (a leaf); `body` runs outside it.
import Foundation

private struct ParallelState {
    var next = 0
    var failure: Error?
}

/// Runs `body` on every part, `width` at a time; `goOn` turns false once a part failed.
public func inParallel<T>(_ parts: [T], width: Int,
                          _ body: @escaping (T, _ goOn: @escaping () -> Bool) throws -> Void) throws {
    if parts.count <= 1 || width <= 1 {
        for part in parts { try body(part) { true } }
        return
    }
    let state = Locked(ParallelState())
    // The threads take what they share from here and are joined before the call returns (a thread may let go of
    // its closure only after that: so `body` escapes).
    nonisolated(unsafe) let body = body
    nonisolated(unsafe) let parts = parts
    let group = DispatchGroup()
    for _ in 0..<min(width, parts.count) {
        group.enter()
        Thread {
            defer { group.leave() }
            while let i = state.withLock({ s -> Int? in
                guard s.failure == nil, s.next < parts.count else { return nil }
                s.next += 1
                return s.next - 1
            }) {
                do { try body(parts[i]) { state.withLock { $0.failure == nil } } } catch {
                    state.withLock { if $0.failure == nil { $0.failure = error } }
                }
            }
        }.start()
    }
    group.wait()
    if let failure = state.withLock({ $0.failure }) { throw failure }
}
