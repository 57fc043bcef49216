// What the adapter's operations take and give, as plain values. An operation (FileSystem.swift and its
// extensions) returns an entry, attributes, an open handle, bytes, or throws a typed error (Errors.swift); one
// that must wait for content calls a completion instead. Session.swift decodes each request into these values
// and hands the result to Reply.swift, and those two files alone know libfuse, so every rule of the adapter
// (.versions, .kvstore, the status attributes, open handles) can be tested by calling the operation itself
// (Tests/UbiquityFUSETests/ReferenceModelTests.swift).
//
// What must hold: an `Entry` with a non-zero inode counts one lookup of it, and an `Opened` holds a handle;
// whoever cannot deliver one to the kernel gives it back (`FileSystem.forget`, `FileSystem.release`).
import Glibc
import UbiquityBase
import UbiquityCore

/// Who sent a request.
struct Caller: Sendable, Equatable {
    /// The process (nil when the kernel does not say).
    var pid: pid_t?
    /// Its user and group: the owner of what it creates (nil: the mounting user's).
    var owner: Owner?

    static let unknown = Caller(pid: nil, owner: nil)

    /// Whether a change of a file by this caller that clears the setuid and setgid bits keeps a setgid bit the
    /// group may not execute: when it holds CAP_FSETID or is in the file's group `gid`, by its own group or a
    /// supplementary one (the kernel's rule; xfstests generic/683). `mayHoldFSETID`: the request does not say
    /// whether it holds the capability (a chown, a fallocate), so root is taken to; a write, a truncation and an
    /// O_TRUNC open say it does not.
    func keepsSetGID(ofGroup gid: UInt32, mayHoldFSETID: Bool) -> Bool {
        guard let owner else { return true }
        if (mayHoldFSETID && owner.uid == 0) || owner.gid == gid { return true }
        return pid.map { supplementaryGroups($0).contains(gid) } ?? false
    }
}

/// A name's node and its attributes; a non-zero `ino` counts one lookup. Inode 0 is a negative entry (the name
/// does not exist), cached for `timeout` like a positive one.
struct Entry: Sendable {
    var ino: UInt64
    var attributes: stat
    /// How long the kernel may keep the name and the attributes (0: never, for virtual nodes).
    var timeout: Double

    static func negative(timeout: Double) -> Entry { Entry(ino: 0, attributes: stat(), timeout: timeout) }
}

/// A node's attributes and how long the kernel may keep them.
struct Attributes: Sendable {
    var stat: stat
    var timeout: Double
}

/// An open file or directory handle, and how the kernel is to use it.
struct Opened: Equatable, Sendable {
    var fh: UInt64
    /// The kernel may keep the pages it cached from an earlier open (content changes only through this mount or
    /// with an explicit invalidation).
    var keepCache = false
    /// Every read and write comes to the daemon (a key's value, made at open).
    var directIO = false
    /// The handle is marked for FUSE passthrough (Passthrough.swift); the mark goes once the answer is sent.
    var passthrough = false
}

/// The bytes of one write request, wherever they are (libfuse's buffer vector; an array in a test).
struct WriteData {
    let count: Int
    /// Writes the bytes to `fd` at `offset`; returns the count written, or a negative errno.
    let write: (_ fd: Int32, _ offset: off_t) -> Int

    init(count: Int, write: @escaping (_ fd: Int32, _ offset: off_t) -> Int) {
        self.count = count
        self.write = write
    }

    init(_ bytes: [UInt8]) {
        count = bytes.count
        write = { fd, offset in
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, offset) }
            return n < 0 ? -Int(Glibc.errno) : n
        }
    }
}

/// What a setattr changes (nil: left as it is). Times are nanoseconds since the epoch.
struct AttributeChanges: Sendable, Equatable {
    var size: Int64?
    var mode: UInt32?
    var uid: uid_t?
    var gid: gid_t?
    var mtime: Int64?
    var atime: Int64?
    /// The caller, when the setuid and setgid bits go (a chown, or a truncation by a caller without
    /// CAP_FSETID), as the kernel asks with FUSE_HANDLE_KILLPRIV_V2 instead of sending the mode itself.
    var clearsSUIDGID: Caller?

    /// The same changes without the size.
    var withoutSize: AttributeChanges {
        var c = self
        c.size = nil
        return c
    }

    var changesOwner: Bool { uid != nil || gid != nil }
}

/// rename(2) and renameat2's RENAME_NOREPLACE and RENAME_EXCHANGE.
enum RenameMode: Sendable {
    case replace, noReplace, exchange

    /// renameat2's flags; nil for any other flag or for both at once (EINVAL).
    init?(flags: UInt32) {
        switch flags {
        case 0: self = .replace
        case 1: self = .noReplace
        case 2: self = .exchange
        default: return nil
        }
    }
}

/// A request that may wait for content: until `endWaiting`, an interrupt may answer it (EINTR), and then
/// nothing else may.
protocol Waiter: Sendable {
    /// Starts the wait; false when the request was interrupted already.
    func beginWaiting() -> Bool
    /// Ends the wait before the answer; false when an interrupt answered meanwhile.
    func endWaiting() -> Bool
}

/// The end of an operation that may wait for content. It is not called when an interrupt answered the request.
typealias Completion<T> = @Sendable (Result<T, AdapterError>) -> Void
