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
final class Reply: @unchecked Sendable {
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

    /// The process that sent the request (nil when the kernel does not say).
    var callerPID: pid_t? {
        guard let pid = fuse_req_ctx(req)?.pointee.pid, pid > 0 else { return nil }
        return pid
    }

    /// The user and group of the process that sent the request: the owner of what it creates.
    var caller: Owner? {
        guard let ctx = fuse_req_ctx(req)?.pointee else { return nil }
        return Owner(uid: ctx.uid, gid: ctx.gid)
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
    func entry(_ e: fuse_entry_param) -> Bool {
        answer("entry") { withUnsafePointer(to: e) { fuse_reply_entry(req, $0) } }
    }

    @discardableResult
    func create(_ e: fuse_entry_param, _ fi: fuse_file_info) -> Bool {
        answer("create") {
            withUnsafePointer(to: e) { e in withUnsafePointer(to: fi) { fuse_reply_create(req, e, $0) } }
        }
    }

    func attr(_ st: stat, timeout: Double) {
        _ = answer("attr") { withUnsafePointer(to: st) { fuse_reply_attr(req, $0, timeout) } }
    }

    @discardableResult
    func open(_ fi: fuse_file_info) -> Bool {
        answer("open") { withUnsafePointer(to: fi) { fuse_reply_open(req, $0) } }
    }

    func readlink(_ target: String) { _ = answer("readlink") { fuse_reply_readlink(req, target) } }

    /// `size` bytes of an open file from `offset`, spliced by libfuse.
    func data(fd: Int32, size: Int, offset: off_t) {
        _ = answer("data") { ubq_reply_fd_read(req, fd, size, offset) }
    }

    func written(_ count: Int) { _ = answer("write") { fuse_reply_write(req, count) } }

    func offset(_ offset: off_t) { _ = answer("lseek") { fuse_reply_lseek(req, offset) } }

    func bytes(_ buf: UnsafeRawBufferPointer) {
        _ = answer("buffer") { fuse_reply_buf(req, buf.baseAddress?.assumingMemoryBound(to: CChar.self), buf.count) }
    }

    func statfs(_ vfs: statvfs) {
        _ = answer("statfs") { withUnsafePointer(to: vfs) { fuse_reply_statfs(req, $0) } }
    }

    /// The size an extended attribute value or list needs (the size probe, a request of size 0).
    func xattrSize(_ count: Int) { _ = answer("xattr size") { fuse_reply_xattr(req, count) } }
}
