// Pushes many pending items in one batch request: deletes, metadata changes and creates or changes of small
// files with their content inline, so that a burst (`tar x`, `rm -rf`) goes up in a few requests.
//
// What must hold here: a batch changes nothing of the rules of Pusher.swift. An entry the remote stored is
// recorded as its single push would record it (all of a batch's in one transaction). Then, in the batch's
// order, an entry refused for the item's own state (412, 404, or 208: this very change applied before, its
// answer lost) settles by Pusher's rules applied to its answer, as if Pusher had sent it, while the item is
// still as the batch sent it; an entry refused for another item's (409, 422: a name holder, a child, a parent,
// which a later entry may have moved), one whose item changed since (an earlier entry's push may push it
// first) and an item the batch did not carry (larger content, a local-only item's remote copy, a delete of an
// unanswered create, an item gone meanwhile) are pushed by Pusher from the start, against the remote as it is
// now. A create is marked sent before the request goes; a batch without an answer is a lost answer for each of
// its entries, as for a single write.
import Foundation
import UbiquityBase

/// A batch push that failed, with the item it is shown on.
struct BatchPushFailure: Error {
    let id: String
    let error: Error
}

struct BatchPusher {
    let container: Container
    /// The steps of the push side on the container's state: all the pusher records.
    private var push: PushSide { container.pushSide }
    private let log = Logger("push")
    /// The items, in the order they go (as `nextPushableBatch` gives them).
    let ids: [String]

    /// One item as its entry carries it, and what recording the answer needs.
    private struct Prepared {
        var snap: PushSnapshot
        var pushed: Item
        var entry: WireBatchEntry
    }

    /// Answers the items left for the content lane (their own content, or one they wait for, uploads there).
    @discardableResult
    func run() throws -> Set<String> {
        var inlineLeft = WireBatchLimits.maxInlineTotal
        var prepared: [Prepared] = []
        for id in ids {
            let p: Prepared?
            do { p = try prepare(id, inlineLeft: inlineLeft) } catch { throw BatchPushFailure(id: id, error: error) }
            guard let p else { continue }
            inlineLeft -= p.entry.content?.count ?? 0
            prepared.append(p)
        }
        let (sent, refused) = try send(prepared)
        // An item that cannot go up now (a name held, a folder not empty, a refusal that takes a later pass)
        // does not hold back the others: they go on, all but those below it (whose place needs it), and the
        // first failure is thrown once the rest are done. The remote gone ends the pass at once.
        var failures: [BatchPushFailure] = []
        var stopped: String?
        var aside: Set<String> = []
        for id in ids {
            if !failures.isEmpty && push.liesBelow(id, anyOf: Set(failures.map(\.id))) { continue }
            // Not applied for the server's reasons (out of time, its database away), after entries that were:
            // it goes in the next batch, which follows at once.
            if let (_, error) = refused[id], error.isTransient {
                stopped = stopped ?? id
                continue
            }
            do {
                let pusher = Pusher(container: container, id: id)
                // A refusal is settled as its answer only while the item is as the batch sent it: a push of
                // another entry may have pushed it first (a name it waited for), and then its refusal is stale.
                if let (p, error) = refused[id], Self.isOwnState(error), push.pushSnapshot(id)?.item == p.snap.item {
                    try pusher.runAfterRefusal(error, of: p.entry, snap: p.snap, pushed: p.pushed)
                } else if !sent.contains(id) || refused[id] != nil {
                    try pusher.run()
                }
            } catch let error as RemoteError where error.isTransient {
                throw BatchPushFailure(id: id, error: error)
            } catch is UploadStopped {
                stopped = stopped ?? id
            } catch is UploadAside {
                aside.insert(id)
            } catch {
                failures.append(BatchPushFailure(id: id, error: error))
            }
        }
        if let first = failures.first { throw first }
        if let stopped { throw BatchPushFailure(id: stopped, error: UploadStopped()) }
        return aside
    }

    /// True when the refusal is about the item's own state on the remote, which no other entry changes.
    private static func isOwnState(_ error: RemoteError) -> Bool {
        switch error {
        case .preconditionFailed, .notFound, .alreadyApplied: return true
        default: return false
        }
    }

    /// Sends the entries (not those of items gone meanwhile) and records what the remote stored; answers the
    /// items sent and the refusals, by item.
    private func send(_ all: [Prepared]) throws -> (sent: Set<String>, refused: [String: (Prepared, RemoteError)]) {
        guard let first = all.first?.entry.id else { return ([], [:]) }
        let gone: Set<String>
        do {
            gone = try push.markSent(all.compactMap { p in
                guard let item = p.entry.item, let change = p.entry.changeID else { return nil }
                return (item, p.entry.ifMatch, change)
            })
        } catch { throw BatchPushFailure(id: first, error: error) }
        var refused: [String: (Prepared, RemoteError)] = [:]
        let batch = all.filter { !gone.contains($0.entry.id) }
        if batch.isEmpty { return ([], [:]) }
        let results: [BatchResult]
        do { results = try container.remote.batch(batch.map(\.entry)) } catch {
            throw BatchPushFailure(id: first, error: error)
        }
        var puts: [(snap: PushSnapshot, pushed: Item, stored: WireItem)] = []
        var deletes: [(id: String, tombstone: Int64?)] = []
        for (p, result) in zip(batch, results) {
            log.debug("batch \(p.entry.op) \(p.entry.id) (base \(p.entry.ifMatch ?? 0)): \(result)")
            switch (p.entry.op, result) {
            case (.put, .success(let stored)): puts.append((p.snap, p.pushed, stored))
            case (.delete, .success(let tombstone)): deletes.append((p.entry.id, tombstone.version))
            case (_, .failure(let error)): refused[p.entry.id] = (p, error)
            }
        }
        do { try push.acknowledgeBatch(puts: puts, deletes: deletes) } catch {
            throw BatchPushFailure(id: first, error: error)
        }
        return (Set(batch.map(\.entry.id)), refused)
    }

    /// The entry for one item, or nil when it goes by the single path: a local-only item's remote copy, a
    /// delete of an item the remote never acknowledged, a file whose content is too large to go inline.
    private func prepare(_ id: String, inlineLeft: Int) throws -> Prepared? {
        guard let snap = push.pushSnapshot(id), snap.item.isPending, !snap.item.isLocalOnly else { return nil }
        var item = snap.item
        if item.deleted {
            guard item.remoteVersion != 0 else { return nil }
            let change = Pusher(container: container, id: id).changeID(condition: "delete \(item.remoteVersion)",
                                                                         item: nil)
            return Prepared(snap: snap, pushed: item, entry: .delete(id, ifMatch: item.remoteVersion, change: change))
        }
        // Then the single path has nothing to send either.
        if item.isDirectory, try push.dropNeedlessRevival(id) { return nil }
        var snapNow = snap
        var content: [UInt8]?
        if item.dirty {
            // Never a file that goes up in chunks (a small chunk format's, below the inline limit).
            let limit = min(inlineLeft, WireBatchLimits.maxInlineBytes, Int(container.config.chunkFormat.chunkedAbove))
            if item.size > limit { return nil } // (not copied only to be found too large)
            guard let (bytes, generation) = try inlineContent(id, limit: limit) else { return nil }
            if let generation { snapNow.generation = generation }
            item.remoteSHA = sha256Hex(bytes)
            item.remoteSize = Int64(bytes.count)
            item.size = item.remoteSize
            content = bytes.isEmpty ? nil : bytes
        }
        let pusher = Pusher(container: container, id: id)
        let wire = pusher.wireItem(item)
        let ifMatch = item.remoteVersion == 0 ? nil : item.remoteVersion
        let change = pusher.changeID(condition: ifMatch.map { "If-Match: \($0)" } ?? "If-None-Match: *", item: wire)
        let entry = WireBatchEntry.put(wire, ifMatch: ifMatch, content: content, change: change)
        return Prepared(snap: snapNow, pushed: item, entry: entry)
    }

    /// The content to push (see `smallContentForUpload`), when it is at most `limit` bytes.
    private func inlineContent(_ id: String, limit: Int) throws -> ([UInt8], Int?)? {
        try container.smallContentForUpload(id, limit: limit).map { ($0.bytes, $0.generation) }
    }
}
