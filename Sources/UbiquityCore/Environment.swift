// What the core takes from the world outside: the clock, randomness for new ids, and whether transfers run on
// threads of their own. Production uses the defaults (real clock, system randomness, background threads); the
// simulator (Sources/UbiquitySim) injects a virtual clock and seeded generators, and drives the core step by
// step through the entry points in Stepping.swift instead of background threads.
import UbiquityBase

public struct CoreEnvironment: Sendable {
    /// Wall-clock time in nanoseconds since the epoch (modification times, conflict decisions).
    public var clock: @Sendable () -> Int64 = { nowNanoseconds() }
    /// `count` random bytes as hex: ids of new items and of conflict versions.
    public var randomHex: @Sendable (Int) -> String = { UbiquityBase.randomHex(bytes: $0) }
    /// False: downloads asked for are only queued (see `Container.requestedDownloads`) and the owner fetches
    /// them with `Container.downloadOnce`; nothing starts a thread. `start` is not to be called then.
    public var backgroundTransfers = true

    public init() {}
}
