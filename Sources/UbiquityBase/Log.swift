// Leveled logging to stderr (or a log file): one line per event, with time, level and subsystem.
//
// What must hold: one event is one `write(2)` of one whole line, taken under `lock`, so lines of several threads
// never interleave. The message is built (and the autoclosure run) before the lock is taken, never under it.
// `level` is an atomic, read without the lock; the output's lock is a leaf (lock order: last). A log file that
// cannot be opened leaves the output on stderr; logging never throws and never fails an operation. Lines that
// a full disk refuses are counted, the last warnings and errors among them kept, and both written once it
// takes lines again.
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public enum LogLevel: Int, Comparable, Sendable {
    case debug = 0, info, warning, error
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
    public var label: String { ["DEBUG", "INFO", "WARN", "ERROR"][rawValue] }
    public init?(name: String) {
        switch name.lowercased() {
        case "debug": self = .debug
        case "info": self = .info
        case "warn", "warning": self = .warning
        case "error": self = .error
        default: return nil
        }
    }
}

public final class Log: Sendable {
    public static let shared = Log()
    private let output = Locked(Output())
    private let levelValue = Atomic<Int>(LogLevel.info.rawValue)

    public var level: LogLevel { LogLevel(rawValue: levelValue.load(ordering: .relaxed)) ?? .info }

    public func configure(level: LogLevel, path: String?) {
        levelValue.store(level.rawValue, ordering: .relaxed)
        guard let path else { return }
        let f = Glibc.open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        if f >= 0 { output.withLock { $0.fd = f } }
    }

    public func write(_ level: LogLevel, _ subsystem: String, _ message: @autoclosure () -> String) {
        guard level >= self.level else { return }
        let now = nowNanoseconds()
        let secs = time_t(now / 1_000_000_000)
        var tm = tm(); var t = secs; gmtime_r(&t, &tm)
        let stamp = String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                           tm.tm_hour, tm.tm_min, tm.tm_sec, Int((now / 1_000_000) % 1000))
        let line = "\(stamp) \(level.label) [\(subsystem)] \(message())\n"
        output.withLock { $0.write(line, level, stamp: stamp) }
    }

    /// Where lines go, and the lines a full disk refused.
    private struct Output {
        var fd: Int32 = 2
        /// Lines that could not be written (the log's disk is full), and the last warnings and errors among
        /// them, written once there is room again.
        var lost = 0
        var lostWarnings: [String] = []
        static let lostWarningsKept = 20

        mutating func write(_ line: String, _ level: LogLevel, stamp: String) {
            if lost > 0 {
                guard append("\(stamp) WARN [log] \(lost) line(s) lost: the log's disk was full\n") else {
                    return keepLost(line, level)
                }
                for kept in lostWarnings { _ = append(kept) }
                lost = 0
                lostWarnings = []
            }
            if !append(line) { keepLost(line, level) }
        }

        private mutating func keepLost(_ line: String, _ level: LogLevel) {
            lost += 1
            guard level >= .warning else { return }
            lostWarnings.append(line)
            if lostWarnings.count > Output.lostWarningsKept { lostWarnings.removeFirst() }
        }

        /// Writes one line whole; false when it could not (a full disk).
        private func append(_ line: String) -> Bool {
            line.withCString { Glibc.write(fd, $0, strlen($0)) == strlen($0) }
        }
    }
}

/// A logger for one subsystem.
public struct Logger: Sendable {
    public let subsystem: String
    public init(_ subsystem: String) { self.subsystem = subsystem }
    public func debug(_ m: @autoclosure () -> String) { Log.shared.write(.debug, subsystem, m()) }
    public func info(_ m: @autoclosure () -> String) { Log.shared.write(.info, subsystem, m()) }
    public func warning(_ m: @autoclosure () -> String) { Log.shared.write(.warning, subsystem, m()) }
    public func error(_ m: @autoclosure () -> String) { Log.shared.write(.error, subsystem, m()) }
}
