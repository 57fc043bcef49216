// Seeded randomness and the virtual clock of the simulation. SplitMix64: tiny, fast, and its output is fixed
// by this file alone (the standard library's `random(in:using:)` may change between releases).
//
// What must hold: every random draw of a run comes from these generators, seeded from the plan, never from the
// system: the scheduler's (reseeded from each step's own seed, so a step draws the same whatever came before
// it) and each device's `IDSource` for new ids. `SimClock` moves only by a step's `dt` and by the core's retry
// sleeps. A run is one thread, so their locks (`Locked`, which lets the core's `@Sendable` closures capture
// them) are never contended.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the clock's and the generators' are leaves.
import Foundation
import UbiquityBase

public struct SimRNG: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in 0..<n (n > 0).
    public mutating func int(_ n: Int) -> Int { Int(next() % UInt64(max(n, 1))) }
    public mutating func chance(_ p: Double) -> Bool { Double(next() >> 11) / Double(1 << 53) < p }
    public mutating func pick<T>(_ list: [T]) -> T? { list.isEmpty ? nil : list[int(list.count)] }
}

/// The simulation's wall clock: moved only by the scheduler.
final class SimClock: Sendable {
    private let nanoseconds = Locked<Int64>(1_800_000_000 * 1_000_000_000)
    var now: Int64 { nanoseconds.withLock { $0 } }
    func advance(_ dt: Int64) { nanoseconds.withLock { $0 += dt } }
}

/// Per-device generator of item and conflict ids.
final class IDSource: Sendable {
    private let rng: Locked<SimRNG>
    init(seed: UInt64) { rng = Locked(SimRNG(seed: seed)) }
    func hex(_ bytes: Int) -> String {
        rng.withLock { rng in
            var s = ""
            for _ in 0..<bytes { s += String(format: "%02x", Int(rng.next() & 0xff)) }
            return s
        }
    }
}
