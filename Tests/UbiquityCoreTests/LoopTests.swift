// The one way to run a background loop (UbiquityBase/Loop.swift) and the one lock (Locked.swift): a wake cuts a
// pause short, a stop is seen at the next look, a join waits for the body but not for a wait marked `away`, and
// a container stopped while its loops run is let go of at once, its store free to open again.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct LoopTests {
    @Test func aWakeCutsThePauseShortAndIsTakenOnce() {
        let loop = Loop(name: "test")
        loop.wake()
        let start = Date()
        #expect(loop.pause(nanoseconds: 10_000_000_000)) // woken before the call: returns at once
        #expect(Date().timeIntervalSince(start) < 5)
        #expect(!loop.takeWake())
        #expect(!loop.pause(nanoseconds: 50_000_000)) // no wake left: sleeps the whole 50 ms
    }

    @Test func stopEndsTheBodyAndJoinWaitsForIt() {
        let loop = Loop(name: "test")
        let passes = Locked(0)
        loop.start {
            while !loop.isStopping {
                passes.withLock { $0 += 1 }
                loop.pause(nanoseconds: 10_000_000_000)
            }
            Thread.sleep(forTimeInterval: 0.2) // the body's last step, which join must wait for
            passes.withLock { $0 += 1000 }
        }
        #expect(eventually(10) { passes.withLock { $0 } >= 1 })
        #expect(loop.stopAndJoin(timeout: 10))
        #expect(passes.withLock { $0 } >= 1001)
        #expect(!loop.isRunning)
    }

    @Test func joinDoesNotWaitForAWaitAwayFromTheOwnerAndTheBodyThenSeesTheStop() {
        let loop = Loop(name: "test")
        let release = Locked(false)
        let after = Locked<String?>(nil)
        loop.start {
            let answer = loop.away { () -> String in
                while !release.withLock({ $0 }) { Thread.sleep(forTimeInterval: 0.01) }
                return "answer"
            }
            after.withLock { $0 = answer ?? "stopped" }
        }
        Thread.sleep(forTimeInterval: 0.1)
        #expect(loop.stopAndJoin(timeout: 10)) // the body is away: join returns though it still runs
        #expect(loop.isRunning)
        release.withLock { $0 = true }
        #expect(eventually(10) { after.withLock { $0 } != nil })
        #expect(after.withLock { $0 } == "stopped") // the answer of a wait that outlived the stop is dropped
    }

    @Test func aLoopNeverStartedJoinsAtOnce() {
        #expect(Loop(name: "test").stopAndJoin(timeout: 0))
    }

    @Test func lockedWaitReturnsWhenANotifyingChangeMakesItReady() {
        let value = Locked(0)
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: 0.1)
            value.withLock(notifying: true) { $0 = 7 }
        }
        let seen = value.wait(until: Date(timeIntervalSinceNow: 10), for: { $0 == 7 }, then: { $0 })
        #expect(seen == 7)
        // Not ready by the deadline: the body runs anyway, and looks again itself.
        #expect(value.wait(until: Date(timeIntervalSinceNow: 0.05), for: { $0 == 8 }, then: { $0 }) == 7)
    }

    /// The pull loop sits in its long poll when the container stops: the container is freed at once (nothing
    /// holds it across the poll), so its store opens again, and the loop never touches it afterwards.
    @Test func aContainerStoppedWhileItsLoopsRunIsFreedAndItsStoreOpensAgain() throws {
        _ = quietLogs
        let remote = MemoryRemote()
        let dir = TempDir()
        var config = ContainerConfig(device: "d1")
        config.pollWaitSeconds = 30
        var container: Container? = try Container(store: try Store(directory: dir.path + "/store"), remote: remote,
                                                  config: config)
        try container!.start(initialSync: true)
        weak let gone = container
        Thread.sleep(forTimeInterval: 0.3) // the pull loop is in its 30 s long poll
        let stopped = Date()
        container!.stop()
        container = nil
        #expect(gone == nil)
        #expect(Date().timeIntervalSince(stopped) < 10)
        let again = try Container(store: try Store(directory: dir.path + "/store"), remote: remote, config: config)
        // Its upload is a change of the feed: the old poll returns, and must not touch the freed container.
        try again.start(initialSync: true)
        _ = try again.createFile(parent: WireRules.documentsID, name: "after.txt", mode: 0o644)
        #expect(eventually(10) { (try? again.pendingChanges) == 0 })
        again.stop()
    }
}
