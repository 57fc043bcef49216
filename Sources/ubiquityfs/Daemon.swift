// The mount daemon: opens the store, connects to the remote (starting the embedded stub if asked), starts
// the sync core, mounts, tells the waiting `mount` command it is ready, and serves until unmounted.
//
// What must hold: things start in the order they depend on each other: the store (waiting for a daemon still
// letting go of it), the remote checked (fatal only for a store that never synced), the core, the query server
// and the key-value store, `fs.kv` set before `mount`, and "ready" told only once the kernel has the mount; the
// `defer`s stop them in the reverse order once the loop ends. After the core opens the store only its locked
// state reaches that connection (the key-value store opens one of its own on the same database file). A stub
// process this daemon started is stopped when it ends, even if another mount reused it meanwhile.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore
import UbiquityFUSE
import UbiquityHTTP

struct Daemon {
    let options: MountCommand.Options
    /// Started by `mount`: report readiness on stderr, then log only to the file.
    let notify: Bool
    private let log = Logger("daemon")

    init(options: MountCommand.Options, notify: Bool) {
        self.options = options
        self.notify = notify
    }

    func run() throws {
        if notify { setsid() }
        // The store holds every name, hash, attribute and key-value of the container: what the daemon makes
        // there (the database and its log, content, staging, the log file, the query socket) is its user's
        // alone, whatever the umask it was started with. Modes of items come from the kernel's requests, not
        // from this mask.
        let userMask = UInt32(umask(0o077))
        try makeDirectories(options.store)
        let logFile = options.logFile ?? (notify ? options.store + "/ubiquityfs.log" : nil)
        Log.shared.configure(level: options.logLevel, path: logFile)
        let store = try openStore()
        // Before the core opens it: from then on the store is only reached through the core's locked state
        // (SQLite is opened without its own mutex).
        try store.bind(container: options.container)
        let (urls, token, stub) = try remote()
        defer { stub?.stop() }
        let client = HTTPRemoteClient(baseURLs: urls, token: token, container: options.container,
                                      timeouts: HTTPTimeouts(downloadSilenceSeconds: options.downloadTimeout),
                                      device: options.device, caFile: options.caFile)
        let url = urls.joined(separator: ",")
        var config = ContainerConfig(device: options.device)
        config.downloadTimeoutSeconds = options.downloadTimeout
        config.arrivingModeCap = userMask & 0o022
        (config.cacheLimit, config.minFreeBytes) = storeLimits()
        log.info("local store limit \(config.cacheLimit) bytes, keeping \(config.minFreeBytes) bytes free")
        let core = try Container(store: store, remote: client, config: config)
        let reachable = try checkRemote(client, url: url, fresh: try core.isFresh)
        try core.start(initialSync: reachable)
        defer { core.stop() }
        let query = serveQuery(core)
        defer { query?.stop() }
        let fs = FileSystem(core: core, downloadPolicy: DownloadPolicy(noDownloadFor: options.noDownloadFor))
        fs.passthrough = options.passthrough
        // The key-value store is bound to the account (the token) and the container.
        let kv = try KeyValueStore(directory: options.store, device: options.device,
                                   account: String(sha256Hex(Array(token.utf8)).prefix(16)) + ":" + options.container,
                                   remote: client)
        kv.start()
        defer { kv.stop() }
        fs.kv = kv
        try fs.mount(at: options.mountpoint, fsname: "ubiquityfs:\(options.container)")
        let pidPath = pidFile(for: options.mountpoint)
        do {
            try makeDirectories((pidPath as NSString).deletingLastPathComponent)
            try Data("\(getpid())\n".utf8).write(to: URL(fileURLWithPath: pidPath))
        } catch {
            // The mount serves; only `ubiquityfs unmount`'s wait for this daemon to end is lost.
            log.warning("cannot write the pid file \(pidPath): \(error)")
        }
        defer { removeLeftover(pidPath) }
        let notices = options.desktopNotices ? DesktopNotices(core: core, mountpoint: options.mountpoint) : nil
        notices?.start()
        defer { notices?.stop() }
        log.info("mounted \(options.container) at \(options.mountpoint) as device \(options.device), store \(options.store)")
        announceReady()
        fs.run()
        log.info("unmounted \(options.mountpoint)")
    }

    /// The remote's servers and token: those given, or the embedded stub's (started or reused).
    private func remote() throws -> ([String], String, EmbeddedStub?) {
        if !options.remoteURLs.isEmpty, let tokenFile = options.tokenFile {
            if let ca = options.caFile, access(ca, R_OK) != 0 { throw MountFailure("cannot read the CA file \(ca)") }
            return (options.remoteURLs, try readToken(tokenFile), nil)
        }
        let s = try EmbeddedStub.startOrReuse(bandwidth: options.stubBandwidth, latencyMs: options.stubLatency)
        return ([s.url], s.token, s)
    }

    /// Serves the live query on a socket in the store, named by the root's `querySocket` attribute. A mount
    /// without it still works.
    private func serveQuery(_ core: Container) -> QueryServer? {
        let server = QueryServer(core: core, path: options.store + "/query.sock")
        do { try server.start() } catch {
            log.warning("no live query: \(error)")
            return nil
        }
        core.querySocket = server.path
        return server
    }

    /// The local store limit and the free space kept, in bytes, percentages taken of the store's file system.
    private func storeLimits() -> (Int64, Int64) {
        var vfs = statvfs()
        let total = statvfs(options.store, &vfs) == 0 ? Int64(vfs.f_blocks) * Int64(vfs.f_frsize) : 0
        let limit = (options.cacheSize ?? MountCommand.defaultCacheSize).bytes(of: total)
        let minFree = options.minFree?.bytes(of: total) ?? MountCommand.defaultMinFree(fileSystemBytes: total)
        return (max(limit, 1), minFree)
    }

    /// Opens the store, waiting a little for a daemon that is still finishing to let go of it.
    private func openStore() throws -> Store {
        var lastError: Error?
        for _ in 0..<50 {
            do { return try Store(directory: options.store) } catch {
                lastError = error
                guard case StoreError.inUse = error else { break }
                usleep(200_000)
            }
        }
        throw MountFailure("\(lastError!)")
    }

    private func readToken(_ path: String) throws -> String {
        do { return try readSecretLine(path, what: "the token file") } catch { throw MountFailure("\(error)") }
    }

    /// Checks the remote answers and accepts the token, trying each server once. An unreachable remote is fatal
    /// only for a store that has never synced; otherwise the mount starts from the store's last known state.
    private func checkRemote(_ client: HTTPRemoteClient, url: String, fresh: Bool) throws -> Bool {
        do {
            try firstAnswer(client)
            _ = try client.openContainer()
            return true
        } catch RemoteError.unauthorized {
            throw MountFailure("the remote at \(url) refused the token" + (options.tokenFile.map { " in \($0)" } ?? ""))
        } catch RemoteError.unreachable(let why) {
            if fresh { throw MountFailure("cannot reach the remote at \(url): \(why)") }
            log.warning("the remote at \(url) is unreachable (\(why)); starting from the store's last known state")
            return false
        } catch {
            throw MountFailure("the remote at \(url) failed: \(error)")
        }
    }

    /// Health from the first server that answers (each failure moves the client on to the next).
    private func firstAnswer(_ client: HTTPRemoteClient) throws(RemoteError) {
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

    private func announceReady() {
        guard notify else { return }
        FileHandle.standardError.write(Data("ready\n".utf8))
        let devnull = open("/dev/null", O_WRONLY)
        dup2(devnull, 2)
        close(devnull)
    }
}

/// The private remote stub of the embedded default: a `ubiquityfs remote serve` process with its data under
/// the data directory, reused when one already serves it.
struct EmbeddedStub {
    let url: String
    let token: String
    let process: Process?

    static var dataDir: String { dataDirectory() + "/remote" }

    static func startOrReuse(bandwidth: Int, latencyMs: Int) throws -> EmbeddedStub {
        let dir = dataDir
        try makeDirectories(dir)
        let endpoint = dir + "/endpoint"
        if let running = try? reuse(endpoint: endpoint, dir: dir) { return running }
        removeLeftover(endpoint)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: selfExecutable())
        p.arguments = ["remote", "serve", "--data", dir, "--listen", "127.0.0.1:0", "--endpoint-file", endpoint,
                       "--bandwidth", String(bandwidth), "--latency-ms", String(latencyMs)]
        let logFD = open(dir + "/stub.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        let logHandle = FileHandle(fileDescriptor: logFD, closeOnDealloc: true)
        p.standardOutput = logHandle
        p.standardError = logHandle
        p.standardInput = FileHandle.nullDevice
        try p.run()
        for _ in 0..<200 {
            if let url = try? String(contentsOfFile: endpoint, encoding: .utf8) {
                let token = try String(contentsOfFile: dir + "/token", encoding: .utf8)
                return EmbeddedStub(url: url.trimmingCharacters(in: .whitespacesAndNewlines),
                                    token: token.trimmingCharacters(in: .whitespacesAndNewlines), process: p)
            }
            if !p.isRunning { break }
            usleep(50_000)
        }
        p.terminate()
        throw MountFailure("the embedded remote stub did not start (see \(dir)/stub.log)")
    }

    /// A stub that already serves `dir` and answers.
    private static func reuse(endpoint: String, dir: String) throws -> EmbeddedStub? {
        let url = try String(contentsOfFile: endpoint, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let token = try String(contentsOfFile: dir + "/token", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let probe = HTTPRemoteClient(baseURL: url, token: token, container: defaultContainer,
                                     timeouts: HTTPTimeouts(connectSeconds: 2, requestSeconds: 2, stallSeconds: 2))
        try probe.health()
        return EmbeddedStub(url: url, token: token, process: nil)
    }

    func stop() {
        guard let process, process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }
}
