// The root of a mount of several containers (`--containers`, `--all-containers`): a FUSE session of its own
// whose one folder holds a folder per container, named as Apple names them in `~/Library/Mobile Documents`
// (`iCloud~com~example~notes`: the id with its dots as tildes). Each container's own `FileSystem` is mounted
// on its folder, so a container is a file system of its own: its inode numbers, its caches, its status
// attributes at its root, and `rename(2)` between two containers fails with EXDEV (mv then copies and
// deletes, as between any two file systems).
//
// What must hold: a container's folder, once listed, answers every lookup with the same inode for the life
// of the session (the kernel unmounts what is mounted on a name whose lookup fails or changes), and is never
// the subject of an entry notice; a new folder only makes the root's listing stale (`inval_inode` on the
// root). Nothing can be made, renamed or removed in the root (EPERM). The root's `pendingChanges` is the sum
// of its containers', read through their own file systems, so `sync --wait` and `unmount` of the mount
// count every container. Only this file and Session.swift and Reply.swift know libfuse.
import CFuse
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

/// Sendable: libfuse calls it from its loop threads and the daemon from its own; what changes is behind locks.
public final class AccountRoot: Sendable {
    struct Folder {
        let name: String
        let container: String
        let ino: UInt64
        let fs: FileSystem
    }

    private struct Folders {
        var list: [Folder] = []
        /// The next folder's inode number: never one a removed folder had (the kernel may still know it).
        var next: UInt64 = 2
    }
    private let folders = Locked(Folders())
    private let mountedSession = Locked<OpaquePointer?>(nil)
    private let made = nowNanoseconds()
    /// More attributes of the root (the account's usage and quota, from the daemon, answered at once).
    public var accountAttributes: (@Sendable () -> [(name: String, value: String)])? {
        get { moreAttributes.withLock { $0 } }
        set { moreAttributes.withLock { $0 = newValue } }
    }
    private let moreAttributes = Locked<(@Sendable () -> [(name: String, value: String)])?>(nil)
    private let log = Logger("account")
    /// Names and attributes of a container's folder never change while it is shown: the kernel may keep them.
    static let timeout: Double = 86_400

    public init() {}

    /// The folder name of container `id` (`iCloud.com.example.notes` -> `iCloud~com~example~notes`).
    public static func folderName(_ id: String) -> String { id.replacingOccurrences(of: ".", with: "~") }

    /// The ids of the containers shown, in the order they were added (the first is the main one).
    public var containers: [String] { all.map(\.container) }

    /// Shows container `id` (whose file system is `fs`, to be mounted on the folder next) and tells the kernel
    /// the root's listing changed. Returns the folder's name.
    @discardableResult
    public func add(_ id: String, _ fs: FileSystem) -> String {
        let name = Self.folderName(id)
        folders.withLock { f in
            guard !f.list.contains(where: { $0.container == id }) else { return }
            f.list.append(Folder(name: name, container: id, ino: f.next, fs: fs))
            f.next += 1
        }
        if let se = session { fuse_lowlevel_notify_inval_inode(se, 1, -1, 0) }
        return name
    }

    /// Stops showing container `id` (its file system unmounted from the folder already) and tells the kernel
    /// the name is gone and the root's listing changed. Not from a request on the root (the notice waits for
    /// the root's lock such a request holds).
    public func remove(_ id: String) {
        let name = Self.folderName(id)
        folders.withLock { f in f.list.removeAll { $0.container == id } }
        guard let se = session else { return }
        _ = name.withCString { fuse_lowlevel_notify_inval_entry(se, 1, $0, strlen($0)) }
        fuse_lowlevel_notify_inval_inode(se, 1, -1, 0)
    }

    var session: OpaquePointer? {
        get { mountedSession.withLock { $0 } }
        set { mountedSession.withLock { $0 = newValue } }
    }

    func folder(ino: UInt64) -> Folder? { all.first { $0.ino == ino } }
    func folder(named name: String) -> Folder? { all.first { $0.name == name } }
    var all: [Folder] { folders.withLock { $0.list } }

    // MARK: answers

    func attributes(_ ino: UInt64) throws(CoreError) -> Attributes {
        guard ino == 1 || folder(ino: ino) != nil else { throw .notFound }
        var st = stat()
        st.st_ino = UInt(ino)
        st.st_mode = S_IFDIR | (ino == 1 ? 0o555 : 0o755)
        st.st_nlink = ino == 1 ? 2 + UInt(all.count) : 2
        st.st_uid = geteuid()
        st.st_gid = getegid()
        st.st_blksize = 4096
        let t = timespec(nanoseconds: made)
        st.st_atim = t; st.st_mtim = t; st.st_ctim = t
        return Attributes(stat: st, timeout: Self.timeout)
    }

    func lookup(_ parent: UInt64, _ name: String) throws(CoreError) -> Entry {
        guard parent == 1 else { throw .notFound }
        guard let f = folder(named: name) else { return .negative(timeout: 0) }
        let a = try attributes(f.ino)
        return Entry(ino: f.ino, attributes: a.stat, timeout: Self.timeout)
    }

    /// The root's listing: `.`, `..` and the folders, in the order they were added.
    func listing(_ ino: UInt64) throws(CoreError) -> [FileSystem.DirEntry] {
        guard ino == 1 else { throw .notFound }
        return [FileSystem.DirEntry(name: ".", id: nil, type: S_IFDIR, number: 1),
                FileSystem.DirEntry(name: "..", id: nil, type: S_IFDIR, number: 1)]
            + all.map { FileSystem.DirEntry(name: $0.name, id: nil, type: S_IFDIR, number: $0.ino) }
    }

    /// The names of the root's attributes: `containers`, `pendingChanges` and the account's.
    func xattrNames(_ ino: UInt64) -> [String] {
        guard ino == 1 else { return [] }
        return (["containers", "pendingChanges"] + (accountAttributes?() ?? []).map(\.name)).map { StatusAttribute.prefix + $0 }.sorted()
    }

    /// One of the root's attributes: `containers` (one id a line), `pendingChanges` (the sum of its containers',
    /// each read through its own file system, only when asked) or one of the account's.
    func xattr(_ ino: UInt64, _ name: String) throws(CoreError) -> String {
        guard ino == 1, name.hasPrefix(StatusAttribute.prefix) else { throw .noAttribute }
        switch String(name.dropFirst(StatusAttribute.prefix.count)) {
        case "containers": return all.map(\.container).joined(separator: "\n")
        case "pendingChanges":
            var pending = 0
            for f in all {
                let value = try f.fs.getxattr(1, StatusAttribute.prefix + "pendingChanges")
                pending += Int(String(decoding: value, as: UTF8.self)) ?? 0
            }
            return String(pending)
        case let key:
            guard let value = accountAttributes?().first(where: { $0.name == key })?.value else { throw .noAttribute }
            return value
        }
    }

    func statfs() throws(CoreError) -> statvfs {
        guard let main = all.first else {
            var vfs = statvfs()
            vfs.f_bsize = 4096; vfs.f_frsize = 4096; vfs.f_namemax = UInt(WireRules.maxNameBytes)
            return vfs
        }
        return try main.fs.statfs()
    }
}

// MARK: the session

@inline(__always)
private func root(_ req: fuse_req_t?) -> AccountRoot {
    Unmanaged<AccountRoot>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}

private func refuse(_ req: fuse_req_t?) { Reply(req!).fail(CoreError.notPermitted("the account root holds containers only")) }

private func makeAccountOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.lookup = { req, parent, name in
        let r = Reply(req!)
        guard let n = name.flatMap({ String(validatingCString: $0) }) else { return r.fail(CoreError.notFound) }
        do throws(CoreError) { r.entry(try root(req).lookup(parent, n)) } catch { r.fail(error) }
    }
    ops.forget = { req, _, _ in Reply(req!).none() }
    ops.forget_multi = { req, _, _ in Reply(req!).none() }
    ops.getattr = { req, ino, _ in
        let r = Reply(req!)
        do throws(CoreError) { r.attr(try root(req).attributes(ino)) } catch { r.fail(error) }
    }
    ops.setattr = { req, _, _, _, _ in refuse(req) }
    ops.mkdir = { req, _, _, _ in refuse(req) }
    ops.mknod = { req, _, _, _, _ in refuse(req) }
    ops.symlink = { req, _, _, _ in refuse(req) }
    ops.unlink = { req, _, _ in refuse(req) }
    ops.rmdir = { req, _, _ in refuse(req) }
    ops.rename = { req, _, _, _, _, _ in refuse(req) }
    ops.link = { req, _, _, _ in refuse(req) }
    ops.create = { req, _, _, _, _ in refuse(req) }
    ops.setxattr = { req, _, _, _, _, _ in refuse(req) }
    ops.removexattr = { req, _, _ in refuse(req) }
    ops.opendir = { req, ino, fi in
        let r = Reply(req!)
        guard ino == 1 else { return r.fail(CoreError.notFound) }
        _ = r.open(Opened(fh: 0), fi!.pointee)
    }
    ops.readdir = { req, ino, size, off, _ in
        let r = Reply(req!)
        do throws(CoreError) {
            let list = try root(req).listing(ino)
            r.directory(DirectoryPacking.plain(list, from: Int(off), size: size, ino: { $0.number }))
        } catch { r.fail(error) }
    }
    ops.releasedir = { req, _, _ in Reply(req!).ok() }
    ops.getxattr = { req, ino, name, size in
        let r = Reply(req!)
        guard let n = name.flatMap({ String(validatingCString: $0) }) else { return r.fail(CoreError.noAttribute) }
        do throws(CoreError) {
            r.xattr(Array(try root(req).xattr(ino, n).utf8), size: size)
        } catch { r.fail(error) }
    }
    ops.listxattr = { req, ino, size in
        let r = Reply(req!)
        r.xattr(root(req).xattrNames(ino).flatMap { Array($0.utf8) + [0] }, size: size)
    }
    ops.statfs = { req, _ in
        let r = Reply(req!)
        do throws(CoreError) { r.statfs(try root(req).statfs()) } catch { r.fail(error) }
    }
    return ops
}

extension AccountRoot {
    /// Mounts the root at `mountpoint`. Throws a plain message when the kernel refuses.
    public func mount(at mountpoint: String, fsname: String) throws {
        let se = try mountSession(makeAccountOperations(), userdata: Unmanaged.passUnretained(self).toOpaque(),
                                  at: mountpoint, fsname: fsname)
        session = se
    }

    /// Serves requests until the root is unmounted or a signal ends the loop; then runs `beforeUnmount` (which
    /// must let go of the containers mounted on the folders) and unmounts.
    public func run(beforeUnmount: () -> Void) {
        guard let se = session else { return }
        fuse_set_signal_handlers(se)
        let rc = ubq_session_loop_mt(se, 4, 16)
        if rc != 0 { log.warning("the account root's loop ended with \(rc)") }
        fuse_remove_signal_handlers(se)
        beforeUnmount()
        session = nil
        fuse_session_unmount(se)
        fuse_session_destroy(se)
    }
}

/// Unmounts what is mounted at `path` lazily (it goes once nothing uses it): MNT_DETACH for root, else
/// `fusermount3 -u -z`. Its FUSE loop then reads the end of its connection and returns.
public func detachMount(_ path: String) {
    if geteuid() == 0 {
        if umount2(path, Int32(MNT_DETACH)) == 0 || errno == EINVAL || errno == ENOENT { return }
    }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
    p.arguments = ["-u", "-z", "-q", path]
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    do { try p.run(); p.waitUntilExit() } catch {}
}
