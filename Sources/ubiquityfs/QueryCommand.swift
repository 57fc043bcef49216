// `ubiquityfs query`: the live query (NSMetadataQuery) of a mount, from the daemon's query socket
// (docs/QUERY.md), whose path the mount root's `querySocket` attribute names.
//
// What must hold: the socket is found only through the mount root's `querySocket` attribute, never guessed.
// Lines are read whole; after `fellBehind` the query starts over with a new gathering, and an `error` line ends
// the command with status 1. Sends use MSG_NOSIGNAL, so a daemon that goes away is an error, not a kill.
import Foundation
import Glibc

enum QueryCommand {
    static let help = """
    usage: ubiquityfs query MOUNT [--scope documents|data|all] [--name GLOB] [--live] [--json]

    Lists every item of the mount that matches, with its size and sync status (the gathering), then says that
    gathering has finished. With --live it then follows the container: a batch of added (+), changed (~) and
    removed (-) items each time something changed (local changes, remote changes, transfer progress), at most
    four a second. --scope documents: what is under Documents/; data: everything else; all (the default).
    --name: items whose name matches the shell pattern. --json: the protocol's lines as they come.
    A live query follows every change from before its gathering: once "gathering finished" (with --json, the
    "gathered" line) is printed, a script can make changes and know they will be reported.
    """

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--scope", "--name"], switches: ["--live", "--json", "--help"])
        if args.has("--help") { return print(help) }
        guard args.positional.count == 1 else { throw UsageError("query needs one MOUNT") }
        let scope = args.value("--scope") ?? "all"
        guard ["documents", "data", "all"].contains(scope) else { throw UsageError("--scope is documents, data or all") }
        let path = absolutePath(args.positional[0])
        guard let root = SyncCommand.mountRoot(of: path),
              let socketPath = try StatusCommand.attribute(root, "querySocket") else {
            throw CommandFailure("\(path) is not a ubiquityfs mount serving the live query")
        }
        var request: [String: Any] = ["scope": scope, "live": args.has("--live")]
        if let name = args.value("--name") { request["name"] = name }
        let line = try JSONSerialization.data(withJSONObject: request, options: [.sortedKeys])
        // A client that fell behind gathers again.
        while try follow(socketPath, request: line + Data([10]), json: args.has("--json")) {
            if !args.has("--json") { say("-- fell behind; gathering again") }
        }
    }

    /// Runs one query to its end; true if the server said this client fell behind.
    private static func follow(_ socketPath: String, request: Data, json: Bool) throws -> Bool {
        let fd = try connectUnix(socketPath)
        defer { close(fd) }
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard let input = fdopen(dup(fd), "r") else { throw CommandFailure("cannot read the query socket") }
        defer { fclose(input) }
        var buf: UnsafeMutablePointer<CChar>?
        var cap = 0
        defer { free(buf) }
        while getline(&buf, &cap, input) > 0 {
            let text = String(cString: buf!).trimmingCharacters(in: .newlines)
            if json { print(text) } else { show(text) }
            fflush(nil)
            if text.hasPrefix(#"{"fellBehind""#) { return true }
            if text.hasPrefix(#"{"error""#) { exit(1) }
        }
        return false
    }

    private static func connectUnix(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard fd >= 0, bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            throw CommandFailure("cannot use the query socket \(path)")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { b in
            for (i, c) in bytes.enumerated() { b[i] = c }
            b[bytes.count] = 0
        }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else {
            let why = String(cString: strerror(errno))
            close(fd)
            throw CommandFailure("cannot connect to the query socket \(path): \(why)")
        }
        return fd
    }

    /// One protocol line as people read it.
    private static func show(_ line: String) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return }
        if let item = object["item"] as? [String: Any] {
            say(describe(item))
        } else if object["gathered"] != nil {
            say("-- gathering finished (\(object["count"] as? Int ?? 0) items)")
        } else if let batch = object["batch"] as? [String: Any] {
            for item in batch["added"] as? [[String: Any]] ?? [] { say("+ " + describe(item)) }
            for item in batch["changed"] as? [[String: Any]] ?? [] { say("~ " + describe(item)) }
            for item in batch["removed"] as? [[String: Any]] ?? [] { say("- \(item["path"] as? String ?? "")") }
        } else if let error = object["error"] as? String {
            FileHandle.standardError.write(Data("ubiquityfs: the query was refused: \(error)\n".utf8))
        }
    }

    /// `PATH  SIZE  (STATUS)`.
    static func describe(_ item: [String: Any]) -> String {
        let path = item["path"] as? String ?? ""
        let size = item["kind"] as? String == "dir" ? "-" : StatusCommand.humanSize(Int64(item["size"] as? Int ?? 0))
        return "\(path)  \(size)  (\(statusWords(item["status"] as? [String: Any] ?? [:])))"
    }

    static func statusWords(_ s: [String: Any]) -> String {
        func flag(_ name: String) -> Bool { s[name] as? Bool ?? false }
        var words: [String] = []
        if flag("isDownloading") {
            words.append("downloading \(s["percentDownloaded"] as? Int ?? 0)%")
        } else {
            words.append(s["downloadingStatus"] as? String ?? "?")
        }
        if !flag("isUbiquitous") {
            words.append("local-only")
        } else if flag("isUploading") {
            words.append("uploading \(s["percentUploaded"] as? Int ?? 0)%")
        } else if !flag("isUploaded") {
            words.append("waiting to upload")
        }
        if flag("pinned") { words.append("pinned") }
        if flag("hasUnresolvedConflicts") { words.append("conflicts") }
        if let e = s["downloadingError"] as? String { words.append("download error: \(e)") }
        if let e = s["uploadingError"] as? String { words.append("upload error: \(e)") }
        return words.joined(separator: ", ")
    }
}
