// Background work gives way to the requests of the mount (Part 19: a burst of 20,000 creates from elsewhere must
// not slow this device's own work): a page of remote changes is applied in steps that let a waiting request in,
// the store's log is checkpointed outside the container's lock, and background loops run below the threads
// answering requests, each named as `top -H` shows it.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting
#if canImport(Glibc)
import Glibc
#endif

/// Tells the test thread when the first remote items were applied, and holds the applying thread (between two
/// steps, the lock let go) until the test thread has read the state.
private final class FirstAddition: ContainerObserver, @unchecked Sendable {
    let seen = DispatchSemaphore(value: 0)
    let read = DispatchSemaphore(value: 0)
    private let once = Locked(false)

    func entryAdded(parent: String, name: String) {
        guard once.withLock({ o in defer { o = true }; return !o }) else { return }
        seen.signal()
        _ = read.wait(timeout: .now() + 20)
    }
    func itemChanged(_ id: String, contentChanged: Bool) {}
    func entryRemoved(parent: String, name: String, id: String, isDirectory: Bool) {}
    func changedElsewhere(_ id: String, contentChanged: Bool) {}
}

@Suite struct GivingWayTests {
    @Test func aPageOfRemoteChangesLetsARequestInBeforeItsEnd() throws {
        let device = try Device(MemoryRemote(), name: "here")
        let docs = device.docs
        let page = (0..<1_000).map { i in
            WireItem(id: "burst-\(i)", parent: docs, name: "f\(i)", kind: .file, mode: 0o644, mtime: 1_700_000_000,
                     size: 0, sha256: "", version: Int64(100 + i), deleted: false, device: "there", xattrs: [:],
                     conflicts: [])
        }
        let observer = FirstAddition()
        device.container.observer = observer
        let applied = DispatchSemaphore(value: 0)
        Thread {
            try? device.container.pullSide.applyRemote(page, token: nil)
            applied.signal()
        }.start()
        #expect(observer.seen.wait(timeout: .now() + 20) == .success)
        // A request now gets in while the page is still being applied: the first step's items are there, not all.
        let ids = page.map(\.id)
        let seenByTheRequest = device.container.read { s in ids.count { s.items[$0] != nil } }
        observer.read.signal()
        #expect(applied.wait(timeout: .now() + 20) == .success)
        #expect(seenByTheRequest > 0)
        #expect(seenByTheRequest < page.count)
        #expect(device.container.read { s in ids.count { s.items[$0] != nil } } == page.count)
    }

    @Test func theStoresLogIsCheckpointedOutsideTheCommitThatFillsIt() throws {
        let dir = TempDir()
        let db = try Database(path: dir.path + "/t.sqlite")
        try db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE t (v BLOB)")
        let pages = Locked<[Int]>([])
        db.afterWALCommit { n in pages.withLock { $0.append(n) } }
        let blob = SQLValue.blob([UInt8](repeating: 7, count: 8_000))
        for _ in 0..<1_000 { try db.query("INSERT INTO t VALUES (?)", [blob]) }
        let seen = pages.withLock { $0 }
        #expect(seen.count == 1_000)
        // SQLite's own checkpoint would have emptied the log at 1,000 pages, inside a commit: it keeps growing.
        #expect(seen.last ?? 0 > 2_000)
        #expect(seen == seen.sorted())
    }

    @Test func aStoreCheckpointsItsLogInTheBackground() throws {
        let dir = TempDir()
        let store = try Store(directory: dir.path)
        let wal = dir.path + "/state.sqlite-wal"
        let name = String(repeating: "n", count: 3_000)
        var next = 0
        /// One commit of 50 rows of some 3 KB each.
        func commit() throws {
            try store.begin()
            for _ in 0..<50 {
                next += 1
                try store.save(Item(id: "i\(next)", parent: "documents", name: name + "\(next)", kind: .file,
                                    mode: 0o644, mtime: 0, ctime: 0, size: 0, remoteVersion: 0, remoteSHA: "",
                                    remoteSize: 0, device: "", hasLocal: false, localSHA: nil, dirty: false,
                                    metaDirty: false, deleted: false, pinned: false, xattrs: [:], conflicts: []))
            }
            try store.commit()
        }
        // Past 1,000 pages of log, a checkpoint runs on the store's own queue; once it is done, a later commit
        // writes the log from its start again, and the file stops growing. Without it the log would grow for
        // ever (the store's connection makes no checkpoint of its own).
        while fileSize(wal) < 1_200 * 4096 { try commit() }
        var sizes: [Int] = []
        for _ in 0..<100 {
            usleep(20_000)
            try commit()
            sizes.append(fileSize(wal))
        }
        #expect(sizes.suffix(20).allSatisfy { $0 == sizes.last }, "the log kept growing: \(sizes)")
    }

    @Test func aLoopsThreadIsNamedAndABackgroundOneRunsBelowRequests() {
        func nameAndNice(_ priority: Loop.Priority) -> (String, Int32)? {
            let loop = Loop(name: "giving-way-\(priority == .background ? "bg" : "rq")", priority: priority)
            let seen = Locked<(String, Int32)?>(nil)
            loop.start {
                let tid = currentThreadID()
                let name = (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8)) ?? ""
                errno = 0
                let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(tid))
                seen.withLock { $0 = (name.trimmingCharacters(in: .whitespacesAndNewlines), nice) }
            }
            _ = eventually(10) { seen.withLock { $0 } != nil }
            loop.stopAndJoin(timeout: 10)
            return seen.withLock { $0 }
        }
        errno = 0
        let own = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        let background = nameAndNice(.background), request = nameAndNice(.asRequests)
        #expect(background?.0 == "giving-way-bg") // the kernel keeps 15 bytes
        #expect(background?.1 == max(own, Loop.backgroundNice))
        #expect(request?.0 == "giving-way-rq")
        #expect(request?.1 == own)
    }
}

private func fileSize(_ path: String) -> Int {
    var st = stat()
    return stat(path, &st) == 0 ? Int(st.st_size) : 0
}
