// ConnectionWatch on a socket pair, with the clock given: what owes a header too long is shut down, a request
// being handled and a connection closed are never touched, a slow body is told apart from a fast one.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityStub
#if canImport(Glibc)
import Glibc
#endif

@Suite struct ConnectionWatchTests {
    /// A connected pair of sockets: the server's end and the client's.
    private func pair() -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        return (fds[0], fds[1])
    }

    /// Whether the client's end sees the server's end shut down (reads the end of the stream).
    private func seesEnd(_ client: Int32) -> Bool {
        var byte: UInt8 = 0
        _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
        return recv(client, &byte, 1, 0) == 0
    }

    @Test func whatOwesAHeaderTooLongIsCutAndNothingElse() {
        let watch = ConnectionWatch(headerSeconds: 10)
        let (waiting, waitingClient) = pair(), (busy, busyClient) = pair(), (gone, goneClient) = pair()
        defer { for fd in [waiting, waitingClient, busy, busyClient, gone, goneClient] { close(fd) } }
        watch.started(1, fd: waiting)
        watch.started(2, fd: busy)
        watch.requestBegan(2) // in the handler: a long poll, say
        watch.started(3, fd: gone)
        watch.closed(3)
        let later = monotonicNanoseconds() + 11_000_000_000
        #expect(watch.sweep(now: monotonicNanoseconds()) == 0, "not yet")
        #expect(watch.sweep(now: later) == 1)
        #expect(seesEnd(waitingClient))
        #expect(!seesEnd(busyClient) && !seesEnd(goneClient))
        #expect(watch.sweep(now: later) == 0, "cut once")
        // An answer sent starts the wait for the next header again.
        watch.requestEnded(2)
        #expect(watch.sweep(now: later + 11_000_000_000) == 1)
        #expect(seesEnd(busyClient))
    }

    @Test func aBodySlowerThanTheMinimumAfterTheGraceIsTooSlow() {
        let watch = ConnectionWatch(headerSeconds: 10)
        let t0: Int64 = 1_000_000_000_000
        #expect(!watch.bodyTooSlow(started: t0, bytes: 0, now: t0 + 9_000_000_000), "within the grace")
        #expect(watch.bodyTooSlow(started: t0, bytes: 100, now: t0 + 20_000_000_000))
        #expect(!watch.bodyTooSlow(started: t0, bytes: 1 << 20, now: t0 + 20_000_000_000))
    }
}
