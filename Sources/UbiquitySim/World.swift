// One simulated run: a MemoryRemote, N devices each with its own Store in a temporary directory and a
// fault-injecting link, a virtual clock, and the steps a seeded scheduler planned. Everything happens on one
// thread in the order of the plan, so a seed (and a plan) reproduces exactly.
//
// Durability model: a crash is a crash of the daemon process (not of the machine). What survives it is what a
// killed process leaves: committed SQLite transactions (the store) and bytes written to content files. What is
// lost is everything only in memory: the Container's index and its in-memory bookkeeping, open file handles
// (a program writing through the mount loses its handle; bytes it wrote stay in the content file), downloads
// in flight (staging is emptied when the store opens). Power loss (unsynced page cache) is not modelled. A crash
// inside a transfer (SimLink) fails every later call of the step and restarts the device right after it.
//
// What must hold: each device's core runs with the simulation's environment (virtual clock, seeded ids, sleeps
// that move the clock, no jitter, no background transfers, no snapshots of open writes), so nothing happens
// but the planned steps, in plan order. A crash drops every reference to the old Container before the store
// opens again. A step that cannot find a target is a `Skip`, an ordinary outcome, not a violation.
import Foundation
import UbiquityBase
@_spi(Simulation) import UbiquityCore
import UbiquityTesting
#if canImport(Glibc)
import Glibc
#endif

public enum StepKind: String, CaseIterable, Sendable {
    case create, mkdir, write, append, truncate, beginWrite, endWrite, rename, move, delete, rmdir, chmod
    case evict, pin, discard, promote, keepCurrent
    case pull, push, download, partition, heal, crash
    case holdRead, endRead, exchange, fsync, moveInto
    case edit, grow
    /// A file moved from the other container of a device that holds two (`mv` across them: a copy and a delete).
    case moveAcross

    var weight: Int {
        switch self {
        case .pull, .push: return 14
        case .create, .write: return 8
        case .download: return 6
        case .append, .rename, .move, .delete, .endWrite, .edit: return 4
        case .grow: return 5
        case .mkdir, .truncate, .beginWrite, .evict, .discard, .promote, .heal, .holdRead, .endRead: return 3
        case .rmdir, .chmod, .pin, .keepCurrent, .partition, .crash, .exchange, .fsync, .moveInto: return 2
        case .moveAcross: return 0 // (only in runs of devices that hold two containers: AccountPlan)
        }
    }
}

public struct Step: Sendable {
    public var kind: StepKind
    public var device: Int
    /// Seeds every random choice made in this step (what to touch, which faults strike).
    public var seed: UInt64
    /// Virtual time that passes before the step, in nanoseconds.
    public var dt: Int64

    /// One step as recorded in a regression: `Step(.push, on: 1, seed: 0x..., after: 3_000_000)`.
    public init(_ kind: StepKind, on device: Int, seed: UInt64, after dt: Int64) {
        self.kind = kind; self.device = device; self.seed = seed; self.dt = dt
    }
}

public struct Plan: Sendable {
    public var seed: UInt64
    public var devices: Int
    public var rates: FaultRates
    public var feedPage: Int
    /// The chunk format every device of the run is configured with.
    public var chunkFormat: ChunkFormat
    public var steps: [Step]

    /// An explicit plan, as recorded in a regression (`swiftLiteral`): it runs the same whatever the
    /// generator below becomes. `seed` seeds the devices' ids and the faults of the fetch after quiescence
    /// (`fetchUnderFaults`) only. Plans recorded before chunks ran in the
    /// standard format, whose files of a few hundred bytes are never chunked.
    public init(seed: UInt64, devices: Int, feedPage: Int, rates: FaultRates, chunkFormat: ChunkFormat = .standard,
                steps: [Step]) {
        self.seed = seed; self.devices = devices; self.rates = rates; self.feedPage = feedPage
        self.chunkFormat = chunkFormat; self.steps = steps
    }

    /// A format in the standard's proportions around a small average, so that files of a few hundred bytes
    /// go in chunks of tens to hundreds: chunked above four times the average, chunks of a quarter of it to
    /// four times it.
    public static func smallChunkFormat(average: Int) -> ChunkFormat {
        ChunkFormat(chunkedAbove: Int64(4 * average), minSize: average / 4, averageSize: average, maxSize: 4 * average)
    }

    /// The plan a seed stands for: in three runs out of four a small chunk format (an average of 32, 64 or
    /// 128 bytes), else the standard one.
    public init(seed: UInt64, steps count: Int? = nil) {
        self.seed = seed
        var rng = SimRNG(seed: seed)
        devices = 3 + rng.int(2)
        rates = FaultRates(dropRequest: Double(rng.int(12)) / 100, dropResponse: Double(rng.int(12)) / 100,
                           duplicate: Double(rng.int(10)) / 100, staleFeed: Double(rng.int(8)) / 100,
                           slowTransfer: Double(rng.int(20)) / 100, corrupt: Double(rng.int(6)) / 100)
        feedPage = 1 + rng.int(6)
        rates.missingChunk = Double(rng.int(20)) / 100
        rates.crashInTransfer = Double(rng.int(6)) / 100
        chunkFormat = rng.chance(0.75) ? Plan.smallChunkFormat(average: 32 << rng.int(3)) : .standard
        let n = count ?? (120 + rng.int(280))
        let kinds = StepKind.allCases
        let total = kinds.reduce(0) { $0 + $1.weight }
        var planned: [Step] = []
        for _ in 0..<n {
            var r = rng.int(total)
            var kind = kinds[0]
            for k in kinds { if r < k.weight { kind = k; break }; r -= k.weight }
            let dt: Int64 = rng.chance(0.1) ? 0 : Int64(1 + rng.int(5000)) * 1_000_000
            planned.append(Step(kind, on: rng.int(devices), seed: rng.next(), after: dt))
        }
        steps = planned
        // (Drawn last, so the plans of the seeds drawn before it keep their steps and their other rates.)
        rates.slowAnswer = Double(rng.int(25)) / 100
    }
}

final class SimDevice {
    let index: Int
    let name: String
    let dir: String
    let link: SimLink
    let ids: IDSource
    var container: Container!
    /// Items this device holds open for writing across steps (a program in the middle of writing), with the
    /// program's descriptor: its writes reach the file it opened, also once that file is deleted.
    var openWrites: [String: FileDescriptor] = [:]
    /// Files a program holds open for reading across steps (`tail -f`, a viewer), by item: the descriptor, the
    /// hash of what it read at its open, and whether this device changed the file since (its own writes reach
    /// the same open file, as on any file system).
    var openReads: [String: HeldRead] = [:]
    /// Held files saved over by rename whose release still names the new file, by the file they are now: the
    /// adapter learns of a save after the core made it, so a release racing it gives that id.
    var releasedAs: [String: String] = [:]
    /// How many times the device's daemon started again (a crash step, or a crash inside a transfer).
    var restarts = 0

    init(index: Int, dir: String, link: SimLink, ids: IDSource) {
        self.index = index
        self.name = link.device
        self.dir = dir
        self.link = link
        self.ids = ids
    }
}

/// The core's log lines of a replay (`UBIQUITY_SIM_LOG`) follow the step that caused them.
let simLog = Logger("sim")

struct HeldRead {
    let fd: FileDescriptor
    let sha: String
    let size: Int
    var changedHere = false
}

/// Why a step did nothing: its target was missing or the core refused (an ordinary outcome, not a violation).
struct Skip: Error { let why: String }

/// A device's store failed (it could not open again after a crash, or could not be read): a violation that
/// ends the run, reported with the step, never a crash of the process that runs it.
struct DeviceFailed: Error { let device: String; let cause: String }

final class World {
    let plan: Plan
    let remote = MemoryRemote()
    let clock: SimClock
    var rng = SimRNG(seed: 0)
    var rates: FaultRates { plan.rates }
    var devices: [SimDevice] = []
    let base: String
    var model = Model()
    var counters: [String: Int] = [:]
    var trace: [String] = []
    var stepIndex = 0
    /// Violations found while running (a restart that failed), reported with the step that caused them.
    var runViolations: [String] = []
    /// Held readers that read other bytes than at their open (checked with the other invariants at the end).
    var readViolations: [String] = []
    /// Content in place that is not the version the device says it is, seen after a step (`unverified`).
    var installViolations: [String] = []
    /// Inside `meanwhile`.
    private var inMeanwhile = false

    /// `clock`: the run's virtual clock (one for the worlds of devices that hold several containers).
    init(plan: Plan, clock: SimClock = SimClock()) throws {
        self.plan = plan
        self.clock = clock
        var template = Array((NSTemporaryDirectory() + "/ubiquity-sim-XXXXXX").utf8CString)
        base = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        remote.changeLimit = plan.feedPage
        for i in 0..<plan.devices {
            let name = String(UnicodeScalar(UInt8(97 + i)))
            let link = SimLink(remote: remote, device: name, world: self)
            let dev = SimDevice(index: i, dir: base + "/" + name, link: link,
                                ids: IDSource(seed: plan.seed &* 31 &+ UInt64(i) &+ 1))
            devices.append(dev)
            try open(dev)
        }
    }

    deinit { try? FileManager.default.removeItem(atPath: base) }

    func count(_ what: String, _ n: Int = 1) { counters[what, default: 0] += n }
    func note(_ line: String) { trace.append("#\(stepIndex) " + line) }

    /// Opens (or reopens after a crash) a device's container from its store.
    func open(_ dev: SimDevice) throws {
        var config = ContainerConfig(device: dev.name)
        config.chunkFormat = plan.chunkFormat
        config.environment.clock = { [clock] in clock.now }
        config.environment.randomHex = { [ids = dev.ids] in ids.hex($0) }
        config.environment.backgroundTransfers = false
        // A retry's wait only moves the virtual clock, and loses no jitter (the same plan, the same times).
        config.environment.sleep = { [clock] in clock.advance($0) }
        config.environment.randomUnit = { 0 }
        // Writes left open go up at their fsync points (`fsync`), once quiet this long, and at their close.
        config.snapshotQuietSeconds = 20
        dev.container = try Container(store: try Store(directory: dev.dir), remote: dev.link, config: config)
    }

    /// A remote write of `w` by `device` was applied: every deliberate operation of that device on the item
    /// (or, for a child, on its parent directory) has now reached the remote. Not a step aside (the item put
    /// under a name of its own to free its old one in an exchange or a rotation, Pusher.stepAside): the move
    /// it makes way for lands only at the item's next push, so a delete made elsewhere in between is a delete
    /// concurrent with that move.
    func reached(_ device: String, _ w: WireItem) {
        if w.name == WireRules.asideName(w.id) { return }
        model.reached(device: device, item: w.id, parent: w.parent, version: w.version)
    }

    // MARK: running

    func run(_ steps: [Step]) {
        for (i, step) in steps.enumerated() {
            clock.advance(step.dt)
            guard runStep(i, step.kind, on: step.device, seed: step.seed, { try perform(step.kind, $0) }) else { return }
        }
    }

    /// Step `i` (of kind `kind`, by device `device`, its choices seeded by `seed`), done by `body`, then its
    /// checks. False when the run must stop there (a violation that leaves nothing to go on with).
    func runStep(_ i: Int, _ kind: StepKind, on device: Int, seed: UInt64, _ body: (SimDevice) throws -> String) -> Bool {
        stepIndex = i
        rng = SimRNG(seed: seed)
        let dev = devices[device]
        count("step " + kind.rawValue)
        simLog.debug("#\(i) \(dev.name) \(kind.rawValue)")
        do {
            let what = try body(dev)
            note("\(dev.name) \(kind.rawValue): \(what)")
        } catch let s as Skip {
            note("\(dev.name) \(kind.rawValue): skipped (\(s.why))")
        } catch let f as DeviceFailed {
            note("\(dev.name) \(kind.rawValue): the store failed: \(f.cause)")
            runViolations.append("store failed: \(f.device) at #\(i) (\(kind.rawValue)): \(f.cause)")
            return false
        } catch {
            note("\(dev.name) \(kind.rawValue): \(error)")
        }
        if let failed = restartIfCrashed(dev, at: "#\(i)") {
            runViolations.append(failed)
            return false
        }
        if installViolations.count < 5 { installViolations += unverified(dev) }
        // A folder below itself would hang or crash every later walk up the tree: the run stops there.
        if let cycle = dev.container.flatMap(World.cycle) {
            runViolations.append("\(dev.name) at #\(i) (\(kind.rawValue)): \(cycle) lies below itself")
            return false
        }
        return true
    }

    /// Inside an item write of `device` that the remote applied and has not answered yet (SimLink's slow
    /// answer): another device pulls, writes the same file over (or one of its own choice), and pushes; then
    /// the device's own puller runs, as it does beside its pusher. Not nested: a write in here answers at once.
    func meanwhile(_ device: String, item id: String) {
        guard !inMeanwhile, let pushing = devices.first(where: { $0.name == device }) else { return }
        inMeanwhile = true
        defer { inMeanwhile = false }
        count("slow answer")
        let others = devices.filter { $0.name != device }
        let other = others[rng.int(others.count)]
        performMeanwhile(.pull, other) { try perform(.pull, other) }
        performMeanwhile(.write, other) { try overwriteFile(other, rng.chance(0.7) ? id : nil) }
        performMeanwhile(.push, other) { try perform(.push, other) }
        if let failed = restartIfCrashed(other, at: "#\(stepIndex), meanwhile") { runViolations.append(failed) }
        // (The device's own crash in a transfer waits for the end of its step: its push is on the stack.)
        performMeanwhile(.pull, pushing) { try perform(.pull, pushing) }
    }

    private func performMeanwhile(_ kind: StepKind, _ dev: SimDevice, _ body: () throws -> String) {
        do {
            note("meanwhile \(dev.name) \(kind.rawValue): " + (try body()))
        } catch let s as Skip {
            note("meanwhile \(dev.name) \(kind.rawValue): skipped (\(s.why))")
        } catch let f as DeviceFailed {
            note("meanwhile \(dev.name) \(kind.rawValue): the store failed: \(f.cause)")
            runViolations.append("store failed: \(f.device) at #\(stepIndex) (meanwhile \(kind.rawValue)): \(f.cause)")
        } catch {
            note("meanwhile \(dev.name) \(kind.rawValue): \(error)")
        }
    }

    /// A device that crashed inside a transfer (SimLink) starts again from its store, before anything else
    /// happens. Returns the violation when its store does not open again.
    func restartIfCrashed(_ dev: SimDevice, at when: String) -> String? {
        guard dev.link.crashed else { return nil }
        dev.link.crashed = false
        do { note("\(dev.name) crashed in a transfer: " + (try restart(dev))) } catch let f as DeviceFailed {
            note("\(dev.name) crashed in a transfer: the store failed: \(f.cause)")
            return "store failed: \(f.device) at \(when) (a crash in a transfer): \(f.cause)"
        } catch {
            note("\(dev.name) crashed in a transfer: \(error)")
        }
        return nil
    }

    /// An item of the container's index that lies below itself, if any.
    static func cycle(_ container: Container) -> String? {
        let items = Dictionary(container.indexSnapshot().map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        for start in items.keys {
            var seen: Set<String> = [start]
            var cursor = items[start]?.parent
            while let p = cursor {
                if !seen.insert(p).inserted { return String(p.prefix(6)) }
                cursor = items[p]?.parent
            }
        }
        return nil
    }
}
