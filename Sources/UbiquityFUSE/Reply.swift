// The one way to answer the kernel: a Reply wraps a request and answers it exactly once.
// What must hold here:
// - every fuse_reply_* call of the adapter is in this file, and each request gets exactly one of them; a second
//   answer is a programming error (an assertion in debug builds, logged and dropped in release builds), and so
//   is a Reply dropped unanswered: its deinit answers EIO, so the calling process never hangs;
// - every errno comes from Errors.swift (`fail` takes only errors, never a number);
// - while a request waits for content, a FUSE interrupt answers it EINTR; before any other answer the interrupt
//   callback is deregistered, which (libfuse takes the request's lock to do it) also waits for a callback that
//   is running, so once answered nothing calls back with this Reply any more;
// - the interrupt callback runs under libfuse's request lock, so it never calls into libfuse itself: its EINTR
//   goes from another thread. Lock order: libfuse's request lock, then `state`'s; nothing calls libfuse
//   holding `state`'s.
import CFuse
import CPassthrough
import Dispatch
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

/// Who may answer a request, as a plain value (so its rules are tested without libfuse).
struct AnswerState: Equatable {
    enum Phase: Equatable {
        /// Not answered; no interrupt callback registered.
        case open
        /// Not answered; an interrupt callback is registered.
        case waiting
        /// An interrupt took the request: its EINTR is the answer.
        case interrupted
        case answered
    }

    /// What an answer does.
    enum Step: Equatable {
        case send
        /// Deregisters the interrupt callback, then sends.
        case deregisterAndSend
        /// The request was answered already: a programming error, nothing is sent.
        case refuse
    }

    private(set) var phase = Phase.open

    mutating func answer() -> Step {
        switch phase {
        case .open: phase = .answered; return .send
        case .waiting: phase = .answered; return .deregisterAndSend
        case .interrupted, .answered: return .refuse
        }
    }

    /// The Reply goes away: true when nothing answered it (a programming error), so it must answer now. A waiting
    /// request cannot go away: its interrupt registration holds the Reply.
    mutating func drop() -> Bool {
        guard phase == .open else { return false }
        phase = .answered
        return true
    }

    /// Starts a wait: an interrupt may answer from now on.
    mutating func beginWaiting() {
        assert(phase == .open, "a wait begins on a request that is not open: \(phase)")
        if phase == .open { phase = .waiting }
    }

    /// An interrupt arrived; true when it takes the request (it must then answer EINTR).
    mutating func interrupt() -> Bool {
        guard phase == .waiting else { return false }
        phase = .interrupted
        return true
    }

    /// Ends a wait (the content came, or failed) before answering; true when the caller may still answer, and
    /// must then deregister the callback. False: an interrupt took the request.
    mutating func endWaiting() -> Bool {
        guard phase == .waiting else { return false }
        phase = .open
        return true
    }
}

/// A request from the kernel and its one answer. Answer methods return true when the kernel took the answer
/// (false: the request was gone, so what the answer handed over, a handle or a lookup, must be taken back).
///
/// @unchecked Sendable: libfuse lets any thread answer a request (the answer of an open comes from the thread
/// that finished its download); the request pointer is immutable and answered once, as `state` (a Locked) says.
final class Reply: Waiter, @unchecked Sendable {
    private let req: fuse_req_t
    private let state = Locked(AnswerState())
    private static let log = Logger("fuse")

    init(_ req: fuse_req_t) { self.req = req }

    deinit {
        guard state.withLock({ $0.drop() }) else { return }
        Reply.log.error("a request was dropped without an answer; it is answered EIO")
        fuse_reply_err(req, AdapterError.unanswered.errno)
        assertionFailure("a request was dropped without an answer")
    }

    /// The process that sent the request, and its user and group.
    var caller: Caller {
        guard let ctx = fuse_req_ctx(req)?.pointee else { return .unknown }
        return Caller(pid: ctx.pid > 0 ? ctx.pid : nil, owner: Owner(uid: ctx.uid, gid: ctx.gid))
    }

    // MARK: waiting

    /// Registers the interrupt callback: until `endWaiting`, an interrupt answers EINTR. False when the request
    /// was interrupted already (EINTR is then answered, and nothing else may be).
    func beginWaiting() -> Bool {
        state.withLock { $0.beginWaiting() }
        // The registration holds one reference, given back at deregistration.
        fuse_req_interrupt_func(req, { _, data in
            guard let data else { return }
            Unmanaged<Reply>.fromOpaque(data).takeUnretainedValue().interrupted()
        }, Unmanaged.passRetained(self).toOpaque())
        return state.withLock { $0.phase == .waiting }
    }

    /// Ends the wait before answering; false when an interrupt answered (the caller then answers nothing).
    func endWaiting() -> Bool {
        guard state.withLock({ $0.endWaiting() }) else { return false }
        deregister()
        return true
    }

    /// The interrupt callback: libfuse holds the request's lock, so EINTR goes from another thread.
    private func interrupted() {
        guard state.withLock({ $0.interrupt() }) else { return }
        DispatchQueue.global().async { [self] in
            deregister()
            fuse_reply_err(req, CoreError.interrupted.errno)
        }
    }

    private func deregister() {
        fuse_req_interrupt_func(req, nil, nil)
        Unmanaged.passUnretained(self).release()
    }

    // MARK: answers

    /// Sends one answer through `send` (a fuse_reply_* call returning 0 on success), if none went before.
    private func answer(_ what: StaticString, _ send: () -> Int32) -> Bool {
        switch state.withLock({ $0.answer() }) {
        case .send: break
        case .deregisterAndSend: deregister()
        case .refuse:
            Reply.log.error("a second answer (\(what)) to a request was dropped")
            assertionFailure("a second answer (\(what)) to a request")
            return false
        }
        return send() == 0
    }

    func fail(_ error: CoreError) { _ = answer("error") { fuse_reply_err(req, error.errno) } }

    func fail(_ error: AdapterError) { _ = answer("error") { fuse_reply_err(req, error.errno) } }

    /// Success without data.
    func ok() { _ = answer("success") { fuse_reply_err(req, 0) } }

    /// The answer of forget, which the kernel does not wait for.
    func none() { _ = answer("none") { fuse_reply_none(req); return 0 } }

    @discardableResult
    func entry(_ e: Entry) -> Bool {
        answer("entry") { withUnsafePointer(to: Reply.param(e)) { fuse_reply_entry(req, $0) } }
    }

    /// The answer of a create: the new file's entry and its open handle, on the kernel's `base` file info.
    @discardableResult
    func create(_ e: Entry, _ o: Opened, _ base: fuse_file_info) -> Bool {
        defer { sent(o) }
        return answer("create") {
            withUnsafePointer(to: Reply.param(e)) { e in
                withUnsafePointer(to: Reply.info(o, base)) { fuse_reply_create(req, e, $0) }
            }
        }
    }

    func attr(_ a: Attributes) {
        _ = answer("attr") { withUnsafePointer(to: a.stat) { fuse_reply_attr(req, $0, a.timeout) } }
    }

    /// The answer of an open or opendir, on the kernel's `base` file info.
    @discardableResult
    func open(_ o: Opened, _ base: fuse_file_info) -> Bool {
        defer { sent(o) }
        return answer("open") { withUnsafePointer(to: Reply.info(o, base)) { fuse_reply_open(req, $0) } }
    }

    /// After an open answer: a passthrough mark is no longer needed (Passthrough.swift).
    private func sent(_ o: Opened) {
        if o.passthrough { _ = ubq_pt_unmark(o.fh) }
    }

    func readlink(_ target: String) { _ = answer("readlink") { fuse_reply_readlink(req, target) } }

    /// `size` bytes of an open file from `offset`, spliced by libfuse.
    func data(fd: Int32, size: Int, offset: off_t) {
        _ = answer("data") { ubq_reply_fd_read(req, fd, size, offset) }
    }

    func written(_ count: Int) { _ = answer("write") { fuse_reply_write(req, count) } }

    func offset(_ offset: off_t) { _ = answer("lseek") { fuse_reply_lseek(req, offset) } }

    /// A page of a directory listing (DirectoryPacking).
    func directory(_ page: DirectoryPage) {
        page.bytes.withUnsafeBytes { buf in
            _ = answer("directory") {
                fuse_reply_buf(req, buf.baseAddress?.assumingMemoryBound(to: CChar.self), buf.count)
            }
        }
    }

    func statfs(_ vfs: statvfs) {
        _ = answer("statfs") { withUnsafePointer(to: vfs) { fuse_reply_statfs(req, $0) } }
    }

    /// An extended attribute value or list: its size for a probe (`size` 0), ERANGE when it does not fit in
    /// `size` bytes, else the bytes.
    func xattr(_ bytes: [UInt8], size: Int) {
        if size == 0 { return _ = answer("xattr size") { fuse_reply_xattr(req, bytes.count) } }
        if bytes.count > size { return fail(AdapterError.bufferTooSmall) }
        bytes.withUnsafeBytes { buf in
            _ = answer("xattr") { fuse_reply_buf(req, buf.baseAddress?.assumingMemoryBound(to: CChar.self), buf.count) }
        }
    }

    // MARK: values to libfuse's structures

    static func param(_ e: Entry) -> fuse_entry_param {
        var p = fuse_entry_param()
        p.ino = e.ino
        p.attr = e.attributes
        p.attr_timeout = e.ino == 0 ? 0 : e.timeout
        p.entry_timeout = e.timeout
        return p
    }

    static func info(_ o: Opened, _ base: fuse_file_info) -> fuse_file_info {
        var fi = base
        fi.fh = o.fh
        if o.keepCache { ubq_fi_set_keep_cache(&fi, 1) }
        if o.directIO { ubq_fi_set_direct_io(&fi, 1) }
        return fi
    }
}

// MARK: directory pages
//
// Packing a directory listing into readdir answers. What must hold here:
// - a page never holds more than the kernel's `size` bytes, and holds whole entries only;
// - entries go in listing order from the offset asked for, and each entry's offset is the index of the one after
//   it, so the next readdir, given that offset, resumes exactly after the last entry the kernel took;
// - an entry that does not fit is not packed and ends the page; in readdirplus its lookup is taken back
//   (`unused`), since the kernel never saw it.

/// One readdir answer's worth of a listing.
struct DirectoryPage {
    /// The packed records (libfuse's dirent or direntplus records), at most the size asked for.
    var bytes: [CChar]
    /// The index of the first entry not packed: the offset the next readdir gives.
    var next: Int
}

enum DirectoryPacking {
    /// Packs entries `start..<count` into at most `size` bytes, stopping at the first that does not fit.
    /// `add(index, buffer, space, offset)` writes entry `index` with its offset when it fits in `space` bytes
    /// and returns the bytes it needs either way (as fuse_add_direntry does).
    static func pack(count: Int, from start: Int, size: Int,
                     add: (_ index: Int, _ buffer: UnsafeMutablePointer<CChar>, _ space: Int, _ offset: off_t) -> Int)
        -> DirectoryPage {
        var buf = [CChar](repeating: 0, count: max(size, 0))
        var used = 0
        var index = max(start, 0)
        buf.withUnsafeMutableBufferPointer { whole in
            // An empty buffer has no address, and nothing fits in it.
            guard let base = whole.baseAddress else { return }
            while index < count {
                let n = add(index, base + used, size - used, off_t(index + 1))
                if n > size - used { break }
                used += n
                index += 1
            }
        }
        return DirectoryPage(bytes: Array(buf.prefix(used)), next: index)
    }

    /// Plain readdir records: name, type and inode (`ino` of the entry).
    static func plain(_ list: [FileSystem.DirEntry], from start: Int, size: Int,
                      ino: (FileSystem.DirEntry) -> UInt64) -> DirectoryPage {
        pack(count: list.count, from: start, size: size) { index, buffer, space, offset in
            var st = stat()
            st.st_mode = list[index].type
            st.st_ino = UInt(ino(list[index]))
            // libfuse does not use the request here.
            return fuse_add_direntry(nil, buffer, space, list[index].name, &st, offset)
        }
    }

    /// readdirplus records: `entry` gives each entry's node (counting a lookup when its inode is not 0),
    /// `unused` takes back the one of an entry that did not fit.
    static func plus(_ list: [FileSystem.DirEntry], from start: Int, size: Int,
                     entry: (FileSystem.DirEntry) -> Entry,
                     unused: (Entry) -> Void) -> DirectoryPage {
        pack(count: list.count, from: start, size: size) { index, buffer, space, offset in
            let e = entry(list[index])
            var p = Reply.param(e)
            let n = fuse_add_direntry_plus(nil, buffer, space, list[index].name, &p, offset)
            if n > space { unused(e) }
            return n
        }
    }
}
