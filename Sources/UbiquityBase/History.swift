// The rules of the remote's history (docs/HISTORY.md) that the stub and the in-memory remote share: how long
// Recently Deleted and older versions are kept (`HistoryRetention`, `remote serve --keep-deleted DAYS
// --keep-versions POLICY`), the name an item restored into a taken place gets, and the window that tells what
// `rm -rf` removed with a folder.
//
// What must hold: `expired` decides from an item's rows and `now` alone, so every engine and every pass agree
// on what survives: the newest row of a live item never expires; the newest row of a deleted item (its delete,
// so the item is in Recently Deleted) takes every row of the item with it once it is `keepDeleted` old; an older
// row survives while it is younger than `versions.everyVersionFor`, or while it is younger than
// `versions.dailyFor` and the newest older row of its UTC day. This file is plain values: no I/O, no lock.
//
// A rewind (docs/HISTORY.md "Rewind") is planned here once for both remotes (`RewindPlanner`), over a
// `RewindSource` that reads one state of the container (the stub's transaction, the in-memory remote's lock), so
// the dry run and the real one answer the same changes. What must hold for a plan: it only reads the source and
// writes nothing; every write it lists is a whole new version of one item, in an order in which each leaves the
// tree whole (a live parent directory, no cycle, live names unique in a parent); the subtree of the folder ends
// as it was at `to` (each item's newest kept version at or before it), and what came in since leaves it.
import Foundation

/// How long older versions are kept: every one for `everyVersionFor`, then the newest of each UTC day until
/// `dailyFor` (nanoseconds). `24h,30d` by default; `0` keeps none.
public struct VersionPolicy: Equatable, Sendable, CustomStringConvertible {
    public var everyVersionFor: Int64
    public var dailyFor: Int64

    public init(everyVersionFor: Int64, dailyFor: Int64) {
        self.everyVersionFor = everyVersionFor
        self.dailyFor = max(dailyFor, everyVersionFor)
    }

    public static let standard = VersionPolicy(everyVersionFor: 24 * HistoryRules.hour, dailyFor: 30 * HistoryRules.day)
    public static let none = VersionPolicy(everyVersionFor: 0, dailyFor: 0)

    /// `ALL,DAILY` (`24h,30d`), one duration `ALL` (every version for ALL, nothing after), or `0`; units s, m,
    /// h, d. Nil for anything else, and for a DAILY shorter than ALL.
    public init?(parsing text: String) {
        if text == "0" { self = .none; return }
        let parts = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard (1...2).contains(parts.count), let all = HistoryRules.duration(parts[0]) else { return nil }
        let daily = parts.count == 2 ? HistoryRules.duration(parts[1]) : all
        guard let daily, daily >= all else { return nil }
        self.init(everyVersionFor: all, dailyFor: daily)
    }

    public var description: String {
        self == .none ? "0" : HistoryRules.text(everyVersionFor) + "," + HistoryRules.text(dailyFor)
    }
}

/// One history row as retention sees it.
public struct HistoryStamp: Equatable, Sendable {
    public var id: String
    public var version: Int64
    /// When the remote stored it, ns since the epoch.
    public var at: Int64
    public var deleted: Bool

    public init(id: String, version: Int64, at: Int64, deleted: Bool) {
        self.id = id; self.version = version; self.at = at; self.deleted = deleted
    }
}

/// What a retention pass keeps: older versions by `versions`, Recently Deleted for `keepDeleted` ns.
public struct HistoryRetention: Equatable, Sendable {
    public var versions: VersionPolicy
    public var keepDeleted: Int64

    public init(versions: VersionPolicy = .standard, keepDeleted: Int64 = 30 * HistoryRules.day) {
        self.versions = versions
        self.keepDeleted = keepDeleted
    }

    public static let standard = HistoryRetention()

    /// An older version (not its item's current one) can expire at `now` only when stored at or before this.
    public func versionHorizon(now: Int64) -> Int64 { now - versions.everyVersionFor }

    /// An item in Recently Deleted leaves it at `now` when deleted at or before this.
    public func deletedHorizon(now: Int64) -> Int64 { now - keepDeleted }

    /// The versions of one item's rows (all of them, in any order) that expire at `now`. An older version's
    /// age counts from when the next one replaced it (until then it was the item's state, however old it is):
    /// every one replaced within `everyVersionFor` stays, and within `dailyFor` the newest older version of
    /// each UTC day (older: the current one never counts, so garbage written over a file in the evening does
    /// not take the morning's good version with it).
    public func expired(_ rows: [HistoryStamp], now: Int64) -> [Int64] {
        let sorted = rows.sorted { $0.version > $1.version }
        guard let newest = sorted.first else { return [] }
        if newest.deleted && now - newest.at >= keepDeleted { return sorted.map(\.version) }
        var dayPicked = Set<Int64>()
        var gone: [Int64] = []
        for (row, next) in zip(sorted.dropFirst(), sorted) { // newest first: the first row met of a day is its newest
            let isDayNewest = dayPicked.insert(HistoryRules.utcDay(row.at)).inserted
            let replacedFor = now - next.at
            if replacedFor < versions.everyVersionFor { continue }
            if replacedFor < versions.dailyFor && isDayNewest { continue }
            gone.append(row.version)
        }
        return gone
    }
}

/// The small rules of history, restore and retention.
public enum HistoryRules {
    public static let second: Int64 = 1_000_000_000
    public static let hour: Int64 = 3600 * second
    public static let day: Int64 = 24 * hour
    /// What a folder's restore brings back with it: what was deleted in it at most this long before the folder.
    public static let folderWindow: Int64 = hour

    /// Whether `device` can name the device of a restore, a rewind or a deletion of an app's data: at most 255
    /// bytes, no NUL.
    public static func isValidDevice(_ device: String) -> Bool { device.utf8.count <= 255 && !device.utf8.contains(0) }
    /// Ids in one restore or empty request.
    public static let maxIDs = 1000
    /// The longest duration a policy or `--keep-deleted` takes (100 years), so no sum overflows.
    public static let maxDuration: Int64 = 36_500 * day

    /// The UTC day of a time (ns since the epoch), as days since the epoch.
    public static func utcDay(_ at: Int64) -> Int64 {
        at >= 0 ? at / day : (at - day + 1) / day
    }

    /// `N` followed by a unit, s, m, h or d (N a whole number), as nanoseconds; nil for anything else.
    public static func duration(_ text: String) -> Int64? {
        guard let unit = text.last, let n = Int64(text.dropLast()), n >= 0, text.first != "+" else { return nil }
        let scale: Int64
        switch unit {
        case "s": scale = second
        case "m": scale = 60 * second
        case "h": scale = hour
        case "d": scale = day
        default: return nil
        }
        guard n <= maxDuration / scale else { return nil }
        return n * scale
    }

    /// A duration in the largest unit that divides it.
    public static func text(_ ns: Int64) -> String {
        for (scale, unit) in [(day, "d"), (hour, "h"), (60 * second, "m")] where ns % scale == 0 && ns > 0 {
            return "\(ns / scale)\(unit)"
        }
        return "\(ns / second)s"
    }

    /// `name n.ext`: the `n`th name of an item restored where its name is taken, the number before the
    /// extension (none for a name whose only dot leads it); the stem is shortened so the name stays within
    /// `WireRules.maxNameBytes`.
    public static func numberedName(_ name: String, _ n: Int) -> String {
        var stem = Substring(name), ext = Substring("")
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            stem = name[..<dot]; ext = name[dot...]
        }
        let number = " \(n)"
        while stem.utf8.count + number.utf8.count + ext.utf8.count > WireRules.maxNameBytes {
            if stem.isEmpty { ext = ext.dropLast() } else { stem = stem.dropLast() }
        }
        return String(stem) + number + ext
    }
}

// MARK: - Rewind (docs/HISTORY.md "Rewind")

/// A rewind refused, with its status (400 bad input, 404 an unknown folder, 409 a state it cannot be brought
/// back from, 500 a tree the planner cannot order) and one plain line; nothing is written.
public struct RewindRefusal: Error, Equatable, CustomStringConvertible {
    public let status: Int
    public let message: String

    public init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { "\(status) \(message)" }
}

/// What a rewind reads: the container's items now and their kept history, all of one state.
public protocol RewindSource {
    /// The item now, a tombstone included; nil for one never stored.
    func item(_ id: String) throws -> WireItem?
    /// The live items in `parent` now.
    func liveChildren(_ parent: String) throws -> [WireItem]
    /// The live item named `name` (compared byte-wise) in `parent` now.
    func liveChild(_ parent: String, named name: String) throws -> WireItem?
    /// When the item's oldest kept version was stored; nil when none is kept.
    func oldestKept(_ id: String) throws -> Int64?
    /// The item's newest kept version stored at or before `at`.
    func version(_ id: String, atOrBefore at: Int64) throws -> WireVersion?
    /// Each item's newest kept version stored at or before `at`, of the items whose that version is in `parent`
    /// (deletes included).
    func versions(in parent: String, atOrBefore at: Int64) throws -> [WireVersion]
    /// Whether a blob, or a manifest, of this hash and size is stored.
    func holdsContent(sha256: String, size: Int64) throws -> Bool
}

/// A rewind's work: the new versions to store, in order (each a whole item, its version left for the store to
/// set), and the answer.
public struct RewindPlan: Equatable, Sendable {
    public var writes: [WireItem]
    public var changes: [WireRewindChange]
}

/// Plans a rewind: reads the subtree of the folder at `to` and now, and lists the versions that bring it back.
public struct RewindPlanner {
    /// Checks what a request holds without looking at the container: the folder's id and the device's name.
    public static func check(_ request: WireRewindRequest) throws(RewindRefusal) {
        guard WireRules.isValidID(request.folder) else {
            throw RewindRefusal(400, "bad folder id \(plain(String(request.folder.prefix(80))))")
        }
        guard HistoryRules.isValidDevice(request.device) else {
            throw RewindRefusal(400, "bad device name")
        }
    }

    /// The plan of `request` over `source` at `now` (the remote's clock); throws `RewindRefusal`.
    public static func plan(_ request: WireRewindRequest, now: Int64, source: any RewindSource) throws -> RewindPlan {
        try check(request)
        var planner = RewindPlanner(source: source, folder: request.folder, to: request.to, device: request.device)
        return try planner.run(now: now)
    }

    /// A live name: a parent and a name's bytes (names compare byte-wise on the remote).
    private struct Slot: Hashable {
        let parent: String
        let name: [UInt8]
        init(_ parent: String, _ name: String) { self.parent = parent; self.name = Array(name.utf8) }
    }

    private let source: any RewindSource
    private let folder: String
    private let to: Int64
    private let device: String
    /// The items written so far, as the plan leaves them.
    private var planned: [String: WireItem] = [:]
    /// The written items that hold a live name as the plan leaves them.
    private var holders: [Slot: String] = [:]
    private var writes: [WireItem] = []
    /// Each changed item once, in the answer's order; a delete's path is taken before the rewind.
    private var changes: [(id: String, what: WireRewindChange.What, pathBefore: String?)] = []

    private init(source: any RewindSource, folder: String, to: Int64, device: String) {
        self.source = source; self.folder = folder; self.to = to; self.device = device
    }

    private mutating func run(now: Int64) throws -> RewindPlan {
        try checkFolder(now: now)
        let then = try subtreeThen()
        let current = try subtreeNow()
        try checkNotAbove(then)
        let placements = try bringBack(then)
        let out = try sendOut(current, then: Set(then.map(\.id)))
        let children = Dictionary(grouping: current, by: { $0.parent ?? "" }).mapValues { $0.map(\.id) }
        try carryOut((placements + out.moves).map { .place($0) }
                     + out.deletes.reversed().map { .delete($0, children: children[$0.id] ?? []) }) // children first
        return RewindPlan(writes: writes, changes: try answer())
    }

    // MARK: The folder and its two subtrees

    /// The folder is a live directory, and `to` lies between its oldest kept version and now.
    private func checkFolder(now: Int64) throws {
        guard let item = try source.item(folder) else { throw RewindRefusal(404, "no such item \(folder)") }
        let path = Self.shown(try self.path(folder, planned: false))
        guard !item.deleted, item.kind == .dir else { throw RewindRefusal(400, "\(path) is not a live folder") }
        guard to <= now else { throw RewindRefusal(400, "the time \(to) is in the future") }
        guard let oldest = try source.oldestKept(folder), oldest <= to else {
            throw RewindRefusal(400, "the time \(to) is before the oldest kept version of \(path)")
        }
    }

    /// The subtree at `to`: the newest kept version then of each item whose parents then lead to the folder,
    /// parents before children.
    private func subtreeThen() throws -> [WireVersion] {
        var rows: [WireVersion] = []
        var seen: Set<String> = [folder]
        var queue = [folder], next = 0
        while next < queue.count {
            let parent = queue[next]
            next += 1
            let children = try source.versions(in: parent, atOrBefore: to).filter { !$0.deleted }
            for row in children.sorted(by: { Self.precedes($0.name, $0.id, $1.name, $1.id) })
            where seen.insert(row.id).inserted {
                rows.append(row)
                if row.kind == .dir { queue.append(row.id) }
            }
        }
        return rows
    }

    /// The live items below the folder now, parents before children.
    private func subtreeNow() throws -> [WireItem] {
        var items: [WireItem] = []
        var seen: Set<String> = [folder]
        var queue = [folder], next = 0
        while next < queue.count {
            let parent = queue[next]
            next += 1
            let children = try source.liveChildren(parent)
            for item in children.sorted(by: { Self.precedes($0.name, $0.id, $1.name, $1.id) })
            where seen.insert(item.id).inserted {
                items.append(item)
                if item.kind == .dir { queue.append(item.id) }
            }
        }
        return items
    }

    /// No item of the subtree at `to` holds the folder now: it could not go back into the folder.
    private func checkNotAbove(_ then: [WireVersion]) throws {
        let ids = Set(then.map(\.id))
        var cursor = try source.item(folder)?.parent
        var steps = 0
        while let id = cursor, steps < Self.maxDepth {
            if ids.contains(id) {
                throw RewindRefusal(409, "\(Self.shown(try path(folder, planned: false))) is now inside "
                                    + "\(Self.shown(try path(id, planned: false))), which was in it then")
            }
            cursor = try source.item(id)?.parent
            steps += 1
        }
    }

    // MARK: What was there then

    /// Brings each item of the subtree at `to` back to its version then. A change in place (content,
    /// metadata) is written at once; a restore or a move is answered, to be placed.
    private mutating func bringBack(_ then: [WireVersion]) throws -> [WireItem] {
        var placements: [WireItem] = []
        for row in then {
            guard let now = try source.item(row.id), now.kind == row.kind else { continue } // (kinds never change)
            let want = wanted(now, as: row)
            guard let what = Self.change(from: now, to: want) else { continue }
            if what == .restore || what == .content { try checkContent(want, path: row.path) }
            changes.append((row.id, what, nil))
            if now.deleted || Self.slot(of: now) != Self.slot(of: want) {
                placements.append(want)
            } else {
                try write(want)
            }
        }
        return placements
    }

    /// The item as its version `row` was, live, made by this rewind's device. Xattrs the row did not keep stay
    /// as they are; a deleted item comes back without conflict versions (as a restore brings it back).
    private func wanted(_ now: WireItem, as row: WireVersion) -> WireItem {
        var item = now
        item.parent = row.parent
        item.name = row.name
        item.mode = row.mode
        item.mtime = row.mtime
        item.size = row.size
        item.sha256 = row.sha256
        item.target = row.target
        if let xattrs = row.xattrs { item.xattrs = xattrs }
        if now.deleted { item.conflicts = [] }
        item.deleted = false
        item.device = device
        return item
    }

    /// The one word for what changes, the first that applies; nil when nothing does.
    private static func change(from now: WireItem, to want: WireItem) -> WireRewindChange.What? {
        if now.deleted { return .restore }
        if now.sha256 != want.sha256 || now.size != want.size || now.target != want.target { return .content }
        if slot(of: now) != slot(of: want) { return .move }
        if now.mode != want.mode || now.mtime != want.mtime || now.xattrs != want.xattrs { return .metadata }
        return nil
    }

    /// A file's content must still be stored to come back (the empty one always is).
    private func checkContent(_ item: WireItem, path: String) throws {
        guard item.kind == .file else { return }
        let held = item.sha256 == emptySHA256 ? item.size == 0
            : try source.holdsContent(sha256: item.sha256, size: item.size)
        guard held else {
            throw RewindRefusal(409, "the content \(Self.plain(path)) had then is no longer kept: nothing was changed")
        }
    }

    // MARK: What came in since

    /// What came into the folder after `to` (live below it now, not in its subtree then), parents first: an
    /// item that was elsewhere then goes back there when that place stays live (with what is in it now), else
    /// it is answered to be deleted (to Recently Deleted), as is an item created after `to`.
    private mutating func sendOut(_ current: [WireItem], then: Set<String>) throws
        -> (moves: [WireItem], deletes: [WireItem]) {
        var arrivals = Arrivals(source: source, to: to, folder: folder,
                                current: Dictionary(current.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a }),
                                then: then)
        var leaving = Set<String>() // going back out, or along with one that goes
        var moves: [WireItem] = [], deletes: [WireItem] = []
        for item in current where !then.contains(item.id) {
            if let parent = item.parent, leaving.contains(parent) {
                leaving.insert(item.id)
                continue
            }
            switch try arrivals.fate(item.id) {
            case .back(let parent, let name):
                leaving.insert(item.id)
                var out = item
                out.parent = parent
                out.name = name
                out.device = device
                if Self.slot(of: out) == Self.slot(of: item) { continue }
                changes.append((item.id, .move, nil))
                moves.append(out)
            case .trash:
                deletes.append(item)
            }
        }
        return (moves, deletes)
    }

    // MARK: Carrying out restores, moves and deletes

    /// A write still to make.
    private enum Step {
        /// A restore or a move: the item as it is to end.
        case place(WireItem)
        /// A delete of an item live below the folder now, once none of its children (`children`, now) is left
        /// in it.
        case delete(WireItem, children: [String])

        var id: String {
            switch self {
            case .place(let item), .delete(let item, _): return item.id
            }
        }
    }

    /// Makes every step, each once it can go: a restore or a move once its parent is live and not inside it and
    /// its name is not held by an item still to move or delete (a name held by any other item gets a number,
    /// `HistoryRules.numberedName`), a delete once its children left. When none can go (a swap, a rotation, an
    /// item to go into one now inside it, a name held by a folder to delete that holds the item), one item still
    /// to move waits in the folder under a temporary name, each at most once.
    private mutating func carryOut(_ steps: [Step]) throws {
        var pending = steps
        var parked = Set<String>()
        while !pending.isEmpty {
            var moving = Set(pending.map(\.id))
            var waiting: [Step] = []
            for step in pending {
                if try made(step, moving: moving) { moving.remove(step.id) } else { waiting.append(step) }
            }
            if waiting.count == pending.count { try parkOne(of: waiting, besides: &parked) }
            pending = waiting
        }
    }

    private mutating func made(_ step: Step, moving: Set<String>) throws -> Bool {
        switch step {
        case .place(let item): return try placed(item, moving: moving)
        case .delete(let item, let children): return try deleted(item, children: children)
        }
    }

    /// Parks the first live item still to move that was not parked yet.
    private mutating func parkOne(of waiting: [Step], besides parked: inout Set<String>) throws {
        for case .place(let item) in waiting where !parked.contains(item.id) {
            guard try isLive(item.id) else { continue }
            parked.insert(item.id)
            return try park(item.id)
        }
        throw RewindRefusal(500, "the rewind cannot be ordered: nothing was changed")
    }

    /// Writes the delete once none of the item's children is left in it; its path is the one it has now.
    private mutating func deleted(_ item: WireItem, children: [String]) throws -> Bool {
        for child in children {
            if let planned = try plannedItem(child), !planned.deleted, planned.parent == item.id { return false }
        }
        let before = try path(item.id, planned: false)
        var tomb = try plannedItem(item.id) ?? item
        tomb.deleted = true
        tomb.device = device
        try write(tomb)
        changes.append((item.id, .delete, before))
        return true
    }

    /// Writes the item where it is to end, when it can go there now.
    private mutating func placed(_ wanted: WireItem, moving: Set<String>) throws -> Bool {
        var item = wanted
        guard let parent = item.parent, try isLiveFolder(parent), try !isWithin(parent, item.id) else { return false }
        if let holder = try holder(parent, item.name, except: item.id) {
            if moving.contains(holder) { return false }
            item.name = try freeName(item.name, in: parent, except: item.id, from: 2)
        }
        try write(item)
        return true
    }

    /// Moves the item into the folder under a temporary name, freeing its name and breaking any cycle (the
    /// folder's place never changes in a rewind, and the item is not above it).
    private mutating func park(_ id: String) throws {
        guard var item = try plannedItem(id) else { return }
        item.parent = folder
        item.name = try freeName(".rewind-" + id, in: folder, except: id, from: 1)
        item.device = device
        try write(item)
    }

    /// `name` (from 1) or `name 2`, `name 3`, ...: the first that no other item holds as planned.
    private func freeName(_ name: String, in parent: String, except id: String, from first: Int) throws -> String {
        for n in first...10_000 {
            let candidate = n == 1 ? name : HistoryRules.numberedName(name, n)
            if try holder(parent, candidate, except: id) == nil { return candidate }
        }
        throw RewindRefusal(409, "no free name for \(Self.plain(name))")
    }

    // MARK: The state as planned

    private mutating func write(_ item: WireItem) throws {
        if let before = try plannedItem(item.id), !before.deleted, let slot = Self.slot(of: before),
           holders[slot] == item.id {
            holders[slot] = nil
        }
        if !item.deleted, let slot = Self.slot(of: item) { holders[slot] = item.id }
        planned[item.id] = item
        writes.append(item)
    }

    private func plannedItem(_ id: String) throws -> WireItem? {
        if let item = planned[id] { return item }
        return try source.item(id)
    }

    private func isLive(_ id: String) throws -> Bool {
        try plannedItem(id).map { !$0.deleted } ?? false
    }

    private func isLiveFolder(_ id: String) throws -> Bool {
        try plannedItem(id).map { !$0.deleted && $0.kind == .dir } ?? false
    }

    /// Whether `id` is `inner` or holds it, as planned (too deep a tree counts as holding it).
    private func isWithin(_ inner: String, _ id: String) throws -> Bool {
        var cursor: String? = inner
        var steps = 0
        while let c = cursor {
            if c == id || steps >= Self.maxDepth { return true }
            cursor = try plannedItem(c)?.parent
            steps += 1
        }
        return false
    }

    /// The item holding the live name in `parent` as planned, other than `except`.
    private func holder(_ parent: String, _ name: String, except: String) throws -> String? {
        let slot = Slot(parent, name)
        if let id = holders[slot] { return id == except ? nil : id }
        guard let now = try source.liveChild(parent, named: name), now.id != except, planned[now.id] == nil else {
            return nil
        }
        return now.id
    }

    /// The item's names from the root joined by `/`, as planned or as it is now.
    private func path(_ id: String, planned: Bool) throws -> String {
        var names: [String] = []
        var cursor = planned ? try plannedItem(id) : try source.item(id)
        while let item = cursor, let parent = item.parent, names.count < Self.maxDepth {
            names.append(item.name)
            cursor = planned ? try plannedItem(parent) : try source.item(parent)
        }
        return names.reversed().joined(separator: "/")
    }

    private func answer() throws -> [WireRewindChange] {
        try changes.map { change in
            WireRewindChange(id: change.id, path: try change.pathBefore ?? path(change.id, planned: true), what: change.what)
        }
    }

    // MARK: Small rules

    private static let maxDepth = 100_000

    private static func slot(of item: WireItem) -> Slot? {
        item.parent.map { Slot($0, item.name) }
    }

    /// By name (byte-wise), then by id: the same order on every remote.
    private static func precedes(_ a: String, _ aID: String, _ b: String, _ bID: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        return x != y ? x.lexicographicallyPrecedes(y) : aID < bID
    }

    /// A path or name as one line of a message.
    private static func plain(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }

    /// A folder's path in a message: the root's is empty.
    private static func shown(_ path: String) -> String {
        path.isEmpty ? "the root" : plain(path)
    }
}

/// Where each item that came into the folder after `to` goes: back to where it was then when that place stays
/// live (an item outside the folder now, or one that came in and itself goes back out or along with one that
/// does); to Recently Deleted when it was created after `to`, was in Recently Deleted then, or its place is gone.
private struct Arrivals {
    enum Fate: Equatable {
        case back(parent: String, name: String)
        case trash
    }

    let source: any RewindSource
    let to: Int64
    let folder: String
    /// The live items below the folder now.
    let current: [String: WireItem]
    /// The ids of the subtree at `to`.
    let then: Set<String>
    private var fates: [String: Fate] = [:]
    private var deciding = Set<String>()

    init(source: any RewindSource, to: Int64, folder: String, current: [String: WireItem], then: Set<String>) {
        self.source = source; self.to = to; self.folder = folder; self.current = current; self.then = then
    }

    mutating func fate(_ id: String) throws -> Fate {
        if let known = fates[id] { return known }
        guard deciding.insert(id).inserted else { return .trash } // (a cycle in what was kept)
        let fate = try decide(id)
        fates[id] = fate
        return fate
    }

    private mutating func decide(_ id: String) throws -> Fate {
        guard let row = try source.version(id, atOrBefore: to), !row.deleted, let parent = row.parent else {
            return .trash
        }
        let back = Fate.back(parent: parent, name: row.name)
        guard current[parent] != nil else { // outside the folder now: the rewind leaves it as it is
            let live = try source.item(parent).map { !$0.deleted && $0.kind == .dir } ?? false
            return live ? back : .trash
        }
        guard !then.contains(parent), !isBelow(parent, id) else { return .trash }
        return try staysLive(parent) ? back : .trash
    }

    /// An item that came in stays live when it goes back out, or goes along with one that does.
    private mutating func staysLive(_ id: String) throws -> Bool {
        if case .back = try fate(id) { return true }
        guard let parent = current[id]?.parent, current[parent] != nil, !then.contains(parent) else { return false }
        return try staysLive(parent)
    }

    /// Whether `inner` is inside `id` now.
    private func isBelow(_ inner: String, _ id: String) -> Bool {
        var cursor: String? = inner
        while let c = cursor, let item = current[c] {
            if c == id { return true }
            cursor = item.parent
        }
        return false
    }
}
