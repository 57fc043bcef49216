// Each user's limits (issue 52, point 3): the bytes their containers store, how many containers they have and
// how many live items those hold. iCloud's rule: one storage per user, shared by all their apps' containers.
//
// What is counted: the bytes of every blob (whole contents and chunks) stored for the user's containers, as the
// blob store lists them: live files, kept versions and Recently Deleted alike, and blobs not yet collected;
// manifests are not counted (a few hundred bytes per big file). Items: the live rows of the user's containers
// (folders too); tombstones are not counted, so deleting frees room.
//
// What must hold: a request is refused (507, "over quota") only before it stores anything, so nothing already
// stored is lost and a refused device keeps its changes queued. Only what adds is refused: a blob upload of new
// bytes, a batch entry that creates an item or brings new inline content, a new container. Deletes, renames,
// restores from Recently Deleted and rewinds always go through (a restore may take a user past the item limit:
// the limit stops new items, it never locks a user out of their own trash).
//
// The counts are kept per container in memory (`UsageMeter`): counted from the blob store and the metadata at
// first need, raised by what this process stores, and counted again once older than `UsageMeter.freshness`, which
// is also how deletes and collection lower them and how servers sharing one store see each other's uploads. So a
// user can pass a limit by what is stored between two counts, never by more than the uploads of that window.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the meter's tables are leaves; a count is
// taken outside them.
import Foundation
import UbiquityBase

/// What one user may store; `remote user set` changes it, `remote usage` shows it.
public struct UserLimits: Equatable, Sendable, Codable {
    /// Bytes of stored blobs, over every container of the user.
    public var storage: Int64
    public var containers: Int64
    /// Live items (files, folders, links) over every container of the user.
    public var items: Int64

    public init(storage: Int64, containers: Int64, items: Int64) {
        self.storage = storage; self.containers = containers; self.items = items
    }

    /// A user's limits where none was set: generous for one person, and a bound on what a stolen key can pile up.
    public static let standard = UserLimits(storage: 1 << 40, containers: 100, items: 1_000_000)
}

/// The limits set for a user, each nil where the standard one holds.
public struct LimitSettings: Equatable, Sendable {
    public var storage: Int64?
    public var containers: Int64?
    public var items: Int64?

    public init(storage: Int64? = nil, containers: Int64? = nil, items: Int64? = nil) {
        self.storage = storage; self.containers = containers; self.items = items
    }

    public var limits: UserLimits {
        let s = UserLimits.standard
        return UserLimits(storage: storage ?? s.storage, containers: containers ?? s.containers, items: items ?? s.items)
    }
}

/// What a user has now, against their limits (`remote usage`, and every check).
public struct UserUsage: Equatable, Sendable, Codable {
    public var user: String
    public var storage: Int64
    public var containers: Int64
    public var items: Int64
    public var limits: UserLimits
}

/// Per container: the bytes of its blobs and its live items, each as counted last plus what this process added since.
final class UsageMeter: Sendable {
    /// Nanoseconds a count is trusted before it is taken again.
    static let freshness: Int64 = 60_000_000_000

    private struct Count { var value: Int64; var at: Int64 }
    private let bytes = Locked<[String: Count]>([:])
    private let items = Locked<[String: Count]>([:])
    private let clock: @Sendable () -> Int64

    init(clock: @escaping @Sendable () -> Int64) { self.clock = clock }

    /// The container's stored bytes, counted with `count` when not known or too old.
    func bytes(_ cid: String, count: () throws(ServerFailure) -> Int64) throws(ServerFailure) -> Int64 { try value(bytes, cid, count) }
    /// The container's live items, counted with `count` when not known or too old.
    func items(_ cid: String, count: () throws(ServerFailure) -> Int64) throws(ServerFailure) -> Int64 { try value(items, cid, count) }

    func stored(_ cid: String, bytes added: Int64) { raise(bytes, cid, added) }
    func created(_ cid: String, items added: Int64) { raise(items, cid, added) }

    private func value(_ table: Locked<[String: Count]>, _ cid: String, _ count: () throws(ServerFailure) -> Int64) throws(ServerFailure) -> Int64 {
        let now = clock()
        if let known = table.withLock({ $0[cid] }), now - known.at < Self.freshness { return known.value }
        // Counted outside the lock (a listing can take a while); a raise meanwhile is lost until the next count.
        let counted = try count()
        table.withLock { $0[cid] = Count(value: counted, at: now) }
        return counted
    }

    private func raise(_ table: Locked<[String: Count]>, _ cid: String, _ added: Int64) {
        guard added > 0 else { return }
        table.withLock { t in t[cid]?.value += added }
    }
}

/// What a user may still add against their limits, taken piece by piece (a batch's entries one after the other):
/// a piece past a limit is refused and counts nothing; one within is counted, so the next is checked against it.
struct Allowance {
    private(set) var usage: UserUsage

    init(_ usage: UserUsage) { self.usage = usage }

    /// The refusal of adding `items` live items, `bytes` stored bytes and `containers` containers, with the name
    /// of the limit it hits; nil when they fit, and then they are counted.
    mutating func take(items: Int64 = 0, bytes: Int64 = 0, containers: Int64 = 0) -> (refusal: StubFailure, limit: String)? {
        if containers > 0 && usage.containers + containers > usage.limits.containers {
            return (QuotaRefusal.containers(usage), "container limit")
        }
        if items > 0 && usage.items + items > usage.limits.items { return (QuotaRefusal.items(usage), "item limit") }
        if bytes > 0 && usage.storage + bytes > usage.limits.storage {
            return (QuotaRefusal.storage(usage, adding: bytes), "storage quota")
        }
        usage.containers += containers
        usage.items += items
        usage.storage += bytes
        return nil
    }
}

/// The refusals, in the words the mount shows (`uploadingError`) and the command line prints.
enum QuotaRefusal {
    static let status = 507

    static func storage(_ u: UserUsage, adding: Int64) -> StubFailure {
        StubFailure(status, "over quota: user \(u.user) stores \(readableSize(u.storage)) of "
                    + "\(readableSize(u.limits.storage)) and this needs \(readableSize(adding)) more (Recently Deleted "
                    + "and kept versions count too: empty them, or ask for a larger quota)")
    }

    static func items(_ u: UserUsage) -> StubFailure {
        StubFailure(status, "over quota: user \(u.user) has \(u.items) items, at most \(u.limits.items)")
    }

    static func containers(_ u: UserUsage) -> StubFailure {
        StubFailure(status, "over quota: user \(u.user) has \(u.containers) containers, at most \(u.limits.containers)")
    }
}
