// What the daemon serves of one container (its store, its sync core, its live query, its key-value store, its
// file system and its desktop notices), and, for a mount of several, the account that holds them.
//
// What must hold: a container's parts start in the order they depend on each other (the store, waiting for a
// daemon still letting go of it; the remote checked, fatal only for a store that never synced; the core; the
// query server and the key-value store; `fs.kv` before the mount) and stop in the reverse order once its file
// system's loop has ended. In a mount of several, each container keeps its own store (DATA/stores/ID/DEVICE,
// the very store a mount of that container alone uses, or --store DIR/ID), its own feed and its own key-value
// store; a container that cannot be opened fails the mount while it starts, and is tried again later when it
// appears under --all-containers.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore
import UbiquityFUSE
import UbiquityHTTP

final class ServedContainer: Sendable {
    /// The remote every container of the mount talks to.
    struct Remote: Sendable {
        let urls: [String]
        let token: String
        /// The umask the daemon was started with (the cap of modes of arriving items).
        let userMask: UInt32

        /// A client for the account's own calls (its containers, its usage), not a container's.
        func accountClient(_ options: MountCommand.Options) -> HTTPRemoteClient {
            HTTPRemoteClient(baseURLs: urls, token: token, container: options.containers.first ?? defaultContainer,
                             timeouts: HTTPTimeouts(), device: options.device, caFile: options.caFile)
        }
    }

    let id: String
    let store: String
    let core: Container
    let fs: FileSystem
    private let query: QueryServer?
    private let kv: KeyValueStore?
    private let notices = Locked<DesktopNotices?>(nil)
    private let options: MountCommand.Options
    private static let log = Logger("daemon")

    private init(id: String, store: String, core: Container, fs: FileSystem, query: QueryServer?, kv: KeyValueStore?,
                 options: MountCommand.Options) {
        self.id = id; self.store = store; self.core = core; self.fs = fs; self.query = query; self.kv = kv
        self.options = options
    }

    /// Opens container `id`'s store, connects it to the remote and starts its core, live query and key-value
    /// store; its file system is ready to mount.
    static func start(_ id: String, options: MountCommand.Options, remote: Remote,
                      usage: AccountUsage) throws -> ServedContainer {
        let client = HTTPRemoteClient(baseURLs: remote.urls, token: remote.token, container: id,
                                      timeouts: HTTPTimeouts(downloadSilenceSeconds: options.downloadTimeout),
                                      device: options.device, caFile: options.caFile)
        return try start(id, client: client, options: options, remote: remote, usage: usage, sharedWithMe: nil)
    }

    /// The view of `share`, a folder another user shares with this one (`mount --share`, docs/SHARING.md): a
    /// container of its own whose root is the folder, with its own store (that of id `share-ID`), read-only
    /// when shared so, without a key-value store (a view has none).
    static func startView(of share: WireShare, options: MountCommand.Options, remote: Remote,
                          usage: AccountUsage) throws -> ServedContainer {
        let client = HTTPRemoteClient(baseURLs: remote.urls, token: remote.token, container: share.container,
                                      timeouts: HTTPTimeouts(downloadSilenceSeconds: options.downloadTimeout),
                                      device: options.device, caFile: options.caFile).view(of: share)
        let served = try start("share-" + share.id, client: client, options: options, remote: remote, usage: usage,
                               sharedWithMe: SharedWithMe(id: share.id, owner: share.owner, readOnly: share.readOnly))
        // The share gone, the mount ends as if unmounted (SIGTERM ends the session's loop), and the daemon
        // removes the view's store: it holds the owner's files, which this user may no longer read.
        served.core.onShareEnd { [served] in
            log.info("\(share.owner)/\(share.name) is no longer shared with this user: unmounting")
            served.ended.withLock { $0 = true }
            kill(getpid(), SIGTERM)
        }
        return served
    }

    /// A share's view whose share has ended: its store goes once the mount is down.
    let ended = Locked(false)

    private static func start(_ id: String, client: HTTPRemoteClient, options: MountCommand.Options, remote: Remote,
                              usage: AccountUsage, sharedWithMe: SharedWithMe?) throws -> ServedContainer {
        let path = options.store(of: id)
        try makeDirectories(path)
        let store = try openStore(path)
        // Before the core opens it: from then on the store is only reached through the core's locked state
        // (SQLite is opened without its own mutex).
        try store.bind(container: id)
        var config = ContainerConfig(device: options.device)
        config.downloadTimeoutSeconds = options.downloadTimeout
        config.arrivingModeCap = remote.userMask & 0o022
        config.sharedWithMe = sharedWithMe
        (config.cacheLimit, config.minFreeBytes) = storeLimits(path, options)
        log.info("\(id): local store limit \(config.cacheLimit) bytes, keeping \(config.minFreeBytes) bytes free")
        let core = try Container(store: store, remote: client, config: config)
        let reachable = try checkRemote(client, url: remote.urls.joined(separator: ","), fresh: try core.isFresh,
                                        tokenFile: options.tokenFile)
        try core.start(initialSync: reachable)
        let query = serveQuery(core, store: path)
        let fs = FileSystem(core: core, downloadPolicy: DownloadPolicy(noDownloadFor: options.noDownloadFor))
        fs.passthrough = options.passthrough
        var kv: KeyValueStore?
        if sharedWithMe == nil {
            // The key-value store is bound to the account (the token) and the container.
            kv = try KeyValueStore(directory: path, device: options.device,
                                   account: String(sha256Hex(Array(remote.token.utf8)).prefix(16)) + ":" + id,
                                   remote: client)
            kv?.start()
        }
        fs.kv = kv
        fs.accountAttributes = { [usage, core] in usage.attributes(container: id, local: core.localBytes) }
        return ServedContainer(id: id, store: path, core: core, fs: fs, query: query, kv: kv, options: options)
    }

    /// Desktop notices of this container, raised for the mount at `mountpoint` (unless --no-notify).
    func startNotices(mountpoint: String) {
        guard options.desktopNotices, let n = DesktopNotices(core: core, mountpoint: mountpoint) else { return }
        n.start()
        notices.withLock { $0 = n }
    }

    /// Stops what `start` started, in the reverse order (after the file system's loop ended).
    func stop() {
        notices.withLock { $0 }?.stop()
        kv?.stop()
        query?.stop()
        core.stop()
    }

    /// Serves the live query on a socket in the store, named by the root's `querySocket` attribute. A mount
    /// without it still works.
    private static func serveQuery(_ core: Container, store: String) -> QueryServer? {
        do {
            let server = QueryServer(core: core, path: try querySocketPath(store: store))
            try server.start()
            core.querySocket = server.path
            return server
        } catch {
            log.warning("no live query: \(error)")
            return nil
        }
    }

    /// Where the query socket goes: in the store, or, when that path is longer than a socket's address may be
    /// (108 bytes: a store deep in a folder, a container's store inside a --store folder), in a folder of this
    /// user's alone (XDG_RUNTIME_DIR, else /tmp, `ubiquityfs-UID`, mode 0700), named by the store's path.
    static func querySocketPath(store: String) throws -> String {
        let inStore = store + "/query.sock"
        if inStore.utf8.count < 108 { return inStore } // (sun_path: 108 bytes with the NUL)
        let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"].flatMap { $0.hasPrefix("/") && $0.utf8.count < 48 ? $0 : nil }
        let dir = (runtime ?? "/tmp") + "/ubiquityfs-\(geteuid())"
        _ = mkdir(dir, 0o700)
        var st = stat()
        guard lstat(dir, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == geteuid(), st.st_mode & 0o077 == 0 else {
            throw MountFailure("\(dir) is not a folder of this user's alone (mode 0700): the query socket cannot go there")
        }
        return dir + "/" + sha256Hex(Array(store.utf8)).prefix(24) + ".sock"
    }

    /// The local store limit and the free space kept, in bytes, percentages taken of the store's file system.
    private static func storeLimits(_ path: String, _ options: MountCommand.Options) -> (Int64, Int64) {
        var vfs = statvfs()
        let total = statvfs(path, &vfs) == 0 ? Int64(vfs.f_blocks) * Int64(vfs.f_frsize) : 0
        let limit = (options.cacheSize ?? MountCommand.defaultCacheSize).bytes(of: total)
        let minFree = options.minFree?.bytes(of: total) ?? MountCommand.defaultMinFree(fileSystemBytes: total)
        return (max(limit, 1), minFree)
    }

    /// Opens the store, waiting a little for a daemon that is still finishing to let go of it.
    private static func openStore(_ path: String) throws -> Store {
        var lastError: Error?
        for _ in 0..<50 {
            do { return try Store(directory: path) } catch {
                lastError = error
                guard case StoreError.inUse = error else { break }
                usleep(200_000)
            }
        }
        throw MountFailure("\(lastError!)")
    }

    /// Checks the remote answers and accepts the token, trying each server once. An unreachable remote is fatal
    /// only for a store that has never synced; otherwise the mount starts from the store's last known state.
    private static func checkRemote(_ client: HTTPRemoteClient, url: String, fresh: Bool, tokenFile: String?) throws -> Bool {
        do {
            try firstAnswer(client)
            _ = try client.openContainer()
            return true
        } catch RemoteError.unauthorized {
            throw MountFailure("the remote at \(url) refused the token" + (tokenFile.map { " in \($0)" } ?? ""))
        } catch RemoteError.unreachable(let why) {
            if fresh { throw MountFailure("cannot reach the remote at \(url): \(why)") }
            log.warning("the remote at \(url) is unreachable (\(why)); starting from the store's last known state")
            return false
        } catch {
            throw MountFailure("the remote at \(url) failed to open \(client.container): \(error)")
        }
    }

    /// Health from the first server that answers (each failure moves the client on to the next).
    private static func firstAnswer(_ client: HTTPRemoteClient) throws(RemoteError) {
        for _ in 1..<client.baseURLs.count {
            do { return try client.health() } catch {
                switch error {
                case .unreachable, .server(502...504, _): continue
                default: throw error
                }
            }
        }
        try client.health()
    }
}

/// The containers of a mount of several, each mounted on its folder of the account root and served by a thread
/// of its own until that folder is unmounted.
final class ServedAccount: Sendable {
    let root: AccountRoot
    private let options: MountCommand.Options
    private let remote: ServedContainer.Remote
    private let usage: AccountUsage
    private let client: HTTPRemoteClient
    private struct State {
        var served: [String: ServedContainer] = [:]
        /// Containers whose file system's loop has not ended yet.
        var running = 0
        var stopping = false
        var failure: Error?
        /// Containers --all-containers could not open, with why: said once at warning level, then quietly.
        var unopened: [String: String] = [:]
    }
    private let state = Locked(State())
    private let log = Logger("daemon")
    /// How often --all-containers asks the remote for new containers.
    static let followSeconds: UInt32 = 2

    init(root: AccountRoot, options: MountCommand.Options, remote: ServedContainer.Remote, usage: AccountUsage) {
        self.root = root; self.options = options; self.remote = remote; self.usage = usage
        client = remote.accountClient(options)
        root.accountAttributes = { [state, usage] in
            usage.attributes(container: nil, local: state.withLock { $0.served.values }.reduce(0) { $0 + $1.core.localBytes })
        }
    }

    var failure: Error? { state.withLock { $0.failure } }

    /// Opens and mounts each container not yet served, in order.
    func openAll(_ ids: [String]) throws {
        for id in ids where isNew(id) { try open(id) }
    }

    /// Whether container `id` is not served yet, and the mount goes on.
    private func isNew(_ id: String) -> Bool { state.withLock { $0.served[id] == nil && !$0.stopping } }

    private func open(_ id: String) throws {
        let served = try ServedContainer.start(id, options: options, remote: remote, usage: usage)
        let path = options.mountpoint + "/" + root.add(id, served.fs)
        do {
            try served.fs.mount(at: path, fsname: "ubiquityfs:\(id)")
        } catch {
            served.stop()
            throw MountFailure("cannot mount \(id) on \(path): \(error)")
        }
        served.startNotices(mountpoint: path)
        state.withLock { $0.served[id] = served; $0.running += 1 }
        let thread = Thread { [self] in
            served.fs.run(handlesSignals: false)
            served.stop()
            log.info("unmounted \(id) at \(path)")
            let stopping = state.withLock(notifying: true) { s -> Bool in
                s.running -= 1
                s.served[id] = nil
                return s.stopping
            }
            if !stopping { root.remove(id) } // (gone from the remote's list: the folder goes too)
        }
        thread.start()
        log.info("mounted \(id) at \(path), store \(served.store)")
    }

    /// Every container of the key's user on the remote.
    func remoteContainers() throws -> [String] {
        do { return try client.containerIDs() } catch {
            throw MountFailure("cannot list the containers on the remote: \(error)")
        }
    }

    /// --all-containers: every few seconds, mounts the containers made since and lets go of those the remote no
    /// longer lists (a container that holds nothing: its data deleted whole and its Recently Deleted emptied),
    /// until the mount ends. A container named with --containers stays, and so does one with changes of this
    /// device still to upload. A container that cannot be opened is tried again at the next look (`tryOpen`).
    func followContainers() {
        while !state.withLock({ $0.stopping }) {
            sleep(Self.followSeconds)
            do {
                let listed = try remoteContainers()
                for id in listed where isNew(id) { tryOpen(id) }
                let gone = state.withLock { s in s.served.filter { !listed.contains($0.key) && !options.containers.contains($0.key) } }
                for (id, served) in gone where ((try? served.core.pendingChanges) ?? 1) == 0 {
                    log.info("\(id) holds nothing on the remote any more: its folder goes")
                    detachMount(options.mountpoint + "/" + AccountRoot.folderName(id))
                }
            } catch {
                log.warning("\(error)")
            }
        }
    }

    /// Opens a container --all-containers found; one that cannot be opened is logged (a warning the first time
    /// and when the reason changes, then at debug level: it is tried again every few seconds) and left for later.
    private func tryOpen(_ id: String) {
        do {
            try open(id)
            state.withLock { $0.unopened[id] = nil }
        } catch {
            let why = "\(error)"
            let said = state.withLock { s -> Bool in
                defer { s.unopened[id] = why }
                return s.unopened[id] == why
            }
            if said { log.debug("still cannot open \(id): \(why)") } else { log.warning("cannot open \(id) (tried again every \(Self.followSeconds) s): \(why)") }
        }
    }

    /// A start that failed: says why, lets go of what was mounted, and ends the root's loop.
    func fail(_ error: Error) {
        state.withLock { $0.failure = error }
        detachMount(options.mountpoint) // the root's loop then reads the end of its connection
    }

    /// Before the root is unmounted: each container's folder is detached and its loop waited for (it stops its
    /// container as it ends).
    func stopAll() {
        let paths = state.withLock { s -> [String] in
            s.stopping = true
            return s.served.keys.map { options.mountpoint + "/" + AccountRoot.folderName($0) }
        }
        for path in paths { detachMount(path) }
        state.wait(until: Date(timeIntervalSinceNow: 30), for: { $0.running == 0 }, then: { _ in })
    }
}
