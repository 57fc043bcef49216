// What a participant reads of a folder shared with them (docs/SHARING.md "The participant's view"): the shared
// folder as a container of its own, its root being the folder. The view's feed is the owner's container's feed
// filtered to the folder's subtree; its items are those inside; its blobs are those an item inside names.
//
// What must hold: nothing outside the folder reaches the participant: no item, no id, no name, no hash. The
// one exception is an item that was inside at the participant's last position and is not any more (moved out,
// or below a folder that was): it goes as gone, so that the view's devices do not keep it, and only its id
// travels. Items directly in the folder name the view's root as their parent, and every write through a
// view is refused until writing through shares is built (403 when read-only, whatever comes later).
//
// Positions are the owner's container's own: a view's token is the container's position, and every item keeps
// its version. "Inside at the last position" is read from the kept history (the version of the item and of
// each folder above it at or before that position): a position older than the history the owner keeps may
// miss a departure (docs/SHARING.md says so).
import Foundation
import UbiquityBase

extension StubStore {
    /// The share `id` as its participant `user` reads it: 404 for anyone else, as for no such share.
    func shareForParticipant(_ id: String, user: String) throws(ServerFailure) -> StubShare {
        guard WireShareRules.isValidID(id) else { throw .refused(400, "bad share id") }
        let share = try meta.read { (tx) throws(ServerFailure) in try tx.shares(user: user) }
            .first { $0.id == id && $0.participant == user }
        guard let share else { throw .refused(404, "no such share") }
        return share
    }

    /// The view's start: the owner's container's position now.
    func openView(_ share: StubShare) throws(ServerFailure) -> WireContainer {
        let seq = try reading(share.container) { (tx) throws(ServerFailure) in try tx.containerSeq(share.container) ?? 0 }
        return WireContainer(container: "share-" + share.id, root: WireRules.rootID, token: String(seq))
    }

    /// The view's feed after `since`: each item of the container's feed that is inside the folder, a folder that
    /// came in with everything below it, and what left as gone. Waits up to `wait` s for something to show.
    func viewChanges(_ share: StubShare, since: Int64, limit: Int, wait: Int) throws(ServerFailure) -> WireChanges {
        var cursor = since
        return try polling(wait: wait) { () throws(ServerFailure) in
            let answer = try reading(share.container) { (tx) throws(ServerFailure) in
                // Looked at again at each look: a long poll ends as soon as the share does.
                guard try tx.shares(user: share.participant).contains(where: { $0.id == share.id }) else {
                    throw .refused(404, "no such share")
                }
                return try ShareTree(tx, share).changes(since: cursor, from: since, limit: limit)
            }
            cursor = Int64(answer.token) ?? cursor
            return (answer, !answer.items.isEmpty || answer.more)
        }
    }

    /// Item `id` as the view shows it; 404 when it is not inside the folder.
    func viewItem(_ share: StubShare, _ id: String) throws(ServerFailure) -> WireItem {
        try reading(share.container) { (tx) throws(ServerFailure) in
            let tree = ShareTree(tx, share)
            guard let item = try tx.item(share.container, id), try tree.isInside(item) else {
                throw .refused(404, "no such item")
            }
            return tree.shown(item)
        }
    }

    /// Whether a live item inside the folder names `sha256` as its content or a conflict's.
    func viewNamesBlob(_ share: StubShare, _ sha256: String) throws(ServerFailure) -> Bool {
        try reading(share.container) { (tx) throws(ServerFailure) in
            let tree = ShareTree(tx, share)
            for item in try tx.liveItems(share.container, naming: sha256) where try tree.isInside(item) {
                return true
            }
            return false
        }
    }
}

/// The shared folder's subtree in one transaction, with what it learned of folders kept for the next question.
private final class ShareTree {
    private let tx: any MetadataTransaction
    private let share: StubShare
    private var cid: String { share.container }
    /// Folders known inside (true) or outside (false) now.
    private var insideNow: [String: Bool] = [:]
    /// Items known inside (their row then) or outside (nil) at the position asked about.
    private var insideThen: [String: WireVersion?] = [:]

    init(_ tx: any MetadataTransaction, _ share: StubShare) {
        self.tx = tx
        self.share = share
    }

    /// The item as the view sees it: in the view's root when directly in the folder.
    func shown(_ item: WireItem) -> WireItem {
        var shown = item
        if shown.parent == share.folder { shown.parent = WireRules.rootID }
        return shown
    }

    /// True when the item (live or a delete, where it was last) is below the folder now.
    func isInside(_ item: WireItem) throws(ServerFailure) -> Bool {
        guard item.id != share.folder, let parent = item.parent else { return false }
        return try folderIsInside(parent)
    }

    private func folderIsInside(_ id: String) throws(ServerFailure) -> Bool {
        var chain: [String] = []
        var cursor: String? = id
        var answer = false
        while let folder = cursor, chain.count < WireShareRules.maxDepth {
            if folder == share.folder { answer = true; break }
            if let known = insideNow[folder] { answer = known; break }
            chain.append(folder)
            cursor = try tx.item(cid, folder)?.parent
        }
        for folder in chain { insideNow[folder] = answer }
        return answer
    }

    /// Item `id` as the view's devices knew it at position `since` when it was below the folder then (its kept
    /// row at or before `since`, live), else nil.
    private func insideRow(_ id: String, at since: Int64, depth: Int = 0) throws(ServerFailure) -> WireVersion? {
        if let known = insideThen[id] { return known }
        var answer: WireVersion? = nil
        // (Rows pruned by retention can make the parents kept at a position disagree, even in a cycle: the walk
        // stops as a walk up the live tree does.)
        if depth < WireShareRules.maxDepth, let row = try tx.history(cid, id).first(where: { $0.version <= since }),
           !row.deleted, let parent = row.parent {
            let parentInside = try parent == share.folder ? true : insideRow(parent, at: since, depth: depth + 1) != nil
            if parentInside { answer = row }
        }
        insideThen[id] = answer
        return answer
    }

    /// The view's page after `cursor` of the feed the view asked from `since` (the position its devices hold).
    func changes(since cursor: Int64, from since: Int64, limit: Int) throws(ServerFailure) -> WireChanges {
        let seq = try tx.containerSeq(cid) ?? 0
        var page = try tx.items(cid, after: cursor, limit: limit + 1)
        let more = page.count > limit
        if more { page.removeLast(page.count - limit) }
        var shown: [String: WireItem] = [:]
        var order: [String] = []
        func show(_ item: WireItem) {
            if shown.updateValue(item, forKey: item.id) == nil { order.append(item.id) }
        }
        for item in page where item.id != share.folder {
            if try isInside(item) {
                show(self.shown(item))
                // A folder that came in brings what is below it: those items have no news of their own.
                if item.kind == .dir, !item.deleted, try insideRow(item.id, at: since) == nil {
                    for below in try liveBelow(item.id) where shown[below.id] == nil { show(self.shown(below)) }
                }
            } else if let then = try insideRow(item.id, at: since) {
                // It left: gone, and so is what was below it then, at the version of its leaving.
                show(gone(then, version: item.version))
                guard item.kind == .dir else { continue }
                for below in try liveBelow(item.id) {
                    if let belowThen = try insideRow(below.id, at: since) { show(gone(belowThen, version: item.version)) }
                }
            }
        }
        let token = more ? page[page.count - 1].version : seq
        return WireChanges(items: order.compactMap { shown[$0] }, token: String(token), more: more)
    }

    /// Every live item below folder `id`, parents before their children.
    private func liveBelow(_ id: String) throws(ServerFailure) -> [WireItem] {
        var found: [WireItem] = []
        var folders = [id]
        while let folder = folders.popLast() {
            for child in try tx.liveChildren(cid, parent: folder) {
                found.append(child)
                if child.kind == .dir { folders.append(child.id) }
            }
        }
        return found
    }

    /// What the view learns of an item that left: that it is gone from where its devices last knew it.
    private func gone(_ then: WireVersion, version: Int64) -> WireItem {
        let parent = then.parent == share.folder ? WireRules.rootID : then.parent
        return WireItem(id: then.id, parent: parent, name: then.name, kind: then.kind, mode: 0, mtime: 0, size: 0,
                        sha256: "", version: version, deleted: true)
    }
}
