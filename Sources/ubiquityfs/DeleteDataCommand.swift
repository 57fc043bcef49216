// `ubiquityfs delete-data MOUNT/CONTAINER [--documents] [--yes]`: deletes an app's data (everything of the
// container outside Documents/; with --documents, everything) on the remote and so on every device, in one step,
// as one entry of Recently Deleted that `trash restore` brings back whole (docs/HISTORY.md "Deleting an app's
// data"). Through the mount: `user.ubiquity.deleteData` set on the container's `.trash` (`data` or `all`).
//
// What must hold: nothing is deleted unless the user said yes (the prompt, or --yes); the prompt says what goes
// (counted in the mount: every item is listed there, downloaded or not) and that it goes on every device; a
// device with changes not yet uploaded refuses (they would come back after the deletion); each refusal is one
// plain line, and a command that fails has deleted nothing.
import CFuse // for <sys/xattr.h>: setxattr(2)
import Foundation
import Glibc
import UbiquityBase

enum DeleteDataCommand {
    static let help = """
    usage: ubiquityfs delete-data PATH [--documents] [--yes]

    Deletes the app's data of the container whose root is PATH (a mount, or a container's folder in a mount of
    several): everything outside Documents/, or with --documents everything, from the remote and from every
    device. It all goes to Recently Deleted as one entry ("[app data]" or "[all data]" in 'ubiquityfs trash
    list'), which 'ubiquityfs trash restore MOUNT "[app data]"' brings back whole. Asks first, unless --yes.
    To free room on this device only, evict instead ('ubiquityfs evict').
    """

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: [], switches: ["--documents", "--yes", "--help"])
        if args.has("--help") { return print(help) }
        guard args.positional.count == 1 else { throw UsageError("delete-data needs one PATH") }
        let path = (absolutePath(args.positional[0]) as NSString).standardizingPath
        let root = try TrashCommand.mountRoot(of: path)
        try StatusCommand.needOneContainer(root, "delete-data")
        guard root == path else {
            throw CommandFailure("\(path) is not the root of a container; give the mount (or the container's folder in a mount of several): \(root)")
        }
        if let pending = try StatusCommand.attribute(root, FileSystemNames.pendingChanges), pending != "0" {
            throw CommandFailure("\(pending) change(s) of this device wait to upload; run 'ubiquityfs sync --wait \(root)' first")
        }
        let documents = args.has("--documents")
        let what = documents ? "everything" : "everything outside Documents/"
        let (count, bytes) = measure(root, documents: documents)
        if count == 0 { return print("\(root) holds nothing to delete (\(what))") }
        let summary = "\(count) item\(count == 1 ? "" : "s") (\(StatusCommand.humanSize(bytes)))"
        if !args.has("--yes") {
            print("This deletes \(what) in \(root): \(summary), from the remote and from every device.")
            print("It stays in Recently Deleted as one entry for the remote's --keep-deleted days.")
            print("Delete? [y/N] ", terminator: "")
            fflush(nil)
            let answer = readLine()?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
            guard answer == "y" || answer == "yes" else { throw CommandFailure("nothing deleted") }
        }
        let value = documents ? "all" : "data"
        let rc = value.withCString { setxattr(root + "/.trash", "user.ubiquity.deleteData", $0, strlen($0), 0) }
        if rc != 0 {
            let e = errno
            throw CommandFailure("cannot delete the data of \(root): \(TrashCommand.offline(root) ?? String(cString: strerror(e)))")
        }
        let label = TrashCommand.label(documentsToo: documents)
        print("deleted \(summary) on every device; 'ubiquityfs trash restore \(root) \"\(label)\"' brings it back")
    }

    /// How many items the deletion takes, and their bytes (the sizes files show, downloaded or not): not the
    /// mount's own folders, nor what stays on this device only (the remote never had it).
    private static func measure(_ root: String, documents: Bool) -> (Int, Int64) {
        var count = 0, bytes: Int64 = 0
        var folders = [root]
        while let folder = folders.popLast() {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { continue }
            for name in names {
                let inRoot = folder == root
                if inRoot && (WireRules.mountRootNames.contains(name) || (!documents && name == WireRules.documentsName)) { continue }
                if WireRules.staysOnOneDevice(name, inRoot: { inRoot }) { continue }
                let full = folder + "/" + name
                var st = stat()
                guard lstat(full, &st) == 0 else { continue }
                count += 1
                if (st.st_mode & S_IFMT) == S_IFDIR { folders.append(full) } else if (st.st_mode & S_IFMT) == S_IFREG { bytes += Int64(st.st_size) }
            }
        }
        return (count, bytes)
    }
}
