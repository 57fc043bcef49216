// `ubiquityfs status` and the actions `evict`, `download [--wait]`, `pin`, `unpin`: friendlier forms of
// getfattr and setfattr on the `user.ubiquity.*` attributes of files in a mount.
//
// What must hold: the command reaches the mount only through getxattr and setxattr on `user.ubiquity.*`, the
// interface a person has (no socket, no store), so it shows only what the file system says. A path outside a
// mount is refused (every item of one shows `isUbiquitous`, but fifos and sockets, which the kernel gives no
// `user.*` attributes: they are told by their kind and their folder). A path that fails does not stop the
// others; the exit status is then 1. Values are read into 4096 bytes: a longer one fails its read (ERANGE).
import CFuse // for <sys/xattr.h>: getxattr(2) and setxattr(2), which Glibc's module map leaves out
import Foundation
import Glibc
import UbiquityFUSE

enum StatusCommand {
    static let statusHelp = """
    usage: ubiquityfs status [--json] PATH...

    Prints the sync status of each PATH in a ubiquityfs mount: size, state (current, downloaded: a newer version
    waits on the remote, notDownloaded), transfer progress, pin, whether it syncs (SYNC: yes, excluded: its
    isExcludedFromSync flag is set, local-only: a .nosync name, a fifo or socket, or inside such a folder),
    conflicts and errors. For the mount root also the local store (bytes used, the limit, the files evicted
    lately to keep under it) and whether the remote can be reached.
    """
    static let actionHelp = """
    usage: ubiquityfs evict PATH...          drop local copies (kept on the remote); directories: every file below
           ubiquityfs download [--wait] PATH...  fetch in the background; --wait shows progress until local
           ubiquityfs pin PATH...            keep downloaded, also new versions and, for a directory, new files
           ubiquityfs unpin PATH...
    """

    static let names = ["isUbiquitous", "downloadingStatus", "isDownloading", "percentDownloaded", "isUploaded",
                        "isUploading", "percentUploaded", "hasUnresolvedConflicts", "downloadingError",
                        "uploadingError", "pinned", "isExcludedFromSync"]

    /// Reads one status attribute; nil when absent.
    /// The containers of a mount of several, each with its folder, when `path` is its root (its `containers`
    /// attribute names them), else nil.
    static func containers(ofRoot path: String) -> [(id: String, folder: String)]? {
        guard let list = try? attribute(path, "containers") else { return nil }
        return list.split(separator: "\n").map { (String($0), path + "/" + AccountRoot.folderName(String($0))) }
    }

    /// The folders of the containers of a mount of several when `path` is its root, else nil.
    static func containerFolders(_ path: String) -> [String]? { containers(ofRoot: path)?.map(\.folder) }

    /// The refusal of a command that works on one container, given the root of a mount of several.
    static func needOneContainer(_ path: String, _ command: String) throws {
        guard let folders = containerFolders(path) else { return }
        throw CommandFailure("\(command): \(path) holds several containers; name one of them: "
                             + folders.joined(separator: ", "))
    }

    /// A JSON value the mount answers as one attribute (at most the 64 KiB an attribute holds), named `what`
    /// where it does not decode; `failure` says why the read failed, from its errno.
    static func jsonAttribute<T: Decodable>(_ path: String, _ name: String, as type: T.Type, what: String,
                                            failure: (Int32) -> String) throws -> T {
        var buf = [UInt8](repeating: 0, count: 65536)
        let n = getxattr(path, name, &buf, buf.count)
        if n < 0 { throw CommandFailure(failure(errno)) }
        do { return try JSONDecoder().decode(T.self, from: Data(buf[0..<n])) } catch {
            throw CommandFailure("\(path): \(what) does not decode: \(error)")
        }
    }

    static func attribute(_ path: String, _ name: String) throws -> String? {
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = getxattr(path, "user.ubiquity." + name, &buf, buf.count)
        if n < 0 {
            if errno == ENODATA { return nil }
            throw CommandFailure("\(path): \(String(cString: strerror(errno)))")
        }
        return String(decoding: buf[0..<n], as: UTF8.self)
    }

    /// What only the mount root shows: changes waiting, whether the remote is away, whether the store's disk is
    /// full, and the local store's usage, limit and recent evictions.
    static let rootNames = ["pendingChanges", "isOffline", "offlineSince", "isStoreFull", "storeFullSince", "isOverQuota",
                            "syncPaused", "cacheUsed", "cacheLimit", "recentlyEvicted"]

    /// A fifo or socket in a mount: the kernel lets no `user.*` attribute be read on one, so its status is told
    /// by its kind (always local-only, as the file system keeps it) once its folder shows it is in a mount.
    /// Nil for anything else.
    static func localNodeStatus(_ path: String) throws -> [String: String]? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        let type = st.st_mode & S_IFMT
        guard type == S_IFIFO || type == S_IFSOCK else { return nil }
        let folder = (path as NSString).deletingLastPathComponent
        guard try attribute(folder.isEmpty ? "." : folder, "isUbiquitous") != nil else {
            throw CommandFailure("\(path) is not in a ubiquityfs mount")
        }
        var row = Dictionary(uniqueKeysWithValues: names.map { ($0, "0") })
        row["downloadingStatus"] = "current"
        row["percentDownloaded"] = "100"
        row["downloadingError"] = nil
        row["uploadingError"] = nil
        row["kind"] = type == S_IFIFO ? "fifo" : "socket"
        return row
    }

    /// The names whose values are `0`/`1`, and those that are counts: `--json` gives them as JSON booleans and
    /// numbers, as the live query does (docs/QUERY.md); every other value stays a string.
    static let flagNames: Set = ["isUbiquitous", "isDownloading", "isUploaded", "isUploading", "hasUnresolvedConflicts",
                                 "pinned", "isExcludedFromSync", "isOffline", "isStoreFull", "syncPaused"]
    static let numberNames: Set = ["percentDownloaded", "percentUploaded", "size", "pendingChanges", "cacheUsed",
                                   "cacheLimit"]

    /// One row for `--json`, its values typed.
    static func typed(_ row: [String: String]) -> [String: Any] {
        var out: [String: Any] = [:]
        for (name, value) in row {
            if flagNames.contains(name), value == "0" || value == "1" {
                out[name] = value == "1"
            } else if numberNames.contains(name), let n = Int64(value) {
                out[name] = n
            } else {
                out[name] = value
            }
        }
        return out
    }

    static func status(_ path: String) throws -> [String: String] {
        if let node = try localNodeStatus(path) { return node }
        // Present on every item of a mount (0 on a local-only one).
        guard try attribute(path, "isUbiquitous") != nil else {
            throw CommandFailure("\(path) is not in a ubiquityfs mount")
        }
        var result: [String: String] = [:]
        for name in names { result[name] = try attribute(path, name) }
        if try attribute(path, "pendingChanges") != nil {
            for name in rootNames { result[name] = try attribute(path, name) }
        }
        return result
    }

    static func runStatus(_ words: [String]) throws {
        let args = try Arguments(words, valued: [], switches: ["--json", "--help"])
        if args.has("--help") { return print(statusHelp) }
        guard !args.positional.isEmpty else { throw UsageError("status needs a PATH") }
        var rows: [[String: String]] = []
        var failed = false
        // The root of a mount of several: each container's root.
        for path in args.positional.flatMap({ containerFolders($0) ?? [$0] }) {
            do {
                var s = try status(path)
                var st = stat()
                stat(path, &st)
                s["path"] = path
                s["size"] = String(st.st_size)
                s["kind"] = s["kind"] ?? (st.st_mode & S_IFMT == S_IFDIR ? "dir" : "file")
                rows.append(s)
            } catch {
                FileHandle.standardError.write(Data("ubiquityfs: \(error)\n".utf8))
                failed = true
            }
        }
        if args.has("--json") {
            try printJSON(rows.map(typed))
        } else if !rows.isEmpty {
            printTable(rows)
            for r in rows where r["pendingChanges"] != nil {
                printMount(r)
                printStore(r)
            }
        }
        if failed { exit(1) }
    }

    private static func printTable(_ rows: [[String: String]]) {
        let header = ["NAME", "SIZE", "STATE", "DOWN", "UP", "PIN", "SYNC", "CONFLICTS", "ERROR"]
        let table = rows.map { r -> [String] in
            let localOnly = r["isUbiquitous"] == "0"
            let up = localOnly ? "-"
                : r["isUploaded"] == "1" ? "done" : (r["isUploading"] == "1" ? "\(r["percentUploaded"] ?? "0")%" : "waiting")
            let sync = r["isExcludedFromSync"] == "1" ? "excluded" : (localOnly ? "local-only" : "yes")
            let down = r["isDownloading"] == "1" ? "\(r["percentDownloaded"] ?? "0")%" : (r["downloadingStatus"] == "current" ? "done" : "-")
            let error = r["downloadingError"].map { "download: " + $0 } ?? r["uploadingError"].map { "upload: " + $0 } ?? ""
            return [r["path"] ?? "", r["kind"] == "dir" ? "-" : humanSize(Int64(r["size"] ?? "0") ?? 0),
                    r["downloadingStatus"] ?? "", down, up, r["pinned"] == "1" ? "yes" : "no", sync,
                    r["hasUnresolvedConflicts"] == "1" ? "yes" : "no", error]
        }
        let widths = header.indices.map { i in ([header] + table).map { $0[i].count }.max() ?? 0 }
        for row in [header] + table {
            print(row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
    }

    /// The lines for a mount root: what waits to upload, and whether the remote is reachable.
    private static func printMount(_ r: [String: String]) {
        let remote = r["syncPaused"] == "1" ? "sync paused (ubiquityfs resume \(r["path"] ?? "MOUNT"))"
            : r["isOffline"] == "1" ? "offline since \(r["offlineSince"] ?? "?") (the remote cannot be reached)"
            : "online"
        print("\(r["path"] ?? ""): \(r["pendingChanges"] ?? "0") change(s) waiting to upload; \(remote)")
        if r["isOverQuota"] == "1" { print("uploads refused: \(r["uploadingError"] ?? "over quota")") }
    }

    /// The mount root's local store: usage against the limit, then the latest evictions.
    private static func printStore(_ r: [String: String]) {
        let used = humanSize(Int64(r["cacheUsed"] ?? "0") ?? 0)
        let limit = Int64(r["cacheLimit"] ?? "").map(humanSize) ?? "none"
        print("\nlocal store of \(r["path"] ?? ""): \(used) used, limit \(limit)")
        if r["isStoreFull"] == "1" {
            print("its disk is full since \(r["storeFullSince"] ?? "?"): changes from other devices wait for room")
        }
        let lines = (r["recentlyEvicted"] ?? "").split(separator: "\n")
        guard let summary = lines.first else { return }
        print("evicted: \(summary)")
        for line in lines.dropFirst() { print("  " + line) }
    }

    static func humanSize(_ n: Int64) -> String {
        let units = ["B", "K", "M", "G", "T"]
        var v = Double(n), u = 0
        while v >= 1024 && u < units.count - 1 { v /= 1024; u += 1 }
        return u == 0 ? "\(n)B" : String(format: "%.1f%@", v, units[u])
    }

    /// Sets one action or status attribute on a path, with a plain message on refusal.
    static func set(_ path: String, _ name: String, _ value: String = "") throws {
        _ = try status(path)
        let rc = value.withCString { setxattr(path, "user.ubiquity." + name, $0, strlen($0), 0) }
        if rc != 0 {
            let e = errno
            let why = e == EBUSY ? "busy: it has changes not yet uploaded, is open for writing, is pinned, or is local-only"
                : String(cString: strerror(e))
            throw CommandFailure("cannot \(name == "pinned" ? (value == "1" ? "pin" : "unpin") : name) \(path): \(why)")
        }
    }

    static func runAction(_ action: String, _ words: [String]) throws {
        let args = try Arguments(words, valued: [], switches: action == "download" ? ["--help", "--wait"] : ["--help"])
        if args.has("--help") { return print(actionHelp) }
        guard !args.positional.isEmpty else { throw UsageError("\(action) needs a PATH") }
        var failed = false
        for path in args.positional {
            do {
                switch action {
                case "evict": try evict(path)
                case "download": try set(path, "download")
                case "pin": try set(path, "pinned", "1")
                default: try set(path, "pinned", "0")
                }
            } catch {
                FileHandle.standardError.write(Data("ubiquityfs: \(error)\n".utf8))
                failed = true
            }
        }
        if action == "download" && args.has("--wait") && !failed {
            failed = !waitForDownloads(args.positional.flatMap(filesBelow))
        }
        if failed { exit(1) }
    }

    /// Evicts a file, or every file below a directory that may go: the mount evicts what it can and answers
    /// EBUSY for the rest, which are then named, each with why it stayed.
    static func evict(_ path: String) throws {
        do { try set(path, "evict") } catch let failure as CommandFailure {
            let kept = filesBelow(path).filter { $0 != path }.compactMap { file -> String? in
                guard let state = try? attribute(file, "downloadingStatus"), state != "notDownloaded" else { return nil }
                return "  kept \(file): \(whyKept(file))"
            }
            guard !kept.isEmpty else { throw failure }
            throw CommandFailure("evicted what could go below \(path); \(kept.count) file(s) stayed:\n"
                                 + kept.joined(separator: "\n"))
        }
    }

    /// Why the mount keeps a file's local copy (one of the EBUSY reasons, from its status).
    static func whyKept(_ file: String) -> String {
        func flag(_ name: String) -> Bool { ((try? attribute(file, name)) ?? nil) == "1" }
        var st = stat()
        if lstat(file, &st) == 0, st.st_mode & S_IFMT != S_IFREG { return "not a regular file" }
        if !flag("isUbiquitous") { return "local-only (this copy is the only one)" }
        if flag("pinned") { return "pinned" }
        if !flag("isUploaded") { return "changes not yet uploaded" }
        return "open for writing"
    }

    static func filesBelow(_ path: String) -> [String] {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir), isDir.boolValue else { return [path] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.sorted().flatMap { filesBelow(path + "/" + $0) }
    }

    /// Waits until every file is current, showing progress; false if any download failed.
    static func waitForDownloads(_ paths: [String]) -> Bool {
        let tty = isatty(1) != 0
        var ok = true
        for path in paths {
            var lastPrinted = -1
            while true {
                let state = (try? attribute(path, "downloadingStatus")) ?? nil
                let pct = Int(((try? attribute(path, "percentDownloaded")) ?? nil) ?? "0") ?? 0
                let downloading = ((try? attribute(path, "isDownloading")) ?? nil) == "1"
                if state == "current" { report(path, 100, tty: tty, last: &lastPrinted); break }
                if !downloading, let err = (try? attribute(path, "downloadingError")) ?? nil {
                    if tty { print("") }
                    FileHandle.standardError.write(Data("ubiquityfs: download of \(path) failed: \(err)\n".utf8))
                    ok = false
                    break
                }
                report(path, pct, tty: tty, last: &lastPrinted)
                usleep(200_000)
            }
            if tty { print("") }
        }
        return ok
    }

    private static func report(_ path: String, _ pct: Int, tty: Bool, last: inout Int) {
        if tty {
            let width = 30, filled = width * pct / 100
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            print("\r[\(bar)] \(String(format: "%3d", pct))% \(path)", terminator: "")
            fflush(nil)
        } else if pct / 10 != last / 10 || (pct == 100 && last != 100) {
            print("\(path): \(pct)%")
        }
        last = pct
    }
}

struct CommandFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
