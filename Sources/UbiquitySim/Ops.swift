// The steps of the scheduler: local operations through the same Container calls the FUSE adapter makes
// (createFile, then open + willWrite + write the content file + flushed + closed, and so on), and the
// background work (pull, push, download) one unit at a time, plus partitions, heals and crashes.
//
// What must hold: a step changes a device only through the Container's public calls, in the adapter's order
// (an open counts a handle until `closed`; `willWrite` before bytes reach a content file, as `Container.write`
// does for the adapter, and for a file held open across steps `Container.write` itself, since a snapshot may
// come between its writes; `flushed` after), or writes a content file directly where a program holding a
// descriptor would. Every choice is drawn
// from `World.rng`, and the model is told of each deliberate change (`recordContent`, `recordDelete`) as it is
// made, so the checks compare devices with what was really done.
import Foundation
import UbiquityBase
@_spi(Simulation) import UbiquityCore
#if canImport(Glibc)
import Glibc
#endif

let fileNames = ["a.txt", "b.txt", "c.md", "notes", "e.txt"]
let dirNames = ["x", "y", "z"]

extension World {
    func short(_ id: String) -> String { String(id.prefix(6)) }

    /// Live items below Documents (Documents included when `withDocuments`), depth first by name.
    func live(_ dev: SimDevice, withDocuments: Bool = false) -> [Item] {
        var out: [Item] = []
        func walk(_ id: String) {
            for item in (try? dev.container.list(id)) ?? [] {
                out.append(item)
                if item.isDirectory { walk(item.id) }
            }
        }
        if withDocuments, let d = dev.container.item(WireRules.documentsID) { out.append(d) }
        walk(WireRules.documentsID)
        return out
    }

    func pickFile(_ dev: SimDevice) throws -> Item {
        guard let f = rng.pick(live(dev).filter { !$0.isDirectory }) else { throw Skip(why: "no file") }
        return f
    }

    func pickDir(_ dev: SimDevice) throws -> Item {
        guard let d = rng.pick(live(dev, withDocuments: true).filter(\.isDirectory)) else { throw Skip(why: "no dir") }
        return d
    }

    func pickConflicted(_ dev: SimDevice) throws -> (Item, WireConflict) {
        guard let f = rng.pick(live(dev).filter { !$0.conflicts.isEmpty }), let c = rng.pick(f.conflicts) else {
            throw Skip(why: "no conflict")
        }
        return (f, c)
    }

    /// Unique bytes for a write: device, sequence number, then filler.
    func newBytes(_ dev: SimDevice) -> [UInt8] {
        newTag(dev) + [UInt8](repeating: UInt8(97 + rng.int(26)), count: rng.int(80))
    }

    /// The tag that makes a write's content unique: device and sequence number.
    func newTag(_ dev: SimDevice) -> [UInt8] {
        model.writeCounter += 1
        return Array("\(dev.name)\(model.writeCounter);".utf8)
    }

    /// `count` bytes from the generator: where content-defined chunks are cut depends on them.
    func noise(_ count: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count + 8)
        while out.count < count { withUnsafeBytes(of: rng.next()) { out += $0 } }
        return Array(out.prefix(count))
    }

    /// The kernel stamps a written file with the (virtual) time of the write.
    func stamp(_ path: String) {
        let t = timespec(tv_sec: Int(clock.now / 1_000_000_000), tv_nsec: Int(clock.now % 1_000_000_000))
        var times = [t, t]
        _ = utimensat(AT_FDCWD, path, &times, 0)
    }

    /// The content the device shows for a file now.
    func viewSHA(_ dev: SimDevice, _ item: Item) -> String {
        if item.dirty && item.hasLocal, let (sha, _) = try? sha256OfFile(dev.container.contentPath(item.id)) { return sha }
        return item.remoteSHA
    }

    /// The device deliberately replaces the item's current content (and, with `conflicts`, its conflict versions).
    func supersede(_ dev: SimDevice, _ item: Item, conflicts: Bool) {
        guard let item = dev.container.item(item.id) ?? Optional(item) else { return }
        if !item.isDirectory { model.superseded.insert(Model.key(item.id, viewSHA(dev, item))) }
        if conflicts { for c in item.conflicts { model.superseded.insert(Model.key(item.id, c.sha256)) } }
    }

    /// Records the content a file holds now as closed/flushed by this device.
    func recordContent(_ dev: SimDevice, _ id: String, _ what: String) {
        guard let item = dev.container.item(id), item.hasLocal,
              let (sha, _) = try? sha256OfFile(dev.container.contentPath(id)) else { return }
        model.written.append(.init(item: id, sha: sha, device: dev.name, step: stepIndex, what: what))
    }

    /// Records a deliberate operation of the device on an item, and through it on every directory above it
    /// here: the operation keeps the item against a delete it had not seen (edit wins), and with it each
    /// directory that holds it (deleting those took deleting the item first).
    func deliberate(_ dev: SimDevice, _ id: String) {
        dev.openReads[id]?.changedHere = true
        model.op(dev.name, id, step: stepIndex)
        guard let via = dev.container.item(id)?.parent else { return }
        var dir: String? = via
        while let d = dir, d != WireRules.rootID {
            model.op(dev.name, d, step: stepIndex, child: id, via: via)
            dir = dev.container.item(d)?.parent
        }
    }

    /// Records a delete; the caller superseded what the device showed before it deleted.
    func recordDelete(_ dev: SimDevice, _ item: Item) throws {
        let feed: String?
        do { feed = try dev.container.feedPosition } catch { throw DeviceFailed(device: dev.name, cause: "\(error)") }
        model.deletes.append(.init(item: item.id, device: dev.name, step: stepIndex, sawVersion: item.remoteVersion,
                                   feed: Int64(feed ?? "0") ?? 0))
    }

    /// open(2) of a file without O_TRUNC: the content must be current first (fetched if need be). The handle
    /// stays counted until `closed`.
    func openFile(_ dev: SimDevice, _ id: String, writable: Bool) throws -> FileDescriptor {
        let c = dev.container!
        if case .opened(let fd) = try c.open(id, writable: writable, truncate: false) { return fd }
        if case .failure(let e) = c.downloadOnce(id) { throw Skip(why: "open failed: \(e)") }
        guard case .opened(let fd) = try c.open(id, writable: writable, truncate: false, noDownload: true) else {
            throw Skip(why: "still not local")
        }
        return fd
    }

    /// Makes the content current, as an open and close would.
    func ensureLocal(_ dev: SimDevice, _ id: String) throws {
        release(dev.container, id, try openFile(dev, id, writable: false), writable: false)
    }

    /// close(2) as the adapter makes it: the core's `release` (an error of which the adapter only logs: the
    /// close is done), then the descriptor closed.
    func release(_ c: Container, _ id: String, _ fd: FileDescriptor, writable: Bool) {
        try? c.release(id, through: fd, .init(writable: writable))
        fd.close()
    }

    /// A program writes a whole file: open(O_WRONLY|O_TRUNC), write, close.
    func writeWhole(_ dev: SimDevice, _ id: String, _ bytes: [UInt8]) throws {
        let c = dev.container!
        guard case .opened(let fd) = try c.open(id, writable: true, truncate: true) else {
            throw Skip(why: "not ready")
        }
        defer { release(c, id, fd, writable: true) }
        try writeThroughTheGate(c, id, fd, bytes, at: 0)
        stamp(dev.container.contentPath(id))
        try c.flushed(id)
    }

    /// A deliberate write of new bytes over the whole file, recorded as closed content.
    func writeNew(_ dev: SimDevice, _ id: String, _ what: String) throws -> String {
        deliberate(dev, id)
        let bytes = newBytes(dev)
        try writeWhole(dev, id, bytes)
        recordContent(dev, id, what)
        return "\(dev.container.path(of: id)) [\(short(id))] \(bytes.count) bytes"
    }

    /// Ends a write left open by `beginWrite`: a last append, then close.
    func finishWrite(_ dev: SimDevice, _ id: String) throws -> String {
        let c = dev.container!
        guard let fd = dev.openWrites.removeValue(forKey: id) else { throw Skip(why: "not open") }
        dev.openReads[id]?.changedHere = true
        defer { release(c, dev.releasedAs.removeValue(forKey: id) ?? id, fd, writable: true) }
        let bytes = newBytes(dev)
        guard let item = c.item(id), try writesTheItem(fd, c, id) else {
            try writeThroughTheGate(c, id, fd, bytes, at: nil)
            return "the file it opened is deleted: +\(bytes.count) bytes there, closed"
        }
        supersede(dev, item, conflicts: false)
        // A new edit: a snapshot may have taken the file's earlier writes up, and another device seen them.
        deliberate(dev, id)
        try writeThroughTheGate(c, id, fd, bytes, at: nil)
        stamp(c.contentPath(id))
        try c.flushed(id)
        recordContent(dev, id, "endWrite")
        return "\(c.path(of: id)) +\(bytes.count) bytes, closed"
    }

    /// True while the descriptor is on the item's content file (not on the copy a delete moved aside, which the
    /// item, revived by an edit elsewhere, no longer has).
    func writesTheItem(_ fd: FileDescriptor, _ c: Container, _ id: String) throws -> Bool {
        var st = stat()
        guard stat(c.contentPath(id), &st) == 0 else { return false }
        let held = try fd.stat()
        return held.st_ino == st.st_ino && held.st_dev == st.st_dev
    }

    func perform(_ kind: StepKind, _ dev: SimDevice) throws -> String {
        if kind == .crash { return try restart(dev) }
        let c = dev.container!
        switch kind {
        case .create: return try createFile(dev, c)
        case .mkdir: return try makeDirectory(dev, c)
        case .write: return try overwriteFile(dev)
        case .append: return try appendToFile(dev, c)
        case .truncate: return try truncateFile(dev, c)
        case .beginWrite: return try beginWrite(dev, c)
        case .endWrite: return try endWrite(dev)
        case .rename, .move: return try renameOrMove(dev, c, move: kind == .move)
        case .delete, .rmdir: return try removeItem(dev, c, directory: kind == .rmdir)
        case .chmod: return try changeMode(dev, c)
        case .evict: return try evictFile(dev, c)
        case .pin: return try setPinned(dev, c)
        case .discard: return try discardConflict(dev, c)
        case .promote: return try promoteConflict(dev, c)
        case .keepCurrent: return try keepCurrent(dev, c)
        case .pull: return try pullPages(c)
        case .push: return pushSome(c)
        case .download: return try downloadOne(dev, c)
        case .holdRead: return try holdRead(dev, c)
        case .endRead: return try endRead(dev)
        case .exchange: return try exchangeItems(dev, c)
        case .fsync: return try fsyncWrite(dev)
        case .moveInto: return try moveIntoMovedFolder(dev, c)
        case .edit: return try editFile(dev, c)
        case .grow: return try growFile(dev, c)
        case .partition:
            dev.link.partitioned = true
            return "link down"
        case .heal:
            dev.link.partitioned = false
            return "link up"
        case .crash:
            fatalError("handled above")
        case .moveAcross:
            throw Skip(why: "a run of one container")
        }
    }

    // MARK: one function per step kind

    /// A crash of the daemon: nothing may hold the old container (its store lock goes with it, as with a dead
    /// process), and the device opens again from its store.
    func restart(_ dev: SimDevice) throws -> String {
        for fd in dev.openWrites.values { fd.close() }
        dev.openWrites = [:]
        for held in dev.openReads.values { held.fd.close() }
        dev.openReads = [:]
        dev.releasedAs = [:]
        // A delete kept back (not written yet: Store.keptBack) is lost with the crash, as an unlink of the last
        // second is: the item comes back whole. It was never made, for the model.
        if let c = dev.container {
            model.deletes.removeAll { $0.device == dev.name && c.keepsDeleteBack($0.item) }
        }
        dev.container = nil
        dev.restarts += 1
        do { try open(dev) } catch { throw DeviceFailed(device: dev.name, cause: "it did not open again: \(error)") }
        return "restarted from the store"
    }

    func createFile(_ dev: SimDevice, _ c: Container) throws -> String {
        let parent = try pickDir(dev)
        let name = rng.pick(fileNames)!
        // As a program does (open with O_CREAT, then close): the create's rows are kept back until that close.
        let (item, fd) = try c.createAndOpen(parent: parent.id, name: name, mode: 0o644)
        defer { fd.close() }
        try c.release(item.id, through: fd, .init(writable: true))
        return try writeNew(dev, item.id, "create")
    }

    func makeDirectory(_ dev: SimDevice, _ c: Container) throws -> String {
        let parent = try pickDir(dev)
        let item = try c.makeDirectory(parent: parent.id, name: rng.pick(dirNames)!, mode: 0o755)
        deliberate(dev, item.id)
        return "\(c.path(of: item.id)) [\(short(item.id))]"
    }

    /// A program writes a whole file: `target` (when it is a file here), or one picked.
    func overwriteFile(_ dev: SimDevice, _ target: String? = nil) throws -> String {
        let f = try target.flatMap { id in dev.container.item(id).flatMap { $0.kind == .file ? $0 : nil } } ?? pickFile(dev)
        supersede(dev, f, conflicts: false)
        return try writeNew(dev, f.id, "write")
    }

    func appendToFile(_ dev: SimDevice, _ c: Container) throws -> String {
        try writeInPlace(dev, c, "append") { fd in
            let bytes = newBytes(dev)
            try fd.writeAll(bytes.withUnsafeBytes { $0 }, at: Int64(try fd.stat().st_size))
            return "+\(bytes.count) bytes"
        }
    }

    /// A program changes a few bytes inside a file (open, pwrite of a new tag, close): in chunks, only those
    /// around the bytes change.
    func editFile(_ dev: SimDevice, _ c: Container) throws -> String {
        try writeInPlace(dev, c, "edit") { fd in
            let tag = newTag(dev)
            let size = Int64(try fd.stat().st_size)
            let offset = Int64(rng.int(Int(max(size - Int64(tag.count), 0)) + 1))
            try tag.withUnsafeBytes { try fd.writeAll($0, at: offset) }
            return "\(tag.count) bytes at \(offset) of \(size)"
        }
    }

    /// A program appends a large block to a file: a new tag and bytes from the generator, with a run of zeros
    /// in it (chunks of zeros only are holes), or written past the end (a hole of the file), or neither. Files
    /// grow past a small chunk format's threshold this way.
    func growFile(_ dev: SimDevice, _ c: Container) throws -> String {
        try writeInPlace(dev, c, "grow") { fd in
            var block = newTag(dev) + noise(128 + rng.int(1920))
            let size = Int64(try fd.stat().st_size)
            var at = size
            var shape = ""
            switch rng.int(3) {
            case 0:
                let zeros = 64 + rng.int(1024)
                block.insert(contentsOf: [UInt8](repeating: 0, count: zeros), at: rng.int(block.count + 1))
                shape = ", \(zeros) of them zeros"
            case 1:
                at += Int64(4096 + rng.int(8192))
                shape = " after a hole of \(at - size)"
            default: break
            }
            try block.withUnsafeBytes { try fd.writeAll($0, at: at) }
            return "+\(block.count) bytes\(shape), at \(at)"
        }
    }

    /// A program opens a file for writing and changes it in place (`write`, given the open descriptor, says
    /// what it did), then closes it: the content is recorded as `what` made it.
    private func writeInPlace(_ dev: SimDevice, _ c: Container, _ what: String,
                              _ write: (FileDescriptor) throws -> String) throws -> String {
        let f = try pickFile(dev)
        let fd = try openFile(dev, f.id, writable: true)
        defer { release(c, f.id, fd, writable: true) }
        supersede(dev, f, conflicts: false)
        deliberate(dev, f.id)
        let done = try c.write(f.id, through: fd) { Result { try write(fd) } }.get()
        stamp(c.contentPath(f.id))
        try c.flushed(f.id)
        recordContent(dev, f.id, what)
        return "\(c.path(of: f.id)) [\(short(f.id))] \(done)"
    }

    func truncateFile(_ dev: SimDevice, _ c: Container) throws -> String {
        let f = try pickFile(dev)
        let size = Int64(rng.int(Int(f.size) + 1))
        if size != 0 { try ensureLocal(dev, f.id) }
        supersede(dev, f, conflicts: false)
        deliberate(dev, f.id)
        _ = try c.setAttributes(f.id, size: size, mode: nil, mtime: nil, atime: nil, owner: nil)
        recordContent(dev, f.id, "truncate")
        return "\(c.path(of: f.id)) [\(short(f.id))] to \(size)"
    }

    /// A program starts writing and keeps the file open across steps (`endWrite` closes it).
    func beginWrite(_ dev: SimDevice, _ c: Container) throws -> String {
        let f = try pickFile(dev)
        if dev.openWrites[f.id] != nil { throw Skip(why: "already open") }
        let fd = try openFile(dev, f.id, writable: true)
        supersede(dev, f, conflicts: false)
        deliberate(dev, f.id)
        dev.openWrites[f.id] = fd
        let bytes = newBytes(dev)
        let offset = Int64(rng.int(Int(c.currentSize(c.item(f.id) ?? f)) + 1))
        try writeThroughTheGate(c, f.id, fd, bytes, at: offset)
        stamp(dev.container.contentPath(f.id))
        return "\(c.path(of: f.id)) [\(short(f.id))] \(bytes.count) bytes at \(offset), left open"
    }

    /// One write(2) of a program into a file it holds open, as the adapter makes it (`Container.write`: dirty,
    /// a new content generation, never halfway through a snapshot); at `offset`, or appended when nil.
    func writeThroughTheGate(_ c: Container, _ id: String, _ fd: FileDescriptor, _ bytes: [UInt8],
                             at offset: Int64?) throws {
        try c.write(id, through: fd) {
            Result {
                let at = try offset ?? Int64(fd.stat().st_size)
                try bytes.withUnsafeBytes { try fd.writeAll($0, at: at) }
            }
        }.get()
    }

    /// A program writes more into a file it holds open and calls fsync(2): a snapshot of what it holds now is
    /// due, and that content must reach the remote unless this device replaces it later (its next write).
    func fsyncWrite(_ dev: SimDevice) throws -> String {
        let c = dev.container!
        guard let id = rng.pick(dev.openWrites.keys.sorted()), let fd = dev.openWrites[id] else {
            throw Skip(why: "nothing open")
        }
        guard let item = c.item(id), try writesTheItem(fd, c, id) else {
            throw Skip(why: "the file it opened is deleted")
        }
        supersede(dev, item, conflicts: false)
        deliberate(dev, id)
        let bytes = newBytes(dev)
        let offset = Int64(rng.int(Int(c.currentSize(item)) + 1))
        try writeThroughTheGate(c, id, fd, bytes, at: offset)
        stamp(c.contentPath(id))
        try c.synced(id)
        recordContent(dev, id, "fsync")
        return "\(c.path(of: id)) [\(short(id))] \(bytes.count) bytes at \(offset), fsynced"
    }

    /// A rename into a folder that this device moved and has not pushed yet (another device may move it too,
    /// or delete it, meanwhile).
    func moveIntoMovedFolder(_ dev: SimDevice, _ c: Container) throws -> String {
        let all = live(dev)
        guard let folder = rng.pick(all.filter { $0.isDirectory && $0.isPending && $0.remoteVersion > 0 }) else {
            throw Skip(why: "no folder moved here")
        }
        var above: Set<String> = []
        var cur: String? = folder.id
        while let id = cur { above.insert(id); cur = c.item(id)?.parent }
        let movable = all.filter { !above.contains($0.id) && $0.parent != folder.id }
        guard let item = rng.pick(movable) else { throw Skip(why: "nothing to move") }
        let from = c.path(of: item.id)
        try c.rename(parent: item.parent!, name: item.name, newParent: folder.id, newName: item.name, noReplace: true)
        deliberate(dev, item.id)
        return "\(from) -> \(c.path(of: item.id)) [\(short(item.id))]"
    }

    func endWrite(_ dev: SimDevice) throws -> String {
        guard let id = rng.pick(dev.openWrites.keys.sorted()) else { throw Skip(why: "nothing open") }
        return try finishWrite(dev, id)
    }

    /// A program opens a file for reading, reads it all and keeps it open across steps: remote versions,
    /// evictions and renames may come meanwhile (`endRead` reads it again and closes it).
    func holdRead(_ dev: SimDevice, _ c: Container) throws -> String {
        let f = try pickFile(dev)
        if dev.openReads[f.id] != nil { throw Skip(why: "already held") }
        let fd = try openFile(dev, f.id, writable: false)
        let bytes: [UInt8]
        do { bytes = try readAll(fd) } catch { release(c, f.id, fd, writable: false); throw error }
        dev.openReads[f.id] = HeldRead(fd: fd, sha: sha256Hex(bytes), size: bytes.count)
        return "\(c.path(of: f.id)) [\(short(f.id))] \(bytes.count) bytes, held open"
    }

    func endRead(_ dev: SimDevice) throws -> String {
        guard let id = rng.pick(dev.openReads.keys.sorted()) else { throw Skip(why: "nothing held") }
        return try finishRead(dev, id)
    }

    /// Reads a held file again from its start and closes it. Unless this device changed the file since, the
    /// descriptor must read what it read at its open, whatever came from elsewhere or was evicted, or that
    /// followed by more (a newer version that extends it is appended in place, for `tail -f`): a violation of
    /// the run otherwise.
    func finishRead(_ dev: SimDevice, _ id: String) throws -> String {
        guard let held = dev.openReads.removeValue(forKey: id) else { return "not held" }
        defer { release(dev.container, dev.releasedAs.removeValue(forKey: id) ?? id, held.fd, writable: false) }
        let bytes = try readAll(held.fd)
        if !held.changedHere && (bytes.count < held.size || sha256Hex(Array(bytes.prefix(held.size))) != held.sha) {
            readViolations.append("held reader: [\(short(id))] on \(dev.name) read other bytes at #\(stepIndex) than at its open")
        }
        return "[\(short(id))] \(bytes.count) bytes again, closed"
    }

    /// The whole file through a descriptor, from its start.
    func readAll(_ fd: FileDescriptor) throws -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buf.withUnsafeMutableBytes { pread(fd.raw, $0.baseAddress, $0.count, off_t(out.count)) }
            if n < 0 { throw Errno.current }
            if n == 0 { return out }
            out += buf[0..<n]
        }
    }

    /// renameat2(RENAME_EXCHANGE) of two items of the device (files, folders, or one of each).
    func exchangeItems(_ dev: SimDevice, _ c: Container) throws -> String {
        let items = live(dev)
        guard let a = rng.pick(items), let b = rng.pick(items.filter { $0.id != a.id }) else {
            throw Skip(why: "fewer than two items")
        }
        let (pa, pb) = (c.path(of: a.id), c.path(of: b.id))
        try c.exchange(parent: a.parent!, name: a.name, newParent: b.parent!, newName: b.name)
        deliberate(dev, a.id)
        deliberate(dev, b.id)
        return "\(pa) [\(short(a.id))] <-> \(pb) [\(short(b.id))]"
    }

    /// A rename to a new name in the same folder, or (`move`) a move under its own name to another folder;
    /// either may replace what bears that name there.
    func renameOrMove(_ dev: SimDevice, _ c: Container, move: Bool) throws -> String {
        guard let item = rng.pick(live(dev)) else { throw Skip(why: "nothing") }
        var newParent = item.parent!
        var newName = rng.pick(item.isDirectory ? dirNames : fileNames)!
        if move {
            newParent = try pickDir(dev).id
            newName = item.name
        }
        let target = c.lookup(parent: newParent, name: newName)
        let noReplace = rng.chance(0.5)
        let from = c.path(of: item.id)
        if let target, target.id != item.id, !noReplace { supersede(dev, target, conflicts: true) }
        if let saved = try c.rename(parent: item.parent!, name: item.name, newParent: newParent, newName: newName,
                                    noReplace: noReplace) {
            return "\(from) " + savedByRename(dev, saved)
        }
        deliberate(dev, item.id)
        if let target, target.id != item.id { try recordDelete(dev, target) }
        return "\(from) -> \(c.path(of: item.id)) [\(short(item.id))]\(target.map { $0.id != item.id ? " replacing [\(short($0.id))]" : "" } ?? "")"
    }

    /// unlink(2) of a file, or rmdir(2) of a directory (`directory`).
    func removeItem(_ dev: SimDevice, _ c: Container, directory: Bool) throws -> String {
        let pool = live(dev).filter { $0.isDirectory == directory }
        guard let item = rng.pick(pool) else { throw Skip(why: "nothing") }
        return try remove(dev, c, item, directory: directory)
    }

    /// unlink(2) or rmdir(2) of `item`.
    func remove(_ dev: SimDevice, _ c: Container, _ item: Item, directory: Bool) throws -> String {
        let path = c.path(of: item.id)
        supersede(dev, item, conflicts: true)
        if let saved = try c.remove(parent: item.parent!, name: item.name, directory: directory) {
            return "\(path) [\(short(item.id))], the backup of " + savedByRename(dev, saved)
        }
        try recordDelete(dev, item)
        return "\(path) [\(short(item.id))]"
    }

    /// A save by rename (Container.rename and remove): the kept file goes on with the new file's content, an
    /// edit of it; what was written to the new file, and what of it was replaced since, is the kept file's now.
    func savedByRename(_ dev: SimDevice, _ saved: SavedOver) -> String {
        for i in model.written.indices where model.written[i].item == saved.new { model.written[i].item = saved.kept }
        let prefix = Model.key(saved.new, "")
        for key in model.superseded where key.hasPrefix(prefix) {
            model.superseded.insert(Model.key(saved.kept, String(key.dropFirst(prefix.count))))
        }
        // A program's descriptors on the new file are on the kept one now (the core moved their handles).
        if let fd = dev.openWrites.removeValue(forKey: saved.new) { dev.openWrites[saved.kept] = fd }
        if let held = dev.openReads.removeValue(forKey: saved.new) { dev.openReads[saved.kept] = held }
        // Its release may still name the new file (it raced the save): half the time it does.
        let held = dev.openWrites[saved.kept] != nil || dev.openReads[saved.kept] != nil
        if let named = dev.releasedAs.removeValue(forKey: saved.new) ?? (held && rng.chance(0.5) ? saved.new : nil) {
            dev.releasedAs[saved.kept] = named
        }
        deliberate(dev, saved.kept)
        return "saved over \(dev.container.path(of: saved.kept)) [\(short(saved.kept))], new [\(short(saved.new))]"
    }

    func changeMode(_ dev: SimDevice, _ c: Container) throws -> String {
        guard let item = rng.pick(live(dev)) else { throw Skip(why: "nothing") }
        let mode = rng.pick(item.isDirectory ? [0o755, 0o700, 0o750] : [0o644, 0o600, 0o640])!
        _ = try c.setAttributes(item.id, mode: UInt32(mode), mtime: nil)
        deliberate(dev, item.id)
        return "\(c.path(of: item.id)) [\(short(item.id))] mode \(String(mode, radix: 8))"
    }

    func evictFile(_ dev: SimDevice, _ c: Container) throws -> String {
        let f = try pickFile(dev)
        try c.evict(f.id)
        return "\(c.path(of: f.id)) [\(short(f.id))]"
    }

    func setPinned(_ dev: SimDevice, _ c: Container) throws -> String {
        guard let item = rng.pick(live(dev)) else { throw Skip(why: "nothing") }
        let on = rng.chance(0.6)
        try c.setPinned(item.id, on)
        return "\(c.path(of: item.id)) [\(short(item.id))] \(on ? "on" : "off")"
    }

    func discardConflict(_ dev: SimDevice, _ c: Container) throws -> String {
        let (f, conflict) = try pickConflicted(dev)
        model.superseded.insert(Model.key(f.id, conflict.sha256))
        try c.discardConflict(f.id, conflict.id)
        model.resolve(conflict.id, dev.name, stepIndex)
        deliberate(dev, f.id)
        return "\(c.path(of: f.id)) [\(short(f.id))] conflict \(conflict.id)"
    }

    /// Makes a conflict version the current content (fetching it first when it is not local).
    func promoteConflict(_ dev: SimDevice, _ c: Container) throws -> String {
        let (f, conflict) = try pickConflicted(dev)
        if !c.hasLocalConflict(f.id, conflict.id),
           case .failure(let e) = c.downloadOnce(f.id + "." + conflict.id) {
            throw Skip(why: "fetch of the conflict version failed: \(e)")
        }
        supersede(dev, f, conflicts: false)
        try c.promoteConflict(f.id, conflict.id)
        model.resolve(conflict.id, dev.name, stepIndex)
        deliberate(dev, f.id)
        recordContent(dev, f.id, "promote")
        return "\(c.path(of: f.id)) [\(short(f.id))] conflict \(conflict.id)"
    }

    func keepCurrent(_ dev: SimDevice, _ c: Container) throws -> String {
        let (f, _) = try pickConflicted(dev)
        for cv in f.conflicts { model.superseded.insert(Model.key(f.id, cv.sha256)); model.resolve(cv.id, dev.name, stepIndex) }
        try c.resolveKeepingCurrent(f.id)
        deliberate(dev, f.id)
        return "\(c.path(of: f.id)) [\(short(f.id))] \(f.conflicts.count) resolved"
    }

    /// Up to three pages of the feed.
    func pullPages(_ c: Container) throws -> String {
        var pages = 0
        while pages < 3 {
            pages += 1
            if try !c.pullOnce() { break }
        }
        return "\(pages) page(s), at \(try c.feedPosition ?? "-")"
    }

    /// One to three units of push work, stopping at the first idle.
    func pushSome(_ c: Container) -> String {
        var done: [String] = []
        for _ in 0..<(1 + rng.int(3)) {
            switch c.pushOnce() {
            case .idle: done.append("idle")
            case .pushed(let id): done.append("pushed [\(short(id))]")
            case .failed(let id, let e): done.append("[\(short(id))] failed: \(e)")
            }
            if done.last == "idle" { break }
        }
        return done.joined(separator: "; ")
    }

    /// The first requested download, or else a file whose content is not current here.
    func downloadOne(_ dev: SimDevice, _ c: Container) throws -> String {
        let wanted = c.requestedDownloads
        let key: String
        if let first = wanted.first { key = first } else {
            guard let f = rng.pick(live(dev).filter { !$0.isDirectory && !$0.isCurrent && $0.remoteVersion > 0 })
            else { throw Skip(why: "nothing to fetch") }
            key = f.id
        }
        switch c.downloadOnce(key) {
        case .success: return "[\(short(key))] ok"
        case .failure(let e): return "[\(short(key))] failed: \(e)"
        }
    }
}
