// Part 21, point 2: one client's load does not stall another's. On the embedded store every request takes turns
// on the one database connection, first come first served, and a batch gives its turn up (answering the rest
// 503, sent again by the client) once it has held it a moment while others wait.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityStub

@Suite struct FairnessTests {
    /// `count` folders, each in the one before, below `top` (in Documents).
    private func nested(_ top: String, _ count: Int) -> [StubBatchEntry] {
        (0..<count).map { i in
            let parent = i == 0 ? WireRules.documentsID : "\(top)-\(i - 1)"
            let item = WireItem(id: "\(top)-\(i)", parent: parent, name: "\(top)-\(i)", kind: .dir, mode: 0o755, mtime: 1,
                                size: 0, sha256: "")
            return StubBatchEntry(entry: .put(item, ifMatch: nil))
        }
    }

    /// Sends `entries` as a client does: what a batch answers 503 goes again, until all are applied. Answers
    /// how many requests that took.
    @discardableResult
    private func sendAll(_ store: StubStore, _ cid: String, _ entries: [StubBatchEntry]) throws -> Int {
        var left = entries[...], requests = 0
        while !left.isEmpty {
            requests += 1
            let results = try store.batch(cid, Array(left), deadline: Date(timeIntervalSinceNow: 10))
            let applied = results.prefix { $0.status != 503 }.count
            #expect(results[..<applied].allSatisfy { $0.status == 200 }, "\(results.first { $0.status != 200 }.map { "\($0.status) \($0.error ?? "")" } ?? "")")
            left = left.dropFirst(applied)
        }
        return requests
    }

    /// Turns: one holder at a time, whoever asks; a holder alone sees nobody waiting.
    @Test func turnsAreTakenOneAtATime() {
        final class Counter: @unchecked Sendable { var value = 0; var inside = 0; var overlapped = false }
        let turns = Turns(Counter())
        #expect(turns.withTurn { _ in turns.othersWaiting } == false)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<2000 {
                turns.withTurn { c in
                    c.inside += 1
                    if c.inside > 1 { c.overlapped = true }
                    c.value += 1
                    c.inside -= 1
                }
            }
        }
        turns.withTurn { c in
            #expect(c.value == 16_000 && !c.overlapped)
        }
    }

    @Test func anotherContainersWriteGoesBetweenTheTurnsOfALongBatch() throws {
        let f = try Fixture()
        let store = f.server.store
        _ = try store.ensureContainer("iCloud.com.example.busy")
        _ = try store.ensureContainer("iCloud.com.example.quiet")
        let busyDone = Locked(false), busyRequests = Locked(0)
        let busy = DispatchGroup()
        // The test holds the store until the busy batch waits for it, so that the batch has its turn first
        // and the quiet writes below ask while it runs, however slowly the threads start.
        try store.meta.read { _ in
            DispatchQueue.global().async(group: busy) {
                // A batch of 1,000 nested folders (seconds of work: before, it held the store all that time).
                let requests = (try? self.sendAll(store, "iCloud.com.example.busy", self.nested("b", 1000))) ?? 0
                busyRequests.withLock { $0 = requests }
                busyDone.withLock { $0 = true }
            }
            while !store.meta.othersWaiting { Thread.sleep(forTimeInterval: 0.001) }
        }
        var quietBeforeBusy: [Bool] = []
        for k in 0..<3 {
            try sendAll(store, "iCloud.com.example.quiet", nested("q\(k)", 1))
            quietBeforeBusy.append(!busyDone.withLock { $0 })
        }
        busy.wait()
        #expect(quietBeforeBusy == [true, true, true], "the quiet container's writes waited for the busy one's")
        #expect(busyRequests.withLock { $0 } > 1, "the busy batch gave its turn up (it had begun before the quiet writes)")
        let seq = try store.reading("iCloud.com.example.busy") { (tx) throws(ServerFailure) in
            try tx.containerSeq("iCloud.com.example.busy")
        }
        #expect(seq ?? 0 >= 1000)
    }
}
