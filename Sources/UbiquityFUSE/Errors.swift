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
        }
    }
}
