// Thin wrappers over the system calls the project uses. Each retries EINTR and throws a typed Errno.
//
// What must hold: every descriptor this file opens has O_CLOEXEC, so no child process inherits it. A wrapper
// that goes through `valueOrErrno` retries EINTR and throws the call's `Errno`; a short read or write is the
// caller's business except in `writeAll`, which loops until every byte is written. Exceptions, on purpose:
// `removeFile` takes a missing file as done, `makeDirectories`
// throws Foundation's error. This file knows no item, store or remote.
import CSys
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A POSIX error number with its message.
public struct Errno: Error, Equatable, Hashable, CustomStringConvertible, Sendable {
    public let rawValue: Int32
    public init(_ rawValue: Int32) { self.rawValue = rawValue }
    public static var current: Errno { Errno(errno) }
    public var description: String { String(cString: strerror(rawValue)) }

    public static let noEntry = Errno(ENOENT)
    public static let exists = Errno(EEXIST)
    public static let notEmpty = Errno(ENOTEMPTY)
    public static let isDirectory = Errno(EISDIR)
    public static let notDirectory = Errno(ENOTDIR)
    public static let invalid = Errno(EINVAL)
    public static let io = Errno(EIO)
    public static let busy = Errno(EBUSY)
    public static let again = Errno(EAGAIN)
    public static let interrupted = Errno(EINTR)
    public static let notPermitted = Errno(EPERM)
    public static let accessDenied = Errno(EACCES)
    public static let nameTooLong = Errno(ENAMETOOLONG)
    public static let noSpace = Errno(ENOSPC)
    public static let quota = Errno(EDQUOT)
    public static let fileTooBig = Errno(EFBIG)
    public static let noData = Errno(ENODATA)
    public static let range = Errno(ERANGE)
    public static let notSupported = Errno(ENOTSUP)
    public static let readOnly = Errno(EROFS)
    public static let badFile = Errno(EBADF)
    public static let crossDevice = Errno(EXDEV)
    public static let tooBig = Errno(E2BIG)
}

/// Calls `body` until it does not fail with EINTR; throws the errno of any other failure.
@inline(__always)
public func valueOrErrno<T: BinaryInteger>(_ body: () -> T) throws(Errno) -> T {
    while true {
        let r = body()
        if r >= 0 { return r }
        if errno == EINTR { continue }
        throw Errno.current
    }
}

/// An owned file descriptor; the owner closes it.
public struct FileDescriptor: Sendable, Hashable {
    public let raw: Int32
    public init(raw: Int32) { self.raw = raw }

    /// open(2).
    public static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o644) throws(Errno) -> FileDescriptor {
        FileDescriptor(raw: try valueOrErrno { Glibc.open(path, flags | O_CLOEXEC, mode) })
    }

    public func close() { _ = Glibc.close(raw) }

    /// lseek(2)'s SEEK_DATA and SEEK_HOLE, Linux's values (Glibc's module leaves them out without _GNU_SOURCE).
    public static let seekData: Int32 = 3
    public static let seekHole: Int32 = 4

    /// Where the next data (`seekData`) or hole (`seekHole`) starts at or after `offset`; nil when there is
    /// none (ENXIO: only a hole is left); throws where the file system cannot say.
    public func seek(_ offset: Int64, _ whence: Int32) throws(Errno) -> Int64? {
        let found = Glibc.lseek(raw, off_t(offset), whence)
        if found >= 0 { return Int64(found) }
        if errno == ENXIO { return nil }
        throw Errno.current
    }

    /// read(2) into `buffer`; returns the count, 0 at end of file.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno { Glibc.read(raw, buffer.baseAddress, buffer.count) }
    }

    /// pread(2).
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(Errno) -> Int {
        try valueOrErrno { Glibc.pread(raw, buffer.baseAddress, buffer.count, off_t(offset)) }
    }

    /// Writes the whole buffer at `offset` (pwrite(2), repeated on short writes).
    public func writeAll(_ buffer: UnsafeRawBufferPointer, at offset: Int64) throws(Errno) {
        var done = 0
        while done < buffer.count {
            let n = try valueOrErrno {
                Glibc.pwrite(raw, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            }
            done += n
        }
    }

    /// Writes the whole buffer at the current position (write(2), repeated on short writes).
    public func writeAll(_ buffer: UnsafeRawBufferPointer) throws(Errno) {
        var done = 0
        while done < buffer.count {
            done += try valueOrErrno { Glibc.write(raw, buffer.baseAddress! + done, buffer.count - done) }
        }
    }

    public func writeAll(_ bytes: [UInt8]) throws(Errno) {
        let written = bytes.withUnsafeBytes { buffer in Result { () throws(Errno) in try writeAll(buffer) } }
        try written.get()
    }

    /// Reads the file from its current position to the end in 1 MiB chunks, handing each to `body`.
    /// Hands `body` the file's bytes from `offset` on, `count` of them at most (fewer where the file ends), a
    /// MiB at a time, read with pread (the descriptor's position is left alone).
    public func forEachChunk(from offset: Int64, count: Int64,
                             _ body: (UnsafeRawBufferPointer) throws(Errno) -> Void) throws(Errno) {
        let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buf.deallocate() }
        var done: Int64 = 0
        while done < count {
            let want = Int(min(Int64(buf.count), count - done))
            let n = try read(into: UnsafeMutableRawBufferPointer(rebasing: buf[0..<want]), at: offset + done)
            if n == 0 { return }
            try body(UnsafeRawBufferPointer(rebasing: buf[0..<n]))
            done += Int64(n)
        }
    }

    public func forEachChunk(_ body: (UnsafeRawBufferPointer) throws(Errno) -> Void) throws(Errno) {
        let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buf.deallocate() }
        while true {
            let n = try read(into: buf)
            if n == 0 { return }
            try body(UnsafeRawBufferPointer(rebasing: buf[0..<n]))
        }
    }

    public func sync() throws(Errno) { _ = try valueOrErrno { fsync(raw) } }
    /// Starts writing a range to disk without waiting for it (a later `sync` then has less to do).
    public func startWriteback(from offset: Int64, length: Int64) { _ = ubq_start_writeback(raw, offset, length) }
    public func dataSync() throws(Errno) { _ = try valueOrErrno { fdatasync(raw) } }
    public func truncate(_ size: Int64) throws(Errno) { _ = try valueOrErrno { ftruncate(raw, off_t(size)) } }
    /// Frees the blocks of a range, which then reads as zeros (a hole), keeping the size.
    public func punchHole(at offset: Int64, length: Int64) throws(Errno) {
        _ = try valueOrErrno { ubq_punch_hole(raw, offset, length) }
    }

    /// Makes this (empty) file a copy of the first `length` bytes of `source`: a reflink where the file system
    /// allows it, else a copy inside the kernel (FICLONE, then copy_file_range(2)).
    public func copyContent(of source: FileDescriptor, length: Int64) throws(Errno) {
        let rc = ubq_copy_file(raw, source.raw, length)
        if rc < 0 { throw Errno(-rc) }
    }

    /// fallocate(2): `mode` 0 allocates (and grows the file), else FALLOC_FL_* flags.
    public func allocate(mode: Int32, offset: Int64, length: Int64) throws(Errno) {
        _ = try valueOrErrno { ubq_fallocate(raw, mode, offset, length) }
    }

    public func stat() throws(Errno) -> Glibc.stat {
        var st = Glibc.stat()
        _ = try valueOrErrno { fstat(raw, &st) }
        return st
    }
}

/// A byte count for people: B, KiB, MiB, GiB, TiB ("80.0 MiB").
public func readableSize(_ n: Int64) -> String {
    var value = Double(n)
    for unit in ["B", "KiB", "MiB", "GiB"] {
        if value < 1024 { return unit == "B" ? "\(n) B" : String(format: "%.1f", value) + " " + unit }
        value /= 1024
    }
    return String(format: "%.1f TiB", value)
}

/// The size of the file at `path`.
public func fileSize(_ path: String) throws(Errno) -> Int64 {
    var st = stat()
    _ = try valueOrErrno { stat(path, &st) }
    return Int64(st.st_size)
}

/// fsync of a directory, so that a rename or create in it is durable.
public func syncDirectory(_ path: String) throws {
    let fd = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY)
    defer { fd.close() }
    try fd.sync()
}

/// rename(2).
public func renameFile(_ from: String, _ to: String) throws(Errno) {
    _ = try valueOrErrno { rename(from, to) }
}

/// unlink(2); a missing file is not an error.
public func removeFile(_ path: String) throws(Errno) {
    if unlink(path) != 0 && errno != ENOENT { throw Errno.current }
}

/// mkdir -p: each folder of `path` that is missing is made with `mode` (whatever the umask); those there stay as
/// they are.
public func makeDirectories(_ path: String, mode: Int = 0o700) throws(Errno) {
    var made = ""
    for part in path.split(separator: "/", omittingEmptySubsequences: true) {
        made += (made.isEmpty && !path.hasPrefix("/") ? "" : "/") + part
        if mkdir(made, mode_t(mode)) == 0 {
            _ = try valueOrErrno { chmod(made, mode_t(mode)) }
            continue
        }
        let failure = Errno.current
        var st = Glibc.stat()
        guard failure == .exists, stat(made, &st) == 0 else { throw failure }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw Errno(ENOTDIR) }
    }
}

/// A time as nanoseconds since the epoch in 64 bits (from 1677 to 2262, the range every time here is kept in),
/// a time beyond that range held at its end, as a file system holds a time beyond the range it can store (a file
/// dated after 2262 by `touch -d` overflowed the multiplication and ended the daemon: xfstests generic/634).
public func nanoseconds(_ t: timespec) -> Int64 {
    let limit = Int64.max / 1_000_000_000 - 1
    return min(max(Int64(t.tv_sec), -limit), limit) * 1_000_000_000 + Int64(t.tv_nsec)
}

/// The current wall-clock time in nanoseconds since the epoch.
public func nowNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// Monotonic time in nanoseconds, for timeouts and rates.
public func monotonicNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// The calling thread's id (gettid(2)): what the kernel sends as the caller of a FUSE request.
public func currentThreadID() -> pid_t { pid_t(ubq_gettid()) }

/// Names the calling thread (the first 15 bytes), as `top -H`, `ps -L` and gdb show it.
public func nameCurrentThread(_ name: String) { ubq_name_thread(name) }

/// Lowers the calling thread's CPU priority to the nice value given, when it is higher than the thread's own
/// (Linux keeps one per thread; raising it back would need a privilege, so it is only ever lowered). A thread
/// doing background work (large uploads, evicting) lowered this way leaves the CPU to the threads answering
/// programs' requests when both want it, and runs at full speed when the machine is otherwise idle.
public func lowerCurrentThreadPriority(to nice: Int32) {
    let tid = id_t(ubq_gettid())
    errno = 0
    let now = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), tid)
    guard errno == 0, now < nice else { return }
    _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), tid, nice)
}

/// Random bytes from the kernel, as lowercase hex.
public func randomHex(bytes count: Int) -> String {
    // Eight bytes from each draw of the system's generator (one getrandom call each).
    var rng = SystemRandomNumberGenerator()
    var bytes: [UInt8] = []
    bytes.reserveCapacity(count + 7)
    while bytes.count < count { withUnsafeBytes(of: rng.next()) { bytes.append(contentsOf: $0) } }
    return hexString(Array(bytes.prefix(count)))
}

/// Returns free heap memory to the system, after a burst of allocations (loading, a first sync).
public func trimHeap() { ubq_trim_heap() }

/// Removes a file nothing needs any more (a temporary copy, a staging file, content let go). A failure other
/// than "not there" is logged as a warning, not thrown: what is left only takes room (the next start's or
/// `ubiquityfs check`'s sweep finds it), and no caller can do better than say so.
public func removeLeftover(_ path: String) {
    do { try removeFile(path) } catch { leftoverLog.warning("cannot remove \(path) (it stays, taking room): \(error)") }
}

private let leftoverLog = Logger("files")

/// The names in folder `path`, for `purpose` (said in the log): none when it does not exist; none either when
/// it cannot be read, and then the cause is logged, so a listing that fails is never taken silently for an
/// empty folder.
public func folderNames(_ path: String, for purpose: String) -> [String] {
    do { return try FileManager.default.contentsOfDirectory(atPath: path) } catch {
        if access(path, F_OK) == 0 || errno != ENOENT {
            leftoverLog.warning("cannot list \(path) (\(purpose)): \(error)")
        }
        return []
    }
}

/// Why a file that holds a secret (a token, a key) may not be trusted, or nil (also when it does not exist).
/// It must belong to this process's user and be open to nobody else: a file another user owns was chosen by
/// them, who then know the secret; one others can read has told it already.
public func secretFileRefusal(_ path: String) -> String? {
    var st = stat()
    guard stat(path, &st) == 0 else { return nil }
    if st.st_uid != geteuid() {
        return "\(path) belongs to another user (uid \(st.st_uid)), who then knows what it holds"
    }
    if st.st_mode & 0o077 != 0 {
        return "others may read or write \(path) (mode \(String(st.st_mode & 0o777, radix: 8))): chmod 600 it"
    }
    return nil
}
