// `ubiquityfs sync --wait` (is it safe to unmount?), `ubiquityfs check` (is the store sound?) and
// `ubiquityfs pause|resume` (sync of a container off and on).
//
// What must hold: `sync --wait` decides only from the mount's own attributes (the root's `pendingChanges`, a
// file's `isUploaded`) and exits 0 only when they say nothing waits. `check` opens the store as the daemon does,
// so it takes the store's lock and is refused while a daemon holds it; it never touches a change not yet
// uploaded. Opening the store empties its staging area, with or without `--repair` (Store.init).
import CFuse // for <sys/xattr.h>: setxattr(2)
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

enum SyncCommand {
    static let help = """
    usage: ubiquityfs sync --wait [--timeout SECONDS] PATH

    Waits until every change in the mount holding PATH has reached the remote (PATH a file: until that file
    has). Exits 0 when done, 1 on timeout, saying how many changes still wait.
    """

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--timeout"], switches: ["--wait", "--help"])
        if args.has("--help") { return print(help) }
        guard args.has("--wait") else { throw UsageError("sync needs --wait") }
        guard args.positional.count == 1 else { throw UsageError("sync needs one PATH") }
        let path = absolutePath(args.positional[0])
        let deadline = try args.int("--timeout").map { Date(timeIntervalSinceNow: Double($0)) }
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
            throw CommandFailure("\(path) does not exist")
        }
        let root = mountRoot(of: path)
        var lastSaid = -1
        while true {
            let waiting: Int
            if isDir.boolValue {
                guard let root, let n = try StatusCommand.attribute(root, FileSystemNames.pendingChanges).flatMap({ Int($0) }) else {
                    throw CommandFailure("\(path) is not in a ubiquityfs mount")
                }
                waiting = n
            } else {
                waiting = try StatusCommand.attribute(path, "isUploaded") == "1" ? 0 : 1
            }
            if waiting == 0 { print("all changes are on the remote"); return }
            if waiting != lastSaid { print("\(waiting) change(s) waiting to upload"); lastSaid = waiting }
            if let deadline, Date() > deadline {
                throw CommandFailure("timed out with \(waiting) change(s) not yet uploaded")
            }
            usleep(200_000)
        }
    }

    /// The mount point of the ubiquityfs mount holding `path`.
    static func mountRoot(of path: String) -> String? {
        var cur = path
        while true {
            if mountType(cur) == "fuse.ubiquityfs" { return cur }
            if cur == "/" { return nil }
            cur = (cur as NSString).deletingLastPathComponent
        }
    }
}

/// Names shared with the file system.
enum FileSystemNames {
    static let pendingChanges = "pendingChanges"
}

enum CheckCommand {
    static let help = """
    usage: ubiquityfs check --store DIR [--repair]

    Checks a backing store that no daemon is using: the database, every item's place, and every local copy
    against its SHA-256. With --repair, drops corrupt or stray local copies (they are fetched again when
    opened) and staging leftovers; changes not yet uploaded are never touched. Exits 1 if problems remain.
    """

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--store"], switches: ["--repair", "--help"])
        if args.has("--help") { return print(help) }
        guard let dir = args.value("--store").map(absolutePath) else { throw UsageError("check needs --store DIR") }
        guard FileManager.default.fileExists(atPath: dir + "/state.sqlite") else {
            throw CommandFailure("\(dir) holds no store (no state.sqlite)")
        }
        let store = try Store(directory: dir)
        let report = try store.check(repair: args.has("--repair"))
        print("checked \(report.items) items, verified \(report.verifiedFiles) local copies")
        for p in report.problems { print("problem: \(p)") }
        for r in report.repaired { print("repaired: \(r)") }
        if report.isClean { print("the store is sound"); return }
        if report.repaired.count < report.problems.count { exit(1) }
    }
}

enum PauseCommand {
    static let help = """
    usage: ubiquityfs pause PATH
           ubiquityfs resume PATH

    pause stops the sync of the container holding PATH (on a mount of several containers given its root: of
    every container): work goes on in the mount and its changes wait here, nothing goes to or comes from the
    remote, and an open of a file that is not downloaded fails (EIO). It holds across remounts, and the root's
    user.ubiquity.syncPaused and 'ubiquityfs status' say so. resume goes on where it stopped.
    """

    static func run(_ command: String, _ words: [String]) throws {
        let args = try Arguments(words, valued: [], switches: ["--help"])
        if args.has("--help") { return print(help) }
        guard args.positional.count == 1 else { throw UsageError("\(command) needs one PATH") }
        let path = absolutePath(args.positional[0])
        let root = try TrashCommand.mountRoot(of: path)
        let roots = StatusCommand.containerFolders(root) ?? [root] // a mount of several: each container
        for r in roots {
            let value = command == "pause" ? "1" : "0"
            let rc = value.withCString { setxattr(r, "user.ubiquity.syncPaused", $0, strlen($0), 0) }
            if rc != 0 { throw CommandFailure("cannot \(command) \(r): \(String(cString: strerror(errno)))") }
            print(command == "pause" ? "sync of \(r) paused: its changes wait here until 'ubiquityfs resume \(r)'"
                  : "sync of \(r) resumed")
        }
    }
}
