// Tests of the HTTP remote client: the pure parts (URLs, error mapping) without a server, and, where a stub
// server is available, the whole client end to end.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
@testable import UbiquityHTTP

@Suite struct HTTPClientTests {
    static let sampleItem = WireItem(id: "abc", parent: "root", name: "notes.txt", kind: .file, mode: 0o644,
                                     mtime: 1, size: 3, sha256: sha256Hex(Array("hey".utf8)), version: 7,
                                     device: "laptop")

    static func errorBody(_ message: String, current: WireItem? = nil) -> [UInt8] {
        Array(try! JSONEncoder.wire.encode(WireError(error: message, current: current)))
    }

    // MARK: URLs

    @Test func escapesPathSegmentsAndQueryValues() {
        #expect(HTTPMapping.escape("iCloud.com.example-notes_1~") == "iCloud.com.example-notes_1~")
        #expect(HTTPMapping.escape("a b/c?d&e=f%") == "a%20b%2Fc%3Fd%26e%3Df%25")
        #expect(HTTPMapping.escape("é") == "%C3%A9")
        #expect(HTTPMapping.escape("") == "")
    }

    @Test func buildsURLs() {
        let u = HTTPMapping.url(base: "http://127.0.0.1:8443/", segments: ["v1", "containers", "a.b", "items", "x/y"])
        #expect(u == "http://127.0.0.1:8443/v1/containers/a.b/items/x%2Fy")
        let q = HTTPMapping.url(base: "http://h:1", segments: ["v1", "changes"],
                                query: [("since", nil), ("wait", "30"), ("t", "a&b")])
        #expect(q == "http://h:1/v1/changes?wait=30&t=a%26b")
        let c = HTTPRemoteClient(baseURL: "http://127.0.0.1:9/", token: "t", container: "iCloud.x y")
        #expect(c.url(["v1", "containers", c.container]) == "http://127.0.0.1:9/v1/containers/iCloud.x%20y")
    }

    @Test func hostPortOfBaseURL() {
        #expect(HTTPMapping.hostPort("http://127.0.0.1:8443") == "127.0.0.1:8443")
        #expect(HTTPMapping.hostPort("https://user@example.org:99/base") == "example.org:99")
        #expect(HTTPMapping.hostPort("localhost:1") == "localhost:1")
    }

    @Test func contentRange() {
        #expect(HTTPMapping.contentRangeStart("bytes 100-199/200") == 100)
        #expect(HTTPMapping.contentRangeStart("bytes */200") == nil)
        #expect(HTTPMapping.contentRangeTotal("bytes */200") == 200)
        #expect(HTTPMapping.contentRangeTotal("bytes 0-9/10") == 10)
    }

    // MARK: Error mapping

    @Test func mapsStatusesToRemoteErrors() {
        #expect(HTTPMapping.error(status: 401, body: Self.errorBody("bad token")) == .unauthorized)
        #expect(HTTPMapping.error(status: 404, body: Self.errorBody("no such item")) == .notFound("no such item"))
        #expect(HTTPMapping.error(status: 400, body: Self.errorBody("bad name")) == .rejected(status: 400, message: "bad name"))
        #expect(HTTPMapping.error(status: 413, body: []) == .rejected(status: 413, message: "HTTP 413"))
        #expect(HTTPMapping.error(status: 416, body: Self.errorBody("range")) == .rejected(status: 416, message: "range"))
        // Too many connections of one key or user: the server's load, not the request; tried again later.
        #expect(HTTPMapping.error(status: 429, body: Self.errorBody("too many")).isTransient)
        #expect(HTTPMapping.error(status: 422, body: Self.errorBody("hash")) == .misplaced("hash"))
        #expect(HTTPMapping.error(status: 422, body: Self.errorBody("hash"), blobUpload: true) == .corrupt("hash"))
        #expect(HTTPMapping.error(status: 500, body: Self.errorBody("boom")) == .server(status: 500, message: "boom"))
        #expect(HTTPMapping.error(status: 503, body: Array("<html>busy\nx".utf8))
                == .server(status: 503, message: "HTTP 503: <html>busy"))
        #expect(HTTPMapping.error(status: 405, body: []) == .rejected(status: 405, message: "HTTP 405"))
    }

    @Test func preconditionAndConflictCarryCurrent() {
        let item = Self.sampleItem
        #expect(HTTPMapping.error(status: 412, body: Self.errorBody("version", current: item))
                == .preconditionFailed(current: item))
        #expect(HTTPMapping.error(status: 412, body: Self.errorBody("version")) == .preconditionFailed(current: nil))
        #expect(HTTPMapping.error(status: 412, body: Array("not json".utf8)) == .preconditionFailed(current: nil))
        #expect(HTTPMapping.error(status: 409, body: Self.errorBody("name taken", current: item))
                == .conflict("name taken", current: item))
    }

    // MARK: Without a server

    @Test func unreachablePortIsUnreachable() throws {
        let port = try Self.closedPort()
        let c = HTTPRemoteClient(baseURL: "http://127.0.0.1:\(port)", token: "t", container: "iCloud.a.b")
        do {
            try c.health()
            Issue.record("health answered on a closed port")
        } catch {
            guard case .unreachable(let m) = error else { Issue.record("got \(error)"); return }
            #expect(m == "cannot connect to 127.0.0.1:\(port): Connection refused")
        }
        #expect(throws: RemoteError.self) { _ = try c.openContainer() }
    }

    /// A loopback port nobody listens on: bind one, note it, close it.
    static func closedPort() throws -> UInt16 {
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(s) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sp in
                bind(s, sp, len) == 0 && getsockname(s, sp, &len) == 0
            }
        }
        guard ok else { throw Errno.current }
        return UInt16(bigEndian: addr.sin_port)
    }
}

/// A one-connection HTTP server that reads a request head and answers with canned bytes, then holds the
/// connection open for a while: for the answers a well-behaved stub never gives (stalls, ignored ranges).
final class CannedServer: @unchecked Sendable {
    let listener: Int32
    let port: UInt16

    init(answer: [UInt8], holdSeconds: Double) throws {
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let fd = listener
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sp in
                bind(fd, sp, len) == 0 && listen(fd, 4) == 0 && getsockname(fd, sp, &len) == 0
            }
        }
        guard ok else { close(fd); throw Errno.current }
        port = UInt16(bigEndian: addr.sin_port)
        let thread = Thread {
            let c = accept(fd, nil, nil)
            guard c >= 0 else { return }
            var head: [UInt8] = []
            var byte: UInt8 = 0
            while read(c, &byte, 1) == 1 {
                head.append(byte)
                if head.count >= 4 && head.suffix(4) == [13, 10, 13, 10] { break }
            }
            _ = answer.withUnsafeBytes { write(c, $0.baseAddress, $0.count) }
            usleep(useconds_t(holdSeconds * 1_000_000))
            close(c)
        }
        thread.start()
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }
    deinit { close(listener) }
}

@Suite struct HTTPClientOddAnswerTests {
    static func answer(_ status: String, headers: [String] = [], body: String) -> [UInt8] {
        var text = "HTTP/1.1 \(status)\r\n"
        for h in headers { text += h + "\r\n" }
        return Array(text.utf8) + Array("\r\n".utf8) + Array(body.utf8)
    }

    static func output() throws -> (path: String, fd: FileDescriptor) {
        let path = NSTemporaryDirectory() + "ubq-canned-\(randomHex(bytes: 6))"
        return (path, try FileDescriptor.open(path, O_RDWR | O_CREAT | O_TRUNC))
    }

    @Test func stalledDownloadIsAbandoned() throws {
        let server = try CannedServer(answer: Self.answer("200 OK", headers: ["Content-Length: 100000"],
                                                          body: String(repeating: "x", count: 1000)),
                                      holdSeconds: 8)
        let client = HTTPRemoteClient(baseURL: server.baseURL, token: "t", container: "iCloud.a.b",
                                      timeouts: HTTPTimeouts(connectSeconds: 2, requestSeconds: 2, stallSeconds: 1))
        let out = try Self.output()
        defer { out.fd.close(); unlink(out.path) }
        let start = monotonicNanoseconds()
        do {
            try client.downloadBlob(sha256: emptySHA256, offset: 0, to: out.fd, progress: nil)
            Issue.record("a stalled download succeeded")
        } catch {
            guard case .unreachable(let m) = error else { Issue.record("got \(error)"); return }
            #expect(m.contains("stalled"))
        }
        #expect(monotonicNanoseconds() - start < 4_000_000_000)
        #expect(try out.fd.stat().st_size == 1000)
    }

    @Test func ignoredRangeIsRefused() throws {
        let server = try CannedServer(answer: Self.answer("200 OK", headers: ["Content-Length: 10"], body: "0123456789"),
                                      holdSeconds: 0.5)
        let client = HTTPRemoteClient(baseURL: server.baseURL, token: "t", container: "iCloud.a.b")
        let out = try Self.output()
        defer { out.fd.close(); unlink(out.path) }
        do {
            try client.downloadBlob(sha256: emptySHA256, offset: 5, to: out.fd, progress: nil)
            Issue.record("a 200 answer to a range request was taken")
        } catch {
            guard case .server(200, _) = error else { Issue.record("got \(error)"); return }
        }
        #expect(try out.fd.stat().st_size == 0)
    }

    @Test func silentServerTimesOut() throws {
        let server = try CannedServer(answer: [], holdSeconds: 5)
        let client = HTTPRemoteClient(baseURL: server.baseURL, token: "t", container: "iCloud.a.b",
                                      timeouts: HTTPTimeouts(connectSeconds: 1, requestSeconds: 1, stallSeconds: 1))
        let start = monotonicNanoseconds()
        do { _ = try client.item("x"); Issue.record("a silent server answered") } catch {
            guard case .unreachable(let m) = error else { Issue.record("got \(error)"); return }
            #expect(m.contains("127.0.0.1:\(server.port)"))
        }
        #expect(monotonicNanoseconds() - start < 4_000_000_000)
    }

    @Test func undecodableAnswerIsServerTrouble() throws {
        let server = try CannedServer(answer: Self.answer("200 OK", headers: ["Content-Length: 4"], body: "nope"),
                                      holdSeconds: 0.5)
        let client = HTTPRemoteClient(baseURL: server.baseURL, token: "t", container: "iCloud.a.b")
        do { _ = try client.item("x"); Issue.record("garbage decoded") } catch {
            guard case .server(200, _) = error else { Issue.record("got \(error)"); return }
        }
    }

    @Test func errorBodyOfADownloadIsReadNotWritten() throws {
        let body = #"{"error":"range past the end"}"#
        let server = try CannedServer(answer: Self.answer("416 Range Not Satisfiable",
                                                          headers: ["Content-Length: \(body.utf8.count)",
                                                                    "Content-Range: bytes */3"], body: body),
                                      holdSeconds: 0.5)
        let client = HTTPRemoteClient(baseURL: server.baseURL, token: "t", container: "iCloud.a.b")
        let out = try Self.output()
        defer { out.fd.close(); unlink(out.path) }
        #expect(throws: RemoteError.rejected(status: 416, message: "range past the end")) {
            try client.downloadBlob(sha256: emptySHA256, offset: 9, to: out.fd, progress: nil)
        }
        #expect(try out.fd.stat().st_size == 0)
    }

    @Test func aLocalFileThatCannotBeOpenedIsALocalFailureWithItsErrno() {
        let c = HTTPRemoteClient(baseURL: "http://127.0.0.1:9/", token: "t", container: "iCloud.x")
        // Before: a remote refusal with status 0, its errno only in the text.
        #expect(throws: RemoteError.localFile("cannot open /nonexistent/blob to upload", cause: .noEntry)) {
            try c.uploadBlob(sha256: emptySHA256, size: 0, fromFile: "/nonexistent/blob", progress: nil)
        }
    }
}
