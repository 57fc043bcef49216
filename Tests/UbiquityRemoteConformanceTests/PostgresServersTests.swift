// Two stub servers on one PostgreSQL database: what only several servers can show. A long poll on one
// server ends with a change committed through the other; and a commit through one metadata store wakes the
// notifier of another (LISTEN/NOTIFY), which is what ends such a poll before its re-check timer would.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
import UbiquityHTTP
@testable import UbiquityStub

@Suite struct PostgresServersTests {
    /// Two started servers on a fresh database and one data directory, and a client on each.
    private func twoServers() throws -> (servers: [StubServer], clients: [HTTPRemoteClient], dir: String) {
        let url = try PostgresCluster.shared.newDatabase()
        let dir = NSTemporaryDirectory() + "ubq-pg-servers-\(randomHex(bytes: 6))"
        try makeDirectories(dir)
        var config = StubConfig(dataDir: dir)
        config.metadataURL = url
        config.metadataPassword = try PostgresCluster.shared.password()
        config.recheckSeconds = 3600
        let servers = try [StubServer(config: config), StubServer(config: config)]
        for s in servers { try s.start() }
        let clients = servers.map {
            HTTPRemoteClient(baseURL: "http://127.0.0.1:\($0.port)", token: $0.token!,
                             container: "iCloud.com.example.conformance", device: "tests", changeLimit: nil)
        }
        return (servers, clients, dir)
    }

    @Test(.enabled(if: PostgresCluster.available, "PostgreSQL binaries missing (scripts/setup installs postgresql-15)"))
    func longPollOnOneServerEndsWithACommitThroughTheOther() throws {
        let (servers, clients, dir) = try twoServers()
        defer {
            for s in servers { s.stop() }
            try? FileManager.default.removeItem(atPath: dir)
        }
        let now = try clients[1].openContainer().token
        let writer = clients[0]
        let made = Box<WireItem>()
        Thread {
            usleep(300_000) // most likely while the poll waits; if the write wins the race, the answer is the same
            made.set(Result { try writer.putItem(directory("elsewhere"), ifMatch: nil) })
        }.start()
        let changes = try clients[1].changes(since: now, waitSeconds: 20)
        #expect(changes.items == [try made.wait().get()], "the poll on server 2 ends with server 1's change")
    }

    @Test(.enabled(if: PostgresCluster.available, "PostgreSQL binaries missing (scripts/setup installs postgresql-15)"))
    func keyValueLongPollOnOneServerEndsWithAWriteThroughTheOther() throws {
        let (servers, clients, dir) = try twoServers()
        defer {
            for s in servers { s.stop() }
            try? FileManager.default.removeItem(atPath: dir)
        }
        _ = try clients[1].openContainer()
        let since = try clients[1].kvChanges(since: 0, waitSeconds: 0).seq
        let writer = clients[0]
        let made = Box<WireKVEntry>()
        Thread {
            usleep(300_000)
            made.set(Result { try writer.putKV(WireKVEntry(key: "k", value: .string("v"), mtime: 1, device: "a")) })
        }.start()
        let feed = try clients[1].kvChanges(since: since, waitSeconds: 20)
        #expect(feed.entries == [try made.wait().get()], "the poll on server 2 ends with server 1's write")
    }

    @Test(.enabled(if: PostgresCluster.available, "PostgreSQL binaries missing (scripts/setup installs postgresql-15)"),
          .timeLimit(.minutes(1)))
    func aCommitThroughOneServerWakesTheOthersNotifier() throws {
        let url = try PostgresCluster.shared.newDatabase()
        let here = try PostgresMetadata(url: url, password: PostgresCluster.shared.password()),
            there = try PostgresMetadata(url: url, password: PostgresCluster.shared.password())
        defer { here.close(); there.close() }
        let notifier = here.notifier
        notifier.wait(after: 0, until: Date(timeIntervalSinceNow: 30)) // listening (it counts its first LISTEN)
        let before = notifier.generation
        #expect(before > 0, "the listener connected")
        _ = try there.write { (tx) throws(ServerFailure) in
            _ = try tx.createContainer("iCloud.com.example.notify")
            return try tx.nextSeq("iCloud.com.example.notify")
        }
        notifier.wait(after: before, until: Date(timeIntervalSinceNow: 30))
        #expect(notifier.generation > before, "the other store's commit reached this one's notifier")
    }

    /// Part 21: the manifest lock is every server's. Before, it was each process's own: a collection pass on one
    /// server removed a chunk while another server held the lock to store a manifest naming it (checked, then
    /// stored without it).
    @Test(.enabled(if: PostgresCluster.available, "PostgreSQL binaries missing (scripts/setup installs postgresql-15)"),
          .timeLimit(.minutes(1)))
    func aCollectionPassOnOneServerWaitsForAManifestPutOnTheOther() throws {
        let (servers, clients, dir) = try twoServers()
        defer {
            for s in servers { s.stop() }
            try? FileManager.default.removeItem(atPath: dir)
        }
        let cid = "iCloud.com.example.conformance"
        _ = try clients[0].openContainer()
        let bytes = Array("a chunk no item names yet".utf8)
        let path = dir + "/chunk"
        FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let sha = sha256Hex(bytes)
        try clients[0].uploadChunk(sha256: sha, size: Int64(bytes.count), fromFile: path, at: 0, progress: nil)
        let passEnded = Box<[String]>()
        var endedWhileHeld = false
        try servers[0].store.withManifestLock(cid) {
            // As a manifest's put on server 1 holds it, between its check of the chunk and its store.
            Thread { passEnded.set(Result { try servers[1].collector.collect(now: Int64.max / 2) }) }.start()
            usleep(1_000_000)
            endedWhileHeld = passEnded.isSet
        }
        #expect(!endedWhileHeld, "server 2's pass waited for server 1's lock")
        #expect(try passEnded.wait().get().contains("\(cid)/\(sha)"), "and ran after it")
    }
}
