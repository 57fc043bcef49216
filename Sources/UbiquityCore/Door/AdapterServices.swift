// What the FUSE adapter needs of the store, asked of the core rather than built from store paths: the adapter
// never sees `store`, a path in it, or its layout. What must hold here: each service hands out an open
// descriptor or plain figures, never a path, and maps every system error through CoreError.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

extension Container {
    /// The statvfs(2) figures of the file system that holds the store (what `df` of the mount shows).
    public func storeFileSystemStats() throws(CoreError) -> statvfs {
        var vfs = statvfs()
        if statvfs(paths.directory, &vfs) != 0 { throw CoreError(Errno.current) }
        return vfs
    }

    /// The device and inode of the item's current content file, or nil when it has none: an open held on
    /// another file holds older content (evicted, or replaced by a newer version).
    public func contentFileIdentity(_ id: String) -> (device: UInt64, inode: UInt64)? {
        var st = stat()
        guard stat(paths.content(id), &st) == 0 else { return nil }
        return (UInt64(st.st_dev), UInt64(st.st_ino))
    }

    /// Opens the local copy of a conflict version read-only.
    public func openConflictVersion(item id: String, conflict: String) throws(CoreError) -> FileDescriptor {
        do { return try FileDescriptor.open(paths.conflict(id, conflict), O_RDONLY) } catch {
            throw CoreError(error)
        }
    }

    /// A new private file in the store's staging area, already unlinked: it lives as long as its descriptor,
    /// and nothing else can open it. `prefix` names what it is for while it has a name.
    public func makeStagingFile(prefix: String) throws(CoreError) -> FileDescriptor {
        let path = paths.staging + "/" + prefix + "-" + randomHex(bytes: 8)
        do {
            let fd = try FileDescriptor.open(path, O_RDWR | O_CREAT | O_EXCL, mode: 0o600)
            removeLeftover(path)
            return fd
        } catch { throw CoreError(error) }
    }
}
