// The FUSE adapter: each low-level request is decoded, mapped onto one core call, and answered exactly once.
// Requests that must wait for content (open, truncate of a file that is not local) are answered later from
// the transfer's completion, so no loop thread ever waits on the network; a FUSE interrupt answers EINTR at
// once and leaves the transfer running.
//
// What must hold: the adapter reaches the core only through its public calls (descriptors and facts through
// AdapterServices.swift), never the store, and every failure is answered through `Reply.fail` (Errors.swift).
// An entry reply counts one lookup, given back when the reply does not reach the kernel (`replyEntry`, `create`,
// readdirplus's unused entries); a handle whose open reply fails is released. `handleLock` and `sessionLock`
// are leaves, never held over a core call. Kernel cache notices go through the `notifier` queue, never on a
// request's own thread (libfuse: a notice there can deadlock with the request). `.versions` and `.kvstore` in
// the root are never an item's name (`isVersionsName`).
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the handles' and the session's are leaves,
// never held over a core call.
import CFuse
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

/// @unchecked Sendable: libfuse calls it from its loop threads, the core and the notifier queue from theirs;
/// its mutable state is behind locks (`handleLock`: handles and listings; `sessionLock`: the session), and `kv`
/// is set once before `mount`, so before any loop thread starts.
public final class FileSystem: @unchecked Sendable {
    let core: Container
    let inodes: InodeTable
    /// Which processes may not download (indexers).
    let downloadPolicy: DownloadPolicy
    let log = Logger("fuse")
    private let mountedSession = Locked<OpaquePointer?>(nil)
    /// How long the kernel may cache attributes and names; remote changes invalidate them explicitly.
    let cacheTimeout: Double = 10
    /// The container's key-value store, shown as `.kvstore`; nil: none. Set before `mount`, never after.
    public var kv: KeyValueStore?
    /// Ask the kernel for FUSE passthrough of local content (Passthrough.swift). Set before `mount`, never after.
    public var passthrough = true
    /// Why passthrough, asked for, cannot be had (set by `mount`); nil: it can, if the kernel offers it.
    var passthroughRefusal: String?
    let backings = Backings()

    /// The FUSE session while mounted: set by `mount`, cleared by `run` after the loop, read by the notifier queue
    /// (`run` drains that queue before it destroys the session).
    var session: OpaquePointer? {
        get { mountedSession.withLock { $0 } }
        set { mountedSession.withLock { $0 = newValue } }
    }

    /// The open file and directory handles, by number.
    private struct Handles {
        var files: [UInt64: OpenFile] = [:]
        var dirs: [UInt64: [DirEntry]] = [:]
        var next: UInt64 = 1

        mutating func take() -> UInt64 {
            defer { next += 1 }
            return next
        }
    }
    private let handles = Locked(Handles())
    let notifier = DispatchQueue(label: "ubiquityfs.notify")

    /// One open file: the content file's descriptor and what was done through it.
    final class OpenFile {
        let id: String
        let fd: FileDescriptor
        let writable: Bool
        var wrote = false
        /// A key-value handle refused at a write: its close fails the same way and stores nothing.
        var refused: CoreError?
        /// A key-value handle written (or truncated explicitly) since its last commit, not just opened with
        /// O_TRUNC: only such a handle commits at flush (a shell's `>` flushes once before the first write).
        var wroteData = false
        /// Whether the kernel serves this handle itself (Passthrough.swift).
        var mode = OpenMode.uncounted
        /// The kernel inode it was opened on (0: not a file of the tree).
        var ino: UInt64 = 0
        init(id: String, fd: FileDescriptor, writable: Bool, ino: UInt64 = 0) {
            self.id = id; self.fd = fd; self.writable = writable; self.ino = ino
        }
    }

    struct DirEntry {
        let name: String
        let id: String?
        /// The type bits of the entry's mode.
        let type: mode_t
    }

    public init(core: Container, downloadPolicy: DownloadPolicy = DownloadPolicy(noDownloadFor: [])) {
        self.core = core
        self.downloadPolicy = downloadPolicy
        inodes = InodeTable(rootID: core.rootID)
        core.observer = self
    }

    // MARK: attributes

    func attributes(_ item: Item, ino: UInt64) -> stat {
        var st = stat()
        st.st_ino = UInt(ino)
        let owner = core.config.owner(of: item)
        st.st_uid = owner.uid
        st.st_gid = owner.gid
        st.st_blksize = 4096
        st.st_mode = FileSystem.fileType(item.kind) | mode_t(item.mode)
        st.st_nlink = 1
        switch item.kind {
        case .dir:
            // `.` and the entry in its parent, and each subdirectory's `..` (the root's `.versions` and
            // `.kvstore` too).
            let virtualDirs = item.id == core.rootID ? (kv == nil ? 1 : 2) : 0
            st.st_nlink = UInt(2 + core.subdirectoryCount(item.id) + virtualDirs)
            st.st_size = 4096
        case .file:
            st.st_nlink = item.deleted ? 0 : 1 // deleted: unlinked, still open
            st.st_size = off_t(item.size)
            if let local = core.localStat(item) {
                st.st_blocks = local.st_blocks
                if item.dirty { st.st_size = local.st_size }
            }
        case .symlink:
            // lrwxrwxrwx, as every Linux file system shows links; the size is the target's length in bytes.
            st.st_mode = S_IFLNK | 0o777
            st.st_size = off_t(item.target?.utf8.count ?? 0)
        case .fifo, .socket:
            st.st_size = 0
        }
        st.st_mtim = timespec(nanoseconds: item.shownMTime)
        st.st_atim = timespec(nanoseconds: item.shownATime)
        st.st_ctim = timespec(nanoseconds: item.ctime)
        return st
    }

    /// The type bits of an item kind's mode.
    static func fileType(_ kind: ItemKind) -> mode_t {
        switch kind {
        case .file: return S_IFREG
        case .dir: return S_IFDIR
        case .symlink: return S_IFLNK
        case .fifo: return S_IFIFO
        case .socket: return S_IFSOCK
        }
    }

    /// An entry for a reply, counting one lookup. Virtual nodes are not cached by the kernel.
    func entry(_ id: String, _ node: Node) -> fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = inodes.remember(id)
        e.attr = attributes(node, ino: e.ino)
        e.attr_timeout = node.isVirtual ? 0 : cacheTimeout
        e.entry_timeout = node.isVirtual ? 0 : cacheTimeout
        return e
    }

    func replyEntry(_ reply: Reply, _ id: String, _ node: Node) {
        let e = entry(id, node)
        if !reply.entry(e) { inodes.forget(e.ino, 1) }
    }

    func replyEntry(_ reply: Reply, _ item: Item) { replyEntry(reply, item.id, .real(item)) }

    /// True for ids of the versions directory's virtual nodes.
    func isVirtual(_ id: String) -> Bool { NodeID(parsing: id).isVirtual }

    /// True for the names `.versions` and `.kvstore` in the mount root, which no item may take.
    func isVersionsName(_ parent: String, _ name: String) -> Bool {
        parent == core.rootID && (sameName(name, FileSystem.versionsName) || sameName(name, FileSystem.kvName))
    }

    // MARK: names

    func lookup(_ reply: Reply, _ parent: UInt64, _ name: String) {
        guard let dirID = inodes.id(parent) else { return reply.fail(.notFound) }
        if name.utf8.count > WireRules.maxNameBytes { return reply.fail(.nameTooLong) }
        do {
            guard let (id, node) = try child(dirID, name) else {
                // A negative entry, cached like positive ones; remote creations invalidate it.
                var e = fuse_entry_param()
                e.entry_timeout = isVirtual(dirID) ? 0 : cacheTimeout
                reply.entry(e)
                return
            }
            replyEntry(reply, id, node)
        } catch { reply.fail(error) }
    }

    func forget(_ ino: UInt64, _ count: UInt64) { inodes.forget(ino, count) }

    func getattr(_ reply: Reply, _ ino: UInt64) {
        guard let id = inodes.id(ino), let node = node(id) else { return reply.fail(.notFound) }
        reply.attr(attributes(node, ino: ino), timeout: node.isVirtual ? 0 : cacheTimeout)
    }

    func setattr(_ reply: Reply, _ ino: UInt64, _ attr: stat, _ toSet: Int32, _ fh: UInt64?) {
        guard let id = inodes.id(ino) else { return reply.fail(.notFound) }
        if isKVID(id) { return kvSetattr(reply, ino, id, attr, toSet, fh) }
        if isVirtual(id) { return reply.fail(.readOnly) }
        do {
            if toSet & FUSE_SET_ATTR_SIZE != 0 {
                // Truncating to a non-zero size needs the old content: fetched first when it is not local.
                return withContent(reply, id, attempt: 1) { [self] () throws(CoreError) in
                    _ = try core.truncate(id, to: Int64(attr.st_size))
                    try finishSetattr(reply, ino, id, attr, toSet & ~FUSE_SET_ATTR_SIZE)
                }
            }
            try finishSetattr(reply, ino, id, attr, toSet)
        } catch {
            reply.fail(error)
        }
    }

    /// Runs `body`, which needs the item's content local; when it says `.wouldBlock`, fetches the content and
    /// runs it again (an eviction or a newer version may come between the fetch and the next try, a few times).
    private func withContent(_ reply: Reply, _ id: String, attempt: Int, _ body: @escaping @Sendable () throws(CoreError) -> Void) {
        do {
            try body()
        } catch .wouldBlock {
            if attempt >= FileSystem.fetchAttempts { return reply.fail(.io("the content kept changing while fetched")) }
            whenLocal(reply, id) { [self] in withContent(reply, id, attempt: attempt + 1, body) }
        } catch {
            reply.fail(error)
        }
    }

    /// How often an open or a truncation fetches content that something else (an eviction, a newer version)
    /// took away again before it could be used.
    static let fetchAttempts = 5

    private func finishSetattr(_ reply: Reply, _ ino: UInt64, _ id: String, _ attr: stat, _ toSet: Int32) throws(CoreError) {
        var mode: UInt32?
        if toSet & FUSE_SET_ATTR_MODE != 0 { mode = UInt32(attr.st_mode & 0o7777) }
        let mtime = time(toSet, FUSE_SET_ATTR_MTIME, FUSE_SET_ATTR_MTIME_NOW, attr.st_mtim)
        let atime = time(toSet, FUSE_SET_ATTR_ATIME, FUSE_SET_ATTR_ATIME_NOW, attr.st_atim)
        let owner = try newOwner(id, attr, toSet)
        var item: Item
        if mode != nil || mtime != nil || atime != nil || owner != nil {
            item = try core.setAttributes(id, mode: mode, mtime: mtime, atime: atime, owner: owner)
        } else {
            guard case .real(let cur)? = node(id) else { throw .notFound }
            item = cur
        }
        reply.attr(attributes(item, ino: ino), timeout: cacheTimeout)
    }

    /// The owner that setattr sets (chown, chgrp, or both), or nil. The kernel has checked that the caller may
    /// (default_permissions); the setuid and setgid bits a chown clears come as a mode in the same request.
    private func newOwner(_ id: String, _ attr: stat, _ toSet: Int32) throws(CoreError) -> Owner? {
        guard toSet & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID) != 0 else { return nil }
        guard case .real(let item)? = node(id) else { throw .notFound }
        var owner = core.config.owner(of: item)
        if toSet & FUSE_SET_ATTR_UID != 0 { owner.uid = attr.st_uid }
        if toSet & FUSE_SET_ATTR_GID != 0 { owner.gid = attr.st_gid }
        return owner
    }

    /// A time that setattr sets (`now` flag: the current time), or nil.
    private func time(_ toSet: Int32, _ flag: Int32, _ now: Int32, _ value: timespec) -> Int64? {
        if toSet & now != 0 { return nowNanoseconds() }
        if toSet & flag != 0 { return Int64(value.tv_sec) * 1_000_000_000 + Int64(value.tv_nsec) }
        return nil
    }

    func mkdir(_ reply: Reply, _ parent: UInt64, _ name: String, _ mode: mode_t) {
        guard let dirID = inodes.id(parent) else { return reply.fail(.notFound) }
        if isVirtual(dirID) { return reply.fail(.readOnly) }
        if isVersionsName(dirID, name) { return reply.fail(.exists) }
        do {
            let item = try core.makeDirectory(parent: dirID, name: name, mode: UInt32(mode), owner: reply.caller)
            replyEntry(reply, item)
        } catch { reply.fail(error) }
    }

    /// symlink(2): the target is kept exactly as given; it must be valid UTF-8 (EILSEQ otherwise).
    func symlink(_ reply: Reply, _ parent: UInt64, _ name: String, _ target: UnsafePointer<CChar>) {
        guard let dirID = inodes.id(parent) else { return reply.fail(.notFound) }
        if isVirtual(dirID) { return reply.fail(.readOnly) }
        if isVersionsName(dirID, name) { return reply.fail(.exists) }
        if strlen(target) > WireRules.maxTargetBytes { return reply.fail(.nameTooLong) }
        guard let text = String(validatingCString: target) else { return reply.fail(.illegalByteSequence) }
        do {
            replyEntry(reply, try core.createSymlink(parent: dirID, name: name, target: text, owner: reply.caller))
        } catch { reply.fail(error) }
    }

    func readlink(_ reply: Reply, _ ino: UInt64) {
        guard let id = inodes.id(ino), let item = core.item(id) else { return reply.fail(.notFound) }
        guard let target = item.target else { return reply.fail(.invalidArgument("not a symbolic link")) }
        reply.readlink(target)
    }

    /// mknod(2): fifos and sockets are local-only nodes (the kernel carries their data); a regular file is
    /// created as by creat(2); device nodes are refused with EPERM.
    func mknod(_ reply: Reply, _ parent: UInt64, _ name: String, _ mode: mode_t) {
        guard let dirID = inodes.id(parent) else { return reply.fail(.notFound) }
        if isVirtual(dirID) { return reply.fail(.readOnly) }
        if isVersionsName(dirID, name) { return reply.fail(.exists) }
        do {
            let perms = UInt32(mode & 0o7777), owner = reply.caller
            switch mode & S_IFMT {
            case S_IFIFO, S_IFSOCK:
                let kind: ItemKind = mode & S_IFMT == S_IFIFO ? .fifo : .socket
                replyEntry(reply, try core.createLocalNode(parent: dirID, name: name, kind: kind, mode: perms,
                                                           owner: owner))
            case S_IFREG, 0:
                replyEntry(reply, try core.createFile(parent: dirID, name: name, mode: perms, owner: owner))
            default: reply.fail(.notPermitted("device nodes are not supported"))
            }
        } catch { reply.fail(error) }
    }

    func remove(_ reply: Reply, _ parent: UInt64, _ name: String, directory: Bool) {
        guard let dirID = inodes.id(parent) else { return reply.fail(.notFound) }
        if isKVID(dirID) && !directory { return kvRemove(reply, dirID, name) }
        if isVirtual(dirID) && !directory { return unlinkVersion(reply, dirID, name) }
        if isVirtual(dirID) || isVersionsName(dirID, name) { return reply.fail(.readOnly) }
        do {
            try core.remove(parent: dirID, name: name, directory: directory)
            reply.ok()
        } catch { reply.fail(error) }
    }

    func rename(_ reply: Reply, _ parent: UInt64, _ name: String, _ newParent: UInt64, _ newName: String,
                _ flags: UInt32) {
        guard let from = inodes.id(parent), let to = inodes.id(newParent) else { return reply.fail(.notFound) }
        if isVirtual(to) || isVersionsName(from, name) || isVersionsName(to, newName) {
            return reply.fail(.readOnly)
        }
        if isVirtual(from) && flags & renameExchange != 0 { return reply.fail(.readOnly) }
        if isVirtual(from) { return renameVersion(reply, from, name, to, newName) }
        if flags & ~(renameNoReplace | renameExchange) != 0 || flags == renameNoReplace | renameExchange {
            return reply.fail(.invalidArgument("unsupported rename flags"))
        }
        do {
            if flags & renameExchange != 0 {
                try core.exchange(parent: from, name: name, newParent: to, newName: newName)
            } else {
                try core.rename(parent: from, name: name, newParent: to, newName: newName,
                                noReplace: flags & renameNoReplace != 0)
            }
            reply.ok()
        } catch { reply.fail(error) }
    }

    /// renameat2's RENAME_NOREPLACE and RENAME_EXCHANGE, which glibc's headers hide from Swift.
    private var renameNoReplace: UInt32 { 1 }
    private var renameExchange: UInt32 { 2 }

    // MARK: files

    func create(_ reply: Reply, _ parent: UInt64, _ name: String, _ mode: mode_t, _ fi: UnsafeMutablePointer<fuse_file_info>) {
        guard let dirID = inodes.id(parent) else { return reply.fail(.notFound) }
        if isKVID(dirID) { return kvCreate(reply, dirID, name, fi) }
        if isVirtual(dirID) { return reply.fail(.readOnly) }
        if isVersionsName(dirID, name) { return reply.fail(.exists) }
        do {
            let (item, fd) = try core.createAndOpen(parent: dirID, name: name, mode: UInt32(mode), owner: reply.caller)
            let file = OpenFile(id: item.id, fd: fd, writable: true)
            fi.pointee.fh = addHandle(file)
            _ = choosePassthrough(file, fi.pointee.fh)
            let e = entry(item.id, .real(item))
            file.ino = e.ino
            let sent = reply.create(e, fi.pointee)
            sentOpen(file, fi.pointee.fh)
            if !sent {
                inodes.forget(e.ino, 1)
                release(fi.pointee.fh)
            }
        } catch { reply.fail(error) }
    }

    func open(_ reply: Reply, _ ino: UInt64, _ fi: UnsafeMutablePointer<fuse_file_info>) {
        guard let id = inodes.id(ino) else { return reply.fail(.notFound) }
        if isVirtual(id) {
            switch node(id) {
            case .version(let item, let c): return openVersion(reply, item, c, fi)
            case .versionsDir, .kvDir: return reply.fail(.isDirectory)
            case .kvKey, .kvChanges: return kvOpen(reply, id, fi)
            default: return reply.fail(.notFound)
            }
        }
        openFile(reply, id, ino, fi.pointee, attempt: 1)
    }

    /// Whether handles opened on kernel inode `ino` use a content file that is no longer the item's (evicted, or
    /// replaced by a newer version while they held it). A new open must then not share their inode: the kernel
    /// ties an inode to one passthrough backing file (it fails a second one with EIO) and to one page cache
    /// (which their reads of the old bytes fill). So the inode is retired: the holders keep it, with what they
    /// opened, as with a file replaced by rename on ext4, and the next lookup of the item gives a new one.
    private func inodeHoldsAnotherContent(_ ino: UInt64, _ id: String) -> Bool {
        let held = handles.withLock { $0.files.values.filter { $0.ino == ino } }
        guard !held.isEmpty else { return false }
        let current = core.contentFileIdentity(id)
        return held.contains { file in
            var st = stat()
            guard fstat(file.fd.raw, &st) == 0, let current else { return true }
            return UInt64(st.st_dev) != current.device || UInt64(st.st_ino) != current.inode
        }
    }

    /// Opens a file's content, fetching it first when it is not local. After a fetch an older local copy will
    /// do (the newest could not be had, or a newer one arrived meanwhile); one taken away again is fetched again.
    private func openFile(_ reply: Reply, _ id: String, _ ino: UInt64, _ info: fuse_file_info, attempt: Int) {
        let writable = info.flags & O_ACCMODE != O_RDONLY
        if inodeHoldsAnotherContent(ino, id) { // (also after a fetch, which may have installed a newer version)
            // Before anything changes: the kernel walks the path again (LOOKUP_REVAL) and opens the new inode.
            inodes.retire(ino)
            return reply.fail(AdapterError.system(Errno(ESTALE)))
        }
        do {
            // O_NONBLOCK changes nothing for a regular file. Only an open that would download asks who calls.
            let truncate = info.flags & O_TRUNC != 0
            var opening = try core.open(id, writable: writable, truncate: truncate, staleOK: attempt > 1)
            if case .fetch = opening, !downloadPolicy.mayDownload(reply) {
                opening = try core.open(id, writable: writable, truncate: truncate, noDownload: true)
            }
            switch opening {
            case .opened(let fd):
                var fi = info
                let file = OpenFile(id: id, fd: fd, writable: writable, ino: ino)
                fi.fh = addHandle(file)
                // Content only changes under the kernel through this mount, or with an explicit invalidation.
                // (Not with passthrough: the kernel then caches the content file's own pages.)
                if !choosePassthrough(file, fi.fh) { ubq_fi_set_keep_cache(&fi, 1) }
                let sent = reply.open(fi)
                sentOpen(file, fi.fh)
                if !sent { release(fi.fh) }
            case .fetch:
                if attempt >= FileSystem.fetchAttempts { return reply.fail(.io("the content kept changing while fetched")) }
                whenLocal(reply, id, staleOK: true) { [self] in openFile(reply, id, ino, info, attempt: attempt + 1) }
            }
        } catch { reply.fail(error) }
    }

    func addHandle(_ file: OpenFile) -> UInt64 {
        handles.withLock { h in
            let fh = h.take()
            h.files[fh] = file
            return fh
        }
    }

    func openFiles() -> [OpenFile] {
        handles.withLock { Array($0.files.values) }
    }

    func file(_ fh: UInt64) -> OpenFile? {
        handles.withLock { $0.files[fh] }
    }

    func read(_ reply: Reply, _ size: Int, _ offset: off_t, _ fh: UInt64) {
        guard let file = file(fh) else { return reply.fail(.notFound) }
        reply.data(fd: file.fd.raw, size: size, offset: offset)
    }

    func write(_ reply: Reply, _ bufv: UnsafeMutablePointer<fuse_bufvec>, _ offset: off_t, _ fh: UInt64) {
        guard let file = file(fh), file.writable else { return reply.fail(AdapterError.badHandle) }
        if isKVID(file.id) { return kvWrite(reply, bufv, offset, file) }
        let n: Int
        do {
            n = try core.write(file.id, through: file.fd) { ubq_write_buf_to_fd(bufv, file.fd.raw, offset) }
        } catch {
            return reply.fail(error)
        }
        file.wrote = true
        if n < 0 { return reply.fail(AdapterError.system(Errno(Int32(-n)))) }
        reply.written(n)
    }

    /// fallocate(2) on the content file: allocating, punching or zeroing changes the content like a write.
    func fallocate(_ reply: Reply, _ mode: Int32, _ offset: off_t, _ length: off_t, _ fh: UInt64) {
        guard let file = file(fh), file.writable else { return reply.fail(AdapterError.badHandle) }
        do throws(CoreError) {
            // Like a write: the item turns dirty first, and no snapshot sees the change half done.
            let allocated = try core.write(file.id, through: file.fd) {
                Result { () throws(Errno) in
                    try file.fd.allocate(mode: mode, offset: Int64(offset), length: Int64(length))
                }
            }
            if case .failure(let e) = allocated { return reply.fail(AdapterError.system(e)) }
            file.wrote = true
            reply.ok()
        } catch { reply.fail(error) }
    }

    /// SEEK_DATA and SEEK_HOLE (the kernel answers the other whences itself): where the handle's content file
    /// has data and holes, as the store's file system keeps them; ENXIO past the end, as on ext4.
    func seek(_ reply: Reply, _ offset: off_t, _ whence: Int32, _ fh: UInt64) {
        // Linux's values: Glibc's module leaves them out without _GNU_SOURCE.
        let seekData: Int32 = 3, seekHole: Int32 = 4
        guard let file = file(fh) else { return reply.fail(AdapterError.badHandle) }
        guard whence == seekData || whence == seekHole else { return reply.fail(AdapterError.system(.invalid)) }
        let found = Glibc.lseek(file.fd.raw, offset, whence)
        if found < 0 { return reply.fail(AdapterError.system(Errno.current)) }
        reply.offset(found)
    }

    func flush(_ reply: Reply, _ fh: UInt64) {
        guard let file = file(fh) else { return reply.ok() }
        do {
            if isKVID(file.id) { try kvCommit(file); return reply.ok() }
            if file.wrote { try flushed(file) }
            reply.ok()
        } catch { reply.fail(error) }
    }

    func fsync(_ reply: Reply, _ fh: UInt64) {
        guard let file = file(fh) else { return reply.ok() }
        if isKVID(file.id) { return reply.ok() } // a key's value is durable once committed at close
        do { try file.fd.dataSync() } catch { return reply.fail(AdapterError.system(error)) }
        do throws(CoreError) {
            if file.wrote { try synced(file) }
            reply.ok()
        } catch {
            reply.fail(error)
        }
    }

    /// Drops a handle: records the last flush and tells the core.
    func release(_ fh: UInt64) {
        let file = handles.withLock { $0.files.removeValue(forKey: fh) }
        guard let file else { return }
        if isKVID(file.id) {
            do { try kvCommit(file, releasing: true) } catch { log.error("release of \(file.id): the value is not stored: \(error)") }
        }
        // A release has no reply to carry an error (the flush before it had): the log keeps it. (Before the
        // close: a passthrough writer's last writes are found on its descriptor.)
        if !isVirtual(file.id) && file.wrote {
            do { try flushed(file); try releasedUnwritten(file) } catch { log.error("release of \(file.id): \(error)") }
        }
        file.fd.close()
        backings.released(file)
        if isVirtual(file.id) { return }
        core.closed(file.id, writable: file.writable)
    }

    // MARK: waiting for content

    /// Runs `then` once the item's content is local (or, with `staleOK`, an older local copy is all there is),
    /// answering EIO or EINTR itself otherwise.
    func whenLocal(_ reply: Reply, _ id: String, staleOK: Bool = false, then: @escaping @Sendable () -> Void) {
        waitFor(reply, start: { done in _ = core.fetch(id, done: done) }, fallback: { [self] error in
            guard staleOK, core.item(id)?.hasLocal == true else { return false }
            log.warning("serving the older local copy of \(core.path(of: id)): \(error)")
            return true
        }, then: then)
    }

    /// Starts a transfer with `start` and runs `then` when it succeeds (or when `fallback` accepts its failure);
    /// answers EIO on failure and EINTR on a FUSE interrupt, which leaves the transfer running. The transfer's
    /// completion ends the wait (Reply.endWaiting), so nothing of the wait outlives the answer.
    func waitFor(_ reply: Reply, start: (@escaping @Sendable (Result<Void, CoreError>) -> Void) -> Void,
                 fallback: @escaping @Sendable (CoreError) -> Bool = { _ in false },
                 then: @escaping @Sendable () -> Void) {
        guard reply.beginWaiting() else { return } // interrupted before we began: EINTR is answered
        start { [self] result in
            guard reply.endWaiting() else { return } // interrupted: the transfer went on, nobody waits
            switch result {
            case .success:
                then()
            case .failure(let error):
                if fallback(error) { return then() }
                log.warning("a wait for content failed: \(error)")
                reply.fail(.io("\(error)"))
            }
        }
    }

    // MARK: directories

    func opendir(_ reply: Reply, _ ino: UInt64, _ fi: UnsafeMutablePointer<fuse_file_info>) {
        guard let id = inodes.id(ino) else { return reply.fail(.notFound) }
        do {
            var list = [DirEntry(name: ".", id: nil, type: S_IFDIR), DirEntry(name: "..", id: nil, type: S_IFDIR)]
            for child in try children(id) {
                let type = child.kind.map(FileSystem.fileType) ?? node(child.id)?.fileType ?? S_IFREG
                list.append(DirEntry(name: child.name, id: child.id, type: type))
            }
            let fh = handles.withLock { h in
                let fh = h.take()
                h.dirs[fh] = list
                return fh
            }
            fi.pointee.fh = fh
            if !reply.open(fi.pointee) { releasedir(fh) }
        } catch { reply.fail(error) }
    }

    func releasedir(_ fh: UInt64) {
        handles.withLock { $0.dirs[fh] = nil }
    }

    func readdir(_ reply: Reply, _ ino: UInt64, _ size: Int, _ offset: off_t, _ fh: UInt64, plus: Bool) {
        let list = handles.withLock { $0.dirs[fh] ?? [] }
        let page: DirectoryPage
        if plus {
            page = DirectoryPacking.plus(list, from: Int(offset), size: size, param: { [self] e in
                if let cid = e.id, let node = node(cid) { return entry(cid, node) }
                var param = fuse_entry_param()
                param.attr.st_mode = S_IFDIR
                param.attr.st_ino = e.name == "." ? UInt(ino) : 1
                return param
            }, unused: { [self] param in
                if param.ino != 0 { inodes.forget(param.ino, 1) }
            })
        } else {
            page = DirectoryPacking.plain(list, from: Int(offset), size: size) { [self] e in
                e.id.flatMap { inodes.known($0) } ?? 1
            }
        }
        page.bytes.withUnsafeBytes { reply.bytes($0) }
    }

    func statfs(_ reply: Reply) {
        do {
            var vfs = try core.storeFileSystemStats()
            vfs.f_namemax = UInt(WireRules.maxNameBytes)
            reply.statfs(vfs)
        } catch { reply.fail(error) }
    }
}

// MARK: remote changes → kernel caches

extension FileSystem: ContainerObserver {
    public func itemChanged(_ id: String, contentChanged: Bool) {
        guard let ino = inodes.known(id) else { return }
        notifier.async { [self] in
            guard let se = session else { return }
            fuse_lowlevel_notify_inval_inode(se, ino, contentChanged ? 0 : -1, 0)
        }
    }

    public func entryRemoved(parent: String, name: String, id: String) {
        guard let parentIno = inodes.known(parent) else { return }
        let child = inodes.known(id)
        notifier.async { [self] in
            guard let se = session else { return }
            if let child {
                fuse_lowlevel_notify_delete(se, parentIno, child, name, name.utf8.count)
            } else {
                fuse_lowlevel_notify_inval_entry(se, parentIno, name, name.utf8.count)
            }
        }
    }

    public func entryAdded(parent: String, name: String) {
        guard let parentIno = inodes.known(parent) else { return }
        notifier.async { [self] in
            guard let se = session else { return }
            fuse_lowlevel_notify_inval_entry(se, parentIno, name, name.utf8.count)
        }
    }
}

extension timespec {
    /// A time given in nanoseconds since the epoch (tv_nsec stays in 0..<1e9 before the epoch too).
    init(nanoseconds ns: Int64) {
        let (sec, nsec) = ns.quotientAndRemainder(dividingBy: 1_000_000_000)
        self.init(tv_sec: Int(nsec < 0 ? sec - 1 : sec), tv_nsec: Int(nsec < 0 ? nsec + 1_000_000_000 : nsec))
    }
}
