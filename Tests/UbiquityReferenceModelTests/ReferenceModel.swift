// A reference model of the mount, as mountpoint-s3's reference tests have one: random sequences of
// operations from several processes on one device (open, read, write, O_TRUNC, truncate, rename, unlink,
// evict, close, user extended attributes), with changes arriving from a second device, conflicts made on purpose
// and resolved with `mv` or `rm` of the version, syncs, and crashes with a restart. Each operation
// goes to the adapter's own operations (FileSystem, with its answers as values), as the kernel would send it,
// and to a model of what a POSIX file system plus the sync rules must show; every answer and every byte read is
// compared with the model. Both devices are stepped on the test's thread (no background threads), so a
// sequence always runs the same way, and a failing one is shrunk to a short op-list kept as a regression.
//
// The model: a name leads to a file; a file has a local content (an object shared by the handles opened on
// it, as an inode's pages are) or none (evicted, or not downloaded yet), and the bytes the remote holds. A
// newer version from elsewhere leaves the local content stale until it is downloaded; a handle keeps the
// content it opened when a new version is installed, the file is evicted, deleted or renamed over; a write
// or O_TRUNC changes that content in place for every handle that shares it. What the model cannot know, it
// asks the device about without trusting its answers for the bytes: whether a stale copy was replaced or
// dropped (a cache policy), and whether an eviction was refused (allowed; a lossy one is a violation).
import Foundation
import Glibc
@testable import UbiquityFUSE
import UbiquityBase
@_spi(Simulation) import UbiquityCore
import UbiquityTesting

/// One step of a sequence. Paths, processes and handles are small indexes, taken modulo what exists when the
/// step runs, so that any sub-list of a sequence (shrinking) is still a sequence. `name` indexes `files` (paths
/// of files, in the root and in folders two deep), `dir` indexes `dirs`.
enum RefOp: Equatable, CustomStringConvertible {
    enum OpenKind: Equatable { case read, readWrite, truncate }

    case create(p: Int, name: Int)
    case open(p: Int, name: Int, OpenKind)
    /// An open whose process is interrupted (a signal) while it waits for content: EINTR, the transfer goes on.
    case interruptedOpen(p: Int, name: Int, OpenKind)
    case write(p: Int, h: Int, offset: Int, bytes: [UInt8])
    case read(p: Int, h: Int)
    /// `getfattr` of the status attributes: whether it is here, current, uploaded, in conflict.
    case status(name: Int)
    case close(p: Int, h: Int)
    case truncate(name: Int, size: Int)
    case rename(from: Int, to: Int)
    case unlink(name: Int)
    case evict(name: Int)
    /// The other device writes the whole file (creating it when it has no such name).
    case remoteWrite(name: Int, bytes: [UInt8])
    case remoteDelete(name: Int)
    case remoteRename(from: Int, to: Int)
    case mkdir(dir: Int)
    case rmdir(dir: Int)
    /// A folder renamed (with what is in it), onto a name that is free.
    case moveDir(from: Int, to: Int)
    /// The other device renames a folder: it may race this device's changes inside it.
    case remoteMoveDir(from: Int, to: Int)
    /// setxattr(2) of a user attribute (`key` indexes `xattrKeys`) on a file.
    case setXattr(name: Int, key: Int, value: [UInt8])
    /// removexattr(2) of a user attribute: ENODATA where it is not set.
    case removeXattr(name: Int, key: Int)
    /// The other device sets a user attribute on a file.
    case remoteSetXattr(name: Int, key: Int, value: [UInt8])
    /// listxattr(2) and getxattr(2) of a file's user attributes.
    case xattrs(name: Int)
    /// Both devices write a synced file while they miss each other: one write wins, the other is kept as a
    /// conflict version under `.versions` on both.
    case conflict(name: Int, here: [UInt8], there: [UInt8])
    /// A conflict version made current (`mv` onto its file) or discarded (`rm`).
    case resolve(name: Int, promote: Bool)
    /// Both devices push and pull until nothing is left.
    case sync
    /// The network goes down or comes back (for both devices).
    case network(up: Bool)
    /// The daemon is killed and started again from its store: every handle is gone.
    case restart
    /// `echo -n BYTES > .kvstore/KEY` (`key` indexes `kvKeys`, whose last is one byte too long for a key).
    case kvWrite(key: Int, bytes: [UInt8])
    /// `rm .kvstore/KEY`.
    case kvRemove(key: Int)
    /// `ls` of `.kvstore` and `.kvstore/.json`, and `cat` of the key in both.
    case kvRead(key: Int)

    static let files = ["a", "b", "d/a", "d/b", "e/a", "d/e/a", "e/d/a"]
    /// Folders, two of them inside the others: a folder moves into another one and back.
    static let dirs = ["d", "e", "d/e", "e/d"]
    static let processes = 2
    static let xattrKeys = ["user.k0", "user.k1"]
    static let kvKeys = ["k0", "k1", String(repeating: "k", count: KVLimits.maxKeyBytes + 1)]

    var description: String {
        switch self {
        case .create(let p, let n): return ".create(p: \(p), name: \(n))"
        case .open(let p, let n, let k): return ".open(p: \(p), name: \(n), .\(k))"
        case .interruptedOpen(let p, let n, let k): return ".interruptedOpen(p: \(p), name: \(n), .\(k))"
        case .write(let p, let h, let o, let b): return ".write(p: \(p), h: \(h), offset: \(o), bytes: \(b))"
        case .read(let p, let h): return ".read(p: \(p), h: \(h))"
        case .status(let n): return ".status(name: \(n))"
        case .close(let p, let h): return ".close(p: \(p), h: \(h))"
        case .truncate(let n, let s): return ".truncate(name: \(n), size: \(s))"
        case .rename(let f, let t): return ".rename(from: \(f), to: \(t))"
        case .unlink(let n): return ".unlink(name: \(n))"
        case .evict(let n): return ".evict(name: \(n))"
        case .remoteWrite(let n, let b): return ".remoteWrite(name: \(n), bytes: \(b))"
        case .remoteDelete(let n): return ".remoteDelete(name: \(n))"
        case .remoteRename(let f, let t): return ".remoteRename(from: \(f), to: \(t))"
        case .mkdir(let d): return ".mkdir(dir: \(d))"
        case .rmdir(let d): return ".rmdir(dir: \(d))"
        case .moveDir(let f, let t): return ".moveDir(from: \(f), to: \(t))"
        case .remoteMoveDir(let f, let t): return ".remoteMoveDir(from: \(f), to: \(t))"
        case .setXattr(let n, let k, let v): return ".setXattr(name: \(n), key: \(k), value: \(v))"
        case .removeXattr(let n, let k): return ".removeXattr(name: \(n), key: \(k))"
        case .remoteSetXattr(let n, let k, let v): return ".remoteSetXattr(name: \(n), key: \(k), value: \(v))"
        case .xattrs(let n): return ".xattrs(name: \(n))"
        case .conflict(let n, let h, let t): return ".conflict(name: \(n), here: \(h), there: \(t))"
        case .resolve(let n, let p): return ".resolve(name: \(n), promote: \(p))"
        case .sync: return ".sync"
        case .network(let up): return ".network(up: \(up))"
        case .restart: return ".restart"
        case .kvWrite(let k, let b): return ".kvWrite(key: \(k), bytes: \(b))"
        case .kvRemove(let k): return ".kvRemove(key: \(k))"
        case .kvRead(let k): return ".kvRead(key: \(k))"
        }
    }

    /// A random sequence of `count` steps.
    static func sequence(seed: UInt64, count: Int) -> [RefOp] {
        var rng = SplitMix(seed)
        return (0..<count).map { _ in random(&rng) }
    }

    private static func random(_ rng: inout SplitMix) -> RefOp {
        let p = rng.below(processes), n = rng.below(files.count), h = rng.below(3)
        let d = rng.below(dirs.count), other = rng.below(dirs.count)
        func bytes() -> [UInt8] { (0..<(1 + rng.below(6))).map { _ in UInt8(97 + rng.below(26)) } }
        let kind = [OpenKind.read, .readWrite, .truncate][rng.below(3)]
        let key = rng.below(xattrKeys.count), kvKey = rng.below(kvKeys.count)
        switch rng.below(115) {
        case 0..<8: return .create(p: p, name: n)
        case 8..<21: return .open(p: p, name: n, kind)
        case 21..<23: return .interruptedOpen(p: p, name: n, kind)
        case 23..<35: return .write(p: p, h: h, offset: rng.below(12), bytes: bytes())
        case 35..<43: return .read(p: p, h: h)
        case 43..<45: return .status(name: n)
        case 45..<54: return .close(p: p, h: h)
        case 54..<57: return .truncate(name: n, size: rng.below(10))
        case 57..<62: return .rename(from: n, to: rng.below(files.count))
        case 62..<65: return .unlink(name: n)
        case 65..<69: return .evict(name: n)
        case 69..<75: return .remoteWrite(name: n, bytes: bytes())
        case 75..<77: return .remoteDelete(name: n)
        case 77..<79: return .remoteRename(from: n, to: rng.below(files.count))
        case 79..<84: return .mkdir(dir: d)
        case 84..<85: return .rmdir(dir: d)
        case 85..<88: return .moveDir(from: d, to: other)
        case 88..<90: return .remoteMoveDir(from: d, to: other)
        case 90..<96: return .sync
        case 96..<98: return .network(up: rng.below(2) == 0)
        case 98..<100: return .restart
        case 100..<102: return .setXattr(name: n, key: key, value: bytes())
        case 102..<103: return .removeXattr(name: n, key: key)
        case 103..<104: return .remoteSetXattr(name: n, key: key, value: bytes())
        case 104..<106: return .xattrs(name: n)
        case 106..<108: return .conflict(name: n, here: bytes(), there: bytes())
        case 108..<110: return .resolve(name: n, promote: rng.below(2) == 0)
        case 110..<112: return .kvWrite(key: kvKey, bytes: bytes())
        case 112..<113: return .kvRemove(key: kvKey)
        default: return .kvRead(key: kvKey)
        }
    }
}

/// A small deterministic generator (SplitMix64).
struct SplitMix {
    var state: UInt64
    init(_ seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

/// A content file as the model sees it: shared by every handle opened on it.
final class ModelContent {
    var bytes: [UInt8]
    /// Created here and not closed for writing since: the daemon keeps its row back until then
    /// (Store.keptBack), so a crash may lose it.
    var unclosedNew = false
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func write(_ data: [UInt8], at offset: Int) {
        if bytes.count < offset + data.count { bytes += [UInt8](repeating: 0, count: offset + data.count - bytes.count) }
        bytes.replaceSubrange(offset..<(offset + data.count), with: data)
    }

    func truncate(_ size: Int) {
        if size < bytes.count { bytes.removeLast(bytes.count - size) } else { bytes += [UInt8](repeating: 0, count: size - bytes.count) }
    }
}

/// A file under a name.
struct ModelFile {
    /// The local content; nil: none here (evicted, or never downloaded).
    var local: ModelContent?
    /// What the remote holds, as far as this device knows.
    var remote: [UInt8]
    /// The remote has a newer version than the local content.
    var stale = false
    /// The names it left here since the last sync reached the remote.
    var leftNames: Set<String> = []
    /// Its user extended attributes (of `RefOp.xattrKeys`), which go with it to every device.
    var xattrs: [String: [UInt8]] = [:]
    /// The contents of its unresolved conflict versions.
    var conflicts: [[UInt8]] = []

    /// What a program that opens the file now reads.
    var visible: [UInt8] { (local != nil && !stale) ? local!.bytes : remote }
}

/// A handle a process holds.
struct ModelHandle {
    let fh: UInt64
    let content: ModelContent
    let writable: Bool
    /// The name it was opened under (the file may have moved or gone since).
    let name: String
}

/// The waiter of a request that is never interrupted.
struct PatientWaiter: Waiter {
    func beginWaiting() -> Bool { true }
    func endWaiting() -> Bool { true }
}

/// The waiter of a request interrupted while it waits: the interrupt answered EINTR, so the operation, once
/// the content came or failed, answers nothing.
struct InterruptedWaiter: Waiter {
    func beginWaiting() -> Bool { true }
    func endWaiting() -> Bool { false }
}

/// A result set from a completion.
final class Answer<T: Sendable>: Sendable {
    private let stored = Locked<Result<T, AdapterError>?>(nil)
    var value: Result<T, AdapterError>? {
        get { stored.withLock { $0 } }
        set { stored.withLock { $0 = newValue } }
    }
}

/// What went wrong in a run: the step and what differed.
struct RefViolation: Error, CustomStringConvertible {
    let step: Int
    let what: String
    var description: String { "step \(step): \(what)" }
}

/// One device: a stepped container (no background threads) and the adapter on it.
final class RefDevice {
    let name: String
    let dir: String
    let remote: MemoryRemote
    private(set) var container: Container!
    private(set) var fs: FileSystem!

    init(_ name: String, dir: String, remote: MemoryRemote) throws {
        self.name = name
        self.dir = dir
        self.remote = remote
        try open()
    }

    private func open() throws {
        var config = ContainerConfig(device: name)
        config.environment.backgroundTransfers = false
        config.environment.sleep = { _ in }
        config.environment.randomUnit = { 0 }
        container = try Container(store: try Store(directory: dir), remote: remote, config: config)
        fs = FileSystem(core: container)
        // The key-value store of this device alone (no remote): `.kvstore` as the adapter shows it.
        fs.kv = try KeyValueStore(directory: dir, device: name, account: "ref", remote: nil, environment: config.environment)
    }

    /// A kill -9 of the daemon and a start from its store: the kernel closes every descriptor it held.
    func crash() throws {
        for file in fs.openFiles() { file.fd.close() }
        fs.notifier.sync {} // its kernel notices (to no kernel here) hold the adapter until they ran
        fs = nil
        container = nil
        try open()
    }

    /// Runs the downloads asked for until `answer` is set (an open or truncation waiting for content).
    func settle<T>(_ answer: Answer<T>) -> Result<T, AdapterError>? {
        for _ in 0..<20 {
            if let value = answer.value { return value }
            let keys = container.requestedDownloads
            if keys.isEmpty { break }
            for key in keys { _ = container.downloadOnce(key) }
        }
        return answer.value
    }

    /// Pushes until nothing is left, or only what fails again; the failure is returned.
    func pushAll() -> String? {
        var failure: String?
        for _ in 0..<100 {
            switch container.pushOnce() {
            case .idle: return failure
            case .pushed: continue
            case .failed(let id, let why):
                let this = "push of \(id) failed: \(why)"
                if this == failure { return failure }
                failure = this
            }
        }
        return "the push never ended"
    }

    func pullAll() throws {
        while try container.pullOnce() {}
    }

    /// Every path below the mount root, folders too, sorted (without .versions, .kvstore, .trash and Documents).
    func allPaths(below ino: UInt64 = 1, prefix: String = "") throws -> [String] {
        let dir = try fs.opendir(ino)
        let entries = try fs.listing(dir.fh, from: 0)
        fs.releasedir(dir.fh)
        let hidden = Set([".", "..", "Documents"] + WireRules.mountRootNames)
        var paths: [String] = []
        for e in entries where !(prefix.isEmpty ? hidden : [".", ".."]).contains(e.name) {
            paths.append(prefix + e.name)
            if e.type == S_IFDIR, let child = try self.ino(prefix + e.name) {
                paths += try allPaths(below: child, prefix: prefix + e.name + "/")
            }
        }
        return paths.sorted()
    }

    /// The inode of a path from the root, as the kernel walks it (nil: not found).
    func ino(_ path: String) throws -> UInt64? {
        var ino: UInt64 = 1
        for part in path.split(separator: "/") {
            let e = try fs.lookup(ino, String(part))
            if e.ino == 0 { return nil }
            ino = e.ino
        }
        return ino
    }

    /// The inode of a path's folder and its last name (nil: the folder is not found).
    func place(_ path: String) throws -> (parent: UInt64, name: String)? {
        let parts = path.split(separator: "/").map(String.init)
        guard let leaf = parts.last else { return nil }
        guard let parent = try ino(parts.dropLast().joined(separator: "/")) else { return nil }
        return (parent, leaf)
    }

    func item(_ path: String) -> Item? {
        var item = container.item(container.rootID)
        for part in path.split(separator: "/") {
            guard let dir = item else { return nil }
            item = container.lookup(parent: dir.id, name: String(part))
        }
        return item
    }

    /// open(2) of a name in the root, as the kernel sends it: a lookup, then the open (again with a new
    /// lookup when the inode was retired: ESTALE). Nil when no answer came.
    func open(_ name: String, flags: Int32, waiter: Waiter = PatientWaiter()) throws -> Result<Opened, AdapterError>? {
        for _ in 0..<2 {
            guard let ino = try ino(name) else { return .failure(.core(.notFound)) }
            let answer = Answer<Opened>()
            fs.open(ino, flags: flags, .unknown, waiter: waiter) { answer.value = $0 }
            let result = settle(answer)
            if case .failure(.system(let e))? = result, e.rawValue == ESTALE { continue }
            return result
        }
        return .failure(.system(Errno(ESTALE)))
    }

    /// Whether the handles open on the inode of handle `fh` all use one content file. The kernel ties an inode
    /// to one page cache and one passthrough backing file: two content files under one inode would be served
    /// stale pages, and with passthrough the second open fails with EIO (after the daemon did its part of it).
    func inodeHasOneContentFile(_ fh: UInt64) -> Bool {
        guard let ino = fs.file(fh)?.ino, ino != 0 else { return true }
        let identities = Set(fs.openFiles().filter { $0.ino == ino }.compactMap { file -> [UInt64]? in
            var st = stat()
            guard fstat(file.fd.raw, &st) == 0 else { return nil }
            return [UInt64(st.st_dev), UInt64(st.st_ino)]
        })
        return identities.count <= 1
    }

    /// The whole content a handle reads.
    func read(_ fh: UInt64) throws -> [UInt8] {
        let fd = try fs.readable(fh)
        var buf = [UInt8](repeating: 0, count: 1 << 16)
        let n = buf.withUnsafeMutableBytes { pread(fd.raw, $0.baseAddress, $0.count, 0) }
        guard n >= 0 else { throw Errno.current }
        return Array(buf.prefix(n))
    }

    /// Writes a whole file through the adapter, as `echo > PATH` does.
    func writeWhole(_ path: String, _ bytes: [UInt8]) throws {
        guard let (parent, name) = try place(path) else { throw CoreError.notFound }
        let opened: Opened
        if try ino(path) == nil {
            opened = try fs.create(parent, name, 0o644, .unknown).1
        } else {
            guard case .success(let o)? = try open(path, flags: O_WRONLY | O_TRUNC) else { throw CoreError.io("open failed") }
            opened = o
        }
        _ = try fs.write(opened.fh, WriteData(bytes), at: 0)
        try fs.flush(opened.fh)
        fs.release(opened.fh)
    }

    /// The user attributes of `RefOp.xattrKeys` that listxattr names on `ino`, each with what getxattr reads.
    func userXattrs(_ ino: UInt64) throws -> [String: [UInt8]] {
        let names = try fs.listxattr(ino).split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        var found: [String: [UInt8]] = [:]
        for name in names where RefOp.xattrKeys.contains(name) { found[name] = try fs.getxattr(ino, name) }
        return found
    }

    /// rename(2) from one path to another (folders must exist).
    func rename(_ from: String, _ to: String) throws -> Result<Void, AdapterError>? {
        guard let (p, n) = try place(from), let (np, nn) = try place(to) else { return .failure(.core(.notFound)) }
        let answer = Answer<Void>()
        fs.rename(p, n, np, nn, mode: .replace, waiter: PatientWaiter()) { answer.value = $0 }
        return settle(answer)
    }

    func remove(_ path: String, directory: Bool) throws -> Result<Void, AdapterError>? {
        guard let (p, n) = try place(path) else { return .failure(.core(.notFound)) }
        let answer = Answer<Void>()
        fs.remove(p, n, directory: directory) { answer.value = $0 }
        return settle(answer)
    }

    /// setxattr(2) of `name` on node `ino`.
    func setxattr(_ ino: UInt64, _ name: String, _ value: [UInt8]) -> Result<Void, AdapterError>? {
        let answer = Answer<Void>()
        fs.setxattr(ino, name, value, flags: 0) { answer.value = $0 }
        return settle(answer)
    }
}
