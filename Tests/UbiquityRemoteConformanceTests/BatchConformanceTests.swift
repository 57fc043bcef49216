// What every RemoteClient promises of a batch (docs/WIRE.md "Batches"), against each backend: entries applied
// in order, each on its own and answered as its single call would be, inline content stored before the item
// that names it, and the limits of one request.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore

/// The stored item of a result, or nil (recording the refusal).
private func stored(_ r: BatchResult) -> WireItem? {
    switch r {
    case .success(let item): return item
    case .failure(let error): Issue.record("entry refused: \(error)"); return nil
    }
}

@Suite(.serialized) struct BatchConformanceTests {
    @Test(arguments: Backend.all) func entriesGoInOrderAndALaterOneMayNeedAnEarlierOne(backend: Backend) throws {
        let s = try backend.make(nil)
        let before = try s.remote.changes(since: nil, waitSeconds: 0).token
        let a = Array("alpha".utf8), b = [UInt8](repeating: 7, count: WireBatchLimits.maxInlineBytes)
        let results = try s.remote.batch([
            .put(directory("f"), ifMatch: nil),
            .put(file("a", in: "f", bytes: a), ifMatch: nil, content: a),
            .put(file("b", in: "f", bytes: b), ifMatch: nil, content: b),
            .put(file("e", in: "f"), ifMatch: nil),
        ])
        let items = results.compactMap(stored)
        #expect(items.map(\.id) == ["f", "a", "b", "e"])
        #expect(items.map(\.version) == items.map(\.version).sorted() && Set(items.map(\.version)).count == 4)
        #expect(items[1].parent == "f" && items[1].size == 5 && items[1].sha256 == sha256Hex(a))
        #expect(try s.download(sha256Hex(a)) == a && s.download(sha256Hex(b)) == b, "inline content is a blob")
        #expect(try s.remote.hasBlob(sha256: sha256Hex(b)))
        let feed = try s.feed(since: before).pages.flatMap(\.items)
        #expect(feed.map(\.id) == ["f", "a", "b", "e"] && feed == items)
        // Updates, a move and deletes, the folder's after its children's.
        var moved = items[1]; moved.parent = WireRules.documentsID; moved.name = "a-moved"
        let second = try s.remote.batch([
            .put(moved, ifMatch: items[1].version),
            .delete("b", ifMatch: items[2].version),
            .delete("e", ifMatch: items[3].version),
            .delete("f", ifMatch: items[0].version),
        ]).compactMap(stored)
        #expect(second.count == 4 && second[0].name == "a-moved" && second[0].parent == WireRules.documentsID)
        #expect(second.dropFirst().allSatisfy { $0.deleted })
        #expect(try s.remote.item("f").deleted && !s.remote.item("a").deleted)
    }

    @Test(arguments: Backend.all)
    func aRefusedEntryChangesNothingAndIsAnsweredAsItsSingleCall(backend: Backend) throws {
        let s = try backend.make(nil)
        let taken = try s.remote.putItem(file("taken"), ifMatch: nil)
        let dir = try s.remote.putItem(directory("full"), ifMatch: nil)
        let child = try s.remote.putItem(file("child", in: "full"), ifMatch: nil)
        let good = Array("good".utf8)
        let results = try s.remote.batch([
            .put(file("clash", name: "taken"), ifMatch: nil),
            .put(file("ok", bytes: good), ifMatch: nil, content: good),
            .put(file("taken"), ifMatch: taken.version + 100),
            .put(file("taken"), ifMatch: nil),
            .delete("nobody", ifMatch: 1),
            .delete("full", ifMatch: dir.version),
            .put(file("lies", bytes: good), ifMatch: nil, content: Array("bad".utf8)),
            .put(file("orphan", in: "nowhere"), ifMatch: nil),
        ])
        #expect(results.count == 8)
        guard results.count == 8 else { return }
        if case .failure(.conflict(_, let holder)) = results[0] { #expect(holder == taken) } else {
            Issue.record("a name clash answers 409 with the holder: \(results[0])")
        }
        #expect(stored(results[1])?.sha256 == sha256Hex(good), "the entries after a refused one go on")
        for i in [2, 3] {
            if case .failure(.preconditionFailed(let current, _)) = results[i] { #expect(current == taken) } else {
                Issue.record("a lost condition answers 412 with the current item: \(results[i])")
            }
        }
        if case .failure(.notFound) = results[4] {} else { Issue.record("unknown item: 404, not \(results[4])") }
        if case .failure(.conflict(_, let inside)) = results[5] { #expect(inside == child) } else {
            Issue.record("a folder with children answers 409 with one: \(results[5])")
        }
        if case .failure(.rejected(400, _)) = results[6] {} else {
            Issue.record("inline content that does not match is refused with 400: \(results[6])")
        }
        if case .failure(.misplaced) = results[7] {} else { Issue.record("no parent: 422, not \(results[7])") }
        // Nothing of a refused entry was applied.
        #expect(failure({ try s.remote.item("clash") }) != nil)
        #expect(try s.remote.item("taken") == taken && s.remote.item("full") == dir)
        #expect(failure({ try s.remote.item("lies") }) != nil && failure({ try s.remote.item("orphan") }) != nil)
        #expect(try !s.remote.hasBlob(sha256: sha256Hex(Array("bad".utf8))))
    }

    /// A batch is one transaction (Part 18: one commit, not one per entry): a reader of the feed sees its
    /// entries all or none, never a part. (A batch that gives its turn to the reader's requests answers the
    /// rest 503, which go again as a batch of their own, as a client sends them: each request's part is whole.)
    @Test(arguments: Backend.all) func aReaderOfTheFeedSeesABatchWholeOrNotAtAll(backend: Backend) throws {
        let s = try backend.make(nil)
        let before = try s.remote.changes(since: nil, waitSeconds: 0).token
        let n = 400
        nonisolated(unsafe) let remote = s.remote
        let seen = Locked(Set<Int>()), writing = Locked(true)
        let reader = DispatchGroup()
        DispatchQueue.global().async(group: reader) {
            while writing.withLock({ $0 }) {
                var count = 0, token = before, more = true
                while more, let page = try? remote.changes(since: token, waitSeconds: 0) {
                    count += page.items.count
                    token = page.token
                    more = page.more
                }
                seen.withLock { _ = $0.insert(count) }
            }
        }
        var left = (0..<n).map { WireBatchEntry.put(file("w\($0)"), ifMatch: nil) }[...]
        var boundaries: Set<Int> = [0]
        while !left.isEmpty {
            let results = try s.remote.batch(Array(left))
            let applied = results.prefix { if case .failure(.server(503, _)) = $0 { false } else { true } }
            #expect(applied.compactMap(stored).count == applied.count)
            if applied.isEmpty { Issue.record("a batch applied nothing"); break }
            left = left.dropFirst(applied.count)
            boundaries.insert(n - left.count)
        }
        writing.withLock { $0 = false }
        reader.wait()
        #expect(seen.withLock { $0 }.isSubset(of: boundaries), "the feed showed part of a batch")
    }

    @Test(arguments: Backend.all) func aBatchOverTheLimitsIsRefusedWhole(backend: Backend) throws {
        let s = try backend.make(nil)
        let many = (0...WireBatchLimits.maxEntries).map { WireBatchEntry.put(file("n\($0)"), ifMatch: nil) }
        if case .rejected(413, _)? = failure({ try s.remote.batch(many) }) {} else {
            Issue.record("more than \(WireBatchLimits.maxEntries) entries: 413")
        }
        let big = [UInt8](repeating: 1, count: WireBatchLimits.maxInlineBytes + 1)
        let bigEntry = WireBatchEntry.put(file("big", bytes: big), ifMatch: nil, content: big)
        if case .rejected(413, _)? = failure({ try s.remote.batch([bigEntry]) }) {} else {
            Issue.record("inline content over the limit: 413")
        }
        #expect(failure({ try s.remote.item("n0") }) != nil && failure({ try s.remote.item("big") }) != nil)
        #expect(try s.remote.batch([]).isEmpty)
    }
}
