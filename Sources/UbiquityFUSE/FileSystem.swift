// The FUSE adapter: each low-level request is decoded, mapped onto one core call, and answered exactly once.
// Requests that must wait for content (open, truncate of a file that is not local) are answered later from
// the transfer's completion, so no loop thread ever waits on the network; a FUSE interrupt answers EINTR at
// once and leaves the transfer running.
import CFuse
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

public final class FileSystem: @unchecked Sendable {
    let core: Container
    let inodes: InodeTable
    /// Which processes may not download (indexers).
    let downloadPolicy: DownloadPolicy
    let log = Logger("fuse")
    var session: OpaquePointer?
    /// How long the kernel may cache attributes and names; remote changes invalidate them explicitly.
    let cacheTimeout: Double = 10
    let uid = getuid(), gid = getgid()
    /// The container's key-value store, shown as `.kvstore`; nil: none.
    public var kv: KeyValueStore?

    private let handleLock = NSLock()
    private var files: [UInt64: OpenFile] = [:]
    private var dirs: [UInt64: [DirEntry]] = [:]
    private var nextHandle: UInt64 = 1
    private var waiting: [ObjectIdentifier: Waiter] = [:]
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
        init(id: String, fd: FileDescriptor, writable: Bool) { self.id = id; self.fd = fd; self.writable = writable }
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
        st.st_uid = uid
        st.st_gid = gid
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

    func replyEntry(_ req: fuse_req_t, _ id: String, _ node: Node) {
        var e = entry(id, node)
        if fuse_reply_entry(req, &e) != 0 { inodes.forget(e.ino, 1) }
    }

    func replyEntry(_ req: fuse_req_t, _ item: Item) { replyEntry(req, item.id, .real(item)) }

    /// True for ids of the versions directory's virtual nodes.
    func isVirtual(_ id: String) -> Bool { id.contains(":") }

    /// True for the names `.versions` and `.kvstore` in the mount root, which no item may take.
    func isVersionsName(_ parent: String, _ name: String) -> Bool {
        parent == core.rootID && (sameName(name, FileSystem.versionsName) || sameName(name, FileSystem.kvName))
    }

    func replyErrno(_ req: fuse_req_t, _ errno: Int32) {
        fuse_reply_err(req, errno)
    }

    func replyError(_ req: fuse_req_t, _ error: CoreError) {
        fuse_reply_err(req, error.errno)
    }

    func replyError(_ req: fuse_req_t, _ error: Error) {
        if error is UnknownAttribute { fuse_reply_err(req, ENOTSUP); return }
        fuse_reply_err(req, CoreError.from(error).errno)
    }

    // MARK: names

    func lookup(_ req: fuse_req_t, _ parent: UInt64, _ name: String) {
        guard let dirID = inodes.id(parent) else { return replyError(req, .notFound) }
        if name.utf8.count > WireRules.maxNameBytes { return replyError(req, .nameTooLong) }
        do {
            guard let (id, node) = try child(dirID, name) else {
                // A negative entry, cached like positive ones; remote creations invalidate it.
                var e = fuse_entry_param()
                e.entry_timeout = isVirtual(dirID) ? 0 : cacheTimeout
                fuse_reply_entry(req, &e)
                return
            }
            replyEntry(req, id, node)
        } catch { replyError(req, error) }
    }

    func forget(_ ino: UInt64, _ count: UInt64) { inodes.forget(ino, count) }

    func getattr(_ req: fuse_req_t, _ ino: UInt64) {
        guard let id = inodes.id(ino), let node = node(id) else { return replyError(req, .notFound) }
        var st = attributes(node, ino: ino)
        fuse_reply_attr(req, &st, node.isVirtual ? 0 : cacheTimeout)
    }

    func setattr(_ req: fuse_req_t, _ ino: UInt64, _ attr: stat, _ toSet: Int32, _ fh: UInt64?) {
        guard let id = inodes.id(ino) else { return replyError(req, .notFound) }
        if isKVID(id) { return kvSetattr(req, ino, id, attr, toSet, fh) }
        if isVirtual(id) { return replyError(req, .readOnly) }
        do {
            if toSet & FUSE_SET_ATTR_SIZE != 0 {
                // Truncating to a non-zero size needs the old content: fetched first when it is not local.
                return withContent(req, id, attempt: 1) { [self] () throws(CoreError) in
                    _ = try core.truncate(id, to: Int64(attr.st_size))
                    try finishSetattr(req, ino, id, attr, toSet & ~FUSE_SET_ATTR_SIZE)
                }
            }
            try finishSetattr(req, ino, id, attr, toSet)
        } catch {
            replyError(req, error)
        }
    }

    /// Runs `body`, which needs the item's content local; when it says `.wouldBlock`, fetches the content and
    /// runs it again (an eviction or a newer version may come between the fetch and the next try, a few times).
    private func withContent(_ req: fuse_req_t, _ id: String, attempt: Int, _ body: @escaping () throws(CoreError) -> Void) {
        do {
            try body()
        } catch .wouldBlock {
            if attempt >= FileSystem.fetchAttempts { return replyError(req, .io("the content kept changing while fetched")) }
            whenLocal(req, id) { [self] in withContent(req, id, attempt: attempt + 1, body) }
        } catch {
            replyError(req, error)
        }
    }

    /// How often an open or a truncation fetches content that something else (an eviction, a newer version)
    /// took away again before it could be used.
    static let fetchAttempts = 5

    private func finishSetattr(_ req: fuse_req_t, _ ino: UInt64, _ id: String, _ attr: stat, _ toSet: Int32) throws(CoreError) {
        var mode: UInt32?
        if toSet & FUSE_SET_ATTR_MODE != 0 { mode = UInt32(attr.st_mode & 0o7777) }
        let mtime = time(toSet, FUSE_SET_ATTR_MTIME, FUSE_SET_ATTR_MTIME_NOW, attr.st_mtim)
        let atime = time(toSet, FUSE_SET_ATTR_ATIME, FUSE_SET_ATTR_ATIME_NOW, attr.st_atim)
        // Ownership is the mounting user's; chown is accepted and changes nothing, as on other cloud mounts.
        var item: Item
        if mode != nil || mtime != nil || atime != nil {
            item = try core.setAttributes(id, mode: mode, mtime: mtime, atime: atime)
        } else {
            guard case .real(let cur)? = node(id) else { throw .notFound }
            item = cur
        }
        var st = attributes(item, ino: ino)
        fuse_reply_attr(req, &st, cacheTimeout)
    }

    /// A time that setattr sets (`now` flag: the current time), or nil.
    private func time(_ toSet: Int32, _ flag: Int32, _ now: Int32, _ value: timespec) -> Int64? {
        if toSet & now != 0 { return nowNanoseconds() }
        if toSet & flag != 0 { return Int64(value.tv_sec) * 1_000_000_000 + Int64(value.tv_nsec) }
        return nil
    }

    func mkdir(_ req: fuse_req_t, _ parent: UInt64, _ name: String, _ mode: mode_t) {
        guard let dirID = inodes.id(parent) else { return replyError(req, .notFound) }
        if isVirtual(dirID) { return replyError(req, .readOnly) }
        if isVersionsName(dirID, name) { return replyError(req, .exists) }
        do {
            replyEntry(req, try core.makeDirectory(parent: dirID, name: name, mode: UInt32(mode)))
        } catch { replyError(req, error) }
    }

    /// symlink(2): the target is kept exactly as given; it must be valid UTF-8 (EILSEQ otherwise).
    func symlink(_ req: fuse_req_t, _ parent: UInt64, _ name: String, _ target: UnsafePointer<CChar>) {
        guard let dirID = inodes.id(parent) else { return replyError(req, .notFound) }
        if isVirtual(dirID) { return replyError(req, .readOnly) }
        if isVersionsName(dirID, name) { return replyError(req, .exists) }
        if strlen(target) > WireRules.maxTargetBytes { return replyError(req, .nameTooLong) }
        guard let text = String(validatingCString: target) else { return replyError(req, .illegalByteSequence) }
        do {
            replyEntry(req, try core.createSymlink(parent: dirID, name: name, target: text))
        } catch { replyError(req, error) }
    }

    func readlink(_ req: fuse_req_t, _ ino: UInt64) {
        guard let id = inodes.id(ino), let item = core.item(id) else { return replyError(req, .notFound) }
        guard let target = item.target else { return replyError(req, .invalidArgument("not a symbolic link")) }
        fuse_reply_readlink(req, target)
    }

    /// mknod(2): fifos and sockets are local-only nodes (the kernel carries their data); a regular file is
    /// created as by creat(2); device nodes are refused with EPERM.
    func mknod(_ req: fuse_req_t, _ parent: UInt64, _ name: String, _ mode: mode_t) {
        guard let dirID = inodes.id(parent) else { return replyError(req, .notFound) }
        if isVirtual(dirID) { return replyError(req, .readOnly) }
        if isVersionsName(dirID, name) { return replyError(req, .exists) }
        do {
            let perms = UInt32(mode & 0o7777)
            switch mode & S_IFMT {
            case S_IFIFO: replyEntry(req, try core.createLocalNode(parent: dirID, name: name, kind: .fifo, mode: perms))
            case S_IFSOCK: replyEntry(req, try core.createLocalNode(parent: dirID, name: name, kind: .socket, mode: perms))
            case S_IFREG, 0: replyEntry(req, try core.createFile(parent: dirID, name: name, mode: perms))
            default: replyError(req, .notPermitted("device nodes are not supported"))
            }
        } catch { replyError(req, error) }
    }

    func remove(_ req: fuse_req_t, _ parent: UInt64, _ name: String, directory: Bool) {
        guard let dirID = inodes.id(parent) else { return replyError(req, .notFound) }
        if isKVID(dirID) && !directory { return kvRemove(req, dirID, name) }
        if isVirtual(dirID) && !directory { return unlinkVersion(req, dirID, name) }
        if isVirtual(dirID) || isVersionsName(dirID, name) { return replyError(req, .readOnly) }
        do {
            try core.remove(parent: dirID, name: name, directory: directory)
            fuse_reply_err(req, 0)
        } catch { replyError(req, error) }
    }

    func rename(_ req: fuse_req_t, _ parent: UInt64, _ name: String, _ newParent: UInt64, _ newName: String,
                _ flags: UInt32) {
        guard let from = inodes.id(parent), let to = inodes.id(newParent) else { return replyError(req, .notFound) }
        if isVirtual(to) || isVersionsName(from, name) || isVersionsName(to, newName) {
            return replyError(req, .readOnly)
        }
        if isVirtual(from) && flags & renameExchange != 0 { return replyError(req, .readOnly) }
        if isVirtual(from) { return renameVersion(req, from, name, to, newName) }
        if flags & ~(renameNoReplace | renameExchange) != 0 || flags == renameNoReplace | renameExchange {
            return replyError(req, .invalidArgument("unsupported rename flags"))
        }
        do {
            if flags & renameExchange != 0 {
                try core.exchange(parent: from, name: name, newParent: to, newName: newName)
            } else {
                try core.rename(parent: from, name: name, newParent: to, newName: newName,
                                noReplace: flags & renameNoReplace != 0)
            }
            fuse_reply_err(req, 0)
        } catch { replyError(req, error) }
    }

    /// renameat2's RENAME_NOREPLACE and RENAME_EXCHANGE, which glibc's headers hide from Swift.
    private var renameNoReplace: UInt32 { 1 }
    private var renameExchange: UInt32 { 2 }

    // MARK: files

    func create(_ req: fuse_req_t, _ parent: UInt64, _ name: String, _ mode: mode_t, _ fi: UnsafeMutablePointer<fuse_file_info>) {
        guard let dirID = inodes.id(parent) else { return replyError(req, .notFound) }
        if isKVID(dirID) { return kvCreate(req, dirID, name, fi) }
        if isVirtual(dirID) { return replyError(req, .readOnly) }
        if isVersionsName(dirID, name) { return replyError(req, .exists) }
        do {
            let item = try core.createFile(parent: dirID, name: name, mode: UInt32(mode))
            guard case .opened(let fd) = try core.open(item.id, writable: true, truncate: false) else {
                throw CoreError.io("a new file has no local content")
            }
            fi.pointee.fh = addHandle(OpenFile(id: item.id, fd: fd, writable: true))
            var e = entry(item.id, .real(item))
            if fuse_reply_create(req, &e, fi) != 0 {
                inodes.forget(e.ino, 1)
                release(fi.pointee.fh)
            }
        } catch { replyError(req, error) }
    }

    func open(_ req: fuse_req_t, _ ino: UInt64, _ fi: UnsafeMutablePointer<fuse_file_info>) {
        guard let id = inodes.id(ino) else { return replyError(req, .notFound) }
        if isVirtual(id) {
            switch node(id) {
            case .version(let item, let c): return openVersion(req, item, c, fi)
            case .versionsDir, .kvDir: return replyError(req, .isDirectory)
            case .kvKey, .kvChanges: return kvOpen(req, id, fi)
            default: return replyError(req, .notFound)
            }
        }
        openFile(req, id, fi.pointee, attempt: 1)
    }

    /// Opens a file's content, fetching it first when it is not local. After a fetch an older local copy will
    /// do (the newest could not be had, or a newer one arrived meanwhile); one taken away again is fetched again.
    private func openFile(_ req: fuse_req_t, _ id: String, _ info: fuse_file_info, attempt: Int) {
        let writable = info.flags & O_ACCMODE != O_RDONLY
        do {
            // O_NONBLOCK changes nothing for a regular file. Only an open that would download asks who calls.
            let truncate = info.flags & O_TRUNC != 0
            var opening = try core.open(id, writable: writable, truncate: truncate, staleOK: attempt > 1)
            if case .fetch = opening, !downloadPolicy.mayDownload(req) {
                opening = try core.open(id, writable: writable, truncate: truncate, noDownload: true)
            }
            switch opening {
            case .opened(let fd):
                var fi = info
                fi.fh = addHandle(OpenFile(id: id, fd: fd, writable: writable))
                // Content only changes under the kernel through this mount, or with an explicit invalidation.
                ubq_fi_set_keep_cache(&fi, 1)
                if fuse_reply_open(req, &fi) != 0 { release(fi.fh) }
            case .fetch:
                if attempt >= FileSystem.fetchAttempts { return replyError(req, .io("the content kept changing while fetched")) }
                whenLocal(req, id, staleOK: true) { [self] in openFile(req, id, info, attempt: attempt + 1) }
            }
        } catch { replyError(req, error) }
    }

    func addHandle(_ file: OpenFile) -> UInt64 {
        handleLock.lock(); defer { handleLock.unlock() }
        let fh = nextHandle
        nextHandle += 1
        files[fh] = file
        return fh
    }

    func openFiles() -> [OpenFile] {
        handleLock.lock(); defer { handleLock.unlock() }
        return Array(files.values)
    }

    func file(_ fh: UInt64) -> OpenFile? {
        handleLock.lock(); defer { handleLock.unlock() }
        return files[fh]
    }

    func read(_ req: fuse_req_t, _ size: Int, _ offset: off_t, _ fh: UInt64) {
        guard let file = file(fh) else { return replyError(req, .notFound) }
        ubq_reply_fd_read(req, file.fd.raw, size, offset)
    }

    func write(_ req: fuse_req_t, _ bufv: UnsafeMutablePointer<fuse_bufvec>, _ offset: off_t, _ fh: UInt64) {
        guard let file = file(fh), file.writable else { return replyErrno(req, EBADF) }
        if isKVID(file.id) { return kvWrite(req, bufv, offset, file) }
        let n: Int
        do {
            n = try core.write(file.id) { ubq_write_buf_to_fd(bufv, file.fd.raw, offset) }
        } catch {
            return replyError(req, error)
        }
        file.wrote = true
        if n < 0 { return replyErrno(req, Int32(-n)) }
        fuse_reply_write(req, n)
    }

    /// fallocate(2) on the content file: allocating, punching or zeroing changes the content like a write.
    func fallocate(_ req: fuse_req_t, _ mode: Int32, _ offset: off_t, _ length: off_t, _ fh: UInt64) {
        guard let file = file(fh), file.writable else { return replyErrno(req, EBADF) }
        do {
            // Like a write: the item turns dirty first, and no snapshot sees the change half done.
            try core.write(file.id) {
                Result { try file.fd.allocate(mode: mode, offset: Int64(offset), length: Int64(length)) }
            }.get()
            file.wrote = true
            fuse_reply_err(req, 0)
        } catch { replyError(req, error) }
    }

    func flush(_ req: fuse_req_t, _ fh: UInt64) {
        guard let file = file(fh) else { return replyErrno(req, 0) }
        do {
            if isKVID(file.id) { try kvCommit(file); return replyErrno(req, 0) }
            if file.wrote { try core.flushed(file.id) }
            fuse_reply_err(req, 0)
        } catch { replyError(req, error) }
    }

    func fsync(_ req: fuse_req_t, _ fh: UInt64) {
        guard let file = file(fh) else { return replyErrno(req, 0) }
        if isKVID(file.id) { return replyErrno(req, 0) } // a key's value is durable once committed at close
        do {
            try file.fd.dataSync()
            if file.wrote { try core.synced(file.id) }
            fuse_reply_err(req, 0)
        } catch {
            replyError(req, error)
        }
    }

    /// Drops a handle: records the last flush and tells the core.
    func release(_ fh: UInt64) {
        handleLock.lock()
        let file = files.removeValue(forKey: fh)
        handleLock.unlock()
        guard let file else { return }
        if isKVID(file.id) {
            do { try kvCommit(file, releasing: true) } catch { log.error("release of \(file.id): the value is not stored: \(error)") }
        }
        file.fd.close()
        if isVirtual(file.id) { return }
        // A release has no reply to carry an error (the flush before it had): the log keeps it.
        if file.wrote {
            do { try core.flushed(file.id) } catch { log.error("release of \(file.id): \(error)") }
        }
        core.closed(file.id, writable: file.writable)
    }

    // MARK: waiting for content

    /// A request that waits for content; answered exactly once, by the transfer or by an interrupt.
    final class Waiter: @unchecked Sendable {
        let req: fuse_req_t
        let lock = NSLock()
        var answered = false
        /// Called a few seconds after the answer, to let go of the waiter.
        var release: (@Sendable () -> Void)?
        init(req: fuse_req_t) { self.req = req }
        /// True for the one caller that may answer.
        func claim() -> Bool {
            lock.lock()
            if answered { lock.unlock(); return false }
            answered = true
            lock.unlock()
            if let release { DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(5), execute: release) }
            return true
        }
    }

    /// Runs `then` once the item's content is local (or, with `staleOK`, an older local copy is all there is),
    /// answering EIO or EINTR itself otherwise.
    func whenLocal(_ req: fuse_req_t, _ id: String, staleOK: Bool = false, then: @escaping () -> Void) {
        waitFor(req, start: { done in _ = core.fetch(id, done: done) }, fallback: { [self] error in
            guard staleOK, core.item(id)?.hasLocal == true else { return false }
            log.warning("serving the older local copy of \(core.path(of: id)): \(error)")
            return true
        }, then: then)
    }

    /// Starts a transfer with `start` and runs `then` when it succeeds (or when `fallback` accepts its failure);
    /// answers EIO on failure and EINTR on a FUSE interrupt, which leaves the transfer running.
    ///
    /// The waiter stays referenced a while after its answer: libfuse may call the interrupt callback with it
    /// just after a reply on another thread, and the callback must then find it alive and already answered.
    func waitFor(_ req: fuse_req_t, start: (@escaping @Sendable (Result<Void, CoreError>) -> Void) -> Void,
                 fallback: @escaping (CoreError) -> Bool = { _ in false }, then: @escaping () -> Void) {
        let waiter = Waiter(req: req)
        keep(waiter)
        fuse_req_interrupt_func(req, { _, data in
            guard let data else { return }
            let waiter = Unmanaged<Waiter>.fromOpaque(data).takeUnretainedValue()
            guard waiter.claim() else { return }
            fuse_reply_err(waiter.req, EINTR)
        }, Unmanaged.passUnretained(waiter).toOpaque())
        if waiter.lock.withLock({ waiter.answered }) { return } // interrupted before we began
        start { [self] result in
            guard waiter.claim() else { return } // interrupted: the transfer went on, nobody waits
            switch result {
            case .success:
                then()
            case .failure(let error):
                if fallback(error) { return then() }
                log.warning("a wait for content failed: \(error)")
                replyError(req, .io("\(error)"))
            }
        }
    }

    private func keep(_ waiter: Waiter) {
        let key = ObjectIdentifier(waiter)
        handleLock.lock(); waiting[key] = waiter; handleLock.unlock()
        waiter.release = { [weak self] in
            guard let self else { return }
            handleLock.lock(); waiting[key] = nil; handleLock.unlock()
        }
    }

    // MARK: directories

    func opendir(_ req: fuse_req_t, _ ino: UInt64, _ fi: UnsafeMutablePointer<fuse_file_info>) {
        guard let id = inodes.id(ino) else { return replyError(req, .notFound) }
        do {
            var list = [DirEntry(name: ".", id: nil, type: S_IFDIR), DirEntry(name: "..", id: nil, type: S_IFDIR)]
            for child in try children(id) {
                list.append(DirEntry(name: child.name, id: child.id, type: node(child.id)?.fileType ?? S_IFREG))
            }
            handleLock.lock()
            let fh = nextHandle
            nextHandle += 1
            dirs[fh] = list
            handleLock.unlock()
            fi.pointee.fh = fh
            fuse_reply_open(req, fi)
        } catch { replyError(req, error) }
    }

    func releasedir(_ fh: UInt64) {
        handleLock.lock(); dirs[fh] = nil; handleLock.unlock()
    }

    func readdir(_ req: fuse_req_t, _ ino: UInt64, _ size: Int, _ offset: off_t, _ fh: UInt64, plus: Bool) {
        handleLock.lock()
        let list = dirs[fh] ?? []
        handleLock.unlock()
        var buf = [CChar](repeating: 0, count: size)
        var used = 0
        var index = Int(offset)
        while index < list.count {
            let e = list[index]
            let next = off_t(index + 1)
            var n = 0
            if plus {
                var param = fuse_entry_param()
                var remembered: UInt64 = 0
                if let cid = e.id, let node = node(cid) {
                    param = entry(cid, node)
                    remembered = param.ino
                } else {
                    param.attr.st_mode = S_IFDIR
                    param.attr.st_ino = e.name == "." ? UInt(ino) : 1
                }
                n = buf.withUnsafeMutableBufferPointer {
                    fuse_add_direntry_plus(req, $0.baseAddress! + used, size - used, e.name, &param, next)
                }
                if n > size - used, remembered != 0 { inodes.forget(remembered, 1) }
            } else {
                var st = stat()
                st.st_mode = e.type
                st.st_ino = UInt(e.id.flatMap { inodes.known($0) } ?? 1)
                n = buf.withUnsafeMutableBufferPointer {
                    fuse_add_direntry(req, $0.baseAddress! + used, size - used, e.name, &st, next)
                }
            }
            if n > size - used { break }
            used += n
            index += 1
        }
        buf.withUnsafeBufferPointer { _ = fuse_reply_buf(req, $0.baseAddress, used) }
    }

    func statfs(_ req: fuse_req_t) {
        var vfs: statvfs
        do { vfs = try core.storeFileSystemStats() } catch { return replyError(req, error) }
        vfs.f_namemax = UInt(WireRules.maxNameBytes)
        fuse_reply_statfs(req, &vfs)
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
