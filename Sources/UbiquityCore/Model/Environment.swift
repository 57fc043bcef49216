// What the core takes from the world outside: the clock, randomness for new ids and for the jitter of retries,
// sleeping, and whether transfers run on threads of their own. Production uses the defaults (real clock, system
// randomness, real sleeps, background threads); the simulator (Sources/UbiquitySim) injects a virtual clock,
// seeded generators and sleeps that only move its clock, and drives the core step by step through the entry
// points in Stepping.swift instead of background threads.
// Every retry in the core waits as `Backoff` says, and sleeps through `CoreEnvironment.sleep` (or, where a
// wake-up must cut the wait short, on its own condition for the time `Backoff` gives).
//
// What must hold: the times of items, the ids of new items and the sleeps between a download's tries come
// from the `CoreEnvironment` given (so a simulated run is the same for the same seed). With
// `backgroundTransfers` false no thread is started for a transfer (the chunks of a file go one at a time). A `Backoff` wait is never over its cap and
// loses at most `jitter` of itself; `sleepNanoseconds` sleeps the whole time, resuming after a signal. Not yet
// so (left as it is): the key-value store stamps writes with the real clock.
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

public struct CoreEnvironment: Sendable {
    /// Wall-clock time in nanoseconds since the epoch (modification times, conflict decisions).
    public var clock: @Sendable () -> Int64 = { nowNanoseconds() }
    /// `count` random bytes as hex: ids of new items and of conflict versions.
    public var randomHex: @Sendable (Int) -> String = { UbiquityBase.randomHex(bytes: $0) }
    /// A random number in [0, 1): how much of its jitter a retry's wait loses.
    public var randomUnit: @Sendable () -> Double = { Double.random(in: 0..<1) }
    /// Blocks the calling thread for that many nanoseconds (the waits between retries).
    public var sleep: @Sendable (Int64) -> Void = { sleepNanoseconds($0) }
    /// False: downloads asked for are only queued (see `Container.requestedDownloads`) and the owner fetches
    /// them with `Container.downloadOnce`; nothing starts a thread. `start` is not to be called then.
    public var backgroundTransfers = true
    /// Tests only: runs once the bytes of a small file to upload are read, before their content generation
    /// is taken (`smallContentForUpload`, the file's gate held), with the item's id.
    public var afterUploadRead: (@Sendable (String) -> Void)? = nil

    /// The chunks of one file that go up or down at once: 4, each on a thread of its own; without background
    /// transfers one at a time, in order, on the calling thread (a driver that steps the core sees no thread).
    var chunkStreams: Int { backgroundTransfers ? 4 : 1 }

    public init() {}
}

/// nanosleep(2) for the whole time, resumed after a signal.
func sleepNanoseconds(_ nanoseconds: Int64) {
    guard nanoseconds > 0 else { return }
    var want = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    var left = timespec()
    while nanosleep(&want, &left) != 0 && errno == EINTR { want = left }
}

/// The one backoff policy of the core: the first wait after a failure is `base`, each further one twice the one
/// before, never more than `cap`; each loses a random part of up to `jitter` of itself, so devices that failed
/// together do not all try again at the same moment. A success starts over (`reset`).
struct Backoff: Sendable {
    let base: Int64
    let cap: Int64
    /// The largest fraction of a wait that its jitter takes off (0: none).
    let jitter: Double
    private var next: Int64

    init(base: Int64, cap: Int64, jitter: Double = 0.2) {
        precondition(base > 0 && cap >= base && (0...1).contains(jitter), "a backoff needs 0 < base <= cap, jitter in 0...1")
        self.base = base
        self.cap = cap
        self.jitter = jitter
        next = base
    }

    /// Downloads: 0.2 s doubling to 5 s, within the download's deadline.
    static let download = Backoff(base: 200_000_000, cap: 5_000_000_000)
    /// The change feed and the push loop: 0.5 s doubling to 30 s.
    static let sync = Backoff(base: 500_000_000, cap: 30_000_000_000)

    /// The wait before the next try after a failure (taking `random`, in [0, 1), for the jitter); the wait
    /// after it is twice as long, up to the cap.
    mutating func delay(random: Double) -> Int64 {
        let full = next
        next = min(next * 2, cap)
        return full - Int64(Double(full) * jitter * min(max(random, 0), 1))
    }

    /// The wait before the next try, drawing its jitter from the environment.
    mutating func delay(in environment: CoreEnvironment) -> Int64 { delay(random: environment.randomUnit()) }

    /// Waits before the next try, up to `limit` nanoseconds, through the environment's sleep.
    mutating func sleep(in environment: CoreEnvironment, limit: Int64 = .max) {
        environment.sleep(min(delay(in: environment), limit))
    }

    /// After a success: the next failure waits `base` again.
    mutating func reset() { next = base }
}
