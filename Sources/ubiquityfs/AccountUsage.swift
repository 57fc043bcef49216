// The account's usage as this device shows it (Part 23): what the user stores on the remote, per container
// (documents, data, kept versions, Recently Deleted) against their quota, asked every 30 s and when a reader
// finds the figures older than a few seconds, and what this device holds locally. The roots show it as
// attributes (`usedBytes`, `quotaBytes`, `localBytes`, `quotaState`, and `usage`, the whole as JSON for
// `ubiquityfs usage`); a desktop notification says when the account reaches 90% of its quota and when it is full.
//
// What must hold: a reader never waits for the remote (the figures are the last ones fetched, and a fetch runs on
// this loop's thread); figures not yet fetched are absent, never made up; a notification is sent once per
// crossing (it is told again only after the usage fell back below the mark).
import Foundation
import UbiquityBase
import UbiquityCore
import UbiquityHTTP

final class AccountUsage: Sendable {
    private let client: HTTPRemoteClient
    private let notify: Bool
    private let loop = Loop(name: "usage", priority: .background)
    private let log = Logger("usage")
    private struct Known {
        var usage: WireUsage?
        /// When `usage` was fetched (wall clock, ns), and when a reader last asked for newer figures.
        var at: Int64 = 0
        var told: QuotaState = .ok
    }
    private let known = Locked(Known())
    static let everySeconds: Int64 = 30, freshSeconds: Int64 = 5

    enum QuotaState: String { case ok, almostFull, full }

    init(client: HTTPRemoteClient, notify: Bool) {
        self.client = client
        self.notify = notify
    }

    func start() {
        loop.start { [self] in
            while !loop.isStopping {
                fetch()
                loop.pause(nanoseconds: AccountUsage.everySeconds * 1_000_000_000)
            }
        }
    }

    func stop() { loop.stop() }

    private func fetch() {
        do {
            let usage = try client.usage()
            let state = Self.state(usage)
            let tell = known.withLock { k -> Bool in
                k.usage = usage
                k.at = nowNanoseconds()
                defer { k.told = state }
                return state != .ok && state != k.told
            }
            if tell && notify { say(state, usage) }
        } catch {
            log.debug("no usage from the remote: \(error)")
        }
    }

    static func state(_ u: WireUsage) -> QuotaState {
        u.used >= u.quota ? .full : u.used * 10 >= u.quota * 9 ? .almostFull : .ok
    }

    private func say(_ state: QuotaState, _ u: WireUsage) {
        let figures = "\(readableSize(u.used)) of \(readableSize(u.quota))"
        if state == .full {
            DesktopNotices.send(summary: "iCloud storage is full",
                                body: "\(figures) used: changes wait on this device until there is room "
                                    + "('ubiquityfs usage' shows what takes it)", log: log)
        } else {
            DesktopNotices.send(summary: "iCloud storage is almost full", body: "\(figures) used", log: log)
        }
    }

    /// The attributes of a root: of one container (`container`) or of the whole mount (nil), with `local` bytes
    /// held here. Stale figures ask for a fetch, and are answered meanwhile.
    func attributes(container: String?, local: Int64) -> [(name: String, value: String)] {
        let (usage, at) = known.withLock { ($0.usage, $0.at) }
        if nowNanoseconds() - at > AccountUsage.freshSeconds * 1_000_000_000 { loop.wake() }
        var list = [(name: "localBytes", value: String(local))]
        guard let usage else { return list }
        let rows = usage.containers.filter { container == nil || $0.container == container }
        let used = container == nil ? usage.used : rows.reduce(0) { $0 + $1.total }
        list += [(name: "usedBytes", value: String(used)), (name: "quotaBytes", value: String(usage.quota)),
                 (name: "quotaState", value: Self.state(usage).rawValue)]
        let report = UsageReport(at: iso8601(nanoseconds: at), used: usage.used, quota: usage.quota,
                                 containers: rows, local: local)
        if let json = try? JSONEncoder.wire.encode(report) {
            list.append((name: "usage", value: String(decoding: json, as: UTF8.self)))
        }
        return list
    }

    /// The `usage` attribute, what `ubiquityfs usage --json` prints.
    struct UsageReport: Codable {
        let at: String
        let used: Int64
        let quota: Int64
        let containers: [WireContainerUsage]
        let local: Int64
    }
}
