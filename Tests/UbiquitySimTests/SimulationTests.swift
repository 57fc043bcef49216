// The simulation in CI: a bounded number of seeds, and the runs that found bugs (regressions), each an
// explicit plan (Regressions.swift, RecordedSeeds.swift) so the generator cannot change what they test.
import Testing
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

    @Test func sameSeedSameRun() {
        let a = Simulation.run(seed: 42, steps: 120), b = Simulation.run(seed: 42, steps: 120)
        #expect(a.trace == b.trace && a.violations == b.violations && a.counters == b.counters)
    }

    @Test func literalRunsTheStepsItWasPrintedFrom() {
        // The printed plan of a shrunk trace, executed, runs the same steps as the seed's plan cut down.
        let plan = Plan(seed: 5).keeping([3, 4, 8, 10, 148, 153, 160])
        let printed = plan.swiftLiteral()
        #expect(printed == Regression.deleteAfterLostAnswer.plan.swiftLiteral())
        let a = Simulation.execute(plan), b = Simulation.execute(Regression.deleteAfterLostAnswer.plan)
        #expect(a.trace == b.trace && a.counters == b.counters && a.trace.count > 7)
    }
}
