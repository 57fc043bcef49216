// The simulation in CI: a bounded number of seeds, and the runs that found bugs (regressions), each an
// explicit plan (Regressions.swift, RecordedSeeds.swift) so the generator cannot change what they test.
import Foundation
import Testing
import UbiquityBase
import UbiquitySim

@Suite struct SimulationTests {
    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6]) func boundedSeeds(seed: UInt64) {
        let r = Simulation.run(seed: seed)
        #expect(r.violations == [], "seed \(seed)")
    }

    /// Whole runs of seeds that found bugs in the core; each must pass from now on.
    @Test(arguments: Regression.seeds) func regressionRun(_ regression: Regression) {
        let r = Simulation.execute(regression.plan)
        #expect(r.violations == [], "\(regression.name)")
    }

    /// Shrunk traces that found bugs in the core.
    @Test(arguments: Regression.traces) func regressionTrace(_ regression: Regression) {
        let r = Simulation.execute(regression.plan)
        #expect(r.violations == [], "\(regression.name)")
    }

    /// Devices that hold two containers (one daemon: a crash restarts both; files moved between them).
    @Test(arguments: [UInt64(1), 2, 3]) func boundedSeedsOfTwoContainers(seed: UInt64) {
        let r = Simulation.execute(AccountPlan(seed: seed))
        #expect(r.violations == [], "seed \(seed)")
        #expect(r.counters["step moveAcross", default: 0] > 0)
    }

    /// A fresh seed of two containers that found a bug: a file that lost its name here to another (detached)
    /// and whose own put then landed under that name, freed meanwhile, was never listed in its folder again
    /// (no newer state came in the feed to place it). Generated from its seed, as printed by the run.
    @Test func twoContainerSeedThatFoundAnUnlistedFile() {
        let r = Simulation.execute(AccountPlan(seed: 997_308_312))
        #expect(r.violations == [])
        #expect(r.steps == 816, "the plan the seed generated when it failed")
    }

    /// A fresh seed of two containers that found a push going round for ever: a chain of folders turned upside
    /// down with their names exchanged (MoveOrderTests.aChainTurnedUpsideDownWithItsNamesExchangedStaysSo).
    @Test func twoContainerSeedThatFoundAChainOfMovesThatNeverSettled() {
        let r = Simulation.execute(AccountPlan(seed: 998_105_977))
        #expect(r.violations == [])
        #expect(r.steps == 504, "the plan the seed generated when it failed")
    }

    /// A fresh seed of two containers that found a file pending for ever: edited here while its folder's delete
    /// made here went up, it won over its own delete made elsewhere, and had no folder here or there to go to
    /// (it waited for the folder's create, which never came). It now goes to the top of the container.
    @Test func twoContainerSeedThatFoundAFileWithoutAFolder() {
        let r = Simulation.execute(AccountPlan(seed: 999_001_990))
        #expect(r.violations == [])
        #expect(r.steps == 650, "the plan the seed generated when it failed")
    }

    /// A fresh seed of two containers that found a deleted folder back, empty: kept on one device for a file
    /// edited in it there, it went back up after that file had come back elsewhere, outside it. It now takes
    /// its delete.
    @Test func twoContainerSeedThatFoundAnEmptyFolderBack() {
        let r = Simulation.execute(AccountPlan(seed: 999_209_105))
        #expect(r.violations == [])
        #expect(r.steps == 697, "the plan the seed generated when it failed")
    }

    /// Two fresh seeds of two containers that found a deleted file back: a device re-sent a conflict version's
    /// discard with its file's older time (999800665: the merge onto a newer content kept the old time; a delete
    /// on top of the newer version took the older time for an edit it had not seen), or met the delete's
    /// tombstone with it (999802457: the tombstone's other content and time read as its own change not there).
    @Test(arguments: [(999_800_665, 450), (999_802_457, 461)])
    func twoContainerSeedsThatFoundADeletedFileBack(seed: UInt64, steps: Int) {
        let r = Simulation.execute(AccountPlan(seed: seed))
        #expect(r.violations == [])
        #expect(r.steps == steps, "the plan the seed generated when it failed")
    }

    @Test func sameSeedSameRunOfTwoContainers() {
        let a = Simulation.execute(AccountPlan(seed: 42, steps: 160)), b = Simulation.execute(AccountPlan(seed: 42, steps: 160))
        #expect(a.trace == b.trace && a.violations == b.violations && a.counters == b.counters)
        #expect(a.trace.contains { $0.hasPrefix("A ") } && a.trace.contains { $0.hasPrefix("B ") })
    }

    @Test func sameSeedSameRun() {
        let a = Simulation.run(seed: 42, steps: 120), b = Simulation.run(seed: 42, steps: 120)
        #expect(a.trace == b.trace && a.violations == b.violations && a.counters == b.counters)
    }

    @Test func literalRunsTheStepsItWasPrintedFrom() throws {
        // A recorded regression is the literal `--literal` printed, pasted: printing its plan gives that text
        // back (so a plan printed now and pasted is the plan that ran), and the plan a seed generates, cut
        // down and printed, runs the same as the same steps given one by one.
        let source = try String(contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Regressions.swift").path, encoding: .utf8)
        let printed = Regression.deleteAfterLostAnswer.plan.swiftLiteral()
        #expect(source.contains(printed.split(separator: "\n").map { "        " + $0 }.joined(separator: "\n")))
        let plan = Plan(seed: 5).keeping([3, 4, 8, 10, 148, 153, 160])
        let given = Plan(seed: plan.seed, devices: plan.devices, feedPage: plan.feedPage, rates: plan.rates,
                         chunkFormat: plan.chunkFormat,
                         steps: plan.steps.map { Step($0.kind, on: $0.device, seed: $0.seed, after: $0.dt) })
        #expect(given.swiftLiteral() == plan.swiftLiteral())
        let a = Simulation.execute(plan), b = Simulation.execute(given)
        #expect(a.trace == b.trace && a.counters == b.counters && a.trace.count > 7)
    }
}

/// What happens elsewhere in the test process must not decide a run: child processes started meanwhile (the
/// conformance suites start servers) inherit every descriptor between their fork and their exec, the store's
/// lock among them, and a restart that met one of them failed to take the lock (issue 28).
@Suite struct SimulationIsolationTests {
    @Test func restartsDoNotDependOnChildProcessesOfTheTestProcess() async throws {
        let stop = Locked(false)
        let spawner = Thread {
            while !stop.withLock({ $0 }) {
                let p = Process()
                p.executableURL = URL(fileURLWithPath: "/bin/true")
                try? p.run()
                p.waitUntilExit()
            }
        }
        spawner.start()
        defer { stop.withLock { $0 = true } }
        let kinds: [StepKind] = [.create, .crash, .push, .crash, .write, .crash, .pull, .crash]
        let steps = (0..<400).map { i in Step(kinds[i % kinds.count], on: i / kinds.count % 3, seed: UInt64(i), after: 1_000_000) }
        let r = Simulation.execute(Plan(seed: 7, devices: 3, feedPage: 4, rates: FaultRates(), steps: steps))
        #expect(r.violations == [])
        #expect(r.counters["step crash"] == 200)
    }
}
