// `ubiquityfs mount` and `ubiquityfs unmount`.
//
// `mount` checks what it can in the foreground (arguments, mount point, stale mounts), then starts itself as a
// daemon with `--foreground` and waits for the daemon's word on its standard error: "ready" once the mount is
// usable, or the one-line reason it is not. The daemon logs to a file in its store.
//
// What must hold: arguments are all checked, and paths made absolute, before a daemon starts (it runs in a
// session of its own). `mount` returns success only once the daemon said "ready", else it fails with the
// daemon's own lines. A mount point left by a dead daemon is cleaned up (`fusermount3 -u -z`); a live mount there
// is refused. `unmount` touches only a `fuse.ubiquityfs` mount, refuses while changes wait to upload (unless
// `--force`), and waits for the daemon to exit.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore
import UbiquityFUSE
import UbiquityHTTP

let defaultContainer = "iCloud.com.example.ubiquityfs"

enum MountCommand {
    static let help = """
    usage: ubiquityfs mount MOUNTPOINT [--remote URL[,URL...] --token-file FILE [--ca-file FILE]]
                                      [--container ID | --containers ID,ID,...] [--all-containers] [--share SHARE]
                                      [--store DIR] [--device NAME] [--foreground] [--log-level LEVEL] [--log-file FILE]
                                      [--download-timeout SECONDS] [--no-download-for NAME,...]
                                      [--cache-size SIZE] [--min-free SIZE] [--no-passthrough]
                                      [--stub-bandwidth BYTES_PER_S] [--stub-latency-ms N]

    Mounts the container ID (default \(defaultContainer)) at MOUNTPOINT and returns once it is usable.
      --containers ID,ID,...  several containers, the main one first, each in its folder of MOUNTPOINT named
                         as in ~/Library/Mobile Documents (iCloud.com.example.notes: iCloud~com~example~notes),
                         each a file system of its own (mv between two copies and deletes)
      --all-containers   every container of the token's user (with those of --container(s) first), new ones
                         appearing as they are made
      --share SHARE      a folder another user of the remote shares with the token's user, in the container
                         (OWNER/NAME as `share list` shows it, or the share's id): the folder is the mount's
                         root; a folder shared read-only shows no write bits and refuses every change (EACCES);
                         one shared read-write mounts read-only for now (EROFS: writing through it is planned)
    Without --remote it uses a private remote stub with its data in \(dataDirectory())/remote, started for the
    mount (--stub-bandwidth and --stub-latency-ms throttle it, to watch lazy downloads).
      --remote URL, --token-file FILE   the remote stub and the file holding its token (its DATA/token)
                         several URLs, comma-separated, name servers of one container store sharing one token:
                         the first is used until it stops answering, then the next (and round again)
      --ca-file FILE     PEM certificates of the authorities that vouch for an https remote (default: the
                         system's); the host name in the URL must match the certificate
      --store DIR        the device's backing store (default: DATA/stores/ID/DEVICE); with several containers
                         the folder of their stores, DIR/ID
      --device NAME      this device's name (default: the host name)
      --foreground       stay attached; log to stderr unless --log-file
      --download-timeout how long an open waits for content before failing with EIO, and the longest silence a
                         download may have (default 30, at least 1)
      --cache-size SIZE  the most the local copies of files may take: bytes with K, M, G or T (powers of 1024),
                         or a percentage of the store's file system (default 25%); past it the least recently
                         used files that are uploaded, not pinned and not open are evicted, down to 90% of it
      --min-free SIZE    free space kept on the store's file system the same way (default 5%, at most 1G;
                         0 for none)
      --no-passthrough   the daemon serves every read and write; by default the kernel reads and writes
                         local content itself (FUSE passthrough) where it offers it (Linux 6.9+) and the
                         daemon runs with CAP_SYS_ADMIN; files still downloading keep the ordinary path
                         (--passthrough, the default, is accepted)
      --no-notify        no desktop notifications (by default a new conflict, uploads failing for a minute, a
                         full store and a refused key each raise one on the session bus, one per cause a minute)
      --no-download-for NAME,...
                         processes that may not download (names as in /proc/PID/comm; longer names match
                         their first 15 bytes): their opens of a file that is not local fail at once with
                         EAGAIN (an older local copy is served). O_NONBLOCK changes nothing.
                         '' for none; the default is the desktop indexers:
                         \(indexerLines)
    """

    /// The default --no-download-for list, four names a line.
    private static var indexerLines: String {
        let names = DownloadPolicy.indexers
        return stride(from: 0, to: names.count, by: 4)
            .map { names[$0..<min($0 + 4, names.count)].joined(separator: ",") }
            .joined(separator: ",\n" + String(repeating: " ", count: 21))
    }

    struct Options: Sendable {
        var mountpoint: String
        /// The containers asked for, the main one first (one unless --containers; none with --all-containers
        /// alone).
        var containers: [String]
        /// Every container of the key's user, new ones as they are made.
        var allContainers = false
        /// `--share`: the folder shared with this user to mount (OWNER/NAME or a share id), in `containers[0]`.
        var share: String? = nil
        var device: String
        /// --store DIR: the store of the one container, or the folder of the stores of several (DIR/ID).
        var storeGiven: String?
        /// The remote's servers (none: the embedded stub).
        var remoteURLs: [String]
        var tokenFile: String?
        var caFile: String?
        var logLevel: LogLevel
        var logFile: String?
        var downloadTimeout: Int
        /// Processes that may not download (indexers).
        var noDownloadFor: [String]
        var stubBandwidth: Int
        var stubLatency: Int
        /// The local store limit and the free space kept (defaults: see `defaultCacheSize`, `defaultMinFree`).
        var cacheSize: SizeSpec?
        var minFree: SizeSpec?
        /// Ask the kernel for FUSE passthrough of local content (docs/PASSTHROUGH.md).
        var passthrough = true
        /// Desktop notifications on the session bus (DesktopNotices.swift).
        var desktopNotices = true

        /// Where the daemon logs without --log-file: the main container's store; for --all-containers alone, the
        /// folder of the stores (--store DIR, or DATA/stores).
        var logFolder: String { containers.first.map(store(of:)) ?? storeGiven ?? "\(dataDirectory())/stores" }

        /// What /proc/mounts shows as the source of a mount of several (after `ubiquityfs:`), and what mount(8)'s
        /// helper mounts again: the ids joined by `|`, `all` first for --all-containers.
        var accountSource: String { ((allContainers ? ["all"] : []) + containers).joined(separator: "|") }

        /// Several containers, each on its folder of the account root.
        var isAccount: Bool { allContainers || containers.count > 1 }

        /// Where container `id`'s store is: --store DIR (one container) or DIR/ID (several), else the one
        /// store a device keeps for the container, DATA/stores/ID/DEVICE, whichever way it is mounted.
        func store(of id: String) -> String {
            if let dir = storeGiven { return isAccount ? dir + "/" + id : dir }
            return "\(dataDirectory())/stores/\(id)/\(device.replacingOccurrences(of: " ", with: "_"))"
        }
    }

    /// Without --cache-size: a quarter of the store's file system, a guest's share of a disk that is shared.
    static let defaultCacheSize = SizeSpec.percent(25)
    /// Without --min-free: 5% of the store's file system, at most 1 GiB: room for the database, staging and
    /// writes when other programs fill the disk.
    static func defaultMinFree(fileSystemBytes: Int64) -> Int64 { min(SizeSpec.percent(5).bytes(of: fileSystemBytes), 1 << 30) }

    /// The --download-timeout in seconds (30 when not given), at least 1.
    static func downloadTimeout(_ args: Arguments) throws -> Int {
        guard let seconds = try args.int("--download-timeout") else { return 30 }
        guard seconds >= 1 else { throw UsageError("--download-timeout takes seconds, 1 or more; not \(seconds)") }
        return seconds
    }

    /// Parses a --cache-size or --min-free value, or says in one line what it takes.
    static func size(_ args: Arguments, _ name: String, zeroAllowed: Bool) throws -> SizeSpec? {
        guard let text = args.value(name) else { return nil }
        guard let spec = SizeSpec.parse(text) else {
            throw UsageError("\(name) takes bytes with K, M, G or T (powers of 1024) or a percentage of the store's "
                             + "file system, like 50M or 10%; not '\(text)'")
        }
        if !zeroAllowed && spec == .bytes(0) {
            throw UsageError("\(name) takes more than 0 bytes; not '\(text)'")
        }
        return spec
    }

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: ["--remote", "--token-file", "--ca-file", "--container", "--containers",
                                                "--store",
                                                "--device", "--share",
                                                "--log-level", "--log-file", "--download-timeout", "--stub-bandwidth",
                                                "--stub-latency-ms", "--no-download-for", "--cache-size", "--min-free"],
                                 switches: ["--foreground", "--help", "--passthrough", "--no-passthrough", "--no-notify",
                                            "--all-containers"])
        if args.has("--help") { return print(help) }
        guard args.positional.count == 1 else { throw UsageError("mount needs exactly one MOUNTPOINT") }
        let containers = try containerList(args)
        if (args.value("--remote") == nil) != (args.value("--token-file") == nil) {
            throw UsageError("--remote and --token-file go together")
        }
        let remoteURLs = try remoteList(args.value("--remote"))
        if args.value("--ca-file") != nil && remoteURLs.isEmpty { throw UsageError("--ca-file goes with --remote") }
        let level = args.value("--log-level").map { LogLevel(name: $0) } ?? .info
        guard let level else { throw UsageError("--log-level takes debug, info, warn or error") }
        if args.value("--share") != nil && (remoteURLs.isEmpty || containers.count != 1) {
            throw UsageError("--share needs --remote (a remote with users), and goes with one container")
        }
        let device = args.value("--device") ?? hostName()
        guard !device.isEmpty, device.utf8.count <= 64, !device.contains("/") else {
            throw UsageError("--device takes a name of 1 to 64 bytes without '/'")
        }
        let options = Options(
            mountpoint: absolutePath(args.positional[0]), containers: containers,
            allContainers: args.has("--all-containers"), share: args.value("--share"), device: device,
            storeGiven: args.value("--store").map(absolutePath),
            remoteURLs: remoteURLs, tokenFile: args.value("--token-file").map(absolutePath),
            caFile: args.value("--ca-file").map(absolutePath),
            logLevel: level, logFile: args.value("--log-file").map(absolutePath),
            downloadTimeout: try downloadTimeout(args),
            noDownloadFor: args.value("--no-download-for").map { $0.split(separator: ",").map(String.init) }
                ?? DownloadPolicy.indexers,
            stubBandwidth: try args.int("--stub-bandwidth") ?? 0, stubLatency: try args.int("--stub-latency-ms") ?? 0,
            cacheSize: try size(args, "--cache-size", zeroAllowed: false),
            minFree: try size(args, "--min-free", zeroAllowed: true), passthrough: !args.has("--no-passthrough"),
            desktopNotices: !args.has("--no-notify"))
        try checkMountpoint(options.mountpoint)
        if args.has("--foreground") {
            try Daemon(options: options, notify: ProcessInfo.processInfo.environment["UBIQUITYFS_NOTIFY"] == "1").run()
        } else {
            try startDaemon(words)
        }
    }

    /// The containers of --container ID or --containers ID,ID,... (not both; each once), the default one when
    /// neither is given, none for --all-containers alone.
    static func containerList(_ args: Arguments) throws -> [String] {
        if args.value("--container") != nil && args.value("--containers") != nil {
            throw UsageError("--container and --containers do not go together (--containers takes a list)")
        }
        let ids = args.value("--containers").map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }
            ?? args.value("--container").map { [$0] }
            ?? (args.has("--all-containers") ? [] : [defaultContainer])
        for id in ids where !WireRules.isValidContainerID(id) {
            throw UsageError("'\(id)' is not a container id (like iCloud.com.example.notes)")
        }
        if Set(ids).count != ids.count { throw UsageError("--containers names a container twice") }
        if args.value("--containers") != nil && ids.isEmpty { throw UsageError("--containers takes one id or more") }
        return ids
    }

    /// The URLs of --remote: comma-separated, each http:// or https://.
    static func remoteList(_ text: String?) throws -> [String] {
        guard let text else { return [] }
        let urls = text.split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: .whitespaces) }
        for url in urls where !(url.hasPrefix("http://") || url.hasPrefix("https://")) || url.utf8.count < 9 {
            throw UsageError("--remote takes URLs like http://127.0.0.1:8443, comma-separated; not '\(url)'")
        }
        // The token would travel in clear: plain HTTP only to this machine.
        for url in urls where url.hasPrefix("http://") && !isLoopback(host(of: url)) {
            throw UsageError("--remote \(url): plain HTTP is only for this machine (127.0.0.1, ::1, localhost); "
                             + "use https:// (with --ca-file) for \(host(of: url))")
        }
        return urls
    }

    /// The host of an http(s) URL, without brackets (an IPv6 address) or port.
    static func host(of url: String) -> String {
        let rest = url.drop(while: { $0 != "/" }).dropFirst(2)
        let authority = rest.prefix(while: { $0 != "/" && $0 != "?" })
        if authority.hasPrefix("["), let end = authority.firstIndex(of: "]") {
            return String(authority[authority.index(after: authority.startIndex)..<end])
        }
        return String(authority.prefix(while: { $0 != ":" }))
    }

    /// Whether a host names this machine: localhost, 127.0.0.0/8 or ::1.
    static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" { return true }
        var addr = in_addr()
        return inet_pton(AF_INET, host, &addr) == 1 && (UInt32(bigEndian: addr.s_addr) >> 24) == 127
    }

    /// Refuses a missing, non-directory or busy mount point; cleans up a stale one left by a dead daemon.
    static func checkMountpoint(_ path: String) throws {
        var st = stat()
        // statvfs always reaches a FUSE daemon (stat may be answered from the kernel's cache): a dead one
        // answers ENOTCONN, or ECONNABORTED (kernel 6.18, at times, after a kill -9).
        let daemonGone = { errno == ENOTCONN || errno == ECONNABORTED }
        var vfs = statvfs()
        if statvfs(path, &vfs) != 0 && daemonGone() || stat(path, &st) != 0 {
            if daemonGone() {
                FileHandle.standardError.write(Data(
                    "ubiquityfs: \(path) was left mounted by a daemon that is gone; cleaning it up\n".utf8))
                _ = runTool("/bin/fusermount3", ["-u", "-z", path])
                if stat(path, &st) != 0 { throw UsageError("cannot clean up the stale mount at \(path)") }
            } else if errno == ENOENT {
                throw MountFailure("mount point \(path) does not exist")
            } else {
                throw MountFailure("cannot use \(path): \(Errno.current)")
            }
        }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw MountFailure("mount point \(path) is not a directory") }
        if let type = mountType(path) {
            if type == "fuse.ubiquityfs" {
                throw MountFailure("\(path) is already mounted by ubiquityfs (ubiquityfs unmount \(path) first)")
            }
            throw MountFailure("\(path) is busy: a \(type) file system is mounted there")
        }
    }

    /// Starts the daemon and waits for its readiness or its error line.
    static func startDaemon(_ words: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: selfExecutable())
        process.arguments = ["mount"] + words + ["--foreground"]
        var env = ProcessInfo.processInfo.environment
        env["UBIQUITYFS_NOTIFY"] = "1"
        process.environment = env
        let pipe = Pipe()
        process.standardError = pipe
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        var said = Data()
        while true {
            let chunk = pipe.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            said.append(chunk)
            if String(decoding: said, as: UTF8.self).contains("ready\n") { break }
        }
        let text = String(decoding: said, as: UTF8.self)
        if text.contains("ready\n") {
            for line in text.split(separator: "\n") where line != "ready" { print(line) }
            return
        }
        process.waitUntilExit()
        let lines = text.split(separator: "\n")
        if lines.isEmpty { throw MountFailure("the mount daemon exited with status \(process.terminationStatus)") }
        for line in lines { FileHandle.standardError.write(Data((line + "\n").utf8)) }
        exit(1)
    }
}

struct MountFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum UnmountCommand {
    static let help = """
    usage: ubiquityfs unmount [--force] MOUNTPOINT

    Unmounts a ubiquityfs mount and waits for its daemon to finish. While changes wait to upload it refuses
    and says how many (wait with 'ubiquityfs sync --wait MOUNTPOINT'); --force unmounts anyway: the changes
    stay in the store and go up at the next mount.
    """

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: [], switches: ["--help", "--force"])
        if args.has("--help") { return print(help) }
        guard args.positional.count == 1 else { throw UsageError("unmount needs exactly one MOUNTPOINT") }
        let path = absolutePath(args.positional[0])
        guard mountType(path) == "fuse.ubiquityfs" else { throw MountFailure("\(path) is not a ubiquityfs mount") }
        // A count that cannot be read refuses too (the error says why): it is no proof that nothing waits.
        if !args.has("--force"), let n = try StatusCommand.attribute(path, FileSystemNames.pendingChanges)
            .flatMap({ Int($0) }), n > 0 {
            throw MountFailure("\(n) change(s) in \(path) are not uploaded yet; wait with 'ubiquityfs sync --wait \(path)', "
                + "or unmount with --force (they go up at the next mount)")
        }
        let pid = readPID(for: path)
        // The containers of a mount of several first: the root cannot go while they are mounted on it.
        for inner in mounts(below: path).reversed() + [path] {
            let (status, output) = runTool("/bin/fusermount3", ["-u", inner])
            guard status == 0 else {
                throw MountFailure("cannot unmount \(inner): \(output.trimmingCharacters(in: .whitespacesAndNewlines))")
            }
        }
        if let pid { waitForExit(pid, seconds: 30) }
    }
}

// MARK: helpers

/// The file system type mounted exactly at `path`, from /proc/self/mountinfo.
func mountType(_ path: String) -> String? {
    mountTable().last { $0.point == path }?.type
}

/// The ubiquityfs mounts inside `path` (the containers of a mount of several), in the order they were made.
func mounts(below path: String) -> [String] {
    mountTable().filter { $0.type == "fuse.ubiquityfs" && $0.point.hasPrefix(path + "/") }.map(\.point)
}

/// Every mount point and its type, from /proc/self/mountinfo, in the order they were made.
private func mountTable() -> [(point: String, type: String)] {
    guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
    return text.split(separator: "\n").compactMap { line in
        let halves = line.components(separatedBy: " - ")
        let fields = halves[0].split(separator: " ")
        guard halves.count == 2, fields.count >= 5, let type = halves[1].split(separator: " ").first else { return nil }
        return (unescapeMountinfo(String(fields[4])), String(type))
    }
}

private func unescapeMountinfo(_ s: String) -> String {
    var out = [UInt8](), bytes = Array(s.utf8), i = 0
    while i < bytes.count {
        if bytes[i] == 0x5c, i + 3 < bytes.count, let v = UInt8(String(decoding: bytes[i+1...i+3], as: UTF8.self), radix: 8) {
            out.append(v); i += 4
        } else { out.append(bytes[i]); i += 1 }
    }
    return String(decoding: out, as: UTF8.self)
}

/// Runs a tool and returns its exit status and what it printed.
@discardableResult
func runTool(_ path: String, _ arguments: [String]) -> (Int32, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: path)
    p.arguments = arguments
    let pipe = Pipe()
    p.standardOutput = pipe
    p.standardError = pipe
    do { try p.run() } catch { return (127, "\(error)") }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}

func hostName() -> String {
    var buf = [CChar](repeating: 0, count: 256)
    gethostname(&buf, 255)
    let name = String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return name.isEmpty ? "linux" : name
}

/// Where the daemon of a mount point records its pid.
func pidFile(for mountpoint: String) -> String {
    "\(dataDirectory())/run/\(sha256Hex(Array(mountpoint.utf8)).prefix(24)).pid"
}

func readPID(for mountpoint: String) -> pid_t? {
    guard let text = try? String(contentsOfFile: pidFile(for: mountpoint), encoding: .utf8) else { return nil }
    return pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
}

func waitForExit(_ pid: pid_t, seconds: Int) {
    for _ in 0..<(seconds * 20) {
        if kill(pid, 0) != 0 && errno == ESRCH { return }
        usleep(50_000)
    }
}
