// Collection of unreferenced blobs and manifests: one that no live item, no conflict version and no kept history
// row names is removed from the blob store, but only once it is old enough that no upload can still be on its way
// to naming it; a blob that is a chunk of a manifest still stored stays with it. Each pass over a container first
// runs the history's retention (docs/HISTORY.md "Retention"), so what it let expire is collected after the grace.
//
// What must hold (the rule): a blob or manifest is collected only when (1) it was stored at least `grace` ago, (2) it
// was last asked about (HEAD, GET, PUT of the same bytes, a missing-chunks request naming it, a manifest's PUT or GET)
// at least `grace` ago in this process, and (3) no live item, conflict version or kept history row names it, checked
// under the store's lock in the same step as the removal, so an item write either sees the blob or is refused for its
// absence, never names a removed blob. (1) and (2) cover a client that uploads (or finds) a blob and then writes the
// item that names it: it has `grace` to do so. Manifests go first, then the blobs that no manifest left names (4); a
// manifest that cannot be read keeps every blob of its container. The pass over a container holds its manifest lock
// (`StubStore.withManifestLock`), so a manifest's put either finds a chunk removed or is seen by (4).
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `used` and the loop's are leaves; a pass takes
// a container's manifest lock, then the store's locks.
import Foundation
import UbiquityBase

final class BlobCollector: Sendable {
    let store: StubStore
    /// Nanoseconds a blob is kept after it was stored or last used, referenced or not.
    let grace: Int64
    /// What the retention pass before each collection keeps of the history.
    let retention: HistoryRetention
    private let used = Locked<[String: Int64]>([:])
    private let loop = Loop(name: "blob-collector")
    private let log = Logger("stub")

    init(store: StubStore, graceSeconds: Int, retention: HistoryRetention = .standard) {
        self.store = store
        self.grace = Int64(graceSeconds) * 1_000_000_000
        self.retention = retention
    }

    /// Notes that a client asked about the blob now: it may be about to name it in an item.
    func touch(_ cid: String, _ sha256: String, now: Int64 = nowNanoseconds()) {
        used.withLock { $0[cid + "/" + sha256] = now }
    }

    /// One pass over every container at `now` (nil: the store's clock), retention first; answers what it
    /// removed, as CONTAINER/SHA256 for a blob and CONTAINER/SHA256.chunks for a manifest.
    @discardableResult
    func collect(now: Int64? = nil) throws(ServerFailure) -> [String] {
        let now = now ?? store.clock()
        let recent = used.withLock { u -> [String: Int64] in
            u = u.filter { now - $0.value < grace }
            return u
        }
        var removed: [String] = []
        var expired = 0
        for cid in try store.containerIDs() {
            expired += try store.retain(cid, retention, now: now)
            let unused = Unused(grace: grace, now: now, recent: recent, cid: cid)
            removed += try store.withManifestLock(cid) { () throws(ServerFailure) in try collectManifests(cid, unused) + collectBlobs(cid, unused) }
        }
        if expired > 0 { log.info("retention let \(expired) version(s) of the history go") }
        if !removed.isEmpty { log.info("collected \(removed.count) unreferenced blob(s) and manifest(s)") }
        return removed
    }

    /// The container's manifests that are unused and that nothing names.
    private func collectManifests(_ cid: String, _ unused: Unused) throws(ServerFailure) -> [String] {
        var removed: [String] = []
        for manifest in try store.blobs.listManifests(cid) where unused.holds(for: manifest) {
            let sha = manifest.sha256
            if try store.collectBlob(cid, sha, delete: { () throws(ServerFailure) in try store.blobs.deleteManifest(cid, sha) }) {
                removed.append(cid + "/" + sha + manifestSuffix)
            }
        }
        return removed
    }

    /// The container's blobs that are unused and that nothing names: no item, and no chunk list of a manifest.
    private func collectBlobs(_ cid: String, _ unused: Unused) throws(ServerFailure) -> [String] {
        let candidates = try store.blobs.list(cid).filter { $0.sha256 != emptySHA256 && unused.holds(for: $0) }
        guard !candidates.isEmpty, let chunks = try chunksOfManifests(cid) else { return [] }
        var removed: [String] = []
        for blob in candidates where !chunks.contains(blob.sha256) {
            if try store.collectBlob(cid, blob.sha256, delete: { () throws(ServerFailure) in try store.blobs.delete(cid, blob.sha256) }) {
                removed.append(cid + "/" + blob.sha256)
            }
        }
        return removed
    }

    /// Every chunk the container's manifests name; nil when one of them cannot be read (then every blob stays).
    private func chunksOfManifests(_ cid: String) throws(ServerFailure) -> Set<String>? {
        var chunks = Set<String>()
        for stored in try store.blobs.listManifests(cid) {
            do {
                chunks.formUnion(try store.manifest(cid, stored.sha256)?.chunkHashes ?? [])
            } catch {
                log.warning("manifest \(stored.sha256) of \(cid) cannot be read (\(error)): "
                            + "no blob of the container is collected")
                return nil
            }
        }
        return chunks
    }

    /// Rules (1) and (2) for one container's blobs and manifests.
    private struct Unused {
        let grace: Int64
        let now: Int64
        /// When each object asked about within the grace was last asked about, by CONTAINER/SHA256.
        let recent: [String: Int64]
        let cid: String

        func holds(for stored: StoredBlob) -> Bool {
            now - stored.stored >= grace && recent[cid + "/" + stored.sha256] == nil
        }
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
