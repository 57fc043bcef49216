// `ubiquityfs share add PATH USER [--read-only]`, `share remove PATH USER`, `share list [--json] [PATH]` and
// `share leave MOUNT`: a folder of a container shared with another user of the remote (docs/SHARING.md). Through
// the mount: `user.ubiquity.shareAdd` and `shareRemove` set on the folder, `shares` read on the mount's root,
// `shareLeave` set on the root of the mount of a folder shared with you (`mount --share`).
//
// What must hold: each refusal is one plain line saying why (the remote's reason, which the mount keeps as the
// folder's `shareError`), and a command that fails has changed nothing.
import CFuse // for <sys/xattr.h>: setxattr(2)
import Foundation
import Glibc
import UbiquityBase

enum ShareCommand {
    static let help = """
    usage: ubiquityfs share add PATH USER [--read-only]
           ubiquityfs share remove PATH USER
           ubiquityfs share list [--json] [PATH]
           ubiquityfs share leave MOUNT

    Shares the folder PATH (inside Documents/ of a mount) with USER, another user of the remote, read-write or
    with --read-only read-only; sharing it again changes how. There is no acceptance step: the command is the
    invitation. 'remove' stops sharing it with USER. 'list' shows the shares of the container PATH is in (all
    of them, or those of the folder PATH): the folders shared and with whom, and the folders other users share
    with you. The folder and everything in it show user.ubiquity.isShared and the other share attributes.
    A folder shared with you is mounted with 'ubiquityfs mount DIR --share OWNER/NAME ...'; 'leave' leaves it
    (for good: the owner shares it again to bring it back), and that mount ends, its local copies removed.
    """

    static func run(_ words: [String]) throws {
        if words.contains("--help") || words.contains("-h") { return print(help) }
        guard let verb = words.first else { throw UsageError("share needs add, remove or list") }
        let args = try Arguments(Array(words.dropFirst()), valued: [], switches: ["--read-only", "--json"])
        switch verb {
        case "add", "remove":
            guard args.positional.count == 2 else { throw UsageError("share \(verb) needs PATH and USER") }
            try change(verb, folder: args.positional[0], user: args.positional[1], readOnly: args.has("--read-only"))
        case "leave":
            guard args.positional.count == 1 else { throw UsageError("share leave needs the MOUNT of a folder shared with you") }
            try leave(args.positional[0])
        case "list":
            guard args.positional.count <= 1 else { throw UsageError("share list takes at most one PATH") }
            try list(args.positional.first ?? FileManager.default.currentDirectoryPath, json: args.has("--json"))
        default:
            throw UsageError("unknown share command '\(verb)'")
        }
    }

    private static func change(_ verb: String, folder given: String, user: String, readOnly: Bool) throws {
        let folder = (absolutePath(given) as NSString).standardizingPath
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDir) else {
            throw CommandFailure("cannot share \(given): no such folder")
        }
        guard isDir.boolValue else { throw CommandFailure("cannot share \(given): only a folder is shared") }
        let root = try TrashCommand.mountRoot(of: folder)
        let adding = verb == "add"
        let name = adding ? "user.ubiquity.shareAdd" : "user.ubiquity.shareRemove"
        let value = adding ? "\(user) \(readOnly ? "readOnly" : "readWrite")" : user
        let rc = value.withCString { setxattr(folder, name, $0, strlen($0), 0) }
        if rc != 0 {
            let e = errno
            let what = adding ? "share \(given) with \(user)" : "stop sharing \(given) with \(user)"
            throw CommandFailure("cannot \(what): \(failure(e, folder, root))")
        }
        let shown = TrashCommand.relative(folder, to: root)
        print(adding ? "shared \(shown) with \(user) (\(readOnly ? "read-only" : "read-write"))"
                     : "\(shown) is no longer shared with \(user)")
    }

    /// Leaves the share mounted at `given`, then waits (up to 30 s) for that mount to end.
    private static func leave(_ given: String) throws {
        let mount = (absolutePath(given) as NSString).standardizingPath
        guard mountType(mount) == "fuse.ubiquityfs", (try? StatusCommand.attribute(mount, "sharedRole")) == "participant" else {
            throw CommandFailure("cannot leave \(given): not the mount of a folder shared with you")
        }
        let owner = (try? StatusCommand.attribute(mount, "sharedOwner")) ?? "its owner"
        let rc = "".withCString { setxattr(mount, "user.ubiquity.shareLeave", $0, 0, 0) }
        if rc != 0 {
            let e = errno
            throw CommandFailure("cannot leave \(given): \(TrashCommand.offline(mount) ?? String(cString: strerror(e)))")
        }
        let deadline = Date(timeIntervalSinceNow: 30)
        while mountType(mount) != nil && Date() < deadline { usleep(100_000) }
        print("left the folder \(owner) shared with you; \(given) "
              + (mountType(mount) == nil ? "is unmounted" : "is still mounted: 'ubiquityfs unmount \(given)' ends it"))
    }

    /// Why a share command failed: the remote's reason when it gave one, else what the errno means here.
    private static func failure(_ e: Int32, _ folder: String, _ root: String) -> String {
        if let reason = try? StatusCommand.attribute(folder, "shareError") { return reason }
        if let away = TrashCommand.offline(root) { return away }
        switch e {
        case EBUSY: return "the folder is not uploaded yet; run 'ubiquityfs sync --wait \(root)' first"
        case ENOTDIR: return "only a folder is shared"
        default: return String(cString: strerror(e))
        }
    }

    private static func list(_ given: String, json: Bool) throws {
        let path = (absolutePath(given) as NSString).standardizingPath
        let root = try TrashCommand.mountRoot(of: path)
        try StatusCommand.needOneContainer(root, "share list")
        var shares = try fetch(root)
        if path != root {
            let folder = TrashCommand.relative(path, to: root)
            shares = shares.filter { $0.path == folder }
        }
        if json { return try printJSON(shares.map(\.row)) }
        if shares.isEmpty { return print("nothing shared") }
        for s in shares {
            let how = s.readOnly ? "read-only" : "read-write"
            if let folder = s.path {
                print("\(folder)\tshared with \(s.user)\t\(how)")
            } else {
                print("\(s.owner)'s \(s.name)\tshared with you\t\(how)")
            }
        }
    }

    /// A share as the mount lists it.
    private struct Listed: Decodable {
        var id: String
        var folder: String
        var name: String
        var owner: String
        var user: String
        var readOnly: Bool
        var path: String?

        var row: [String: Any] {
            var r: [String: Any] = ["id": id, "name": name, "owner": owner, "user": user, "readOnly": readOnly,
                                    "role": path == nil ? "participant" : "owner"]
            if let path { r["path"] = path }
            return r
        }
    }

    private static func fetch(_ root: String) throws -> [Listed] {
        struct Listing: Decodable { var shares: [Listed]; var left: Int }
        return try StatusCommand.jsonAttribute(root, "user.ubiquity.shares", as: Listing.self, what: "the answer") {
            "cannot list the shares of \(root): \(TrashCommand.offline(root) ?? String(cString: strerror($0)))"
        }.shares
    }
}
