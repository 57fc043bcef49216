// The local store limit: how many bytes the local copies of files take (`CacheAccount`), which file was used
// least recently, and the evictor that gives back the space of the oldest ones.
//
// What must hold:
// - `used` is the sum of the allocated size (st_blocks * 512) of the content files of items: measured by a scan
//   at start and re-measured under the container's lock (as part of CoreState) at every change of a content file (open that creates or
//   truncates, install, close and fsync of a written file, truncate, evict, delete). Conflict versions are not
//   counted. Bytes grow between a write and its close uncounted: a close re-measures.
// - The evictor only takes what `evictionRefusal` lets go (clean, uploaded, not pinned, not local-only), and
//   only a file not open at all (`handles[id] == nil`, readers too) and not just installed for an open that
//   has yet to count its handle (`awaitingOpen`). It evicts one file at a time under the lock, re-checking all
//   of that at that moment, through the same transition as a manual evict (`dropContent`).
// - It runs on its own thread, never on a file-system request: woken when usage passes the limit or free
//   space on the store's disk falls under the minimum (and every few seconds, for space others take), it
//   evicts down to the low-water mark (90% of the limit).
// - A download makes room for its bytes before it starts (on its own thread) and holds them as `reserved`
//   until it is installed, so concurrent downloads do not together pass the limit. It never evicts the file it
//   fetches, nor anything open.
// - The last use of a file is the time of its last open or close, kept in memory and saved in the store when it
//   moved by more than a minute, and at stop: the order survives a remount (to the minute after a crash).
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

/// A size as the options take it: bytes (with K, M, G or T, powers of 1024) or a percentage of a file system.
public enum SizeSpec: Equatable, Sendable {
    case bytes(Int64)
    case percent(Double)

    /// Parses "500K", "50M", "2G", "1T", "1048576" or "10%"; nil for anything else.
    public static func parse(_ text: String) -> SizeSpec? {
        if text.hasSuffix("%") {
            guard let p = Double(text.dropLast()), p > 0, p <= 100 else { return nil }
            return .percent(p)
        }
        let units: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
        var digits = Substring(text), unit: Int64 = 1
        if let last = text.last?.uppercased().first, let u = units[last] { digits = text.dropLast(); unit = u }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let n = Int64(digits), n >= 0 else { return nil }
        let (bytes, overflow) = n.multipliedReportingOverflow(by: unit)
        return overflow ? nil : .bytes(bytes)
    }

    /// The size in bytes, a percentage taken of `total`.
    public func bytes(of total: Int64) -> Int64 {
        switch self {
        case .bytes(let n): return n
        case .percent(let p): return Int64(Double(total) * p / 100)
        }
    }
}

/// One eviction, as the mount root's `recentlyEvicted` shows it.
public struct Eviction: Sendable, Equatable {
    public let time: Int64
    public let bytes: Int64
    public let path: String
}

/// Usage and limit, as the mount root's attributes show them.
struct CacheStatus: Sendable {
    let used: Int64
    /// nil: no limit.
    let limit: Int64?
    let evictedFiles: Int
    let evictedBytes: Int64
    /// The latest evictions, newest first.
    let recent: [Eviction]
}

/// The accounting of the local store (a part of CoreState).
struct CacheAccount {
    /// Allocated bytes of each item's content file (by item id; ".unlinked" copies by their file name).
    private(set) var sizes: [String: Int64] = [:]
    private(set) var used: Int64 = 0
    /// Bytes promised to downloads in flight (they land in staging, then move into content in one rename).
    var reserved: Int64 = 0
    /// Last open or close of each item (ns since the epoch), and what the store holds of it.
    var lastUsed: [String: Int64] = [:]
    var savedLastUsed: [String: Int64] = [:]
    /// Last uses due to be saved, waiting for an operation that writes anyway (`saveDueLastUses`).
    var dueLastUses: Set<String> = []
    /// Installed by a download and not opened since, with the time of the install.
    var awaitingOpen: [String: Int64] = [:]
    private(set) var recent: [Eviction] = []
    private(set) var evictedFiles = 0
    private(set) var evictedBytes: Int64 = 0

    static let recentKept = 10
    /// A last use saved in the store is rewritten once it is this much older than the one in memory.
    static let saveStep: Int64 = 60_000_000_000
    /// How long a file installed for an open is kept for that open.
    static let awaitingOpenGrace: Int64 = 30_000_000_000

    /// Records the allocated size of one content file (0: gone or empty).
    mutating func set(_ name: String, _ bytes: Int64) {
        used += bytes - (sizes[name] ?? 0)
        sizes[name] = bytes > 0 ? bytes : nil
    }

    func size(_ name: String) -> Int64 { sizes[name] ?? 0 }

    /// What the order of eviction is made from, taken under the lock and sorted outside it (both are copied
    /// on write: taking them costs nothing).
    var order: (sizes: [String: Int64], lastUsed: [String: Int64]) { (sizes, lastUsed) }

    /// Item ids with local bytes, least recently used first (never used: first, in id order).
    static func leastRecentlyUsed(_ order: (sizes: [String: Int64], lastUsed: [String: Int64])) -> [String] {
        order.sizes.keys.filter { !$0.contains(".") }
            .sorted { (order.lastUsed[$0] ?? 0, $0) < (order.lastUsed[$1] ?? 0, $1) }
    }

    mutating func recordEviction(_ e: Eviction) {
        evictedFiles += 1
        evictedBytes += e.bytes
        recent.append(e)
        if recent.count > CacheAccount.recentKept { recent.removeFirst() }
    }

    /// Last uses that moved on by more than `step` since they were saved.
    func unsavedLastUses(step: Int64) -> [String: Int64] {
        lastUsed.filter { id, t in savedLastUsed[id].map { t - $0 > step } ?? true }
    }
}

extension CoreState {
    /// Measures every content file of an item (at start, before any other thread).
    mutating func scanContent() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: paths.content)
        for name in names where !name.contains(".") { recount(name) }
        dropRecordsOfEvictedCopies(present: Set(names))
        do { cache.lastUsed = try store.lastUsedTimes().filter { items[$0.key] != nil } } catch {
            log.error("cannot read when local copies were last used (eviction takes them in no order): \(error)")
        }
        cache.savedLastUsed = cache.lastUsed
    }

    /// A copy evicted on a full disk is removed before its record is written (`evictOnFullDisk`): a stop in
    /// between leaves a clean, uploaded file that the store lists as local with no content file. It is not
    /// local: it is fetched again when opened (at start, before any other thread).
    private mutating func dropRecordsOfEvictedCopies(present: Set<String>) {
        let lost = items.values(with: .hasLocal).filter { item in
            guard item.kind == .file, item.hasLocal, !item.deleted, case .clean = item.localContent else { return false }
            return item.remoteVersion != 0 && !item.isLocalOnly && !present.contains(item.id)
        }
        for item in lost {
            var gone = item
            gone.hasLocal = false
            gone.localSHA = nil
            items[gone.id] = gone
            log.info("\(item.name) (\(item.id)) lost its local copy to a full disk; it is fetched again when opened")
            do { try store.save(gone) } catch {
                log.warning("cannot record that \(item.name) is not local (the next start tries again): \(error)")
            }
        }
    }

    /// Re-measures the content file of `name` (an item id, or an unlinked copy's file name) and wakes the
    /// evictor when usage passed the limit.
    mutating func recount(_ name: String) {
        var st = stat()
        let path = paths.content + "/" + name
        cache.set(name, stat(path, &st) == 0 ? Int64(st.st_blocks) * 512 : 0)
        if cache.used > config.cacheLimit { wakeEvictor() }
    }

    /// Whether the store's file system has room to spare beyond the minimum kept free (`ampleRoom`): what a
    /// delete frees may wait a second then (Store.keptBack).
    var hasAmpleRoom: Bool {
        (paths.freeBytes ?? 0) > max(config.minFreeBytes, 0) + CoreState.ampleRoom
    }
    static let ampleRoom: Int64 = 256 << 20

    /// Re-measures an item's content file and its unlinked copy.
    mutating func recountContent(_ id: String) {
        recount(id)
        if cache.size(id + ".unlinked") > 0 || unlinked[id] != nil { recount(id + ".unlinked") }
    }

    /// Records an open or a close of a file as its last use; saves it when it moved by more than a minute.
    mutating func touch(_ id: String) {
        guard items[id].map({ !$0.deleted }) ?? false else { return }
        let t = now()
        cache.lastUsed[id] = t
        if let saved = cache.savedLastUsed[id], t - saved <= CacheAccount.saveStep { return }
        // Saved by the next operation that writes the store anyway (an open or a close alone costs no
        // transaction), or at stop: only the order of eviction after a crash depends on it.
        cache.dueLastUses.insert(id)
    }

    /// Saves the last uses due (`touch`) in the open operation's transaction, when it writes anything: a
    /// failed save stays due (in memory the time is exact) and goes with a later one.
    mutating func saveDueLastUses() {
        guard store.hasBegun, !store.keepsRowsBack, !cache.dueLastUses.isEmpty else { return }
        var uses: [String: Int64] = [:]
        for id in cache.dueLastUses where items[id].map({ !$0.deleted }) ?? false && !store.isKeptBack(id) {
            if let t = cache.lastUsed[id] { uses[id] = t }
        }
        do {
            if !uses.isEmpty { try store.saveLastUsed(uses) }
            cache.savedLastUsed.merge(uses) { $1 }
            cache.dueLastUses = cache.dueLastUses.filter { store.isKeptBack($0) } // saved with their rows later
        } catch {
            log.warning("cannot save when \(uses.count) local copies were last used (eviction after a restart may take them early): \(error)")
        }
    }

    /// Why the evictor must leave a file's content, or nil: the refusal of any eviction, or it is open, or it
    /// was just installed for an open that has not counted its handle yet.
    mutating func autoEvictionRefusal(_ item: Item) -> String? {
        if let why = evictionRefusal(item) { return why }
        if handles[item.id] != nil { return "\(item.name) is open" }
        if let t = cache.awaitingOpen[item.id] {
            if now() - t < CacheAccount.awaitingOpenGrace { return "\(item.name) was just downloaded for an open" }
            cache.awaitingOpen[item.id] = nil
        }
        return nil
    }

    /// The item whose local copy the evictor may drop now, or nil.
    mutating func evictableCopy(_ id: String) -> Item? {
        guard let item = items[id], !item.deleted, item.hasLocal, autoEvictionRefusal(item) == nil else { return nil }
        return item
    }

    /// The bytes the evictor could give back now: every local copy that may go.
    mutating func evictableBytes() -> Int64 {
        var total: Int64 = 0
        for (id, bytes) in cache.order.sizes where !id.contains(".") && evictableCopy(id) != nil { total += bytes }
        return total
    }

    /// Evicts one file if it can go now; returns the bytes given back.
    mutating func autoEvict(_ id: String) throws(CoreError) -> Int64 {
        guard let item = evictableCopy(id) else { return 0 }
        let bytes = cache.size(id)
        try dropContent(item)
        let path = path(of: id)
        onCommit { s in s.cache.recordEviction(Eviction(time: s.now(), bytes: bytes, path: path)) }
        log.info("evicted \(path) (\(bytes) bytes) for the local store limit")
        return bytes
    }

    /// On a disk too full to record an operation even without the store's reserve: evicts the least recently
    /// used copy that may go, its file before its record, so that the operation can run again in the room it
    /// gave back. False when no copy may go. (Outside any transaction, after the operation's rollback.)
    mutating func evictCopyForRoom() -> Bool {
        for id in CacheAccount.leastRecentlyUsed(cache.order) {
            if evictOnFullDisk(id) > 0 { return true }
        }
        return false
    }

    /// Evicts one file with no room to record it: its copy (clean and on the remote) goes first; the item is
    /// not local in memory at once, and in the store once `recordEvictedCopies` (after the next commit), its
    /// next save or the next start (`dropRecordsOfEvictedCopies`) writes it. Returns the bytes given back, 0
    /// when the file cannot go now.
    private mutating func evictOnFullDisk(_ id: String) -> Int64 {
        guard let item = evictableCopy(id) else { return 0 }
        let bytes = cache.size(id)
        guard bytes > 0 else { return 0 }
        removeLeftover(paths.content(id))
        recountContent(id)
        var gone = item
        gone.hasLocal = false
        gone.localSHA = nil
        items[id] = gone
        notice(.changed(id, content: true))
        let path = path(of: id)
        cache.recordEviction(Eviction(time: now(), bytes: bytes, path: path))
        log.info("evicted \(path) (\(bytes) bytes) before its record, the store's disk being full")
        unrecordedEvictions.insert(id)
        return bytes
    }

    /// Writes the records of the copies evicted before them, in a transaction of their own; those that do not
    /// fit yet wait for the next commit.
    mutating func recordEvictedCopies() {
        do {
            store.begin()
            for id in unrecordedEvictions { if let item = items[id] { try store.save(item) } }
            try store.commit()
            unrecordedEvictions = []
        } catch {
            store.rollBack()
        }
    }
}

extension Container {
    /// Saves every last use not saved yet (at stop: the exact order survives a clean remount).
    func saveLastUses() {
        mutate { (s: inout CoreState) in
            let unsaved = s.cache.unsavedLastUses(step: 0)
            guard !unsaved.isEmpty else { return }
            do { try s.store.saveLastUsed(unsaved) } catch {
                // Only the order of eviction after the remount depends on it.
                return s.log.warning("cannot save when \(unsaved.count) local copies were last used: \(error)")
            }
            s.cache.savedLastUsed.merge(unsaved) { $1 }
            s.cache.dueLastUses = []
        }
    }

    /// Free bytes on the store's file system (for an unprivileged writer).
    func freeBytes() -> Int64 { paths.freeBytes ?? .max }

    /// The usage the evictor brings the store down to once it passed the limit.
    var lowWaterMark: Int64 { config.cacheLimit - config.cacheLimit / 10 }

    /// Usage, limit and what was evicted lately.
    func cacheStatus() -> CacheStatus {
        read { s in
            CacheStatus(used: s.cache.used, limit: config.cacheLimit == .max ? nil : config.cacheLimit,
                        evictedFiles: s.cache.evictedFiles, evictedBytes: s.cache.evictedBytes,
                        recent: s.cache.recent.reversed())
        }
    }

    /// Evicts least recently used files, one at a time under the lock, until `enough` (asked under the lock
    /// before each, with the bytes given back so far) holds or nothing more can go; then runs `then` under the
    /// same lock. `sparing`: a file never evicted (the one being downloaded).
    func evictLeastRecentlyUsed(sparing: String? = nil, until enough: (CoreState, Int64) -> Bool,
                                then: (inout CoreState) -> Void = { _ in }) {
        var freed: Int64 = 0
        let order = mutate { (s: inout CoreState) -> (sizes: [String: Int64], lastUsed: [String: Int64])? in
            if enough(s, 0) { then(&s); return nil }
            return s.cache.order
        }
        guard let order = order ?? nil else { return }
        var queue = CacheAccount.leastRecentlyUsed(order)[...]
        while true {
            let next = queue.popFirst()
            do {
                // One eviction, one operation: on a full disk it runs again on the store's reserve (its record
                // needs room in the database before its file goes).
                let (finished, bytes) = try mutateThrowing { s -> (Bool, Int64) in
                    if enough(s, freed) { then(&s); return (true, 0) }
                    guard let id = next else { then(&s); return (true, 0) }
                    return (false, id == sparing ? 0 : try s.autoEvict(id))
                }
                if finished { return }
                freed += bytes
            } catch {
                // This file is passed over (the next pass sees it again).
                log.error("cannot evict \(next ?? "?"): \(error)")
            }
        }
    }

    /// The evictor's pass: when usage passed the limit, evicts down to the low-water mark; when free space is
    /// under the minimum, evicts until a tenth more than the minimum is free.
    func evictIfNeeded() {
        let free = freeBytes()
        let minFree = config.minFreeBytes
        let belowMinimum = minFree > 0 && free < minFree ? minFree + minFree / 10 - free : 0
        // Reserved bytes are the downloads' own business (`makeRoom`): an install counts its file before it lets
        // go of its reservation, and the evictor must not see that file twice.
        let over = read { $0.cache.used > config.cacheLimit }
        // Without its reserve the store cannot record what frees room, nor take remote changes: make room for
        // the reserve and as much again, whatever the limits say.
        let roomless = read { !$0.store.hasRoom }
        let forReserve = roomless ? 2 * Store.reserveBytes - free : 0
        let short = max(belowMinimum, forReserve)
        guard over || short > 0 else { return }
        // For the reserve alone, evicting is in vain when all that may go cannot make it (a disk that another
        // program filled): the copies stay, readable, and the operations that need room wait for it.
        let evictable = mutate { (s: inout CoreState) -> Int64 in s.evictableBytes() } ?? .max
        if !over && belowMinimum == 0 && evictable < forReserve { return }
        let target = over ? lowWaterMark : config.cacheLimit
        evictLeastRecentlyUsed(until: { s, freed in s.cache.used <= target && freed >= short })
    }

    /// Makes room for a download of `bytes` (before it starts, on the download's thread): evicts until it fits
    /// under the limit and leaves the minimum free, never the file itself (`key`) nor anything open, then holds
    /// the bytes as reserved until `roomUsed`. A file larger than what can be freed still goes ahead.
    func makeRoom(for key: String, bytes: Int64) {
        let limit = config.cacheLimit
        let minFree = config.minFreeBytes
        let short = minFree > 0 ? max(0, minFree + bytes - freeBytes()) : 0
        evictLeastRecentlyUsed(sparing: key.split(separator: ".").first.map(String.init),
                               until: { s, freed in s.cache.used + s.cache.reserved <= limit - bytes && freed >= short },
                               then: { s in s.cache.reserved += bytes })
    }

    /// A download that made room for `bytes` is installed (or failed): the bytes are no longer held.
    func roomUsed(_ bytes: Int64) {
        mutate { (s: inout CoreState) in
            s.cache.reserved -= bytes
            if s.cache.used > config.cacheLimit { s.wakeEvictor() }
        }
    }

    /// After a download met a full disk: evicts what can go to leave `bytes` more than the minimum free.
    func makeRoomAfterNoSpace(for key: String, bytes: Int64) {
        let need = max(config.minFreeBytes, 0) + bytes - freeBytes()
        evictLeastRecentlyUsed(sparing: key.split(separator: ".").first.map(String.init),
                               until: { _, freed in freed >= need })
    }
}

/// The background loop that keeps the local store under its limit: it sleeps until woken (usage passed the
/// limit) or a few seconds passed (free space is checked then), and runs the container's `evictIfNeeded`.
final class Evictor: Sendable {
    private let loop = Loop(name: "evict", priority: .background)
    static let tickSeconds = 5.0

    /// Starts the loop; it holds the container only for a pass, and ends once the container is gone.
    func start(for container: Container) {
        loop.start { [loop, weak container] in
            while true {
                loop.pause(nanoseconds: Int64(Evictor.tickSeconds * 1e9))
                guard !loop.isStopping, let owner = container else { return }
                owner.evictIfNeeded()
            }
        }
    }

    /// Asks for a pass now. Safe under the container's lock (the loop's lock is a leaf).
    func wake() { loop.wake() }

    /// Stops the loop and waits a few seconds at most for a pass to end.
    func stop() { loop.stopAndJoin(timeout: 5) }
}
