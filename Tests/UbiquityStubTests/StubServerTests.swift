// The stub over real HTTP: each test starts a StubServer on a free port in a temporary directory and talks to
// it with curl.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityStub

let cid = "iCloud.com.example.notes"

struct Answer {
    var status: Int
    var headers: [String: String]
    var body: [UInt8]
    var curlExit: Int32

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try JSONDecoder().decode(type, from: Data(body)) }
    var text: String { String(decoding: body, as: UTF8.self) }
    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:] }
}

final class Fixture: @unchecked Sendable {
    let dir: String
    let server: StubServer
    var base: String { "http://127.0.0.1:\(server.port)" }

    init(configure: (inout StubConfig) -> Void = { _ in }) throws {
        dir = NSTemporaryDirectory() + "stubtest-" + randomHex(bytes: 8)
        var config = StubConfig(dataDir: dir)
        config.testRoutes = true // these tests read /v1/stats and arm /v1/faults
        configure(&config)
        server = try StubServer(config: config)
        try server.start()
    }

    deinit {
        server.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// One request with curl. `token: nil` sends no Authorization header.
    func call(_ method: String, _ path: String, token: String?? = .none, headers: [String] = [],
              body: [UInt8]? = nil, json: (any Encodable)? = nil, maxTime: Int = 30) throws -> Answer {
        let scratch = dir + "/curl-" + randomHex(bytes: 6)
        var args = ["-s", "--path-as-is", "--max-time", String(maxTime), "-D", scratch + ".h", "-o", scratch + ".b",
                    "-w", "%{http_code}"]
        if method == "HEAD" { args.append("-I") } else { args += ["-X", method] }
        let bearer: String? = token ?? server.token
        if let bearer { args += ["-H", "Authorization: Bearer \(bearer)"] }
        for h in headers { args += ["-H", h] }
        var payload = body
        if let json { payload = Array(try JSONEncoder.wire.encode(json)) }
        if let payload {
            _ = FileManager.default.createFile(atPath: scratch + ".in", contents: Data(payload))
            // No 100-continue round trip unless the caller asks for one (as the client does for uploads).
            args += ["--data-binary", "@" + scratch + ".in"]
            if !headers.contains(where: { $0.lowercased().hasPrefix("expect:") }) { args += ["-H", "Expect:"] }
        }
        args.append(base + path)
        // The status goes to a file, not a pipe: a server another test starts meanwhile could inherit the pipe's
        // end, and a read to the end would then wait for ever.
        _ = FileManager.default.createFile(atPath: scratch + ".code", contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        p.arguments = args
        p.standardOutput = FileHandle(forWritingAtPath: scratch + ".code")
        try p.run()
        p.waitUntilExit()
        let code = FileManager.default.contents(atPath: scratch + ".code") ?? Data()
        var headers: [String: String] = [:]
        if let raw = FileManager.default.contents(atPath: scratch + ".h") {
            for line in String(decoding: raw, as: UTF8.self).split(separator: "\r\n") {
                if let colon = line.firstIndex(of: ":") {
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
            }
        }
        let bytes = FileManager.default.contents(atPath: scratch + ".b").map { Array($0) } ?? []
        for ext in [".h", ".b", ".in", ".code"] { try? FileManager.default.removeItem(atPath: scratch + ext) }
        return Answer(status: Int(String(decoding: code, as: UTF8.self)) ?? 0, headers: headers, body: bytes,
                      curlExit: p.terminationStatus)
    }

    func openContainer() throws -> WireContainer {
        let a = try call("PUT", "/v1/containers/\(cid)")
        #expect(a.status == 200)
        return try a.decode(WireContainer.self)
    }

    func putItem(_ item: WireItem, ifMatch: Int64? = nil) throws -> Answer {
        let condition = ifMatch.map { "If-Match: \($0)" } ?? "If-None-Match: *"
        return try call("PUT", "/v1/containers/\(cid)/items/\(item.id)", headers: [condition], json: item)
    }

    func putBlob(_ bytes: [UInt8], sha: String? = nil) throws -> Answer {
        try call("PUT", "/v1/containers/\(cid)/blobs/\(sha ?? sha256Hex(bytes))", body: bytes)
    }

    func stats() throws -> WireStats {
        try call("GET", "/v1/stats").decode(WireStats.self)
    }
}

func dir(_ id: String, _ name: String, parent: String = WireRules.documentsID) -> WireItem {
    WireItem(id: id, parent: parent, name: name, kind: .dir, mode: 0o755, mtime: 1, size: 0, sha256: "", device: "test")
}

func file(_ id: String, _ name: String, _ bytes: [UInt8], parent: String = WireRules.documentsID) -> WireItem {
    WireItem(id: id, parent: parent, name: name, kind: .file, mode: 0o644, mtime: 2, size: Int64(bytes.count),
             sha256: sha256Hex(bytes), device: "test")
}

@Suite struct StubServerTests {
    /// Part 15: a server is not a test bench. Without `testRoutes` the routes that list every container's blobs
    /// and fail other clients' requests are not there, for any token.
    /// Part 15: `.` and `..` are no keys (each key is a file name in the mount's .kvstore, where `..` showed twice).
    @Test func dotKeysAreRefused() throws {
        let f = try Fixture()
        #expect(try f.call("PUT", "/v1/containers/\(cid)").status == 200)
        let entry = WireKVEntry(key: "..", value: .string("x"), mtime: 1, device: "a")
        for key in [".", ".."] {
            let answer = try f.call("PUT", "/v1/containers/\(cid)/kv/\(key)", json: entry)
            #expect(answer.status == 400, "key \(key)")
        }
        #expect(try f.call("PUT", "/v1/containers/\(cid)/kv/...", json: WireKVEntry(key: "...", value: .string("x"), mtime: 1, device: "a")).status == 200)
    }

    @Test func theTestRoutesAreNotThereUnlessAsked() throws {
        let f = try Fixture { $0.testRoutes = false }
        #expect(try f.call("GET", "/v1/stats").status == 404)
        #expect(try f.call("POST", "/v1/faults", json: WireFaults(failNext: 2, status: 500)).status == 404)
        #expect(try f.call("PUT", "/v1/containers/\(cid)").status == 200) // (nothing was armed: it succeeds)
    }

    @Test func healthNeedsNoTokenButEverythingElseDoes() throws {
        let f = try Fixture()
        let health = try f.call("GET", "/v1/health", token: .some(nil))
        #expect(health.status == 200)
        #expect(health.json["ok"] as? Bool == true)
        #expect(try f.call("GET", "/v1/stats", token: .some(nil)).status == 401)
        let wrong = try f.call("PUT", "/v1/containers/\(cid)", token: .some(String(repeating: "0", count: 64)))
        #expect(wrong.status == 401)
        #expect(wrong.json["error"] is String)
        #expect(try f.call("GET", "/v1/stats").status == 200)
        // The refused container was not created.
        #expect(try f.call("GET", "/v1/containers/\(cid)/items/root").status == 404)
        #expect(try f.call("GET", "/v1/nothing").status == 404)
        #expect(try f.call("DELETE", "/v1/health").status == 405)
    }

    @Test func tokenIsPersistedPrivatelyAndReused() throws {
        let f = try Fixture()
        #expect(f.server.token!.utf8.count == 64 && isSHA256Hex(f.server.token!))
        var st = stat()
        #expect(stat(f.dir + "/token", &st) == 0)
        #expect(st.st_mode & 0o777 == 0o600)
        _ = try f.openContainer()
        _ = try f.server.seed(container: cid, path: "Documents/a.txt", contents: .bytes([1, 2, 3]), device: "x", mtime: 5)
        f.server.stop()
        let again = try StubServer(config: StubConfig(dataDir: f.dir))
        #expect(again.token == f.server.token)
        try again.start()
        defer { again.stop() }
        // The data survived too: a second server on the same directory sees the seeded file.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        p.arguments = ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer \(again.token!)",
                       "http://127.0.0.1:\(again.port)/v1/containers/\(cid)/changes"]
        let out = Pipe(); p.standardOutput = out
        try p.run(); p.waitUntilExit()
        #expect(String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) == "200")
    }

    @Test func startFailsWhenThePortIsTaken() throws {
        let f = try Fixture()
        var config = StubConfig(dataDir: f.dir + "/other")
        config.port = f.server.port
        let second = try StubServer(config: config)
        #expect(throws: (any Error).self) { try second.start() }
    }

    @Test func containerCreationMakesRootAndDocuments() throws {
        let f = try Fixture()
        let c = try f.openContainer()
        #expect(c.container == cid && c.root == "root")
        #expect(c.token == "2")
        #expect(try f.openContainer().token == "2")
        let root = try f.call("GET", "/v1/containers/\(cid)/items/root").decode(WireItem.self)
        #expect(root.parent == nil && root.name == "" && root.kind == .dir && root.version == 1)
        let docs = try f.call("GET", "/v1/containers/\(cid)/items/documents").decode(WireItem.self)
        #expect(docs.parent == "root" && docs.name == "Documents" && docs.mode == 0o755 && docs.version == 2)
        #expect(try f.call("PUT", "/v1/containers/nodots").status == 400)
        #expect(try f.call("GET", "/v1/containers/other.container/items/root").status == 404)
        #expect(try f.call("GET", "/v1/containers/other.container/changes").status == 404)
        #expect(try f.call("GET", "/v1/containers/\(cid)/items/missing").status == 404)
    }

    @Test func conditionalItemWrites() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let created = try f.putItem(dir("d1", "Folder"))
        #expect(created.status == 200)
        let d1 = try created.decode(WireItem.self)
        #expect(d1.version == 3 && d1.name == "Folder" && !d1.deleted && d1.device == "test")

        // Create on an existing item: 412 with the current item.
        let again = try f.putItem(dir("d1", "Other"))
        #expect(again.status == 412)
        #expect(try again.decode(WireError.self).current == d1)

        // Update with a stale version: 412 with the current item; nothing changes.
        var renamed = dir("d1", "Renamed")
        let stale = try f.putItem(renamed, ifMatch: 2)
        #expect(stale.status == 412)
        #expect(try stale.decode(WireError.self).current?.version == 3)
        let updated = try f.putItem(renamed, ifMatch: 3)
        #expect(updated.status == 200)
        #expect(try updated.decode(WireItem.self).version == 4)
        #expect(try updated.decode(WireItem.self).name == "Renamed")

        // If-Match on a missing item: 404. No condition, or both: 400.
        #expect(try f.putItem(dir("nope", "Nope"), ifMatch: 1).status == 404)
        #expect(try f.call("PUT", "/v1/containers/\(cid)/items/x1", json: dir("x1", "X")).status == 400)
        #expect(try f.call("PUT", "/v1/containers/\(cid)/items/x1", headers: ["If-Match: 1", "If-None-Match: *"],
                           json: dir("x1", "X")).status == 400)

        // Name taken by a live sibling: 409 with the holder.
        let taken = try f.putItem(dir("d2", "Renamed"))
        #expect(taken.status == 409)
        #expect(try taken.decode(WireError.self).current?.id == "d1")

        // Bad names, kind changes, id mismatch, bad JSON: 400. A missing parent or a cycle: 422.
        #expect(try f.putItem(dir("d3", "..")).status == 400)
        #expect(try f.putItem(dir("d3", "a/b")).status == 400)
        #expect(try f.putItem(dir("d3", "Orphan", parent: "ghost")).status == 422)
        #expect(try f.putItem(dir("d3", "Inner", parent: "d1")).status == 200)
        renamed.parent = "d3"
        #expect(try f.putItem(renamed, ifMatch: 4).status == 422)          // d1 below its own child
        let asFile = file("d1", "Renamed", [])
        #expect(try f.putItem(asFile, ifMatch: 4).status == 400)
        #expect(try f.call("PUT", "/v1/containers/\(cid)/items/zz", headers: ["If-None-Match: *"],
                           json: dir("yy", "Y")).status == 400)
        #expect(try f.call("PUT", "/v1/containers/\(cid)/items/zz", headers: ["If-None-Match: *"],
                           body: Array("{nope".utf8)).status == 400)
        // Too large a JSON body: 413.
        #expect(try f.call("PUT", "/v1/containers/\(cid)/items/zz", headers: ["If-None-Match: *"],
                           body: [UInt8](repeating: 32, count: WireRules.maxJSONBytes + 10)).status == 413)
        // The server is still fine afterwards.
        #expect(try f.call("GET", "/v1/containers/\(cid)/items/d1").decode(WireItem.self).version == 4)
    }

    @Test func deletesLeaveTombstonesAndEditsRevive() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let parent = try f.putItem(dir("p", "P")).decode(WireItem.self)
        let child = try f.putItem(dir("c", "C", parent: "p")).decode(WireItem.self)
        let busy = try f.call("DELETE", "/v1/containers/\(cid)/items/p", headers: ["If-Match: \(parent.version)"])
        #expect(busy.status == 409)
        #expect(try busy.decode(WireError.self).current?.id == "c")
        #expect(try f.call("DELETE", "/v1/containers/\(cid)/items/c").status == 400)            // no If-Match
        #expect(try f.call("DELETE", "/v1/containers/\(cid)/items/c", headers: ["If-Match: 1"]).status == 412)
        #expect(try f.call("DELETE", "/v1/containers/\(cid)/items/root", headers: ["If-Match: 1"]).status == 400)
        let gone = try f.call("DELETE", "/v1/containers/\(cid)/items/c",
                              headers: ["If-Match: \(child.version)", "X-Device: phone"])
        #expect(gone.status == 200)
        let tomb = try gone.decode(WireItem.self)
        #expect(tomb.deleted && tomb.version > child.version && tomb.device == "phone")
        #expect(try f.call("GET", "/v1/containers/\(cid)/items/c").decode(WireItem.self).deleted)
        #expect(try f.call("DELETE", "/v1/containers/\(cid)/items/c", headers: ["If-Match: \(tomb.version)"]).status == 412)
        // The name is free again; the parent can go now.
        #expect(try f.putItem(dir("c2", "C", parent: "p")).status == 200)
        // Editing the tombstone revives it (edit wins over delete), under a free name.
        let revived = try f.putItem(dir("c", "C again", parent: "p"), ifMatch: tomb.version)
        #expect(revived.status == 200)
        #expect(try revived.decode(WireItem.self).deleted == false)
    }

    @Test func blobsUploadHashCheckAndRanges() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let bytes = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let sha = sha256Hex(bytes)
        #expect(try f.call("HEAD", "/v1/containers/\(cid)/blobs/\(sha)").status == 404)
        let put = try f.putBlob(bytes)
        #expect(put.status == 201)
        #expect(put.json["sha256"] as? String == sha)
        #expect(put.json["size"] as? Int == bytes.count)
        #expect(try f.putBlob(bytes).status == 200)
        // Wrong hash or a body that does not hash to the name: 422, and nothing kept.
        let other = Array("hello".utf8)
        #expect(try f.putBlob(other, sha: sha256Hex(Array("world".utf8))).status == 422)
        #expect(try f.call("HEAD", "/v1/containers/\(cid)/blobs/\(sha256Hex(Array("world".utf8)))").status == 404)
        #expect(try f.putBlob(other, sha: "ABC").status == 400)
        #expect(try FileManager.default.contentsOfDirectory(atPath: f.dir + "/tmp").isEmpty)

        let head = try f.call("HEAD", "/v1/containers/\(cid)/blobs/\(sha)")
        #expect(head.status == 200)
        #expect(head.headers["content-length"] == "100000")
        let whole = try f.call("GET", "/v1/containers/\(cid)/blobs/\(sha)")
        #expect(whole.status == 200 && whole.body == bytes)
        #expect(whole.headers["x-content-sha256"] == sha)
        #expect(whole.headers["accept-ranges"] == "bytes")
        let part = try f.call("GET", "/v1/containers/\(cid)/blobs/\(sha)", headers: ["Range: bytes=10-19"])
        #expect(part.status == 206 && part.body == Array(bytes[10...19]))
        #expect(part.headers["content-range"] == "bytes 10-19/100000")
        let tail = try f.call("GET", "/v1/containers/\(cid)/blobs/\(sha)", headers: ["Range: bytes=99990-"])
        #expect(tail.status == 206 && tail.body == Array(bytes[99990...]))
        #expect(try f.call("GET", "/v1/containers/\(cid)/blobs/\(sha)", headers: ["Range: bytes=100000-"]).status == 416)
        #expect(try f.call("GET", "/v1/containers/\(cid)/blobs/\(sha256Hex(other))").status == 404)

        // A file item must name a blob the stub holds, at its size; the empty hash needs none.
        var item = file("f1", "data.bin", bytes)
        item.size = 5
        #expect(try f.putItem(item).status == 400)
        #expect(try f.putItem(file("f1", "x.bin", other)).status == 400)
        #expect(try f.putItem(file("f1", "data.bin", bytes)).status == 200)
        #expect(try f.putItem(file("f2", "empty", [])).status == 200)

        let s = try f.stats()
        #expect(s.blobPuts == 2)
        #expect(s.blobGets == 3)
        #expect(s.blobGetsBySha[sha] == 3)
        #expect(s.itemPuts == 2)
    }

    @Test func changeFeedPagesTombstonesAndLongPolls() throws {
        let f = try Fixture()
        let start = try f.openContainer()
        let all = try f.call("GET", "/v1/containers/\(cid)/changes").decode(WireChanges.self)
        #expect(all.items.map(\.id) == ["root", "documents"] && all.token == start.token && !all.more)
        for i in 0..<5 { #expect(try f.putItem(dir("d\(i)", "D\(i)")).status == 200) }
        let page = try f.call("GET", "/v1/containers/\(cid)/changes?since=\(start.token)&limit=3").decode(WireChanges.self)
        #expect(page.items.map(\.id) == ["d0", "d1", "d2"] && page.more)
        let rest = try f.call("GET", "/v1/containers/\(cid)/changes?since=\(page.token)&limit=3").decode(WireChanges.self)
        #expect(rest.items.map(\.id) == ["d3", "d4"] && !rest.more && rest.token == "7")
        #expect(try f.call("GET", "/v1/containers/\(cid)/changes?since=abc").status == 400)

        // An update moves the item to the end of the feed; a delete shows up as a tombstone.
        let d0 = try f.call("GET", "/v1/containers/\(cid)/items/d0").decode(WireItem.self)
        #expect(try f.call("DELETE", "/v1/containers/\(cid)/items/d0", headers: ["If-Match: \(d0.version)"]).status == 200)
        let after = try f.call("GET", "/v1/containers/\(cid)/changes?since=\(rest.token)").decode(WireChanges.self)
        #expect(after.items.count == 1 && after.items[0].id == "d0" && after.items[0].deleted && after.token == "8")

        // Nothing newer and no wait: an immediate empty answer with the same token.
        let quiet = try f.call("GET", "/v1/containers/\(cid)/changes?since=8").decode(WireChanges.self)
        #expect(quiet.items.isEmpty && quiet.token == "8")

        // Long poll: wakes when another request changes something.
        let began = Date()
        let writer = Thread {
            Thread.sleep(forTimeInterval: 0.7)
            _ = try? f.putItem(dir("late", "Late"))
        }
        writer.start()
        let woke = try f.call("GET", "/v1/containers/\(cid)/changes?since=8&wait=20")
        let elapsed = Date().timeIntervalSince(began)
        #expect(woke.status == 200)
        let wokeChanges = try woke.decode(WireChanges.self)
        #expect(wokeChanges.items.map(\.id) == ["late"])
        #expect(elapsed >= 0.6 && elapsed < 10)

        // Long poll that times out: an empty answer after about the wait.
        let t0 = Date()
        let idle = try f.call("GET", "/v1/containers/\(cid)/changes?since=\(wokeChanges.token)&wait=1").decode(WireChanges.self)
        #expect(idle.items.isEmpty && idle.token == wokeChanges.token)
        #expect(Date().timeIntervalSince(t0) >= 0.9)
        #expect(try f.stats().changesRequests == 7)
    }

    @Test func longPollWakesOnSeed() throws {
        let f = try Fixture()
        let c = try f.openContainer()
        let seeder = Thread {
            Thread.sleep(forTimeInterval: 0.5)
            _ = try? f.server.seed(container: cid, path: "Documents/new.txt", contents: .bytes([9]), device: "mac", mtime: nil)
        }
        seeder.start()
        let t0 = Date()
        let woke = try f.call("GET", "/v1/containers/\(cid)/changes?since=\(c.token)&wait=20").decode(WireChanges.self)
        #expect(woke.items.map(\.name) == ["new.txt"])
        #expect(Date().timeIntervalSince(t0) < 10)
    }

    @Test func injectedFaults() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let bytes = (0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }
        let sha = sha256Hex(bytes)
        #expect(try f.putBlob(bytes).status == 201)
        let blob = "/v1/containers/\(cid)/blobs/\(sha)"

        #expect(try f.call("POST", "/v1/faults", json: WireFaults(failNext: 2, status: 500)).status == 200)
        #expect(try f.call("GET", "/v1/health").status == 200)                 // health, stats and faults are spared
        #expect(try f.call("GET", "/v1/stats").status == 200)
        let first = try f.call("GET", "/v1/containers/\(cid)/items/root")
        #expect(first.status == 500 && first.json["error"] is String)
        #expect(try f.call("GET", blob).status == 500)
        #expect(try f.call("GET", "/v1/containers/\(cid)/items/root").status == 200)

        #expect(try f.call("POST", "/v1/faults", json: WireFaults(failNext: 1)).status == 200)
        #expect(try f.call("GET", "/v1/containers/\(cid)/items/root").status == 503)

        #expect(try f.call("POST", "/v1/faults", json: WireFaults(dropAfterBytes: 1000, count: 1)).status == 200)
        let cut = try f.call("GET", blob)
        #expect(cut.body.count == 1000 && cut.curlExit != 0)
        #expect(try f.call("GET", blob).body == bytes)

        #expect(try f.call("POST", "/v1/faults", json: WireFaults(corruptNext: 1)).status == 200)
        let bad = try f.call("GET", blob)
        #expect(bad.body.count == bytes.count && bad.body != bytes)
        #expect(sha256Hex(bad.body) != sha)
        #expect(try f.call("GET", blob).body == bytes)

        // {} clears everything.
        #expect(try f.call("POST", "/v1/faults", json: WireFaults(failNext: 5, dropAfterBytes: 1, corruptNext: 3)).status == 200)
        let cleared = try f.call("POST", "/v1/faults", body: Array("{}".utf8))
        #expect(cleared.status == 200 && cleared.json["failNext"] as? Int == 0 && cleared.json["corruptNext"] as? Int == 0)
        #expect(try f.call("GET", blob).body == bytes)
        #expect(try f.call("POST", "/v1/faults", json: WireFaults(failNext: 1, status: 200)).status == 400)

        let s = try f.stats()
        #expect(s.blobGets == 5)             // the injected 500 served no content
        #expect(s.blobGetsBySha[sha] == 5)
    }

    @Test func pathEscapesAreRefused() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let attempts = [
            "/v1/containers/../../etc/items/passwd",
            "/v1/containers/\(cid)/items/../../token",
            "/v1/containers/\(cid)/items/..%2F..%2Ftoken",
            "/v1/containers/\(cid)/blobs/..%2F..%2Fstub.sqlite",
            "/v1/containers/\(cid)/blobs/../../token",
            "/v1/containers/..%2F..%2Fx.y/items/root",
            "/v1/containers/.hidden.x/items/root",
            "/v1/containers/\(cid)/items/%00root",
        ]
        for path in attempts {
            for method in ["GET", "PUT"] {
                let a = try f.call(method, path, headers: ["If-None-Match: *"], body: Array("{}".utf8))
                #expect(a.status == 400 || a.status == 404, "\(method) \(path) -> \(a.status)")
                #expect(!a.text.contains(f.server.token!))
            }
        }
        #expect(try f.call("PUT", "/v1/containers/..").status == 400)
        // Nothing new appeared next to the data directory.
        let top = try FileManager.default.contentsOfDirectory(atPath: f.dir).filter { !$0.hasPrefix("curl-") }
        #expect(Set(top).isSubset(of: ["stub.sqlite", "stub.sqlite-wal", "stub.sqlite-shm", "blobs", "tmp", "token"]))
        #expect(try FileManager.default.contentsOfDirectory(atPath: f.dir + "/blobs") == [cid])
    }

    @Test func seedMakesParentsAndNewVersions() throws {
        let f = try Fixture()
        let bytes = Array("seeded content".utf8)
        let item = try f.server.seed(container: cid, path: "Documents/Big/video.bin", contents: .bytes(bytes),
                                     device: "ipad", mtime: 1234)
        #expect(item.name == "video.bin" && item.kind == .file && item.size == Int64(bytes.count))
        #expect(item.sha256 == sha256Hex(bytes) && item.device == "ipad" && item.mtime == 1234)
        let big = try f.call("GET", "/v1/containers/\(cid)/items/\(item.parent!)").decode(WireItem.self)
        #expect(big.name == "Big" && big.parent == "documents" && big.kind == .dir)
        #expect(try f.call("GET", "/v1/containers/\(cid)/blobs/\(item.sha256)").body == bytes)

        // A local file as the new content of the same path: same id, newer version.
        let local = f.dir + "/local.bin"
        let newBytes = [UInt8](repeating: 0x5a, count: 3 << 20)
        _ = FileManager.default.createFile(atPath: local, contents: Data(newBytes))
        let replaced = try f.server.seed(container: cid, path: "Documents/Big/video.bin", contents: .file(path: local),
                                         device: "mac", mtime: nil)
        #expect(replaced.id == item.id && replaced.version > item.version && replaced.sha256 == sha256Hex(newBytes))
        #expect(try f.call("GET", "/v1/containers/\(cid)/blobs/\(replaced.sha256)").body == newBytes)

        let folder = try f.server.seed(container: cid, path: "Documents/Big/Sub", contents: .directory, device: "mac", mtime: nil)
        #expect(folder.kind == .dir && folder.parent == big.id)
        #expect(throws: (any Error).self) {
            try f.server.seed(container: cid, path: "Documents/Big/video.bin/x", contents: .directory, device: "m", mtime: nil)
        }
        let feed = try f.call("GET", "/v1/containers/\(cid)/changes").decode(WireChanges.self)
        #expect(feed.items.map(\.name) == ["", "Documents", "Big", "video.bin", "Sub"])
        try? FileManager.default.removeItem(atPath: local)
    }

    @Test func latencyAndBandwidthThrottle() throws {
        let f = try Fixture { $0.latencyMs = 300; $0.bandwidth = 100_000 }
        let t0 = Date()
        #expect(try f.call("GET", "/v1/health").status == 200)
        #expect(Date().timeIntervalSince(t0) >= 0.3)
        let bytes = [UInt8](repeating: 7, count: 200_000)
        let item = try f.server.seed(container: cid, path: "Documents/slow.bin", contents: .bytes(bytes), device: "d", mtime: nil)
        let t1 = Date()
        let got = try f.call("GET", "/v1/containers/\(cid)/blobs/\(item.sha256)")
        let took = Date().timeIntervalSince(t1)
        #expect(got.body == bytes)
        #expect(took >= 1.8, "200 kB at 100 kB/s took \(took) s")
    }

    /// `--bandwidth` caps what the server sends in all, as a link would: two downloads at once share it (each
    /// had it whole, so a file fetched in four chunk requests at once came at four times the cap).
    @Test func theBandwidthIsSharedByDownloadsAtOnce() throws {
        let f = try Fixture { $0.bandwidth = 100_000 }
        let one = [UInt8](repeating: 1, count: 100_000), two = [UInt8](repeating: 2, count: 100_000)
        let a = try f.server.seed(container: cid, path: "Documents/one.bin", contents: .bytes(one), device: "d", mtime: nil)
        let b = try f.server.seed(container: cid, path: "Documents/two.bin", contents: .bytes(two), device: "d", mtime: nil)
        let t0 = Date()
        let bodies = Locked([String: [UInt8]]())
        let done = DispatchSemaphore(value: 0)
        for sha in [a.sha256, b.sha256] {
            Thread.detachNewThread {
                let got = try? f.call("GET", "/v1/containers/\(cid)/blobs/\(sha)")
                bodies.withLock { $0[sha] = got?.body }
                done.signal()
            }
        }
        done.wait()
        done.wait()
        let took = Date().timeIntervalSince(t0)
        #expect(bodies.withLock { $0 } == [a.sha256: one, b.sha256: two])
        #expect(took >= 1.8, "200 kB in two downloads at once at 100 kB/s took \(took) s")
    }

    @Test func oversizeAndUnauthorizedUploadsAreRefusedEarly() throws {
        let f = try Fixture { $0.maxBlobBytes = 1 << 20 }
        _ = try f.openContainer()
        let big = [UInt8](repeating: 1, count: 3 << 20)
        // Asked with 100-continue, as the client uploads: the refusal comes before the body, so no broken pipe
        // can hide it (without it, the answer races the server's close).
        let ask = ["Expect: 100-continue"]
        #expect(try f.call("PUT", "/v1/containers/\(cid)/blobs/\(sha256Hex(big))", headers: ask, body: big).status == 413)
        #expect(try f.call("PUT", "/v1/containers/\(cid)/blobs/\(sha256Hex(big))", token: .some(nil), headers: ask,
                           body: big).status == 401)
        #expect(try f.putBlob([UInt8](repeating: 2, count: 1 << 20)).status == 201)
        #expect(try FileManager.default.contentsOfDirectory(atPath: f.dir + "/tmp").isEmpty)
        #expect(try f.call("GET", "/v1/health").status == 200)
    }

    @Test func largeBlobsStreamWithBoundedMemory() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        // 160 MiB of varied bytes, uploaded and downloaded by curl straight from and to files.
        let src = f.dir + "/big.src", dst = f.dir + "/big.dst"
        let fd = try FileDescriptor.open(src, O_WRONLY | O_CREAT | O_TRUNC)
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        for i in 0..<160 {
            for j in stride(from: 0, to: chunk.count, by: 4096) { chunk[j] = UInt8(truncatingIfNeeded: i &+ j) }
            try fd.writeAll(chunk)
        }
        fd.close()
        let (sha, size) = try sha256OfFile(src)
        let before = peakResidentKiB()
        func curl(_ args: [String]) throws -> String {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            p.arguments = ["-s", "-H", "Authorization: Bearer \(f.server.token!)", "-w", "%{http_code}"] + args
            let out = Pipe(); p.standardOutput = out
            try p.run(); p.waitUntilExit()
            return String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }
        let url = "\(f.base)/v1/containers/\(cid)/blobs/\(sha)"
        #expect(try curl(["-o", "/dev/null", "-X", "PUT", "-T", src, url]) == "201")
        #expect(try curl(["-o", dst, url]) == "200")
        let back = try sha256OfFile(dst)
        #expect(back.sha256 == sha && back.size == size)
        let grown = peakResidentKiB() - before
        #expect(grown < 64 * 1024, "peak RSS grew by \(grown) KiB")
    }

    @Test func concurrentDownloadsAreCountedOnePerRequest() throws {
        let f = try Fixture()
        let item = try f.server.seed(container: cid, path: "Documents/shared.bin",
                                     contents: .bytes([UInt8](repeating: 3, count: 300_000)), device: "d", mtime: nil)
        let group = DispatchGroup()
        let ok = LockedCounter()
        for _ in 0..<4 {
            group.enter()
            Thread {
                if let a = try? f.call("GET", "/v1/containers/\(cid)/blobs/\(item.sha256)"), a.body.count == 300_000 { ok.add() }
                group.leave()
            }.start()
        }
        group.wait()
        #expect(ok.value == 4)
        #expect(try f.stats().blobGetsBySha[item.sha256] == 4)
    }

    @Test func stopEndsWaitingLongPolls() throws {
        let f = try Fixture()
        let c = try f.openContainer()
        let done = DispatchSemaphore(value: 0)
        Thread {
            _ = try? f.call("GET", "/v1/containers/\(cid)/changes?since=\(c.token)&wait=60")
            done.signal()
        }.start()
        Thread.sleep(forTimeInterval: 0.5)
        let t0 = Date()
        f.server.stop()
        #expect(Date().timeIntervalSince(t0) < 5)
        #expect(done.wait(timeout: .now() + 10) == .success)
    }
}

final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add() { lock.withLock { n += 1 } }
    var value: Int { lock.withLock { n } }
}

/// The process's peak resident set (VmHWM) in KiB.
func peakResidentKiB() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
    }
    return 0
}

@Suite struct StubKeyValueTests {
    func put(_ f: Fixture, _ entry: WireKVEntry) throws -> Answer {
        try f.call("PUT", "/v1/containers/\(cid)/kv/\(entry.key)", json: entry)
    }

    @Test func lastWriterWinsOnTheServerAndTheFeedAnswersAfterItsWait() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let later = try put(f, WireKVEntry(key: "k", value: .integer(5), mtime: 20, device: "desktop"))
        #expect(later.status == 200)
        let older = try put(f, WireKVEntry(key: "k", value: .string("old"), mtime: 10, device: "laptop"))
        #expect(try older.decode(WireKVEntry.self).value == .integer(5)) // answered with the winner
        let feed = try f.call("GET", "/v1/containers/\(cid)/kv?since=0").decode(WireKVChanges.self)
        #expect(feed.entries.map(\.value) == [.integer(5)] && feed.seq == 1)
        let empty = try f.call("GET", "/v1/containers/\(cid)/kv?since=1&wait=1").decode(WireKVChanges.self)
        #expect(empty.entries.isEmpty && empty.seq == 1)
    }

    @Test func overQuotaAndLongKeysAreRefused() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        let big = try put(f, WireKVEntry(key: "big", value: .data(Array(repeating: 1, count: (1 << 20) + 1)), mtime: 1, device: "x"))
        #expect(big.status == 413 && big.text.contains("value too large"))
        for i in 0..<KVLimits.maxKeys {
            #expect(try put(f, WireKVEntry(key: "k\(i)", value: .boolean(true), mtime: 1, device: "x")).status == 200)
        }
        let more = try put(f, WireKVEntry(key: "more", value: .boolean(true), mtime: 1, device: "x"))
        #expect(more.status == 413 && more.text.contains("quota"))
        let long = String(repeating: "k", count: 65)
        #expect(try put(f, WireKVEntry(key: long, value: .boolean(true), mtime: 1, device: "x")).status == 400)
        let feed = try f.call("GET", "/v1/containers/\(cid)/kv?since=0").decode(WireKVChanges.self)
        #expect(feed.entries.count == KVLimits.maxKeys)
    }
}
