// Pushes many pending items in one batch request: deletes, metadata changes and creates or changes of small
// files with their content inline, so that a burst (`tar x`, `rm -rf`) goes up in a few requests.
//
// What must hold here: a batch changes nothing of the rules of Pusher.swift. An entry the remote stored is
// recorded as its single push would record it (all of a batch's in one transaction); every other item (one a
// batch cannot carry, and every entry refused) is pushed by Pusher one by one, in the batch's order, after the
// answers were recorded, so that it meets the remote as it is now and settles exactly as the single path
// does. A create is marked sent before the request goes; a batch without an answer is a lost answer for
// each of its entries, as for a single write.
import Foundation
import UbiquityBase

/// A batch push that failed, with the item it is shown on.
struct BatchPushFailure: Error {
    let id: String
    let error: Error
}

struct BatchPusher {
    let container: Container
    /// The items, in the order they go (as `nextPushableBatch` gives them).
    let ids: [String]

    /// One item as its entry carries it, and what recording the answer needs.
    private struct Prepared {
        var snap: PushSnapshot
        var pushed: Item
        var entry: WireBatchEntry
    }

    func run() throws {
        var inlineLeft = WireBatchLimits.maxInlineTotal
        var prepared: [Prepared] = []
        for id in ids {
            let p: Prepared?
            do { p = try prepare(id, inlineLeft: inlineLeft) } catch { throw BatchPushFailure(id: id, error: error) }
            guard let p else { continue }
            inlineLeft -= p.entry.content?.count ?? 0
            prepared.append(p)
        }
        let settled = try send(prepared)
        for id in ids where !settled.contains(id) {
            do { try Pusher(container: container, id: id).run() } catch { throw BatchPushFailure(id: id, error: error) }
        }
    }

    /// Sends the entries and records what the remote stored; answers the items settled.
    private func send(_ all: [Prepared]) throws -> Set<String> {
        guard let first = all.first?.entry.id else { return [] }
        let gone: Set<String>
        do {
            gone = try container.markCreatesSent(all.compactMap { $0.entry.ifMatch == nil ? $0.entry.item : nil })
        } catch { throw BatchPushFailure(id: first, error: error) }
        let batch = all.filter { !gone.contains($0.entry.id) }
        if batch.isEmpty { return [] }
        let results: [BatchResult]
        do { results = try container.remote.batch(batch.map(\.entry)) } catch {
            throw BatchPushFailure(id: first, error: error)
        }
        var puts: [(snap: PushSnapshot, pushed: Item, stored: WireItem)] = []
        var deletes: [(id: String, tombstone: Int64?)] = []
        for (p, result) in zip(batch, results) {
            switch (p.entry.op, result) {
            case (.put, .success(let stored)): puts.append((p.snap, p.pushed, stored))
            case (.delete, .success(let tombstone)): deletes.append((p.entry.id, tombstone.version))
            case (.delete, .failure(.notFound)): deletes.append((p.entry.id, nil))
            default: continue
            }
        }
        do { try container.acknowledgeBatch(puts: puts, deletes: deletes) } catch {
            throw BatchPushFailure(id: first, error: error)
        }
        return Set(puts.map(\.snap.item.id) + deletes.map(\.id))
    }

    /// The entry for one item, or nil when it goes by the single path: a local-only item's remote copy, a
    /// delete of an item the remote never acknowledged, a file whose content is too large to go inline.
    private func prepare(_ id: String, inlineLeft: Int) throws -> Prepared? {
        guard let snap = container.pushSnapshot(id), snap.item.isPending, !snap.item.isLocalOnly else { return nil }
        var item = snap.item
        if item.deleted {
            guard item.remoteVersion != 0 else { return nil }
            return Prepared(snap: snap, pushed: item, entry: .delete(id, ifMatch: item.remoteVersion))
        }
        var snapNow = snap
        var content: [UInt8]?
        if item.dirty {
            let limit = min(inlineLeft, WireBatchLimits.maxInlineBytes)
            guard let (bytes, generation) = try inlineContent(id, limit: limit) else { return nil }
            if let generation { snapNow.generation = generation }
            item.remoteSHA = sha256Hex(bytes)
            item.remoteSize = Int64(bytes.count)
            item.size = item.remoteSize
            content = bytes.isEmpty ? nil : bytes
        }
        let wire = Pusher(container: container, id: id).wireItem(item)
        let ifMatch = item.remoteVersion == 0 ? nil : item.remoteVersion
        let entry = WireBatchEntry.put(wire, ifMatch: ifMatch, content: content)
        return Prepared(snap: snapNow, pushed: item, entry: entry)
    }

    /// The content to push (see `contentForUpload`), when it is at most `limit` bytes.
    private func inlineContent(_ id: String, limit: Int) throws -> ([UInt8], Int?)? {
        let upload = try container.contentForUpload(id)
        defer { upload.done() }
        let fd = try FileDescriptor.open(upload.path, O_RDONLY)
        defer { fd.close() }
        let size = Int(try fd.stat().st_size)
        guard size <= limit else { return nil }
        var bytes = [UInt8](repeating: 0, count: size)
        var got = 0
        while got < size {
            let n = try bytes.withUnsafeMutableBytes { buffer in
                try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[got...]))
            }
            if n == 0 { break }
            got += n
        }
        bytes.removeLast(size - got)
        return (bytes, upload.generation)
    }
}
