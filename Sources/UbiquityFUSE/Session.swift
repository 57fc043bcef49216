// The low-level operations table and the session: mount, multi-threaded loop, clean unwind, and the kernel cache
// notices. Each C callback finds the FileSystem through the session's user data, decodes the request into values
// (Answers.swift), calls one operation and answers what it returns through one `Reply`.
//
// What must hold: each callback answers its request once, through one `Reply` (forget and forget_multi with
// `none`; release and releasedir after the method returns). A name from the kernel that is not valid UTF-8 is
// refused before any method sees it, never rewritten: ENOENT or ENODATA where a lookup would find nothing,
// EILSEQ where it would make a name. The FileSystem is passed unretained as user data, so its owner keeps it
// until `run` returns; `run` clears the session and drains the notifier queue before it unmounts and destroys
// it, so no notice uses a destroyed session. The kernel checks permissions (`default_permissions`).
import CFuse
import CPassthrough
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

@inline(__always)
private func fs(_ req: fuse_req_t?) -> FileSystem {
    Unmanaged<FileSystem>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}

/// The one answer to a request (Reply.swift). Each path of a callback makes exactly one: one dropped unanswered
/// answers EIO.
@inline(__always)
private func reply(_ req: fuse_req_t?) -> Reply { Reply(req!) }

/// Calls `body` with a name from the kernel, or answers `refusal` when the name is not valid UTF-8. Such a name
/// is never rewritten (to U+FFFD): two different names would become one.
@inline(__always)
private func named(_ req: fuse_req_t?, _ p: UnsafePointer<CChar>?, else refusal: CoreError = .illegalByteSequence,
                   _ body: (String) -> Void) {
    guard let name = p.flatMap({ String(validatingCString: $0) }) else { return reply(req).fail(refusal) }
    body(name)
}

/// Answers an entry; one the kernel did not take (the request was gone) gives its lookup back.
private func deliver(_ r: Reply, _ f: FileSystem, _ e: Entry) {
    if !r.entry(e), e.ino != 0 { f.forget(e.ino, 1) }
}

/// The completion of an operation that may wait: its failure is answered, its value goes to `send`.
private func answering<T>(_ r: Reply, _ send: @escaping @Sendable (T) -> Void) -> Completion<T> {
    { result in
        switch result {
        case .success(let value): send(value)
        case .failure(let error): r.fail(error)
        }
    }
}

/// What a setattr request changes.
/// The caller, when the request in hand says it clears the setuid and setgid bits (FUSE_HANDLE_KILLPRIV_V2's flag of
/// a write, an O_TRUNC open, a truncation or a chown), else nil.
private func clearer(_ caller: Caller) -> Caller? { ubq_kills_suidgid() != 0 ? caller : nil }

private func changes(_ attr: stat, _ toSet: Int32, _ caller: Caller) -> AttributeChanges {
    func time(_ flag: Int32, _ now: Int32, _ value: timespec) -> Int64? {
        if toSet & now != 0 { return nowNanoseconds() }
        if toSet & flag != 0 { return nanoseconds(value) }
        return nil
    }
    var c = AttributeChanges()
    if toSet & FUSE_SET_ATTR_SIZE != 0 { c.size = Int64(attr.st_size) }
    if toSet & FUSE_SET_ATTR_MODE != 0 { c.mode = UInt32(attr.st_mode & 0o7777) }
    if toSet & FUSE_SET_ATTR_UID != 0 { c.uid = attr.st_uid }
    if toSet & FUSE_SET_ATTR_GID != 0 { c.gid = attr.st_gid }
    c.mtime = time(FUSE_SET_ATTR_MTIME, FUSE_SET_ATTR_MTIME_NOW, attr.st_mtim)
    c.atime = time(FUSE_SET_ATTR_ATIME, FUSE_SET_ATTR_ATIME_NOW, attr.st_atim)
    c.clearsSUIDGID = clearer(caller)
    return c
}

private func bytes(_ p: UnsafeRawPointer?, _ count: Int) -> [UInt8] {
    guard let p, count > 0 else { return [] }
    return [UInt8](UnsafeRawBufferPointer(start: p, count: count))
}

private func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.`init` = { userdata, conn in
        ubq_conn_init(conn, 1 << 20)
        Unmanaged<FileSystem>.fromOpaque(userdata!).takeUnretainedValue().sayIOPath()
    }
    addNameOperations(&ops)
    addMoveOperations(&ops)
    addFileOperations(&ops)
    addDirectoryOperations(&ops)
    addAttributeOperations(&ops)
    return ops
}

private func addNameOperations(_ ops: inout fuse_lowlevel_ops) {
    // A name that is not valid UTF-8 cannot exist here: looking it up (or removing it) finds nothing.
    ops.lookup = { req, parent, name in
        named(req, name, else: .notFound) { n in
            let r = reply(req), f = fs(req)
            if f.announcer.isMine(r.caller), let e = f.announcedLookup(parent, n) { return deliver(r, f, e) }
            f.lookup(parent, n, done: answering(r) { deliver(r, f, $0) })
        }
    }
    ops.forget = { req, ino, n in fs(req).forget(ino, n); reply(req).none() }
    ops.forget_multi = { req, count, list in
        let f = fs(req)
        for i in 0..<count { f.forget(list![i].ino, list![i].nlookup) }
        reply(req).none()
    }
    ops.mkdir = { req, parent, name, mode in
        named(req, name) { n in
            let r = reply(req), f = fs(req)
            do throws(CoreError) {
                deliver(r, f, f.announcer.isMine(r.caller) ? try f.announcedEntry(parent, n) : try f.mkdir(parent, n, mode, r.caller))
            } catch { r.fail(error) }
        }
    }
    ops.mknod = { req, parent, name, mode, _ in
        named(req, name) { n in
            let r = reply(req), f = fs(req)
            do throws(CoreError) {
                deliver(r, f, f.announcer.isMine(r.caller) ? try f.announcedEntry(parent, n) : try f.mknod(parent, n, mode, r.caller))
            } catch { r.fail(error) }
        }
    }
    // A name that is not valid UTF-8 is refused first, whatever the operation.
    ops.symlink = { req, target, parent, name in
        named(req, name) { n in
            let r = reply(req), f = fs(req)
            let text = bytes(target, target.map { strlen($0) } ?? 0)
            do throws(CoreError) {
                deliver(r, f, f.announcer.isMine(r.caller) ? try f.announcedEntry(parent, n) : try f.symlink(parent, n, target: text, r.caller))
            } catch { r.fail(error) }
        }
    }
    ops.readlink = { req, ino in
        let r = reply(req)
        do throws(CoreError) { r.readlink(try fs(req).readlink(ino)) } catch { r.fail(error) }
    }
    ops.unlink = { req, parent, name in
        named(req, name, else: .notFound) { n in
            let r = reply(req), f = fs(req)
            if f.announcer.isMine(r.caller) { return r.ok() }
            f.remove(parent, n, directory: false, done: answering(r) { r.ok() })
        }
    }
    ops.rmdir = { req, parent, name in
        named(req, name, else: .notFound) { n in
            let r = reply(req), f = fs(req)
            if f.announcer.isMine(r.caller) { return r.ok() }
            f.remove(parent, n, directory: true, done: answering(r) { r.ok() })
        }
    }
}

private func addMoveOperations(_ ops: inout fuse_lowlevel_ops) {
    ops.rename = { req, p, n, np, nn, flags in
        named(req, n) { name in
            named(req, nn) { newName in
                let r = reply(req)
                guard let mode = RenameMode(flags: flags) else {
                    return r.fail(CoreError.invalidArgument("unsupported rename flags"))
                }
                if fs(req).announcer.isMine(r.caller) { return r.ok() }
                fs(req).rename(p, name, np, newName, mode: mode, waiter: r, done: answering(r) { r.ok() })
            }
        }
    }
    // No hard links: an item has one place (its parent and name), as on iCloud Drive.
    ops.link = { req, _, _, name in named(req, name) { _ in reply(req).fail(CoreError.notPermitted("no hard links")) } }
}

private func addFileOperations(_ ops: inout fuse_lowlevel_ops) {
    ops.create = { req, parent, name, mode, fi in
        named(req, name) { n in
            let r = reply(req), f = fs(req), base = fi!.pointee
            f.create(parent, n, mode, flags: base.flags, r.caller, clearsSUIDGID: clearer(r.caller), waiter: r,
                     done: answering(r) { (e, o) in
                if !r.create(e, o, base) {
                    f.forget(e.ino, 1)
                    f.release(o.fh)
                }
            })
        }
    }
    ops.open = { req, ino, fi in
        let r = reply(req), f = fs(req), base = fi!.pointee
        if f.announcer.isMine(r.caller) {
            do throws(CoreError) {
                let o = try f.announcedOpen()
                if !r.open(o, base) { f.release(o.fh) }
            } catch { r.fail(error) }
            return
        }
        f.open(ino, flags: base.flags, r.caller, clearsSUIDGID: clearer(r.caller), waiter: r, done: answering(r) { o in
            if !r.open(o, base) { f.release(o.fh) }
        })
    }
    ops.read = { req, _, size, off, fi in
        let r = reply(req)
        do throws(CoreError) { r.data(fd: try fs(req).readable(fi!.pointee.fh).raw, size: size, offset: off) } catch { r.fail(error) }
    }
    ops.write_buf = { req, _, bufv, off, fi in
        let r = reply(req)
        let data = WriteData(count: fuse_buf_size(bufv!)) { fd, offset in ubq_write_buf_to_fd(bufv, fd, offset) }
        let clears = clearer(r.caller)
        do throws(AdapterError) { r.written(try fs(req).write(fi!.pointee.fh, data, at: off, clearsSUIDGID: clears)) } catch { r.fail(error) }
    }
    ops.flush = { req, _, fi in
        let r = reply(req)
        do throws(CoreError) { try fs(req).flush(fi!.pointee.fh); r.ok() } catch { r.fail(error) }
    }
    ops.release = { req, _, fi in fs(req).release(fi!.pointee.fh); reply(req).ok() }
    ops.fsync = { req, _, _, fi in
        let r = reply(req)
        do throws(AdapterError) { try fs(req).fsync(fi!.pointee.fh); r.ok() } catch { r.fail(error) }
    }
    ops.fallocate = { req, _, mode, off, len, fi in
        let r = reply(req)
        // A write says when its caller lacks CAP_FSETID; a fallocate says nothing (FUSE_HANDLE_KILLPRIV_V2 leaves
        // the clearing to the daemon): a caller other than root is taken to lack it (xfstests generic/683-685).
        let caller = r.caller
        let clears = (caller.owner?.uid ?? 0) != 0 ? caller : nil
        do throws(AdapterError) {
            try fs(req).fallocate(fi!.pointee.fh, mode: mode, offset: off, length: len, clearsSUIDGID: clears)
            r.ok()
        } catch { r.fail(error) }
    }
    ops.lseek = { req, _, off, whence, fi in
        let r = reply(req)
        do throws(AdapterError) { r.offset(try fs(req).seek(fi!.pointee.fh, off, whence: whence)) } catch { r.fail(error) }
    }
}

private func addDirectoryOperations(_ ops: inout fuse_lowlevel_ops) {
    ops.opendir = { req, ino, fi in
        let r = reply(req), f = fs(req), base = fi!.pointee
        f.opendir(ino, done: answering(r) { o in
            if !r.open(o, base) { f.releasedir(o.fh) }
        })
    }
    ops.readdir = { req, _, size, off, fi in
        let r = reply(req), f = fs(req)
        do throws(CoreError) {
            let list = try f.listing(fi!.pointee.fh, from: Int(off))
            r.directory(DirectoryPacking.plain(list, from: Int(off), size: size, ino: f.listedIno))
        } catch { r.fail(error) }
    }
    ops.readdirplus = { req, _, size, off, fi in
        let r = reply(req), f = fs(req)
        do throws(CoreError) {
            let list = try f.listing(fi!.pointee.fh, from: Int(off))
            r.directory(DirectoryPacking.plus(list, from: Int(off), size: size, entry: { f.listedEntry($0) },
                                              unused: { if $0.ino != 0 { f.forget($0.ino, 1) } }))
        } catch { r.fail(error) }
    }
    ops.releasedir = { req, _, fi in fs(req).releasedir(fi!.pointee.fh); reply(req).ok() }
    ops.fsyncdir = { req, _, _, _ in
        let r = reply(req)
        do throws(CoreError) { try fs(req).fsyncdir(); r.ok() } catch { r.fail(error) }
    }
    ops.statfs = { req, _ in
        let r = reply(req)
        do throws(CoreError) { r.statfs(try fs(req).statfs()) } catch { r.fail(error) }
    }
}

private func addAttributeOperations(_ ops: inout fuse_lowlevel_ops) {
    ops.getattr = { req, ino, _ in
        let r = reply(req), f = fs(req)
        if f.announcer.isMine(r.caller), let a = f.announcedAttributes(ino) { return r.attr(a) }
        do throws(CoreError) { r.attr(try f.getattr(ino)) } catch { r.fail(error) }
    }
    ops.setattr = { req, ino, attr, toSet, fi in
        let r = reply(req)
        if fs(req).announcer.isMine(r.caller) {
            do throws(CoreError) { return r.attr(try fs(req).getattr(ino)) } catch { return r.fail(error) }
        }
        fs(req).setattr(ino, changes(attr!.pointee, toSet, r.caller), fh: fi?.pointee.fh, waiter: r, done: answering(r) { r.attr($0) })
    }
    ops.getxattr = { req, ino, name, size in
        named(req, name, else: .noAttribute) { n in
            let r = reply(req)
            fs(req).getxattr(ino, n, done: answering(r) { r.xattr($0, size: size) })
        }
    }
    ops.listxattr = { req, ino, size in
        let r = reply(req)
        do throws(CoreError) { r.xattr(try fs(req).listxattr(ino), size: size) } catch { r.fail(error) }
    }
    ops.setxattr = { req, ino, name, value, size, flags in
        named(req, name) { n in
            let r = reply(req)
            fs(req).setxattr(ino, n, bytes(value, size), flags: flags, done: answering(r) { r.ok() })
        }
    }
    ops.removexattr = { req, ino, name in
        named(req, name, else: .noAttribute) { n in
            let r = reply(req)
            do throws(CoreError) { try fs(req).removexattr(ino, n); r.ok() } catch { r.fail(error) }
        }
    }
}

public struct MountError: Error, CustomStringConvertible {
    public let description: String
}

/// A new session on `ops`, whose requests carry `userdata`, mounted at `mountpoint` (the kernel checks
/// permissions; root's mounts are open to other users, as their own files' modes allow). Throws a plain message
/// when the kernel refuses.
func mountSession(_ ops: fuse_lowlevel_ops, userdata: UnsafeMutableRawPointer, at mountpoint: String,
                  fsname: String) throws -> OpaquePointer {
    var args = ["ubiquityfs", "-o", "default_permissions,fsname=\(fsname),subtype=ubiquityfs"]
    if getuid() == 0 { args[2] += ",allow_other" }
    var cargs = args.map { strdup($0) }
    defer { cargs.forEach { free($0) } }
    var fargs = fuse_args(argc: Int32(cargs.count), argv: nil, allocated: 0)
    var ops = ops
    let se: OpaquePointer? = cargs.withUnsafeMutableBufferPointer { buf in
        fargs.argv = buf.baseAddress
        return fuse_session_new(&fargs, &ops, MemoryLayout<fuse_lowlevel_ops>.size, userdata)
    }
    guard let se else { throw MountError(description: "cannot start a FUSE session (is /dev/fuse there?)") }
    if fuse_session_mount(se, mountpoint) != 0 {
        fuse_session_destroy(se)
        throw MountError(description: "cannot mount on \(mountpoint) (see the lines above)")
    }
    return se
}

extension FileSystem {
    /// Mounts at `mountpoint`. Throws a plain message when the kernel refuses.
    public func mount(at mountpoint: String, fsname: String) throws {
        let se = try mountSession(makeOperations(), userdata: Unmanaged.passUnretained(self).toOpaque(),
                                  at: mountpoint, fsname: fsname)
        // Our io sits between libfuse and /dev/fuse to amend INIT (passthrough, the daemon clearing setuid bits)
        // and open replies, and to read the kill flags of requests.
        if passthrough && !FileSystem.mayPassthrough { passthroughRefusal = "the daemon lacks CAP_SYS_ADMIN" }
        backings.devFD = fuse_session_fd(se)
        if ubq_pt_install(se, passthrough && passthroughRefusal == nil ? 1 : 0) != 0 {
            passthroughRefusal = passthrough ? passthroughRefusal ?? "the custom io was refused" : nil
            log.warning("the custom io was refused: the kernel asks for security.capability at every write")
        }
        session = se
        announcer.start(self, at: mountpoint)
    }

    /// Serves requests until the file system is unmounted or (when it `handlesSignals`: the one session of the
    /// process that does) a signal ends the loop; then unmounts.
    public func run(handlesSignals: Bool = true) {
        guard let se = session else { return }
        if handlesSignals { fuse_set_signal_handlers(se) }
        let rc = ubq_session_loop_mt(se, 10, 64)
        if rc != 0 { log.warning("session loop ended with \(rc)") }
        if handlesSignals { fuse_remove_signal_handlers(se) }
        session = nil
        notifier.sync {}
        announcer.stop()
        fuse_session_unmount(se)
        fuse_session_destroy(se)
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

    public func entryRemoved(parent: String, name: String, id: String, isDirectory: Bool) {
        guard let parentIno = inodes.known(parent) else { return }
        // The entry only: the announcer's unlink, rmdir or rename then removes or moves it through the kernel, as
        // the same change made here would, and raises its events. (Told an item was deleted, the kernel raised
        // IN_DELETE_SELF and ended the watches on a folder moved elsewhere, refused every look inside a folder
        // deleted elsewhere, and kept the name of a file it held as absent: the announcer's repeats then failed
        // with ENOENT and raised nothing.)
        notifier.async { [self] in
            guard let se = session else { return }
            fuse_lowlevel_notify_inval_entry(se, parentIno, name, name.utf8.count)
        }
        // Below a folder removed too (`rm -rf` elsewhere), the path is found from the folder's (`repeatBatch`).
        let path = parent == core.rootID || core.item(parent) != nil ? announcer.path(self, parent, name) : nil
        repeatElsewhere(.removed(parent: parent, name: name, id: id, isDirectory: isDirectory, path: path))
    }

    public func entryAdded(parent: String, name: String) {
        guard let parentIno = inodes.known(parent) else { return }
        notifier.async { [self] in
            guard let se = session else { return }
            fuse_lowlevel_notify_inval_entry(se, parentIno, name, name.utf8.count)
        }
        repeatElsewhere(.added(parent: parent, name: name))
    }

    public func changedElsewhere(_ id: String, contentChanged: Bool) {
        guard let item = core.item(id), let parent = item.parent, inodes.known(parent) != nil else { return }
        repeatElsewhere(.changed(id: id, content: contentChanged))
    }
}

