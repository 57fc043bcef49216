// Cuts the connections of slow clients: one that has not sent a whole request header within `headerSeconds`
// of connecting or of its last answer (a slow-header attack, or a kept-alive connection left idle), and one that
// sends a body slower than `minimumBodyRate` once `headerSeconds` have passed (StubServer.consume asks).
// libmicrohttpd's idle timeout alone lets a client that sends a byte now and then hold a connection for ever.
//
// What must hold: a connection is cut by shutting its socket down (libmicrohttpd then sees the end and closes
// it), only while it is registered, and under the lock that `closed` takes before libmicrohttpd closes the
// socket, so a socket number that was reused is never touched. A connection whose request is in the access
// handler (a long poll waiting, a download being sent) is not waiting for a header and is never cut here.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `entries` is a leaf.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

final class ConnectionWatch: Sendable {
    private struct Entry {
        let fd: Int32
        /// Since when (monotonic ns) the connection owes a request header; nil while a request is handled.
        var waitingSince: Int64?
    }
    /// By connection (its pointer's bits).
    private let entries = Locked<[UInt: Entry]>([:])
    private let loop = Locked<Loop?>(nil)
    let headerSeconds: Int
    /// Bytes per second a body must average once `headerSeconds` have passed since it began.
    static let minimumBodyRate: Int64 = 1024

    init(headerSeconds: Int) { self.headerSeconds = headerSeconds }

    func started(_ connection: UInt, fd: Int32) {
        entries.withLock { $0[connection] = Entry(fd: fd, waitingSince: monotonicNanoseconds()) }
    }

    func closed(_ connection: UInt) { entries.withLock { _ = $0.removeValue(forKey: connection) } }

    func requestBegan(_ connection: UInt) { entries.withLock { $0[connection]?.waitingSince = nil } }

    func requestEnded(_ connection: UInt) { entries.withLock { $0[connection]?.waitingSince = monotonicNanoseconds() } }

    /// Whether a body that began at `started` (monotonic ns) and brought `bytes` so far is too slow to go on.
    func bodyTooSlow(started: Int64, bytes: Int64, now: Int64 = monotonicNanoseconds()) -> Bool {
        let seconds = Double(now - started) / 1e9
        return seconds > Double(headerSeconds) && Double(bytes) < seconds * Double(Self.minimumBodyRate)
    }

    /// Cuts every connection that has owed a header too long; answers how many.
    @discardableResult
    func sweep(now: Int64 = monotonicNanoseconds()) -> Int {
        let limit = Int64(headerSeconds) * 1_000_000_000
        return entries.withLock { all in
            var cut = 0
            for (key, entry) in all {
                guard let since = entry.waitingSince, now - since > limit else { continue }
                shutdown(entry.fd, Int32(SHUT_RDWR))
                all[key]?.waitingSince = nil // once
                cut += 1
            }
            return cut
        }
    }

    /// Sweeps every second in a thread of its own until `stop`.
    func start() {
        let next = Loop(name: "connection-watch")
        loop.withLock { $0 = next }
        next.start { [self] in
            while !next.isStopping {
                next.pause(nanoseconds: 1_000_000_000)
                sweep()
            }
        }
    }

    func stop() {
        let current = loop.withLock { l -> Loop? in defer { l = nil }; return l }
        _ = current?.stopAndJoin(timeout: 5)
    }
}
