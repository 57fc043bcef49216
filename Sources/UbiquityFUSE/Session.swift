// The low-level operations table and the session: mount, multi-threaded loop, clean unwind.
// Each C callback finds the FileSystem through the session's user data and calls one method.
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

/// The one answer to a request (Reply.swift).
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

private func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.`init` = { userdata, conn in
        ubq_conn_init(conn, 1 << 20)
        Unmanaged<FileSystem>.fromOpaque(userdata!).takeUnretainedValue().sayIOPath()
    }
    // A name that is not valid UTF-8 cannot exist here: looking it up (or removing it) finds nothing.
    ops.lookup = { req, parent, name in named(req, name, else: .notFound) { fs(req).lookup(reply(req), parent, $0) } }
    ops.forget = { req, ino, n in fs(req).forget(ino, n); reply(req).none() }
    ops.forget_multi = { req, count, list in
        let f = fs(req)
        for i in 0..<count { f.forget(list![i].ino, list![i].nlookup) }
        reply(req).none()
    }
    ops.getattr = { req, ino, _ in fs(req).getattr(reply(req), ino) }
    ops.setattr = { req, ino, attr, toSet, fi in fs(req).setattr(reply(req), ino, attr!.pointee, toSet, fi?.pointee.fh) }
    ops.mkdir = { req, parent, name, mode in named(req, name) { fs(req).mkdir(reply(req), parent, $0, mode) } }
    ops.unlink = { req, parent, name in
        named(req, name, else: .notFound) { fs(req).remove(reply(req), parent, $0, directory: false) }
    }
    ops.rmdir = { req, parent, name in
        named(req, name, else: .notFound) { fs(req).remove(reply(req), parent, $0, directory: true) }
    }
    ops.rename = { req, p, n, np, nn, flags in
        named(req, n) { name in named(req, nn) { newName in fs(req).rename(reply(req), p, name, np, newName, flags) } }
    }
    ops.create = { req, parent, name, mode, fi in named(req, name) { fs(req).create(reply(req), parent, $0, mode, fi!) } }
    ops.open = { req, ino, fi in fs(req).open(reply(req), ino, fi!) }
    ops.read = { req, _, size, off, fi in fs(req).read(reply(req), size, off, fi!.pointee.fh) }
    ops.write_buf = { req, _, bufv, off, fi in fs(req).write(reply(req), bufv!, off, fi!.pointee.fh) }
    ops.flush = { req, _, fi in fs(req).flush(reply(req), fi!.pointee.fh) }
    ops.release = { req, _, fi in fs(req).release(fi!.pointee.fh); reply(req).ok() }
    ops.fsync = { req, _, _, fi in fs(req).fsync(reply(req), fi!.pointee.fh) }
    ops.fallocate = { req, _, mode, off, len, fi in fs(req).fallocate(reply(req), mode, off, len, fi!.pointee.fh) }
    ops.lseek = { req, _, off, whence, fi in fs(req).seek(reply(req), off, whence, fi!.pointee.fh) }
    ops.opendir = { req, ino, fi in fs(req).opendir(reply(req), ino, fi!) }
    ops.readdir = { req, ino, size, off, fi in fs(req).readdir(reply(req), ino, size, off, fi!.pointee.fh, plus: false) }
    ops.readdirplus = { req, ino, size, off, fi in fs(req).readdir(reply(req), ino, size, off, fi!.pointee.fh, plus: true) }
    ops.releasedir = { req, _, fi in fs(req).releasedir(fi!.pointee.fh); reply(req).ok() }
    ops.fsyncdir = { req, _, _, _ in reply(req).ok() }
    ops.statfs = { req, _ in fs(req).statfs(reply(req)) }
    // A name that is not valid UTF-8 is refused first, whatever the operation.
    ops.symlink = { req, target, parent, name in named(req, name) { fs(req).symlink(reply(req), parent, $0, target!) } }
    ops.readlink = { req, ino in fs(req).readlink(reply(req), ino) }
    ops.mknod = { req, parent, name, mode, _ in named(req, name) { fs(req).mknod(reply(req), parent, $0, mode) } }
    // No hard links: an item has one place (its parent and name), as on iCloud Drive.
    ops.link = { req, _, _, name in named(req, name) { _ in reply(req).fail(.notPermitted("no hard links")) } }
    ops.getxattr = { req, ino, name, size in
        named(req, name, else: .noAttribute) { fs(req).getxattr(reply(req), ino, $0, size) }
    }
    ops.listxattr = { req, ino, size in fs(req).listxattr(reply(req), ino, size) }
    ops.setxattr = { req, ino, name, value, size, flags in
        named(req, name) { fs(req).setxattr(reply(req), ino, $0, UnsafeRawBufferPointer(start: value, count: size), flags) }
    }
    ops.removexattr = { req, ino, name in named(req, name, else: .noAttribute) { fs(req).removexattr(reply(req), ino, $0) } }
    return ops
}

public struct MountError: Error, CustomStringConvertible {
    public let description: String
}

extension FileSystem {
    /// Mounts at `mountpoint`. Throws a plain message when the kernel refuses.
    public func mount(at mountpoint: String, fsname: String) throws {
        var args = ["ubiquityfs", "-o", "default_permissions,fsname=\(fsname),subtype=ubiquityfs"]
        if getuid() == 0 { args[2] += ",allow_other" }
        var cargs = args.map { strdup($0) }
        defer { cargs.forEach { free($0) } }
        var fargs = fuse_args(argc: Int32(cargs.count), argv: nil, allocated: 0)
        var ops = makeOperations()
        let se: OpaquePointer? = cargs.withUnsafeMutableBufferPointer { buf in
            fargs.argv = buf.baseAddress
            return fuse_session_new(&fargs, &ops, MemoryLayout<fuse_lowlevel_ops>.size,
                                    Unmanaged.passUnretained(self).toOpaque())
        }
        guard let se else { throw MountError(description: "cannot start a FUSE session (is /dev/fuse there?)") }
        if fuse_session_mount(se, mountpoint) != 0 {
            fuse_session_destroy(se)
            throw MountError(description: "cannot mount on \(mountpoint) (see the lines above)")
        }
        // With passthrough asked for and allowed, our io sits between libfuse and /dev/fuse to amend INIT and
        // open replies.
        if passthrough && !FileSystem.mayPassthrough { passthroughRefusal = "the daemon lacks CAP_SYS_ADMIN" }
        if passthrough && passthroughRefusal == nil && ubq_pt_install(se, 1) != 0 {
            passthroughRefusal = "the custom io was refused"
        }
        session = se
    }

    /// Serves requests until the file system is unmounted or a signal ends the loop; then unmounts.
    public func run() {
        guard let se = session else { return }
        fuse_set_signal_handlers(se)
        let rc = ubq_session_loop_mt(se, 10, 64)
        if rc != 0 { log.warning("session loop ended with \(rc)") }
        fuse_remove_signal_handlers(se)
        session = nil
        notifier.sync {}
        fuse_session_unmount(se)
        fuse_session_destroy(se)
    }
}
