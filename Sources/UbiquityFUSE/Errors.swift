// The one map from errors to errno: the core's errors, and the few refusals the adapter makes itself. Every
// errno an answer carries comes from here; `Reply.fail` takes only these two typed errors (`FileSystemError`),
// so an operation says which failure it answers, and no other file names an errno constant.
//
// What must hold: the map is exhaustive over `CoreError` (no default), so a new case has to choose its errno
// here. A failure of the store, of the remote, or of a system call on the store's own files is EIO, never the
// errno underneath (it would speak of a file the caller never named); only `AdapterError.system` passes an
// errno through, for a call on a descriptor the adapter holds for the caller.
import Glibc
import UbiquityBase
import UbiquityCore

/// An error an operation may answer: only the two below conform.
protocol FileSystemError: Error {
    var errno: Int32 { get }
}

extension CoreError: FileSystemError {
    var errno: Int32 {
        switch self {
        case .notFound: return ENOENT
        case .exists: return EEXIST
        case .notEmpty: return ENOTEMPTY
        case .isDirectory: return EISDIR
        case .notDirectory: return ENOTDIR
        case .invalidName: return EINVAL
        case .nameTooLong: return ENAMETOOLONG
        case .illegalByteSequence: return EILSEQ
        case .invalidArgument: return EINVAL
        case .busy: return EBUSY
        // An open of content that is not local by a process that may not download it (an indexer).
        case .wouldBlock: return EAGAIN
        case .io: return EIO
        case .noSpace: return ENOSPC
        case .notPermitted: return EPERM
        case .interrupted: return EINTR
        case .readOnly: return EROFS
        case .accessDenied: return EACCES
        case .noAttribute: return ENODATA
        case .tooBig: return E2BIG
        case .fileTooBig: return EFBIG
        // ENOTSUP and EOPNOTSUPP are one value on Linux.
        case .unsupported: return EOPNOTSUPP
        // A rename that would make content not downloaded local-only: mv then copies (downloading it).
        case .crossDevice: return EXDEV
        // The key-value store's key count or total size.
        case .quotaExceeded: return EDQUOT
        // The store's database and the remote are the file system's own business, not the caller's: whatever
        // failed there (busy past the timeout, damaged, a row that does not decode, the network) is EIO; the
        // log and the status attributes keep the cause. A full disk is `noSpace` before it gets here.
        case .store, .remote: return EIO
        // An errno with no case of its own stays EIO, as the store's files are not the caller's files.
        case .system: return EIO
        }
    }
}

/// Refusals that belong to the FUSE adapter, not to the core; and the core's, for an operation that has both.
enum AdapterError: FileSystemError, Equatable {
    case core(CoreError)
    /// A file handle that is not open, or not open for writing.
    case badHandle
    /// An extended attribute value or list larger than the caller's buffer.
    case bufferTooSmall
    /// A `user.ubiquity.` name that is neither a status nor an action.
    case unknownAttribute
    /// A system call on a descriptor the adapter holds failed: its errno is passed on as it is.
    case system(Errno)
    /// A request the adapter let go without an answer (a programming error): EIO, so its caller does not hang.
    case unanswered

    var errno: Int32 {
        switch self {
        case .core(let e): return e.errno
        case .badHandle: return EBADF
        case .bufferTooSmall: return ERANGE
        case .unknownAttribute: return ENOTSUP
        case .system(let e): return e.rawValue
        case .unanswered: return EIO
        }
    }
}

/// Runs core calls inside an operation that also makes refusals of its own.
func adapting<T>(_ body: () throws(CoreError) -> T) throws(AdapterError) -> T {
    do { return try body() } catch { throw .core(error) }
}
