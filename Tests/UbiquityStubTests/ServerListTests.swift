// Several servers for one client: the rotation of the URL list alone, then a client on a dead and a live stub
// (it moves on and the retry is answered), the stub's refusal of plain HTTP beyond loopback, and a token file
// shared by two servers.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
@testable import UbiquityHTTP
@testable import UbiquityStub
#if canImport(Glibc)
import Glibc
#endif

@Suite struct ServerListTests {
    @Test func movesOnOnceFromTheServerInUseAndComesBackAround() {
        let list = ServerList(["http://a:1/", "http://b:2", "http://c:3"])
        #expect(list.current == "http://a:1")
        #expect(list.stoppedAnswering(0) == "http://b:2")
        // A second request that failed on a changes nothing: b stays in use.
        #expect(list.stoppedAnswering(0) == nil)
        #expect(list.current == "http://b:2")
        #expect(list.stoppedAnswering(2) == nil)
        #expect(list.stoppedAnswering(1) == "http://c:3")
        #expect(list.stoppedAnswering(2) == "http://a:1")
        #expect(list.current == "http://a:1")
    }

    @Test func aSingleServerNeverMovesOn() {
        let list = ServerList(["http://a:1"])
        #expect(list.stoppedAnswering(0) == nil)
        #expect(list.current == "http://a:1")
    }

    @Test func findsTheServerOfARequestURL() {
        let list = ServerList(["http://a:1", "http://a:10"])
        #expect(list.server(of: "http://a:1/v1/health") == 0)
        #expect(list.server(of: "http://a:10/v1/health") == 1)
        #expect(list.server(of: "http://a:100/v1/health") == nil)
    }

    @Test func onlyAServerThatStoppedAnsweringIsLeft() {
        #expect(ServerList.meansGone(.unreachable("connection refused")))
        for status in [502, 503, 504] { #expect(ServerList.meansGone(.server(status: status, message: ""))) }
        #expect(!ServerList.meansGone(.server(status: 500, message: "")))
        #expect(!ServerList.meansGone(.unauthorized))
        #expect(!ServerList.meansGone(.notFound("x")))
        #expect(!ServerList.meansGone(.preconditionFailed(current: nil)))
        #expect(!ServerList.meansGone(.cancelled))
    }
}

@Suite struct SeveralServersTests {
    /// A loopback port bound but not listening (so connections are refused, and no other test can take it):
    /// the socket to close after the test, and its port.
    static func deadPort() -> (Int32, UInt16) {
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, len) }
        }
        _ = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &len) }
        }
        return (s, UInt16(bigEndian: addr.sin_port))
    }

    @Test func aRefusedConnectionMovesTheClientOnAndTheRetryIsAnswered() throws {
        let h = try StubHarness()
        let (socket, port) = Self.deadPort()
        defer { close(socket) }
        let dead = "http://127.0.0.1:\(port)"
        let client = HTTPRemoteClient(baseURLs: [dead, h.baseURL], token: h.server.token!,
                                      container: StubHarness.containerID)
        do { _ = try client.openContainer(); Issue.record("a dead server answered") } catch {
            guard case .unreachable = error else { Issue.record("got \(error)"); return }
        }
        #expect(client.baseURL == h.baseURL)
        #expect(try client.openContainer().container == StubHarness.containerID)
        #expect(client.baseURL == h.baseURL)  // an answer keeps the server
    }

    @Test func a503MovesOnAndA404DoesNot() throws {
        let first = try StubHarness(), second = try StubHarness()
        let client = HTTPRemoteClient(baseURLs: [first.baseURL, second.baseURL], token: first.server.token!,
                                      container: StubHarness.containerID)
        do { _ = try client.item("nope"); Issue.record("found") } catch {
            guard case .notFound = error else { Issue.record("got \(error)"); return }
        }
        #expect(client.baseURL == first.baseURL)
        let arm = try first.client.perform("POST", first.client.url(["v1", "faults"]),
                                           headers: ["Content-Type: application/json"],
                                           source: .memory(Array(#"{"failNext": 1, "status": 503}"#.utf8)))
        #expect(arm.status == 200)
        #expect(throws: RemoteError.server(status: 503, message: "injected fault")) { _ = try client.item("nope") }
        #expect(client.baseURL == second.baseURL)
    }

    @Test func plainHTTPBeyondLoopbackIsRefusedBeforeAnythingIsMade() throws {
        let dir = NSTemporaryDirectory() + "ubq-listen-\(randomHex(bytes: 6))"
        var config = StubConfig(dataDir: dir)
        config.host = "0.0.0.0"
        #expect(throws: StubError.self) { _ = try StubServer(config: config) }
        #expect(!FileManager.default.fileExists(atPath: dir))
        for host in ["127.0.0.1", "127.1.2.3", "::1", "localhost"] { #expect(StubConfig.isLoopback(host)) }
        for host in ["0.0.0.0", "10.0.0.1", "::", "::ffff:127.0.0.1", "example.org"] {
            #expect(!StubConfig.isLoopback(host))
        }
        config.tlsCertificate = "x"
        #expect(throws: StubError.self) { _ = try StubServer(config: config) }  // a certificate without its key
    }

    @Test func twoServersShareOneTokenFile() throws {
        let dir = NSTemporaryDirectory() + "ubq-token-\(randomHex(bytes: 6))"
        try makeDirectories(dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let tokens = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            if let t = try? StubServer.loadOrCreateToken(dir + "/token") { tokens.withLock { $0.append(t) } }
        }
        let all = tokens.withLock { $0 }
        #expect(all.count == 8 && Set(all).count == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["token"])
        var st = stat()
        #expect(stat(dir + "/token", &st) == 0 && st.st_mode & 0o777 == 0o600)
    }
}
