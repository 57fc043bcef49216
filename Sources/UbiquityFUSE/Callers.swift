// Who sent a request, for the per-process download policy. Desktop indexers open every file they meet; on a
// mount of files that are not local they would pull the whole container. Processes named in the policy may not
// download: their opens of content that is not local fail at once with EAGAIN (a stale local copy is served).
// O_NONBLOCK plays no part: GNU grep, tar and file open regular files with it and must simply work.
//
// What must hold: the policy only ever refuses a download, never the use of what is local, and is asked only
// for an open that would download. A name is compared as the kernel keeps it (the first 15 bytes of the main
// thread's /proc/PID/comm); a process whose name cannot be read may download. No lock: the policy is immutable.
import Glibc

public struct DownloadPolicy: Sendable {
    /// The desktop indexers, as their processes are named.
    public static let indexers = [
        "tracker-miner-fs-3", "tracker-extract-3", "tracker-miner-fs", "tracker-extract",
        "localsearch-3", "localsearch-extractor-3", "baloo_file", "baloo_file_extractor",
        "updatedb", "updatedb.mlocate", "updatedb.plocate", "recollindex",
    ]

    /// The kernel keeps at most this many bytes of a process name (TASK_COMM_LEN less its NUL).
    static let nameBytes = 15

    /// The refused names as the kernel keeps them.
    private let refused: [[UInt8]]

    /// Refuses downloads to the processes named `names` (longer names match their first 15 bytes, as in
    /// /proc/PID/comm).
    public init(noDownloadFor names: [String]) {
        refused = names.map { Array($0.utf8.prefix(DownloadPolicy.nameBytes)) }
    }

    /// True unless the request comes from a process that may not download. Reads /proc, which is local and
    /// fast; called only for opens that would download.
    func mayDownload(_ pid: pid_t?) -> Bool {
        guard !refused.isEmpty, let pid, let name = processName(pid) else { return true }
        return !refused.contains(name)
    }
}

/// The name of the process that thread `tid` belongs to: its main thread's /proc/PID/comm (worker threads are
/// often named otherwise, such as "pool-tracker-mi").
func processName(_ tid: pid_t) -> [UInt8]? {
    guard let status = readSmallFile("/proc/\(tid)/status") else { return nil }
    let tgid = status.split(separator: UInt8(ascii: "\n")).lazy
        .compactMap { line -> pid_t? in
            guard line.starts(with: Array("Tgid:".utf8)) else { return nil }
            return pid_t(String(decoding: line.dropFirst(5).filter { $0 != 0x20 && $0 != 0x09 }, as: UTF8.self))
        }.first ?? tid
    guard var comm = readSmallFile("/proc/\(tgid)/comm") else { return nil }
    if comm.last == UInt8(ascii: "\n") { comm.removeLast() }
    return comm
}

/// The supplementary groups of the process of thread `tid` (its /proc/TID/status, read whole: the list may be
/// long), or none when they cannot be read.
func supplementaryGroups(_ tid: pid_t) -> [UInt32] {
    guard let status = readSmallFile("/proc/\(tid)/status", limit: 1 << 20) else { return [] }
    let line = status.split(separator: UInt8(ascii: "\n")).first { $0.starts(with: Array("Groups:".utf8)) }
    return String(decoding: line?.dropFirst(7) ?? [], as: UTF8.self)
        .split(whereSeparator: { $0 == " " || $0 == "\t" }).compactMap { UInt32($0) }
}

/// The first `limit` bytes of a file (4 KiB by default), or nil when it cannot be read.
private func readSmallFile(_ path: String, limit: Int = 4096) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while bytes.count < limit {
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, min($0.count, limit - bytes.count)) }
        if n < 0 { return nil }
        if n == 0 { break }
        bytes += buf.prefix(n)
    }
    return bytes
}
