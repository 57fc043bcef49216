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

@Suite struct GivingWayTests {
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
