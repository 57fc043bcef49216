// ConnectionWatch on socket pairs, with the clock given: what owes a header too long is shut down, a request
// being handled and a connection closed are never touched, a slow body is told apart from a fast one, strangers
// past their share make room oldest first, and a key's and a user's connections are counted.
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

    @Test func strangersPastTheirShareMakeRoomOldestFirstAndKnownConnectionsStay() {
        var shares = ConnectionShares()
        shares.strangers = 2
        let watch = ConnectionWatch(headerSeconds: 10, shares: shares)
        let pairs = (0..<5).map { _ in pair() }
        defer { for (a, b) in pairs { close(a); close(b) } }
        let t0 = monotonicNanoseconds()
        watch.started(0, fd: pairs[0].0, now: t0) // known: its request had a key
        watch.requestBegan(0)
        #expect(watch.identified(0, device: "laptop", user: "ann") == nil)
        watch.requestEnded(0)
        watch.started(1, fd: pairs[1].0, now: t0 + 1)
        watch.started(2, fd: pairs[2].0, now: t0 + 2)
        watch.requestBegan(2) // a stranger in a request (a health check, or one trickling a body)
        watch.started(3, fd: pairs[3].0, now: t0 + 3)
        #expect(seesEnd(pairs[1].1), "the oldest stranger made room")
        #expect(!seesEnd(pairs[0].1) && !seesEnd(pairs[2].1) && !seesEnd(pairs[3].1))
        watch.started(4, fd: pairs[4].0, now: t0 + 4)
        #expect(seesEnd(pairs[2].1), "a stranger in a request makes room too")
        #expect(!seesEnd(pairs[3].1) && !seesEnd(pairs[4].1) && !seesEnd(pairs[0].1))
        // A stranger owes its header within its shorter deadline, a known connection within the longer one.
        #expect(watch.sweep(now: t0 + 6_000_000_000) == 2)
        #expect(seesEnd(pairs[3].1) && seesEnd(pairs[4].1) && !seesEnd(pairs[0].1))
    }

    @Test func aDeviceAndAUserHoldBoundedConnections() {
        var shares = ConnectionShares()
        shares.perDevice = 2
        shares.perUser = 3
        let watch = ConnectionWatch(headerSeconds: 10, shares: shares)
        for c in UInt(0)..<6 { watch.started(c, fd: -1) }
        #expect(watch.identified(0, device: "laptop", user: "ann") == nil)
        #expect(watch.identified(0, device: "laptop", user: "ann") == nil, "a connection is counted once")
        #expect(watch.identified(1, device: "laptop", user: "ann") == nil)
        #expect(watch.identified(2, device: "laptop", user: "ann")?.contains("device laptop of user ann") == true)
        #expect(watch.identified(2, device: "phone", user: "ann") == nil)
        #expect(watch.identified(3, device: "tablet", user: "ann")?.contains("user ann") == true)
        #expect(watch.identified(3, device: "laptop", user: "bob") == nil, "another user has shares of his own")
        watch.closed(0)
        #expect(watch.identified(4, device: "tablet", user: "ann") == nil, "a connection closed is given back")
    }

    @Test func aBodySlowerThanTheMinimumAfterTheGraceIsTooSlow() {
        let watch = ConnectionWatch(headerSeconds: 10)
        let t0: Int64 = 1_000_000_000_000
        #expect(!watch.bodyTooSlow(started: t0, bytes: 0, now: t0 + 9_000_000_000), "within the grace")
        #expect(watch.bodyTooSlow(started: t0, bytes: 100, now: t0 + 20_000_000_000))
        #expect(!watch.bodyTooSlow(started: t0, bytes: 1 << 20, now: t0 + 20_000_000_000))
    }
}
