// The HTTP client against a real stub server on a loopback port: every RemoteClient call, the error mapping
// of real answers, long polling, resumed and cancelled transfers, and bounded memory on a big download.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
import UbiquityStub
@testable import UbiquityHTTP
#if canImport(Glibc)
import Glibc
#endif

/// A stub server in a fresh data directory, and a client for one container on it.
final class StubHarness {
    static let containerID = "iCloud.com.example.tests"
    let dir: String
    let server: StubServer
    let client: HTTPRemoteClient
    var baseURL: String { "http://127.0.0.1:\(server.port)" }

    init(timeouts: HTTPTimeouts = .init()) throws {
        dir = NSTemporaryDirectory() + "ubq-http-\(randomHex(bytes: 6))"
        try makeDirectories(dir + "/stub")
        var config = StubConfig(dataDir: dir + "/stub")
        config.testRoutes = true // these tests arm /v1/faults
        server = try StubServer(config: config)
        try server.start()
        client = HTTPRemoteClient(baseURL: "http://127.0.0.1:\(server.port)", token: server.token!,
                                  container: Self.containerID, timeouts: timeouts, device: "tests")
    }

    func makeClient(token: String? = nil) -> HTTPRemoteClient {
        HTTPRemoteClient(baseURL: baseURL, token: token ?? server.token!, container: Self.containerID)
    }

    /// A file of `size` pseudo-random bytes in the harness directory; returns its path and SHA-256.
    func makeFile(_ name: String, size: Int, seed: UInt64 = 1) throws -> (path: String, sha256: String) {
        let path = dir + "/" + name
        let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC)
        defer { fd.close() }
        var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var left = size
        var hasher = SHA256Hasher()
        while left > 0 {
            let n = min(left, chunk.count)
            for i in 0..<n {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                chunk[i] = UInt8(truncatingIfNeeded: state)
            }
            try chunk.withUnsafeBytes { raw in
                let part = UnsafeRawBufferPointer(rebasing: raw[0..<n])
                hasher.update(part)
                try fd.writeAll(part)
            }
            left -= n
        }
        return (path, hasher.finalizeHex())
    }

    /// Opens a fresh output file for a download.
    func openOutput(_ name: String) throws -> (path: String, fd: FileDescriptor) {
        let path = dir + "/" + name
        return (path, try FileDescriptor.open(path, O_RDWR | O_CREAT | O_TRUNC))
    }

    deinit {
        server.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// Resident memory of this process, in bytes (VmRSS of /proc/self/status).
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kb = line.split(separator: " ").compactMap { Int($0) }.first ?? 0
        return kb * 1024
    }
    return 0
}

func fileItem(_ id: String, name: String, sha256: String = emptySHA256, size: Int64 = 0,
              parent: String = WireRules.documentsID) -> WireItem {
    WireItem(id: id, parent: parent, name: name, kind: .file, mode: 0o644, mtime: nowNanoseconds(), size: size,
             sha256: sha256, device: "tests")
}

@Suite(.serialized) struct HTTPClientEndToEndTests {
    @Test func healthOpenAndChanges() throws {
        let h = try StubHarness()
        try h.client.health()
        let opened = try h.client.openContainer()
        #expect(opened.container == StubHarness.containerID)
        #expect(opened.root == WireRules.rootID)
        let again = try h.client.openContainer()
        #expect(again.root == opened.root)

        let all = try h.client.changes(since: nil, waitSeconds: 0)
        #expect(all.items.contains { $0.id == WireRules.rootID })
        #expect(all.items.contains { $0.id == WireRules.documentsID && $0.kind == .dir })
        let root = try h.client.item(WireRules.rootID)
        #expect(root.parent == nil && root.kind == .dir)

        // Nothing new since the latest token: an empty page, answered at once without a wait.
        let none = try h.client.changes(since: all.token, waitSeconds: 0)
        #expect(none.items.isEmpty)
    }

    @Test func longPollWakesUpOnChange() throws {
        let h = try StubHarness()
        let token = try h.client.openContainer().token
        let other = h.makeClient()
        let writer = Thread {
            usleep(400_000)
            _ = try? other.putItem(fileItem("polled", name: "polled.txt"), ifMatch: nil)
        }
        let start = monotonicNanoseconds()
        writer.start()
        var seen: [WireItem] = []
        var next = token
        // The change may arrive in the first answer or, if the stub wakes early, in a later one.
        while !seen.contains(where: { $0.id == "polled" }) && monotonicNanoseconds() - start < 15_000_000_000 {
            let page = try h.client.changes(since: next, waitSeconds: 20)
            seen += page.items
            next = page.token
        }
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        #expect(seen.contains { $0.id == "polled" && $0.name == "polled.txt" })
        #expect(seconds < 10, "the long poll should answer when the change lands, not after the wait")
        #expect(seconds >= 0.3, "the long poll should have waited for the change")
    }

    @Test func conditionalPutsAndDeletes() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let created = try h.client.putItem(fileItem("a1", name: "a.txt"), ifMatch: nil)
        #expect(created.version > 0 && created.name == "a.txt" && !created.deleted)
        #expect(try h.client.item("a1") == created)

        // Creating again: 412 carrying the current item.
        #expect(throws: RemoteError.preconditionFailed(current: created)) {
            _ = try h.client.putItem(fileItem("a1", name: "a.txt"), ifMatch: nil)
        }
        var renamed = created
        renamed.name = "b.txt"
        let updated = try h.client.putItem(renamed, ifMatch: created.version)
        #expect(updated.version > created.version && updated.name == "b.txt")

        // A stale version loses and learns the current state.
        #expect(throws: RemoteError.preconditionFailed(current: updated)) {
            _ = try h.client.putItem(renamed, ifMatch: created.version)
        }
        #expect(throws: RemoteError.preconditionFailed(current: updated)) {
            _ = try h.client.deleteItem("a1", ifMatch: created.version)
        }
        let tomb = try h.client.deleteItem("a1", ifMatch: updated.version)
        #expect(tomb.deleted && tomb.version > updated.version)
        #expect(try h.client.item("a1").deleted)

        // Unknown item.
        do { _ = try h.client.item("nope"); Issue.record("found an unknown item") } catch {
            guard case .notFound = error else { Issue.record("got \(error)"); return }
        }
    }

    @Test func nameClashIsConflictWithCurrent() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let first = try h.client.putItem(fileItem("c1", name: "same.txt"), ifMatch: nil)
        do {
            _ = try h.client.putItem(fileItem("c2", name: "same.txt"), ifMatch: nil)
            Issue.record("two live items got the same name")
        } catch {
            guard case .conflict(_, let current) = error else { Issue.record("got \(error)"); return }
            #expect(current?.id == first.id)
        }
        // A file whose blob the stub does not hold is refused as malformed.
        do {
            _ = try h.client.putItem(fileItem("c3", name: "x", sha256: String(repeating: "ab", count: 32), size: 5),
                                     ifMatch: nil)
            Issue.record("an item without its blob was accepted")
        } catch {
            guard case .rejected(400, _) = error else { Issue.record("got \(error)"); return }
        }
    }

    @Test func blobRoundTripAndResume() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let size = 3 * 1024 * 1024 + 17
        let (path, sha) = try h.makeFile("src", size: size)
        #expect(try h.client.hasBlob(sha256: sha) == false)
        var reports: [Int64] = []
        try h.client.uploadBlob(sha256: sha, size: Int64(size), fromFile: path) { reports.append($0); return true }
        #expect(try h.client.hasBlob(sha256: sha))
        #expect(reports.last == Int64(size))
        // Uploading again is fine (the stub already holds it).
        try h.client.uploadBlob(sha256: sha, size: Int64(size), fromFile: path, progress: nil)

        // The item can now name the blob.
        let item = try h.client.putItem(fileItem("f1", name: "f.bin", sha256: sha, size: Int64(size)), ifMatch: nil)
        #expect(item.sha256 == sha)

        let out = try h.openOutput("whole")
        var last: Int64 = 0
        try h.client.downloadBlob(sha256: sha, offset: 0, to: out.fd) { last = $0; return true }
        #expect(lseek(out.fd.raw, 0, SEEK_CUR) == off_t(size), "the position ends after the bytes")
        out.fd.close()
        #expect(last == Int64(size))
        #expect(try sha256OfFile(out.path).sha256 == sha)

        // Resume: the first part is already there, the rest comes with a Range request.
        let part = try h.openOutput("part")
        let offset: Int64 = 1_000_003
        let src = try FileDescriptor.open(path, O_RDONLY)
        var head = [UInt8](repeating: 0, count: Int(offset))
        _ = try head.withUnsafeMutableBytes { try src.read(into: $0, at: 0) }
        src.close()
        try part.fd.writeAll(head)
        var firstReport: Int64 = -1
        var lastReport: Int64 = -1
        try h.client.downloadBlob(sha256: sha, offset: offset, to: part.fd) { n in
            if firstReport < 0 { firstReport = n }
            lastReport = n
            return true
        }
        part.fd.close()
        #expect(firstReport >= offset)
        #expect(lastReport == Int64(size))
        #expect(try sha256OfFile(part.path) == (sha, Int64(size)))

        // Unknown blob.
        let missing = try h.openOutput("missing")
        defer { missing.fd.close() }
        do {
            try h.client.downloadBlob(sha256: String(repeating: "0", count: 64), offset: 0, to: missing.fd, progress: nil)
            Issue.record("downloaded an unknown blob")
        } catch {
            guard case .notFound = error else { Issue.record("got \(error)"); return }
        }
    }

    @Test func uploadWithWrongHashIsCorrupt() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let (path, _) = try h.makeFile("bad", size: 100_000)
        let wrong = String(repeating: "1", count: 64)
        #expect(throws: RemoteError.self) {
            try h.client.uploadBlob(sha256: wrong, size: 100_000, fromFile: path, progress: nil)
        }
        do {
            try h.client.uploadBlob(sha256: wrong, size: 100_000, fromFile: path, progress: nil)
        } catch {
            guard case .corrupt = error else { Issue.record("got \(error)"); return }
        }
        #expect(try h.client.hasBlob(sha256: wrong) == false)
    }

    @Test func progressCancelsTransfers() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        // Large enough that, with 512 KiB receive buffers on loopback, a cancel at 1 MB lands well before the end.
        let size = 64 * 1024 * 1024
        let (path, sha) = try h.makeFile("big", size: size)
        #expect(throws: RemoteError.cancelled) {
            try h.client.uploadBlob(sha256: sha, size: Int64(size), fromFile: path) { $0 < 1_000_000 }
        }
        try h.client.uploadBlob(sha256: sha, size: Int64(size), fromFile: path, progress: nil)
        let out = try h.openOutput("cancelled")
        defer { out.fd.close() }
        var stoppedAt: Int64 = 0
        #expect(throws: RemoteError.cancelled) {
            try h.client.downloadBlob(sha256: sha, offset: 0, to: out.fd) { n in stoppedAt = n; return n < 1_000_000 }
        }
        #expect(stoppedAt >= 1_000_000 && stoppedAt < Int64(size))
        // The client still works after a cancelled transfer (the pooled handle was reset).
        #expect(try h.client.hasBlob(sha256: sha))
    }

    @Test func wrongTokenIsUnauthorized() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let bad = h.makeClient(token: String(repeating: "0", count: 64))
        try bad.health()  // no token needed
        #expect(throws: RemoteError.unauthorized) { _ = try bad.openContainer() }
        #expect(throws: RemoteError.unauthorized) { _ = try bad.changes(since: nil, waitSeconds: 0) }
        #expect(throws: RemoteError.unauthorized) { _ = try bad.hasBlob(sha256: emptySHA256) }
    }

    @Test func stoppedServerIsUnreachable() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        h.server.stop()
        do { _ = try h.client.item(WireRules.rootID); Issue.record("answered after stop") } catch {
            guard case .unreachable = error else { Issue.record("got \(error)"); return }
            #expect(error.isTransient)
        }
    }

    @Test func concurrentCallsShareTheClient() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let client = h.client
        let failures = Counter()
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            for j in 0..<10 {
                do {
                    let made = try client.putItem(fileItem("t\(i)-\(j)", name: "n\(i)-\(j)"), ifMatch: nil)
                    if try client.item(made.id) != made { failures.add() }
                } catch { failures.add() }
            }
        }
        #expect(failures.value == 0)
        var count = 0
        var token: String? = nil
        repeat {
            let page = try client.changes(since: token, waitSeconds: 0)
            count += page.items.filter { $0.id.hasPrefix("t") }.count
            token = page.token
            if !page.more { break }
        } while true
        #expect(count == 80)
    }

    @Test func seededFilesArriveThroughTheFeed() throws {
        let h = try StubHarness()
        let opened = try h.client.openContainer()
        let bytes = Array("from another device\n".utf8)
        let seeded = try h.server.seed(container: StubHarness.containerID, path: "Documents/sub/seeded.txt",
                                       contents: .bytes(bytes), device: "phone", mtime: 42)
        let page = try h.client.changes(since: opened.token, waitSeconds: 5)
        let item = try #require(page.items.first { $0.id == seeded.id })
        #expect(item.name == "seeded.txt" && item.device == "phone" && item.size == Int64(bytes.count))
        #expect(page.items.contains { $0.name == "sub" && $0.kind == .dir })
        let out = try h.openOutput("seeded")
        try h.client.downloadBlob(sha256: item.sha256, offset: 0, to: out.fd, progress: nil)
        out.fd.close()
        #expect(try sha256OfFile(out.path) == (sha256Hex(bytes), Int64(bytes.count)))
        // Deleting sends our device name into the tombstone.
        let tomb = try h.client.deleteItem(item.id, ifMatch: item.version)
        #expect(tomb.deleted && tomb.device == "tests")
    }

    @Test func refusedUploadIsReportedNotBrokenPipe() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let size = 8 * 1024 * 1024
        let (path, sha) = try h.makeFile("refused", size: size)
        let bad = h.makeClient(token: String(repeating: "0", count: 64))
        #expect(throws: RemoteError.unauthorized) {
            try bad.uploadBlob(sha256: sha, size: Int64(size), fromFile: path, progress: nil)
        }
        #expect(try h.client.hasBlob(sha256: sha) == false)
    }

    /// POST /v1/faults through the client's own plumbing.
    func arm(_ h: StubHarness, _ json: String) throws {
        let r = try h.client.perform("POST", h.client.url(["v1", "faults"]),
                                     headers: ["Content-Type: application/json"], source: .memory(Array(json.utf8)))
        #expect(r.status == 200)
    }

    @Test func injectedFaultsMapToTransientErrors() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        try arm(h, #"{"failNext": 2, "status": 503}"#)
        for _ in 0..<2 {
            do { _ = try h.client.item(WireRules.rootID); Issue.record("the fault did not fire") } catch {
                guard case .server(503, _) = error else { Issue.record("got \(error)"); continue }
                #expect(error.isTransient)
            }
        }
        #expect(try h.client.item(WireRules.rootID).id == WireRules.rootID)

        // A download cut short is unreachable (transient), and resumes from where it stopped.
        let size = 2 * 1024 * 1024
        let (path, sha) = try h.makeFile("cut", size: size)
        try h.client.uploadBlob(sha256: sha, size: Int64(size), fromFile: path, progress: nil)
        try arm(h, #"{"dropAfterBytes": 700000, "count": 1}"#)
        let out = try h.openOutput("cut.out")
        defer { out.fd.close() }
        var got: Int64 = 0
        do {
            try h.client.downloadBlob(sha256: sha, offset: 0, to: out.fd) { got = $0; return true }
            Issue.record("the cut download succeeded")
        } catch {
            guard case .unreachable = error else { Issue.record("got \(error)"); return }
        }
        let have = Int64(try out.fd.stat().st_size)
        #expect(have > 0 && have <= 700_000 && got <= have)
        try h.client.downloadBlob(sha256: sha, offset: have, to: out.fd, progress: nil)
        #expect(try sha256OfFile(out.path) == (sha, Int64(size)))
    }

    @Test func alreadyCompleteResumeSucceeds() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let (path, sha) = try h.makeFile("done", size: 1000)
        try h.client.uploadBlob(sha256: sha, size: 1000, fromFile: path, progress: nil)
        let fd = try FileDescriptor.open(path, O_RDWR)
        defer { fd.close() }
        var reported: Int64 = -1
        try h.client.downloadBlob(sha256: sha, offset: 1000, to: fd) { reported = $0; return true }
        #expect(reported == 1000)
        #expect(try sha256OfFile(path) == (sha, 1000))
    }

    @Test func bigDownloadKeepsMemoryBounded() throws {
        let h = try StubHarness()
        _ = try h.client.openContainer()
        let size = 64 * 1024 * 1024
        let (path, sha) = try h.makeFile("huge", size: size, seed: 7)
        // Warm up the client and the server (threads, buffers, connection) on a small transfer.
        let (smallPath, smallSHA) = try h.makeFile("small", size: 200_000, seed: 3)
        try h.client.uploadBlob(sha256: smallSHA, size: 200_000, fromFile: smallPath, progress: nil)
        let warm = try h.openOutput("warm")
        try h.client.downloadBlob(sha256: smallSHA, offset: 0, to: warm.fd, progress: nil)
        warm.fd.close()

        let before = residentBytes()
        var peak = before
        var samples = 0
        try h.client.uploadBlob(sha256: sha, size: Int64(size), fromFile: path) { _ in
            peak = max(peak, residentBytes()); samples += 1; return true
        }
        let out = try h.openOutput("huge.out")
        try h.client.downloadBlob(sha256: sha, offset: 0, to: out.fd) { _ in
            peak = max(peak, residentBytes()); samples += 1; return true
        }
        out.fd.close()
        peak = max(peak, residentBytes())
        #expect(try sha256OfFile(out.path) == (sha, Int64(size)))
        let growth = peak - before
        #expect(samples > 10, "memory was sampled during the transfers")
        #expect(growth < 16 * 1024 * 1024, "memory grew by \(growth / 1024) KiB over a 64 MiB round trip")
    }
}

/// A thread-safe counter for the concurrency test.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add() { lock.lock(); n += 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
}
