// ubiquity-simulate [--seed N] [--runs K] [--hours H] [--steps S] [--only I,J,...] [--no-shrink] [--trace] [--literal]
//                   [--containers 2]
// (--containers 2: devices that hold two containers, as a mount of several: Account.swift; not with --only,
// --literal or shrinking)
// (--only: replay just those steps of the seed's plan, as printed for a shrunk failing trace; --literal: print
// the failing run's shrunk plan, or with --only or --no-shrink the plan run, as a Swift literal for a regression)
// K runs of the deterministic multi-device simulation from seed N (random when not given, and printed).
// Exit status 1 when an invariant is violated; the output is the same for the same seed and runs.
import Foundation
import UbiquitySim

/// Line by line, so a long run can be followed.
func print(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

var seed: UInt64?
var runs: Int?
var hours: Double?
var stepCount: Int?
var shrink = true
var showTrace = false
var literal = false
var only: [Int]?
var containers = 1
var args = Array(CommandLine.arguments.dropFirst())
let usageLine = "usage: ubiquity-simulate [--seed N] [--runs K] [--hours H] [--steps S] [--only I,J,...] [--no-shrink] [--trace] [--literal] [--containers 1|2]\n"
/// A wrong argument: the usage on stderr, exit 2.
func usage() -> Never {
    FileHandle.standardError.write(Data(usageLine.utf8))
    exit(2)
}
while !args.isEmpty {
    let a = args.removeFirst()
    func value() -> String {
        if args.isEmpty { usage() }
        return args.removeFirst()
    }
    func number<T: LosslessStringConvertible>(_: T.Type) -> T {
        guard let n = T(value()) else { usage() }
        return n
    }
    switch a {
    case "--seed": seed = number(UInt64.self)
    case "--runs": runs = number(Int.self)
    case "--hours": hours = number(Double.self)
    case "--steps": stepCount = number(Int.self)
    case "--only": only = value().split(separator: ",").compactMap { Int($0) }
    case "--no-shrink": shrink = false
    case "--trace": showTrace = true
    case "--literal": literal = true
    case "--containers":
        containers = number(Int.self)
        if containers != 1 && containers != 2 { usage() }
    case "--help", "-h":
        FileHandle.standardOutput.write(Data(usageLine.utf8))
        exit(0)
    default: usage()
    }
}
let first = seed ?? UInt64.random(in: 0..<1_000_000_000)
print("seed \(first)\(seed == nil ? " (random)" : "")")
let totalRuns = runs ?? (only != nil ? 1 : hours == nil ? 10 : Int.max)
let deadline = hours.map { Date().addingTimeInterval($0 * 3600) }

var done = 0, steps = 0, failedSeeds: [UInt64] = []
var totals: [String: Int] = [:]
var s = first
while done < totalRuns {
    if let deadline, Date() >= deadline { break }
    if containers == 2 {
        let plan = AccountPlan(seed: s, steps: stepCount)
        let r = Simulation.execute(plan)
        done += 1
        steps += r.steps
        for (k, v) in r.counters { totals[k, default: 0] += v }
        let faults = r.counters.filter { !$0.key.hasPrefix("step ") && !$0.key.hasPrefix("ok ") }.values.reduce(0, +)
        print("run seed=\(s) devices=\(plan.containers[0].devices) containers=2 steps=\(r.steps) faults=\(faults) \(r.failed ? "VIOLATED" : "ok")")
        if r.failed { failedSeeds.append(s); for v in r.violations { print("  violation: \(v)") } }
        if showTrace || r.failed { for line in r.trace { print("  | \(line)") } }
        s &+= 1
        continue
    }
    let generated = Plan(seed: s, steps: stepCount)
    let plan = only.map { generated.keeping($0) } ?? generated
    /// The index in the generated plan of each step run.
    let origin = only?.filter { $0 < generated.steps.count } ?? Array(generated.steps.indices)
    let r = Simulation.execute(plan)
    done += 1
    steps += r.steps
    for (k, v) in r.counters { totals[k, default: 0] += v }
    let faults = r.counters.filter { !$0.key.hasPrefix("step ") && !$0.key.hasPrefix("ok ") }.values.reduce(0, +)
    if r.failed {
        failedSeeds.append(s)
        print("run seed=\(s) devices=\(plan.devices) steps=\(r.steps) faults=\(faults) VIOLATED")
        print("  faults: \(plan.rates)")
        for v in r.violations { print("  violation: \(v)") }
        if showTrace { for line in r.trace { print("  | \(line)") } }
        if shrink {
            let (kept, sr) = Simulation.shrink(plan)
            let list = kept.map { String(origin[$0]) }.joined(separator: ",")
            print("  minimal trace (\(kept.count) of \(plan.steps.count) steps; replay: ubiquity-simulate --seed \(s) --only \(list)):")
            for line in sr.trace { print("  | \(line)") }
            for v in sr.violations { print("  | violation: \(v)") }
            if literal { print(plan.keeping(kept).swiftLiteral()) }
        } else if literal {
            print(plan.swiftLiteral())
        }
    } else {
        print("run seed=\(s) devices=\(plan.devices) steps=\(r.steps) faults=\(faults) ok")
        if showTrace { for line in r.trace { print("  | \(line)") } }
        if literal { print(plan.swiftLiteral()) }
    }
    s &+= 1
}
print("runs \(done), steps \(steps), seeds \(first)...\(first &+ UInt64(max(done, 1) - 1)), violations \(failedSeeds.count)")
for (k, v) in totals.sorted(by: { $0.key < $1.key }) { print("  \(k): \(v)") }
if !failedSeeds.isEmpty { print("failing seeds: \(failedSeeds.map(String.init).joined(separator: " "))") }
exit(failedSeeds.isEmpty ? 0 : 1)
