// A plan written out as a Swift literal, so a (shrunk) failing run can be pasted into the tests as an explicit
// list of steps. What must hold: executing the printed literal runs exactly the steps of the plan it was
// printed from (the same kinds, devices, seeds and times, the same devices, faults and feed page), whatever
// `Plan(seed:)` generates later.
import Foundation
import UbiquityBase

extension Plan {
    /// The plan with only the steps at `indices` (as `Simulation.shrink` returns them), in that order.
    public func keeping(_ indices: [Int]) -> Plan {
        var p = self
        p.steps = indices.filter { $0 < steps.count }.map { steps[$0] }
        return p
    }

    /// `Plan(seed: ..., devices: ..., feedPage: ..., rates: FaultRates(...), chunkFormat: ..., steps: [ Step(...),
    /// ... ])`, every line after the first indented by `indent` spaces.
    public func swiftLiteral(indent: Int = 0) -> String {
        let pad = String(repeating: " ", count: indent)
        let r = rates
        var lines = ["Plan(seed: \(seed), devices: \(devices), feedPage: \(feedPage),"]
        lines.append(pad + "     rates: FaultRates(dropRequest: \(r.dropRequest), dropResponse: \(r.dropResponse), "
                     + "duplicate: \(r.duplicate), staleFeed: \(r.staleFeed),")
        lines.append(pad + "                       slowTransfer: \(r.slowTransfer), corrupt: \(r.corrupt), "
                     + "missingChunk: \(r.missingChunk), crashInTransfer: \(r.crashInTransfer)"
                     + (r.slowAnswer > 0 ? ", slowAnswer: \(r.slowAnswer))," : "),"))
        let f = chunkFormat
        lines.append(pad + "     chunkFormat: " + (f == .standard ? ".standard," : "ChunkFormat(chunkedAbove: "
                     + "\(f.chunkedAbove), minSize: \(f.minSize), averageSize: \(f.averageSize), maxSize: \(f.maxSize)),"))
        lines.append(pad + "     steps: [")
        for step in steps {
            let seedHex = "0x" + String(step.seed, radix: 16)
            lines.append(pad + "        Step(.\(step.kind.rawValue), on: \(step.device), seed: \(seedHex), after: \(step.dt)),")
        }
        lines.append(pad + "     ])")
        return lines.joined(separator: "\n")
    }
}
