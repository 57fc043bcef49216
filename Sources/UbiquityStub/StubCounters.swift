// Counters for GET /v1/stats and the faults of POST /v1/faults, both for tests.
//
// What must hold: every counter and armed fault is read and changed under `lock`, a leaf (nothing is called
// while it is held); a fault is used up by the request that takes it, so an armed count strikes exactly that
// many requests. Bookkeeping routes (stats, faults) neither count nor take a fault. Faults are test-only and
// change no stored state: a failure answers before the request touches the store (but `loseAnswerNext`, which
// replaces the answer of a write already applied, the way a lost answer leaves it).
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): a leaf.
import Foundation
import UbiquityBase

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
    /// Bytes of the blob uploads (and inline batch contents) that stored a new blob.
    var blobBytesIn: Int64 = 0
    /// Bytes of the bodies that blob GETs answered with (the lengths answered, cut or not).
    var blobBytesOut: Int64 = 0
    /// Manifests stored (`PUT .../manifests/{sha}` answered 200 or 201).
    var manifestPuts = 0
    /// Missing-chunk requests answered.
    var chunkAsks = 0
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

final class StubCounters: Sendable {
    private struct Armed {
        var stats = WireStats()
        var failNext = 0
        var failStatus = 503
        var dropAfterBytes: Int64 = 0
        var dropCount = 0
        var corruptNext = 0
        var loseAnswerNext = 0
    }
    private let armed = Locked(Armed())

    func update(_ body: (inout WireStats) -> Void) {
        armed.withLock { body(&$0.stats) }
    }

    var snapshot: WireStats { armed.withLock { $0.stats } }

    /// Applies a faults request: the fields given set their faults; an empty body clears them all.
    func arm(_ f: WireFaults) throws(ServerFailure) -> WireFaults {
        if let s = f.status, !(400...599).contains(s) { throw .refused(400, "fault status must be 400 to 599") }
        if (f.failNext ?? 0) < 0 || (f.count ?? 0) < 0 || (f.corruptNext ?? 0) < 0 || (f.dropAfterBytes ?? 0) < 0
            || (f.loseAnswerNext ?? 0) < 0 {
            throw .refused(400, "fault counts must not be negative")
        }
        return armed.withLock { a in
            if f == WireFaults() { a = Armed(stats: a.stats) }
            if let n = f.failNext { a.failNext = n; a.failStatus = f.status ?? 503 }
            if let b = f.dropAfterBytes { a.dropAfterBytes = b; a.dropCount = f.count ?? 1 }
            if let n = f.corruptNext { a.corruptNext = n }
            if let n = f.loseAnswerNext { a.loseAnswerNext = n }
            return WireFaults(failNext: a.failNext, status: a.failStatus, dropAfterBytes: a.dropAfterBytes,
                              count: a.dropCount, corruptNext: a.corruptNext, loseAnswerNext: a.loseAnswerNext)
        }
    }

    /// The status to fail this request with, if a failNext fault is armed (and uses it up).
    func takeFailure() -> Int? {
        armed.withLock { a in
            guard a.failNext > 0 else { return nil }
            a.failNext -= 1
            return a.failStatus
        }
    }

    /// True when the answer of this applied item write is to be lost (uses one loseAnswerNext fault up).
    func takeLostAnswer() -> Bool {
        armed.withLock { a in
            guard a.loseAnswerNext > 0 else { return false }
            a.loseAnswerNext -= 1
            return true
        }
    }

    /// The faults for one blob download of `length` bytes: where to cut it, and whether to flip a byte.
    func takeDownloadFaults(length: Int64) -> (dropAfter: Int64?, corrupt: Bool) {
        armed.withLock { a in
            var drop: Int64?
            if a.dropCount > 0 { a.dropCount -= 1; drop = a.dropAfterBytes }
            var corrupt = false
            if a.corruptNext > 0 && length > 0 { a.corruptNext -= 1; corrupt = true }
            return (drop, corrupt)
        }
    }
}
