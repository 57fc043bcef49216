// Runs of the simulation: one plan executed and checked, shrinking of a failing plan, and the totals.
import Foundation
import UbiquityBase
@_spi(Simulation) import UbiquityCore

public struct RunResult: Sendable {
    public var seed: UInt64
    public var steps: Int
    public var violations: [String]
    public var trace: [String]
    public var counters: [String: Int]
    public var failed: Bool { !violations.isEmpty }
}

public enum Simulation {
    /// The core's logs would carry real time stamps: the simulation keeps them out of its output, unless
    /// `UBIQUITY_SIM_LOG` names a file for them (every level, to follow one replayed run).
    static let quietLogs: Void = {
        if let path = ProcessInfo.processInfo.environment["UBIQUITY_SIM_LOG"] {
            Log.shared.configure(level: .debug, path: path)
        } else {
            Log.shared.configure(level: .error, path: "/dev/null")
        }
    }()

    /// Executes a plan (or a shrunk list of its steps) and checks the invariants.
    public static func execute(_ plan: Plan, steps: [Step]? = nil) -> RunResult {
        _ = quietLogs
        let steps = steps ?? plan.steps
        do {
            let world = try World(plan: plan)
            world.run(steps)
            return RunResult(seed: plan.seed, steps: steps.count, violations: world.violations(), trace: world.trace,
                             counters: world.counters)
        } catch {
            return RunResult(seed: plan.seed, steps: steps.count, violations: ["setup failed: \(error)"], trace: [],
                             counters: [:])
        }
    }

    public static func run(seed: UInt64, steps: Int? = nil) -> RunResult { execute(Plan(seed: seed, steps: steps)) }

    /// The kind of a violation, without the names, ids, hashes and numbers that differ from run to run.
    static func kind(_ violation: String) -> String {
        violation.split(separator: " ").map { word in
            word.contains(where: \.isNumber) || word.hasPrefix("[") || word.hasSuffix(":") && word.count <= 2
                ? "_" : String(word)
        }.joined(separator: " ")
    }

    /// Removes steps while the run still fails the same way (a violation of the first one's kind): chunks of
    /// halving size, at most `budget` re-executions. Deterministic: every step carries its own seed. Returns
    /// the indices of the steps kept.
    public static func shrink(_ plan: Plan, budget: Int = 200) -> (kept: [Int], result: RunResult) {
        var kept = Array(plan.steps.indices)
        var best = execute(plan)
        let wanted = best.violations.first.map(kind)
        var tries = 0
        var chunk = max(1, kept.count / 2)
        while tries < budget {
            var i = 0
            while i < kept.count && tries < budget {
                var candidate = kept
                candidate.removeSubrange(i..<min(i + chunk, kept.count))
                tries += 1
                let r = execute(plan, steps: candidate.map { plan.steps[$0] })
                if r.violations.contains(where: { kind($0) == wanted }) { kept = candidate; best = r } else { i += chunk }
            }
            if chunk == 1 { break }
            chunk /= 2
        }
        return (kept, best)
    }
}
