// The one map from the core's errors to errno.
import Glibc
import UbiquityCore

extension CoreError {
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
        case .noAttribute: return ENODATA
        case .tooBig: return E2BIG
        case .fileTooBig: return EFBIG
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
