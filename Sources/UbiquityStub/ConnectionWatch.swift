// Shares the server's connections out so that no client shuts an honest one out:
// - A stranger (a connection that has sent no request with a valid key yet) owes a whole request header within
//   `strangerHeaderSeconds` of connecting, and a request of its with a body is answered at once and closed;
//   strangers together hold at most `strangers` connections: past that, the oldest stranger is cut. A flood of
//   half-sent requests or trickled bodies, from one address or from
//   many, so never takes a slot from a client that sends its requests (nothing is counted per address: a NAT, a
//   proxy or a shared machine puts many honest clients behind one).
// - A connection known by its key owes its next header within `headerSeconds` of its last answer; a device key
//   holds at most `perDevice` connections at once and a user at most `perUser` (StubServer answers a request
//   past them 429 and closes its connection).
// - A body slower than `minimumBodyRate` once `headerSeconds` have passed is cut (StubServer.consume asks).
// Every limit hit is logged, at most once per `reportSeconds` per limit, with how often and by whom.
// libmicrohttpd's idle timeout alone lets a client that sends a byte now and then hold a connection for ever.
//
// What must hold: a connection is cut by shutting its socket down (libmicrohttpd then sees the end and closes
// it), only while it is registered, and under the lock that `closed` takes before libmicrohttpd closes the
// socket, so a socket number that was reused is never touched. A connection whose request is in the access
// handler (a long poll waiting, a download being sent) is not waiting for a header and is never cut here.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `state` is a leaf.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// How the server's connections are shared out (ConnectionWatch.swift).
public struct ConnectionShares: Sendable {
    /// Connections that have sent no request with a valid key yet, together.
    public var strangers = 256
    /// How long a stranger may take to send its first request header.
    public var strangerHeaderSeconds = 5
    /// Connections one device key holds at once (an idle mount holds 2; a busy one some 30: its downloads'
    /// and uploads' chunk streams and the connections it keeps alive between them).
    public var perDevice = 256
    /// Connections the devices of one user hold at once.
    public var perUser = 512
    public init() {}
}

final class ConnectionWatch: Sendable {
    private struct Entry {
        let fd: Int32
        let opened: Int64
        /// Since when (monotonic ns) the connection owes a request header; nil while a request is handled.
        var waitingSince: Int64?
        /// The key's device and user, once a request on it had a valid key; nil for a stranger.
        var owner: (device: String, user: String)?
        /// Cut already (its close is on its way).
        var cut = false
    }
    private struct State {
        /// By connection (its pointer's bits).
        var entries: [UInt: Entry] = [:]
        /// Limits hit since the last report: by limit, by whom, how often.
        var hits: [String: [String: Int]] = [:]
        var lastReport: Int64 = 0
    }
    private let state = Locked(State())
    private let loop = Locked<Loop?>(nil)
    let headerSeconds: Int
    let shares: ConnectionShares
    /// Bytes per second a body must average once `headerSeconds` have passed since it began.
    static let minimumBodyRate: Int64 = 1024
    static let reportSeconds: Int64 = 10
    private let log = Logger("limits")

    init(headerSeconds: Int, shares: ConnectionShares = ConnectionShares()) {
        self.headerSeconds = headerSeconds
        self.shares = shares
    }

    /// A new connection; past the strangers' share, the oldest strangers make room (one in the middle of a
    /// request too: a stranger's only requests are a health check and one refused at once).
    func started(_ connection: UInt, fd: Int32, now: Int64 = monotonicNanoseconds()) {
        state.withLock { s in
            s.entries[connection] = Entry(fd: fd, opened: now, waitingSince: now)
            let strangers = s.entries.filter { $0.value.owner == nil && !$0.value.cut }
            guard strangers.count > shares.strangers else { return }
            let oldest = strangers.sorted { $0.value.opened < $1.value.opened }
            for (key, entry) in oldest.prefix(strangers.count - shares.strangers) {
                cut(key, entry, &s, limit: "connections that sent no valid key (more than \(shares.strangers) at once)")
            }
            report(&s, now: now)
        }
    }

    func closed(_ connection: UInt) { state.withLock { _ = $0.entries.removeValue(forKey: connection) } }

    func requestBegan(_ connection: UInt) { state.withLock { $0.entries[connection]?.waitingSince = nil } }

    func requestEnded(_ connection: UInt) {
        state.withLock { $0.entries[connection]?.waitingSince = monotonicNanoseconds() }
    }

    /// A request on the connection had a valid key of `device` of `user`: nil, or why the connection is one too
    /// many for that device or user (the request is then refused and the connection closed).
    func identified(_ connection: UInt, device: String, user: String) -> String? {
        state.withLock { s in
            guard let entry = s.entries[connection] else { return nil }
            if let owner = entry.owner, owner == (device, user) { return nil }
            let owners = s.entries.values.filter { !$0.cut }.compactMap(\.owner)
            let why: (limit: String, message: String)?
            if owners.filter({ $0 == (device, user) }).count >= shares.perDevice {
                why = ("device", "device \(device) of user \(user) holds \(shares.perDevice) connections already")
            } else if owners.filter({ $0.user == user }).count >= shares.perUser {
                why = ("user", "the devices of user \(user) hold \(shares.perUser) connections already")
            } else {
                why = nil
            }
            guard let why else {
                s.entries[connection]?.owner = (device, user)
                return nil
            }
            s.hits["connections per \(why.limit)", default: [:]]["device \(device) of user \(user)", default: 0] += 1
            report(&s, now: monotonicNanoseconds())
            return why.message
        }
    }

    /// Whether a body that began at `started` (monotonic ns) and brought `bytes` so far is too slow to go on.
    func bodyTooSlow(started: Int64, bytes: Int64, now: Int64 = monotonicNanoseconds()) -> Bool {
        let seconds = Double(now - started) / 1e9
        return seconds > Double(headerSeconds) && Double(bytes) < seconds * Double(Self.minimumBodyRate)
    }

    /// Cuts every connection that has owed a header too long; answers how many.
    @discardableResult
    func sweep(now: Int64 = monotonicNanoseconds()) -> Int {
        state.withLock { s in
            var cut = 0
            for (key, entry) in s.entries where !entry.cut {
                guard let since = entry.waitingSince else { continue }
                let seconds = entry.owner == nil ? min(shares.strangerHeaderSeconds, headerSeconds) : headerSeconds
                guard now - since > Int64(seconds) * 1_000_000_000 else { continue }
                self.cut(key, entry, &s, limit: nil)
                cut += 1
            }
            report(&s, now: now)
            return cut
        }
    }

    /// Counts a refusal for a limit other than the connections' (a user's quota) in the same report.
    func limitHit(_ limit: String, by who: String) {
        state.withLock { $0.hits[limit, default: [:]][who, default: 0] += 1 }
    }

    /// Shuts the connection's socket down; a cut for a limit (not a deadline) counts as a hit of it.
    private func cut(_ key: UInt, _ entry: Entry, _ s: inout State, limit: String?) {
        if let limit { s.hits[limit, default: [:]][peer(entry.fd), default: 0] += 1 } // (before the socket goes)
        shutdown(entry.fd, Int32(SHUT_RDWR))
        s.entries[key]?.cut = true
        s.entries[key]?.waitingSince = nil
    }

    /// Logs the limits hit since the last report, at most once per `reportSeconds`.
    private func report(_ s: inout State, now: Int64) {
        guard !s.hits.isEmpty, now - s.lastReport >= Self.reportSeconds * 1_000_000_000 else { return }
        for (limit, who) in s.hits.sorted(by: { $0.key < $1.key }) {
            let total = who.values.reduce(0, +)
            let top = who.sorted { $0.value > $1.value }.prefix(3).map { "\($0.key) (\($0.value))" }
            log.warning("limit hit \(total) time(s): \(limit); most by \(top.joined(separator: ", "))")
        }
        s.hits = [:]
        s.lastReport = now
    }

    /// The address a socket's peer connects from.
    private func peer(_ fd: Int32) -> String {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let got = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        guard got == 0 else { return "an address gone" }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let named = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
            }
        }
        guard named == 0 else { return "an unknown address" }
        return String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
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
