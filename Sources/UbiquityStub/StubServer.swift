// The remote stub: plays "the cloud" over HTTP/1.1 on libmicrohttpd, per docs/WIRE.md.
// One thread per connection, so a handler may block for a long poll or a throttled download.
//
// What must hold: every request but health must carry a device key of a user (Accounts.swift), checked before
// any work is done, and then sees that user's containers only (the route is scoped to the user's prefix);
// injected faults are taken after that, before any work. A body larger than its route allows is
// refused (413) without being kept; a blob is streamed to a temporary file and committed only when its
// length and SHA-256 match its name (else 422), then handed to the blob store, which holds it whole before the
// answer goes out; a client that asks about a blob (or a chunk, or a manifest) is noted, so the collector spares
// it. A blob GET of a hash that names no blob but a manifest serves the manifest's content, read from its
// chunks as the stream reaches each, zeros for its holes, so a client that knows no chunks still reads it. Each
// ServerFailure is answered by its case (`failureReply`): a refusal with its status and a WireError body, a full
// disk or an engine away with 503, so clients retry. `stop` wakes long polls before it waits for the connection
// threads.
// Plain HTTP is served only on loopback: a config that listens beyond it without a certificate and key is
// refused before anything is created. The token file (the key of user `default`'s device `token`, made at a
// store's first opening) is created whole (written aside, then linked into place), so servers starting
// together on one file all read the same token.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `lock` (the daemon handle) is a leaf; the
// store's come inside a handler, never under it.
import CMicroHTTPD
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

public struct StubConfig: Sendable {
    /// Holds stub.sqlite, blobs/, tmp/ and token.
    public var dataDir: String
    /// A postgresql:// URL keeps the metadata in PostgreSQL, shared with other servers; nil is stub.sqlite.
    public var metadataURL: String?
    /// Its password, read from a file (`--metadata-password-file`): never in the URL, which `ps` shows.
    public var metadataPassword: String?
    /// How often a waiting long poll looks again without a notification (one lost, or never sent).
    public var recheckSeconds: Double = 1
    /// A numeric address; loopback by default.
    public var host: String = "127.0.0.1"
    /// 0 picks a free port.
    public var port: UInt16 = 0
    /// Delay added to every answer.
    public var latencyMs: Int = 0
    /// Bytes per second the server's blob downloads share in all, as one link, 0 = unlimited.
    public var bandwidth: Int64 = 0
    public var maxBlobBytes: Int64 = 64 << 30
    /// The bearer token's file; nil for DATA/token. Created (mode 0600) if missing.
    public var tokenFile: String?
    /// PEM text of the certificate (chain) and its private key: both set, the stub serves HTTPS.
    public var tlsCertificate: String?
    public var tlsKey: String?
    /// Blobs in an S3 bucket rather than files in `dataDir`/blobs.
    public var s3: S3Location?
    /// Bytes of verified S3 blobs kept in `dataDir`/blobcache to serve downloads from.
    public var blobCacheBytes: Int64 = 1 << 30
    /// An unreferenced blob is collected once this old and unused (BlobCollector.swift).
    public var blobGraceSeconds = 3600
    /// Seconds between collections; 0 never collects.
    public var blobCollectSeconds = 600
    /// How long Recently Deleted and older versions are kept (`--keep-deleted`, `--keep-versions`), applied by a
    /// retention pass before each collection.
    public var retention = HistoryRetention.standard
    /// The server's clock (ns since the epoch) for history and retention; nil is the system's. Tests set it.
    public var clock: (@Sendable () -> Int64)?
    /// How connections are shared out among strangers, device keys and users (ConnectionWatch.swift): nothing
    /// is counted per address, which many honest clients may share.
    public var shares = ConnectionShares()
    /// A connection that sends nothing (between requests, or in the middle of one) this long is closed. A long
    /// poll is not idle: it waits in its handler, where this timeout does not run.
    public var idleTimeoutSeconds = 30
    /// A connection that has not sent a whole request header this long after it opened or after its last
    /// answer is cut, and so is a body slower than 1 KiB/s after this long (ConnectionWatch.swift).
    public var headerSeconds = 10
    /// Connections in all; the server needs a thread and a descriptor for each.
    public var connectionLimit = 2000
    /// How long one batch request may apply entries; the rest are answered 503, to be sent again (the client
    /// waits 30 s for an answer).
    public var batchSeconds: Double = 10
    /// Serve the test routes (`/v1/stats`: every blob of every container; `/v1/faults`: failures injected into
    /// other clients' requests). Only the tests and the bench turn them on (`remote serve --test-routes`).
    public var testRoutes = false
    public init(dataDir: String) { self.dataDir = dataDir }

    public var tokenPath: String { tokenFile ?? dataDir + "/token" }
    public var servesTLS: Bool { tlsCertificate != nil && tlsKey != nil }
    /// "https" or "http".
    public var scheme: String { servesTLS ? "https" : "http" }

    /// Whether `host` is a loopback one: 127.0.0.0/8, ::1 or the name localhost.
    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, host, &v6) == 1 else { return false }
        return withUnsafeBytes(of: &v6) { Array($0) } == Array(repeating: 0, count: 15) + [1]
    }

    /// Why a --metadata URL is refused: one that holds a password shows it to everyone on the machine (`ps`).
    public static func metadataURLProblem(_ url: String) -> String? {
        guard url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") else { return "--metadata takes a postgresql:// URL" }
        let rest = url[url.range(of: "://")!.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        let userinfo = authority.contains("@") ? authority[..<authority.lastIndex(of: "@")!] : ""
        if userinfo.contains(":") || url.contains("password=") {
            return "the --metadata URL holds a password, which every user of this machine sees in ps: "
                + "put it in a file (mode 0600) and give --metadata-password-file FILE"
        }
        return nil
    }

    /// Refuses what must not be served: half a TLS pair, or plain HTTP beyond loopback.
    func validate() throws {
        if (tlsCertificate == nil) != (tlsKey == nil) { throw StubError("TLS needs both a certificate and its key") }
        if !servesTLS && !Self.isLoopback(host) {
            throw StubError("refusing to serve plain HTTP on \(host), beyond loopback: "
                            + "serve HTTPS (--tls-cert, --tls-key) or listen on 127.0.0.1")
        }
    }
}

/// What `StubServer.seed` puts at a path.
public enum SeedContent: Sendable {
    case directory
    case bytes([UInt8])
    /// A copy of a local file.
    case file(path: String)
}

public struct StubError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

public final class StubServer: @unchecked Sendable {
    // @unchecked: `daemon` and `boundPort` are read and written only under `lock` (libmicrohttpd's handle is a C
    // pointer, which no Locked can hold as Sendable either); the PEM copies are made once, before the daemon
    // starts, and only freed in deinit.
    public let config: StubConfig
    /// The key in the token file: made with the store's accounts at its first opening, read at later ones
    /// when the file is there; nil when it is not.
    public let token: String?
    let store: StubStore
    let accounts: Accounts
    let watch: ConnectionWatch
    let collector: BlobCollector
    let counters = StubCounters()
    /// `--bandwidth`: the link every blob download shares; nil: unlimited.
    let outputLink: OutputLink?
    let log = Logger("stub")
    private let lock = NSLock()
    private var daemon: OpaquePointer?
    private var boundPort: UInt16 = 0

    /// Opens (or creates) the data directory, the database and the token.
    public init(config: StubConfig) throws {
        try config.validate()
        self.config = config
        outputLink = config.bandwidth > 0 ? OutputLink(bytesPerSecond: config.bandwidth) : nil
        try makeDirectories(config.dataDir)
        let blobs: BlobStore? = try config.s3.map {
            try S3BlobStore(location: $0, cacheDir: config.dataDir + "/blobcache", cacheLimit: config.blobCacheBytes)
        }
        let metadata: (any StubMetadata)? = try config.metadataURL.map {
            try PostgresMetadata(url: $0, password: config.metadataPassword)
        }
        store = try StubStore(dataDir: config.dataDir, metadata: metadata, blobs: blobs,
                              recheckSeconds: config.recheckSeconds, clock: config.clock ?? nowNanoseconds)
        collector = BlobCollector(store: store, graceSeconds: config.blobGraceSeconds, retention: config.retention)
        accounts = Accounts(meta: store.meta)
        watch = ConnectionWatch(headerSeconds: config.headerSeconds, shares: config.shares)
        token = try Self.openAccounts(accounts, tokenPath: config.tokenPath)
    }

    /// The token file's key; at a store's first opening, created if missing and made the key of user
    /// `default`'s device `token` (what a store of the single-token remote had).
    private static func openAccounts(_ accounts: Accounts, tokenPath: String) throws -> String? {
        if try accounts.isStarted() {
            return FileManager.default.fileExists(atPath: tokenPath) ? try loadOrCreateToken(tokenPath) : nil
        }
        let token = try loadOrCreateToken(tokenPath)
        try accounts.bootstrap(token: token)
        return token
    }

    /// C copies of the PEM texts, kept for as long as the server lives (libmicrohttpd may read them later).
    private lazy var tlsCertificate: UnsafeMutablePointer<CChar>? = config.tlsCertificate.flatMap { strdup($0) }
    private lazy var tlsKey: UnsafeMutablePointer<CChar>? = config.tlsKey.flatMap { strdup($0) }

    deinit {
        stop()
        free(tlsCertificate)
        free(tlsKey)
    }

    static func loadOrCreateToken(_ path: String) throws -> String {
        if let why = secretFileRefusal(path) { throw StubError("refusing the token file: \(why)") }
        if let data = FileManager.default.contents(atPath: path) {
            let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard text.utf8.count == 64, isSHA256Hex(text) else { throw StubError("\(path): not a 64-hex-digit token") }
            // 64 random hex digits hold at least 10 different ones but once in 10^12; a key made by hand
            // (000...07) is guessed by anyone.
            guard Set(text.utf8).count >= 10 else {
                throw StubError("\(path) does not hold a random key (too few different digits): remove it, and the server "
                                + "writes one")
            }
            return text
        }
        let token = randomHex(bytes: 32)
        let tmp = path + ".\(getpid()).\(randomHex(bytes: 4)).tmp"
        let fd = try FileDescriptor.open(tmp, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
        defer { unlink(tmp) }
        do {
            defer { fd.close() }
            fchmod(fd.raw, 0o600)
            try fd.writeAll(Array((token + "\n").utf8))
            try fd.sync()
        }
        // link(2) never replaces: a server that created the file first wins, and its token is read.
        if link(tmp, path) != 0 {
            guard errno == EEXIST else { throw StubError("cannot create the token file \(path): \(Errno.current)") }
            return try loadOrCreateToken(path)
        }
        return token
    }

    /// The port actually bound; valid after `start()`.
    public var port: UInt16 { lock.withLock { boundPort } }

    /// Binds and serves in background threads.
    public func start() throws {
        try lock.withLock {
            guard daemon == nil else { return }
            store.setStopping(false)
            let me = Unmanaged.passUnretained(self).toOpaque()
            let d = ubq_mhd_start(config.host, config.port, { cls, connection, url, method, _, upload, uploadSize, context in
                let server = Unmanaged<StubServer>.fromOpaque(cls!).takeUnretainedValue()
                return server.handle(connection: connection!, url: url.map { String(cString: $0) } ?? "",
                                     method: method.map { String(cString: $0) } ?? "",
                                     upload: upload, uploadSize: uploadSize!, context: context!)
            }, me, { cls, connection, context, _ in
                if let context, let ex = context.pointee {
                    Unmanaged<Exchange>.fromOpaque(ex).release()
                    context.pointee = nil
                }
                let server = Unmanaged<StubServer>.fromOpaque(cls!).takeUnretainedValue()
                if let connection { server.watch.requestEnded(UInt(bitPattern: connection)) }
            }, me, { cls, connection, _, code in
                guard let cls, let connection else { return }
                let watch = Unmanaged<StubServer>.fromOpaque(cls).takeUnretainedValue().watch
                if code.rawValue == 0 { // MHD_CONNECTION_NOTIFY_STARTED
                    watch.started(UInt(bitPattern: connection), fd: ubq_mhd_connection_fd(connection))
                } else {
                    watch.closed(UInt(bitPattern: connection))
                }
            }, me, UInt32(config.idleTimeoutSeconds), UInt32(config.connectionLimit),
               tlsCertificate, tlsKey)
            guard let d else {
                let why = Errno.current
                if config.servesTLS {
                    guard ubq_mhd_has_tls() != 0 else { throw StubError("this libmicrohttpd cannot serve HTTPS") }
                    throw StubError("cannot serve HTTPS on \(config.host):\(config.port): \(why) (or the certificate "
                                    + "and key were refused)")
                }
                throw StubError("cannot serve on \(config.host):\(config.port): \(why)")
            }
            daemon = d
            boundPort = ubq_mhd_port(d)
            collector.start(every: config.blobCollectSeconds)
            watch.start()
            log.info("serving \(config.scheme) on \(config.host):\(boundPort), data in \(config.dataDir)")
        }
    }

    /// Stops serving: wakes long polls, ends downloads and waits for connection threads.
    public func stop() {
        let d: OpaquePointer? = lock.withLock {
            let d = daemon
            daemon = nil
            return d
        }
        guard let d else { return }
        collector.stop()
        watch.stop()
        store.setStopping(true)
        MHD_stop_daemon(d)
        log.info("stopped")
    }

    /// One collection of unreferenced blobs at `now` (nil: the server's clock), after the history's retention
    /// pass (the rules are in BlobCollector.swift); answers CONTAINER/SHA256 of each blob removed.
    @discardableResult
    public func collectBlobs(now: Int64? = nil) throws -> [String] {
        try collector.collect(now: now)
    }

    /// The bytes each container's live items, history and Recently Deleted name (`remote usage`), by user and
    /// container.
    public func usage() throws -> [StubUsage] {
        try store.containerIDs().map { cid in
            var usage = try store.usage(cid)
            usage.container = ContainerScope.wireID(cid)
            usage.user = try owner(of: cid)
            return usage
        }.sorted { ($0.user, $0.container) < ($1.user, $1.container) }
    }

    /// `remote check`: every container's blobs and manifests read, and what is damaged or missing (StubCheck.swift).
    public func check(repair: Bool) throws -> CheckReport {
        var report = CheckReport()
        for cid in try store.containerIDs() {
            try store.check(cid, user: try owner(of: cid), wireID: ContainerScope.wireID(cid), repair: repair, into: &report)
        }
        return report
    }

    /// What the user of `account` stores, per container, against their quota.
    private func usage(of account: Account) throws(ServerFailure) -> WireUsage {
        let limits = try accounts.userLimits(account.user)
        let total = try store.usage(user: account.user, prefix: account.prefix, limits: limits)
        let rows = try store.containerIDs(prefix: account.prefix).map { (cid) throws(ServerFailure) -> WireContainerUsage in
            let u = try store.usage(cid)
            return WireContainerUsage(container: ContainerScope.wireID(cid), documents: u.documents,
                                      data: u.live - u.documents, versions: u.history, deleted: u.trash)
        }
        return WireUsage(used: total.storage, quota: limits.storage, containers: rows.sorted { $0.container < $1.container })
    }

    /// The name of the user a stored container id belongs to.
    private func owner(of cid: String) throws -> String {
        let prefix = cid.firstIndex(of: "~").map { String(cid[...$0]) } ?? ""
        return try accounts.users().first { $0.prefix == prefix }?.name ?? "(removed user)"
    }

    /// What each user stores now, with their limits (`remote usage`), by name.
    public func userUsage() throws -> [UserUsage] {
        try accounts.users().map { user in
            try store.usage(user: user.name, prefix: user.prefix, limits: accounts.limits(user.name))
        }
    }

    /// Creates a file or directory directly in a container, as if from another device: makes missing parents
    /// along `path` (relative to the container root) and replaces the content of an existing file.
    public func seed(container: String, path: String, contents: SeedContent, device: String,
                     mtime: Int64?, mode: UInt32? = nil) throws -> WireItem {
        _ = try store.ensureContainer(container)
        var names = path.split(separator: "/").map(String.init)
        for name in names where !WireRules.isValidName(name) { throw StubError("bad name \(name) in \(path)") }
        let leaf = names.popLast()
        var content: (sha256: String, size: Int64)?
        switch contents {
        case .directory:
            content = nil
        case .bytes(let bytes):
            content = try importBlob(container) { w in bytes.withUnsafeBytes { w.write($0) } }
        case .file(let source):
            content = try importBlob(container) { w in
                let fd = try FileDescriptor.open(source, O_RDONLY)
                defer { fd.close() }
                try fd.forEachChunk { w.write($0) }
            }
        }
        if leaf == nil && content != nil { throw StubError("a file needs a path") }
        return try store.seed(container, dirs: names, leaf: leaf, content: content, device: device,
                              mtime: mtime ?? nowNanoseconds(), mode: mode)
    }

    /// Adds many empty files in folders below the root of a container at once (see `StubStore.seedMany`).
    public func seedMany(container: String, perFolder: [Int], device: String) throws -> Int {
        _ = try store.ensureContainer(container)
        return try store.seedMany(container, perFolder: perFolder, device: device, mtime: nowNanoseconds())
    }

    private func importBlob(_ cid: String, _ fill: (BlobWriter) throws -> Void) throws -> (sha256: String, size: Int64) {
        let writer = try BlobWriter(tmpDir: store.tmpDir)
        defer { writer.discard() }
        try fill(writer)
        let sha = try writer.finish()
        if sha != emptySHA256 { _ = try store.commitBlob(cid, sha, size: writer.written, tmpPath: writer.tmpPath) }
        return (sha, writer.written)
    }
}

// MARK: - Requests

/// Where a request goes, after its path has been taken apart.
enum Route {
    case health, stats, faults
    /// The containers of the request's user (`GET /v1/containers`); the prefix once scoped.
    case containerList(String)
    /// What the request's user stores, per container, against their quota (`GET /v1/usage`).
    case usage
    case container(String)
    case changes(String)
    /// Many item writes in one request.
    case batch(String)
    case item(String, String)
    case blob(String, String)
    /// Which of a list of chunks (blobs) the container lacks.
    case missingChunks(String)
    /// A version kept in chunks, by its whole content's hash.
    case manifest(String, String)
    /// The key-value store's feed, and one key.
    case kv(String)
    case kvKey(String, String)
    /// An item's kept versions; Recently Deleted, a restore from it and an empty of it (docs/HISTORY.md).
    case history(String, String)
    case trash(String)
    case trashRestore(String)
    case trashEmpty(String)
    /// A folder brought back to its state at a time (docs/HISTORY.md "Rewind").
    case rewind(String)
    /// Everything of a container outside Documents/, or everything, deleted as one entry of Recently Deleted.
    case deleteData(String)
    /// A folder of the container shared with a user, or no longer (Shares.swift).
    case shareAdd(String)
    case shareRemove(String)
    /// The shares the request's user owns or takes part in; one left by its participant.
    case shareList
    case shareLeave
    /// A participant's view of a folder shared with them, by share id (ShareViews.swift).
    case shareView(String, ShareViewPart)
    /// A recognised route with a malformed id or hash.
    case invalid(String)
    case unknown

    init(path: String) {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 3, parts[0] == "", parts[1] == "v1" else { self = .unknown; return }
        switch parts.count {
        case 3 where parts[2] == "health": self = .health
        case 3 where parts[2] == "stats": self = .stats
        case 3 where parts[2] == "faults": self = .faults
        case 3 where parts[2] == "containers": self = .containerList("")
        case 3 where parts[2] == "usage": self = .usage
        case 3 where parts[2] == "shares": self = .shareList
        case 4 where parts[2] == "shares" && parts[3] == "leave": self = .shareLeave
        case 4... where parts[2] == "shares":
            guard WireShareRules.isValidID(parts[3]) else { self = .invalid("bad share id"); return }
            self = .shareView(parts[3], ShareViewPart(Array(parts[4...])))
        case 5 where parts[2] == "containers" && parts[4] == "shares":
            self = WireRules.isValidContainerID(parts[3]) ? .shareAdd(parts[3]) : .invalid("bad container id")
        case 6 where parts[2] == "containers" && parts[4] == "shares" && parts[5] == "remove":
            self = WireRules.isValidContainerID(parts[3]) ? .shareRemove(parts[3]) : .invalid("bad container id")
        case 4 where parts[2] == "containers":
            self = WireRules.isValidContainerID(parts[3]) ? .container(parts[3]) : .invalid("bad container id")
        case 5 where parts[2] == "containers" && parts[4] == "kv":
            self = WireRules.isValidContainerID(parts[3]) ? .kv(parts[3]) : .invalid("bad container id")
        case 6 where parts[2] == "containers" && parts[4] == "kv":
            let key = parts[5] // MHD has already decoded the path
            guard WireRules.isValidContainerID(parts[3]) else { self = .invalid("bad container id"); return }
            self = KVLimits.isValidKey(key) ? .kvKey(parts[3], key) : .invalid(KVLimits.keyProblem(key))
        case 5 where parts[2] == "containers" && parts[4] == "changes":
            self = WireRules.isValidContainerID(parts[3]) ? .changes(parts[3]) : .invalid("bad container id")
        case 5 where parts[2] == "containers" && parts[4] == "batch":
            self = WireRules.isValidContainerID(parts[3]) ? .batch(parts[3]) : .invalid("bad container id")
        case 5 where parts[2] == "containers" && parts[4] == "trash":
            self = WireRules.isValidContainerID(parts[3]) ? .trash(parts[3]) : .invalid("bad container id")
        case 5 where parts[2] == "containers" && parts[4] == "rewind":
            self = WireRules.isValidContainerID(parts[3]) ? .rewind(parts[3]) : .invalid("bad container id")
        case 5 where parts[2] == "containers" && parts[4] == "delete-data":
            self = WireRules.isValidContainerID(parts[3]) ? .deleteData(parts[3]) : .invalid("bad container id")
        case 6 where parts[2] == "containers" && parts[4] == "trash" && ["restore", "empty"].contains(parts[5]):
            guard WireRules.isValidContainerID(parts[3]) else { self = .invalid("bad container id"); return }
            self = parts[5] == "restore" ? .trashRestore(parts[3]) : .trashEmpty(parts[3])
        case 6 where parts[2] == "containers" && parts[4] == "history":
            guard WireRules.isValidContainerID(parts[3]) else { self = .invalid("bad container id"); return }
            self = WireRules.isValidID(parts[5]) ? .history(parts[3], parts[5]) : .invalid("bad item id")
        case 6 where parts[2] == "containers" && parts[4] == "chunks" && parts[5] == "missing":
            self = WireRules.isValidContainerID(parts[3]) ? .missingChunks(parts[3]) : .invalid("bad container id")
        case 6 where parts[2] == "containers" && ["items", "blobs", "manifests"].contains(parts[4]):
            let cid = parts[3], key = parts[5]
            guard WireRules.isValidContainerID(cid) else { self = .invalid("bad container id"); return }
            switch parts[4] {
            case "items": self = WireRules.isValidID(key) ? .item(cid, key) : .invalid("bad item id")
            case "blobs": self = isSHA256Hex(key) ? .blob(cid, key) : .invalid("bad blob hash")
            default: self = isSHA256Hex(key) ? .manifest(cid, key) : .invalid("bad manifest hash")
            }
        default: self = .unknown
        }
    }

    /// The same route on the stored ids of a user's containers (`ContainerScope`).
    func scoped(_ prefix: String) -> Route {
        guard !prefix.isEmpty else { return self }
        switch self {
        case .containerList: return .containerList(prefix)
        case .container(let c): return .container(prefix + c)
        case .changes(let c): return .changes(prefix + c)
        case .batch(let c): return .batch(prefix + c)
        case .item(let c, let id): return .item(prefix + c, id)
        case .blob(let c, let sha): return .blob(prefix + c, sha)
        case .missingChunks(let c): return .missingChunks(prefix + c)
        case .manifest(let c, let sha): return .manifest(prefix + c, sha)
        case .kv(let c): return .kv(prefix + c)
        case .kvKey(let c, let key): return .kvKey(prefix + c, key)
        case .history(let c, let id): return .history(prefix + c, id)
        case .trash(let c): return .trash(prefix + c)
        case .trashRestore(let c): return .trashRestore(prefix + c)
        case .trashEmpty(let c): return .trashEmpty(prefix + c)
        case .rewind(let c): return .rewind(prefix + c)
        case .deleteData(let c): return .deleteData(prefix + c)
        case .shareAdd(let c): return .shareAdd(prefix + c)
        case .shareRemove(let c): return .shareRemove(prefix + c)
        case .health, .stats, .faults, .usage, .shareList, .shareLeave, .shareView, .invalid, .unknown: return self
        }
    }

    var allowedMethods: [String] {
        switch self {
        case .health, .stats: return ["GET"]
        case .faults, .batch, .missingChunks, .trashRestore, .trashEmpty, .rewind, .deleteData: return ["POST"]
        case .shareAdd, .shareRemove, .shareLeave: return ["POST"]
        case .history, .trash, .containerList, .usage, .shareList: return ["GET"]
        case .container: return ["PUT"]
        case .changes, .kv: return ["GET"]
        case .kvKey: return ["PUT"]
        case .item: return ["GET", "PUT", "DELETE"]
        case .blob: return ["HEAD", "GET", "PUT"]
        case .shareView(_, let part): return part.allowedMethods
        case .manifest: return ["GET", "PUT"]
        case .invalid: return ["GET", "HEAD", "PUT", "DELETE", "POST"]
        case .unknown: return []
        }
    }

    /// The largest JSON body the route takes.
    var maxBodyBytes: Int {
        switch self {
        case .kvKey: return KVLimits.maxBodyBytes
        case .batch: return WireBatchLimits.maxBodyBytes
        case .manifest: return WireChunkLimits.maxManifestBytes
        case .missingChunks: return 1 << 20 // (the most hashes asked at once take about 670 KB)
        case .rewind, .deleteData: return 16 << 10 // (an id, a time, a flag and a device's name, escaped)
        case .shareAdd, .shareRemove, .shareLeave: return 16 << 10 // (an id, a user's name and a flag, escaped)
        default: return WireRules.maxJSONBytes
        }
    }

    /// The routes only a test server has (`StubConfig.testRoutes`).
    var isTestRoute: Bool {
        switch self {
        case .stats, .faults: return true
        default: return false
        }
    }

    /// Health, stats and faults are neither counted nor failed by injected faults.
    var isBookkeeping: Bool {
        switch self {
        case .health, .stats, .faults: return true
        default: return false
        }
    }
}

/// What a request under `/v1/shares/{id}/` asks of a share's view: its start (`PUT`), its feed, an item, a blob;
/// any other path is one the view does not serve (a write there is refused as every write is).
enum ShareViewPart: Equatable {
    case open, changes, item(String), blob(String), other

    init(_ rest: [String]) {
        switch rest.count {
        case 0: self = .open
        case 1 where rest[0] == "changes": self = .changes
        case 2 where rest[0] == "items" && WireRules.isValidID(rest[1]): self = .item(rest[1])
        case 2 where rest[0] == "blobs" && isSHA256Hex(rest[1]): self = .blob(rest[1])
        default: self = .other
        }
    }

    var allowedMethods: [String] {
        switch self {
        case .open: return ["PUT"]
        case .changes: return ["GET"]
        case .item: return ["GET", "PUT", "DELETE"]
        case .blob: return ["HEAD", "GET", "PUT"]
        case .other: return ["GET", "HEAD", "PUT", "DELETE", "POST"]
        }
    }

    /// Whether `method` writes here (the view's start, a `PUT`, only reads).
    func isWrite(_ method: String) -> Bool { self != .open && !["GET", "HEAD"].contains(method) }
}

/// The server's output as one link of `bytesPerSecond` (`--bandwidth`): each piece of a blob download takes its
/// time on it after the pieces given before it, whichever download they are of, so downloads at once share the
/// link as they would share a real one (a file fetched in four chunk requests at once gets it, not four times it).
final class OutputLink: Sendable {
    let bytesPerSecond: Int64
    /// When the link has sent everything given to it so far (monotonic ns).
    private let free = Locked<Int64>(0)

    init(bytesPerSecond: Int64) { self.bytesPerSecond = bytesPerSecond }

    /// The most one download gives the link at once (a twentieth of a second's worth), so that downloads at
    /// once take turns.
    var slice: Int64 { max(1, bytesPerSecond / 20) }

    /// Gives `bytes` to the link: answers when they have gone (monotonic ns). An idle link saves nothing up.
    func take(_ bytes: Int64) -> Int64 {
        let now = monotonicNanoseconds()
        return free.withLock { free in
            free = max(free, now) + Int64(Double(bytes) * 1e9 / Double(bytesPerSecond))
            return free
        }
    }
}

/// One request in flight: created on MHD's first call, released when MHD reports it complete.
final class Exchange {
    let method: String
    let url: String
    /// As parsed, then scoped to the user of the request's key.
    var route: Route
    /// Who the request's key belongs to, once it was checked.
    var account: Account?
    var body: [UInt8] = []
    var bodyTooLarge = false
    var writer: BlobWriter?
    var declaredLength: Int64?
    var blobAlreadyThere = false
    /// The stored blob was found damaged: this upload replaces it.
    var replacingBlob = false
    /// Refused before its body is read (its length could be read two ways).
    var refusedAtOnce = false
    /// An answer settled before the body arrived: the body is drained, then this goes out.
    var pending: Reply?
    var answered = false
    /// When the header arrived (monotonic ns), and the body's bytes since: a body too slow is cut.
    let started = monotonicNanoseconds()
    var bodyBytes: Int64 = 0

    init(method: String, url: String, route: Route) {
        self.method = method; self.url = url; self.route = route
    }

    deinit { writer?.discard() }
}

struct Reply {
    enum Body {
        case json([UInt8])
        case stream(BlobStream)
    }
    var status: Int
    var body: Body
    var headers: [(String, String)] = []

    static func json<T: Encodable>(_ status: Int, _ value: T, headers: [(String, String)] = []) -> Reply {
        let bytes = (try? JSONEncoder.wire.encode(value)).map { Array($0) } ?? Array("{}".utf8)
        return Reply(status: status, body: .json(bytes), headers: headers)
    }

    /// The message also goes in `X-Error` (one line of printable ASCII), for HEAD, whose answer has no body.
    static func error(_ status: Int, _ message: String, current: WireItem? = nil,
                      yours: WireLastChange? = nil) -> Reply {
        let line = String(String.UnicodeScalarView(message.unicodeScalars.map { $0.value >= 32 && $0.value < 127 ? $0 : "?" }).prefix(300))
        return json(status, WireError(error: message, current: current, yours: yours), headers: [("X-Error", line)])
    }
}

/// The answer of a blob or manifest PUT.
private struct Stored: Encodable {
    let sha256: String
    let size: Int64
}

/// One run of a content's bytes: `length` bytes at `start` of the content, read from the blob `blob` of that
/// length, or zeros (a hole) when `blob` is nil.
struct ContentSegment {
    let start: Int64
    let length: Int64
    let blob: String?
    var end: Int64 { start + length }
}

/// What a blob GET serves: the content's size and the segments that hold it, in order and without gaps.
struct StoredContent {
    let size: Int64
    let segments: [ContentSegment]
}

/// Serves a content's bytes to MHD's content reader from its segments: opens each blob when the stream reaches
/// it and closes it after (one open at a time), writes zeros for a hole, and applies throttle and download
/// faults. MHD calls `read` from the connection's one thread, in order.
final class BlobStream {
    let segments: [ContentSegment]
    /// Where the body starts in the content, and its length.
    let offset: Int64
    let length: Int64
    var dropAfter: Int64?
    var corrupt = false
    /// The link the body's bytes take their time on (`--bandwidth`); nil: as fast as they can go.
    let link: OutputLink?
    /// Opens a blob of the given size for reading.
    let open: (String, Int64) throws(ServerFailure) -> FileDescriptor
    let isStopping: () -> Bool
    /// Told of a blob of the given size whose bytes, read whole, do not hash to its name.
    let damaged: (String, Int64) -> Void
    /// The blob hashed as it goes out (the body reads it whole, from its start), and the position of its next byte.
    private var hashing: (index: Int, next: Int64)?
    private var hasher = SHA256Hasher()
    /// The segment whose blob is open, and its file.
    private var current: (index: Int, fd: FileDescriptor)?
    private let log = Logger("stub")

    init(_ segments: [ContentSegment], offset: Int64, length: Int64, link: OutputLink?,
         open: @escaping (String, Int64) throws(ServerFailure) -> FileDescriptor, isStopping: @escaping () -> Bool,
         damaged: @escaping (String, Int64) -> Void = { _, _ in }) {
        self.segments = segments; self.offset = offset; self.length = length; self.link = link
        self.open = open; self.isStopping = isStopping; self.damaged = damaged
    }

    deinit { current?.fd.close() }

    /// Opens the blob the body starts in, so that one that cannot be served is refused before the status goes out.
    func openFirst() throws(ServerFailure) {
        guard length > 0, let i = segmentIndex(at: offset), let blob = segments[i].blob else { return }
        _ = try file(of: i, blob: blob)
    }

    /// MHD's content reader: bytes from `pos` (relative to the body) into `buf`; -1 at the end, -2 to abort.
    func read(pos: UInt64, into buf: UnsafeMutablePointer<CChar>?, max: Int) -> Int {
        let pos = Int64(pos)
        guard let buf else { return -2 }
        if pos >= length { return -1 }
        if let dropAfter, pos >= dropAfter { return -2 }
        var n = Int64(max)
        n = min(n, length - pos)
        if let dropAfter { n = min(n, dropAfter - pos) }
        if let link {
            n = min(n, link.slice)
            // These bytes go once the link has sent what was given to it before them, from any download.
            let due = link.take(n)
            while true {
                if isStopping() { return -2 }
                let now = monotonicNanoseconds()
                if now >= due { break }
                usleep(useconds_t(Swift.min(due - now, 100_000_000) / 1000))
            }
        }
        if isStopping() { return -2 }
        guard let got = readContent(at: offset + pos, into: buf, max: n) else { return -2 }
        if corrupt && pos == 0 { buf[0] = CChar(bitPattern: UInt8(bitPattern: buf[0]) ^ 0xff) }
        return got
    }

    /// Up to `max` bytes of the content from `position`, from the one segment that holds it; nil when they
    /// cannot be read.
    private func readContent(at position: Int64, into buf: UnsafeMutablePointer<CChar>, max: Int64) -> Int? {
        guard let i = segmentIndex(at: position) else { return nil }
        let segment = segments[i]
        let n = Int(min(max, segment.end - position))
        guard let blob = segment.blob else {
            buf.update(repeating: 0, count: n)
            return n
        }
        do {
            let got = try file(of: i, blob: blob).read(into: UnsafeMutableRawBufferPointer(start: buf, count: n),
                                                       at: position - segment.start)
            guard got > 0 else {
                log.error("blob \(blob) is shorter than its \(segment.length) bytes: cut, and set aside as damaged")
                damaged(blob, segment.length)
                return nil
            }
            checkSound(i, segment, blob, at: position, UnsafeRawBufferPointer(start: buf, count: got))
            return got
        } catch {
            log.warning("cannot serve blob \(blob): \(error)")
            return nil
        }
    }

    /// Hashes a blob's bytes as they go out when the body reads it whole from its start; when its last bytes
    /// make another hash than its name, the blob is set aside as damaged (`damaged`). They still go out: the
    /// reader's own check refuses them and says the content is corrupt, and its next try finds the blob absent.
    private func checkSound(_ i: Int, _ segment: ContentSegment, _ blob: String, at position: Int64,
                            _ bytes: UnsafeRawBufferPointer) {
        if position == segment.start {
            hasher = SHA256Hasher()
            hashing = (i, position)
        }
        guard let h = hashing, h.index == i, h.next == position else { return } // read in part: unchecked
        hasher.update(bytes)
        let next = position + Int64(bytes.count)
        guard next == segment.end else {
            hashing = (i, next)
            return
        }
        hashing = nil
        guard hasher.finalizeHex() != blob else { return }
        log.error("blob \(blob) does not hash to its name: set aside as damaged")
        damaged(blob, segment.length)
    }

    /// The open file of segment `i`, the blob `blob`: opened now (and the one before closed) when it is not.
    private func file(of i: Int, blob: String) throws(ServerFailure) -> FileDescriptor {
        if let current, current.index == i { return current.fd }
        current?.fd.close()
        current = nil
        let fd = try open(blob, segments[i].length)
        current = (i, fd)
        return fd
    }

    /// The segment that holds the content's byte at `position`, if any.
    private func segmentIndex(at position: Int64) -> Int? {
        var low = 0, high = segments.count
        while low < high {
            let mid = (low + high) / 2
            if segments[mid].end <= position { low = mid + 1 } else { high = mid }
        }
        return low < segments.count && segments[low].start <= position ? low : nil
    }
}

extension StubServer {
    private func header(_ connection: OpaquePointer, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
    }

    private func argument(_ connection: OpaquePointer, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, .GET_ARGUMENT_KIND, name).map { String(cString: $0) }
    }

    /// MHD's access handler: called once with the headers, once per body chunk, and once at the end.
    fileprivate func handle(connection: OpaquePointer, url: String, method: String,
                            upload: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
                            context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        guard let raw = context.pointee else {
            watch.requestBegan(UInt(bitPattern: connection))
            let ex = begin(connection: connection, url: url, method: method)
            context.pointee = Unmanaged.passRetained(ex).toOpaque()
            let hasBody = header(connection, "Transfer-Encoding") != nil || (ex.declaredLength ?? 0) > 0
            if hasBody && ex.account == nil {
                // A request without a valid key (refused, or a health check) is answered without its body and its
                // connection closed, so that no stranger holds one by trickling a body (ConnectionWatch cuts
                // strangers owing a header).
                ex.answered = true
                var reply = ex.pending ?? finish(connection: connection, ex)
                if !reply.headers.contains(where: { $0.0 == "Connection" }) { reply.headers.append(("Connection", "close")) }
                return send(connection, ex, reply)
            }
            if let pending = ex.pending {
                // Refuse a large or unsized body at once rather than drain it (MHD then closes the connection).
                if ex.refusedAtOnce || hasBody && (ex.declaredLength == nil || ex.declaredLength! > 1 << 20) {
                    ex.answered = true
                    return send(connection, ex, pending)
                }
            }
            return .YES
        }
        let ex = Unmanaged<Exchange>.fromOpaque(raw).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            ex.bodyBytes += Int64(uploadSize.pointee)
            if watch.bodyTooSlow(started: ex.started, bytes: ex.bodyBytes) {
                log.warning("\(ex.method) \(ex.url): the body comes slower than 1 KiB/s; the connection is cut")
                return .NO
            }
            if !ex.answered && ex.pending == nil {
                consume(ex, UnsafeRawBufferPointer(start: upload, count: uploadSize.pointee))
            }
            uploadSize.pointee = 0
            return .YES
        }
        if ex.answered { return .YES }
        ex.answered = true
        let reply = ex.pending ?? finish(connection: connection, ex)
        return send(connection, ex, reply)
    }

    /// The checks that need no body: route, method, token, injected failures, sizes.
    private func begin(connection: OpaquePointer, url: String, method: String) -> Exchange {
        var route = Route(path: url)
        if route.isTestRoute && !config.testRoutes { route = .unknown } // not there: 404, as any unknown path
        let ex = Exchange(method: method, url: url, route: route)
        if let length = header(connection, "Content-Length") { ex.declaredLength = Int64(length) }
        if !route.isBookkeeping { counters.update { $0.requests += 1 } }
        ex.pending = precheck(connection, ex)
        return ex
    }

    /// Why the request's length could be read two ways (the ground of request smuggling behind a proxy), or nil:
    /// two different Content-Lengths, a Transfer-Encoding beside a Content-Length, two Transfer-Encodings, or
    /// one that is not plain `chunked`. (libmicrohttpd 0.9.75 reads the chunked body then, ignoring the length.)
    private func framingProblem(_ connection: OpaquePointer) -> String? {
        if ubq_mhd_header_conflicts(connection, "Content-Length") != 0 { return "conflicting Content-Length headers" }
        let encodings = ubq_mhd_header_count(connection, "Transfer-Encoding")
        guard encodings > 0 else { return nil }
        if header(connection, "Content-Length") != nil { return "both Content-Length and Transfer-Encoding" }
        if encodings > 1 { return "Transfer-Encoding twice" }
        let encoding = header(connection, "Transfer-Encoding")?.trimmingCharacters(in: .whitespaces).lowercased()
        return encoding == "chunked" ? nil : "Transfer-Encoding other than chunked"
    }

    private func precheck(_ connection: OpaquePointer, _ ex: Exchange) -> Reply? {
        if let framing = framingProblem(connection) {
            // Closed after the answer, and answered before any body is read: what follows on the connection is
            // not read as a request of its own.
            ex.refusedAtOnce = true
            var r = Reply.error(400, framing)
            r.headers.append(("Connection", "close"))
            return r
        }
        if case .unknown = ex.route { return .error(404, "no such route") }
        guard ex.route.allowedMethods.contains(ex.method) else {
            var r = Reply.error(405, "method not allowed")
            r.headers.append(("Allow", ex.route.allowedMethods.joined(separator: ", ")))
            return r
        }
        if case .health = ex.route { return nil }
        do throws(ServerFailure) {
            switch try accounts.authenticate(header(connection, "Authorization")) {
            case .success(let account):
                if let why = watch.identified(UInt(bitPattern: connection), device: account.device, user: account.user) {
                    ex.refusedAtOnce = true // its body unread: the connection closes after the answer
                    var r = Reply.error(429, "too many connections: \(why); close one and try again")
                    r.headers.append(("Connection", "close"))
                    r.headers.append(("Retry-After", "1"))
                    return r
                }
                ex.account = account
                ex.route = ex.route.scoped(account.prefix)
            case .failure(let refusal):
                return .error(refusal.status, refusal.message)
            }
        } catch {
            return failureReply(error)
        }
        let route = ex.route
        if !route.isBookkeeping, let status = counters.takeFailure() { return .error(status, "injected fault") }
        if let refusal = shareViewWriteRefusal(ex) { return refusal }
        switch route {
        case .invalid(let why):
            return .error(400, why)
        case .blob(let cid, let sha) where ex.method == "PUT":
            do throws(ServerFailure) {
                guard try store.containerExists(cid) else { return .error(404, "no such container") }
                guard let length = ex.declaredLength, length >= 0 else { return .error(400, "Content-Length needed") }
                guard length <= config.maxBlobBytes else { return .error(413, "blob larger than \(config.maxBlobBytes) bytes") }
                collector.touch(cid, sha)
                // A stored blob that does not hash to its name counts as absent: the right bytes replace it.
                if let size = try store.blobs.size(cid, sha) {
                    ex.replacingBlob = try !store.blobIsSound(cid, sha, size: size)
                    ex.blobAlreadyThere = !ex.replacingBlob
                    if ex.replacingBlob { log.warning("blob \(sha) of \(cid) is damaged in the store: the upload replaces it") }
                }
                if !ex.blobAlreadyThere && !ex.replacingBlob, let account = ex.account,
                   let refusal = try refusal(account, bytes: length) {
                    return failureReply(.refused(refusal))
                }
                if !ex.blobAlreadyThere { ex.writer = try BlobWriter(tmpDir: store.tmpDir) }
            } catch {
                return failureReply(error)
            }
        case .kvKey:
            if let length = ex.declaredLength, length > Int64(KVLimits.maxBodyBytes) {
                return .error(413, "quota: " + KVLimits.Violation.valueTooLarge.message)
            }
        case .item, .faults, .batch, .manifest, .missingChunks, .trashRestore, .trashEmpty, .rewind, .deleteData,
             .shareAdd, .shareRemove, .shareLeave:
            if let length = ex.declaredLength, length > Int64(route.maxBodyBytes) {
                // A body a little over the limit is read and dropped, then refused: refused at once, the client
                // may still be sending it when the connection closes, and lose the answer to the reset. A large
                // one is refused at once (not read for nothing).
                guard length <= Int64(Self.drainedBodyBytes) else {
                    return .error(413, "body larger than \(route.maxBodyBytes) bytes")
                }
                ex.bodyTooLarge = true
            }
        default:
            break
        }
        return nil
    }

    /// The largest body over a route's limit that is read (and dropped) before the 413.
    static let drainedBodyBytes = 16 << 20

    private func consume(_ ex: Exchange, _ chunk: UnsafeRawBufferPointer) {
        if let writer = ex.writer {
            writer.write(chunk)
        } else if ex.blobAlreadyThere {
            return
        } else if !ex.bodyTooLarge {
            if ex.body.count + chunk.count > ex.route.maxBodyBytes {
                ex.bodyTooLarge = true
                ex.body = []
            } else {
                ex.body.append(contentsOf: chunk)
            }
        }
    }

    private func failureReply(_ failure: ServerFailure) -> Reply {
        switch failure {
        case .refused(let f):
            return .error(f.status, f.message, current: f.current, yours: f.yours)
        case .applied(let answer):
            return .json(208, answer)
        case .unavailable, .diskFull:
            log.warning("\(failure)")
            return .error(503, "\(failure)")
        case .fault:
            log.error("internal error: \(failure)")
            return .error(500, "\(failure)")
        }
    }

    /// The answer to a request whose body (if any) has fully arrived.
    private func finish(connection: OpaquePointer, _ ex: Exchange) -> Reply {
        if ex.bodyTooLarge { return .error(413, "body larger than \(ex.route.maxBodyBytes) bytes") }
        do throws(ServerFailure) {
            switch ex.route {
            case .health:
                return .json(200, ["ok": true])
            case .stats:
                return .json(200, counters.snapshot)
            case .faults:
                let faults = try decode(WireFaults.self, ex.body)
                return .json(200, try counters.arm(faults))
            case .usage:
                guard let account = ex.account else { throw .refused(401, "no key") }
                return .json(200, try usage(of: account))
            case .containerList(let prefix):
                var held: [String] = []
                for cid in try store.containerIDs(prefix: prefix) where try store.holdsAnything(cid) { held.append(cid) }
                return .json(200, WireContainerList(containers: held.map(ContainerScope.wireID).sorted()))
            case .container(let cid):
                if let account = ex.account, try !store.containerExists(cid),
                   let refusal = try refusal(account, containers: 1) {
                    throw .refused(refusal)
                }
                var opened = try store.ensureContainer(cid)
                opened.container = ContainerScope.wireID(cid)
                return .json(200, opened)
            case .changes(let cid):
                return try changes(connection, cid)
            case .kv(let cid):
                return try kvFeed(connection, cid)
            case .kvKey(let cid, let key):
                var entry = try decode(WireKVEntry.self, ex.body)
                guard entry.key == key else { throw .refused(400, "the body names another key") }
                entry.seq = 0
                return .json(200, try store.putKV(cid, entry))
            case .item(let cid, let id):
                return try itemRoute(connection, ex, cid, id)
            case .batch(let cid):
                return try batch(ex, cid)
            case .blob(let cid, let sha):
                switch ex.method {
                case "PUT": return try putBlob(ex, cid, sha)
                default: return try getBlob(connection, ex, cid, sha)
                }
            case .missingChunks(let cid):
                return try missingChunks(ex, cid)
            case .manifest(let cid, let sha):
                switch ex.method {
                case "PUT": return try putManifest(ex, cid, sha)
                default: return try getManifest(cid, sha)
                }
            case .history(let cid, let id):
                return .json(200, WireHistory(versions: try store.history(cid, id)))
            case .trash(let cid):
                return .json(200, WireTrash(items: try store.trash(cid)))
            case .trashRestore(let cid):
                let asked = try decode(WireRestoreRequest.self, ex.body)
                return .json(200, WireRestored(restored: try store.restore(cid, ids: asked.ids, device: asked.device)))
            case .trashEmpty(let cid):
                return .json(200, WireEmptied(emptied: try store.emptyTrash(cid, ids: try emptyTrashIDs(ex))))
            case .rewind(let cid):
                let asked = try decode(WireRewindRequest.self, ex.body)
                return .json(200, WireRewound(changes: try store.rewind(cid, asked)))
            case .deleteData(let cid):
                let asked = try decode(WireDeleteDataRequest.self, ex.body)
                return .json(200, try store.deleteData(cid, documents: asked.documents, device: asked.device))
            case .shareAdd(let cid):
                guard let account = ex.account else { throw .refused(401, "no key") }
                let asked = try decode(WireShareRequest.self, ex.body)
                return .json(200, try store.addShare(cid, owner: account.user, asked))
            case .shareRemove(let cid):
                let asked = try decode(WireShareRemoval.self, ex.body)
                return .json(200, WireSharesRemoved(removed: try store.removeShare(cid, asked)))
            case .shareList:
                guard let account = ex.account else { throw .refused(401, "no key") }
                return .json(200, WireShareList(shares: try store.shares(of: account.user)))
            case .shareView(let id, let part):
                return try shareView(connection, ex, id, part)
            case .shareLeave:
                guard let account = ex.account else { throw .refused(401, "no key") }
                let asked = try decode(WireShareLeave.self, ex.body)
                return .json(200, WireSharesRemoved(removed: try store.leaveShare(asked.id, user: account.user)))
            case .invalid(let why):
                return .error(400, why)
            case .unknown:
                return .error(404, "no such route")
            }
        } catch {
            return failureReply(error)
        }
    }

    /// The ids of `POST .../trash/empty`, or nil for `{"all": true}`; both, neither or `all: false` is 400.
    private func emptyTrashIDs(_ ex: Exchange) throws(ServerFailure) -> [String]? {
        let asked = try decode(WireEmptyTrashRequest.self, ex.body)
        switch (asked.ids, asked.all) {
        case (let ids?, nil): return ids
        case (nil, true?): return nil
        default: throw .refused(400, "give {\"ids\": [...]} or {\"all\": true}")
        }
    }

    private func decode<T: Decodable>(_ type: T.Type, _ body: [UInt8]) throws(ServerFailure) -> T {
        do {
            return try JSONDecoder().decode(type, from: Data(body))
        } catch {
            throw .refused(400, "bad JSON body")
        }
    }

    private func changes(_ connection: OpaquePointer, _ cid: String) throws(ServerFailure) -> Reply {
        let (since, limit, wait) = try feedArguments(connection)
        let answer = try store.changes(cid, since: since, limit: limit, wait: wait)
        counters.update { $0.changesRequests += 1 }
        return .json(200, answer)
    }

    /// A feed request's `since`, `limit` (at most 10,000) and `wait` (at most 60 s).
    private func feedArguments(_ connection: OpaquePointer) throws(ServerFailure) -> (Int64, Int, Int) {
        var since: Int64 = 0
        if let s = argument(connection, "since"), !s.isEmpty {
            guard let v = Int64(s), v >= 0 else { throw .refused(400, "bad since token") }
            since = v
        }
        var limit = 1000
        if let s = argument(connection, "limit"), !s.isEmpty {
            guard let v = Int(s), v > 0 else { throw .refused(400, "bad limit") }
            limit = min(v, 10_000)
        }
        var wait = 0
        if let s = argument(connection, "wait"), !s.isEmpty {
            guard let v = Int(s), v >= 0 else { throw .refused(400, "bad wait") }
            wait = min(v, 60)
        }
        return (since, limit, wait)
    }

    /// A participant's read of the view of share `id`: only the participant reaches it (404 for anyone else, as
    /// for no such share). Writes never get here: `precheck` refuses them before their body is read
    /// (`shareViewWriteRefusal`).
    private func shareView(_ connection: OpaquePointer, _ ex: Exchange, _ id: String,
                           _ part: ShareViewPart) throws(ServerFailure) -> Reply {
        guard let account = ex.account else { throw .refused(401, "no key") }
        let share = try store.shareForParticipant(id, user: account.user)
        switch part {
        case .open:
            return .json(200, try store.openView(share))
        case .changes:
            let (since, limit, wait) = try feedArguments(connection)
            counters.update { $0.changesRequests += 1 }
            return .json(200, try store.viewChanges(share, since: since, limit: limit, wait: wait))
        case .item(let itemID):
            return .json(200, try store.viewItem(share, itemID))
        case .blob(let sha):
            guard try store.viewNamesBlob(share, sha) else { throw .refused(404, "no such blob") }
            return try getBlob(connection, ex, share.container, sha)
        case .other:
            throw .refused(404, "no such route")
        }
    }

    /// A write through a share's view: 403 on a read-only share; on a read-write one, 501 until writing into a
    /// shared folder is built.
    private static func writeRefusal(_ share: StubShare) -> ServerFailure {
        share.readOnly ? .refused(403, "the folder is shared with you read-only")
            : .refused(501, "writing into a shared folder is not built yet")
    }

    /// A write through a share's view, refused before its body is read; nil for any other request.
    private func shareViewWriteRefusal(_ ex: Exchange) -> Reply? {
        guard case .shareView(let id, let part) = ex.route, part.isWrite(ex.method) else { return nil }
        ex.refusedAtOnce = true // its body unread: the connection closes after the answer
        do throws(ServerFailure) {
            guard let account = ex.account else { throw .refused(401, "no key") }
            return failureReply(Self.writeRefusal(try store.shareForParticipant(id, user: account.user)))
        } catch {
            return failureReply(error)
        }
    }

    private func kvFeed(_ connection: OpaquePointer, _ cid: String) throws(ServerFailure) -> Reply {
        var since: Int64 = 0, wait = 0
        if let s = argument(connection, "since"), !s.isEmpty {
            guard let v = Int64(s), v >= 0 else { throw .refused(400, "bad since") }
            since = v
        }
        if let s = argument(connection, "wait"), !s.isEmpty {
            guard let v = Int(s), v >= 0 else { throw .refused(400, "bad wait") }
            wait = min(v, 60)
        }
        return .json(200, try store.kvChanges(cid, since: since, wait: wait))
    }

    private func itemRoute(_ connection: OpaquePointer, _ ex: Exchange, _ cid: String, _ id: String) throws(ServerFailure) -> Reply {
        switch ex.method {
        case "GET":
            return .json(200, try store.item(cid, id))
        case "PUT":
            let ifMatch = header(connection, "If-Match"), ifNoneMatch = header(connection, "If-None-Match")
            let condition: WriteCondition
            switch (ifMatch, ifNoneMatch) {
            case (let m?, nil):
                guard let v = parseVersion(m) else { throw .refused(400, "bad If-Match version") }
                condition = .ifMatch(v)
            case (nil, let n?):
                guard n.trimmingCharacters(in: .whitespaces) == "*" else { throw .refused(400, "If-None-Match must be *") }
                condition = .ifNoneMatch
            default:
                throw .refused(400, "exactly one of If-Match and If-None-Match: * is needed")
            }
            let body = try decode(WireItem.self, ex.body)
            let change = try changeID(connection, device: header(connection, "X-Device") ?? body.device)
            if case .ifNoneMatch = condition, let account = ex.account, let refusal = try refusal(account, items: 1) {
                throw .refused(refusal)
            }
            do {
                let stored = try store.putItem(cid, id, body, condition, change: change)
                if case .ifNoneMatch = condition { store.meter.created(cid, items: 1) }
                counters.update { $0.itemPuts += 1 }
                return answerUnlessLost(.json(200, stored))
            } catch .applied(let answer) {
                counters.update { $0.appliedRetries += 1 }
                return .json(208, answer)
            }
        default: // DELETE
            guard let m = header(connection, "If-Match"), let v = parseVersion(m) else {
                throw .refused(400, "If-Match version needed")
            }
            let device = header(connection, "X-Device") ?? ""
            let change = try changeID(connection, device: device)
            do {
                let tomb = try store.deleteItem(cid, id, ifMatch: v, device: device, change: change)
                counters.update { $0.itemDeletes += 1 }
                return answerUnlessLost(.json(200, tomb))
            } catch .applied(let answer) {
                counters.update { $0.appliedRetries += 1 }
                return .json(208, answer)
            }
        }
    }

    /// `POST .../batch`: the limits of the whole request, each inline content checked and written to a
    /// temporary file, then the entries applied in order by the store.
    private func batch(_ ex: Exchange, _ cid: String) throws(ServerFailure) -> Reply {
        let entries = try decode(WireBatch.self, ex.body).entries
        guard entries.count <= WireBatchLimits.maxEntries else {
            throw .refused(413, "more than \(WireBatchLimits.maxEntries) entries")
        }
        let inline = entries.map { $0.content?.count ?? 0 }
        guard !inline.contains(where: { $0 > WireBatchLimits.maxInlineBytes }) else {
            throw .refused(413, "inline content over \(WireBatchLimits.maxInlineBytes) bytes")
        }
        guard inline.reduce(0, +) <= WireBatchLimits.maxInlineTotal else {
            throw .refused(413, "inline content over \(WireBatchLimits.maxInlineTotal) bytes in all")
        }
        guard try store.containerExists(cid) else { throw .refused(404, "no such container") }
        var prepared = try entries.map { (entry) throws(ServerFailure) in try prepareInline(entry, cid) }
        if let account = ex.account { prepared = try withinLimits(account, prepared) }
        let results = try store.batch(cid, prepared, deadline: Date(timeIntervalSinceNow: config.batchSeconds))
        store.meter.created(cid, items: Int64(zip(prepared, results).filter { $0.0.isCreate && $0.1.status == 200 }.count))
        counters.update { stats in
            stats.batches += 1
            for (p, r) in zip(prepared, results) {
                if r.status == 208 { stats.appliedRetries += 1 }
                guard r.status == 200 else { continue }
                if p.entry.op == .put { stats.itemPuts += 1 } else { stats.itemDeletes += 1 }
                if p.storedBlob, let blob = p.blob {
                    stats.blobPuts += 1
                    stats.blobBytesIn += blob.written
                }
            }
        }
        return answerUnlessLost(.json(200, WireBatchAnswer(results: results)))
    }

    /// The entries refused for taking the user past a limit: a create past the item limit, new inline content
    /// past the storage quota (Quotas.swift). The others are left as they were.
    private func withinLimits(_ account: Account, _ prepared: [StubBatchEntry]) throws(ServerFailure) -> [StubBatchEntry] {
        guard prepared.contains(where: { $0.refusal == nil && ($0.isCreate || $0.blob != nil) }) else { return prepared }
        var allowance = Allowance(try usage(account))
        return prepared.map { entry in
            var entry = entry
            guard entry.refusal == nil,
                  let hit = allowance.take(items: entry.isCreate ? 1 : 0, bytes: entry.blob?.written ?? 0) else { return entry }
            logLimit(account, hit.limit)
            entry.refusal = hit.refusal
            return entry
        }
    }

    /// The refusal of adding so much to what the account's user has now, logged; nil when it fits.
    private func refusal(_ account: Account, items: Int64 = 0, bytes: Int64 = 0, containers: Int64 = 0) throws(ServerFailure) -> StubFailure? {
        var allowance = Allowance(try usage(account))
        guard let hit = allowance.take(items: items, bytes: bytes, containers: containers) else { return nil }
        logLimit(account, hit.limit)
        return hit.refusal
    }

    /// What the account's user stores now, against their limits.
    private func usage(_ account: Account) throws(ServerFailure) -> UserUsage {
        try store.usage(user: account.user, prefix: account.prefix, limits: accounts.userLimits(account.user))
    }

    /// Counts a refusal for one of the user's limits in the watch's rate-limited report of limits hit.
    private func logLimit(_ account: Account, _ limit: String) {
        watch.limitHit(limit, by: "user \(account.user) device \(account.device)")
    }

    /// An entry with its inline content verified against the item's hash and size and written to a temporary
    /// file (the store stores it unless it holds that blob already: asking it here would be a round trip per
    /// entry to S3); content that does not match refuses the entry.
    private func prepareInline(_ entry: WireBatchEntry, _ cid: String) throws(ServerFailure) -> StubBatchEntry {
        var prepared = StubBatchEntry(entry: entry)
        guard let content = entry.content else { return prepared }
        let bytes = [UInt8](content)
        guard entry.op == .put, let item = entry.item, item.kind == .file, Int64(bytes.count) == item.size,
              sha256Hex(bytes) == item.sha256 else {
            prepared.refusal = StubFailure(400, "the inline content does not match the item's hash and size")
            return prepared
        }
        if bytes.isEmpty { return prepared }
        let writer = try BlobWriter(tmpDir: store.tmpDir)
        bytes.withUnsafeBytes { writer.write($0) }
        _ = try writer.finish()
        prepared.blob = writer
        return prepared
    }

    /// An applied item write's answer, or 503 in its place when a loseAnswerNext fault is armed.
    private func answerUnlessLost(_ reply: Reply) -> Reply {
        counters.takeLostAnswer() ? .error(503, "answer lost (injected fault)") : reply
    }

    /// The change id of a put or delete (`X-Change-ID`, optional) with the device that made it.
    private func changeID(_ connection: OpaquePointer, device: String) throws(ServerFailure) -> WireChangeID? {
        guard let id = header(connection, "X-Change-ID") else { return nil }
        guard WireRules.isValidID(id) else { throw .refused(400, "bad change id") }
        return WireChangeID(id: id, device: device)
    }

    /// A version in If-Match, bare or quoted like an entity tag.
    private func parseVersion(_ s: String) -> Int64? {
        var t = s.trimmingCharacters(in: .whitespaces)
        if t.count >= 2 && t.hasPrefix("\"") && t.hasSuffix("\"") { t = String(t.dropFirst().dropLast()) }
        guard let v = Int64(t), v >= 0 else { return nil }
        return v
    }

    private func putBlob(_ ex: Exchange, _ cid: String, _ sha: String) throws(ServerFailure) -> Reply {
        if ex.blobAlreadyThere {
            let size = try store.blobs.size(cid, sha) ?? 0
            counters.update { $0.blobPuts += 1 }
            return .json(200, Stored(sha256: sha, size: size))
        }
        guard let writer = ex.writer else { throw .refused(500, "no upload in progress") }
        defer { writer.discard(); ex.writer = nil }
        let got = try writer.finish()
        guard writer.written == ex.declaredLength else {
            throw .refused(422, "received \(writer.written) bytes of \(ex.declaredLength ?? -1)")
        }
        guard got == sha else { throw .refused(422, "the bytes hash to \(got)") }
        let created = sha == emptySHA256 ? false : try store.commitBlob(cid, sha, size: writer.written, tmpPath: writer.tmpPath,
                                                                                 replacing: ex.replacingBlob)
        counters.update {
            $0.blobPuts += 1
            if created { $0.blobBytesIn += writer.written }
        }
        return .json(created ? 201 : 200, Stored(sha256: sha, size: writer.written))
    }

    /// `POST .../chunks/missing`: those of the hashes asked about that name no blob, in the order asked. Each is
    /// noted as asked about, so the collector spares the chunks the client will name in its manifest.
    private func missingChunks(_ ex: Exchange, _ cid: String) throws(ServerFailure) -> Reply {
        let asked = try decode(WireChunkList.self, ex.body).chunks
        guard (1...WireChunkLimits.maxAsk).contains(asked.count) else {
            throw .refused(400, "ask about 1 to \(WireChunkLimits.maxAsk) chunks")
        }
        guard asked.allSatisfy(isSHA256Hex) else { throw .refused(400, "bad chunk hash") }
        guard try store.containerExists(cid) else { throw .refused(404, "no such container") }
        var missing: [String] = []
        for sha in asked {
            collector.touch(cid, sha)
            if try store.blobs.size(cid, sha) == nil { missing.append(sha) }
        }
        counters.update { $0.chunkAsks += 1 }
        return .json(200, WireChunkList(chunks: missing))
    }

    /// `PUT .../manifests/{sha}`: a well-formed manifest of that hash, stored once every chunk it names is
    /// (409 naming one that is not).
    private func putManifest(_ ex: Exchange, _ cid: String, _ sha: String) throws(ServerFailure) -> Reply {
        let manifest = try decode(WireManifest.self, ex.body)
        guard manifest.sha256 == sha else { throw .refused(400, "the body names another manifest") }
        if let problem = manifest.problem { throw .refused(400, problem) }
        collector.touch(cid, sha)
        let created = try store.putManifest(cid, manifest)
        counters.update { $0.manifestPuts += 1 }
        return .json(created ? 201 : 200, Stored(sha256: sha, size: manifest.size))
    }

    private func getManifest(_ cid: String, _ sha: String) throws(ServerFailure) -> Reply {
        guard try store.containerExists(cid) else { throw .refused(404, "no such container") }
        collector.touch(cid, sha)
        guard let manifest = try store.manifest(cid, sha) else { throw .refused(404, "no such manifest") }
        return .json(200, manifest)
    }

    /// `HEAD`/`GET .../blobs/{sha}`: the blob, or the content of the manifest stored under the hash.
    private func getBlob(_ connection: OpaquePointer, _ ex: Exchange, _ cid: String, _ sha: String) throws(ServerFailure) -> Reply {
        guard try store.containerExists(cid) else { throw .refused(404, "no such container") }
        collector.touch(cid, sha)
        guard let content = try store.content(cid, sha) else { throw .refused(404, try store.absence(cid, sha)) }
        let size = content.size
        var headers: [(String, String)] = [("Accept-Ranges", "bytes"), ("X-Content-SHA256", sha),
                                           ("Content-Type", "application/octet-stream")]
        let stopping: () -> Bool = { [store] in store.isStopping }
        let open: (String, Int64) throws(ServerFailure) -> FileDescriptor = { [store] (blob, blobSize) throws(ServerFailure) in
            try store.blobs.open(cid, blob, size: blobSize)
        }
        if ex.method == "HEAD" {
            return Reply(status: 200, body: .stream(BlobStream(content.segments, offset: 0, length: size, link: nil,
                                                               open: open, isStopping: stopping)),
                         headers: headers)
        }
        var status = 200
        var start: Int64 = 0, length = size
        if let range = header(connection, "Range") {
            guard let (a, b) = parseRange(range, size: size) else {
                var r = Reply.error(416, "bad range \(range)")
                r.headers.append(("Content-Range", "bytes */\(size)"))
                return r
            }
            if size > 0 {
                status = 206
                start = a; length = b - a + 1
                headers.append(("Content-Range", "bytes \(a)-\(b)/\(size)"))
            }
        }
        let damaged: (String, Int64) -> Void = { [store] blob, blobSize in store.setAsideDamaged(cid, blob, size: blobSize) }
        let stream = BlobStream(content.segments, offset: start, length: length, link: outputLink,
                                open: open, isStopping: stopping, damaged: damaged)
        try stream.openFirst()
        (stream.dropAfter, stream.corrupt) = counters.takeDownloadFaults(length: length)
        counters.update {
            $0.blobGets += 1
            $0.blobGetsBySha[sha, default: 0] += 1
            $0.blobBytesOut += length
        }
        return Reply(status: status, body: .stream(stream), headers: headers)
    }

    /// `bytes=A-`, `bytes=A-B` or `bytes=-N` as first and last offsets; nil when unsatisfiable.
    /// On an empty blob `bytes=0-` is accepted (and answered with the whole, empty, body).
    private func parseRange(_ value: String, size: Int64) -> (Int64, Int64)? {
        let v = value.trimmingCharacters(in: .whitespaces)
        guard v.hasPrefix("bytes="), !v.contains(",") else { return nil }
        let spec = v.dropFirst(6)
        guard let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            guard let n = Int64(last), n > 0, size > 0 else { return nil }
            return (max(0, size - n), size - 1)
        }
        guard let a = Int64(first), a >= 0 else { return nil }
        if size == 0 && a == 0 && last.isEmpty { return (0, -1) }
        guard a < size else { return nil }
        if last.isEmpty { return (a, size - 1) }
        guard let b = Int64(last), b >= a else { return nil }
        return (a, min(b, size - 1))
    }

    /// Queues the answer on the connection, after the configured latency.
    private func send(_ connection: OpaquePointer, _ ex: Exchange, _ reply: Reply) -> MHD_Result {
        if config.latencyMs > 0 { usleep(useconds_t(config.latencyMs) * 1000) }
        let response: OpaquePointer?
        var contentType = "application/json"
        switch reply.body {
        case .json(let bytes):
            response = bytes.withUnsafeBytes {
                MHD_create_response_from_buffer($0.count, UnsafeMutableRawPointer(mutating: $0.baseAddress),
                                                .RESPMEM_MUST_COPY)
            }
        case .stream(let stream):
            contentType = "application/octet-stream"
            let cls = Unmanaged.passRetained(stream).toOpaque()
            response = MHD_create_response_from_callback(UInt64(stream.length), 64 * 1024, { cls, pos, buf, max in
                Unmanaged<BlobStream>.fromOpaque(cls!).takeUnretainedValue().read(pos: pos, into: buf, max: max)
            }, cls, { cls in
                Unmanaged<BlobStream>.fromOpaque(cls!).release()
            })
            if response == nil { Unmanaged<BlobStream>.fromOpaque(cls).release() }
        }
        guard let response else {
            log.error("cannot create a response for \(ex.method) \(ex.url)")
            return .NO
        }
        defer { MHD_destroy_response(response) }
        var headers = reply.headers
        if !headers.contains(where: { $0.0 == "Content-Type" }) { headers.append(("Content-Type", contentType)) }
        for (name, value) in headers { _ = MHD_add_response_header(response, name, value) }
        log.debug("\(ex.method) \(ex.url) by \(ex.account.map { "\($0.user)/\($0.device)" } ?? "-") -> \(reply.status)")
        return MHD_queue_response(connection, UInt32(reply.status), response)
    }
}
