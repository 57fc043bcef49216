// `ubiquityfs trash list|restore|empty` and `ubiquityfs history`: Recently Deleted and a file's kept versions
// (docs/HISTORY.md), through the mount: `MOUNT/.trash/.list` lists Recently Deleted, the attributes
// `user.ubiquity.restore` and `user.ubiquity.emptyTrash` of `MOUNT/.trash` act on it, and
// `user.ubiquity.history` of a file reads its versions (TrashFiles.swift in the adapter).
//
// What must hold: like `kv`, the command reaches the remote only through the mount, never with a key of its
// own; each refusal becomes one plain line naming the path, and nothing is changed by a command that fails
// before its action (a path that is not in Recently Deleted restores nothing, the others included).
import CFuse // for <sys/xattr.h>: getxattr(2) and setxattr(2)
import Foundation
import Glibc
import UbiquityBase

enum TrashCommand {
    static let help = """
    usage: ubiquityfs trash list [--json] MOUNT       what was deleted on any device, still restorable: when,
                                                      on which device, the size, and the path it had
                                                      (a folder deleted with its content is one entry)
           ubiquityfs trash restore MOUNT PATH...     bring items back to where they were (a folder with what
                                                      was deleted with it); "name 2" when the name is taken
           ubiquityfs trash empty MOUNT [PATH...]     remove items (without PATH: all) from Recently Deleted
                                                      for good

    PATH is the path the item had in the mount, as `trash list` shows it (relative to MOUNT). Items stay in
    Recently Deleted for the remote's --keep-deleted days (30 by default).
    """

    static let historyHelp = """
    usage: ubiquityfs history [--json] PATH    the kept versions of a file in a mount, newest first: when the
                                               remote stored each, from which device, its size (every version
                                               of the last 24 hours, then one a day for 30 days, by default)
    """

    static let rewindHelp = """
    usage: ubiquityfs rewind DIR --to TIME [--dry-run] [--json]
                                    bring a folder of a mount back to how it was on the remote at TIME: items
                                    deleted since come back, contents, names and places go back, items made
                                    since go to Recently Deleted; as new changes that reach every device (so
                                    a rewind can itself be rewound). --dry-run lists what would change.

    TIME: 2026-12-05T10:00:00Z or "2026-12-05 10:00:00" (UTC), or a while ago: 90s, 10m, 2h, 3d.
    Changes of this device not yet uploaded must be uploaded first (ubiquityfs sync --wait).
    """

    /// One entry of Recently Deleted, with how many items were deleted with it: an item (a folder with what was
    /// deleted with it), or one deletion of the app's data, shown under its label with the newest of its deletes.
    struct Entry {
        var version: WireVersion
        var inside = 0
        var label: String? = nil
        var size: Int64 = 0

        /// What `trash list` shows in PATH, and what `trash restore` and `trash empty` take.
        var path: String { label ?? version.path }
    }

    /// The label of a deletion of an app's data in Recently Deleted.
    static func label(_ batch: WireDataBatch) -> String { label(documentsToo: batch.documentsToo) }
    static func label(documentsToo: Bool) -> String { documentsToo ? "[all data]" : "[app data]" }

    static func run(_ words: [String]) throws {
        if words.contains("--help") || words.contains("-h") { print(help); return }
        guard let action = words.first else { throw UsageError("trash needs list, restore or empty") }
        let args = try Arguments(Array(words.dropFirst()), valued: [], switches: ["--json"])
        guard let mount = args.positional.first else { throw UsageError("trash \(action) needs MOUNT") }
        let paths = Array(args.positional.dropFirst())
        switch action {
        case "list":
            guard paths.isEmpty else { throw UsageError("trash list takes MOUNT only") }
            try list(mount, json: args.has("--json"))
        case "restore":
            guard !paths.isEmpty else { throw UsageError("trash restore needs MOUNT and at least one PATH") }
            try act(mount, "restore", ids(paths, mount: mount))
            for p in paths { print("restored \(relative(p, to: mount))") }
        case "empty":
            let ids = paths.isEmpty ? ["all"] : try ids(paths, mount: mount)
            try act(mount, "emptyTrash", ids)
            print(paths.isEmpty ? "Recently Deleted is empty" : paths.map { "removed \(relative($0, to: mount)) for good" }.joined(separator: "\n"))
        default:
            throw UsageError("unknown trash action '\(action)'")
        }
    }

    // MARK: list

    private static func list(_ mount: String, json: Bool) throws {
        let shown = try entries(mount)
        if json {
            let rows: [[String: Any]] = shown.map { e in
                var row: [String: Any] = ["path": e.path, "id": e.version.id, "kind": e.version.kind.rawValue,
                                          "size": e.size, "deletedAt": isoTime(e.version.at),
                                          "device": e.version.device, "itemsInside": e.inside]
                if let batch = e.version.batch { row["batch"] = batch.description }
                return row
            }
            try printJSON(rows)
            return
        }
        if shown.isEmpty { print("Recently Deleted is empty"); return }
        print(pad("DELETED (UTC)", 21) + pad("DEVICE", 16) + pad("SIZE", 9) + "PATH")
        for e in shown {
            let size = e.version.kind == .dir && e.label == nil ? "-" : StatusCommand.humanSize(e.size)
            let inside = e.label != nil ? "  (\(e.inside) item\(e.inside == 1 ? "" : "s"), restored whole)"
                : e.inside > 0 ? "  (with \(e.inside) item\(e.inside == 1 ? "" : "s") inside)" : ""
            print(pad(isoTime(e.version.at), 21) + pad(e.version.device, 16) + pad(size, 9)
                  + e.path + (e.version.kind == .dir && e.label == nil ? "/" : "") + inside)
        }
    }

    /// Recently Deleted as the mount lists it: an item counted with the deleted folder a restore of that folder
    /// brings it back with (the remote's rule: deleted in it at most `HistoryRules.folderWindow` before the
    /// folder, and so each folder between), else an entry of its own.
    /// A deletion of the app's data is one entry, whatever it held (the remote restores and empties it whole).
    static func entries(_ mount: String) throws -> [Entry] {
        let all = try readList(mount)
        let byID = Dictionary(all.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var inside: [String: Int] = [:]
        var tops: Set<String> = []
        var batches: [WireDataBatch: Entry] = [:]
        var shown: [Entry] = []
        for v in all {
            if let batch = v.batch {
                if batches[batch] == nil { shown.append(Entry(version: v, label: label(batch))) }
                batches[batch, default: Entry(version: v)].inside += 1
                batches[batch, default: Entry(version: v)].size += v.kind == .dir ? 0 : v.size
                continue
            }
            let top = restoredWith(v, byID)
            if top.id == v.id { tops.insert(v.id) } else { inside[top.id, default: 0] += 1 }
        }
        for v in all where tops.contains(v.id) { shown.append(Entry(version: v, inside: inside[v.id] ?? 0, size: v.size)) }
        return shown.map { e in
            guard let batch = e.version.batch, let counted = batches[batch] else { return e }
            return Entry(version: e.version, inside: counted.inside, label: e.label, size: counted.size)
        }.sorted { $0.version.version > $1.version.version }
    }

    /// The highest deleted folder above `v` whose restore brings `v` back too, or `v` itself (not a folder
    /// deleted with the app's data later: that deletion brings back only what it took).
    private static func restoredWith(_ v: WireVersion, _ byID: [String: WireVersion]) -> WireVersion {
        var chain = [v]
        while let p = chain.last?.parent, let up = byID[p], up.batch == v.batch, !chain.contains(where: { $0.id == up.id }) {
            chain.append(up)
        }
        for (i, folder) in chain.enumerated().reversed() where i > 0 && folder.kind == .dir {
            if chain[..<i].allSatisfy({ $0.at >= folder.at - HistoryRules.folderWindow }) { return folder }
        }
        return v
    }

    private static func readList(_ mount: String) throws -> [WireVersion] {
        try StatusCommand.needOneContainer(mount, "trash")
        let list = mount + "/.trash/.list"
        guard FileManager.default.fileExists(atPath: mount + "/.trash") else {
            throw CommandFailure("\(mount) is not the root of a ubiquityfs mount")
        }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: list)) } catch {
            throw CommandFailure("cannot read Recently Deleted of \(mount): \(offline(mount) ?? reason(error))")
        }
        return try data.split(separator: 0x0a).map { line in
            do { return try JSONDecoder().decode(WireVersion.self, from: Data(line)) } catch {
                throw CommandFailure("\(list): a line that is not an item: \(error)")
            }
        }
    }

    // MARK: restore and empty

    /// The ids of the items at `paths` in Recently Deleted (the newest delete of each path); a path that is not
    /// there fails the whole command. A folder back already (as the folder of an item restored alone) whose
    /// items deleted with it are still there is named by their parent: its restore brings them back.
    private static func ids(_ paths: [String], mount: String) throws -> [String] {
        let all = try readList(mount)
        return try paths.map { p in
            let path = relative(p, to: mount)
            if let found = all.first(where: { $0.batch.map(label) == path }) { return found.id }
            if let found = all.first(where: { $0.path == path }) { return found.id }
            if let inside = all.first(where: { ($0.path as NSString).deletingLastPathComponent == path }),
               let folder = inside.parent {
                return folder
            }
            throw CommandFailure("\(path) is not in Recently Deleted (see 'ubiquityfs trash list \(mount)')")
        }
    }

    private static func act(_ mount: String, _ name: String, _ ids: [String]) throws {
        let value = ids.joined(separator: "\n")
        let rc = value.withCString { setxattr(mount + "/.trash", "user.ubiquity." + name, $0, strlen($0), 0) }
        if rc != 0 {
            let e = errno
            let what = name == "restore" ? "restore" : "empty Recently Deleted"
            let why = e == ENOENT ? "not in Recently Deleted any more"
                : e == EBUSY ? Self.refusedNow : offline(mount) ?? String(cString: strerror(e))
            throw CommandFailure("cannot \(what) in \(mount): \(why)")
        }
    }

    // MARK: history

    static func runHistory(_ words: [String]) throws {
        if words.contains("--help") || words.contains("-h") { print(historyHelp); return }
        let args = try Arguments(words, valued: [], switches: ["--json"])
        guard args.positional.count == 1, let path = args.positional.first else { throw UsageError("history needs one PATH") }
        let versions = try StatusCommand.jsonAttribute(path, "user.ubiquity.history", as: [WireVersion].self,
                                                       what: "the history") { e in
            let why = e == ENODATA || e == ENOTSUP ? "not a file in a ubiquityfs mount"
                : e == ENOENT ? (exists(path) ? "no history on the remote (never uploaded)" : "no such file or folder")
                : String(cString: strerror(e))
            return "cannot read the history of \(path): \(why)"
        }
        if args.has("--json") {
            let rows: [[String: Any]] = versions.map { v in
                ["version": v.version, "storedAt": isoTime(v.at), "device": v.device, "size": v.size,
                 "sha256": v.sha256, "path": v.path, "deleted": v.deleted]
            }
            try printJSON(rows)
            return
        }
        print(pad("STORED (UTC)", 21) + pad("DEVICE", 16) + pad("SIZE", 9) + pad("VERSION", 9) + "PATH")
        for v in versions {
            print(pad(isoTime(v.at), 21) + pad(v.device, 16) + pad(StatusCommand.humanSize(v.size), 9)
                  + pad(String(v.version), 9) + v.path + (v.deleted ? "  (deleted)" : ""))
        }
    }

    // MARK: rewind

    static func runRewind(_ words: [String]) throws {
        if words.contains("--help") || words.contains("-h") { print(rewindHelp); return }
        let args = try Arguments(words, valued: ["--to"], switches: ["--dry-run", "--json"])
        guard args.positional.count == 1, let dir = args.positional.first else { throw UsageError("rewind needs one DIR") }
        guard let text = args.value("--to") else { throw UsageError("rewind needs --to TIME") }
        guard let to = parseTime(text, now: Date()) else {
            throw UsageError("'\(text)' is not a time (2026-12-05T10:00:00Z, \"2026-12-05 10:00:00\" in UTC, or 10m, 2h, 3d ago)")
        }
        guard to <= Int64(Date().timeIntervalSince1970 * 1e9) else { throw CommandFailure("\(text) is in the future") }
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir, isDirectory: &isDir) else {
            throw CommandFailure("cannot rewind \(dir): no such file or folder")
        }
        guard isDir.boolValue else { throw CommandFailure("\(dir) is not a folder") }
        let root = try mountRoot(of: dir)
        if let pending = try StatusCommand.attribute(root, "pendingChanges"), pending != "0" {
            throw CommandFailure("\(pending) change(s) of this device wait to upload; run 'ubiquityfs sync --wait \(root)' first (a rewind works on what the remote has)")
        }
        let changes = try preview(dir, to: to)
        if args.has("--json") {
            let rows: [[String: Any]] = changes.map { ["path": $0.path, "what": $0.what.rawValue, "id": $0.id] }
            try printJSON(rows)
        } else {
            for c in changes { print(pad(c.what.rawValue, 10) + c.path) }
        }
        if args.has("--dry-run") {
            if !args.has("--json") { print(changes.isEmpty ? "nothing would change" : "\(changes.count) change(s) (dry run: nothing changed)") }
            return
        }
        if changes.isEmpty { if !args.has("--json") { print("nothing to change") }; return }
        let value = String(to)
        let rc = value.withCString { setxattr(dir, "user.ubiquity.rewind", $0, strlen($0), 0) }
        if rc != 0 { throw CommandFailure("cannot rewind \(dir): \(rewindFailure(errno, root))") }
        if !args.has("--json") { print("rewound \(dir) to \(isoTime(to)) UTC: \(changes.count) change(s), on their way to every device") }
    }

    /// What a rewind to `to` would change, asked of the remote through the mount.
    private static func preview(_ dir: String, to: Int64) throws -> [WireRewindChange] {
        struct Preview: Decodable { var changes: [WireRewindChange]; var left: Int }
        return try StatusCommand.jsonAttribute(dir, "user.ubiquity.rewind:\(to)", as: Preview.self, what: "the answer") {
            "cannot rewind \(dir): \(rewindFailure($0, (try? mountRoot(of: dir)) ?? dir))"
        }.changes
    }

    private static func rewindFailure(_ e: Int32, _ root: String) -> String {
        if let away = offline(root) { return away }
        switch e {
        case EINVAL: return "the remote keeps no state of it at that time (before its history starts, or not a folder it has)"
        case ENOENT: return "the remote has no such folder (never uploaded)"
        case EBUSY: return Self.refusedNow
        default: return String(cString: strerror(e))
        }
    }

    /// Whether `path` names anything (a link too, even a dangling one).
    private static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    /// The root of the mount `path` lies in: the nearest folder above it (or itself) that says how many changes wait.
    static func mountRoot(of path: String) throws -> String {
        var cur = (path as NSString).standardizingPath
        if !cur.hasPrefix("/") { cur = FileManager.default.currentDirectoryPath + "/" + cur }
        while true {
            if (try? StatusCommand.attribute(cur, "pendingChanges")) != nil { return cur }
            let up = (cur as NSString).deletingLastPathComponent
            if up == cur || up.isEmpty { throw CommandFailure("\(path) is not in a ubiquityfs mount") }
            cur = up
        }
    }

    /// A time as the user writes it: ISO 8601 in UTC (with `T` or a space, seconds optional), or a while ago
    /// (`90s`, `10m`, `2h`, `3d`). Nanoseconds since the epoch.
    static func parseTime(_ text: String, now: Date) -> Int64? {
        // (Int64(exactly:): a time past what 64 bits of ns hold, such as "infd" or the year 9999, is no time.)
        if let unit = text.last, let n = Double(text.dropLast()), n >= 0, n.isFinite {
            let seconds: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
            if let s = seconds[unit] { return Int64(exactly: ((now.timeIntervalSince1970 - n * s) * 1e9).rounded()) }
        }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        let t = text.hasSuffix("Z") ? String(text.dropLast()) : text
        for format in ["yyyy-MM-dd'T'HH:mm:ss", "yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd'T'HH:mm", "yyyy-MM-dd HH:mm"] {
            f.dateFormat = format
            if let d = f.date(from: t) { return Int64(exactly: (d.timeIntervalSince1970 * 1e9).rounded()) }
        }
        return nil
    }

    // MARK: helpers

    /// What a refusal of the remote for what it holds now (409) means; the mount's log has its words.
    static let refusedNow = "the remote refused it for what it holds now (a content no longer kept, a name or place "
        + "taken; the mount's log says which): nothing was changed"

    /// Why a request through the mount failed when the mount knows the remote is away.
    static func offline(_ mount: String) -> String? {
        guard (try? StatusCommand.attribute(mount, "isOffline")) == "1" else { return nil }
        let since = (try? StatusCommand.attribute(mount, "offlineSince")).flatMap { $0 }
        return "the remote is unreachable" + (since.map { " (offline since \($0))" } ?? "")
    }

    /// `path` relative to the mount root: as given when it is relative, else with the mount's prefix taken off.
    static func relative(_ path: String, to mount: String) -> String {
        let root = (mount as NSString).standardizingPath
        let full = (path as NSString).standardizingPath
        if path.hasPrefix("/"), full.hasPrefix(root + "/") { return String(full.dropFirst(root.count + 1)) }
        return path.hasPrefix("./") ? String(path.dropFirst(2)) : path
    }

    static func isoTime(_ ns: Int64) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return f.string(from: Date(timeIntervalSince1970: Double(ns) / 1e9))
    }

    private static func pad(_ s: String, _ width: Int) -> String {
        s.count >= width ? s + " " : s + String(repeating: " ", count: width - s.count)
    }

    private static func reason(_ error: Error) -> String {
        if let e = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError, e.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(e.code)))
        }
        return "\(error)"
    }
}
