// One run of a reference-model sequence (ReferenceModel.swift): device `a` is the mount under test, device `b`
// the other device whose changes arrive; both on one MemoryRemote, stepped on the test's thread.
import Foundation
import Glibc
@testable import UbiquityFUSE
import UbiquityBase
@_spi(Simulation) import UbiquityCore
import UbiquityTesting

final class RefRun {
    let remote = MemoryRemote()
    let base: String
    let a: RefDevice
    let b: RefDevice
    /// Files by path, and the folders there are.
    var files: [String: ModelFile] = [:]
    var dirs = Set<String>()
    var handles = [[ModelHandle]](repeating: [], count: RefOp.processes)
    /// Names this device changed since the last sync (the other device's changes avoid them: they would be
    /// conflicts, which only the `conflict` step makes, on purpose, once all is synced).
    var dirtyNames = Set<String>()
    /// Files and folders removed here since the last sync or restart, with their item ids: their deletes may
    /// still be kept back (Store.keptBack), and a crash then brings them back whole.
    var removedSince: [String: (id: String, file: ModelFile?)] = [:]
    /// The key-value store's values, as text, by key.
    var kv: [String: [UInt8]] = [:]
    /// The network is down: nothing reaches the remote, and content that is not here cannot be had.
    var offline = false
    var step = 0

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/ubiquity-ref-XXXXXX").utf8CString)
        base = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        a = try RefDevice("a", dir: base + "/a", remote: remote)
        b = try RefDevice("b", dir: base + "/b", remote: remote)
    }

    deinit { try? FileManager.default.removeItem(atPath: base) }

    /// Runs `ops` and the final check; the first violation, or nil.
    static func check(_ ops: [RefOp]) -> RefViolation? {
        do {
            let run = try RefRun()
            do {
                try run.run(ops)
                return nil
            } catch let v as RefViolation {
                return v
            } catch {
                return RefViolation(step: run.step, what: "unexpected error: \(error)")
            }
        } catch {
            return RefViolation(step: -1, what: "the devices did not open: \(error)")
        }
    }

    /// The shortest sub-list of `ops` found that still fails (one step left out at a time, while it fails).
    static func shrink(_ ops: [RefOp], _ violation: RefViolation) -> [RefOp] {
        var ops = Array(ops.prefix(max(violation.step + 1, 1)))
        var i = 0
        while i < ops.count {
            var candidate = ops
            candidate.remove(at: i)
            if let v = check(candidate) { ops = Array(candidate.prefix(max(v.step + 1, 1))) } else { i += 1 }
        }
        return ops
    }

    func run(_ ops: [RefOp]) throws {
        for (i, op) in ops.enumerated() {
            step = i
            try apply(op)
            // A step that waited for content ran every download asked for, other files' too (a file open for
            // reading asks for its new version): whatever they installed is in the model before the next step.
            for name in files.keys { reconcile(name) }
            try checkListing()
        }
        step = ops.count
        try finalCheck()
    }

    func violation(_ what: String) -> RefViolation { RefViolation(step: step, what: what) }

    /// The value of an answer that must succeed.
    func expectSuccess<T>(_ what: String, _ result: Result<T, AdapterError>?) throws -> T {
        switch result {
        case .success(let value)?: return value
        case .failure(let e)?: throw violation("\(what) failed: \(e) (errno \(e.errno))")
        case nil: throw violation("\(what) was never answered")
        }
    }

    func expectFailure<T>(_ what: String, _ result: Result<T, AdapterError>?, _ errno: Int32) throws {
        switch result {
        case .failure(let e)? where e.errno == errno: return
        default: throw violation("\(what): expected errno \(errno), got \(String(describing: result))")
        }
    }

    func name(_ n: Int) -> String { RefOp.files[n % RefOp.files.count] }
    func xattrKey(_ k: Int) -> String { RefOp.xattrKeys[k % RefOp.xattrKeys.count] }
    func dir(_ n: Int) -> String { RefOp.dirs[n % RefOp.dirs.count] }

    /// The folder of a path ("" for the root).
    func folder(_ path: String) -> String { path.split(separator: "/").dropLast().joined(separator: "/") }

    /// Whether the folder of `path` exists (a path in a missing folder is refused by the kernel's walk before
    /// any request: the step does nothing).
    func inPlace(_ path: String) -> Bool { folder(path).isEmpty || dirs.contains(folder(path)) }

    /// Every path the model has, folders too.
    var allPaths: [String] { (Array(files.keys) + Array(dirs)).sorted() }

    /// The handle `h` of process `p` (nil: it holds none).
    func handle(_ p: Int, _ h: Int) -> (Int, ModelHandle)? {
        let list = handles[p % handles.count]
        guard !list.isEmpty else { return nil }
        return (h % list.count, list[h % list.count])
    }

    /// The name of the file whose local content `content` is counts as changed here.
    func changed(_ content: ModelContent) {
        for (name, f) in files where f.local === content {
            dirtyNames.insert(name)
        }
    }

    /// Whether a writable handle is open on the file under `name`.
    func hasWriter(_ name: String) -> Bool {
        guard let local = files[name]?.local else { return false }
        return handles.joined().contains { $0.writable && $0.content === local }
    }

    // MARK: steps

    func apply(_ op: RefOp) throws {
        switch op {
        case .create(let p, let n): try create(p, name(n))
        case .open(let p, let n, let kind): try open(p, name(n), kind)
        case .interruptedOpen(let p, let n, let kind): try open(p, name(n), kind, interrupted: true)
        case .write(let p, let h, let offset, let bytes): try write(p, h, offset, bytes)
        case .read(let p, let h): try read(p, h)
        case .status(let n): try status(name(n))
        case .close(let p, let h): try close(p, h)
        case .truncate(let n, let size): try truncate(name(n), size)
        case .rename(let f, let t): try rename(name(f), name(t))
        case .unlink(let n): try unlink(name(n))
        case .evict(let n): try evict(name(n))
        case .remoteWrite(let n, let bytes): try remoteWrite(name(n), bytes)
        case .remoteDelete(let n): try remoteDelete(name(n))
        case .remoteRename(let f, let t): try remoteRename(name(f), name(t))
        case .mkdir(let d): try mkdir(dir(d))
        case .rmdir(let d): try rmdir(dir(d))
        case .moveDir(let f, let t): try moveDir(dir(f), dir(t))
        case .remoteMoveDir(let f, let t): try remoteMoveDir(dir(f), dir(t))
        case .setXattr(let n, let k, let v): try setXattr(name(n), xattrKey(k), v)
        case .removeXattr(let n, let k): try removeXattr(name(n), xattrKey(k))
        case .remoteSetXattr(let n, let k, let v): try remoteSetXattr(name(n), xattrKey(k), v)
        case .xattrs(let n): try checkXattrs(name(n))
        case .conflict(let n, let here, let there): try conflict(n, here, there)
        case .resolve(let n, let promote): try resolve(n, promote: promote)
        case .sync: try sync()
        case .network(let up):
            offline = !up
            remote.offline = offline
        case .restart: try restart()
        case .kvWrite(let k, let bytes): try kvWrite(RefOp.kvKeys[k % RefOp.kvKeys.count], bytes)
        case .kvRemove(let k): try kvRemove(RefOp.kvKeys[k % RefOp.kvKeys.count])
        case .kvRead(let k): try kvRead(RefOp.kvKeys[k % RefOp.kvKeys.count])
        }
    }

    func create(_ p: Int, _ name: String) throws {
        guard files[name] == nil, inPlace(name) else { return } // the kernel opens an existing name instead
        guard let (parent, leaf) = try a.place(name) else { throw violation("the folder of \(name) is not found") }
        let (_, opened) = try expectSuccess("create \(name)", Result { () throws(CoreError) in
            try a.fs.create(parent, leaf, 0o644, .unknown)
        }.mapError { AdapterError.core($0) })
        let content = ModelContent([])
        content.unclosedNew = true
        files[name] = ModelFile(local: content, remote: [])
        dirtyNames.insert(name)
        handles[p].append(ModelHandle(fh: opened.fh, content: content, writable: true, name: name))
    }

    func open(_ p: Int, _ name: String, _ kind: RefOp.OpenKind, interrupted: Bool = false) throws {
        let flags: Int32 = kind == .read ? O_RDONLY : kind == .readWrite ? O_RDWR : O_WRONLY | O_TRUNC
        let waiter: Waiter = interrupted ? InterruptedWaiter() : PatientWaiter()
        let result = try a.open(name, flags: flags, waiter: waiter)
        guard var f = files[name] else { return try expectFailure("open of \(name), which is not there", result, ENOENT) }
        // (Empty content needs no download.)
        let needsContent = kind != .truncate && (f.local == nil ? !f.remote.isEmpty : f.stale)
        if interrupted && needsContent {
            if let result { throw violation("an interrupted open of \(name) was answered: \(result)") }
            return reconcile(name) // the transfer went on, and may have installed the newest version
        }
        if offline && needsContent && (f.local == nil || kind == .readWrite) {
            // Not here; or an older copy, which opens to read only (written, it would go up over the newer).
            return try expectFailure("open of \(name), not here or older, offline", result, EIO)
        }
        let opened = try expectSuccess("open \(name) (\(kind))", result)
        if !a.inodeHasOneContentFile(opened.fh) {
            throw violation("\(name) was opened on an inode whose other handles hold another content file")
        }
        if kind == .truncate {
            if let local = f.local { local.truncate(0) } else { f.local = ModelContent([]) }
            f.stale = false
            dirtyNames.insert(name)
        } else if f.local == nil || (needsContent && !offline) {
            install(&f) // fetched
        } // (offline, a stale copy is served: the newest cannot be had)
        files[name] = f
        handles[p].append(ModelHandle(fh: opened.fh, content: f.local!, writable: kind != .read, name: name))
    }

    func write(_ p: Int, _ h: Int, _ offset: Int, _ bytes: [UInt8]) throws {
        guard let (_, hd) = handle(p, h) else { return }
        let result = Result { () throws(AdapterError) in try a.fs.write(hd.fh, WriteData(bytes), at: off_t(offset)) }
        guard hd.writable else { return try expectFailure("write through a read-only handle", result, EBADF) }
        let n = try expectSuccess("write to \(hd.name)", result)
        if n != bytes.count { throw violation("write to \(hd.name) wrote \(n) of \(bytes.count) bytes") }
        hd.content.write(bytes, at: offset)
        changed(hd.content)
    }

    func read(_ p: Int, _ h: Int) throws {
        guard let (_, hd) = handle(p, h) else { return }
        let got = try a.read(hd.fh)
        if got != hd.content.bytes {
            throw violation("a handle on \(hd.name) reads \(text(got)), the model says \(text(hd.content.bytes))")
        }
    }

    /// The status attributes say what the model knows: here or not, current or an older copy, no conflict,
    /// and uploaded once a sync took it (and nothing changed it here since).
    func status(_ name: String) throws {
        guard inPlace(name), let ino = try a.ino(name), let f = files[name] else { return }
        func value(_ attribute: StatusAttribute) throws -> String {
            String(decoding: try a.fs.getxattr(ino, attribute.fullName), as: UTF8.self)
        }
        let downloading = f.local == nil ? "notDownloaded" : f.stale ? "downloaded" : "current"
        let shown = try value(.downloadingStatus)
        if shown != downloading { throw violation("\(name) shows downloadingStatus \(shown), the model \(downloading)") }
        let conflicted = f.conflicts.isEmpty ? "0" : "1"
        if try value(.hasUnresolvedConflicts) != conflicted {
            throw violation("\(name) shows hasUnresolvedConflicts \(try value(.hasUnresolvedConflicts)), the model \(conflicted)")
        }
        if !dirtyNames.contains(name) && !hasWriter(name), try value(.isUploaded) != "1" {
            throw violation("\(name) is not shown uploaded, though a sync took it and nothing changed it since")
        }
    }

    func close(_ p: Int, _ h: Int) throws {
        guard let (i, hd) = handle(p, h) else { return }
        _ = try expectSuccess("flush of \(hd.name)", Result { () throws(CoreError) in try a.fs.flush(hd.fh) }
            .mapError { AdapterError.core($0) })
        a.fs.release(hd.fh)
        handles[p].remove(at: i)
        if hd.writable { hd.content.unclosedNew = false }
    }

    func truncate(_ name: String, _ size: Int) throws {
        guard inPlace(name) else { return }
        guard let ino = try a.ino(name) else {
            if files[name] != nil { throw violation("\(name) is not found") }
            return
        }
        guard var f = files[name] else { throw violation("\(name) is found, the model has no such name") }
        let answer = Answer<Attributes>()
        var changes = AttributeChanges()
        changes.size = Int64(size)
        a.fs.setattr(ino, changes, fh: nil, waiter: PatientWaiter()) { answer.value = $0 }
        if offline && size != 0 && size != f.visible.count && (f.local == nil ? !f.remote.isEmpty : f.stale) {
            return try expectFailure("truncate of \(name), not here, offline", a.settle(answer), EIO)
        }
        let attrs = try expectSuccess("truncate \(name) to \(size)", a.settle(answer))
        if size != f.visible.count {
            if size == 0, let local = f.local {
                local.truncate(0)
            } else if size == 0 {
                f.local = ModelContent([])
            } else {
                if f.local == nil || f.stale { install(&f) }
                f.local!.truncate(size)
            }
            f.stale = false
            dirtyNames.insert(name)
            files[name] = f
        }
        if attrs.stat.st_size != size { throw violation("truncate \(name) to \(size) shows size \(attrs.stat.st_size)") }
    }

    func rename(_ from: String, _ to: String) throws {
        // (Over a file in conflict: whether it keeps its versions depends on whether this is a save by rename.)
        guard inPlace(from), inPlace(to), files[to]?.conflicts.isEmpty != false else { return }
        let result = try a.rename(from, to)
        guard let f = files[from] else { return try expectFailure("rename of \(from), which is not there", result, ENOENT) }
        _ = try expectSuccess("rename \(from) → \(to)", result)
        guard from != to else { return }
        files[to] = f
        files[to]?.leftNames.insert(from)
        files[from] = nil
        dirtyNames.formUnion([from, to]) // (a move; its content is as uploaded as it was)
    }

    func unlink(_ name: String) throws {
        guard inPlace(name) else { return }
        let id = a.item(name)?.id
        let result = try a.remove(name, directory: false)
        guard files[name] != nil else { return try expectFailure("unlink of \(name), which is not there", result, ENOENT) }
        _ = try expectSuccess("unlink \(name)", result)
        if let id { removedSince[name] = (id, files[name]) }
        files[name] = nil
        dirtyNames.insert(name)
    }

    /// Whether `path` is `dir` or below it.
    func isBelow(_ path: String, _ dir: String) -> Bool { path == dir || path.hasPrefix(dir + "/") }

    func mkdir(_ dir: String) throws {
        // (The kernel refuses an existing name, or a missing folder, before any request.)
        guard !dirs.contains(dir), inPlace(dir) else { return }
        guard let (parent, leaf) = try a.place(dir) else { throw violation("the folder of \(dir) is not found") }
        _ = try expectSuccess("mkdir \(dir)", Result { () throws(CoreError) in try a.fs.mkdir(parent, leaf, 0o755, .unknown) }
            .mapError { AdapterError.core($0) })
        dirs.insert(dir)
        dirtyNames.insert(dir)
    }

    func rmdir(_ dir: String) throws {
        guard dirs.contains(dir) else { return }
        let id = a.item(dir)?.id
        let result = try a.remove(dir, directory: true)
        if allPaths.contains(where: { folder($0) == dir }) {
            return try expectFailure("rmdir of \(dir), which is not empty", result, ENOTEMPTY)
        }
        _ = try expectSuccess("rmdir \(dir)", result)
        if let id { removedSince[dir] = (id, nil) }
        dirs.remove(dir)
        dirtyNames.insert(dir)
    }

    /// A folder renamed onto a free name whose folder exists; into itself: EINVAL.
    func moveDir(_ from: String, _ to: String) throws {
        guard dirs.contains(from), !dirs.contains(to), files[to] == nil, inPlace(to), from != to else { return }
        let result = try a.rename(from, to)
        if isBelow(to, from) { return try expectFailure("a move of \(from) into itself", result, EINVAL) }
        _ = try expectSuccess("rename of the folder \(from) → \(to)", result)
        let moved = moveFolder(from, to)
        dirtyNames.formUnion(moved.flatMap { [$0, $1] })
        for (old, new) in moved { files[new]?.leftNames.insert(old) }
    }

    /// The model's folder `from` becomes `to`, with everything below it; returns the old and new paths moved
    /// (the folder's own included).
    @discardableResult
    func moveFolder(_ from: String, _ to: String) -> [(String, String)] {
        func renamed(_ path: String) -> String { isBelow(path, from) ? to + path.dropFirst(from.count) : path }
        let moved = allPaths.filter { isBelow($0, from) }.map { ($0, renamed($0)) }
        let entries = moved.compactMap { (old, new) in files[old].map { (new, $0) } }
        for (old, _) in moved { files[old] = nil }
        for (new, f) in entries { files[new] = f }
        dirs = Set(dirs.map(renamed))
        dirtyNames = Set(dirtyNames.map(renamed))
        return moved
    }

    func evict(_ name: String) throws {
        guard inPlace(name), let ino = try a.ino(name), let f = files[name] else { return }
        let result = a.setxattr(ino, StatusAttribute.prefix + ActionAttribute.evict.rawValue, [])
        guard case .success? = result else { return } // refused (EBUSY): allowed, nothing changes
        // Lossy when what is here is not what the remote holds (a change not uploaded), or a program writes it.
        if hasWriter(name) || (f.local != nil && !f.stale && f.local!.bytes != f.remote) {
            throw violation("\(name) was evicted with changes not uploaded (or open for writing)")
        }
        files[name]?.local = nil
        files[name]?.stale = false
    }

    /// A change made on the other device reaches this one: `b` catches up and makes it (`change` returns false
    /// when it has nothing to change), pushes it, and `a` pulls. Skipped when it touches a name changed here
    /// since the last sync or a file open for writing here.
    func remote(touching names: [String], _ change: () throws -> Bool) throws -> Bool {
        guard !offline, names.allSatisfy({ !dirtyNames.contains($0) && !hasWriter($0) }) else { return false }
        try b.pullAll()
        guard try change() else { return false }
        if let failure = b.pushAll() { throw violation("the other device: \(failure)") }
        try a.pullAll()
        return true
    }

    func remoteWrite(_ name: String, _ bytes: [UInt8]) throws {
        let done = try remote(touching: [name, folder(name)]) {
            guard try b.place(name) != nil else { return false }
            try b.writeWhole(name, bytes)
            return true
        }
        guard done else { return }
        if var f = files[name] {
            f.remote = bytes
            f.stale = f.local.map { $0.bytes != bytes } ?? false
            files[name] = f
        } else {
            files[name] = ModelFile(local: nil, remote: bytes)
        }
        reconcile(name)
    }

    func remoteDelete(_ name: String) throws {
        let done = try remote(touching: [name, folder(name)]) {
            guard b.item(name) != nil else { return false }
            _ = try expectSuccess("the other device's unlink", try b.remove(name, directory: false))
            return true
        }
        if done { files[name] = nil }
    }

    func remoteRename(_ from: String, _ to: String) throws {
        guard files[to]?.conflicts.isEmpty != false else { return }
        let done = try remote(touching: [from, to, folder(from), folder(to)]) {
            guard b.item(from) != nil, from != to, try b.place(to) != nil else { return false }
            _ = try expectSuccess("the other device's rename", try b.rename(from, to))
            return true
        }
        if done {
            files[to] = files[from]
            files[from] = nil
        }
    }

    /// The other device renames a folder. Only the two folder names must be unchanged here: what this device
    /// changed inside the folder (a write, a rename, a create, an unlink) must land inside it at its new name.
    func remoteMoveDir(_ from: String, _ to: String) throws {
        guard !isBelow(to, from) else { return }
        let done = try remote(touching: [from, to, folder(to)]) {
            guard b.item(from)?.isDirectory == true, b.item(to) == nil, try b.place(to) != nil else { return false }
            _ = try expectSuccess("the other device's rename of a folder", try b.rename(from, to))
            return true
        }
        if done { moveFolder(from, to) }
    }

    // MARK: conflict versions

    /// Both devices write a file while they miss each other (once all is synced; the `n`th of the files nobody
    /// here holds open and that have no conflict yet): the write with the later time wins everywhere, the other
    /// is kept as a conflict version on both devices.
    func conflict(_ n: Int, _ here: [UInt8], _ there: [UInt8]) throws {
        // Everything else synced first: the pushes below take every change here along.
        guard !offline, here != there else { return }
        try sync()
        guard dirtyNames.isEmpty else { return }
        let eligible = files.keys.sorted().filter { files[$0].map { $0.conflicts.isEmpty && !isHeld($0) } == true }
        guard !eligible.isEmpty else { return }
        let name = eligible[n % eligible.count]
        var f = files[name]!
        // (A write of the bytes the file holds already changes nothing, and makes no conflict.)
        guard here != f.remote, there != f.remote else { return }
        try b.pullAll()
        try a.writeWhole(name, here)
        try b.writeWhole(name, there)
        if let failure = b.pushAll() { throw violation("the other device: \(failure)") }
        for _ in 0..<2 {
            _ = a.pushAll()
            try b.pullAll()
            _ = b.pushAll()
            try a.pullAll()
        }
        guard let item = a.item(name) else { throw violation("\(name) is gone after a conflict") }
        let (winner, loser) = item.remoteSHA == sha(there) ? (there, here) : (here, there)
        if item.remoteSHA != sha(winner) { throw violation("after a conflict \(name) holds neither write") }
        f.local = f.local ?? ModelContent([])
        f.local!.bytes = here
        f.remote = winner
        f.stale = winner != here
        f.conflicts = [loser]
        files[name] = f
        reconcile(name)
    }

    /// Whether a handle here holds the file's local content.
    func isHeld(_ f: ModelFile) -> Bool {
        guard let local = f.local else { return false }
        return handles.joined().contains { $0.content === local }
    }

    /// The names of the conflict versions of `name` under `.versions` (past versions left out).
    func conflictVersions(_ name: String) throws -> [String] {
        guard let ino = try a.ino(WireRules.versionsFolder + "/" + name) else { return [] }
        let dir = try a.fs.opendir(ino)
        defer { a.fs.releasedir(dir.fh) }
        return try a.fs.listing(dir.fh, from: 0).map(\.name).filter { $0 != "." && $0 != ".." && !$0.contains(" (v") }
    }

    /// What a conflict version of `name` reads.
    func readVersion(_ name: String, _ version: String) throws -> [UInt8] {
        let opened = try expectSuccess("the open of the version \(version)", try a.open(WireRules.versionsFolder + "/" + name + "/" + version, flags: O_RDONLY))
        defer { a.fs.release(opened.fh) }
        return try a.read(opened.fh)
    }

    /// `mv` of a conflict version onto its file (it becomes the file's content, a change here) or `rm` of it;
    /// of the `n`th file in conflict.
    func resolve(_ n: Int, promote: Bool) throws {
        let conflicted = files.keys.sorted().filter { files[$0]?.conflicts.isEmpty == false }
        guard !offline, !conflicted.isEmpty else { return }
        let name = conflicted[n % conflicted.count]
        var f = files[name]!
        guard let version = try conflictVersions(name).first else { throw violation("\(name) lists no conflict version") }
        let bytes = try readVersion(name, version)
        guard let at = f.conflicts.firstIndex(of: bytes) else {
            throw violation("the conflict version of \(name) reads \(text(bytes)), the model \(f.conflicts.map(text))")
        }
        let path = WireRules.versionsFolder + "/" + name + "/" + version
        if promote {
            if isHeld(f) { return }
            _ = try expectSuccess("mv of \(version) onto \(name)", try a.rename(path, name))
            f.local = ModelContent(bytes)
            f.stale = false
        } else {
            _ = try expectSuccess("rm of \(version)", try a.remove(path, directory: false))
        }
        f.conflicts.remove(at: at)
        files[name] = f
        dirtyNames.insert(name)
    }

    // MARK: user extended attributes

    /// The inode of `name` when the model has the file there; nil when neither has it (a violation when only
    /// one of them does).
    func fileIno(_ name: String) throws -> UInt64? {
        guard inPlace(name) else { return nil }
        let ino = try a.ino(name)
        if (ino != nil) != (files[name] != nil) {
            throw violation(ino == nil ? "\(name) is not found" : "\(name) is found, the model has no such name")
        }
        return ino
    }

    func setXattr(_ name: String, _ key: String, _ value: [UInt8]) throws {
        guard let ino = try fileIno(name) else { return }
        _ = try expectSuccess("setxattr \(key) of \(name)", a.setxattr(ino, key, value))
        files[name]?.xattrs[key] = value
        dirtyNames.insert(name)
    }

    func removeXattr(_ name: String, _ key: String) throws {
        guard let ino = try fileIno(name) else { return }
        let result = Result { () throws(CoreError) in try a.fs.removexattr(ino, key) }.mapError { AdapterError.core($0) }
        guard files[name]?.xattrs[key] != nil else {
            return try expectFailure("removexattr \(key) of \(name), which has none", result, ENODATA)
        }
        _ = try expectSuccess("removexattr \(key) of \(name)", result)
        files[name]?.xattrs[key] = nil
        dirtyNames.insert(name)
    }

    func remoteSetXattr(_ name: String, _ key: String, _ value: [UInt8]) throws {
        let done = try remote(touching: [name, folder(name)]) {
            guard b.item(name)?.kind == .file, let ino = try b.ino(name) else { return false }
            _ = try expectSuccess("the other device's setxattr", b.setxattr(ino, key, value))
            return true
        }
        if done { files[name]?.xattrs[key] = value }
    }

    /// listxattr and getxattr of a file's user attributes here say what the model says.
    func checkXattrs(_ name: String) throws {
        guard let ino = try fileIno(name), let f = files[name] else { return }
        let shown = try a.userXattrs(ino)
        if shown != f.xattrs { throw violation("\(name) shows the attributes \(shown), the model \(f.xattrs)") }
    }

    /// The newest version installed here. A local copy that programs hold open for reading only, and whose new
    /// version only adds bytes at its end (a log appended on another device), takes them in place, so its
    /// readers read them through their descriptors (`tail -F`; Container.appendInPlace); otherwise the new
    /// version is a new content, and the handles keep the one they opened.
    func install(_ f: inout ModelFile) {
        let holders = f.local.map { local in handles.joined().filter { $0.content === local } } ?? []
        if let local = f.local, f.stale, !holders.isEmpty, !holders.contains(where: \.writable),
           f.remote.count > local.bytes.count, f.remote.starts(with: local.bytes) {
            local.bytes = f.remote
        } else {
            f.local = ModelContent(f.remote)
        }
        f.stale = false
    }

    /// Whether `a` downloaded `name`, or replaced (installed) or dropped a stale copy of it: a cache policy,
    /// not a result.
    func reconcile(_ name: String) {
        guard var f = files[name], f.stale || f.local == nil, let item = a.item(name) else { return }
        if item.isCurrent {
            install(&f)
        } else if !item.hasLocal {
            f.local = nil
            f.stale = false
        }
        files[name] = f
    }

    /// Both devices push and pull, twice. A push may fail only while a program writes here: a file being
    /// written is not pushed, and a push that needs it to go first (its old name) waits for it, failing
    /// meanwhile. Then nothing counts as synced.
    func sync() throws {
        if offline { // pushes fail and are kept for later; nothing is synced
            _ = a.pushAll()
            return
        }
        var failure: String?
        for _ in 0..<2 {
            failure = a.pushAll()
            try b.pullAll()
            if let failure = b.pushAll() { throw violation("the other device: \(failure)") }
            try a.pullAll()
        }
        removedSince = [:] // the push wrote every delete kept back first
        let writing = Set(files.keys.filter(hasWriter))
        if let failure {
            if writing.isEmpty { throw violation(failure) }
            dirtyNames.formUnion(files.keys)
            return
        }
        dirtyNames = []
        for (name, f) in files {
            if writing.contains(name) { // not pushed: its moves neither
                dirtyNames.formUnion(f.leftNames.union([name]))
                continue
            }
            files[name]?.leftNames = []
            files[name]?.remote = f.visible
        }
        for name in files.keys { reconcile(name) }
        try checkConverged()
    }

    /// A kill -9 and a start: what was closed survives; a file created and not closed may be lost (whether it
    /// is depends on what else wrote the store meanwhile), and then it is gone from the model too.
    func restart() throws {
        handles = handles.map { _ in [] }
        try a.crash()
        let shown = Set(try a.allPaths())
        for (name, f) in files where f.local?.unclosedNew == true {
            f.local?.unclosedNew = false
            // Its name stays changed here until a sync: what the name held before may have a delete to push.
            if !shown.contains(name) { files[name] = nil }
        }
        // A delete not written yet is lost: the item is back under its name, as it was.
        for (name, removed) in removedSince where a.item(name)?.id == removed.id {
            if let file = removed.file { files[name] = file } else { dirs.insert(name) }
        }
        removedSince = [:]
    }

    // MARK: the key-value store

    func kvPath(_ key: String, typed: Bool = false) -> String {
        WireRules.keyValueFolder + (typed ? "/.json/" : "/") + key
    }

    func isTooLong(_ key: String) -> Bool { key.utf8.count > KVLimits.maxKeyBytes }

    /// A key's file written whole: its bytes become the key's value; a key too long is refused at the lookup.
    func kvWrite(_ key: String, _ bytes: [UInt8]) throws {
        do {
            try a.writeWhole(kvPath(key), bytes)
        } catch let e as CoreError where isTooLong(key) && e == .nameTooLong {
            return
        }
        if isTooLong(key) { throw violation("a key of \(key.utf8.count) bytes was written") }
        kv[key] = bytes
    }

    func kvRemove(_ key: String) throws {
        let result = try a.remove(kvPath(key), directory: false)
        if isTooLong(key) { return try expectFailure("rm of a key too long", result, ENAMETOOLONG) }
        guard kv[key] != nil else { return try expectFailure("rm of \(key), which has no value", result, ENOENT) }
        _ = try expectSuccess("rm of \(key)", result)
        kv[key] = nil
    }

    /// Both folders list the keys there are, and a key reads as its text and, under `.json`, as its value.
    func kvRead(_ key: String) throws {
        try checkKeyValueListings()
        for typed in [false, true] {
            let path = kvPath(key, typed: typed)
            let found: UInt64?
            do { found = try a.ino(path) } catch let e as CoreError where isTooLong(key) && e == .nameTooLong { continue }
            guard let bytes = kv[key] else {
                if found != nil { throw violation("\(path) is found, the model has no such key") }
                continue
            }
            guard let ino = found else { throw violation("\(path) is not found") }
            let opened = try expectSuccess("the open of \(path)", try a.open(path, flags: O_RDONLY))
            let got = try a.read(opened.fh)
            a.fs.release(opened.fh)
            let size = try a.fs.getattr(ino).stat.st_size
            if size != got.count { throw violation("\(path) shows size \(size) and reads \(got.count) bytes") }
            if !typed && got != bytes { throw violation("\(path) reads \(text(got)), the model says \(text(bytes))") }
            if typed, (try? JSONDecoder().decode(KVValue.self, from: Data(got))) != KVValue(text: bytes) {
                throw violation("\(path) reads \(text(got)), not the value of \(text(bytes))")
            }
        }
    }

    /// `.kvstore` lists `.json`, `.changes` and the keys; `.kvstore/.json` the keys.
    func checkKeyValueListings() throws {
        for typed in [false, true] {
            let folder = WireRules.keyValueFolder + (typed ? "/.json" : "")
            guard let ino = try a.ino(folder) else { throw violation("\(folder) is missing") }
            let dir = try a.fs.opendir(ino)
            let listed = try a.fs.listing(dir.fh, from: 0).map(\.name).filter { $0 != "." && $0 != ".." }
            a.fs.releasedir(dir.fh)
            let expected = (typed ? [] : [".json", ".changes"]) + kv.keys.sorted()
            if listed != expected { throw violation("\(folder) lists \(listed), the model \(expected)") }
        }
    }

    // MARK: checks

    func checkListing() throws {
        let shown = try a.allPaths()
        if shown != allPaths { throw violation("the mount lists \(shown), the model \(allPaths)") }
        guard let versions = try a.ino(WireRules.versionsFolder) else { throw violation(".versions is missing") }
        let dir = try a.fs.opendir(versions)
        defer { a.fs.releasedir(dir.fh) }
        let listed = Set(try a.fs.listing(dir.fh, from: 0).map(\.name)).subtracting([".", ".."])
        let expected = Set(files.filter { !$0.value.conflicts.isEmpty }.keys.map { String($0.split(separator: "/")[0]) })
        if listed != expected { throw violation(".versions lists \(listed.sorted()), the model's conflicts lead to \(expected.sorted())") }
    }

    /// After a sync with nothing open for writing: the other device has every name with this one's bytes.
    func checkConverged() throws {
        guard !handles.joined().contains(where: \.writable) else { return }
        let names = try b.allPaths()
        if names != allPaths { throw violation("after a sync the other device lists \(names), the model \(allPaths)") }
        for (name, f) in files {
            guard let item = b.item(name) else { throw violation("the other device has no \(name)") }
            if item.remoteSHA != sha(f.visible) && !(f.visible.isEmpty && item.remoteSize == 0) {
                throw violation("after a sync the remote holds other bytes for \(name) than \(text(f.visible))")
            }
            if Set(item.conflicts.map(\.sha256)) != Set(f.conflicts.map(sha)) {
                throw violation("after a sync the other device has \(item.conflicts.count) conflict versions of \(name), the model \(f.conflicts.count)")
            }
            let theirs = item.xattrs.filter { RefOp.xattrKeys.contains($0.key) }
            if theirs != f.xattrs { throw violation("after a sync the other device has the attributes \(theirs) on \(name), the model \(f.xattrs)") }
        }
    }

    /// Every handle closed, two syncs: each name reads what the model says, here and on the remote.
    func finalCheck() throws {
        offline = false
        remote.offline = false
        for (p, list) in handles.enumerated() { for _ in list { try close(p, 0) } }
        try sync()
        for (name, f) in files.sorted(by: { $0.key < $1.key }) {
            let opened = try expectSuccess("the final open of \(name)", try a.open(name, flags: O_RDONLY))
            let got = try a.read(opened.fh)
            a.fs.release(opened.fh)
            if got != f.visible { throw violation("at the end \(name) reads \(text(got)), the model says \(text(f.visible))") }
            try checkXattrs(name)
            let versions = try conflictVersions(name).map { try readVersion(name, $0) }
            if versions.sorted(by: { $0.lexicographicallyPrecedes($1) }) != f.conflicts.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                throw violation("at the end the conflict versions of \(name) read \(versions.map(text)), the model \(f.conflicts.map(text))")
            }
        }
        for key in RefOp.kvKeys { try kvRead(key) }
    }

    func sha(_ bytes: [UInt8]) -> String {
        var h = SHA256Hasher()
        h.update(bytes)
        return h.finalizeHex()
    }

    /// Bytes as text, zeros (holes) as `.`.
    func text(_ bytes: [UInt8]) -> String { "\"" + String(decoding: bytes.map { $0 == 0 ? 46 : $0 }, as: UTF8.self) + "\"" }
}
