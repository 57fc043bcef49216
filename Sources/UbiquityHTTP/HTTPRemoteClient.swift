// RemoteClient over HTTP (docs/WIRE.md) on libcurl. Every call blocks its thread; calls from many threads run
// at once, each on its own easy handle taken from a shared pool (so connections are reused).
//
// What must hold: each call throws one `RemoteError`, mapped in one of two places: an HTTP answer by
// `HTTPMapping.error`, a transfer libcurl did not finish by `failure` (a stall or a lost connection is
// `unreachable`, so retried; a failure on this side keeps its own case), and a `208` to an item write with a
// change id, a retry already applied, as `.alreadyApplied` (`itemWrite`). A handle goes back to the pool after
// every request, with no pointer into the finished request left in it. NOSIGNAL is set: libcurl may not use
// signals in this threaded process. Small requests have a whole-request timeout (a long poll gets its wait on
// top); blob transfers have none, only the stall limit. With several servers, a request that finds its server
// gone (`ServerList.meansGone`) moves the client on to the next, and fails as it would have with one: the
// caller's retry goes to the next server. Certificates are verified (against `caFile` if given), host names too.
// A server without the chunk routes answers them 404, which is `.notFound`: the caller then moves the whole
// content as one blob (and `manifest(sha256:)` answers nil, so the content is read as one blob). A server
// without the history routes answers them 404 too: `.notFound`, a remote that keeps no history.
import Foundation
import CCurl
import UbiquityBase
import UbiquityCore
#if canImport(Glibc)
import Glibc
#endif

public struct HTTPTimeouts: Sendable {
    /// Time allowed to open the TCP connection.
    public let connectSeconds: Int
    /// Whole-request limit for small JSON requests (a long poll gets its wait on top).
    public let requestSeconds: Int
    /// Uploads of blobs and chunks: abort when less than 1 byte/s moves for this long (from the connection on).
    /// Big transfers have no total limit.
    public let stallSeconds: Int
    /// Downloads (a blob, its chunks, its manifest): the silence allowed, from the connection on (so it covers
    /// the server's time to its first byte too), at most `stallSeconds`. A mount sets it to its
    /// --download-timeout, so an open that waits for a download never waits out a longer silence.
    public let downloadSilenceSeconds: Int

    public init(connectSeconds: Int = 5, requestSeconds: Int = 30, stallSeconds: Int = 30,
                downloadSilenceSeconds: Int? = nil) {
        self.connectSeconds = connectSeconds
        self.requestSeconds = requestSeconds
        self.stallSeconds = stallSeconds
        self.downloadSilenceSeconds = min(stallSeconds, downloadSilenceSeconds ?? stallSeconds)
    }
}

public final class HTTPRemoteClient: RemoteClient, KeyValueRemote, Sendable {
    /// The server in use.
    public var baseURL: String { servers.current }
    /// Every server, in the order tried.
    public var baseURLs: [String] { servers.urls }
    /// The PEM file of the certificate authorities to trust for HTTPS (nil: the system's).
    public let caFile: String?
    public let container: String
    /// Where the container's routes are: `/v1/containers/{id}`, or a share's view, `/v1/shares/{id}`.
    private let place: [String]
    public let timeouts: HTTPTimeouts
    /// The name of this device: in log lines and in `X-Device` on deletes (items carry their own `device`).
    public let device: String
    /// Most items per page of the change feed (`limit`); nil leaves the stub's default (1000).
    public let changeLimit: Int?
    private let token: String
    private let servers: ServerList
    private let pool = CurlHandlePool()
    private let log = Logger("http")
    /// Largest JSON answer accepted (a change page of many items with extended attributes can be big).
    static let maxJSONAnswer = 256 << 20

    /// `baseURL` like "http://127.0.0.1:8443"; `container` the container id; `device` names this device in
    /// log lines and in the `X-Device` header of a delete (so the tombstone says who deleted).
    public convenience init(baseURL: String, token: String, container: String, timeouts: HTTPTimeouts = .init(),
                            device: String = "", changeLimit: Int? = nil, caFile: String? = nil) {
        self.init(baseURLs: [baseURL], token: token, container: container, timeouts: timeouts, device: device,
                  changeLimit: changeLimit, caFile: caFile)
    }

    /// Several servers of one container store, sharing one token: the first is used until it stops answering.
    /// `baseURLs` must not be empty.
    public convenience init(baseURLs: [String], token: String, container: String, timeouts: HTTPTimeouts = .init(),
                            device: String = "", changeLimit: Int? = nil, caFile: String? = nil) {
        self.init(baseURLs: baseURLs, token: token, container: container, place: ["v1", "containers", container],
                  timeouts: timeouts, device: device, changeLimit: changeLimit, caFile: caFile)
    }

    /// The view of `share`, a folder another user shares with this client's user, read as a container of its own
    /// (docs/SHARING.md): its feed, items and blobs, the folder being its root. Same servers and key.
    public func view(of share: WireShare) -> HTTPRemoteClient {
        HTTPRemoteClient(baseURLs: servers.urls, token: token, container: share.container, place: ["v1", "shares", share.id],
                         timeouts: timeouts, device: device, changeLimit: changeLimit, caFile: caFile)
    }

    private init(baseURLs: [String], token: String, container: String, place: [String], timeouts: HTTPTimeouts,
                 device: String, changeLimit: Int?, caFile: String?) {
        servers = ServerList(baseURLs)
        self.caFile = caFile
        self.token = token
        self.container = container
        self.place = place
        self.timeouts = timeouts
        self.changeLimit = changeLimit
        // A header value: no control characters.
        self.device = String(device.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7f })
    }

    // MARK: - RemoteClient

    /// GET /v1/health: succeeds when the remote answers 200.
    public func health() throws(RemoteError) {
        let r = try perform("GET", url(["v1", "health"]), authorized: false)
        guard r.status == 200 else { throw HTTPMapping.error(status: r.status, body: r.body) }
    }

    public func openContainer() throws(RemoteError) -> WireContainer {
        try json("PUT", url(place), body: [])
    }

    /// The ids of every container of the key's user (an account-level call: `container` plays no part).
    public func containerIDs() throws(RemoteError) -> [String] {
        let list: WireContainerList = try json("GET", url(["v1", "containers"]))
        return list.containers
    }

    /// What the key's user stores, per container, against their quota (an account-level call).
    public func usage() throws(RemoteError) -> WireUsage { try json("GET", url(["v1", "usage"])) }

    public func changes(since token: String?, waitSeconds: Int) throws(RemoteError) -> WireChanges {
        let wait = max(0, waitSeconds)
        let since = (token?.isEmpty ?? true) ? nil : token
        let u = url(place + ["changes"],
                    query: [("since", since), ("wait", wait > 0 ? String(wait) : nil),
                            ("limit", changeLimit.map(String.init))])
        return try json("GET", u, timeout: .request(timeouts.requestSeconds + wait))
    }

    public func item(_ id: String) throws(RemoteError) -> WireItem {
        try json("GET", url(place + ["items", id]))
    }

    public func putItem(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws(RemoteError) -> WireItem {
        let body = try encoded(item, "item \(item.id)")
        let condition = ifMatch.map { "If-Match: \($0)" } ?? "If-None-Match: *"
        return try itemWrite("PUT", item.id, headers: [condition, "Content-Type: application/json"], change: change,
                             body: body)
    }

    /// POST .../batch; a delete names this client's device in its tombstone unless the entry names one.
    public func batch(_ entries: [WireBatchEntry]) throws(RemoteError) -> [BatchResult] {
        let named = entries.map { e -> WireBatchEntry in
            var e = e
            if e.op == .delete && e.device == nil && !device.isEmpty { e.device = device }
            return e
        }
        let body = try encoded(WireBatch(entries: named), "a batch")
        let answer: WireBatchAnswer = try json("POST", url(place + ["batch"]),
                                               headers: ["Content-Type: application/json"], body: body)
        guard answer.results.count == entries.count else {
            throw .server(status: 200, message: "\(answer.results.count) answers to \(entries.count) batch entries")
        }
        return answer.results.map(HTTPMapping.result)
    }

    public func putKV(_ entry: WireKVEntry) throws(RemoteError) -> WireKVEntry {
        return try json("PUT", url(place + ["kv", entry.key]),
                        headers: ["Content-Type: application/json"], body: try encoded(entry, "key \(entry.key)"))
    }

    public func kvChanges(since: Int64, waitSeconds: Int) throws(RemoteError) -> WireKVChanges {
        let wait = max(0, waitSeconds)
        let u = url(place + ["kv"],
                    query: [("since", String(since)), ("wait", wait > 0 ? String(wait) : nil)])
        return try json("GET", u, timeout: .request(timeouts.requestSeconds + wait))
    }

    public func deleteItem(_ id: String, ifMatch: Int64, change: WireChangeID?) throws(RemoteError) -> WireItem {
        var headers = ["If-Match: \(ifMatch)"]
        // Names the device in the tombstone (a change id names its own).
        if change == nil && !device.isEmpty { headers.append("X-Device: \(device)") }
        return try itemWrite("DELETE", id, headers: headers, change: change)
    }

    /// A put without a change id (typed, unlike the protocol's default).
    public func putItem(_ item: WireItem, ifMatch: Int64?) throws(RemoteError) -> WireItem {
        try putItem(item, ifMatch: ifMatch, change: nil)
    }

    /// A delete without a change id.
    public func deleteItem(_ id: String, ifMatch: Int64) throws(RemoteError) -> WireItem {
        try deleteItem(id, ifMatch: ifMatch, change: nil)
    }

    /// A put or delete of an item: with a change id, `X-Change-ID` and `X-Device` go with it, and a `208`
    /// (a retry of a change already applied) is thrown as `.alreadyApplied`.
    private func itemWrite(_ method: String, _ id: String, headers: [String], change: WireChangeID?,
                           body: [UInt8]? = nil) throws(RemoteError) -> WireItem {
        var headers = headers
        if let change { headers += ["X-Change-ID: \(change.id)", "X-Device: \(change.device)"] }
        let u = url(place + ["items", id])
        let r = try perform(method, u, headers: headers, source: body.map { .memory($0) } ?? .none,
                            sink: .memory(limit: Self.maxJSONAnswer), timeout: .request(timeouts.requestSeconds))
        guard (200...299).contains(r.status) else { throw HTTPMapping.error(status: r.status, body: r.body) }
        do {
            if r.status == 208 {
                let applied = try JSONDecoder().decode(WireApplied.self, from: Data(r.body))
                throw RemoteError.alreadyApplied(version: applied.applied, current: applied.current)
            }
            return try JSONDecoder().decode(WireItem.self, from: Data(r.body))
        } catch let error as RemoteError {
            throw error
        } catch {
            throw .server(status: r.status, message: "undecodable answer to \(method) \(u): \(error)")
        }
    }

    public func hasBlob(sha256: String) throws(RemoteError) -> Bool {
        let r = try perform("HEAD", url(place + ["blobs", sha256]))
        switch r.status {
        case 200...299: return true
        case 404: return false
        default:
            // A HEAD answer has no body: its error's line is in X-Error.
            let why = r.body.isEmpty ? (try? JSONEncoder().encode(WireError(error: r.errorHeader ?? "", current: nil))) : nil
            throw HTTPMapping.error(status: r.status, body: why.map { Array($0) } ?? r.body)
        }
    }

    public func uploadBlob(sha256: String, size: Int64, fromFile path: String,
                           progress: TransferProgress?) throws(RemoteError) {
        try upload(sha256: sha256, size: size, fromFile: path, at: 0, whole: true, progress: progress)
    }

    public func uploadChunk(sha256: String, size: Int64, fromFile path: String, at offset: Int64,
                            progress: TransferProgress?) throws(RemoteError) {
        try upload(sha256: sha256, size: size, fromFile: path, at: offset, whole: false, progress: progress)
    }

    /// PUT .../blobs/{sha}: `size` bytes of the file at `path` from `offset` (with `whole`, the whole file).
    private func upload(sha256: String, size: Int64, fromFile path: String, at offset: Int64, whole: Bool,
                        progress: TransferProgress?) throws(RemoteError) {
        let fd: FileDescriptor
        do { fd = try FileDescriptor.open(path, O_RDONLY) } catch {
            throw .localFile("cannot open \(path) to upload", cause: error)
        }
        defer { fd.close() }
        // A check before sending only: a file that cannot be measured is still sent, and the remote verifies
        // the bytes against their hash.
        if let st = try? fd.stat(), whole ? Int64(st.st_size) != size : Int64(st.st_size) < offset + size {
            throw .corrupt("\(path) has \(st.st_size) bytes, not the \(size) to upload"
                           + (whole ? "" : " from byte \(offset)"))
        }
        // The body is read from the file's position on.
        guard lseek(fd.raw, off_t(offset), SEEK_SET) == off_t(offset) else {
            throw .localFile("cannot seek in \(path) to upload", cause: .current)
        }
        let r = try perform("PUT", url(place + ["blobs", sha256]),
                            headers: ["Content-Type: application/octet-stream"],
                            source: .file(fd, length: size), timeout: .stall(timeouts.stallSeconds), progress: progress)
        guard (200...299).contains(r.status) else {
            throw HTTPMapping.error(status: r.status, body: r.body, blobUpload: true)
        }
        log.debug("uploaded blob \(sha256.prefix(12)) (\(size) bytes) from \(device.isEmpty ? "this device" : device)")
    }

    public func downloadBlob(sha256: String, offset: Int64, to fd: FileDescriptor,
                             progress: TransferProgress?) throws(RemoteError) {
        let start = max(0, offset)
        let headers = start > 0 ? ["Range: bytes=\(start)-"] : []
        let r = try perform("GET", url(place + ["blobs", sha256]), headers: headers,
                            sink: .file(fd, offset: start), timeout: .stall(timeouts.downloadSilenceSeconds),
                            progress: progress)
        switch r.status {
        case 200, 206:
            if r.fileOffset == start {
                // An empty body never reached the write callback: check the answer here.
                if start > 0 && r.status != 206 {
                    throw .server(status: r.status, message: "the server ignored the range request from byte \(start)")
                }
            }
            // Bytes went in with pwrite at explicit offsets: leave the position after them, as write would.
            _ = lseek(fd.raw, off_t(r.fileOffset), SEEK_SET)
            // The final count; the download is complete, so a late "stop" changes nothing.
            _ = progress?(r.fileOffset)
        case 416 where start > 0 && r.contentRange.flatMap(HTTPMapping.contentRangeTotal) == start:
            // Already complete: the blob has exactly `offset` bytes.
            _ = progress?(start)
        default:
            throw HTTPMapping.error(status: r.status, body: r.body)
        }
    }

    // MARK: - Content in chunks

    /// POST .../chunks/missing, at most `WireChunkLimits.maxAsk` hashes a request.
    public func missingChunks(_ sha256s: [String]) throws(RemoteError) -> Set<String> {
        var missing = Set<String>()
        for start in stride(from: 0, to: sha256s.count, by: WireChunkLimits.maxAsk) {
            let asked = WireChunkList(chunks: Array(sha256s[start..<min(start + WireChunkLimits.maxAsk, sha256s.count)]))
            let answer: WireChunkList = try json("POST", url(place + ["chunks", "missing"]),
                                                 headers: ["Content-Type: application/json"],
                                                 body: try encoded(asked, "a chunk list"))
            missing.formUnion(answer.chunks)
        }
        return missing
    }

    /// GET .../blobs/{sha} of a whole chunk, written at `fileOffset` of `fd` with pwrite (the descriptor's
    /// position is left alone, so several chunks may land in one file at once).
    public func downloadChunk(sha256: String, to fd: FileDescriptor, at fileOffset: Int64,
                              progress: TransferProgress?) throws(RemoteError) {
        let r = try perform("GET", url(place + ["blobs", sha256]),
                            sink: .file(fd, offset: 0, base: fileOffset),
                            timeout: .stall(timeouts.downloadSilenceSeconds), progress: progress)
        guard r.status == 200 else { throw HTTPMapping.error(status: r.status, body: r.body) }
    }

    /// PUT .../manifests/{sha}; a chunk the remote does not hold is `.conflict`.
    public func putManifest(_ manifest: WireManifest) throws(RemoteError) {
        struct Stored: Decodable { let sha256: String; let size: Int64 }
        let _: Stored = try json("PUT", url(place + ["manifests", manifest.sha256]),
                                 headers: ["Content-Type: application/json"],
                                 body: try encoded(manifest, "manifest \(manifest.sha256)"))
    }

    /// GET .../manifests/{sha}; nil when there is none (the version is one blob, or the server knows no chunks).
    public func manifest(sha256: String) throws(RemoteError) -> WireManifest? {
        do throws(RemoteError) {
            let manifest: WireManifest = try json("GET", url(place + ["manifests", sha256]),
                                                  timeout: .stall(timeouts.downloadSilenceSeconds))
            return manifest
        } catch {
            if case .notFound = error { return nil }
            throw error
        }
    }

    // MARK: - Recently Deleted and version history

    /// GET .../history/{id}.
    public func history(id: String) throws(RemoteError) -> [WireVersion] {
        let answer: WireHistory = try json("GET", url(place + ["history", id]))
        return answer.versions
    }

    /// GET .../trash.
    public func trash() throws(RemoteError) -> [WireVersion] {
        let answer: WireTrash = try json("GET", url(place + ["trash"]))
        return answer.items
    }

    /// POST .../trash/restore.
    public func restore(ids: [String], device: String) throws(RemoteError) -> [WireItem] {
        let body = try encoded(WireRestoreRequest(ids: ids, device: device), "a restore")
        let answer: WireRestored = try json("POST", url(place + ["trash", "restore"]),
                                            headers: ["Content-Type: application/json"], body: body)
        return answer.restored
    }

    /// POST .../trash/empty with these ids.
    public func emptyTrash(ids: [String]) throws(RemoteError) -> Int {
        try emptyTrash(WireEmptyTrashRequest(ids: ids))
    }

    /// POST .../trash/empty with `all`.
    public func emptyTrash() throws(RemoteError) -> Int {
        try emptyTrash(WireEmptyTrashRequest(all: true))
    }

    private func emptyTrash(_ asked: WireEmptyTrashRequest) throws(RemoteError) -> Int {
        let answer: WireEmptied = try json("POST", url(place + ["trash", "empty"]),
                                           headers: ["Content-Type: application/json"],
                                           body: try encoded(asked, "an empty of the trash"))
        return answer.emptied
    }

    /// POST .../rewind.
    public func rewind(folder: String, to: Int64, dryRun: Bool, device: String) throws(RemoteError)
        -> [WireRewindChange] {
        let body = try encoded(WireRewindRequest(folder: folder, to: to, dryRun: dryRun, device: device), "a rewind")
        let answer: WireRewound = try json("POST", url(place + ["rewind"]),
                                           headers: ["Content-Type: application/json"], body: body)
        return answer.changes
    }

    /// POST .../delete-data.
    public func deleteData(documents: Bool, device: String) throws(RemoteError) -> WireDataDeleted {
        let body = try encoded(WireDeleteDataRequest(documents: documents, device: device), "a deletion of data")
        return try json("POST", url(place + ["delete-data"]),
                        headers: ["Content-Type: application/json"], body: body)
    }

    // MARK: - Shares (account-level calls but `addShare` and `removeShare`, which name a folder of `container`)

    /// The shares of this container (its id as both users name it) that the key's user owns or takes part in.
    public func shares() throws(RemoteError) -> [WireShare] {
        let list: WireShareList = try json("GET", url(["v1", "shares"]))
        return list.shares.filter { $0.container == container }
    }

    /// Shares folder `folder` of this container with user `user` (again: changes how).
    public func addShare(folder: String, user: String, readOnly: Bool) throws(RemoteError) -> WireShare {
        let body = try encoded(WireShareRequest(folder: folder, user: user, readOnly: readOnly), "a share")
        return try json("POST", url(place + ["shares"]),
                        headers: ["Content-Type: application/json"], body: body)
    }

    /// Stops sharing folder `folder` of this container with `user`.
    public func removeShare(folder: String, user: String) throws(RemoteError) {
        let body = try encoded(WireShareRemoval(folder: folder, user: user), "a share's removal")
        let _: WireSharesRemoved = try json("POST", url(place + ["shares", "remove"]),
                                            headers: ["Content-Type: application/json"], body: body)
    }

    /// Leaves share `id` (its participant's call). A view's client leaves too (the route is the user's).
    public func leaveShare(id: String) throws(RemoteError) {
        let body = try encoded(WireShareLeave(id: id), "a share's leave")
        let _: WireSharesRemoved = try json("POST", url(["v1", "shares", "leave"]),
                                            headers: ["Content-Type: application/json"], body: body)
    }

    // MARK: - Plumbing

    /// A request's JSON body.
    private func encoded<T: Encodable>(_ value: T, _ what: String) throws(RemoteError) -> [UInt8] {
        do { return Array(try JSONEncoder.wire.encode(value)) } catch {
            throw .rejected(status: 0, message: "cannot encode \(what): \(error)")
        }
    }

    func url(_ segments: [String], query: [(String, String?)] = []) -> String {
        HTTPMapping.url(base: baseURL, segments: segments, query: query)
    }

    enum Timeout {
        /// A whole-request limit in seconds.
        case request(Int)
        /// No total limit; abort when nothing moves for this many seconds.
        case stall(Int)
    }

    /// A JSON request whose 2xx answer decodes to `T`; any other status becomes its RemoteError.
    private func json<T: Decodable>(_ method: String, _ url: String, headers: [String] = [], body: [UInt8]? = nil,
                                    timeout: Timeout? = nil) throws(RemoteError) -> T {
        let r = try perform(method, url, headers: headers, source: body.map { .memory($0) } ?? .none,
                            sink: .memory(limit: Self.maxJSONAnswer), timeout: timeout ?? .request(timeouts.requestSeconds))
        guard (200...299).contains(r.status) else { throw HTTPMapping.error(status: r.status, body: r.body) }
        do {
            return try JSONDecoder().decode(T.self, from: Data(r.body))
        } catch {
            throw .server(status: r.status, message: "undecodable answer to \(method) \(url): \(error)")
        }
    }

    /// One request, run to its end on a pooled handle. Throws only for failures below HTTP (network,
    /// cancel, local I/O); the caller judges the status.
    func perform(_ method: String, _ url: String, headers: [String] = [], source: RequestSource = .none,
                 sink: ResponseSink = .memory(limit: HTTPMapping.maxErrorBody), timeout: Timeout? = nil,
                 progress: TransferProgress? = nil, authorized: Bool = true) throws(RemoteError) -> CurlRequest {
        guard let h = pool.acquire() else { throw .unreachable("libcurl could not make a handle") }
        let req = CurlRequest(handle: h, sink: sink, source: source, progress: progress)
        let ctx = Unmanaged.passUnretained(req).toOpaque()
        let started = monotonicNanoseconds()

        setBasics(h, url: url, timeout: timeout, request: req)
        setCallbacks(h, ctx: ctx, watchProgress: progress != nil || req.stallLimit != nil)
        var list: UnsafeMutablePointer<curl_slist>? = nil
        var all = headers
        if authorized { all.append("Authorization: Bearer \(token)") }
        // A file upload asks first (100-continue): a server that refuses it (token, size) answers before the
        // body is sent, so the refusal is read instead of racing a broken pipe. Small bodies go at once.
        all.append(req.isUpload ? "Expect: 100-continue" : "Expect:")
        for line in all { list = curl_slist_append(list, line) }
        defer { curl_slist_free_all(list) }
        _ = ubq_easy_setopt_slist(h, CURLOPT_HTTPHEADER, list)
        setMethod(h, method)
        setBody(h, source, ctx: ctx)

        let code = withExtendedLifetime(req) { curl_easy_perform(h) }
        req.finish()
        var osErrno = 0
        _ = ubq_easy_getinfo_long(h, CURLINFO_OS_ERRNO, &osErrno)
        // The box dies with this call: leave no pointer into it in the idle handle.
        _ = ubq_easy_setopt_pointer(h, CURLOPT_ERRORBUFFER, nil)
        pool.release(h)

        let ms = (monotonicNanoseconds() - started) / 1_000_000
        if code == CURLE_OK {
            log.debug("\(method) \(url) -> \(req.status) in \(ms) ms")
            if ServerList.meansGone(status: req.status) { moveOn(from: url, because: "it answered HTTP \(req.status)") }
            return req
        }
        let failure = failure(code: code, request: req, osErrno: osErrno, timeout: timeout, url: url)
        log.debug("\(method) \(url) failed after \(ms) ms: \(failure)")
        if ServerList.meansGone(failure) { moveOn(from: url, because: "\(failure)") }
        throw failure
    }

    /// The server of `url` stopped answering: the next one is used from now on (if there is another).
    private func moveOn(from url: String, because why: String) {
        guard let failed = servers.server(of: url), let next = servers.stoppedAnswering(failed) else { return }
        log.warning("\(HTTPMapping.hostPort(servers.urls[failed])) stopped answering (\(why)); using \(next) now")
    }

    /// The URL, timeouts, error buffer and receive buffer of a request.
    private func setBasics(_ h: UnsafeMutableRawPointer, url: String, timeout: Timeout?, request req: CurlRequest) {
        _ = ubq_easy_setopt_string(h, CURLOPT_URL, url)
        _ = ubq_easy_setopt_long(h, CURLOPT_NOSIGNAL, 1)
        _ = ubq_easy_setopt_long(h, CURLOPT_TCP_KEEPALIVE, 1)
        _ = ubq_easy_setopt_long(h, CURLOPT_CONNECTTIMEOUT, max(1, timeouts.connectSeconds))
        if let caFile { _ = ubq_easy_setopt_string(h, CURLOPT_CAINFO, caFile) }
        // TLS 1.2 at least (1.0 and 1.1 are broken); plain HTTP the mount allows only to loopback.
        _ = ubq_easy_setopt_long(h, CURLOPT_SSLVERSION, Int(CURL_SSLVERSION_TLSv1_2))
        switch timeout ?? .request(timeouts.requestSeconds) {
        case .request(let s):
            _ = ubq_easy_setopt_long(h, CURLOPT_TIMEOUT, max(1, s))
        case .stall(let s):
            // libcurl's check as a backstop; the exact one runs in the progress callback.
            _ = ubq_easy_setopt_long(h, CURLOPT_LOW_SPEED_LIMIT, 1)
            _ = ubq_easy_setopt_long(h, CURLOPT_LOW_SPEED_TIME, max(1, s))
            req.stallLimit = Int64(max(1, s)) * 1_000_000_000
        }
        _ = ubq_easy_setopt_pointer(h, CURLOPT_ERRORBUFFER, req.errorBuffer)
        // Large receive buffers: one write to the file per 512 KiB rather than per 16 KiB.
        _ = ubq_easy_setopt_long(h, CURLOPT_BUFFERSIZE, 512 << 10)
    }

    /// The callbacks that hand the answer's body and headers to the request, and its progress.
    private func setCallbacks(_ h: UnsafeMutableRawPointer, ctx: UnsafeMutableRawPointer, watchProgress: Bool) {
        _ = ubq_easy_setopt_write_function(h) { ptr, size, count, ctx in
            let req = Unmanaged<CurlRequest>.fromOpaque(ctx!).takeUnretainedValue()
            return req.receive(UnsafeRawBufferPointer(start: ptr, count: size * count))
        }
        _ = ubq_easy_setopt_pointer(h, CURLOPT_WRITEDATA, ctx)
        _ = ubq_easy_setopt_header_function(h) { ptr, size, count, ctx in
            let req = Unmanaged<CurlRequest>.fromOpaque(ctx!).takeUnretainedValue()
            req.header(UnsafeRawBufferPointer(start: ptr, count: size * count))
            return size * count
        }
        _ = ubq_easy_setopt_pointer(h, CURLOPT_HEADERDATA, ctx)
        if watchProgress {
            _ = ubq_easy_setopt_long(h, CURLOPT_NOPROGRESS, 0)
            _ = ubq_easy_setopt_xferinfo_function(h) { ctx, _, dlnow, _, ulnow in
                let req = Unmanaged<CurlRequest>.fromOpaque(ctx!).takeUnretainedValue()
                return req.tick(downloaded: Int64(dlnow), uploaded: Int64(ulnow)) ? 0 : 1
            }
            _ = ubq_easy_setopt_pointer(h, CURLOPT_XFERINFODATA, ctx)
        }
    }

    private func setMethod(_ h: UnsafeMutableRawPointer, _ method: String) {
        switch method {
        case "HEAD":
            _ = ubq_easy_setopt_long(h, CURLOPT_NOBODY, 1)
        case "GET":
            _ = ubq_easy_setopt_long(h, CURLOPT_HTTPGET, 1)
        default:
            _ = ubq_easy_setopt_string(h, CURLOPT_CUSTOMREQUEST, method)
        }
    }

    /// The request's body: none, bytes copied now, or a file read as libcurl sends.
    private func setBody(_ h: UnsafeMutableRawPointer, _ source: RequestSource, ctx: UnsafeMutableRawPointer) {
        switch source {
        case .none:
            break
        case .memory(let bytes):
            _ = ubq_easy_setopt_off(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bytes.count))
            bytes.withUnsafeBytes { raw in
                // COPYPOSTFIELDS copies the bytes now; an empty body still needs a valid pointer.
                if let base = raw.baseAddress {
                    _ = ubq_easy_setopt_pointer(h, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: base))
                } else {
                    _ = ubq_easy_setopt_string(h, CURLOPT_COPYPOSTFIELDS, "")
                }
            }
        case .file(_, let length):
            _ = ubq_easy_setopt_long(h, CURLOPT_UPLOAD, 1)
            _ = ubq_easy_setopt_off(h, CURLOPT_INFILESIZE_LARGE, curl_off_t(length))
            _ = ubq_easy_setopt_read_function(h) { buf, size, count, ctx in
                let req = Unmanaged<CurlRequest>.fromOpaque(ctx!).takeUnretainedValue()
                return req.send(into: UnsafeMutableRawBufferPointer(start: buf, count: size * count))
            }
            _ = ubq_easy_setopt_pointer(h, CURLOPT_READDATA, ctx)
        }
    }

    /// The RemoteError for a transfer libcurl did not finish.
    private func failure(code: CURLcode, request req: CurlRequest, osErrno: Int, timeout: Timeout?,
                         url: String) -> RemoteError {
        let hp = HTTPMapping.hostPort(url)
        if req.stalled, case .stall(let seconds) = timeout {
            return .unreachable("transfer with \(hp) stalled: nothing moved for \(max(1, seconds)) s")
        }
        if req.cancelled || code == CURLE_ABORTED_BY_CALLBACK && req.localFailure == nil { return .cancelled }
        if let local = req.localFailure { return local }
        if req.bodyTooLarge {
            return .server(status: req.status, message: "answer too large (HTTP \(req.status))")
        }
        // The server refused (say, an upload before reading its body) and closed: its answer says more
        // than the broken send.
        if req.status >= 400 && (code == CURLE_SEND_ERROR || code == CURLE_RECV_ERROR) {
            return HTTPMapping.error(status: req.status, body: req.body, blobUpload: req.isUpload)
        }
        let curlText: String = {
            let t = req.errorText
            return t.isEmpty ? String(cString: curl_easy_strerror(code)) : t
        }()
        let osText = osErrno != 0 ? String(cString: strerror(Int32(osErrno))) : curlText
        switch code {
        case CURLE_COULDNT_CONNECT:
            return .unreachable("cannot connect to \(hp): \(osText)")
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return .unreachable("cannot resolve the host of \(hp): \(curlText)")
        case CURLE_OPERATION_TIMEDOUT:
            if case .stall(let seconds) = timeout, req.status != 0 {
                return .unreachable("transfer with \(hp) stalled for \(max(1, seconds)) s")
            }
            return .unreachable("no answer from \(hp) in time: \(curlText)")
        case CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE:
            return .unreachable("connection to \(hp) lost: \(osErrno != 0 ? osText : curlText)")
        case CURLE_PEER_FAILED_VERIFICATION:
            return .unreachable("the TLS certificate of \(hp) is not trusted: \(curlText)"
                                + (caFile.map { " (not vouched for by \($0))" } ?? " (no CA file was given)"))
        case CURLE_SSL_CACERT_BADFILE:
            return .unreachable("cannot use the CA file \(caFile ?? "of the system"): \(curlText)")
        case CURLE_SSL_CONNECT_ERROR:
            return .unreachable("no TLS connection with \(hp) (is it serving HTTPS?): \(curlText)")
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL:
            return .rejected(status: 0, message: "bad remote URL \(url): \(curlText)")
        default:
            return .unreachable("request to \(hp) failed: \(curlText)")
        }
    }
}

