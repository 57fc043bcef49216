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
    // The threads share the body through `work`, emptied once they all ended: a Thread lets go of its closure only
    // when it exits, after `group.leave()`, so what `body` holds (a container, whose store stays locked while it
    // lives) must not wait for that.
    let work = SharedWork(body: body, parts: parts)
    let group = DispatchGroup()
    for _ in 0..<min(width, parts.count) {
        group.enter()
        Thread {
            defer { group.leave() }
            while let i = state.withLock({ s -> Int? in
                guard s.failure == nil, s.next < work.parts.count else { return nil }
                s.next += 1
                return s.next - 1
            }) {
                do { try work.body!(work.parts[i]) { state.withLock { $0.failure == nil } } } catch {
                    state.withLock { if $0.failure == nil { $0.failure = error } }
                }
            }
        }.start()
    }
    group.wait()
    work.body = nil
    if let failure = state.withLock({ $0.failure }) { throw failure }
}

/// The body and parts of one `inParallel`: written before its threads start and after they all ended, read only
/// between (the group's enter and wait order those), so no lock.
private final class SharedWork<T>: @unchecked Sendable {
    var body: ((T, _ goOn: @escaping () -> Bool) throws -> Void)?
    let parts: [T]

    init(body: @escaping (T, _ goOn: @escaping () -> Bool) throws -> Void, parts: [T]) {
        self.body = body
        self.parts = parts
    }
}
