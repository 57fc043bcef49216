// Shared folders on the owner's side (docs/SHARING.md): `share add`, `share remove` and `share list` ask the
// remote through the adapter, and the status attributes of a shared folder and of everything in it
// (`isShared`, `sharedRole`, `sharedPermissions`, `sharedOwner`) are read from the records last fetched.
//
// What must hold: no attribute read waits on the network: the records are fetched at start, by every share
// command, and in the background when an attribute is read and they are over a minute old (so a share made on
// another device shows within a minute of a look), off the adapter's threads (`askRemote`); a remote that keeps
// no shares (an older one) leaves the records empty, the attributes absent, and is not asked again.
import Foundation
import UbiquityBase

/// A folder another user shares with this one, as the container of its view sees it (docs/SHARING.md).
public struct SharedWithMe: Sendable, Equatable {
    /// The share's id.
    public var id: String
    /// The owner's user name.
    public var owner: String
    public var readOnly: Bool
    public init(id: String, owner: String, readOnly: Bool) { self.id = id; self.owner = owner; self.readOnly = readOnly }
}

extension RemoteError {
    /// What a share's view's feed answers once this user is out of the share: 404 (the share is gone) or 401
    /// (the key revoked, or the user removed).
    static func endsAView(_ error: any Error) -> Bool {
        switch error as? RemoteError {
        case .notFound?, .unauthorized?: return true
        default: return false
        }
    }
}

/// The remote's records of a container's shared folders, as last fetched.
struct ShareRecords {
    var shares: [WireShare] = []
    /// When they were last fetched (the container's clock, ns); 0: never.
    var fetchedAt: Int64 = 0
    var fetching = false
    /// The remote keeps no shares (it does not know the route): it is not asked again.
    var unsupported = false

    /// How old the records may grow before an attribute read fetches them again in the background.
    static let freshNanoseconds: Int64 = 60_000_000_000
}

extension Container {
    /// This container's shares the remote lists now (owned and joined), answered once fetched; the records
    /// the attributes read are replaced by them.
    public func shareList(done: @escaping Answer<[WireShare]>) {
        let clock = config.environment.clock
        askRemote("listing the shares", done: done) { [shareRecords] remote throws(RemoteError) in
            let shares = try remote.shares()
            shareRecords.withLock { $0 = ShareRecords(shares: shares, fetchedAt: clock()) }
            return shares
        }
    }

    /// Shares folder `id` with user `user` (again: changes how): answers the share.
    public func addShare(_ id: String, user: String, readOnly: Bool, done: @escaping Answer<WireShare>) {
        shareErrors.withLock { $0[id] = nil }
        guard isSharable(id, done: done) else { return }
        askRemote("sharing \(path(of: id))", done: done) { [shareRecords, shareErrors] remote throws(RemoteError) in
            try Container.noting(in: shareErrors, on: id) { () throws(RemoteError) in
                let share = try remote.addShare(folder: id, user: user, readOnly: readOnly)
                shareRecords.withLock { records in
                    records.shares.removeAll { $0.folder == id && $0.user == user }
                    records.shares.append(share)
                }
                return share
            }
        }
    }

    /// Stops sharing folder `id` with user `user`.
    public func removeShare(_ id: String, user: String, done: @escaping Answer<Void>) {
        shareErrors.withLock { $0[id] = nil }
        askRemote("stopping sharing \(path(of: id))", done: done) { [shareRecords, shareErrors] remote throws(RemoteError) in
            try Container.noting(in: shareErrors, on: id) { () throws(RemoteError) in
                try remote.removeShare(folder: id, user: user)
                shareRecords.withLock { $0.shares.removeAll { $0.folder == id && $0.user == user } }
            }
        }
    }

    /// Every name `shareAttributes` may answer.
    public static let shareAttributeNames: Set<String> = ["isShared", "sharedRole", "sharedPermissions", "sharedOwner",
                                                          "shareError"]

    /// The share attributes of an item: those of the nearest shared folder at or above it (none outside one),
    /// and `shareError`, the remote's refusal of the last share command on this folder. In the view of a folder
    /// shared with this user, every item is in it: the participant's attributes.
    public func shareAttributes(_ id: String) -> [(name: String, value: String)] {
        if let mine = config.sharedWithMe {
            return [(name: "isShared", value: "1"), (name: "sharedRole", value: "participant"),
                    (name: "sharedPermissions", value: mine.readOnly ? "readOnly" : "readWrite"),
                    (name: "sharedOwner", value: mine.owner)]
        }
        let records = sharesWithRefresh(), refusal = shareErrors.withLock { $0[id] }
        var list: [(name: String, value: String)] = []
        let folders = Set(records.map(\.folder))
        if !folders.isEmpty, let shared = read({ s in s.nearest(of: id, in: folders) }),
           let owner = records.first(where: { $0.folder == shared })?.owner {
            list = [(name: "isShared", value: "1"), (name: "sharedRole", value: "owner"),
                    (name: "sharedPermissions", value: "readWrite"), (name: "sharedOwner", value: owner)]
        }
        if let refusal { list.append((name: "shareError", value: refusal)) }
        return list
    }

    /// In the view of a folder shared with this user: `body` runs once, when the share has ended (the remote
    /// no longer knows it: the owner stopped it, removed the user, or the user left it).
    public func onShareEnd(_ body: @escaping @Sendable () -> Void) { shareEnd.withLock { $0 = body } }

    /// The remote answered the view's feed 404 or 401: the share is gone, or this user is out (`onShareEnd`).
    func shareEnded() {
        guard config.sharedWithMe != nil, let body = shareEnd.withLock({ end in defer { end = nil }; return end }) else {
            return
        }
        log.info("the folder is no longer shared with this user")
        body()
    }

    /// The participant leaves the share this view shows (`share leave`); the view then ends (`onShareEnd`).
    public func leaveShare(done: @escaping Answer<Void>) {
        guard let share = config.sharedWithMe else {
            return done(.failure(.invalidArgument("only the mount of a folder shared with you is left")))
        }
        askRemote("leaving the share", done: { [weak self] result in
            if case .success = result { self?.shareEnded() }
            done(result)
        }) { remote throws(RemoteError) in try remote.leaveShare(id: share.id) }
    }

    /// Refuses a change in the view of a folder shared with this user, at once, with nothing queued: read-only,
    /// as permission denied; read-write, as a read-only file system until writing through a view is built (the
    /// remote refuses it: a change made here could never go up).
    func refuseChangeInAShare() throws(CoreError) {
        guard let mine = config.sharedWithMe else { return }
        if mine.readOnly { throw .accessDenied("the folder is shared with you read-only") }
        throw .readOnly
    }

    /// Runs a share command's request, keeping the remote's refusal as the folder's `shareError` (a plain
    /// line the command prints: setxattr(2) carries only an errno), or clearing it.
    private static func noting<T>(in errors: Locked<[String: String]>, on id: String,
                                  _ body: () throws(RemoteError) -> T) throws(RemoteError) -> T {
        do throws(RemoteError) {
            let answer = try body()
            errors.withLock { $0[id] = nil }
            return answer
        } catch {
            errors.withLock { $0[id] = plainRefusal(error) }
            throw error
        }
    }

    /// What the remote said, without the client's framing where it gave a reason.
    static func plainRefusal(_ error: RemoteError) -> String {
        switch error {
        case .notFound(let m), .rejected(_, let m), .conflict(let m, _): return m
        default: return error.description
        }
    }

    /// The records as they are, fetched again in the background first when they are over a minute old.
    private func sharesWithRefresh() -> [WireShare] {
        let now = now()
        let (shares, stale) = shareRecords.withLock { r in
            let stale = !r.fetching && !r.unsupported && now - r.fetchedAt > ShareRecords.freshNanoseconds
            if stale { r.fetching = true }
            return (r.shares, stale)
        }
        if stale { refreshShares() }
        return shares
    }

    /// Fetches the records in the background (at start, and when they are stale): a remote that cannot be
    /// reached now leaves them as they are, for a minute.
    func refreshShares() {
        guard config.environment.backgroundTransfers, config.sharedWithMe == nil else { return }
        shareRecords.withLock { $0.fetching = true }
        let clock = config.environment.clock
        shareList { [log, shareRecords] result in
            guard case .failure(let error) = result else { return }
            log.debug("the shares were not fetched: \(error)")
            shareRecords.withLock { records in
                records.fetching = false
                records.fetchedAt = clock()
                if case .notFound = error { records.unsupported = true }
            }
        }
    }

    /// True for a folder that may be shared: one the remote has (a new one is uploaded first). Else `done` is
    /// answered.
    private func isSharable<T>(_ id: String, done: Answer<T>) -> Bool {
        guard let item = item(id) else { done(.failure(.notFound)); return false }
        guard item.isDirectory else { done(.failure(.notDirectory)); return false }
        guard item.remoteVersion != 0 else {
            done(.failure(.busy("\(path(of: id)) is not uploaded yet; run 'ubiquityfs sync --wait' first")))
            return false
        }
        return true
    }
}

extension CoreState {
    /// The nearest of `folders` at or above item `id`, walking up its parents here.
    func nearest(of id: String, in folders: Set<String>) -> String? {
        var cursor: String? = id
        var steps = 0
        while let c = cursor, steps < WireShareRules.maxDepth {
            if folders.contains(c) { return c }
            cursor = items[c]?.parent
            steps += 1
        }
        return nil
    }
}
