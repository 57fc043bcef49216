// The rest of the RemoteClient promises (docs/WIRE.md), run against each backend of `Backend.all`: blobs by
// SHA-256 (upload checked against its hash, ranged download), the change feed (pages, tokens, tombstones,
// long polls that end on a change) and the key-value store (last writer wins, quota, feed).
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
#if canImport(Glibc)
import Glibc
#endif

@Suite(.serialized) struct FeedAndBlobConformanceTests {
    @Test(arguments: Backend.all) func blobsAreStoredByHashAndReadFromAnOffset(backend: Backend) throws {
        let s = try backend.make(nil)
        let bytes = Array("the quick brown fox jumps over the lazy dog".utf8)
        let sha = sha256Hex(bytes)
        #expect(try s.remote.hasBlob(sha256: sha) == false)
        try s.upload(bytes)
        #expect(try s.remote.hasBlob(sha256: sha))
        #expect(try s.download(sha) == bytes)
        #expect(try s.download(sha, from: 10, prefix: Array(bytes[0..<10])) == bytes, "appended from the offset")
        #expect(try s.remote.hasBlob(sha256: emptySHA256), "the empty blob is always there")
        #expect(try s.download(emptySHA256) == [])
    }

    @Test(arguments: Backend.all) func transfersReportTheirAbsoluteProgress(backend: Backend) throws {
        let s = try backend.make(nil)
        let bytes = [UInt8](repeating: 42, count: 5000)
        let path = s.dir + "/up"
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let sha = sha256Hex(bytes)
        let seen = Box<Int64>()
        try s.remote.uploadBlob(sha256: sha, size: 5000, fromFile: path) { seen.set(.success($0)); return true }
        #expect(try seen.wait().get() == 5000)
        let out = s.dir + "/down"
        _ = FileManager.default.createFile(atPath: out, contents: Data(bytes[0..<1000]))
        let fd = try FileDescriptor.open(out, O_WRONLY)
        defer { fd.close() }
        _ = lseek(fd.raw, 1000, SEEK_SET)
        let last = Box<Int64>()
        try s.remote.downloadBlob(sha256: sha, offset: 1000, to: fd) { last.set(.success($0)); return true }
        #expect(try last.wait().get() == 5000, "the count from the start of the blob, not of the range")
        #expect(FileManager.default.contents(atPath: out).map { [UInt8]($0) } == bytes)
    }

    @Test(arguments: Backend.all) func uploadThatDoesNotHashToItsNameIsRefused(backend: Backend) throws {
        let s = try backend.make(nil)
        let path = s.dir + "/liar"
        _ = FileManager.default.createFile(atPath: path, contents: Data("not what the name says".utf8))
        let claimed = sha256Hex(Array("something else entirely".utf8))
        let e = failure({ try s.remote.uploadBlob(sha256: claimed, size: 22, fromFile: path, progress: nil) })
        guard case .corrupt? = e else { Issue.record("expected corrupt, got \(String(describing: e))"); return }
        #expect(try s.remote.hasBlob(sha256: claimed) == false, "nothing is kept")
    }

    @Test(arguments: Backend.all) func fileItemsNeedTheirBlobOfTheirSize(backend: Backend) throws {
        let s = try backend.make(nil)
        let bytes = Array("twelve bytes".utf8)
        #expect(status(failure({ try s.remote.putItem(file("f1", bytes: bytes), ifMatch: nil) })) == 400, "no blob")
        try s.upload(bytes)
        var wrongSize = file("f1", bytes: bytes)
        wrongSize.size = 5
        #expect(status(failure({ try s.remote.putItem(wrongSize, ifMatch: nil) })) == 400)
        let made = try s.remote.putItem(file("f1", bytes: bytes), ifMatch: nil)
        #expect(made.size == 12 && made.sha256 == sha256Hex(bytes))
        #expect(try s.remote.putItem(file("f2"), ifMatch: nil).size == 0, "the empty file needs no upload")
    }

    @Test(arguments: Backend.all) func feedListsEachItemsNewestStateOnceInVersionOrder(backend: Backend) throws {
        let s = try backend.make(nil)
        let start = try s.remote.openContainer().token
        let a = try s.remote.putItem(directory("a1"), ifMatch: nil)
        let b = try s.remote.putItem(directory("b1"), ifMatch: nil)
        let a2 = try s.remote.putItem(directory("a1", name: "a2"), ifMatch: a.version)
        let bGone = try s.remote.deleteItem("b1", ifMatch: b.version)
        let (pages, end) = try s.feed(since: start)
        let items = pages.flatMap(\.items)
        #expect(items == [a2, bGone], "newest states only, tombstones included, ascending versions")
        #expect(try s.remote.changes(since: end, waitSeconds: 0).items == [], "nothing after the last token")
        #expect(try s.remote.changes(since: end, waitSeconds: 0).token == end, "an empty answer gives the position now")
        let all = try s.feed(since: nil).pages.flatMap(\.items).map(\.id)
        #expect(all.contains(WireRules.documentsID) && all.contains("a1") && all.contains("b1"), "nil: from the start")
        #expect(all.first == WireRules.rootID, "the root first")
    }

    @Test(arguments: Backend.all) func feedPagesFollowTheirTokens(backend: Backend) throws {
        let s = try backend.make(2)
        let start = try s.remote.openContainer().token
        var made: [WireItem] = []
        for i in 0..<5 { made.append(try s.remote.putItem(directory("p\(i)"), ifMatch: nil)) }
        let (pages, end) = try s.feed(since: start)
        #expect(pages.map(\.items.count) == [2, 2, 1])
        #expect(pages.map(\.more) == [true, true, false])
        #expect(pages.flatMap(\.items) == made)
        // A token of a middle page goes on after that page's last item.
        #expect(try s.remote.changes(since: pages[0].token, waitSeconds: 0).items == Array(made[2..<4]))
        #expect(try s.remote.changes(since: end, waitSeconds: 0).items == [])
        #expect(status(failure({ try s.remote.changes(since: "not a token", waitSeconds: 0) })) == 400)
    }

    @Test(arguments: Backend.all) func longPollEndsWithTheChange(backend: Backend) throws {
        let s = try backend.make(nil)
        let now = try s.remote.openContainer().token
        // The test polls; another thread writes once it runs (most likely while the poll waits; if it wins the
        // race, the answer is the same).
        let remote = s.remote
        let made = Box<WireItem>()
        Thread { made.set(Result { try remote.putItem(directory("late"), ifMatch: nil) }) }.start()
        let changes = try s.remote.changes(since: now, waitSeconds: 30)
        #expect(changes.items == [try made.wait().get()], "the poll ends with the change, not empty at its deadline")
    }

    @Test(arguments: Backend.all) func keyValueWritesAreLastWriterWins(backend: Backend) throws {
        let s = try backend.make(nil)
        let first = try s.kv.putKV(WireKVEntry(key: "color", value: .string("red"), mtime: 100, device: "a"))
        #expect(first.seq > 0 && first.value == .string("red"))
        let later = try s.kv.putKV(WireKVEntry(key: "color", value: .string("blue"), mtime: 200, device: "a"))
        #expect(later.seq > first.seq && later.value == .string("blue"))
        let loser = try s.kv.putKV(WireKVEntry(key: "color", value: .string("green"), mtime: 150, device: "z"))
        #expect(loser == later, "a write that loses is answered with the winner")
        let tie = try s.kv.putKV(WireKVEntry(key: "color", value: .string("teal"), mtime: 200, device: "b"))
        #expect(tie.value == .string("teal"), "equal times go to the greater device")
        let gone = try s.kv.putKV(WireKVEntry(key: "color", value: nil, mtime: 300, device: "a", deleted: true))
        #expect(gone.deleted && gone.value == nil)
        let feed = try s.kv.kvChanges(since: 0, waitSeconds: 0)
        #expect(feed.entries == [gone] && feed.seq == gone.seq, "the feed holds each key's winner, tombstones too")
        #expect(try s.kv.kvChanges(since: feed.seq, waitSeconds: 0).entries == [])
    }

    @Test(arguments: Backend.all) func keyValueQuotaAndLongPoll(backend: Backend) throws {
        let s = try backend.make(nil)
        let big = WireKVEntry(key: "big", value: .data([UInt8](repeating: 7, count: (1 << 20) + 1)), mtime: 1,
                              device: "a")
        #expect(status(failure({ try s.kv.putKV(big) })) == 413)
        #expect(try s.kv.kvChanges(since: 0, waitSeconds: 0).entries == [], "a refused write stores nothing")
        let kv = s.kv
        let stored = Box<WireKVEntry>()
        Thread { stored.set(Result { try kv.putKV(WireKVEntry(key: "k", value: .integer(5), mtime: 1, device: "a")) }) }
            .start()
        let changes = try s.kv.kvChanges(since: 0, waitSeconds: 30)
        #expect(changes.entries == [try stored.wait().get()], "the poll ends with the write")
    }
}

/// One answer handed from a polling thread to the test.
final class Box<T>: @unchecked Sendable {
    private let cond = NSCondition()
    private var value: Result<T, any Error>?
    func set(_ v: Result<T, any Error>) { cond.lock(); value = v; cond.broadcast(); cond.unlock() }
    func wait() -> Result<T, any Error> {
        cond.lock(); defer { cond.unlock() }
        while value == nil { cond.wait() }
        return value!
    }
    /// Whether the answer came already.
    var isSet: Bool { cond.lock(); defer { cond.unlock() }; return value != nil }
}
