// The mount daemon: connects to the remote (starting the embedded stub if asked), starts each container it
// serves (ServedContainer.swift), mounts, tells the waiting `mount` command it is ready, and serves until
// unmounted. One container is mounted at the mount point itself; several (`--containers`, `--all-containers`)
// each on its folder of the account root (AccountRoot.swift), all served by this one process.
//
// What must hold: "ready" is told only once the kernel has every mount asked for; each container stops once
// its file system's loop ends, and the account root's loop (the only one that takes signals) lets go of the
// containers before the root is unmounted. A stub process this daemon started is stopped when it ends, even if
// another mount reused it meanwhile.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore
import UbiquityFUSE
import UbiquityHTTP

struct Daemon {
    /// The log's name in its folder (the main container's store) when no --log-file is given.
    static let logName = "ubiquityfs.log"
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
        try makeDirectories(options.logFolder)
        let logFile = options.logFile ?? (notify ? options.logFolder + "/" + Daemon.logName : nil)
        Log.shared.configure(level: options.logLevel, path: logFile)
        let (urls, token, stub) = try remote()
        defer { stub?.stop() }
        let remote = ServedContainer.Remote(urls: urls, token: token, userMask: userMask)
        let usage = AccountUsage(client: remote.accountClient(options),
                                 notify: options.desktopNotices && DesktopNotices.hasBus())
        defer { usage.stop() }
        if options.isAccount { return try runAccount(remote, usage) }
        let served = try options.share.map { try ServedContainer.startView(of: sharedWithMe($0, remote), options: options,
                                                                         remote: remote, usage: usage) }
            ?? ServedContainer.start(options.containers[0], options: options, remote: remote, usage: usage)
        defer { removeStoreOfEndedShare(served) } // (after the stop below)
        defer { served.stop() }
        try served.fs.mount(at: options.mountpoint, fsname: "ubiquityfs:\(served.id)")
        usage.start()  // a mount that failed never asks
        let pidPath = writePIDFile()
        defer { removeLeftover(pidPath) }
        served.startNotices(mountpoint: options.mountpoint)
        log.info("mounted \(served.id) at \(options.mountpoint) as device \(options.device), store \(served.store)")
        announceReady(notify)
        served.fs.run()
        log.info("unmounted \(options.mountpoint)")
    }

    /// Several containers (`--containers`, `--all-containers`): the account root at the mount point, and each
    /// container mounted on its folder by a thread of its own once the root's loop serves (the mount of a
    /// folder looks it up in the root). "ready" is told once the containers asked for are mounted; with
    /// --all-containers the same thread then asks the remote for its containers every few seconds.
    private func runAccount(_ remote: ServedContainer.Remote, _ usage: AccountUsage) throws {
        let root = AccountRoot()
        try root.mount(at: options.mountpoint, fsname: "ubiquityfs:" + options.accountSource)
        usage.start()
        let pidPath = writePIDFile()
        defer { removeLeftover(pidPath) }
        let account = ServedAccount(root: root, options: options, remote: remote, usage: usage)
        let notify = self.notify
        let starter = Thread { [account, options] in
            do {
                try account.openAll(options.containers)
                if options.allContainers { try account.openAll(account.remoteContainers()) }
            } catch {
                account.fail(error)
                return
            }
            Logger("daemon").info("mounted \(account.root.containers.joined(separator: ", ")) at \(options.mountpoint) as device \(options.device)")
            announceReady(notify)
            if options.allContainers { account.followContainers() }
        }
        starter.start()
        root.run(beforeUnmount: { account.stopAll() })
        log.info("unmounted \(options.mountpoint)")
        if let failure = account.failure { throw failure }
    }

    /// Empties the store of a share's view whose share has ended: it holds the owner's files, which this user
    /// may no longer read (nothing of theirs is in it: a view takes no change). Its log and lock stay.
    private func removeStoreOfEndedShare(_ served: ServedContainer) {
        guard served.ended.withLock({ $0 }) else { return }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: served.store)) ?? []
        for name in names where name != Daemon.logName && name != StoreLock.fileName {
            do { try FileManager.default.removeItem(atPath: served.store + "/" + name) } catch {
                log.warning("cannot remove \(name) from the store of the ended share, \(served.store): \(error)")
            }
        }
    }

    /// The share `name` (OWNER/NAME, or its id) of the mount's container, among those the remote lists for
    /// the token's user.
    private func sharedWithMe(_ name: String, _ remote: ServedContainer.Remote) throws -> WireShare {
        let url = remote.urls.joined(separator: ",")
        let shares: [WireShare]
        do { shares = try remote.accountClient(options).shares() } catch {
            throw MountFailure("cannot list the shares of the remote at \(url): \(error)")
        }
        guard let share = shares.first(where: { $0.id == name || "\($0.owner)/\($0.name)" == name }) else {
            throw MountFailure("nothing named '\(name)' is shared with you in \(options.containers[0]) on \(url)")
        }
        return share
    }

    /// Records the daemon's pid for `ubiquityfs unmount`; returns the file's path.
    private func writePIDFile() -> String {
        let pidPath = pidFile(for: options.mountpoint)
        do {
            try makeDirectories((pidPath as NSString).deletingLastPathComponent)
            try Data("\(getpid())\n".utf8).write(to: URL(fileURLWithPath: pidPath))
        } catch {
            // The mount serves; only `ubiquityfs unmount`'s wait for this daemon to end is lost.
            log.warning("cannot write the pid file \(pidPath): \(error)")
        }
        return pidPath
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

    private func readToken(_ path: String) throws -> String {
        do { return try readSecretLine(path, what: "the token file") } catch { throw MountFailure("\(error)") }
    }
}

/// Started by `mount` (`notify`): says "ready" on stderr, where `mount` waits for it, and from then on stderr goes
/// nowhere (the log is in its file).
private func announceReady(_ notify: Bool) {
    guard notify else { return }
    FileHandle.standardError.write(Data("ready\n".utf8))
    let devnull = open("/dev/null", O_WRONLY)
    dup2(devnull, 2)
    close(devnull)
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
