// The end of a run: heal every link, finish writes in progress, let pulls and pushes run until nothing moves,
// fetch every content once with the plan's faults and then calmly, then check the invariants (rules of the
// model in Model.swift).
import Foundation
import UbiquityBase
@_spi(Simulation) import UbiquityCore

extension World {
    /// Drives every device until the remote and all journals are still. Returns a violation when it cannot.
    func quiesce() -> String? {
        for dev in devices { dev.link.partitioned = false; dev.link.calm = true }
        stepIndex = plan.steps.count
        for dev in devices {
            for id in dev.openWrites.keys.sorted() {
                do { note("\(dev.name) endWrite: " + (try finishWrite(dev, id))) } catch { note("\(dev.name) endWrite: \(error)") }
            }
            for id in dev.openReads.keys.sorted() {
                do { note("\(dev.name) endRead: " + (try finishRead(dev, id))) } catch { note("\(dev.name) endRead: \(error)") }
            }
        }
        var failures: [String] = []
        for round in 1...40 {
            let before = remote.currentVersion
            failures = []
            for dev in devices {
                let c = dev.container!
                simLog.debug("\(dev.name): quiescing, round \(round)")
                do { while try c.pullOnce() {} } catch { failures.append("\(dev.name) pull: \(error)") }
                for _ in 0..<1000 {
                    let r = c.pushOnce()
                    if r != .idle { note("\(dev.name) push: \(r)") }
                    if case .failed(let id, let e) = r { failures.append("\(dev.name) push [\(short(id))]: \(e)"); break }
                    if r == .idle { break }
                }
            }
            // A store that cannot be read is a violation, never "nothing pending".
            do {
                let still = try remote.currentVersion == before && devices.allSatisfy {
                    try $0.container.pendingIDs().isEmpty && $0.container.feedPosition == String(remote.currentVersion)
                }
                if still { note("quiescent after \(round) round(s)"); return nil }
            } catch { return "a store failed while quiescing: \(error)" }
        }
        let pending = devices.map { "\($0.name): \((try? $0.container.pendingIDs().map(short)) ?? ["unreadable"])" }
        let stuck = devices.flatMap { dev in ((try? dev.container.pendingIDs()) ?? []).prefix(4).map { describe(dev, $0) } }
        return "no quiescence after 40 rounds; pending \(pending.joined(separator: ", ")); "
            + (failures.prefix(4) + stuck).joined(separator: "; ")
    }

    /// What a device holds of item `id` and of its folder, and the remote's: why a push may not go.
    private func describe(_ dev: SimDevice, _ id: String) -> String {
        func state(_ item: Item?) -> String {
            guard let item else { return "none" }
            return "\(item.name.isEmpty ? "/" : item.name) v\(item.remoteVersion)\(item.deleted ? " deleted" : "")"
                + "\(item.dirty ? " dirty" : "")\(item.metaDirty ? " metaDirty" : "")\(item.isLocalOnly ? " localOnly" : "")"
                + "\(item.isPending ? " pending" : "")"
        }
        let item = dev.container.item(id)
        let parent = item?.parent.flatMap { dev.container.item($0) }
        let remote = (try? remote.item(id)).map { "v\($0.version)\($0.deleted ? " deleted" : "") in \(short($0.parent ?? ""))" }
        return "\(dev.name) [\(short(id))] \(state(item)) in [\(short(item?.parent ?? ""))] \(state(parent)); remote \(remote ?? "none")"
    }

    /// Signature lines of a tree: one per live item below the root, sorted by path.
    static func signature(_ items: [(id: String, parent: String?, name: String, kind: ItemKind, mode: UInt32,
                                    mtime: Int64, size: Int64, sha: String, conflicts: [WireConflict])]) -> [String] {
        var byParent: [String: [Int]] = [:]
        for (i, it) in items.enumerated() { if let p = it.parent { byParent[p, default: []].append(i) } }
        var out: [String] = []
        func walk(_ id: String, _ prefix: String) {
            for i in (byParent[id] ?? []).sorted(by: { items[$0].name < items[$1].name }) {
                let it = items[i]
                let path = prefix + "/" + it.name
                let cs = it.conflicts.sorted { $0.id < $1.id }.map { "\($0.id):\($0.sha256.prefix(8)):\($0.size):\($0.device)" }
                out.append("\(path) [\(it.id.prefix(6))] \(it.kind.rawValue) \(String(it.mode, radix: 8)) mtime \(it.mtime) "
                           + "size \(it.size) \(it.sha.prefix(8)) conflicts \(cs)")
                walk(it.id, path)
            }
        }
        walk(WireRules.rootID, "")
        return out
    }

    func deviceSignature(_ dev: SimDevice) -> [String] {
        let items = dev.container.indexSnapshot().filter { !$0.deleted && $0.id != WireRules.rootID }
        return World.signature(items.map { ($0.id, $0.parent, $0.name, $0.kind, $0.mode, $0.mtime, $0.size,
                                            $0.isDirectory ? "" : $0.remoteSHA, $0.conflicts) })
    }

    func remoteSignature() -> [String] {
        let items = remote.allItems.filter { !$0.deleted && $0.id != WireRules.rootID }
        return World.signature(items.map { ($0.id, $0.parent, $0.name, $0.kind, $0.mode, $0.mtime, $0.size, $0.sha256,
                                            $0.conflicts) })
    }

    /// What the run violated: a violation that stopped it, else the end's checks and what the steps saw.
    func violations() -> [String] {
        runViolations.isEmpty ? check() + readViolations + installViolations : runViolations
    }

    /// Every invariant; an empty list when all hold.
    func check() -> [String] {
        if let stuck = quiesce() { return [stuck] }
        if let failed = fetchUnderFaults() { return [failed] }
        var v = fetchEverything()
        v += divergences()
        for dev in devices { v += integrity(dev) }
        v += lostContent()
        v += resurrections()
        return v
    }

    /// Once nothing moves, every device fetches each file's last version and conflict versions once with the
    /// plan's faults on (no partitions), drawn from a generator seeded by the plan's seed: every version a run
    /// made travels to every device at least once under faults (most of a run's downloads of files in chunks
    /// are here: cut, corrupt and missing chunks, crashes, a local older version to copy chunks from), and no
    /// unverified byte may be in place after it. The calm fetch that follows completes what it left. Returns
    /// the violation when a store fails.
    func fetchUnderFaults() -> String? {
        rng = SimRNG(seed: plan.seed)
        for dev in devices { dev.link.calm = false }
        defer { for dev in devices { dev.link.calm = true } }
        for dev in devices {
            let files = live(dev).filter { !$0.isDirectory }
            var failed = 0
            for key in files.flatMap({ f in [f.id] + f.conflicts.map { f.id + "." + $0.id } }) {
                if case .failure = dev.container.downloadOnce(key) { failed += 1 }
                if let v = restartIfCrashed(dev, at: "the fetch under faults") { return v }
            }
            note("\(dev.name) fetch under faults: \(failed) of \(files.count) file(s) and their conflict versions failed")
            if installViolations.count < 5 { installViolations += unverified(dev) }
        }
        return nil
    }

    /// Every device fetches every content and conflict version, so bytes can be compared. Like the daemon's
    /// downloads, a fetch is tried again after a failure (a partial file left by a fault is resumed, and if
    /// that resumed file does not verify it is dropped and the next try starts over).
    func fetchEverything() -> [String] {
        var v: [String] = []
        func fetch(_ c: Container, _ key: String) -> Result<Void, CoreError> {
            var result = c.downloadOnce(key)
            for _ in 0..<2 { if case .failure = result { result = c.downloadOnce(key) } }
            return result
        }
        for dev in devices {
            let c = dev.container!
            for f in live(dev).filter({ !$0.isDirectory }) {
                if case .failure(let e) = fetch(c, f.id) { v.append("\(dev.name): fetch of \(c.path(of: f.id)) failed: \(e)") }
                for cv in f.conflicts {
                    if case .failure(let e) = fetch(c, f.id + "." + cv.id) {
                        v.append("\(dev.name): fetch of conflict \(cv.id) of \(c.path(of: f.id)) failed: \(e)")
                    }
                }
            }
        }
        return v
    }

    /// Convergence: the same tree, metadata, current content and conflict versions everywhere.
    func divergences() -> [String] {
        var v: [String] = []
        let want = remoteSignature()
        for dev in devices {
            let got = deviceSignature(dev)
            if got != want {
                let extra = got.filter { !want.contains($0) }, missing = want.filter { !got.contains($0) }
                v.append("divergence: \(dev.name) differs from the remote: has \(extra.prefix(3)), lacks \(missing.prefix(3))")
            }
        }
        return v
    }

    /// Nothing lost: every content written and not deliberately replaced is on the remote, current or as a
    /// conflict version.
    func lostContent() -> [String] {
        var present = Set<String>()
        for w in remote.allItems where !w.deleted && w.kind == .file {
            present.insert(w.sha256)
            for c in w.conflicts { present.insert(c.sha256) }
        }
        var v: [String] = []
        for w in model.written where !present.contains(w.sha) && !model.superseded.contains(Model.key(w.item, w.sha)) {
            v.append("lost: content \(w.sha.prefix(8)) of [\(short(w.item))] (\(w.what) by \(w.device) at #\(w.step))")
        }
        return v
    }

    /// No resurrection: a delete that no concurrent edit contests stays done (unless an item revived below keeps the
    /// directory), and a resolved conflict version is not listed again.
    func resurrections() -> [String] {
        var v: [String] = []
        let liveIDs = Set(remote.allItems.filter { !$0.deleted }.map(\.id))
        let remoteByID = Dictionary(remote.allItems.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var aboveRevived = Set<String>()
        for d in model.deletes where liveIDs.contains(d.item) && model.contest(d) != nil {
            var p = remoteByID[d.item]?.parent
            while let dir = p, dir != WireRules.rootID { aboveRevived.insert(dir); p = remoteByID[dir]?.parent }
        }
        for d in model.deletes where liveIDs.contains(d.item) && model.contest(d) == nil && !aboveRevived.contains(d.item) {
            v.append("resurrected: [\(short(d.item))] deleted by \(d.device) at #\(d.step) with no concurrent edit is live")
        }
        for w in remote.allItems where !w.deleted {
            for c in w.conflicts {
                if let r = model.resolved[c.id] {
                    v.append("resurrected: conflict \(c.id) of [\(short(w.id))] resolved by \(r.device) at #\(r.step) is listed again")
                }
            }
        }
        return v
    }

    /// No unverified bytes in place, checked after every step on the device that made it: a file's clean local
    /// copy holds the bytes of the remote version it is a copy of (`localSHA`: the current one, or an older one
    /// not fetched again yet), and a conflict version's copy its own (a download cut, corrupt or crashed never
    /// installs part of a version or wrong bytes).
    func unverified(_ dev: SimDevice) -> [String] {
        guard let c = dev.container else { return [] }
        var v: [String] = []
        for item in c.indexSnapshot() where !item.isDirectory && !item.deleted {
            if item.hasLocal && !item.dirty, let want = item.localSHA,
               let (sha, _) = try? sha256OfFile(c.contentPath(item.id)), sha != want {
                v.append("unverified: [\(short(item.id))] on \(dev.name) holds \(sha.prefix(8)), not its version \(want.prefix(8)), after #\(stepIndex)")
            }
            for cv in item.conflicts {
                if let (sha, _) = try? sha256OfFile(c.conflictPath(item.id, cv.id)), sha != cv.sha256 {
                    v.append("unverified: conflict \(cv.id) of [\(short(item.id))] on \(dev.name) holds \(sha.prefix(8)), after #\(stepIndex)")
                }
            }
        }
        return v
    }

    /// Store integrity of one quiescent device.
    func integrity(_ dev: SimDevice) -> [String] {
        var v: [String] = []
        let c = dev.container!
        let index = c.indexSnapshot()
        let byID = Dictionary(uniqueKeysWithValues: index.map { ($0.id, $0) })
        let stored: [Item]
        do { stored = try c.storedItems().sorted { $0.id < $1.id } } catch { return ["\(dev.name): the store does not load: \(error)"] }
        let indexNoRoot = index.filter { $0.id != WireRules.rootID }
        let storedNoRoot = stored.filter { $0.id != WireRules.rootID }
        if indexNoRoot != storedNoRoot {
            let diff = Set(indexNoRoot.map(\.id)).symmetricDifference(storedNoRoot.map(\.id)).sorted().map(short)
            v.append("\(dev.name): the index and the store differ (ids \(diff))")
        }
        var names = Set<String>()
        for item in index where item.id != WireRules.rootID {
            let name = item.name
            if item.deleted || item.isPending { v.append("\(dev.name): [\(short(item.id))] \(name) still pending after quiescence") }
            guard let p = item.parent, let parent = byID[p], !parent.deleted, parent.isDirectory else {
                v.append("\(dev.name): [\(short(item.id))] \(name) has no live parent directory"); continue
            }
            if !names.insert(p + "/" + name).inserted { v.append("\(dev.name): two items named \(name) in [\(short(p))]") }
            if c.lookup(parent: p, name: name)?.id != item.id {
                v.append("\(dev.name): [\(short(item.id))] \(name) is not listed in its folder [\(short(p))] (the folder names \(c.lookup(parent: p, name: name).map { short($0.id) } ?? "nothing") so)")
            }
            let path = c.contentPath(item.id)
            let exists = FileManager.default.fileExists(atPath: path)
            if !item.isDirectory && item.hasLocal != exists {
                v.append("\(dev.name): [\(short(item.id))] \(name) hasLocal \(item.hasLocal) but content file exists \(exists)")
            }
            if !item.isDirectory && item.hasLocal, let (sha, _) = try? sha256OfFile(path), sha != item.remoteSHA {
                v.append("\(dev.name): [\(short(item.id))] \(name) local bytes \(sha.prefix(8)) are not the current \(item.remoteSHA.prefix(8))")
            }
            for (i, cv) in item.conflicts.enumerated() where item.conflicts[..<i].contains(where: { $0.isSameWrite(as: cv) }) {
                v.append("\(dev.name): [\(short(item.id))] \(name) lists the same write twice as a conflict version")
            }
            for cv in item.conflicts {
                if let (sha, _) = try? sha256OfFile(c.conflictPath(item.id, cv.id)), sha != cv.sha256 {
                    v.append("\(dev.name): conflict \(cv.id) of \(name): local bytes are not its content")
                }
            }
        }
        let listed = Set(index.filter { !$0.isDirectory && $0.hasLocal }.map(\.id)
                         + index.flatMap { i in i.conflicts.map { i.id + "." + $0.id } })
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: c.contentDirectory)) ?? []).sorted()
        for f in files where !listed.contains(f) { v.append("\(dev.name): orphan content file \(f)") }
        let staging = (try? FileManager.default.contentsOfDirectory(atPath: c.stagingDirectory)) ?? []
        if !staging.isEmpty { v.append("\(dev.name): left in staging: \(staging.sorted().joined(separator: ", "))") }
        return v
    }
}
