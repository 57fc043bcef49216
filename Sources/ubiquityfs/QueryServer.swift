// The live query's server (docs/QUERY.md): a Unix socket in the store (mode 0600) on which each client sends
// one request line and gets every matching item (the gathering), a `gathered` line, and, when live, a batch
// of added, changed and removed items every `interval` in which something changed.
//
// One thread does everything (poll, accept, gather, batch), with non-blocking sockets: nothing it does waits
// on a client, so a client that stops reading never slows the mount. Each client's output not yet taken is
// kept in its own buffer; when a batch is due while more than `backlogLimit` bytes of earlier batches wait, the
// client has fallen behind: its waiting batches are dropped, it is sent `{"fellBehind":true}` and closed.
//
// What must hold: the clients, their views and `directoryPaths` are a `QueryServing`'s, made on the loop's
// thread and touched by no other; only the loop's flags are shared. The core is reached through its public calls, one short look at a
// time, and never while a client is waited for: every send is non-blocking, and a line partly sent is finished
// before anything else goes to that client, so lines stay whole. The change stream is followed only while a
// live client is connected, so it keeps nothing for nobody. The socket is mode 0600 before it listens.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

final class QueryClient {
    let fd: Int32
    var request: [UInt8] = []
    /// Set by the request.
    var view: QueryView?
    var live = false
    var out: [UInt8] = []
    var outStart = 0
    /// Bytes queued in all, bytes sent, and bytes queued when the gathering ended (the gathering is not
    /// counted against the backlog limit: it is as big as the tree).
    var queued = 0, sent = 0, gatheredAt = 0
    /// The last byte sent: a newline when the client has whole lines.
    var lastSent: UInt8 = 10
    var readClosed = false
    /// Set once nothing more is queued: closed when the output is sent (or after a while, if never taken).
    var closingSince: Date?
    var dead = false

    init(fd: Int32) { self.fd = fd }

    var backlog: Int { queued - max(sent, gatheredAt) }
    var waiting: Bool { outStart < out.count }

    func queue(_ line: String) {
        out += Array(line.utf8) + [10]
        queued += line.utf8.count + 1
    }

    /// Sends what the socket takes now; never waits.
    func flush() {
        while waiting {
            let n = out[outStart...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
            if n < 0 {
                if errno != EAGAIN && errno != EINTR { dead = true }
                if errno != EINTR { break } else { continue }
            }
            if n > 0 { lastSent = out[outStart + n - 1] }
            outStart += n
            sent += n
        }
        if outStart > 65536 || !waiting { out.removeFirst(outStart); outStart = 0 }
    }

    /// Drops the batches waiting (keeping the end of a line partly sent, so lines stay whole), says so, and
    /// ends the query.
    func fallBehind() {
        let keepEnd = lastSent == 10 ? outStart : (out[outStart...].firstIndex(of: 10).map { $0 + 1 } ?? out.count)
        out = Array(out[outStart..<keepEnd])
        outStart = 0
        queue(#"{"fellBehind":true}"#)
        view = nil
        live = false
        closingSince = Date()
    }
}

final class QueryServer: Sendable {
    static let interval: Int64 = 250_000_000
    static let backlogLimit = 512 * 1024
    /// How long a closing client may take to read its last lines.
    static let closingGrace: TimeInterval = 30

    let core: Container
    let path: String
    private let log = Logger("query")
    private let loop = Loop(name: "query")

    init(core: Container, path: String) {
        self.core = core
        self.path = path
    }

    /// Binds the socket (replacing a stale one: the store's lock says no other daemon uses it) and starts serving.
    func start() throws {
        let bytes = Array(path.utf8)
        var addr = sockaddr_un()
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            throw MountFailure("the query socket path \(path) is too long for a Unix socket")
        }
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            for (i, b) in bytes.enumerated() { buf[i] = b }
            buf[bytes.count] = 0
        }
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw MountFailure("cannot make the query socket: \(String(cString: strerror(errno)))") }
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        // Mode 0600 before listen: no one can connect before it.
        guard bound == 0, chmod(path, 0o600) == 0, listen(fd, 16) == 0 else {
            let why = String(cString: strerror(errno))
            close(fd)
            throw MountFailure("cannot serve the query socket \(path): \(why)")
        }
        loop.start { [core, loop] in QueryServing(core: core, listenFD: fd, loop: loop).serve() }
    }

    /// Stops serving: the loop closes every client and the socket within one poll (a quarter second).
    func stop() {
        if !loop.stopAndJoin(timeout: 5) { log.warning("the query loop did not stop within 5 s") }
        unlink(path)
    }
}

/// The query loop's own state and work, made on the loop's thread and touched by no other.
private final class QueryServing {
    let core: Container
    private let listenFD: Int32
    private let loop: Loop
    private let log = Logger("query")
    private var clients: [QueryClient] = []
    /// The last path of each directory shown to anyone: a directory whose path changed takes its descendants
    /// along into the batch (their paths changed too).
    private var directoryPaths: [String: String] = [:]
    private let dates: ISO8601DateFormatter = {
        let f = ISO8601DateFormatter()
        f.timeZone = TimeZone(identifier: "UTC")
        return f
    }()

    init(core: Container, listenFD: Int32, loop: Loop) {
        self.core = core
        self.listenFD = listenFD
        self.loop = loop
    }

    private var isStopping: Bool { loop.isStopping }

    func serve() {
        var nextBatch = monotonicNanoseconds() + QueryServer.interval
        while !isStopping {
            var fds = [pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)]
            for c in clients {
                fds.append(pollfd(fd: c.fd, events: Int16(c.readClosed ? 0 : POLLIN) | Int16(c.waiting ? POLLOUT : 0), revents: 0))
            }
            let wait = max(0, (nextBatch - monotonicNanoseconds()) / 1_000_000)
            if poll(&fds, nfds_t(fds.count), Int32(min(wait, 250))) > 0 {
                for (i, c) in clients.enumerated() { handle(c, fds[i + 1].revents) }
                if fds[0].revents & Int16(POLLIN) != 0 { acceptClients() }
            }
            if monotonicNanoseconds() >= nextBatch {
                sendBatch()
                nextBatch = monotonicNanoseconds() + QueryServer.interval
            }
            closeFinished()
        }
        for c in clients { close(c.fd) }
        clients = []
        core.changes.follow(false)
        close(listenFD)
    }

    private func acceptClients() {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 { return }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            clients.append(QueryClient(fd: fd))
        }
    }

    private func handle(_ c: QueryClient, _ events: Int16) {
        if events & Int16(POLLIN) != 0 { read(c) }
        if events & Int16(POLLERR | POLLHUP) != 0 && events & Int16(POLLIN) == 0 { c.dead = true }
        if events & Int16(POLLOUT) != 0 { c.flush() }
    }

    /// Reads the request line (what comes after it is ignored); an end of input only stops the reading.
    private func read(_ c: QueryClient) {
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = recv(c.fd, &buf, buf.count, Int32(MSG_DONTWAIT))
        if n == 0 { c.readClosed = true; if c.view == nil && c.closingSince == nil { c.dead = true }; return }
        if n < 0 { if errno != EAGAIN && errno != EINTR { c.dead = true }; return }
        guard c.view == nil, c.closingSince == nil else { return }
        c.request += buf[0..<n]
        if let end = c.request.firstIndex(of: 10) {
            begin(c, line: Array(c.request[..<end]))
        } else if c.request.count > 65536 {
            refuse(c, "the request line is too long")
        }
    }

    private func refuse(_ c: QueryClient, _ why: String) {
        c.queue(jsonLine(["error": why]))
        c.closingSince = Date()
        c.flush()
    }

    /// Parses a request, gathers what matches, and says so; a live query then follows the changes.
    private func begin(_ c: QueryClient, line: [UInt8]) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
            return refuse(c, "the request is not a JSON object")
        }
        guard let scope = QueryFilter.Scope(rawValue: object["scope"] as? String ?? "all") else {
            return refuse(c, "scope is documents, data or all")
        }
        var view = QueryView(filter: QueryFilter(scope: scope, name: object["name"] as? String))
        c.live = object["live"] as? Bool ?? false
        if c.live { core.changes.follow(true) }
        for id in allItems() {
            guard let e = entry(id), view.gather(id, e) else { continue }
            c.queue(#"{"item":"# + e.rendered + "}")
        }
        c.queue(#"{"gathered":true,"count":\#(view.count)}"#)
        c.view = view
        c.gatheredAt = c.queued
        if !c.live { c.closingSince = Date() }
        c.flush()
    }

    /// Every item below the root, depth first in name order (a folder, then what is in it). A folder that went
    /// meanwhile lists as empty: what it held went with it (`list` reads memory only, and fails for no other
    /// reason).
    private func allItems() -> [String] {
        var ids: [String] = []
        var stack = Array(((try? core.list(core.rootID)) ?? []).reversed())
        while let item = stack.popLast() {
            ids.append(item.id)
            if item.isDirectory { stack += ((try? core.list(item.id)) ?? []).reversed() }
        }
        return ids
    }

    /// The item as shown, nil when it is gone (or is the root).
    private func entry(_ id: String) -> QueryEntry? {
        guard id != core.rootID, let item = core.item(id), let status = try? core.status(id) else { return nil }
        let path = core.path(of: id)
        if item.isDirectory { directoryPaths[id] = path }
        var s: [String: Any] = [
            "downloadingStatus": status.downloadingStatus.rawValue, "isDownloading": status.isDownloading,
            "percentDownloaded": status.percentDownloaded, "isUploaded": status.isUploaded,
            "isUploading": status.isUploading, "percentUploaded": status.percentUploaded,
            "hasUnresolvedConflicts": status.hasUnresolvedConflicts, "pinned": status.pinned,
            "isUbiquitous": status.isUbiquitous, "isExcludedFromSync": status.isExcludedFromSync,
        ]
        if let e = status.downloadingError { s["downloadingError"] = e }
        if let e = status.uploadingError { s["uploadingError"] = e }
        let object: [String: Any] = [
            "id": id, "path": path, "name": item.name, "kind": item.kind.rawValue,
            "size": item.hasContent ? core.currentSize(item) : 0,
            "mtime": dates.string(from: Date(timeIntervalSince1970: Double(item.shownMTime) / 1e9)),
            "ctime": dates.string(from: Date(timeIntervalSince1970: Double(item.ctime) / 1e9)),
            "status": s,
        ]
        return QueryEntry(path: path, name: item.name, isDirectory: item.isDirectory, rendered: jsonLine(object))
    }

    private func jsonLine(_ object: [String: Any]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// Resolves the ids changed since the last batch (and the descendants of directories that moved) once,
    /// then gives each live client its part.
    private func sendBatch() {
        let live = clients.filter { $0.live && !$0.dead }
        let ids = core.changes.drain()
        guard !ids.isEmpty, !live.isEmpty else { return }
        var entries: [String: QueryEntry] = [:]
        var gone: Set<String> = []
        var todo = Array(ids)
        while let id = todo.popLast() {
            if entries[id] != nil || gone.contains(id) { continue }
            let before = directoryPaths[id]
            guard let e = entry(id) else { gone.insert(id); directoryPaths[id] = nil; continue }
            entries[id] = e
            if e.isDirectory, let before, before != e.path {
                todo += ((try? core.list(id)) ?? []).map(\.id)
            }
        }
        for c in live { send(c, entries, gone) }
    }

    private func send(_ c: QueryClient, _ entries: [String: QueryEntry], _ gone: Set<String>) {
        guard let told = c.view?.batch(entries, gone: gone) else { return }
        let (added, changed) = (told.added, told.changed)
        let removed = told.removed.map { jsonLine(["id": $0.id, "path": $0.path]) }
        if added.isEmpty && changed.isEmpty && removed.isEmpty { return }
        if c.backlog > QueryServer.backlogLimit {
            log.info("a query client fell behind (\(c.backlog) bytes waiting); dropping it")
            c.fallBehind()
        } else {
            func list(_ l: [String]) -> String { "[" + l.joined(separator: ",") + "]" }
            c.queue(#"{"batch":{"added":"# + list(added) + #","changed":"# + list(changed) + #","removed":"# + list(removed) + "}}")
        }
        c.flush()
    }

    /// Closes clients that are gone, and closing ones whose output is sent or that never took it.
    private func closeFinished() {
        let before = clients.count
        clients.removeAll { c in
            let finished = c.dead || (c.closingSince.map { !c.waiting || -$0.timeIntervalSinceNow > QueryServer.closingGrace } ?? false)
            if finished { close(c.fd) }
            return finished
        }
        if clients.count != before && !clients.contains(where: \.live) { core.changes.follow(false) }
    }
}
