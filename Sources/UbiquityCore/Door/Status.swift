// Sync status and the actions on it: what `getfattr` reads and `setfattr` (or the command) asks for.
// Pins are this device's own and are not synced; the user's `user.*` attributes are synced as metadata.
//
// What must hold: a status is read in one look at the state, so its attributes agree with each other;
// `isUploaded` only for an item on the remote with nothing pending (the root: nothing pending in the
// container). A pin is saved with `store.save`, never as a local change: it never enters the journal. A user
// attribute's change is a local change (pushed), refused before anything is saved when the item's attributes
// would pass 64 KiB (`WireRules.maxXattrBytes`, counted as the remote counts them); setting the same value
// changes nothing. Downloads asked for here start after the lock is let go.
import Foundation
import UbiquityBase

extension Container {
    /// The status of an item as the `user.ubiquity.*` attributes show it.
    public func status(_ id: String) throws(CoreError) -> ItemStatus {
        try read { (s) throws(CoreError) -> ItemStatus in
            guard let item = s.items[id], !item.deleted else { throw .notFound }
            let t = s.transfers[id] ?? TransferState()
            let current = item.downloadingStatus == .current
            // The root is never pushed itself: it reads as uploaded once no change of the container waits. A
            // journal that cannot be read reads as not uploaded, and the pusher's pass puts the cause in the
            // root's uploadingError (PushFailureTests): the status stays readable, to say why.
            let uploaded = id == s.rootID ? (try? s.changesToPush()) == 0
                : !item.isPending && item.remoteVersion > 0 && !s.owesTimeAfterEntries(id)
            return ItemStatus(
                downloadingStatus: item.downloadingStatus,
                isDownloading: t.isDownloading,
                percentDownloaded: current ? 100 : (t.isDownloading ? percent(t.downloadedBytes, t.downloadTotal) : 0),
                isUploaded: uploaded,
                isUploading: t.isUploading,
                percentUploaded: uploaded ? 100 : (t.isUploading ? percent(t.uploadedBytes, t.uploadTotal) : 0),
                hasUnresolvedConflicts: !item.conflicts.isEmpty,
                downloadingError: t.downloadError,
                // The root's: the pusher could not read the journal (Sync.pushAll), or the key was refused.
                uploadingError: item.isPending ? t.uploadError
                    : id == s.rootID ? t.uploadError ?? (s.keyRefused ? Self.keyRefusal : nil) ?? s.quotaRefusal : nil,
                pinned: s.isPinned(id),
                isUbiquitous: !item.isLocalOnly,
                isExcludedFromSync: item.excluded)
        }
    }

    /// What a desktop notice tells (the command's DesktopNotices): the paths of pending items whose last push
    /// failed, with why.
    public func uploadFailures() -> [(path: String, error: String)] {
        read { s in
            s.transfers.compactMap { id, t in
                guard let error = t.uploadError, let item = s.items[id], item.isPending else { return nil }
                return (s.path(of: id), error)
            }
        }
    }

    /// True while the remote refuses this device's key.
    public var isKeyRefused: Bool { read { $0.keyRefused } }

    /// True while remote changes wait for room on the store's full disk (the root's `isStoreFull`).
    public var isStoreFull: Bool { read { $0.storeFullSince != nil } }

    /// Records that a push of the item failed, with the reason `uploadingError` shows.
    func recordUploadFailure(_ id: String, _ error: Error) {
        mutate { (s: inout CoreState) in
            s.updateTransfer(id) {
                $0.isUploading = false
                $0.uploadError = "\(error)"
                $0.overQuota = (error as? RemoteError)?.isOverQuota ?? false
            }
        }
    }

    /// Forgets a recorded push failure of the item (no notice when there was none).
    func clearUploadFailure(_ id: String) {
        mutate { (s: inout CoreState) in
            if s.transfers[id]?.uploadError != nil { s.updateTransfer(id) { $0.uploadError = nil } }
        }
    }
    /// Starts downloading a file, or every file below a directory, in the background.
    public func requestDownload(_ id: String) throws(CoreError) {
        let ids = try read { (s) throws(CoreError) -> [String] in
            guard s.items[id].map({ !$0.deleted }) ?? false else { throw .notFound }
            return s.filesBelow(id).filter { !$0.isCurrent && $0.remoteVersion > 0 }.map(\.id)
        }
        for file in ids { downloads.start(file) }
    }

    /// Pins or unpins an item; pinning downloads it (and, for a directory, everything in it, now and later).
    public func setPinned(_ id: String, _ on: Bool) throws(CoreError) {
        try mutate { (s: inout CoreState) throws(CoreError) in
            guard var item = s.items[id], !item.deleted else { throw .notFound }
            guard item.pinned != on else { return }
            item.pinned = on
            item.ctime = now() // an attribute changed, as for any setxattr
            try onStore { () throws(StoreError) in try s.store.save(item) }
            s.items[id] = item
        }
        if on { try requestDownload(id) }
    }

    /// Marks every conflict version of a file resolved, keeping the current content.
    public func resolveKeepingCurrent(_ id: String) throws(CoreError) {
        try refuseChangeInAShare()
        try mutate { (s: inout CoreState) throws(CoreError) in
            guard var item = s.items[id], !item.deleted else { throw .notFound }
            guard !item.conflicts.isEmpty else { return }
            try s.rememberResolved(item.conflicts.map(\.id))
            s.pruneConflictFiles(id, old: item.conflicts, new: [])
            item.conflicts = []
            item.metaDirty = true
            try s.saveLocalChange(item)
        }
    }

    // MARK: the user's own extended attributes

    public func userXattr(_ id: String, _ name: String) throws(CoreError) -> [UInt8] {
        try read { (s) throws(CoreError) -> [UInt8] in
            guard let item = s.items[id], !item.deleted else { throw .notFound }
            guard let value = item.xattrs[name] else { throw .noAttribute }
            return value
        }
    }

    public func userXattrNames(_ id: String) -> [String] {
        read { s in s.items[id]?.xattrs.keys.sorted() ?? [] }
    }

    /// Sets a user attribute; `create` fails if it exists, `replace` if it does not (setxattr's flags).
    public func setUserXattr(_ id: String, _ name: String, _ value: [UInt8], create: Bool, replace: Bool) throws(CoreError) {
        try refuseChangeInAShare()
        try mutate { (s: inout CoreState) throws(CoreError) in
            guard var item = s.items[id], !item.deleted else { throw .notFound }
            let exists = item.xattrs[name] != nil
            if create && exists { throw .exists }
            if replace && !exists { throw .noAttribute }
            item.xattrs[name] = value
            let total = item.xattrs.reduce(0) { $0 + WireRules.xattrBytes(name: $1.key, valueBytes: $1.value.count) }
            if total > WireRules.maxXattrBytes { throw .tooBig }
            if exists && item.xattrs[name] == s.items[id]?.xattrs[name] { return }
            item.metaDirty = true
            item.ctime = now()
            try s.saveLocalChange(item)
        }
    }

    public func removeUserXattr(_ id: String, _ name: String) throws(CoreError) {
        try refuseChangeInAShare()
        try mutate { (s: inout CoreState) throws(CoreError) in
            guard var item = s.items[id], !item.deleted else { throw .notFound }
            guard item.xattrs.removeValue(forKey: name) != nil else { throw .noAttribute }
            item.metaDirty = true
            item.ctime = now()
            try s.saveLocalChange(item)
        }
    }

    // MARK: the mount root

    /// The remote answered (the feed, a download): the mount is online, and the downloads and uploads that
    /// waited for it go on.
    func remoteAnswered() {
        let wasAway = update { s -> Bool in
            defer { s.offlineSince = nil; s.keyRefused = false }
            return s.offlineSince != nil
        }
        // What waited for it goes now, whatever its own wait has grown to: a download's next try, and the
        // pusher's (up to 30 s after a long outage).
        if wasAway {
            downloads.remoteIsBack()
            sync.wakePusher()
        }
    }

    /// What the root's `uploadingError` says while the remote refuses the key.
    static let keyRefusal = "the remote refused this device's key (revoked?): every change waits here until the "
        + "mount is given a valid key (mount --token-file)"

    /// The remote answered, refusing this device's key: it is reachable, and nothing goes up or down.
    func remoteRefusedKey() {
        let first = update { s -> Bool in
            defer { s.offlineSince = nil; s.keyRefused = true }
            return !s.keyRefused
        }
        if first { Logger("sync").error(Self.keyRefusal) }
    }

    /// The remote could not be reached: the mount is offline, since the first such failure.
    func remoteUnreachable() {
        update { s in if s.offlineSince == nil { s.offlineSince = now() } }
    }

    /// True while the remote is known to be unreachable.
    var isOffline: Bool { offlineSince != nil }

    /// The bytes of the local copies of files in the store (what `du` of the mount counts).
    public var localBytes: Int64 { cacheStatus().used }

    /// Whether sync is paused (`ubiquityfs pause`): the loops neither push nor pull, and a download fails at once.
    public var isSyncPaused: Bool { read { $0.syncPaused } }

    /// What an open of content that is not local says (its `downloadingError`) while sync is paused.
    static let pausedRefusal = "sync of this container is paused (ubiquityfs resume): nothing goes to or comes "
        + "from the remote until then"

    /// Pauses or resumes sync, kept across remounts. Resuming wakes the loops and downloads what is pinned.
    public func setSyncPaused(_ paused: Bool) throws(CoreError) {
        let changed = try mutate { (s: inout CoreState) throws(CoreError) -> Bool in
            guard s.syncPaused != paused else { return false }
            try onStore { () throws(StoreError) in try s.store.setMeta(CoreState.syncPausedKey, paused ? "1" : "0") }
            s.syncPaused = paused
            return true
        }
        guard changed else { return }
        Logger("sync").info(paused ? "sync paused" : "sync resumed")
        if !paused {
            sync.wake()
            downloadPinned()
        }
    }

    /// Since when the remote is known to be unreachable; nil while it answers.
    var offlineSince: Int64? { read { $0.offlineSince } }

    /// The attributes of the mount root alone, by name without the `user.ubiquity.` prefix, in listing order:
    /// how many changes wait to upload, whether (and since when, in UTC) the remote is away, whether (and
    /// since when) remote changes wait for room on the store's full disk, and the local
    /// store's usage, limit and latest evictions (read-only).
    public func rootAttributes() throws(CoreError) -> [(name: String, value: String)] {
        let (since, fullSince, overQuota) = read { ($0.offlineSince, $0.storeFullSince, $0.isOverQuota) }
        let pending: Int
        do { pending = try pendingChanges } catch { throw CoreError(error) }
        var list = [(name: "pendingChanges", value: String(pending)),
                    (name: "isOffline", value: since == nil ? "0" : "1")]
        if let since { list.append((name: "offlineSince", value: iso8601(nanoseconds: since))) }
        list.append((name: "isStoreFull", value: fullSince == nil ? "0" : "1"))
        if let fullSince { list.append((name: "storeFullSince", value: iso8601(nanoseconds: fullSince))) }
        list.append((name: "isOverQuota", value: overQuota ? "1" : "0"))
        list.append((name: "syncPaused", value: isSyncPaused ? "1" : "0"))
        let cache = cacheStatus()
        list.append((name: "cacheUsed", value: String(cache.used)))
        list.append((name: "cacheLimit", value: cache.limit.map(String.init) ?? "none"))
        // A line "N files, B bytes since the mount", then the latest evictions, newest first: "TIME BYTES PATH".
        let evicted = cache.recent.map { "\(iso8601(nanoseconds: $0.time)) \($0.bytes) \($0.path)" }
        list.append((name: "recentlyEvicted",
                     value: (["\(cache.evictedFiles) files, \(cache.evictedBytes) bytes since the mount"] + evicted)
                        .joined(separator: "\n")))
        if let querySocket { list.append((name: "querySocket", value: querySocket)) }
        return list
    }
}

/// A wall-clock time as `2026-12-01T07:09:53Z`.
public func iso8601(nanoseconds: Int64) -> String {
    let f = ISO8601DateFormatter()
    f.timeZone = TimeZone(identifier: "UTC")
    return f.string(from: Date(timeIntervalSince1970: Double(nanoseconds) / 1e9))
}

extension CoreState {
    /// Changes the live transfer state of an item (or a conflict version's key).
    mutating func updateTransfer(_ id: String, _ change: (inout TransferState) -> Void) {
        var t = transfers[id] ?? TransferState()
        change(&t)
        if t.uploadError == nil { t.overQuota = false }
        if t.overQuota { quotaRefused.insert(id) } else { quotaRefused.remove(id) }
        transfers[id] = t
        store.changes?.note(id)
    }

    /// Why the remote refuses to store more for this user (the last quota refusal of a change still waiting to
    /// upload), or nil.
    var quotaRefusal: String? {
        for id in quotaRefused where items[id]?.isPending == true { return transfers[id]?.uploadError }
        return nil
    }

    var isOverQuota: Bool { quotaRefusal != nil }

    /// True if the item or a directory above it is pinned.
    func isPinned(_ id: String) -> Bool {
        var cur: String? = id
        while let c = cur, let item = items[c] {
            if item.pinned { return true }
            cur = item.parent
        }
        return false
    }

    /// The files at and below an item (links, fifos and sockets have no content: never listed).
    func filesBelow(_ id: String) -> [Item] {
        guard let item = items[id], !item.deleted else { return [] }
        if !item.isDirectory { return item.hasContent ? [item] : [] }
        return (children[id] ?? [:]).values.flatMap { filesBelow($0) }
    }
}
