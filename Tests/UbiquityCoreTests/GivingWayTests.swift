// Background work gives way to the requests of the mount (Part 19: a burst of 20,000 creates from elsewhere must
// not slow this device's own work): a page of remote changes is applied in steps that let requests in, and
// background loops run below the threads answering requests, each named as `top -H` shows it.
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
        let page = (0..<5_000).map { i in
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
        // A request now gets in while the page is still being applied: the first steps' items are there, not all.
        let ids = page.map(\.id)
        let seenByTheRequest = device.container.read { s in ids.count { s.items[$0] != nil } }
        observer.read.signal()
        #expect(applied.wait(timeout: .now() + 20) == .success)
        #expect(seenByTheRequest > 0)
        #expect(seenByTheRequest < page.count)
        #expect(device.container.read { s in ids.count { s.items[$0] != nil } } == page.count)
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
