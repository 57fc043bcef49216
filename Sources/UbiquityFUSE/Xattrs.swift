// Extended attributes: the status names under `user.ubiquity.`, and the user's own `user.*` attributes.
import CFuse
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

extension FileSystem {
    func getxattr(_ req: fuse_req_t, _ ino: UInt64, _ name: String, _ size: Int) {
        fuse_reply_err(req, ENODATA)
    }

    func listxattr(_ req: fuse_req_t, _ ino: UInt64, _ size: Int) {
        if size == 0 { fuse_reply_xattr(req, 0) } else { fuse_reply_buf(req, nil, 0) }
    }

    func setxattr(_ req: fuse_req_t, _ ino: UInt64, _ name: String, _ value: UnsafeRawBufferPointer, _ flags: Int32) {
        fuse_reply_err(req, ENOTSUP)
    }

    func removexattr(_ req: fuse_req_t, _ ino: UInt64, _ name: String) {
        fuse_reply_err(req, ENODATA)
    }
}
