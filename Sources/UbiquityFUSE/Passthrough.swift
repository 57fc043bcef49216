// FUSE passthrough (docs/PASSTHROUGH.md): opens of local content handed to the kernel, which then reads and
// writes the content file itself, without read or write requests to us.
//
// What must hold: the kernel refuses (EIO) to mix, on one inode, opens with and without passthrough, and two
// passthrough opens on different backing ids; so per kernel inode either every open handle is ordinary or every
// one is passthrough on the one backing id, registered at the first such open and dropped at the last release.
// A file opened for writing this way is marked dirty at its open (no write reaches us to mark it; undone at
// its release if the content file is as it was at the open, so an open without a write pushes nothing). Its writes
// are found by looking at the content file (its ctime and size against the last look, per handle) at each flush,
// fsync and release of the handle, and before a status is answered (`sync --wait`, `isUploaded`): a change
// found is recorded as one write (dirty again: a push may have begun and ended unaware of it), then the size and
// time are taken from the content file, as after ordinary writes. A flush alone is no write: every close of a
// copy of the descriptor (a child of the writer) sends one.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `Backings` after a content gate, before the
// container's lock.
import CPassthrough
import Foundation
import UbiquityBase
import UbiquityCore

/// What a passthrough writer's content file looked like at the last look: a write since changes its ctime
/// (the kernel stamps it at every write, finer than the clock tick once it was looked at) or its size.
struct ContentStamp: Equatable {
    let seconds: Int, nanoseconds: Int, size: Int64

    init?(_ fd: Int32) {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        seconds = st.st_ctim.tv_sec
        nanoseconds = st.st_ctim.tv_nsec
        size = Int64(st.st_size)
    }
}

/// How one handle was opened, as far as passthrough is concerned (with the backing id it was opened on).
enum OpenMode: Equatable { case uncounted, ordinary, passthrough(Int32) }

/// The open handles of each kernel inode by mode, and the backing ids of inodes opened with passthrough: one per
/// content file (device and inode), since a content file replaced (evicted and fetched again, or a newer version)
/// while the kernel's release of an older open is still on its way must not get the older file's id. By kernel
/// inode, as the kernel counts them: a save by rename makes the new file's inode the saved file's, with the
/// handles open on it (an item id would change under them).
final class Backings: Sendable {
    private struct Backing { let file: (UInt64, UInt64); let id: Int32; var opens: Int }
    /// An open passthrough writer: its content file's stamp at the open and at the last look, and the token
    /// to undo its open's mark if it writes nothing (`Container.openedForUnseenWrites`).
    private struct Writer { let file: FileSystem.OpenFile; let opened: ContentStamp?; var stamp: ContentStamp?; let undo: Int? }
    private struct Table {
        var ordinary: [UInt64: Int] = [:]
        var backing: [UInt64: [Backing]] = [:]
        var writers: [ObjectIdentifier: Writer] = [:]
    }
    private let table = Locked(Table())
    private let connection = Locked<Int32>(-1)

    /// The fd of the session's /dev/fuse, set at the mount (backing ids are registered with it).
    var devFD: Int32 {
        get { connection.withLock { $0 } }
        set { connection.withLock { $0 = newValue } }
    }

    /// Chooses the mode of a new handle `fh` on `fd`, opened on kernel inode `ino`: passthrough when the inode
    /// has no ordinary handle and a backing id can be had and marked on the reply; then `prepare` runs (still
    /// under the lock, so no other open of the inode sees the choice before it is complete) and may refuse by
    /// throwing.
    func choose(_ ino: UInt64, fd: Int32, fh: UInt64, prepare: () throws -> Void) -> OpenMode {
        let devFD = devFD
        return table.withLock { t in
            var st = stat()
            if t.ordinary[ino] == nil, fstat(fd, &st) == 0 {
                let file = (UInt64(st.st_dev), UInt64(st.st_ino))
                var list = t.backing[ino] ?? []
                let known = list.firstIndex { $0.file == file }
                let bid = known.map { list[$0].id } ?? ubq_pt_backing_open(devFD, fd)
                if bid > 0, ubq_pt_mark(fh, bid) == 0, (try? prepare()) != nil {
                    if let known { list[known].opens += 1 } else { list.append(Backing(file: file, id: bid, opens: 1)) }
                    t.backing[ino] = list
                    return .passthrough(bid)
                }
                if bid > 0 { _ = ubq_pt_unmark(fh) }
                if bid > 0 && known == nil { _ = ubq_pt_backing_close(devFD, bid) }
            }
            t.ordinary[ino, default: 0] += 1
            return .ordinary
        }
    }

    /// Records a passthrough writer, with its content file as it is before any write of it.
    func addWriter(_ file: FileSystem.OpenFile, undo: Int?) {
        let stamp = ContentStamp(file.fd.raw)
        let writer = Writer(file: file, opened: stamp, stamp: stamp, undo: undo)
        table.withLock { $0.writers[ObjectIdentifier(file)] = writer }
    }

    /// For a writer being released: the token to undo its open's mark when the content file is as it was at
    /// its open (nothing wrote it since), else nil.
    func untouched(_ file: FileSystem.OpenFile) -> Int? {
        let stamp = ContentStamp(file.fd.raw)
        return table.withLock { t in
            guard let w = t.writers[ObjectIdentifier(file)], stamp != nil, stamp == w.opened else { return nil }
            return w.undo
        }
    }

    /// Whether the writer's content file changed since the last look (which this one now is).
    func changedSinceLastLook(_ file: FileSystem.OpenFile) -> Bool {
        let stamp = ContentStamp(file.fd.raw)
        return table.withLock { t in
            guard let w = t.writers[ObjectIdentifier(file)] else { return false }
            if stamp == w.stamp && stamp != nil { return false }
            t.writers[ObjectIdentifier(file)]?.stamp = stamp
            return true
        }
    }

    /// The open passthrough writers of item `id` (of every item: nil).
    func writers(of id: String?) -> [FileSystem.OpenFile] {
        table.withLock { $0.writers.values.map(\.file).filter { id == nil || $0.id == id } }
    }

    /// Forgets a released handle; the last handle on a backing id drops it.
    func released(_ file: FileSystem.OpenFile) {
        let devFD = devFD
        table.withLock { t in
            t.writers[ObjectIdentifier(file)] = nil
            let ino = file.ino
            switch file.mode {
            case .uncounted: return
            case .ordinary:
                let n = (t.ordinary[ino] ?? 1) - 1
                t.ordinary[ino] = n > 0 ? n : nil
            case .passthrough(let bid):
                guard var list = t.backing[ino], let i = list.firstIndex(where: { $0.id == bid }) else { return }
                list[i].opens -= 1
                if list[i].opens == 0 { list.remove(at: i); _ = ubq_pt_backing_close(devFD, bid) }
                t.backing[ino] = list.isEmpty ? nil : list
            }
        }
    }
}

extension FileSystem {
    /// Whether this mount hands opens of local content to the kernel (asked for, and negotiated at INIT).
    var passthroughOn: Bool { passthrough && passthroughRefusal == nil && ubq_pt_negotiated(backings.devFD) != 0 }

    /// Whether this process may register backing files (FUSE_DEV_IOC_BACKING_OPEN needs CAP_SYS_ADMIN): the
    /// effective capabilities in /proc/self/status.
    static var mayPassthrough: Bool {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
              let caps = UInt64(line.dropFirst("CapEff:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        else { return false }
        return caps & (1 << 21) != 0 // CAP_SYS_ADMIN
    }

    /// At INIT (the kernel's offer read, our reply not yet sent): one log line saying which path I/O takes.
    func sayIOPath() {
        let refusal = !passthrough ? "turned off (--no-passthrough)"
            : passthroughRefusal ?? (ubq_pt_offered(backings.devFD) == 0 ? "the kernel does not offer it (Linux 6.9+)" : nil)
        if let refusal {
            log.info("I/O path: ordinary, through the daemon (FUSE passthrough: \(refusal))")
        } else {
            log.info("I/O path: FUSE passthrough negotiated: local content is read and written by the kernel")
        }
    }

    /// Picks how `file` (handle `fh`, just opened on local content) is served; for passthrough its open reply
    /// gets marked, and a writable file is marked dirty now. Returns whether it is passthrough.
    /// An older local copy served while a newer version waits (an indexer's open) keeps the ordinary path:
    /// the kernel then reads it only up to the newer version's size, which the listing shows.
    /// A writer of a file with a setuid or setgid bit keeps the ordinary path too: its writes must reach the
    /// daemon to clear those bits (FUSE_HANDLE_KILLPRIV_V2: the kernel asks nothing at a passthrough write).
    func choosePassthrough(_ file: OpenFile, _ fh: UInt64) -> Bool {
        guard passthroughOn, file.ino != 0, let item = core.item(file.id), item.isCurrent else { return false }
        if file.writable && item.mode & UInt32(S_ISUID | S_ISGID) != 0 { return false }
        var undo: Int?
        file.mode = backings.choose(file.ino, fd: file.fd.raw, fh: fh) {
            if file.writable { undo = try core.openedForUnseenWrites(file.id) }
        }
        guard case .passthrough = file.mode else { return false }
        if file.writable { file.wrote = true; backings.addWriter(file, undo: undo) }
        return true
    }

    /// A flush of a written handle: its size and time are taken from the content file. A passthrough writer's
    /// writes since the last look reached the content file unseen, possibly after a push that began at its open
    /// had already marked the item clean: the core records them first.
    func flushed(_ file: OpenFile) throws(CoreError) {
        let unseen = wroteUnseen(file)
        try core.flushed(file.id, wroteUnseen: unseen, through: file.fd)
        if unseen { attributesChangedUnseen(file) }
    }

    /// An fsync of a written handle asks for a snapshot, after what a flush records.
    func synced(_ file: OpenFile) throws(CoreError) {
        let unseen = wroteUnseen(file)
        try core.synced(file.id, wroteUnseen: unseen, through: file.fd)
        if unseen { attributesChangedUnseen(file) }
    }

    /// Once what a passthrough writer wrote unseen is recorded (its size, its time: writes through a mapping
    /// too), the kernel, which served those writes itself and keeps the attributes it had, is told to ask for
    /// them again: `stat` after a write through `mmap` and its msync or close shows the new mtime and ctime at
    /// once (xfstests generic/080, 215), not once the attribute timeout has run out.
    private func attributesChangedUnseen(_ file: OpenFile) { itemChanged(file.id, contentChanged: false) }

    /// The release of a file handle, in one core call: what a flush records for a written handle, and for a
    /// passthrough writer that changed nothing (an open for writing without a write, as `touch` makes) the mark
    /// of its open undone, so nothing is pushed for it.
    func released(_ file: OpenFile) throws(CoreError) {
        var release = Container.Release(writable: file.writable, wrote: file.wrote)
        if file.wrote {
            release.wroteUnseen = wroteUnseen(file)
            if case .passthrough = file.mode { release.unchangedSince = backings.untouched(file) }
        }
        try core.release(file.id, through: file.fd, release)
        if release.wroteUnseen { attributesChangedUnseen(file) }
    }

    /// Whether a passthrough writer's content file changed since the last look (which this one now is).
    private func wroteUnseen(_ file: OpenFile) -> Bool {
        guard case .passthrough = file.mode else { return false }
        return backings.changedSinceLastLook(file)
    }

    /// Before a status of item `id` (of the whole mount: the root) is answered: what its passthrough writers
    /// wrote unseen is recorded, so `isUploaded` and `pendingChanges` are true to the bytes.
    func lookAtPassthroughWriters(_ id: String) throws(CoreError) {
        for file in backings.writers(of: id == core.rootID ? nil : id) { try flushed(file) }
    }
}
