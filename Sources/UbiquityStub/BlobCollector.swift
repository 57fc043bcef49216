// Collection of unreferenced blobs: a blob that no live item and no conflict version names is removed from the
// blob store, but only once it is old enough that no upload can still be on its way to naming it.
//
// What must hold (the rule): a blob is collected only when (1) it was stored at least `grace` ago, (2) it was
// last asked about (HEAD, GET, PUT of the same bytes) at least `grace` ago in this process, and (3) no live item
// or conflict version names it, checked under the store's lock in the same step as the removal, so an item
// write either sees the blob or is refused for its absence, never names a removed blob. (1) and (2) cover a
// client that uploads (or finds) a blob and then writes the item that names it: it has `grace` to do so.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `used` and the loop's are leaves; a pass takes
// the store's locks.
import Foundation
import UbiquityBase

final class BlobCollector: Sendable {
    let store: StubStore
    /// Nanoseconds a blob is kept after it was stored or last used, referenced or not.
    let grace: Int64
    private let used = Locked<[String: Int64]>([:])
    private let loop = Loop(name: "blob-collector")
    private let log = Logger("stub")

    init(store: StubStore, graceSeconds: Int) {
        self.store = store
        self.grace = Int64(graceSeconds) * 1_000_000_000
    }

    /// Notes that a client asked about the blob now: it may be about to name it in an item.
    func touch(_ cid: String, _ sha256: String, now: Int64 = nowNanoseconds()) {
        used.withLock { $0[cid + "/" + sha256] = now }
    }

    /// One pass over every container; answers the blobs removed, as CONTAINER/SHA256.
    @discardableResult
    func collect(now: Int64 = nowNanoseconds()) throws -> [String] {
        let recent = used.withLock { u -> [String: Int64] in
            u = u.filter { now - $0.value < grace }
            return u
        }
        var removed: [String] = []
        for cid in try store.containerIDs() {
            for blob in try store.blobs.list(cid) where blob.sha256 != emptySHA256 {
                let key = cid + "/" + blob.sha256
                guard now - blob.stored >= grace, recent[key] == nil else { continue }
                if try store.collectBlob(cid, blob.sha256, delete: { try store.blobs.delete(cid, blob.sha256) }) {
                    removed.append(key)
                }
            }
        }
        if !removed.isEmpty { log.info("collected \(removed.count) unreferenced blob(s)") }
        return removed
    }

    /// Collects every `seconds` in a background loop until `stop` (once; no loop for 0).
    func start(every seconds: Int) {
        guard seconds > 0 else { return }
        loop.start { [self] in
            while true {
                loop.pause(nanoseconds: Int64(seconds) * 1_000_000_000)
                if loop.isStopping { return }
                do { try collect() } catch { log.warning("blob collection: \(error)") }
            }
        }
    }

    /// Stops the loop, waiting a few seconds at most for a pass to end.
    func stop() { loop.stopAndJoin(timeout: 5) }
}
