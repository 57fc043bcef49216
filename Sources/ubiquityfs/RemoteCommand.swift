// `ubiquityfs remote serve`, `ubiquityfs remote seed` and `ubiquityfs remote usage`.
//
// What must hold: `serve` blocks SIGINT and SIGTERM before it starts serving, so a signal is never lost, and
// stops the server (waking its long polls) before it exits. The endpoint file is written whole and renamed
// into place, so a mount waiting for it never reads half a URL. `seed` writes the stub's database directly;
// nothing stops a stub that serves the same DIR, whose long polls would not be woken by it: run it stopped.
// `usage` only reads. A retention value that does not parse is a usage error of one line, before anything starts.
import Foundation
import Glibc
import UbiquityBase
import UbiquityStub

enum RemoteCommand {
    static let serveHelp = """
    usage: ubiquityfs remote serve --data DIR [--listen 127.0.0.1:PORT] [--latency-ms N] [--bandwidth BYTES_PER_S]
                                   [--endpoint-file FILE] [--log-level debug|info|warn|error]
                                   [--token-file FILE] [--tls-cert FILE --tls-key FILE]
                                   [--metadata postgresql://... [--metadata-password-file FILE]]
                                   [--blobs s3://BUCKET?endpoint=URL[&region=R]] [--s3-credentials FILE]
                                   [--blob-grace SECONDS] [--blob-collect-every SECONDS] [--blob-cache-mb N]
                                   [--keep-deleted DAYS] [--keep-versions POLICY]
                                   [--batch-seconds N] [--connections-per-device N] [--connections-per-user N]
                                   [--test-routes]

    Runs the remote stub (the "cloud") until SIGINT or SIGTERM. Every request needs a device key of a user,
    and sees that user's containers only (see `ubiquityfs remote user --help`). The first start on a new
    DIR writes a key to DIR/token (mode 0600), the key of user `default`'s device `token`; mounts read a key
    with --token-file. It listens on loopback unless told otherwise (port 0 picks a free one;
    --endpoint-file receives the URL once it listens).
      --token-file FILE  that first key's file instead of DIR/token: created (32 random bytes as 64 hex
                         digits, mode 0600) if missing, so several servers started on a new store share it
      --tls-cert FILE, --tls-key FILE
                         serve HTTPS with this PEM certificate (chain) and its private key; mounts verify it
                         (--ca-file). Without them it serves plain HTTP, and only on loopback: --listen on any
                         other address is refused
      --batch-seconds N  apply the entries of one batch request for N seconds at most (default 10); the rest
                         are answered 503 unapplied and the client sends them again, so a slow
                         database never makes a batch outlast the client's 30 s wait
      --connections-per-device N, --connections-per-user N
                         connections one device key (default 256), and the devices of one user together
                         (default 512), may hold at once; a request past them is answered 429 and its connection
                         closed. A connection that has sent no valid key yet owes its first request header
                         within 5 s, a request of its with a body is answered at once and closed, and such
                         connections together hold at most 256: past that the oldest is cut. Nothing is
                         counted per address. Each limit hit is logged, at most once per 10 s per limit
      --test-routes      also serve /v1/stats (every container's blobs and counters) and /v1/faults (failures
                         injected into other clients' requests): for the tests and the bench only, never on a
                         server anyone else reaches

    Items, versions, the change feed, the key-value store and the accounts live in DIR/stub.sqlite, or with
    --metadata in that PostgreSQL database, which several servers may share (and one DIR or one bucket for the
    blobs). The URL must not hold a password (ps shows it to everyone): --metadata-password-file names a file
    (mode 0600, yours) with the password on its first line.

    Blobs are files in DIR/blobs unless --blobs names an S3 bucket (created if missing), with credentials from
    AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment or, with --s3-credentials, from FILE
    (KEY=VALUE lines); downloads are served from verified copies in DIR/blobcache (default 1024 MB). A blob no
    live item names is removed once it was stored and last asked about --blob-grace seconds ago (default
    3600), checked every --blob-collect-every seconds (default 600; 0 never).

    Every version the remote stores is also kept in the item's history, so that deleted items can be restored
    (Recently Deleted) and earlier versions read, from any device. Before each collection a retention pass
    lets go of what is past these limits (their blobs then go after the grace):
      --keep-deleted DAYS  a deleted item stays in Recently Deleted this many days (default 30; 0: until the
                           next pass); a duration with a unit (s, m, h, d) is taken too
      --keep-versions POLICY
                           ALL,DAILY: every older version of the last ALL, then the newest of each UTC day
                           until DAILY (default 24h,30d; units s, m, h, d); 0 keeps none. An item's current
                           version is always kept
    """
    static let seedHelp = """
    usage: ubiquityfs remote seed --data DIR [--container ID] [--device NAME] [--blobs URL [--s3-credentials FILE]]
                                  DEST=SOURCE...
           ubiquityfs remote seed --data DIR [--container ID] [--device NAME] --items N [--big-folder M]

    Puts local files or directories (SOURCE, recursively) at DEST in the container (default
    \(defaultContainer)), as if another device had made them. Run it while no stub serves DIR.
    With --items, adds N empty files at once (for measuring a large container): M of them (default
    100000) in one folder, the rest in folders of 1000.
    """

    static let usageHelp = """
    usage: ubiquityfs remote usage --data DIR [--metadata postgresql://... [--metadata-password-file FILE]]
                                   [--blobs s3://BUCKET?endpoint=URL[&region=R]] [--s3-credentials FILE] [--json]

    Shows, per user, what their limits count against them (`remote user set`): the bytes of every blob stored
    for their containers (STORED, against QUOTA: live files, kept versions, Recently Deleted and blobs not
    collected yet), their containers and their live items. Then, per container, the bytes of the blobs its
    live files name (LIVE, with their conflict versions), the bytes only the kept versions of live items add
    (HISTORY) and those only Recently Deleted adds (TRASH). A blob, or a chunk of a file kept in chunks,
    counts once, in the first of the three that names it. It reads the store only (run it beside the
    servers); --json prints the same as {"users": [...], "containers": [...]}.
    """

    static let checkHelp = """
    usage: ubiquityfs remote check --data DIR [--metadata postgresql://... [--metadata-password-file FILE]]
                                   [--blobs s3://BUCKET?endpoint=URL[&region=R]] [--s3-credentials FILE] [--repair] [--json]

    Reads every blob and manifest of every container and checks that each hashes to its name, then lists every
    live file (and conflict version) whose content no sound blob holds. --repair sets each damaged blob aside,
    as a server does when a read finds one: it then counts as absent everywhere, and the next upload of any file
    holding it stores it again. A file listed as missing is lost on the remote until a device that has it
    uploads it again (edit it there, or copy it back in). Runs beside the servers. Exits 0 when nothing is
    damaged or missing, 1 when something is (after --repair: when a file's content is missing).
    """

    static func run(_ words: [String]) throws {
        guard let sub = words.first else { throw UsageError("remote needs 'serve', 'seed', 'usage', 'check', 'user' or 'device'") }
        let rest = Array(words.dropFirst())
        switch sub {
        case "serve": try serve(rest)
        case "seed": try seed(rest)
        case "usage": try usage(rest)
        case "check": try check(rest)
        case "user", "device": try AccountCommand.run(sub, rest)
        case "--help", "-h":
            print([serveHelp, seedHelp, usageHelp, checkHelp, AccountCommand.help].joined(separator: "\n\n"))
        default: throw UsageError("unknown remote command '\(sub)'")
        }
    }

    static func serve(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--data", "--listen", "--latency-ms", "--bandwidth", "--endpoint-file",
                                                "--log-level", "--max-blob", "--token-file", "--tls-cert", "--tls-key",
                                                "--metadata", "--metadata-password-file", "--blobs", "--s3-credentials", "--blob-grace",
                                                "--blob-collect-every", "--blob-cache-mb", "--batch-seconds",
                                                "--keep-deleted", "--keep-versions", "--connections-per-device",
                                                "--connections-per-user"],
                                 switches: ["--help", "--test-routes"])
        if args.has("--help") { return print(serveHelp) }
        guard let data = args.value("--data") else { throw UsageError("remote serve needs --data DIR") }
        // Every file the server makes is its own (stub.sqlite and its journal, blobs, the cache), whatever the
        // mode of a data folder that was there before: others on the machine read none of it.
        umask(0o077)
        // A descriptor for each of StubConfig.connectionLimit connections, and the database's and blobs' own.
        var files = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files) == 0 && files.rlim_cur < min(files.rlim_max, 8192) {
            files.rlim_cur = min(files.rlim_max, 8192)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        }
        if let level = args.value("--log-level") {
            guard let l = LogLevel(name: level) else { throw UsageError("unknown log level '\(level)'") }
            Log.shared.configure(level: l, path: nil)
        }
        var config = StubConfig(dataDir: absolutePath(data))
        if let listen = args.value("--listen") {
            let parts = listen.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, let port = UInt16(parts[1]), !parts[0].isEmpty else {
                throw UsageError("--listen takes HOST:PORT, like 127.0.0.1:8443")
            }
            config.host = String(parts[0])
            config.port = port
        }
        config.latencyMs = try args.int("--latency-ms") ?? 0
        config.bandwidth = Int64(try args.int("--bandwidth") ?? 0)
        if let max = try args.int("--max-blob") { config.maxBlobBytes = Int64(max) }
        config.tokenFile = args.value("--token-file").map(absolutePath)
        config.testRoutes = args.has("--test-routes")
        if let s = try args.int("--batch-seconds") { config.batchSeconds = Double(s) }
        if let n = try args.int("--connections-per-device") { config.shares.perDevice = try atLeastOne(n, "--connections-per-device") }
        if let n = try args.int("--connections-per-user") { config.shares.perUser = try atLeastOne(n, "--connections-per-user") }
        config.retention = try retention(args)
        (config.tlsCertificate, config.tlsKey) = try tlsFiles(args)
        try configureBlobs(&config, args)
        (config.metadataURL, config.metadataPassword) = try metadata(args)
        let server = try StubServer(config: config)
        let signals = blockTerminationSignals()
        try server.start()
        let url = "\(config.scheme)://\(config.host):\(server.port)"
        if let file = args.value("--endpoint-file") {
            let tmp = file + ".tmp"
            try Data((url + "\n").utf8).write(to: URL(fileURLWithPath: tmp))
            try renameFile(tmp, file)
        }
        let token = server.token != nil ? ", token in \(config.tokenPath)" : ""
        FileHandle.standardError.write(Data("ubiquityfs remote: serving \(url)\(token)\n".utf8))
        waitForTermination(signals)
        server.stop()
    }

    private static func atLeastOne(_ n: Int, _ option: String) throws -> Int {
        guard n >= 1 else { throw UsageError("\(option) takes a whole number of 1 or more, not \(n)") }
        return n
    }

    /// What the history keeps, from --keep-deleted and --keep-versions.
    static func retention(_ args: Arguments) throws -> HistoryRetention {
        var retention = HistoryRetention.standard
        if let text = args.value("--keep-deleted") {
            let days = Int64(text).flatMap { $0 >= 0 && $0 <= HistoryRules.maxDuration / HistoryRules.day ? $0 * HistoryRules.day : nil }
            guard let keep = days ?? HistoryRules.duration(text) else {
                throw UsageError("--keep-deleted takes a whole number of days (or a duration like 12h), not '\(text)'")
            }
            retention.keepDeleted = keep
        }
        if let text = args.value("--keep-versions") {
            guard let policy = VersionPolicy(parsing: text) else {
                throw UsageError("--keep-versions takes ALL,DAILY like 24h,30d (units s, m, h, d; DAILY not shorter "
                                 + "than ALL) or 0, not '\(text)'")
            }
            retention.versions = policy
        }
        return retention
    }

    /// `remote usage`: the bytes of each container's live files, history and Recently Deleted.
    static func usage(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--data", "--metadata", "--metadata-password-file", "--blobs",
                                                 "--s3-credentials"],
                                 switches: ["--help", "--json"])
        if args.has("--help") { return print(usageHelp) }
        let server = try existingStore(args, "remote usage")
        let rows = try server.usage(), users = try server.userUsage()
        if args.has("--json") {
            let data = try JSONEncoder.wire.encode(UsageReport(users: users, containers: rows))
            return print(String(decoding: data, as: UTF8.self))
        }
        printTable([["USER", "STORED", "QUOTA", "CONTAINERS", "ITEMS"]]
                   + users.map { u in
                       [u.user, readableSize(u.storage), readableSize(u.limits.storage),
                        "\(u.containers) of \(u.limits.containers)", "\(u.items) of \(u.limits.items)"]
                   })
        print("")
        printTable([["USER", "CONTAINER", "LIVE", "HISTORY", "TRASH"]]
                   + rows.map { [$0.user, $0.container, readableSize($0.live), readableSize($0.history), readableSize($0.trash)] })
    }

    /// `remote check`: what is damaged or missing in the store, and with --repair the damaged blobs set aside.
    static func check(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--data", "--metadata", "--metadata-password-file", "--blobs",
                                                 "--s3-credentials"],
                                 switches: ["--help", "--json", "--repair"])
        if args.has("--help") { return print(checkHelp) }
        let repair = args.has("--repair")
        let report = try existingStore(args, "remote check").check(repair: repair)
        if args.has("--json") {
            print(String(decoding: try JSONEncoder.wire.encode(report), as: UTF8.self))
        } else {
            print("checked \(report.containers) container(s): \(report.blobs) blob(s) of \(readableSize(report.bytes)), "
                  + "\(report.manifests) manifest(s)")
            for f in report.findings {
                let at = "\(f.user) \(f.container)"
                switch f.kind {
                case .damagedBlob:
                    print("damaged blob \(f.sha256) of \(at): " + (f.setAside ? "set aside; the next upload of it stores it again"
                                                                           : "--repair sets it aside"))
                case .damagedManifest:
                    print("unreadable manifest \(f.sha256) of \(at): the next upload of its file stores it again")
                case .missingContent:
                    print("missing content of \(at) \(f.path ?? "?") (\(f.sha256)): upload it again from a device that has it")
                }
            }
        }
        let left = repair ? report.findings.contains { $0.kind == .missingContent } : !report.findings.isEmpty
        if left { exit(1) }
    }

    /// The server of an existing store named by --data (and --metadata, --blobs), for the commands that read it.
    private static func existingStore(_ args: Arguments, _ command: String) throws -> StubServer {
        guard let data = args.value("--data") else { throw UsageError("\(command) needs --data DIR") }
        var config = StubConfig(dataDir: absolutePath(data))
        try configureBlobs(&config, args)
        (config.metadataURL, config.metadataPassword) = try metadata(args)
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: config.dataDir, isDirectory: &isDir), isDir.boolValue,
              config.metadataURL != nil || FileManager.default.fileExists(atPath: config.dataDir + "/stub.sqlite") else {
            throw StubError("no remote store in \(config.dataDir)")
        }
        umask(0o077)
        return try StubServer(config: config)
    }

    /// `remote usage --json`: each user against their limits, then each container's bytes.
    private struct UsageReport: Encodable {
        let users: [UserUsage]
        let containers: [StubUsage]
    }

    /// Columns padded to their widest cell, the numbers' to the right.
    private static func printTable(_ rows: [[String]]) {
        let widths = (0..<rows[0].count).map { c in rows.map { $0[c].count }.max() ?? 0 }
        for row in rows {
            let cells = row.enumerated().map { c, cell -> String in
                let pad = String(repeating: " ", count: widths[c] - cell.count)
                return c < 2 ? cell + pad : pad + cell
            }
            print(cells.joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
    }

    /// The PostgreSQL database of --metadata, if given, and its password from --metadata-password-file.
    static func metadata(_ args: Arguments) throws -> (url: String?, password: String?) {
        let file = args.value("--metadata-password-file").map(absolutePath)
        guard let url = args.value("--metadata") else {
            if file != nil { throw UsageError("--metadata-password-file goes with --metadata postgresql://...") }
            return (nil, nil)
        }
        if let why = StubConfig.metadataURLProblem(url) { throw UsageError(why) }
        guard let file else { return (url, nil) }
        return (url, try readSecretLine(file, what: "the metadata password file"))
    }

    /// The blob store and its collection, from --blobs, --s3-credentials and the --blob-* numbers.
    private static func configureBlobs(_ config: inout StubConfig, _ args: Arguments) throws {
        if let url = args.value("--blobs") {
            do {
                config.s3 = try S3Location(url: url, credentialsFile: args.value("--s3-credentials").map(absolutePath),
                                           environment: ProcessInfo.processInfo.environment)
            } catch let e as StubError {
                throw UsageError(e.message)
            }
        } else if args.value("--s3-credentials") != nil {
            throw UsageError("--s3-credentials goes with --blobs s3://...")
        }
        if let g = try args.int("--blob-grace") {
            guard g >= 0 else { throw UsageError("--blob-grace takes seconds, 0 or more") }
            config.blobGraceSeconds = g
        }
        if let e = try args.int("--blob-collect-every") {
            guard e >= 0 else { throw UsageError("--blob-collect-every takes seconds, 0 or more") }
            config.blobCollectSeconds = e
        }
        if let mb = try args.int("--blob-cache-mb") {
            guard mb > 0 else { throw UsageError("--blob-cache-mb takes a positive number") }
            config.blobCacheBytes = Int64(mb) << 20
        }
    }

    /// The PEM texts of --tls-cert and --tls-key: both or neither.
    private static func tlsFiles(_ args: Arguments) throws -> (String?, String?) {
        let cert = args.value("--tls-cert"), key = args.value("--tls-key")
        guard (cert == nil) == (key == nil) else { throw UsageError("--tls-cert and --tls-key go together") }
        guard let cert, let key else { return (nil, nil) }
        if let why = secretFileRefusal(key) { throw StubError("refusing the TLS key: \(why)") }
        func read(_ path: String, _ what: String) throws -> String {
            guard let data = FileManager.default.contents(atPath: path), !data.isEmpty else {
                throw StubError("cannot read the TLS \(what) \(path)")
            }
            return String(decoding: data, as: UTF8.self)
        }
        return (try read(cert, "certificate"), try read(key, "key"))
    }

    static func seed(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--data", "--container", "--device", "--blobs", "--s3-credentials",
                                                 "--items", "--big-folder"],
                                 switches: ["--help"])
        if args.has("--help") { return print(seedHelp) }
        guard let data = args.value("--data") else { throw UsageError("remote seed needs --data DIR") }
        let container = args.value("--container") ?? defaultContainer
        guard WireRules.isValidContainerID(container) else { throw UsageError("'\(container)' is not a container id") }
        let device = args.value("--device") ?? "another device"
        if let items = try args.int("--items") {
            let big = min(items, try args.int("--big-folder") ?? 100_000)
            var perFolder = [big]
            var left = items - big
            while left > 0 { perFolder.append(min(left, 1000)); left -= 1000 }
            let server = try StubServer(config: StubConfig(dataDir: absolutePath(data)))
            let made = try server.seedMany(container: container, perFolder: perFolder, device: device)
            return print("seeded \(made) items")
        }
        guard !args.positional.isEmpty else { throw UsageError("remote seed needs DEST=SOURCE") }
        var config = StubConfig(dataDir: absolutePath(data))
        try configureBlobs(&config, args)
        let server = try StubServer(config: config)
        for pair in args.positional {
            guard let eq = pair.firstIndex(of: "=") else { throw UsageError("'\(pair)' is not DEST=SOURCE") }
            let dest = String(pair[..<eq]), source = String(pair[pair.index(after: eq)...])
            try seedTree(server, container: container, dest: dest, source: source, device: device)
        }
    }

    private static func seedTree(_ server: StubServer, container: String, dest: String, source: String,
                                 device: String) throws {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: source, isDirectory: &isDir) else {
            throw UsageError("\(source) does not exist")
        }
        var st = stat()
        guard stat(source, &st) == 0 else { throw UsageError("cannot read \(source): \(Errno.current)") }
        let mtime = nanoseconds(st.st_mtim)
        let mode = UInt32(st.st_mode & 0o7777)
        if isDir.boolValue {
            _ = try server.seed(container: container, path: dest, contents: .directory, device: device, mtime: mtime,
                                mode: mode)
            for name in try FileManager.default.contentsOfDirectory(atPath: source).sorted() {
                try seedTree(server, container: container, dest: dest + "/" + name, source: source + "/" + name,
                             device: device)
            }
        } else {
            _ = try server.seed(container: container, path: dest, contents: .file(path: source), device: device,
                                mtime: mtime, mode: mode)
        }
    }
}

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts from now on, so that
/// `waitForTermination` receives them. Call before starting threads.
func blockTerminationSignals() -> sigset_t {
    var set = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, SIGINT)
    sigaddset(&set, SIGTERM)
    pthread_sigmask(SIG_BLOCK, &set, nil)
    return set
}

/// Waits for SIGINT or SIGTERM.
func waitForTermination(_ set: sigset_t) {
    var set = set
    var sig: Int32 = 0
    sigwait(&set, &sig)
}

/// The first line of a file that holds a secret, refused when another user owns it or others may read it.
func readSecretLine(_ path: String, what: String) throws -> String {
    if let why = secretFileRefusal(path) { throw StubError("refusing \(what): \(why)") }
    guard let data = FileManager.default.contents(atPath: path) else { throw StubError("cannot read \(what) \(path)") }
    let line = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).first ?? ""
    let secret = line.trimmingCharacters(in: .whitespaces)
    guard !secret.isEmpty else { throw StubError("\(what) \(path) is empty") }
    return secret
}
