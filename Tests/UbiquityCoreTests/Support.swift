// Helpers shared by the core tests: temporary directories, bounded waits, devices on a MemoryRemote.
import Foundation
import Testing
@testable import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting
#if canImport(Glibc)
import Glibc
#endif

/// A fresh directory, removed when released.
final class TempDir: @unchecked Sendable {
    let path: String
    init() {
        var template = Array((NSTemporaryDirectory() + "/ubiquity-core-XXXXXX").utf8CString)
        path = template.withUnsafeMutableBufferPointer { buf in
            guard let made = mkdtemp(buf.baseAddress!) else { fatalError("mkdtemp failed") }
            return String(cString: made)
        }
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Quiet logs: the tests provoke warnings on purpose.
let quietLogs: Void = Log.shared.configure(level: .error, path: nil)

/// Polls `condition` until it holds or `seconds` pass; returns whether it held.
func eventually(_ seconds: Double = 5, _ condition: () -> Bool) -> Bool {
    let end = monotonicNanoseconds() + Int64(seconds * 1e9)
    while monotonicNanoseconds() < end {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// A value set from another thread.
final class Box<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var _value: T
    init(_ value: T) { _value = value }
    var value: T {
        get { lock.lock(); defer { lock.unlock() }; return _value }
        set { lock.lock(); _value = newValue; lock.unlock() }
    }
}

/// The remote as one device sees it: forwards to a shared MemoryRemote, with its own network switch, so a
/// test can decide which device reaches the remote first.
final class Link: RemoteClient, @unchecked Sendable {
    let remote: MemoryRemote
    private let _offline = Box(false)
    /// While set, only the change feed is unreachable.
    let feedBlocked = Box(false)
    /// Called before every item write is forwarded.
    let beforePut = Box<(@Sendable (WireItem) -> Void)?>(nil)
    /// Called once an item write is stored on the remote, before its answer comes back.
    let afterPut = Box<(@Sendable (WireItem) -> Void)?>(nil)
    /// The next N item writes (puts and deletes) land but their answer is lost, and the link goes down.
    let loseAnswers = Box(0)
    /// How many upload steps (a blob's check or upload, an item's write) were tried while the link was down.
    let writesRefused = Box(0)
    init(_ remote: MemoryRemote) { self.remote = remote }

    var offline: Bool {
        get { _offline.value }
        set { _offline.value = newValue }
    }

    private func check() throws(RemoteError) { if offline { throw RemoteError.unreachable("link down") } }
    private func checkWrite() throws(RemoteError) {
        if offline { writesRefused.value += 1 }
        try check()
    }

    func openContainer() throws(RemoteError) -> WireContainer { try check(); return try remote.openContainer() }
    func changes(since token: String?, waitSeconds: Int) throws(RemoteError) -> WireChanges {
        try check()
        if feedBlocked.value { throw RemoteError.unreachable("feed blocked") }
        let answer = try remote.changes(since: token, waitSeconds: waitSeconds)
        try check() // the link went down during a long poll: the answer is lost
        return answer
    }
    func item(_ id: String) throws(RemoteError) -> WireItem { try check(); return try remote.item(id) }
    func putItem(_ item: WireItem, ifMatch: Int64?, change: WireChangeID?) throws(RemoteError) -> WireItem {
        try checkWrite()
        beforePut.value?(item)
        let stored = try remote.putItem(item, ifMatch: ifMatch, change: change)
        afterPut.value?(stored)
        return try answer(stored)
    }
    func deleteItem(_ id: String, ifMatch: Int64, change: WireChangeID?) throws(RemoteError) -> WireItem {
        try checkWrite(); return try answer(try remote.deleteItem(id, ifMatch: ifMatch, change: change))
    }
    /// A write's answer, unless it is to be lost (`loseAnswers`).
    private func answer(_ stored: WireItem) throws(RemoteError) -> WireItem {
        guard loseAnswers.value > 0 else { return stored }
        loseAnswers.value -= 1
        offline = true
        throw RemoteError.unreachable("answer lost")
    }
    func hasBlob(sha256: String) throws(RemoteError) -> Bool { try checkWrite(); return try remote.hasBlob(sha256: sha256) }
    func uploadBlob(sha256: String, size: Int64, fromFile path: String, progress: TransferProgress?) throws(RemoteError) {
        try checkWrite(); try remote.uploadBlob(sha256: sha256, size: size, fromFile: path, progress: progress)
    }
    func downloadBlob(sha256: String, offset: Int64, to fd: FileDescriptor, progress: TransferProgress?) throws(RemoteError) {
        try check(); try remote.downloadBlob(sha256: sha256, offset: offset, to: fd, progress: progress)
    }
    /// True: the link answers as a remote without shares (the route unknown), as one of before Part 24.
    let sharesUnknown = Box(false)
    func shares() throws(RemoteError) -> [WireShare] {
        try check()
        if sharesUnknown.value { throw RemoteError.notFound("no such route") }
        return try remote.shares()
    }
    /// False: the link answers as a remote without chunks (the routes unknown), as one of before Part 16.
    let chunks = Box(true)
    private func checkChunks() throws(RemoteError) {
        try check()
        if !chunks.value { throw RemoteError.notFound("no such route") }
    }
    func missingChunks(_ sha256s: [String]) throws(RemoteError) -> Set<String> {
        try checkChunks(); return try remote.missingChunks(sha256s)
    }
    func uploadChunk(sha256: String, size: Int64, fromFile path: String, at offset: Int64,
                     progress: TransferProgress?) throws(RemoteError) {
        try checkChunks()
        try remote.uploadChunk(sha256: sha256, size: size, fromFile: path, at: offset, progress: progress)
    }
    func putManifest(_ manifest: WireManifest) throws(RemoteError) { try checkChunks(); try remote.putManifest(manifest) }
    func manifest(sha256: String) throws(RemoteError) -> WireManifest? {
        try check()
        return chunks.value ? try remote.manifest(sha256: sha256) : nil
    }
    func history(id: String) throws(RemoteError) -> [WireVersion] { try check(); return try remote.history(id: id) }
    func trash() throws(RemoteError) -> [WireVersion] { try check(); return try remote.trash() }
    func restore(ids: [String], device: String) throws(RemoteError) -> [WireItem] {
        try check(); return try remote.restore(ids: ids, device: device)
    }
    func emptyTrash(ids: [String]) throws(RemoteError) -> Int { try check(); return try remote.emptyTrash(ids: ids) }
    func emptyTrash() throws(RemoteError) -> Int { try check(); return try remote.emptyTrash() }
    func rewind(folder: String, to: Int64, dryRun: Bool, device: String) throws(RemoteError) -> [WireRewindChange] {
        try check(); return try remote.rewind(folder: folder, to: to, dryRun: dryRun, device: device)
    }
}

/// `count` bytes from the system's generator.
func randomBytes(_ count: Int) -> [UInt8] {
    let urandom = FileHandle(forReadingAtPath: "/dev/urandom")!
    defer { try? urandom.close() }
    return [UInt8](urandom.readData(ofLength: count))
}

/// One device: a store in a temporary directory and a started container.
final class Device: @unchecked Sendable {
    let dir = TempDir()
    let container: Container
    var docs: String { WireRules.documentsID }

    init(_ remote: RemoteClient, name: String, downloadTimeout: Int = 20, storeDirectory: String? = nil,
         configure: (inout ContainerConfig) -> Void = { _ in }) throws {
        _ = quietLogs
        var config = ContainerConfig(device: name)
        config.pollWaitSeconds = 1
        config.downloadTimeoutSeconds = downloadTimeout
        configure(&config)
        container = try Container(store: try Store(directory: storeDirectory ?? dir.path + "/store"), remote: remote,
                                  config: config)
        try container.start(initialSync: true)
    }

    deinit { container.stop() }

    func lookup(_ name: String, in parent: String? = nil) -> Item? {
        container.lookup(parent: parent ?? docs, name: name)
    }

    /// Tells the pusher to try now, as a daemon does when the network comes back (rather than waiting out
    /// its backoff).
    func nudge() { container.sync.wakePusher() }

    /// Items with changes not yet on the remote.
    /// A journal that cannot be read fails the test (an issue, and a count that is never "nothing pending"),
    /// without stopping the other tests of the process.
    var pending: Int {
        do { return try container.sync.pendingCount } catch {
            Issue.record("the journal cannot be read: \(error)")
            return .max
        }
    }

    /// Fetches the content and waits for the outcome (nil: no answer in time).
    func fetch(_ id: String, seconds: Double = 15) -> Result<Void, CoreError>? {
        let sem = DispatchSemaphore(value: 0)
        let box = Box<Result<Void, CoreError>?>(nil)
        _ = container.fetch(id) { r in box.value = r; sem.signal() }
        guard sem.wait(timeout: .now() + seconds) == .success else { return nil }
        return box.value
    }

    func content(_ id: String) -> [UInt8]? {
        FileManager.default.contents(atPath: container.contentPath(id)).map { [UInt8]($0) }
    }

    /// Writes a whole file as a program would: open with O_TRUNC, write, set the time, close.
    func write(_ id: String, _ bytes: [UInt8], mtimeSeconds: Int? = nil) throws {
        guard case .opened(let fd) = try container.open(id, writable: true, truncate: true) else {
            throw CoreError.io("an open with O_TRUNC must not fetch")
        }
        try fill(id, fd, bytes, mtimeSeconds: mtimeSeconds)
    }

    /// Made open, as the adapter's create does: no push can take the file empty between its making and its
    /// first write (a create sent, even to a link that is down, makes it a file the remote may know).
    func createFile(_ name: String, _ bytes: [UInt8], in parent: String? = nil, mtimeSeconds: Int? = nil) throws -> Item {
        let (item, fd) = try container.createAndOpen(parent: parent ?? docs, name: name, mode: 0o644)
        try fill(item.id, fd, bytes, mtimeSeconds: mtimeSeconds)
        return container.item(item.id)!
    }

    /// Writes `bytes` through `fd`, opened for writing, and closes it as a release does.
    private func fill(_ id: String, _ fd: FileDescriptor, _ bytes: [UInt8], mtimeSeconds: Int?) throws {
        try container.willWrite(id)
        let path = container.contentPath(id)
        try fd.writeAll(bytes)
        fd.close()
        if let mtimeSeconds {
            var times = [timespec(tv_sec: mtimeSeconds, tv_nsec: 0), timespec(tv_sec: mtimeSeconds, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
        }
        try container.flushed(id)
        container.closed(id, writable: true)
    }
}

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

extension Container.Opening {
    /// True when the open must fetch the content first.
    var isFetch: Bool { if case .fetch = self { return true } else { return false } }
}
