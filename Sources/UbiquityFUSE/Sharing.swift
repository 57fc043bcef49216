// Shared folders through the mount (docs/SHARING.md), for `ubiquityfs share`: `setfattr -n
// user.ubiquity.shareAdd -v "USER readWrite|readOnly" FOLDER` shares a folder, `user.ubiquity.shareRemove` (USER)
// stops it, `getfattr -n user.ubiquity.shares MOUNT` reads the container's shares as JSON, and
// `user.ubiquity.shareLeave` set on the root of a folder shared with this user leaves it. A refusal's
// reason is the folder's `shareError` attribute (setxattr(2) carries only an errno). None of these is listed.
//
// What must hold: each is a request to the remote answered through a completion, so no FUSE worker waits on
// the network (as history and rewind, TrashFiles.swift); a malformed value is EINVAL before anything is asked.
import Foundation
import UbiquityBase
import UbiquityCore

extension FileSystem {
    static let shareAddAttribute = StatusAttribute.prefix + "shareAdd"
    static let shareRemoveAttribute = StatusAttribute.prefix + "shareRemove"
    static let sharesAttribute = StatusAttribute.prefix + "shares"
    static let shareLeaveAttribute = StatusAttribute.prefix + "shareLeave"

    /// True for the share commands: set on an item, or on the root (`shareLeave`), or read on the root (`shares`).
    func isShareRequest(_ id: String, _ name: String) -> Bool {
        guard case .item = route(id) else { return false }
        if name == FileSystem.sharesAttribute || name == FileSystem.shareLeaveAttribute { return id == core.rootID }
        return name == FileSystem.shareAddAttribute || name == FileSystem.shareRemoveAttribute
    }

    /// `shareAdd` (USER, then readWrite or readOnly) or `shareRemove` (USER) set on a folder, or `shareLeave` on
    /// the root of a share's view.
    func setShare(_ id: String, _ name: String, _ value: [UInt8], done: @escaping Completion<Void>) {
        if name == FileSystem.shareLeaveAttribute { return core.leaveShare { done($0.mapError { .core($0) }) } }
        let words = String(decoding: value, as: UTF8.self).split(separator: " ").map(String.init)
        let adding = name == FileSystem.shareAddAttribute
        guard let user = words.first, words.count == (adding ? 2 : 1),
              !adding || ["readWrite", "readOnly"].contains(words[1]) else {
            let form = adding ? "USER readWrite|readOnly" : "USER"
            return done(.failure(.core(.invalidArgument("\(name) takes \(form)"))))
        }
        if adding {
            core.addShare(id, user: user, readOnly: words[1] == "readOnly") { done($0.map { _ in }.mapError { .core($0) }) }
        } else {
            core.removeShare(id, user: user) { done($0.mapError { .core($0) }) }
        }
    }

    /// `shares` read on the root: `{"shares": [...]}`, each share with the path of its folder here (none for a
    /// share of another user's folder).
    func readShares(done: @escaping Completion<[UInt8]>) {
        core.shareList { [core] result in
            done(result.mapError { .core($0) }.map { shares in
                let shown = shares.map { share in
                    ShownShare(share: share, path: core.item(share.folder) == nil ? nil : core.path(of: share.folder))
                }
                return FileSystem.fittingAnAttribute(shown) { kept, left in
                    (try? Array(JSONEncoder.wire.encode(ShareListing(shares: kept, left: left)))) ?? []
                }
            })
        }
    }
}

/// A share as `user.ubiquity.shares` lists it: the remote's record, and where its folder is in this mount.
struct ShownShare: Encodable {
    var share: WireShare
    var path: String?

    func encode(to encoder: Encoder) throws {
        try share.encode(to: encoder)
        var c = encoder.container(keyedBy: Key.self)
        try c.encodeIfPresent(path, forKey: .path)
    }
    private enum Key: String, CodingKey { case path }
}

/// The value of `user.ubiquity.shares`: those that do not fit in an attribute are left out, and counted.
struct ShareListing: Encodable {
    var shares: [ShownShare]
    var left: Int
}
