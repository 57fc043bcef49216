// Folders shared between users of one remote (docs/WIRE.md "Shares"): the records and their rules. The owner
// shares a folder of one of their containers with another user, read-only or read-write; the participant sees
// it in their own container of the same id (the mount's part comes later).
//
// What must hold: only the owner adds or removes a share (the route's container is the caller's own, scoped by
// its prefix); a participant may only leave; a shared folder is a live folder inside the container's Documents
// (not Documents itself), with no shared folder above or below it; the participant is another user of the
// remote; a user removed takes their shares with them (MetadataTransaction.deleteUser). A participant learns of
// the owner's container only the shared folder's id and name.
import Foundation
import UbiquityBase

/// One share as stored: `container` is the owner's stored id (prefixed, `ContainerScope`), `owner` and
/// `participant` user names.
struct StubShare: Equatable, Sendable {
    var id: String
    var container: String
    var folder: String
    var owner: String
    var participant: String
    var readOnly: Bool
    var created: Int64
}

extension StubStore {
    /// Shares folder `request.folder` of `owner`'s container `cid` (stored id) with `request.user`; sharing it
    /// again with the same user changes how. Answers the share.
    func addShare(_ cid: String, owner: String, _ request: WireShareRequest) throws(ServerFailure) -> WireShare {
        guard WireRules.isValidID(request.folder) else { throw .refused(400, "bad folder id") }
        if let problem = AccountNames.problem(request.user, what: "user") { throw .refused(400, problem) }
        guard request.user != owner else { throw .refused(400, "a folder is not shared with its owner") }
        let now = clock()
        return try writing(cid) { (tx) throws(ServerFailure) in
            guard try tx.users().contains(where: { $0.name == request.user }) else {
                throw .refused(404, "no such user: \(request.user)")
            }
            let (folder, path) = try sharableFolder(tx, cid, request.folder)
            for other in try tx.shares(container: cid) where other.folder != folder.id {
                if path.contains(other.folder) { throw .refused(409, "a folder above it is shared already") }
                if try ancestors(tx, cid, of: other.folder).contains(folder.id) {
                    throw .refused(409, "a folder inside it is shared already")
                }
            }
            let stored = try tx.upsertShare(StubShare(id: randomHex(bytes: 16), container: cid, folder: folder.id,
                                                      owner: owner, participant: request.user,
                                                      readOnly: request.readOnly, created: now))
            return wire(stored, name: folder.name)
        }
    }

    /// Stops sharing folder `folder` of container `cid` with `user`: 404 when it was not shared with them.
    func removeShare(_ cid: String, _ removal: WireShareRemoval) throws(ServerFailure) -> Int {
        guard WireRules.isValidID(removal.folder) else { throw .refused(400, "bad folder id") }
        if let problem = AccountNames.problem(removal.user, what: "user") { throw .refused(400, problem) }
        return try writing(cid) { (tx) throws(ServerFailure) in
            guard try tx.deleteShare(container: cid, folder: removal.folder, participant: removal.user) else {
                throw .refused(404, "that folder is not shared with \(removal.user)")
            }
            return 1
        }
    }

    /// `user` leaves share `id`: 404 when they take no part in it.
    func leaveShare(_ id: String, user: String) throws(ServerFailure) -> Int {
        guard WireShareRules.isValidID(id) else { throw .refused(400, "bad share id") }
        return try meta.write { (tx) throws(ServerFailure) in
            guard try tx.deleteShare(id: id, participant: user) else { throw .refused(404, "no such share") }
            return 1
        }
    }

    /// The shares `user` owns or takes part in, each with its folder's name now.
    func shares(of user: String) throws(ServerFailure) -> [WireShare] {
        try meta.read { (tx) throws(ServerFailure) in
            var list: [WireShare] = []
            for share in try tx.shares(user: user) {
                list.append(wire(share, name: try tx.item(share.container, share.folder)?.name ?? ""))
            }
            return list
        }
    }

    /// The live folder `id`, when it may be shared (inside Documents, not Documents itself), with the ids of
    /// the folders above it.
    private func sharableFolder(_ tx: any MetadataTransaction, _ cid: String,
                                _ id: String) throws(ServerFailure) -> (WireItem, above: [String]) {
        guard let item = try tx.item(cid, id), !item.deleted else { throw .refused(404, "no such folder") }
        guard item.kind == .dir else { throw .refused(400, "only a folder is shared") }
        let above = try ancestors(tx, cid, of: item)
        guard above.contains(WireRules.documentsID) else { throw .refused(400, "only a folder inside Documents is shared") }
        return (item, above)
    }

    /// The ids of the folders above `item`, its parent first, up to the root.
    private func ancestors(_ tx: any MetadataTransaction, _ cid: String, of item: WireItem) throws(ServerFailure) -> [String] {
        var path: [String] = []
        var parent = item.parent
        while let id = parent, path.count < WireShareRules.maxDepth {
            path.append(id)
            parent = try tx.item(cid, id)?.parent
        }
        return path
    }

    private func ancestors(_ tx: any MetadataTransaction, _ cid: String, of id: String) throws(ServerFailure) -> [String] {
        guard let item = try tx.item(cid, id) else { return [] }
        return try ancestors(tx, cid, of: item)
    }

    private func wire(_ share: StubShare, name: String) -> WireShare {
        WireShare(id: share.id, container: ContainerScope.wireID(share.container), folder: share.folder, name: name,
                  owner: share.owner, user: share.participant, readOnly: share.readOnly, created: share.created)
    }
}
