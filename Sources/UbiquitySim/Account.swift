// Runs of devices that hold two containers, as one daemon serves a mount of several (`--containers A,B`): two
// worlds, each one container (its remote container, the devices' stores of it, its model), on one virtual
// clock. A step acts in one container of one device; a crash of a device's daemon (a crash step, or one inside
// a transfer) restarts both its containers, as the process holds both; and a move between the containers (`mv`
// across them: the kernel's EXDEV, then a copy and a delete) creates the file in the other container with the
// content it shows here and then deletes it here. Each container is then checked by its own rules (Check.swift).
//
// What must hold: a run of a seed is the same every time (each world's choices are seeded by the step, the one
// clock moves only by the plan's steps); the two containers share nothing but the clock, the device's
// restarts and what a move carries, as on a real device.
import Foundation
import UbiquityBase
@_spi(Simulation) import UbiquityCore

/// One step of a run of devices that hold two containers: `step` in container `container`, or for a
/// `.moveAcross` step a file moved from container `container` to the other one.
public struct AccountStep: Sendable {
    public var container: Int
    public var step: Step
}

/// A run of devices that hold two containers: a plan for each container (the same devices), and the steps of
/// both, interleaved, with moves between them.
public struct AccountPlan: Sendable {
    public var seed: UInt64
    public var containers: [Plan]
    public var steps: [AccountStep]

    /// The plan a seed stands for: the plans of two seeds drawn from it (the second with the first's devices),
    /// their steps interleaved at random, and a move between the containers for about one step in 25.
    public init(seed: UInt64, steps count: Int? = nil) {
        self.seed = seed
        var rng = SimRNG(seed: seed ^ 0x5eed_acc0)
        var a = Plan(seed: rng.next(), steps: count.map { $0 / 2 })
        var b = Plan(seed: rng.next(), steps: count.map { $0 - $0 / 2 })
        b.devices = a.devices
        b.steps = b.steps.map { Step($0.kind, on: $0.device % a.devices, seed: $0.seed, after: $0.dt) }
        var merged: [AccountStep] = []
        var i = 0, j = 0
        while i < a.steps.count || j < b.steps.count {
            if rng.chance(0.04) {
                let dt: Int64 = Int64(1 + rng.int(2000)) * 1_000_000
                merged.append(AccountStep(container: rng.int(2), step: Step(.moveAcross, on: rng.int(a.devices), seed: rng.next(), after: dt)))
            }
            if j >= b.steps.count || (i < a.steps.count && rng.chance(0.5)) {
                merged.append(AccountStep(container: 0, step: a.steps[i])); i += 1
            } else {
                merged.append(AccountStep(container: 1, step: b.steps[j])); j += 1
            }
        }
        // Each world's own plan has as many steps as the run (its end, `quiesce`, comes after every step).
        let placeholder = merged.map(\.step)
        a.steps = placeholder
        b.steps = placeholder
        containers = [a, b]
        steps = merged
    }
}

extension Simulation {
    /// Executes a run of devices that hold two containers and checks each container.
    public static func execute(_ plan: AccountPlan) -> RunResult {
        _ = quietLogs
        let names = ["A", "B"]
        do {
            let clock = SimClock()
            let worlds = try plan.containers.map { try World(plan: $0, clock: clock) }
            run: for (i, s) in plan.steps.enumerated() {
                clock.advance(s.step.dt)
                let here = worlds[s.container], other = worlds[1 - s.container]
                let d = s.step.device
                let restarts = here.devices[d].restarts
                let body: (SimDevice) throws -> String = s.step.kind == .moveAcross
                    ? { try here.moveAcross($0, to: other, seed: s.step.seed &+ 1) }
                    : { try here.perform(s.step.kind, $0) }
                guard here.runStep(i, s.step.kind, on: d, seed: s.step.seed, body) else { break run }
                // One daemon holds both containers: when it started again, so did the other one.
                if here.devices[d].restarts != restarts {
                    guard other.runStep(i, .crash, on: d, seed: s.step.seed, { try other.restart($0) }) else { break run }
                }
            }
            var violations: [String] = [], trace: [String] = [], counters: [String: Int] = [:]
            for (name, w) in zip(names, worlds) {
                violations += w.violations().map { "container \(name): " + $0 }
                trace += w.trace.map { "\(name) " + $0 }
                for (k, v) in w.counters { counters[k, default: 0] += v }
            }
            return RunResult(seed: plan.seed, steps: plan.steps.count, violations: violations, trace: trace, counters: counters)
        } catch {
            return RunResult(seed: plan.seed, steps: plan.steps.count, violations: ["setup failed: \(error)"], trace: [], counters: [:])
        }
    }
}

extension World {
    /// `mv` of a file of this container to the other container of the same device: the copy reads the whole
    /// file (downloading it if need be), creates it in a folder there with the same name and content, and
    /// then the file here is deleted, as any unlink.
    func moveAcross(_ dev: SimDevice, to other: World, seed: UInt64) throws -> String {
        let c = dev.container!
        let pool = live(dev).filter { !$0.isDirectory && dev.openWrites[$0.id] == nil && dev.openReads[$0.id] == nil }
        guard let item = rng.pick(pool) else { throw Skip(why: "nothing") }
        try ensureLocal(dev, item.id)
        let bytes: [UInt8]
        do { bytes = Array(try Data(contentsOf: URL(fileURLWithPath: c.contentPath(item.id)))) } catch {
            throw Skip(why: "cannot read it: \(error)")
        }
        let there = other.devices[dev.index]
        other.rng = SimRNG(seed: seed)
        other.stepIndex = stepIndex
        let copied = try other.copyIn(there, name: item.name, bytes)
        other.note("\(there.name) moveAcross: in from the other container: \(copied)")
        return "\(c.path(of: item.id)) [\(short(item.id))] to the other container (\(copied)), then " + (try remove(dev, c, item, directory: false))
    }

    /// The copy's side of a move between containers: a new file `name` in some folder, holding `bytes`.
    private func copyIn(_ dev: SimDevice, name: String, _ bytes: [UInt8]) throws -> String {
        let c = dev.container!
        let parent = try pickDir(dev)
        let (item, fd) = try c.createAndOpen(parent: parent.id, name: name, mode: 0o644)
        defer { fd.close() }
        try c.release(item.id, through: fd, .init(writable: true))
        deliberate(dev, item.id)
        try writeWhole(dev, item.id, bytes)
        recordContent(dev, item.id, "moved in")
        return "\(c.path(of: item.id)) [\(short(item.id))] \(bytes.count) bytes"
    }
}
