// `ubiquityfs query`: the live query (NSMetadataQuery) of a mount, from the daemon's query socket
// (docs/QUERY.md), whose path the mount root's `querySocket` attribute names. A mount of several containers
// is queried through each container's socket at once, each row saying its container.
//
// What must hold: the socket is found only through a container root's `querySocket` attribute, never guessed.
// Lines are read whole; after `fellBehind` the query starts over with a new gathering, and an `error` line ends
// the command with status 1. Sends use MSG_NOSIGNAL, so a daemon that goes away is an error, not a kill. Over
// several containers, one `gathered` line is printed, once every container has gathered, with the sum of
// their counts, and lines are printed whole, one at a time.
import Foundation
import Glibc
import UbiquityBase
import UbiquityFUSE

enum QueryCommand {
    static let help = """
    usage: ubiquityfs query MOUNT [--scope documents|data|all] [--name GLOB] [--container ID] [--live] [--json]

    Lists every item of the mount that matches, with its size and sync status (the gathering), then says that
    gathering has finished. With --live it then follows the container: a batch of added (+), changed (~) and
    removed (-) items each time something changed (local changes, remote changes, transfer progress), at most
    four a second. --scope documents: what is under Documents/; data: everything else; all (the default).
    --name: items whose name matches the shell pattern. --json: the protocol's lines as they come.
    A live query follows every change from before its gathering: once "gathering finished" (with --json, the
    "gathered" line) is printed, a script can make changes and know they will be reported.
    On a mount of several containers it spans them all: each path starts with its container's folder, and
    each --json line has a "container" member; --container ID narrows it to one.
    """

    /// One container's query socket; `container` is nil for a mount of one container.
    struct Source {
        let container: String?
        let socket: String
    }

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--scope", "--name", "--container"],
                                 switches: ["--live", "--json", "--help"])
        if args.has("--help") { return print(help) }
        guard args.positional.count == 1 else { throw UsageError("query needs one MOUNT") }
        let scope = args.value("--scope") ?? "all"
        guard ["documents", "data", "all"].contains(scope) else { throw UsageError("--scope is documents, data or all") }
        let path = absolutePath(args.positional[0])
        var sources = try Self.sources(path)
        if let only = args.value("--container") {
            sources = sources.filter { $0.container == only }
            if sources.isEmpty { throw CommandFailure("\(path) holds no container \(only)") }
        }
        var request: [String: Any] = ["scope": scope, "live": args.has("--live")]
        if let name = args.value("--name") { request["name"] = name }
        let line = try JSONSerialization.data(withJSONObject: request, options: [.sortedKeys]) + Data([10])
        let printer = Printer(json: args.has("--json"), sources: sources.count)
        let threads = sources.map { source in
            Thread {
                // A client that fell behind gathers again.
                do {
                    while try follow(source, request: line, printer: printer) { printer.fellBehind(source) }
                } catch {
                    FileHandle.standardError.write(Data("ubiquityfs: \(error)\n".utf8))
                    exit(1)
                }
                printer.ended()
            }
        }
        threads.forEach { $0.start() }
        printer.waitForAll()
    }

    /// The query sockets of the mount holding `path`: its own, or each container's on a mount of several.
    static func sources(_ path: String) throws -> [Source] {
        guard let root = SyncCommand.mountRoot(of: path) else {
            throw CommandFailure("\(path) is not a ubiquityfs mount serving the live query")
        }
        if let socket = try StatusCommand.attribute(root, "querySocket") { return [Source(container: nil, socket: socket)] }
        guard let containers = StatusCommand.containers(ofRoot: root) else {
            throw CommandFailure("\(path) is not a ubiquityfs mount serving the live query")
        }
        return try containers.map { c in
            guard let socket = try StatusCommand.attribute(c.folder, "querySocket") else {
                throw CommandFailure("\(c.folder) does not serve the live query")
            }
            return Source(container: c.id, socket: socket)
        }
    }

    /// Prints the lines of every source, whole, one at a time; over several, one `gathered` line once all
    /// have gathered.
    final class Printer: Sendable {
        private struct State { var gathered = 0, count = 0, running: Int }
        private let state: Locked<State>
        private let json: Bool
        private let sources: Int

        init(json: Bool, sources: Int) {
            self.json = json
            self.sources = sources
            state = Locked(State(running: sources))
        }

        func line(_ text: String, from source: Source) {
            state.withLock { s in
                var text = text
                if let id = source.container, text.hasPrefix("{"), text.count > 2 {
                    if let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
                       object["gathered"] != nil {
                        s.gathered += 1
                        s.count += object["count"] as? Int ?? 0
                        guard s.gathered == sources else { return }
                        text = #"{"gathered":true,"count":\#(s.count)}"#
                    } else {
                        text = #"{"container":\#(jsonString(id)),"# + text.dropFirst()
                    }
                }
                // Unbuffered (`say`): no fflush(nil), which would wait for the streams the others' getline holds.
                if json { say(text) } else { show(text, folder: source.container.map(AccountRoot.folderName)) }
            }
        }

        func fellBehind(_ source: Source) {
            guard !json else { return }
            state.withLock { _ in say("-- fell behind; gathering again" + (source.container.map { " (\($0))" } ?? "")) }
        }

        func ended() { state.withLock(notifying: true) { $0.running -= 1 } }

        func waitForAll() { state.wait(until: nil, for: { $0.running == 0 }, then: { _ in }) }

        private func jsonString(_ s: String) -> String {
            String(decoding: (try? JSONSerialization.data(withJSONObject: [s])) ?? Data("[\"\"]".utf8), as: UTF8.self)
                .dropFirst().dropLast().description
        }
    }

    /// Runs one query to its end; true if the server said this client fell behind.
    private static func follow(_ source: Source, request: Data, printer: Printer) throws -> Bool {
        let fd = try connectUnix(source.socket)
        defer { close(fd) }
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard let input = fdopen(dup(fd), "r") else { throw CommandFailure("cannot read the query socket") }
        defer { fclose(input) }
        var buf: UnsafeMutablePointer<CChar>?
        var cap = 0
        defer { free(buf) }
        while getline(&buf, &cap, input) > 0 {
            let text = String(cString: buf!).trimmingCharacters(in: .newlines)
            printer.line(text, from: source)
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

    /// One protocol line as people read it; paths start with `folder/` on a mount of several containers.
    private static func show(_ line: String, folder: String?) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return }
        let prefix = folder.map { $0 + "/" } ?? ""
        if let item = object["item"] as? [String: Any] {
            say(prefix + describe(item))
        } else if object["gathered"] != nil {
            say("-- gathering finished (\(object["count"] as? Int ?? 0) items)")
        } else if let batch = object["batch"] as? [String: Any] {
            for item in batch["added"] as? [[String: Any]] ?? [] { say("+ " + prefix + describe(item)) }
            for item in batch["changed"] as? [[String: Any]] ?? [] { say("~ " + prefix + describe(item)) }
            for item in batch["removed"] as? [[String: Any]] ?? [] { say("- \(prefix)\(item["path"] as? String ?? "")") }
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
