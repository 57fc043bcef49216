// Desktop notifications (Part 19): a new conflict, uploads failing for more than a minute, a full store and the
// remote refusing this device's key each raise a notification on the user's session bus
// (org.freedesktop.Notifications), with the path, at most one per cause a minute. `mount --no-notify` turns
// them off; without a session bus (no DBUS_SESSION_BUS_ADDRESS) nothing is sent and nothing fails.
//
// What must hold: this reads the core's state every few seconds and never changes it; a notification is sent
// by `gdbus` (GLib's, in its own process, with a timeout), so no bus that hangs can hold the daemon up; a failed
// send is logged once at debug level and forgotten.
import Foundation
import UbiquityBase
import UbiquityCore

final class DesktopNotices: Sendable {
    private let core: Container
    private let mountpoint: String
    private let loop = Loop(name: "notices", priority: .background)
    private let log = Logger("notices")
    private struct Seen {
        /// Conflict versions told already (item id + version id).
        var conflicts: Set<String> = []
        /// When uploads were first seen failing (nil: they are not).
        var failingSince: Date?
        /// When each cause was last told.
        var told: [String: Date] = [:]
    }
    private let seen = Locked(Seen())
    /// How often the state is read, and the least time between two notifications of one cause.
    static let every: TimeInterval = 3, quiet: TimeInterval = 60, failingFor: TimeInterval = 60

    /// Whether there is a session bus to tell.
    static func hasBus(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        !(environment["DBUS_SESSION_BUS_ADDRESS"] ?? "").isEmpty
    }

    /// Nil when there is no session bus to tell.
    init?(core: Container, mountpoint: String, environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let bus = environment["DBUS_SESSION_BUS_ADDRESS"], !bus.isEmpty else { return nil }
        self.core = core
        self.mountpoint = mountpoint
        // Conflicts there at the mount were told before (or happened while nobody was here to be told).
        let known = core.conflictedItems().flatMap { item in item.conflicts.map { item.id + "." + $0.id } }
        seen.withLock { $0.conflicts = Set(known) }
    }

    func start() {
        loop.start { [self] in
            while !loop.isStopping {
                loop.pause(nanoseconds: Int64(DesktopNotices.every * 1e9))
                if !loop.isStopping { check() }
            }
        }
    }

    func stop() { loop.stop() }

    private func check() {
        let now = Date()
        for item in core.conflictedItems() {
            let fresh = item.conflicts.filter { c in seen.withLock { $0.conflicts.insert(item.id + "." + c.id).inserted } }
            guard let c = fresh.first else { continue }
            let path = core.path(of: item.id)
            tell("conflict", now, summary: "Conflict: \(item.name)",
                 body: "\(mountpoint)/\(path) was changed on two devices at once; both versions are kept, the one "
                     + "from \(c.device) in \(mountpoint)/.versions/\(path)/")
        }
        if core.isKeyRefused {
            tell("key", now, summary: "Sync stopped: this device's key was refused",
                 body: "The remote refused the key of \(mountpoint); changes wait here until it is mounted with a valid key.")
        } else if case let failures = core.uploadFailures(), let first = failures.first {
            let since = seen.withLock { s -> Date in
                if s.failingSince == nil { s.failingSince = now }
                return s.failingSince!
            }
            if now.timeIntervalSince(since) >= DesktopNotices.failingFor {
                tell("uploads", now, summary: "Uploads are failing",
                     body: "\(failures.count) change(s) in \(mountpoint) have not gone up for a minute; "
                         + "\(mountpoint)/\(first.path): \(first.error)")
            }
        } else {
            seen.withLock { $0.failingSince = nil }
        }
        if core.isStoreFull {
            tell("full", now, summary: "The local store is full",
                 body: "Nothing more can be downloaded or written in \(mountpoint) until space is freed on its disk.")
        }
    }

    /// Sends a notification unless one of the same cause went in the last minute.
    private func tell(_ cause: String, _ now: Date, summary: String, body: String) {
        let due = seen.withLock { s -> Bool in
            if let last = s.told[cause], now.timeIntervalSince(last) < DesktopNotices.quiet { return false }
            s.told[cause] = now
            return true
        }
        guard due else { return }
        DesktopNotices.send(summary: summary, body: body, log: log)
    }

    /// Sends one notification through gdbus (its own process, with a timeout); a failure is logged at debug
    /// level and forgotten.
    static func send(summary: String, body: String, log: Logger) {
        log.info("notification: \(summary): \(body)")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/gdbus")
        p.arguments = ["call", "--session", "--timeout", "5", "--dest", "org.freedesktop.Notifications",
                       "--object-path", "/org/freedesktop/Notifications",
                       "--method", "org.freedesktop.Notifications.Notify", "--",
                       "ubiquityfs", "0", "folder-remote", summary, body, "[]", "{}", "-1"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        do {
            try p.run()
            p.waitUntilExit()
            if p.terminationStatus != 0 { log.debug("the notification was not taken (gdbus exited \(p.terminationStatus))") }
        } catch {
            log.debug("no notification sent: \(error)")
        }
    }
}
