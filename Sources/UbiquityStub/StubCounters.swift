// Counters for GET /v1/stats and the faults of POST /v1/faults, both for tests.
//
// What must hold: every counter and armed fault is read and changed under `lock`, a leaf (nothing is called
// while it is held); a fault is used up by the request that takes it, so an armed count strikes exactly that
// many requests. Bookkeeping routes (stats, faults) neither count nor take a fault. Faults are test-only and
// change no stored state: a failure answers before the request touches the store (but `loseAnswerNext`, which
// replaces the answer of a write already applied, the way a lost answer leaves it).
import Foundation

struct WireStats: Codable, Equatable, Sendable {
    var requests = 0
    var blobGets = 0
    var blobGetsBySha: [String: Int] = [:]
    var blobPuts = 0
    var itemPuts = 0
    var itemDeletes = 0
    var changesRequests = 0
    /// Batch requests answered (their entries count in `itemPuts`, `itemDeletes` and `blobPuts`).
    var batches = 0
    /// Item puts and deletes answered 208: retries of a change already applied.
    var appliedRetries = 0
}

/// Body of `POST /v1/faults`, and its answer (the faults now armed).
struct WireFaults: Codable, Equatable, Sendable {
    var failNext: Int?
    var status: Int?
    var dropAfterBytes: Int64?
    var count: Int?
    var corruptNext: Int?
    /// The next N item puts and deletes are applied, then answered 503 as if their answer were lost.
    var loseAnswerNext: Int?
}

final class StubCounters: @unchecked Sendable {
    private let lock = NSLock()
    private var stats = WireStats()
    private var failNext = 0
    private var failStatus = 503
    private var dropAfterBytes: Int64 = 0
    private var dropCount = 0
    private var corruptNext = 0
    private var loseAnswerNext = 0

    func update(_ body: (inout WireStats) -> Void) {
        lock.withLock { body(&stats) }
    }

    var snapshot: WireStats { lock.withLock { stats } }

    /// Applies a faults request: the fields given set their faults; an empty body clears them all.
    func arm(_ f: WireFaults) throws -> WireFaults {
        if let s = f.status, !(400...599).contains(s) { throw StubFailure(400, "fault status must be 400 to 599") }
        if (f.failNext ?? 0) < 0 || (f.count ?? 0) < 0 || (f.corruptNext ?? 0) < 0 || (f.dropAfterBytes ?? 0) < 0
            || (f.loseAnswerNext ?? 0) < 0 {
            throw StubFailure(400, "fault counts must not be negative")
        }
        return lock.withLock {
            if f == WireFaults() {
                failNext = 0; failStatus = 503; dropAfterBytes = 0; dropCount = 0; corruptNext = 0
                loseAnswerNext = 0
            }
            if let n = f.failNext { failNext = n; failStatus = f.status ?? 503 }
            if let b = f.dropAfterBytes { dropAfterBytes = b; dropCount = f.count ?? 1 }
            if let n = f.corruptNext { corruptNext = n }
            if let n = f.loseAnswerNext { loseAnswerNext = n }
            return WireFaults(failNext: failNext, status: failStatus, dropAfterBytes: dropAfterBytes, count: dropCount,
                              corruptNext: corruptNext, loseAnswerNext: loseAnswerNext)
        }
    }

    /// The status to fail this request with, if a failNext fault is armed (and uses it up).
    func takeFailure() -> Int? {
        lock.withLock {
            guard failNext > 0 else { return nil }
            failNext -= 1
            return failStatus
        }
    }

    /// True when the answer of this applied item write is to be lost (uses one loseAnswerNext fault up).
    func takeLostAnswer() -> Bool {
        lock.withLock {
            guard loseAnswerNext > 0 else { return false }
            loseAnswerNext -= 1
            return true
        }
    }

    /// The faults for one blob download of `length` bytes: where to cut it, and whether to flip a byte.
    func takeDownloadFaults(length: Int64) -> (dropAfter: Int64?, corrupt: Bool) {
        lock.withLock {
            var drop: Int64?
            if dropCount > 0 { dropCount -= 1; drop = dropAfterBytes }
            var corrupt = false
            if corruptNext > 0 && length > 0 { corruptNext -= 1; corrupt = true }
            return (drop, corrupt)
        }
    }
}
