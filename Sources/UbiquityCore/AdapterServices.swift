// What the file system adapter asks of the core instead of reaching into the store: statistics of the store's
// file system, a descriptor on a conflict version's local copy, and a private scratch file.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

extension Container {
    /// statvfs(3) of the file system that holds the local store.
    public func storeFileSystemStats() throws(CoreError) -> statvfs {
        var vfs = statvfs()
        if statvfs(paths.directory, &vfs) != 0 { throw CoreError.from(Errno(errno)) }
        return vfs
    }

    /// A read-only descriptor on the local copy of a conflict version (fetch it first).
    public func openConflictVersion(_ id: String, _ conflict: String) throws(CoreError) -> FileDescriptor {
        do { return try FileDescriptor.open(paths.conflict(id, conflict), O_RDONLY) } catch { throw CoreError.from(error) }
    }

    /// A new empty file of the store's own, already unlinked: it lives as long as its descriptor.
    public func scratchFile() throws(CoreError) -> FileDescriptor {
        let path = paths.staging + "/scratch-" + config.environment.randomHex(8)
        do {
            let fd = try FileDescriptor.open(path, O_RDWR | O_CREAT | O_EXCL, mode: 0o600)
            try? removeFile(path)
            return fd
        } catch { throw CoreError.from(error) }
    }
}
