// The parts of one transfer on a few threads at once: the chunks of one file, up or down.
//
// What must hold: at most `width` threads run `body`, each part once, taken in order; after the first failure no
// part starts and the parts still running are told to stop (`goOn` answers false); `inParallel` returns only
// once every thread has ended, then throws that first failure. The lock guards the next part, the failure and
// the body (a leaf); `body` runs outside it.
import Foundation

/// The state the threads of one `inParallel` share, under one lock: the next part, the first failure, and the
/// body, let go of once they all ended (see below).
private struct ParallelState<T, E: Error> {
    typealias Body = (T, _ goOn: @escaping () -> Bool) throws(E) -> Void
    let parts: [T]
    var body: Body?
    var next = 0
    var failure: E?
}

/// Runs `body` on every part, `width` at a time; `goOn` turns false once a part failed.
public func inParallel<T, E: Error>(_ parts: [T], width: Int,
                                    _ body: @escaping (T, _ goOn: @escaping () -> Bool) throws(E) -> Void) throws(E) {
    if parts.count <= 1 || width <= 1 {
        for part in parts { try body(part) { true } }
        return
    }
    // The threads reach the body through `state`, whose body is emptied once they all ended: a Thread lets go of
    // its closure only when it exits, after `group.leave()`, so what `body` holds (a container, whose store stays
    // locked while it lives) must not wait for that.
    let state = Locked(ParallelState(parts: parts, body: body))
    let group = DispatchGroup()
    for _ in 0..<min(width, parts.count) {
        group.enter()
        Thread {
            defer { group.leave() }
            while let (part, run) = state.withLock({ s -> (T, ParallelState<T, E>.Body)? in
                guard s.failure == nil, s.next < s.parts.count, let body = s.body else { return nil }
                s.next += 1
                return (s.parts[s.next - 1], body)
            }) {
                do throws(E) { try run(part) { state.withLock { $0.failure == nil } } } catch {
                    state.withLock { if $0.failure == nil { $0.failure = error } }
                }
            }
        }.start()
    }
    group.wait()
    if let failure = state.withLock({ s -> E? in
        s.body = nil
        return s.failure
    }) { throw failure }
}
