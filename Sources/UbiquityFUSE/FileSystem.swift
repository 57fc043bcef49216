// The FUSE adapter's operations: each request, decoded into values by Session.swift, is mapped onto one core
// call, and its answer is a value (Answers.swift) or a typed error (Errors.swift) that Session.swift hands to
// Reply.swift, the only code besides it that knows libfuse. Operations that must wait for content (open,
// truncate of a file that is not local, a version made current) call a completion once it is there, so no loop
// thread ever waits on the network; a FUSE interrupt answers EINTR at once (`Waiter`) and leaves the transfer
// running.
//
// What must hold: the adapter reaches the core only through its public calls (descriptors and facts through
// AdapterServices.swift), never the store. An `Entry` counts one lookup and an `Opened` holds a handle: whoever
// cannot deliver one gives it back (`forget`, `release`; Session.swift does it when an answer does not reach
// the kernel). Kernel cache notices go through the `notifier` queue, never on a request's own thread (libfuse: a
// notice there can deadlock with the request). A request on a node of the mount's own trees (`.versions`,
// `.kvstore`, `.trash`) goes to its tree (VirtualTrees.swift: `route`), once; their names in the root are never
// an item's (`isMountRootName`).
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the handles' and the session's are leaves,
// never held over a core call.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

/// @unchecked Sendable: libfuse calls it from its loop threads, the core and the notifier queue from theirs;
/// its mutable state is behind locks (`handleLock`: handles and listings; `sessionLock`: the session), and `kv`
/// is set once before `mount`, so before any loop thread starts.
public final class FileSystem: @unchecked Sendable {
    let core: any AdapterCore
    let inodes: InodeTable
    /// Which processes may not download (indexers).
    let downloadPolicy: DownloadPolicy
    let log = Logger("fuse")
    private let mountedSession = Locked<OpaquePointer?>(nil)
    /// How long the kernel may cache attributes and names; remote changes invalidate them explicitly.
    let cacheTimeout: Double = 10
    /// The container's key-value store, shown as `.kvstore`; nil: none. Set before `mount`, never after.
    public var kv: KeyValueStore?
    /// More attributes of the root, by name without the prefix (the account's usage and quota, from the daemon,
    /// which must answer at once from what it knows). Set before `mount`, never after.
    public var accountAttributes: (@Sendable () -> [(name: String, value: String)])?
    /// Ask the kernel for FUSE passthrough of local content (Passthrough.swift). Set before `mount`, never after.
    public var passthrough = true
    /// Why passthrough, asked for, cannot be had (set by `mount`); nil: it can, if the kernel offers it.
    var passthroughRefusal: String?
    let backings = Backings()
    /// The kept versions of files, as last asked for a listing under `.versions` (PastVersions.swift).
    let histories = HistoryCache()
    /// Recently Deleted, as last asked for a listing of `.trash` (TrashTree.swift).
    let trash = TrashCache()
    /// Repeats changes from elsewhere through the mount, for inotify's watchers (Watchers.swift).
    let announcer = Announcer()

    /// The FUSE session while mounted: set by `mount`, cleared by `run` after the loop, read by the notifier queue
    /// (`run` drains that queue before it destroys the session).
    var session: OpaquePointer? {
        get { mountedSession.withLock { $0 } }
        set { mountedSession.withLock { $0 = newValue } }
    }

    /// The open file and directory handles, by number. Numbers are unique in the process (passthrough's marks
    /// are keyed by them, and a daemon of several containers has a FileSystem each): each FileSystem counts from
    /// its own base, 2^40 apart.
    private struct Handles {
        var files: [UInt64: OpenFile] = [:]
        var dirs: [UInt64: OpenDirectory] = [:]
        var next: UInt64 = Handles.bases.withLock { n in
            defer { n += 1 }
            return n << 40 + 1
        }
        private static let bases = Locked<UInt64>(0)

        mutating func take() -> UInt64 {
            defer { next += 1 }
            return next
        }
    }
    private let handles = Locked(Handles())
    let notifier = DispatchQueue(label: "ubiquityfs.notify")

    /// One open file: the content file's descriptor and what was done through it.
    final class OpenFile {
        /// Its file (changed only by a save by rename, which makes the new file's handles the file's: `merge`).
        var id: String
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
        /// The inode number listings show for it (`d_ino`): InodeTable.number of its node.
        var number: UInt64 = 0
    }

    /// One open directory handle: its folder, and the listing its reads go through, taken at each read from
    /// offset 0 (the first one, and each after a rewinddir(3), which must see the folder as it is then:
    /// generic/471), so later offsets name the same entries however the folder changes meanwhile.
    struct OpenDirectory {
        let id: String
        var list: [DirEntry] = []
    }

    public init(core: any AdapterCore, downloadPolicy: DownloadPolicy = DownloadPolicy(noDownloadFor: [])) {
        self.core = core
        self.downloadPolicy = downloadPolicy
        inodes = InodeTable(rootID: core.rootID)
        core.observer = self
    }

    // MARK: attributes

    func attributes(_ item: Item) -> stat {
        var st = stat()
        st.st_ino = UInt(inodes.number(item.id))
        let owner = core.config.owner(of: item)
        st.st_uid = owner.uid
        st.st_gid = owner.gid
        st.st_blksize = 4096
        // A folder shared with this user shows no write bits: the core refuses every change there (read-only, and
        // read-write until writing through a share is built).
        let writeBits: mode_t = core.config.sharedWithMe != nil ? 0o222 : 0
        st.st_mode = FileSystem.fileType(item.kind) | (mode_t(item.mode) & ~writeBits)
        st.st_nlink = 1
        switch item.kind {
        case .dir:
            // `.` and the entry in its parent, and each subdirectory's `..` (the root's trees' folders too).
            let virtualDirs = item.id == core.rootID ? trees.filter(\.isShown).count : 0
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

    /// An entry counting one lookup. Virtual nodes are not cached by the kernel.
    func entry(_ id: String, _ node: Node) -> Entry {
        let ino = inodes.remember(id)
        return Entry(ino: ino, attributes: attributes(node, of: id), timeout: node.isVirtual ? 0 : cacheTimeout)
    }

    func entry(_ item: Item) -> Entry { entry(item.id, .real(item)) }

    /// True for the names of the mount's own folders in its root (`.versions`, `.kvstore`, `.trash`: the one
    /// list the server keeps too, `WireRules.mountRootNames`), which no item may take.
    func isMountRootName(_ parent: String, _ name: String) -> Bool {
        parent == core.rootID && WireRules.mountRootNames.contains { sameName(name, $0) }
    }

    /// The item's directory behind inode `parent` in which something is to be made, not under the names the
    /// root keeps (a tree's folder is read-only but to its own `create`).
    private func makingIn(_ parent: UInt64, _ name: String) throws(CoreError) -> String {
        guard let dirID = inodes.id(parent) else { throw .notFound }
        guard case .item = route(dirID) else { throw .readOnly }
        if isMountRootName(dirID, name) { throw .exists }
        return dirID
    }

    // MARK: names

    /// lookup(2), answered later when the name may be a past version not heard of yet: the file's kept versions
    /// are asked of the remote first (PastVersions.swift).
    func lookup(_ parent: UInt64, _ name: String, done: @escaping Completion<Entry>) {
        let answer = { @Sendable [self] in done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try lookup(parent, name) } }) }
        guard let ask = remoteListing(parent, opening: false), let dirID = inodes.id(parent),
              (try? child(dirID, name)) ?? nil == nil else {
            return answer()
        }
        ask(answer)
    }

    /// A name not found is a negative entry, cached like positive ones; remote creations invalidate it.
    func lookup(_ parent: UInt64, _ name: String) throws(CoreError) -> Entry {
        guard let dirID = inodes.id(parent) else { throw .notFound }
        if name.utf8.count > WireRules.maxNameBytes { throw .nameTooLong }
        guard let (id, node) = try child(dirID, name) else {
            guard case .item = route(dirID) else { return .negative(timeout: 0) }
            return .negative(timeout: cacheTimeout)
        }
        return entry(id, node)
    }

    func forget(_ ino: UInt64, _ count: UInt64) { inodes.forget(ino, count) }

    func getattr(_ ino: UInt64) throws(CoreError) -> Attributes {
        guard let id = inodes.id(ino) else { throw .notFound }
        guard let node = try node(id) else {
            guard let removed = inodes.removed(ino) else { throw .notFound }
            return Attributes(stat: removed, timeout: 0)
        }
        return Attributes(stat: shown(attributes(node, of: id), through: ino), timeout: node.isVirtual ? 0 : cacheTimeout)
    }

    /// Attributes as node `ino` shows them: with a retired node's own inode number (InodeTable.number(ofNode:)).
    private func shown(_ attributes: stat, through ino: UInt64) -> stat {
        var st = attributes
        if let number = inodes.number(ofNode: ino) { st.st_ino = UInt(number) }
        return st
    }

    /// setattr(2). Truncating to a non-zero size needs the old content: it is fetched first when not local.
    func setattr(_ ino: UInt64, _ changes: AttributeChanges, fh: UInt64?, waiter: Waiter,
                 done: @escaping Completion<Attributes>) {
        guard let id = inodes.id(ino) else { return done(.failure(.core(.notFound))) }
        switch route(id) {
        case .item: break
        case .tree(let tree, let parsed):
            return done(Result { () throws(AdapterError) in
                guard let node = try adapting({ () throws(CoreError) in try tree.node(parsed) }) else { throw .core(.readOnly) }
                return try tree.setattr(id, node, changes, fh: fh)
            })
        case .none: return done(.failure(.core(.readOnly)))
        }
        var changes = changes
        if let clearer = changes.clearsSUIDGID, changes.mode == nil,
           let mode = core.item(id).flatMap({ withoutSUIDGID($0, by: clearer, mayHoldFSETID: changes.changesOwner) }) {
            changes.mode = mode
        }
        withContent(waiter, id, attempt: 1, done: done) { [self, changes] () throws(CoreError) in
            let item = try core.setAttributes(id, size: changes.size, mode: changes.mode, mtime: changes.mtime,
                                              atime: changes.atime, owner: try newOwner(id, changes))
            return Attributes(stat: shown(attributes(item), through: ino), timeout: cacheTimeout)
        }
    }

    /// Runs `body`, which may need the item's content local; when it says `.wouldBlock`, fetches the content and
    /// runs it again (an eviction or a newer version may come between the fetch and the next try, a few times).
    private func withContent<T: Sendable>(_ waiter: Waiter, _ id: String, attempt: Int, done: @escaping Completion<T>,
                                          _ body: @escaping @Sendable () throws(CoreError) -> T) {
        do {
            let value = try body()
            done(.success(value))
        } catch .wouldBlock {
            if attempt >= FileSystem.fetchAttempts { return done(.failure(keptChanging(id))) }
            whenLocal(waiter, id, failed: { done(.failure($0)) }) { [self] in
                withContent(waiter, id, attempt: attempt + 1, done: done, body)
            }
        } catch {
            done(.failure(.core(error)))
        }
    }

    /// How often an open or a truncation fetches content that something else (an eviction, a newer version)
    /// took away again before it could be used.
    static let fetchAttempts = 5
    /// The failure (EIO) of an open or a read whose fetches were overtaken each time (evicted, or a newer version
    /// arrived), logged: nothing else says why the program got EIO.
    func keptChanging(_ id: String) -> AdapterError {
        log.warning("gave up on \(core.path(of: id)) after \(FileSystem.fetchAttempts) fetches: each was evicted or overtaken by a newer version before it could open")
        return .core(.io("the content kept changing while fetched"))
    }

    /// The owner that setattr sets (chown, chgrp, or both), or nil. The kernel has checked that the caller may
    /// (default_permissions); the setuid and setgid bits a chown clears come as `clearsSUIDGID` (see setattr).
    private func newOwner(_ id: String, _ changes: AttributeChanges) throws(CoreError) -> Owner? {
        guard changes.changesOwner else { return nil }
        guard case .real(let item)? = try node(id) else { throw .notFound }
        var owner = core.config.owner(of: item)
        if let uid = changes.uid { owner.uid = uid }
        if let gid = changes.gid { owner.gid = gid }
        return owner
    }

    func mkdir(_ parent: UInt64, _ name: String, _ mode: mode_t, _ caller: Caller) throws(CoreError) -> Entry {
        let dirID = try makingIn(parent, name)
        return entry(try core.makeDirectory(parent: dirID, name: name, mode: UInt32(mode), owner: caller.owner))
    }

    /// symlink(2): the target is kept exactly as given; it must be valid UTF-8 (EILSEQ otherwise).
    func symlink(_ parent: UInt64, _ name: String, target: [UInt8], _ caller: Caller) throws(CoreError) -> Entry {
        let dirID = try makingIn(parent, name)
        if target.count > WireRules.maxTargetBytes { throw .nameTooLong }
        guard let text = String(validating: target, as: UTF8.self) else { throw .illegalByteSequence }
        return entry(try core.createSymlink(parent: dirID, name: name, target: text, owner: caller.owner))
    }

    func readlink(_ ino: UInt64) throws(CoreError) -> String {
        guard let id = inodes.id(ino) else { throw .notFound }
        if case .tree(let tree, let parsed) = route(id) {
            guard let node = try tree.node(parsed) else { throw .notFound }
            return try tree.readlink(node)
        }
        guard let item = core.item(id) else { throw .notFound }
        guard let target = item.target else { throw .invalidArgument("not a symbolic link") }
        return target
    }

    /// mknod(2): fifos and sockets are local-only nodes (the kernel carries their data); a regular file is
    /// created as by creat(2); device nodes are refused with EPERM.
    func mknod(_ parent: UInt64, _ name: String, _ mode: mode_t, _ caller: Caller) throws(CoreError) -> Entry {
        let dirID = try makingIn(parent, name)
        let perms = UInt32(mode & 0o7777)
        switch mode & S_IFMT {
        case S_IFIFO, S_IFSOCK:
            let kind: ItemKind = mode & S_IFMT == S_IFIFO ? .fifo : .socket
            return entry(try core.createLocalNode(parent: dirID, name: name, kind: kind, mode: perms, owner: caller.owner))
        case S_IFREG, 0:
            return entry(try core.createFile(parent: dirID, name: name, mode: perms, owner: caller.owner))
        default:
            throw .notPermitted("device nodes are not supported")
        }
    }

    /// unlink(2) and rmdir(2); in a tree, what its `remove` does (in `.trash`, a request to the remote).
    func remove(_ parent: UInt64, _ name: String, directory: Bool, done: @escaping Completion<Void>) {
        guard let dirID = inodes.id(parent) else { return done(.failure(.core(.notFound))) }
        switch route(dirID) {
        case .item:
            done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try remove(dirID, name, directory: directory) } })
        case .tree(let tree, let parsed): tree.remove(in: parsed, name, directory: directory, done: done)
        case .none: done(.failure(.core(.readOnly)))
        }
    }

    private func remove(_ dirID: String, _ name: String, directory: Bool) throws(CoreError) {
        if isMountRootName(dirID, name) { throw .readOnly }
        let held = heldFolder(dirID, name)
        let saved = try core.remove(parent: dirID, name: name, directory: directory)
        held?()
        if let saved { merge(saved) }
    }

    /// After a save by rename: the new file's node, which the kernel has at the file's name, stands for the
    /// file kept, as do the new file's handles still open (the core moved their counts), and the kernel asks
    /// again for its attributes (its inode number is the kept file's).
    private func merge(_ saved: SavedOver) {
        inodes.merge(saved.new, into: saved.kept)
        handles.withLock { h in for file in h.files.values where file.id == saved.new { file.id = saved.kept } }
        itemChanged(saved.kept, contentChanged: false)
    }

    /// For a folder at `name` in `dirID` that the kernel holds, what keeps its attributes once a removal or a
    /// rename over it has succeeded (InodeTable.keepRemoved); nil for anything else.
    private func heldFolder(_ dirID: String, _ name: String) -> (() -> Void)? {
        guard let item = core.lookup(parent: dirID, name: name), item.isDirectory, inodes.known(item.id) != nil else {
            return nil
        }
        let st = attributes(item)
        return { [inodes] in inodes.keepRemoved(item.id, st) }
    }

    /// rename(2) and renameat2(2); a version's (onto its own file) may wait for the version's content.
    func rename(_ parent: UInt64, _ name: String, _ newParent: UInt64, _ newName: String, mode: RenameMode,
                waiter: Waiter, done: @escaping Completion<Void>) {
        guard let from = inodes.id(parent), let to = inodes.id(newParent) else { return done(.failure(.core(.notFound))) }
        guard case .item = route(to), !isMountRootName(from, name), !isMountRootName(to, newName) else {
            return done(.failure(.core(.readOnly)))
        }
        switch route(from) {
        case .item: break
        case .tree(let tree, let parsed) where mode != .exchange:
            return tree.rename(parsed, name, to: to, newName, waiter: waiter, done: done)
        case .tree, .none: return done(.failure(.core(.readOnly)))
        }
        let move = { @Sendable [self] () throws(CoreError) in
            if mode == .exchange {
                try core.exchange(parent: from, name: name, newParent: to, newName: newName)
            } else {
                let held = heldFolder(to, newName)
                let saved = try core.rename(parent: from, name: name, newParent: to, newName: newName,
                                            noReplace: mode == .noReplace)
                held?()
                if let saved { merge(saved) }
            }
        }
        do throws(CoreError) {
            try move()
            done(.success(()))
        } catch .crossDevice(let why) {
            // A file moved where it stays on this device only (the desktop's Trash, a .nosync folder) needs its
            // newest content here: fetched first, then moved. (`gio trash` does not copy on EXDEV, as mv does.)
            guard mode != .exchange, let item = core.lookup(parent: from, name: name), item.hasContent, !item.isCurrent else {
                return done(.failure(.core(.crossDevice(why))))
            }
            whenLocal(waiter, item.id, failed: { done(.failure($0)) }) {
                done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try move() } })
            }
        } catch {
            done(.failure(.core(error)))
        }
    }

    // MARK: files

    /// open(2) with O_CREAT of a name the kernel found free (`flags`: the open's): made and opened. A name taken
    /// meanwhile (by an item that came from another device after the kernel's lookup) is opened as open(2) opens
    /// a file that is there, unless O_EXCL asked for a new one (EEXIST).
    func create(_ parent: UInt64, _ name: String, _ mode: mode_t, flags: Int32, _ caller: Caller,
                clearsSUIDGID: Caller?, waiter: Waiter, done: @escaping Completion<(Entry, Opened)>) {
        do throws(CoreError) {
            done(.success(try create(parent, name, mode, caller)))
        } catch .exists where flags & O_EXCL == 0 {
            let e: Entry
            do throws(CoreError) { e = try lookup(parent, name) } catch { return done(.failure(.core(error))) }
            guard e.ino != 0 else { return done(.failure(.core(.exists))) }
            open(e.ino, flags: flags, caller, clearsSUIDGID: clearsSUIDGID, waiter: waiter) { [self] result in
                switch result {
                case .success(let opened): done(.success((e, opened)))
                case .failure(let error):
                    forget(e.ino, 1)
                    done(.failure(error))
                }
            }
        } catch {
            done(.failure(.core(error)))
        }
    }

    func create(_ parent: UInt64, _ name: String, _ mode: mode_t, _ caller: Caller) throws(CoreError) -> (Entry, Opened) {
        if let dirID = inodes.id(parent), case .tree(let tree, let parsed) = route(dirID) { return try tree.create(in: parsed, name) }
        let dirID = try makingIn(parent, name)
        let (item, fd) = try core.createAndOpen(parent: dirID, name: name, mode: UInt32(mode), owner: caller.owner)
        let e = entry(item)
        let file = OpenFile(id: item.id, fd: fd, writable: true, ino: e.ino)
        let fh = addHandle(file)
        return (e, Opened(fh: fh, passthrough: choosePassthrough(file, fh)))
    }

    /// open(2): answered once the content is local (fetched first when it is not). `clearsSUIDGID`: an O_TRUNC
    /// by a caller without CAP_FSETID, which clears the setuid and setgid bits (FUSE_HANDLE_KILLPRIV_V2).
    func open(_ ino: UInt64, flags: Int32, _ caller: Caller, clearsSUIDGID: Caller? = nil, waiter: Waiter,
              done: @escaping Completion<Opened>) {
        guard let id = inodes.id(ino) else { return done(.failure(.core(.notFound))) }
        switch route(id) {
        case .item: break
        case .tree(let tree, let parsed):
            do throws(CoreError) {
                guard let node = try tree.node(parsed) else { throw .notFound }
                return tree.open(id, node, flags: flags, caller, waiter: waiter, done: done)
            } catch {
                return done(.failure(.core(error)))
            }
        case .none: return done(.failure(.core(.notFound)))
        }
        let done: Completion<Opened> = clearsSUIDGID.map { clearer in { @Sendable [self] result in
            if case .success = result { clearSUIDGID(id, by: clearer, mayHoldFSETID: false) }
            done(result)
        } } ?? done
        openFile(id, ino, flags: flags, caller, waiter: waiter, attempt: 1, done: done)
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
    private func openFile(_ id: String, _ ino: UInt64, flags: Int32, _ caller: Caller, waiter: Waiter, attempt: Int,
                          done: @escaping Completion<Opened>) {
        if inodeHoldsAnotherContent(ino, id) { // (also after a fetch, which may have installed a newer version)
            // Before anything changes: the kernel walks the path again (LOOKUP_REVAL) and opens the new inode.
            inodes.retire(ino)
            return done(.failure(.system(Errno(ESTALE))))
        }
        let writable = flags & O_ACCMODE != O_RDONLY
        do throws(CoreError) {
            // O_NONBLOCK changes nothing for a regular file. Only an open that would download asks who calls.
            let truncate = flags & O_TRUNC != 0
            var opening = try core.open(id, writable: writable, truncate: truncate, staleOK: attempt > 1, noDownload: false)
            if case .fetch = opening, !downloadPolicy.mayDownload(caller.pid) {
                opening = try core.open(id, writable: writable, truncate: truncate, staleOK: false, noDownload: true)
            }
            switch opening {
            case .opened(let fd):
                let file = OpenFile(id: id, fd: fd, writable: writable, ino: ino)
                let fh = addHandle(file)
                // Content only changes under the kernel through this mount, or with an explicit invalidation.
                // (Not with passthrough: the kernel then caches the content file's own pages.)
                let passthrough = choosePassthrough(file, fh)
                done(.success(Opened(fh: fh, keepCache: !passthrough, passthrough: passthrough)))
            case .fetch:
                if attempt >= FileSystem.fetchAttempts { return done(.failure(keptChanging(id))) }
                whenLocal(waiter, id, staleOK: true, failed: { done(.failure($0)) }) { [self] in
                    openFile(id, ino, flags: flags, caller, waiter: waiter, attempt: attempt + 1, done: done)
                }
            }
        } catch {
            done(.failure(.core(error)))
        }
    }

    /// An item's mode after a write, truncation or chown by `caller` that clears the setuid and setgid bits:
    /// setuid goes; setgid goes where the group may execute, or where the caller may not keep it
    /// (`Caller.keepsSetGID`); nil when nothing goes.
    func withoutSUIDGID(_ item: Item, by caller: Caller, mayHoldFSETID: Bool) -> UInt32? {
        var m = item.mode & ~UInt32(S_ISUID)
        if item.mode & UInt32(S_ISGID) != 0, item.mode & UInt32(S_IXGRP) != 0
            || !caller.keepsSetGID(ofGroup: core.config.owner(of: item).gid, mayHoldFSETID: mayHoldFSETID) {
            m &= ~UInt32(S_ISGID)
        }
        return m == item.mode ? nil : m
    }

    /// Clears an item's setuid and setgid bits as a write by `caller` does (FUSE_HANDLE_KILLPRIV_V2 leaves it to
    /// us), and has the kernel read its mode again.
    func clearSUIDGID(_ id: String, by caller: Caller, mayHoldFSETID: Bool) {
        guard let item = core.item(id), let mode = withoutSUIDGID(item, by: caller, mayHoldFSETID: mayHoldFSETID) else { return }
        do {
            _ = try core.setAttributes(id, size: nil, mode: mode, mtime: nil, atime: nil, owner: nil)
            itemChanged(id, contentChanged: false)
        } catch {
            log.warning("cannot clear the setuid and setgid bits of \(core.path(of: id)): \(error)")
        }
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

    /// The descriptor a read of handle `fh` takes its bytes from.
    func readable(_ fh: UInt64) throws(CoreError) -> FileDescriptor {
        guard let file = file(fh) else { throw .notFound }
        return file.fd
    }

    /// write(2) on the ordinary path. `clearsSUIDGID`: the caller, which lacks CAP_FSETID, so the write clears
    /// the setuid and setgid bits (FUSE_HANDLE_KILLPRIV_V2); writers of such files never get passthrough.
    func write(_ fh: UInt64, _ data: WriteData, at offset: off_t, clearsSUIDGID: Caller? = nil) throws(AdapterError) -> Int {
        guard let file = file(fh), file.writable else { throw .badHandle }
        if case .tree(let tree, _) = route(file.id) { return try tree.write(data, at: offset, file) }
        if let clearer = clearsSUIDGID { clearSUIDGID(file.id, by: clearer, mayHoldFSETID: false) }
        let n = try adapting { () throws(CoreError) in
            try core.write(file.id, through: file.fd) { data.write(file.fd.raw, offset) }
        }
        file.wrote = true
        if n < 0 { throw .system(Errno(Int32(-n))) }
        return n
    }

    /// fallocate(2) on the content file: allocating, punching or zeroing changes the content like a write.
    /// `clearsSUIDGID`: the caller, which lacks CAP_FSETID, so it clears the setuid and setgid bits as a write
    /// does.
    func fallocate(_ fh: UInt64, mode: Int32, offset: off_t, length: off_t, clearsSUIDGID: Caller? = nil) throws(AdapterError) {
        guard let file = file(fh), file.writable else { throw .badHandle }
        if let clearer = clearsSUIDGID { clearSUIDGID(file.id, by: clearer, mayHoldFSETID: true) }
        // Like a write: the item turns dirty first, and no snapshot sees the change half done.
        let allocated = try adapting { () throws(CoreError) in
            try core.write(file.id, through: file.fd) {
                Result { () throws(Errno) in try file.fd.allocate(mode: mode, offset: Int64(offset), length: Int64(length)) }
            }
        }
        if case .failure(let e) = allocated { throw .system(e) }
        file.wrote = true
    }

    /// SEEK_DATA and SEEK_HOLE (the kernel answers the other whences itself): where the handle's content file
    /// has data and holes, as the store's file system keeps them; ENXIO past the end, as on ext4.
    func seek(_ fh: UInt64, _ offset: off_t, whence: Int32) throws(AdapterError) -> off_t {
        guard let file = file(fh) else { throw .badHandle }
        guard whence == FileDescriptor.seekData || whence == FileDescriptor.seekHole else { throw .system(.invalid) }
        let found = Glibc.lseek(file.fd.raw, offset, whence)
        if found < 0 { throw .system(Errno.current) }
        return found
    }

    func flush(_ fh: UInt64) throws(CoreError) {
        guard let file = file(fh) else { return }
        if case .tree(let tree, _) = route(file.id) { return try tree.flush(file) }
        if file.wrote { try flushed(file) }
    }

    func fsync(_ fh: UInt64) throws(AdapterError) {
        guard let file = file(fh) else { return }
        // A virtual node's handle is a private copy: nothing to make durable (a key's value is, once committed).
        guard case .item = route(file.id) else { return }
        do { try file.fd.dataSync() } catch { throw .system(error) }
        if file.wrote { try adapting { () throws(CoreError) in try synced(file) } }
    }

    /// Drops a handle: what was written through it is recorded and the core told, in one call. A release has
    /// no answer to carry an error (the flush before it had): the log keeps it.
    func release(_ fh: UInt64) {
        guard let file = handles.withLock({ $0.files.removeValue(forKey: fh) }) else { return }
        // (Before the close: a passthrough writer's last writes are found on its descriptor.)
        switch route(file.id) {
        case .item:
            do { try released(file) } catch { log.error("release of \(file.id): \(error)") }
        case .tree(let tree, _): tree.release(file)
        case .none: break
        }
        file.fd.close()
        backings.released(file)
    }

    // MARK: waiting for content

    /// Runs `then` once the item's content is local (or, with `staleOK`, an older local copy is all there is);
    /// `failed` otherwise.
    func whenLocal(_ waiter: Waiter, _ id: String, staleOK: Bool = false,
                   failed: @escaping @Sendable (AdapterError) -> Void, then: @escaping @Sendable () -> Void) {
        waitFor(waiter, start: { done in core.fetch(id, done: done) }, fallback: { [self] error in
            guard staleOK, core.item(id)?.hasLocal == true else { return false }
            log.warning("serving the older local copy of \(core.path(of: id)): \(error)")
            return true
        }, failed: failed, then: then)
    }

    /// Starts a transfer with `start` and runs `then` when it succeeds (or when `fallback` accepts its failure),
    /// `failed` with EIO when it fails. An interrupt answers the request meanwhile (`Waiter`) and leaves the
    /// transfer running: then neither runs. The transfer's completion ends the wait, so nothing of the wait
    /// outlives the answer.
    func waitFor(_ waiter: Waiter, start: (@escaping @Sendable (Result<Void, CoreError>) -> Void) -> Void,
                 fallback: @escaping @Sendable (CoreError) -> Bool = { _ in false },
                 failed: @escaping @Sendable (AdapterError) -> Void, then: @escaping @Sendable () -> Void) {
        guard waiter.beginWaiting() else { return } // interrupted before we began: EINTR is answered
        start { [self] result in
            guard waiter.endWaiting() else { return } // interrupted: the transfer went on, nobody waits
            switch result {
            case .success:
                then()
            case .failure(let error):
                if fallback(error) { return then() }
                log.warning("a wait for content failed: \(error)")
                failed(.core(.io("\(error)")))
            }
        }
    }

    // MARK: directories

    /// opendir(2); a tree's folder that the remote keeps (a file's past versions under `.versions`, `.trash`)
    /// is listed as the remote tells it now.
    func opendir(_ ino: UInt64, done: @escaping Completion<Opened>) {
        let answer = { @Sendable [self] in done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try opendir(ino) } }) }
        guard let ask = remoteListing(ino, opening: true) else { return answer() }
        ask(answer)
    }

    func opendir(_ ino: UInt64) throws(CoreError) -> Opened {
        guard let id = inodes.id(ino), let node = try node(id) else { throw .notFound }
        guard node.fileType == S_IFDIR else { throw .notDirectory }
        let fh = handles.withLock { h in
            let fh = h.take()
            h.dirs[fh] = OpenDirectory(id: id)
            return fh
        }
        return Opened(fh: fh)
    }

    /// The listing of folder `id`, `.` and `..` first, each entry with its inode number.
    private func entries(_ id: String) throws(CoreError) -> [DirEntry] {
        var up = InodeTable.rootIno // (the root's `..` is outside the mount; a virtual folder's is not kept)
        if case .real(let item)? = try node(id), let parent = item.parent { up = inodes.number(parent) }
        var list = [DirEntry(name: ".", id: nil, type: S_IFDIR, number: inodes.number(id)),
                    DirEntry(name: "..", id: nil, type: S_IFDIR, number: up)]
        for child in try children(id) {
            var type = child.kind.map(FileSystem.fileType) ?? S_IFREG
            if child.kind == nil, let node = try node(child.id) { type = node.fileType }
            list.append(DirEntry(name: child.name, id: child.id, type: type, number: inodes.number(child.id)))
        }
        return list
    }

    func releasedir(_ fh: UInt64) {
        handles.withLock { $0.dirs[fh] = nil }
    }

    /// The listing a directory handle reads from `offset` (OpenDirectory says when it is taken). A folder
    /// removed since its opendir lists nothing, as on ext4; one that cannot be read fails (EIO), never lists empty.
    func listing(_ fh: UInt64, from offset: Int) throws(CoreError) -> [DirEntry] {
        guard offset == 0 else { return handles.withLock { $0.dirs[fh]?.list ?? [] } }
        guard let id = handles.withLock({ $0.dirs[fh]?.id }) else { return [] }
        let list: [DirEntry]
        do throws(CoreError) { list = try entries(id) } catch .notFound { list = [] }
        handles.withLock { $0.dirs[fh]?.list = list }
        return list
    }

    /// The inode number a plain readdir shows for an entry.
    func listedIno(_ e: DirEntry) -> UInt64 { e.number }

    /// The entry readdirplus gives for `e`: a node's counts a lookup; `.` and `..` (and a node gone since the
    /// listing) count none.
    func listedEntry(_ e: DirEntry) -> Entry {
        // (A node that cannot be read now is listed without attributes, as one gone since the listing.)
        if let id = e.id, let node = (try? node(id)) ?? nil { return entry(id, node) }
        var st = stat()
        st.st_mode = e.type
        st.st_ino = UInt(e.number)
        return Entry(ino: 0, attributes: st, timeout: 0)
    }

    /// fsync(2) of a folder: its deletes, kept back until the next commit, are written and made durable.
    func fsyncdir() throws(CoreError) { try core.syncedDirectory() }

    func statfs() throws(CoreError) -> statvfs {
        var vfs = try core.storeFileSystemStats()
        vfs.f_namemax = UInt(WireRules.maxNameBytes)
        return vfs
    }
}

extension timespec {
    /// A time given in nanoseconds since the epoch (tv_nsec stays in 0..<1e9 before the epoch too).
    init(nanoseconds ns: Int64) {
        let (sec, nsec) = ns.quotientAndRemainder(dividingBy: 1_000_000_000)
        self.init(tv_sec: Int(nsec < 0 ? sec - 1 : sec), tv_nsec: Int(nsec < 0 ? nsec + 1_000_000_000 : nsec))
    }
}
