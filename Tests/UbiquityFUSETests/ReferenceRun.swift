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
    var files: [String: ModelFile] = [:]
    var handles = [[ModelHandle]](repeating: [], count: RefOp.processes)
    /// Names this device changed since the last sync (the other device's changes avoid them: they would be
    /// conflicts, which the simulation covers).
    var dirtyNames = Set<String>()
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

    func name(_ n: Int) -> String { RefOp.names[n % RefOp.names.count] }

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
        case .close(let p, let h): try close(p, h)
        case .truncate(let n, let size): try truncate(name(n), size)
        case .rename(let f, let t): try rename(name(f), name(t))
        case .unlink(let n): try unlink(name(n))
        case .evict(let n): try evict(name(n))
        case .remoteWrite(let n, let bytes): try remoteWrite(name(n), bytes)
        case .remoteDelete(let n): try remoteDelete(name(n))
        case .remoteRename(let f, let t): try remoteRename(name(f), name(t))
        case .sync: try sync()
        case .network(let up):
            offline = !up
            remote.offline = offline
        case .restart: try restart()
        }
    }

    func create(_ p: Int, _ name: String) throws {
        guard files[name] == nil else { return } // the kernel opens an existing name instead
        let (_, opened) = try expectSuccess("create \(name)", Result { () throws(CoreError) in
            try a.fs.create(1, name, 0o644, .unknown)
        }.mapError { AdapterError.core($0) })
        let content = ModelContent([])
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
        if offline && needsContent && f.local == nil {
            return try expectFailure("open of \(name), not here, offline", result, EIO)
        }
        let opened = try expectSuccess("open \(name) (\(kind))", result)
        if kind == .truncate {
            if let local = f.local { local.truncate(0) } else { f.local = ModelContent([]) }
            f.stale = false
            dirtyNames.insert(name)
        } else if f.local == nil || (needsContent && !offline) {
            f.local = ModelContent(f.remote) // fetched
            f.stale = false
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

    func close(_ p: Int, _ h: Int) throws {
        guard let (i, hd) = handle(p, h) else { return }
        _ = try expectSuccess("flush of \(hd.name)", Result { () throws(CoreError) in try a.fs.flush(hd.fh) }
            .mapError { AdapterError.core($0) })
        a.fs.release(hd.fh)
        handles[p].remove(at: i)
    }

    func truncate(_ name: String, _ size: Int) throws {
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
                if f.local == nil || f.stale { f.local = ModelContent(f.remote) }
                f.local!.truncate(size)
            }
            f.stale = false
            dirtyNames.insert(name)
            files[name] = f
        }
        if attrs.stat.st_size != size { throw violation("truncate \(name) to \(size) shows size \(attrs.stat.st_size)") }
    }

    func rename(_ from: String, _ to: String) throws {
        let done = Answer<Void>()
        a.fs.rename(1, from, 1, to, mode: .replace, waiter: PatientWaiter()) { done.value = $0 }
        guard let f = files[from] else { return try expectFailure("rename of \(from), which is not there", done.value, ENOENT) }
        _ = try expectSuccess("rename \(from) → \(to)", done.value)
        guard from != to else { return }
        files[to] = f
        files[to]?.leftNames.insert(from)
        files[from] = nil
        dirtyNames.formUnion([from, to]) // (a move; its content is as uploaded as it was)
    }

    func unlink(_ name: String) throws {
        let result = Result { () throws(CoreError) in try a.fs.remove(1, name, directory: false) }.mapError { AdapterError.core($0) }
        guard files[name] != nil else { return try expectFailure("unlink of \(name), which is not there", result, ENOENT) }
        _ = try expectSuccess("unlink \(name)", result)
        files[name] = nil
        dirtyNames.insert(name)
    }

    func evict(_ name: String) throws {
        guard let ino = try a.ino(name), let f = files[name] else { return }
        let result = Result { () throws(AdapterError) in
            try a.fs.setxattr(ino, StatusAttribute.prefix + ActionAttribute.evict.rawValue, [], flags: 0)
        }
        guard case .success = result else { return } // refused (EBUSY): allowed, nothing changes
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
        guard try remote(touching: [name], { try b.writeWhole(name, bytes); return true }) else { return }
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
        let done = try remote(touching: [name]) {
            guard b.item(name) != nil else { return false }
            try b.fs.remove(1, name, directory: false)
            return true
        }
        if done { files[name] = nil }
    }

    func remoteRename(_ from: String, _ to: String) throws {
        let done = try remote(touching: [from, to]) {
            guard b.item(from) != nil, from != to else { return false }
            let answer = Answer<Void>()
            b.fs.rename(1, from, 1, to, mode: .replace, waiter: PatientWaiter()) { answer.value = $0 }
            _ = try expectSuccess("the other device's rename", b.settle(answer))
            return true
        }
        if done {
            files[to] = files[from]
            files[from] = nil
        }
    }

    /// Whether `a` downloaded `name`, or replaced (installed) or dropped a stale copy of it: a cache policy,
    /// not a result.
    func reconcile(_ name: String) {
        guard var f = files[name], f.stale || f.local == nil, let item = a.item(name) else { return }
        if item.isCurrent {
            f.local = ModelContent(f.remote)
            f.stale = false
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

    func restart() throws {
        handles = handles.map { _ in [] }
        try a.crash()
    }

    // MARK: checks

    func checkListing() throws {
        let shown = try a.rootNames()
        if shown != files.keys.sorted() { throw violation("the root lists \(shown), the model \(files.keys.sorted())") }
        guard let versions = try a.ino(FileSystem.versionsName) else { throw violation(".versions is missing") }
        let dir = try a.fs.opendir(versions)
        defer { a.fs.releasedir(dir.fh) }
        let listed = a.fs.listing(dir.fh).count - 2
        if listed != 0 { throw violation(".versions lists \(listed) entries: a conflict where none can be") }
    }

    /// After a sync with nothing open for writing: the other device has every name with this one's bytes.
    func checkConverged() throws {
        guard !handles.joined().contains(where: \.writable) else { return }
        let names = try b.rootNames()
        if names != files.keys.sorted() { throw violation("after a sync the other device lists \(names), the model \(files.keys.sorted())") }
        for (name, f) in files {
            guard let item = b.item(name) else { throw violation("the other device has no \(name)") }
            if item.remoteSHA != sha(f.visible) && !(f.visible.isEmpty && item.remoteSize == 0) {
                throw violation("after a sync the remote holds other bytes for \(name) than \(text(f.visible))")
            }
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
        }
    }

    func sha(_ bytes: [UInt8]) -> String {
        var h = SHA256Hasher()
        h.update(bytes)
        return h.finalizeHex()
    }

    /// Bytes as text, zeros (holes) as `.`.
    func text(_ bytes: [UInt8]) -> String { "\"" + String(decoding: bytes.map { $0 == 0 ? 46 : $0 }, as: UTF8.self) + "\"" }
}
