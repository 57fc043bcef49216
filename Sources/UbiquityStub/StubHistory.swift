// Recently Deleted and version history on the stub (docs/HISTORY.md): reading an item's kept versions and the
// trash, restoring items from it, emptying it, rewinding a folder, the retention pass and the usage figures,
// over the history rows that StubStore's `store` appends with every version.
//
// What must hold: each call is one metadata transaction of its container, so a restore or an empty sees and
// makes one whole state. A restore writes only through `store`, so every item it brings back is an ordinary new
// version (same id, live again) that reaches every device through the feed, with its own history row; it names
// the content its delete row names, which the blob collector has kept since (`namesBlob` counts history rows,
// and collection runs in a writing transaction of the container, as this does). An item is in Recently
// Deleted while its current version is a delete whose history row is kept (`MetadataTransaction.trash`); a
// retention pass removes only the rows `HistoryRetention.expired` names, inside the container's lock, so no row
// a concurrent write appends is judged on a stale view. A rewind is `RewindPlanner`'s plan over one transaction's
// state (`StubRewindSource`), written through `store` in that same transaction, or not at all: a plan refused
// (a content no longer kept) writes nothing, and a dry run only reads. The contents it names back are checked
// stored in the writing transaction, which a collection of the container waits for.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): only the metadata's transactions.
import Foundation
import UbiquityBase

extension StubStore {
    // MARK: Reading

    /// The item's kept versions, newest first; 404 for an item the container never had.
    func history(_ cid: String, _ id: String) throws(ServerFailure) -> [WireVersion] {
        try reading(cid) { (tx) throws(ServerFailure) in
            guard try tx.item(cid, id) != nil else { throw .refused(404, "no such item \(id)") }
            return try tx.history(cid, id)
        }
    }

    /// The delete of every item in Recently Deleted, newest first.
    func trash(_ cid: String) throws(ServerFailure) -> [WireVersion] {
        try reading(cid) { (tx) throws(ServerFailure) in try tx.trash(cid, parent: nil) }
    }

    // MARK: Restore

    /// Brings the items back (docs/HISTORY.md "Restore"): each where it was, under a free name, its deleted
    /// folders first, and a folder with what was deleted in it along with it. Answers every item made live, and
    /// those asked about that were live already (so a retry of a restore whose answer was lost changes nothing).
    /// 404 for an id the container never had or one no longer in Recently Deleted; nothing is restored then.
    func restore(_ cid: String, ids: [String], device: String) throws(ServerFailure) -> [WireItem] {
        try HistoryInput.checkIDs(ids)
        guard HistoryRules.isValidDevice(device) else { throw .refused(400, "bad device name") }
        return try writing(cid) { (tx) throws(ServerFailure) in
            let ids = try wholeBatches(tx, cid, HistoryInput.unique(ids))
            var restore = Restoration(store: self, tx: tx, cid: cid, device: device, asked: Set(ids))
            for id in ids { try restore.restoreAsked(id) }
            // The folders' newer versions reach every device by the feed, the restoring one too.
            try storeFoldersAgain(tx, cid, filledIn: restore.answer)
            return restore.answer
        }
    }

    /// Stores once more, after them, each folder of `written` that entries written after it went into. A device
    /// shows a folder's time as its newest version has it, but entries arriving after that version show the
    /// time of their arrival there (as a change made elsewhere); the folder's own last version sets it back. (A
    /// folder a rewind or a restore brought back showed its old time on a device mounted after, and the time
    /// of the rewind on the devices that were online.)
    func storeFoldersAgain(_ tx: any MetadataTransaction, _ cid: String, filledIn written: [WireItem]) throws(ServerFailure) {
        var parentsAfter = Set<String>(), again: [WireItem] = []
        for w in written.reversed() {
            if w.kind == .dir, !w.deleted, parentsAfter.contains(w.id) { again.append(w) }
            if let p = w.parent { parentsAfter.insert(p) }
        }
        for folder in again.reversed() {
            guard let now = try tx.item(cid, folder.id), now.version == folder.version else { continue }
            _ = try store(tx, cid, now)
        }
    }

    // MARK: Emptying

    /// Removes the items from Recently Deleted (every item in it when `ids` is nil): their history goes, their
    /// blobs after the grace. A folder goes with what was deleted in it along with it (as a restore brings it
    /// back). An id not in Recently Deleted is passed over; 404 for one the container never had.
    func emptyTrash(_ cid: String, ids: [String]?) throws(ServerFailure) -> Int {
        if let ids { try HistoryInput.checkIDs(ids) }
        return try writing(cid) { (tx) throws(ServerFailure) in
            guard let ids else {
                let all = try tx.trash(cid, parent: nil)
                for row in all { try tx.deleteHistory(cid, id: row.id) }
                return all.count
            }
            var emptied = Set<String>()
            for id in try wholeBatches(tx, cid, HistoryInput.unique(ids)) {
                guard let item = try tx.item(cid, id) else { throw .refused(404, "no such item \(id)") }
                guard let row = try Self.trashRow(tx, cid, of: item), !emptied.contains(id) else { continue }
                for gone in try [row] + deletedWith(tx, cid, folder: row) where emptied.insert(gone.id).inserted {
                    try tx.deleteHistory(cid, id: gone.id)
                }
            }
            return emptied.count
        }
    }

    /// The delete row of an item in Recently Deleted, or nil when it is not there.
    static func trashRow(_ tx: any MetadataTransaction, _ cid: String, of item: WireItem) throws(ServerFailure) -> WireVersion? {
        guard item.deleted else { return nil }
        return try tx.history(cid, item.id).first { $0.version == item.version && $0.deleted }
    }

    /// What was deleted in a folder (its delete row `folder`) at most `HistoryRules.folderWindow` before it
    /// (and not after it: a folder brought back and deleted from again), recursively, parents before children:
    /// what `rm -rf` removed with it. For a folder deleted with the app's data, what that deletion took in it,
    /// and nothing deleted before. Nothing for a file.
    func deletedWith(_ tx: any MetadataTransaction, _ cid: String, folder: WireVersion) throws(ServerFailure) -> [WireVersion] {
        guard folder.kind == .dir else { return [] }
        let since = folder.at - HistoryRules.folderWindow
        var found: [WireVersion] = []
        var folders = [folder.id]
        var seen: Set<String> = [folder.id]
        while let next = folders.popLast() {
            for row in try tx.trash(cid, parent: next)
            where row.at >= since && row.at <= folder.at && row.batch == folder.batch && seen.insert(row.id).inserted {
                found.append(row)
                if row.kind == .dir { folders.append(row.id) }
            }
        }
        return found
    }

    /// `ids`, and after them every other item in Recently Deleted deleted in the same deletion of an app's data
    /// as one of them (`WireVersion.batch`): such a deletion is one entry, restored and emptied whole.
    func wholeBatches(_ tx: any MetadataTransaction, _ cid: String, _ ids: [String]) throws(ServerFailure) -> [String] {
        var batches = Set<WireDataBatch>()
        for id in ids {
            if let item = try tx.item(cid, id), let batch = try Self.trashRow(tx, cid, of: item)?.batch { batches.insert(batch) }
        }
        guard !batches.isEmpty else { return ids }
        var all = ids, seen = Set(ids)
        // Oldest first: a batch's deletes went children first, so its folders come after what they held.
        for row in try tx.trash(cid, parent: nil).reversed() where row.batch.map(batches.contains) == true {
            if seen.insert(row.id).inserted { all.append(row.id) }
        }
        return all
    }

    // MARK: Deleting an app's data

    /// Deletes the container's data (docs/HISTORY.md "Deleting an app's data"): every live item outside the
    /// root's `Documents` folder (with `documents`, every live item but the root), as deletes by `device`, each
    /// folder after what it held, all in one transaction and one batch: one entry of Recently Deleted.
    func deleteData(_ cid: String, documents: Bool, device: String) throws(ServerFailure) -> WireDataDeleted {
        guard HistoryRules.isValidDevice(device) else { throw .refused(400, "bad device name") }
        return try writing(cid) { (tx) throws(ServerFailure) in
            // Every item to delete with its folder's path, each folder before what it holds.
            var found: [(item: WireItem, parentPath: String)] = []
            var folders: [(id: String, path: String)] = [(WireRules.rootID, "")]
            while let (folder, path) = folders.popLast() {
                for child in try tx.liveChildren(cid, parent: folder)
                where documents || folder != WireRules.rootID || child.name != WireRules.documentsName {
                    found.append((child, path))
                    if child.kind == .dir { folders.append((child.id, path.isEmpty ? child.name : path + "/" + child.name)) }
                }
            }
            let batch = WireDataBatch(documentsToo: documents)
            var deleted: [WireItem] = []
            for (item, parentPath) in found.reversed() {
                let tomb = try tombstone(tx, cid, of: item, device: device)
                let path = tomb.parent == item.parent && tomb.name == item.name ? parentPath : nil
                deleted.append(try store(tx, cid, tomb, parentPath: path, batch: batch))
            }
            return WireDataDeleted(deleted: deleted, batch: deleted.isEmpty ? nil : batch)
        }
    }

    // MARK: Rewind

    /// Brings the folder's subtree back to its state at `request.to` (docs/HISTORY.md "Rewind"): the plan of
    /// `RewindPlanner`, its versions written through `store` in one transaction (none for a dry run, which
    /// reads only). Answers the changes, the same for a dry run as for the real one.
    func rewind(_ cid: String, _ request: WireRewindRequest) throws(ServerFailure) -> [WireRewindChange] {
        do { try RewindPlanner.check(request) } catch { throw .refused(error.status, error.message) }
        let now = clock()
        if request.dryRun {
            return try reading(cid) { (tx) throws(ServerFailure) in try rewindPlan(tx, cid, request, now: now).changes }
        }
        return try writing(cid) { (tx) throws(ServerFailure) in
            let plan = try rewindPlan(tx, cid, request, now: now)
            var written: [WireItem] = []
            for item in plan.writes { written.append(try store(tx, cid, item)) }
            try storeFoldersAgain(tx, cid, filledIn: written)
            return plan.changes
        }
    }

    private func rewindPlan(_ tx: any MetadataTransaction, _ cid: String, _ request: WireRewindRequest,
                            now: Int64) throws(ServerFailure) -> RewindPlan {
        try planning { try RewindPlanner.plan(request, now: now, source: StubRewindSource(store: self, tx: tx, cid: cid)) }
    }

    /// Runs UbiquityBase's RewindPlanner, whose failures are its refusals (a 4xx, or 409 for a content no longer
    /// kept) and those of the source it reads, this store's.
    private func planning<T>(_ body: () throws -> T) throws(ServerFailure) -> T {
        do {
            return try body()
        } catch let refusal as RewindRefusal {
            throw .refused(refusal.status, refusal.message)
        } catch let failure as ServerFailure {
            throw failure
        } catch {
            throw .fault("rewind: \(error)")
        }
    }

    // MARK: Retention

    /// One retention pass over the container at `now`: removes the rows `retention` lets expire (older versions
    /// past the policy, Recently Deleted past `keepDeleted`). Answers how many rows went.
    @discardableResult
    func retain(_ cid: String, _ retention: HistoryRetention, now: Int64) throws(ServerFailure) -> Int {
        try writing(cid) { (tx) throws(ServerFailure) in
            let stamps = try tx.historyStamps(cid, olderThrough: retention.versionHorizon(now: now),
                                              deletedThrough: retention.deletedHorizon(now: now))
            var gone: [Int64] = []
            for rows in Dictionary(grouping: stamps, by: \.id).values { gone += retention.expired(rows, now: now) }
            return gone.isEmpty ? 0 : try tx.deleteHistoryRows(cid, versions: gone)
        }
    }

    // MARK: Usage

    /// The stored bytes the container's items name (docs/HISTORY.md "Storage"): each blob, or each chunk of a
    /// manifest, counted once, for the first of live items (and their conflict versions), history rows of live
    /// items, history rows of deleted items that names it.
    func usage(_ cid: String) throws(ServerFailure) -> StubUsage {
        let (named, documents) = try reading(cid) { (tx) throws(ServerFailure) in
            (try tx.namedContents(cid), try Self.contents(below: WireRules.documentsID, cid, tx))
        }
        var holders: [String: ContentHolder] = [:]
        for n in named where isSHA256Hex(n.sha256) && n.sha256 != emptySHA256 {
            holders[n.sha256] = min(holders[n.sha256] ?? n.holder, n.holder)
        }
        let stored = Dictionary(try blobs.list(cid).map { ($0.sha256, $0.size) }, uniquingKeysWith: { a, _ in a })
        // Each stored object once, where it lives (live before history before trash; a live one under
        // Documents/ as a document).
        var objects: [String: (holder: ContentHolder, document: Bool, size: Int64)] = [:]
        func count(_ sha: String, _ size: Int64, _ holder: ContentHolder, _ document: Bool) {
            if let known = objects[sha], known.holder < holder || (known.holder == holder && (known.document || !document)) {
                return
            }
            objects[sha] = (holder, document, size)
        }
        for (sha, holder) in holders {
            let document = holder == .live && documents.contains(sha)
            if let size = stored[sha] {
                count(sha, size, holder, document)
            } else if let manifest = try manifest(cid, sha) {
                for chunk in manifest.chunks { if let c = chunk.sha256 { count(c, chunk.size, holder, document) } }
            }
        }
        var usage = StubUsage(container: cid)
        for (_, object) in objects {
            switch object.holder {
            case .live:
                usage.live += object.size
                if object.document { usage.documents += object.size }
            case .history: usage.history += object.size
            case .trash: usage.trash += object.size
            }
        }
        return usage
    }

    /// The contents (hashes) of the live files below folder `top`.
    private static func contents(below top: String, _ cid: String, _ tx: any MetadataTransaction) throws(ServerFailure) -> Set<String> {
        var found = Set<String>(), folders = [top]
        while let folder = folders.popLast() {
            for child in try tx.liveChildren(cid, parent: folder) {
                if child.kind == .dir { folders.append(child.id) } else if isSHA256Hex(child.sha256) { found.insert(child.sha256) }
            }
        }
        return found
    }
}

/// The bytes of one container as `remote usage` shows them.
public struct StubUsage: Equatable, Sendable, Codable {
    /// The container's id on the wire, and the user it is stored for (`StubServer.usage` fills it in).
    public var container: String
    public var user: String = ""
    public var live: Int64 = 0
    /// The part of `live` under Documents/.
    public var documents: Int64 = 0
    public var history: Int64 = 0
    public var trash: Int64 = 0

    public init(container: String) { self.container = container }
}

/// The container's state in one transaction, as a rewind reads it.
private struct StubRewindSource: RewindSource {
    let store: StubStore
    let tx: any MetadataTransaction
    let cid: String

    func item(_ id: String) throws(ServerFailure) -> WireItem? { try tx.item(cid, id) }

    func liveChildren(_ parent: String) throws(ServerFailure) -> [WireItem] { try tx.liveChildren(cid, parent: parent) }

    func liveChild(_ parent: String, named name: String) throws(ServerFailure) -> WireItem? {
        try tx.liveChild(cid, parent: parent, name: name, except: nil)
    }

    func oldestKept(_ id: String) throws(ServerFailure) -> Int64? { try tx.history(cid, id).map(\.at).min() }

    func version(_ id: String, atOrBefore at: Int64) throws(ServerFailure) -> WireVersion? {
        try tx.historyRow(cid, id, through: at)
    }

    func versions(in parent: String, atOrBefore at: Int64) throws(ServerFailure) -> [WireVersion] {
        try tx.historyChildren(cid, parent: parent, through: at)
    }

    func holdsContent(sha256: String, size: Int64) throws(ServerFailure) -> Bool { try store.blobSize(cid, sha256) == size }
}

/// The checks of a restore's or an empty's ids.
enum HistoryInput {
    static func checkIDs(_ ids: [String]) throws(ServerFailure) {
        guard (1...HistoryRules.maxIDs).contains(ids.count) else {
            throw .refused(400, "give 1 to \(HistoryRules.maxIDs) ids")
        }
        if let bad = ids.first(where: { !WireRules.isValidID($0) }) {
            throw .refused(400, "bad item id \(bad.prefix(80))")
        }
    }

    /// The ids in their order, each once.
    static func unique(_ ids: [String]) -> [String] {
        var seen = Set<String>()
        return ids.filter { seen.insert($0).inserted }
    }
}

/// One restore inside its transaction: what it made live so far, in order.
private struct Restoration {
    let store: StubStore
    let tx: any MetadataTransaction
    let cid: String
    let device: String
    /// The ids asked for: a folder among them that comes back as the parent of another comes back whole.
    let asked: Set<String>
    private(set) var answer: [WireItem] = []
    private var answered = Set<String>()

    init(store: StubStore, tx: any MetadataTransaction, cid: String, device: String, asked: Set<String>) {
        self.store = store; self.tx = tx; self.cid = cid; self.device = device; self.asked = asked
    }

    /// One id asked for: live already (answered as it is), or in Recently Deleted (brought back), else 404.
    mutating func restoreAsked(_ id: String) throws(ServerFailure) {
        guard let item = try tx.item(cid, id) else { throw .refused(404, "no such item \(id)") }
        guard item.deleted else {
            note(item)
            // A folder that came back earlier as the folder of an item restored alone: asked for itself, it
            // brings back what was deleted with it then, as its restore would have.
            if item.kind == .dir, let row = try tx.history(cid, id).first(where: { $0.deleted }) {
                try reviveDeleted(with: row)
            }
            return
        }
        guard let row = try StubStore.trashRow(tx, cid, of: item) else {
            throw .refused(404, "\(id) is not in Recently Deleted")
        }
        try reviveFolders(above: item)
        try revive(item)
        try reviveDeleted(with: row)
    }

    /// The deleted folders the item was in, from the top down (from their tombstones, whether or not they are
    /// still in Recently Deleted: a folder has no content to lose); one that was asked for comes back whole.
    private mutating func reviveFolders(above item: WireItem) throws(ServerFailure) {
        var chain: [WireItem] = []
        var cursor = item.parent
        while let id = cursor {
            guard let folder = try tx.item(cid, id) else { throw .refused(500, "the folder \(id) is missing") }
            guard folder.deleted else { break }
            guard chain.count < 100_000 else { throw .refused(500, "the tree is too deep") }
            chain.append(folder)
            cursor = folder.parent
        }
        for folder in chain.reversed() {
            try revive(folder)
            if asked.contains(folder.id), let row = try StubStore.trashRow(tx, cid, of: folder) {
                try reviveDeleted(with: row)
            }
        }
    }

    /// What was deleted in a folder along with it (`deletedWith`), each still in Recently Deleted.
    private mutating func reviveDeleted(with row: WireVersion) throws(ServerFailure) {
        for gone in try store.deletedWith(tx, cid, folder: row) {
            guard let tomb = try tx.item(cid, gone.id), tomb.deleted, tomb.version == gone.version else { continue }
            try revive(tomb)
        }
    }

    /// The tombstone made live again as a new version: same place, a free name, this device, its content named
    /// again (conflict versions, whose blobs no history row keeps, are not brought back).
    private mutating func revive(_ tomb: WireItem) throws(ServerFailure) {
        var item = tomb
        item.deleted = false
        item.device = device
        item.conflicts = []
        if let parent = item.parent { item.name = try freeName(tomb.name, in: parent, for: tomb.id) }
        note(try store.store(tx, cid, item))
    }

    /// `name`, or `name 2`, `name 3`, ... before the extension: the first no other live item in `parent` holds.
    private func freeName(_ name: String, in parent: String, for id: String) throws(ServerFailure) -> String {
        for n in 1...10_000 {
            let candidate = n == 1 ? name : HistoryRules.numberedName(name, n)
            if try tx.liveChild(cid, parent: parent, name: candidate, except: id) == nil { return candidate }
        }
        throw .refused(409, "no free name for \(name)")
    }

    private mutating func note(_ item: WireItem) {
        if answered.insert(item.id).inserted { answer.append(item) }
    }
}
