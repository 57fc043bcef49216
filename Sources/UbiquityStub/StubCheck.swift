// `remote check`: reads every blob and manifest of every container and says which files have lost content
// (issue 52, point 8). A blob whose bytes do not hash to its name is damaged; with `repair` it is set aside as a
// read that found it would, so it counts as absent everywhere (`chunks/missing` lists it, a GET answers 404) and
// the next upload of any file holding it stores it again. What no server can repair by itself is content that no
// blob holds any more: the check lists each live file (and conflict version) whose content is missing or damaged,
// by user, container and path, for someone to upload it again from a device that has it.
//
// What must hold: the check only reads, but for the setting aside of damaged blobs with `repair`, which is what a
// server does on its own when a read finds one; it runs beside the servers on the same store.
import Foundation
import UbiquityBase

/// One thing `remote check` found.
public struct CheckFinding: Equatable, Sendable, Codable {
    public enum Kind: String, Sendable, Codable {
        /// A stored blob (a whole content or a chunk) whose bytes do not hash to its name.
        case damagedBlob
        /// A stored manifest that cannot be read.
        case damagedManifest
        /// A live file (or a conflict version of one) whose content no sound blob holds: lost until a device
        /// uploads it again.
        case missingContent
    }
    public var kind: Kind
    public var user: String
    /// The container's id on the wire.
    public var container: String
    public var sha256: String
    /// A missing content's file, from the container's root.
    public var path: String?
    /// A damaged blob was set aside (`--repair`).
    public var setAside = false
}

/// What `remote check` saw and found.
public struct CheckReport: Equatable, Sendable, Codable {
    public var containers = 0
    public var blobs = 0
    public var bytes: Int64 = 0
    public var manifests = 0
    public var findings: [CheckFinding] = []
}

extension StubStore {
    /// Checks one container (stored id `cid`, shown as `user` and `wireID`); sets damaged blobs aside with `repair`.
    func check(_ cid: String, user: String, wireID: String, repair: Bool, into report: inout CheckReport) throws(ServerFailure) {
        report.containers += 1
        func finding(_ kind: CheckFinding.Kind, _ sha: String, path: String? = nil, setAside: Bool = false) -> CheckFinding {
            CheckFinding(kind: kind, user: user, container: wireID, sha256: sha, path: path, setAside: setAside)
        }
        var damaged = Set<String>()
        for blob in try blobs.list(cid) where blob.sha256 != emptySHA256 {
            report.blobs += 1
            report.bytes += blob.size
            guard try !blobIsSound(cid, blob.sha256, size: blob.size) else { continue }
            damaged.insert(blob.sha256)
            if repair { try blobs.setAsideDamaged(cid, blob.sha256, size: blob.size) }
            report.findings.append(finding(.damagedBlob, blob.sha256, setAside: repair))
        }
        var unreadable = Set<String>()
        for stored in try blobs.listManifests(cid) {
            report.manifests += 1
            if (try? manifest(cid, stored.sha256)) == nil {
                unreadable.insert(stored.sha256)
                report.findings.append(finding(.damagedManifest, stored.sha256))
            }
        }
        let stored = Set(try blobs.list(cid).map(\.sha256)).subtracting(damaged).union([emptySHA256])
        func isHeld(_ sha: String) throws(ServerFailure) -> Bool {
            if stored.contains(sha) { return true }
            guard !unreadable.contains(sha), let m = try manifest(cid, sha) else { return false }
            return m.chunkHashes.allSatisfy(stored.contains)
        }
        for (path, sha) in try namedFiles(cid) where try !isHeld(sha) {
            report.findings.append(finding(.missingContent, sha, path: path))
        }
    }

    /// Every live file's content and each of its conflict versions', with the file's path, by path.
    private func namedFiles(_ cid: String) throws(ServerFailure) -> [(path: String, sha256: String)] {
        let items = try reading(cid) { (tx) throws(ServerFailure) in try tx.items(cid, after: 0, limit: Int.max) }.filter { !$0.deleted }
        let byID = Dictionary(items.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        func path(_ item: WireItem) -> String {
            var names: [String] = [], cur: WireItem? = item, hops = 0
            while let c = cur, c.id != WireRules.rootID, hops < 4096 {
                names.append(c.name)
                cur = c.parent.flatMap { byID[$0] }
                hops += 1
            }
            return names.reversed().joined(separator: "/")
        }
        var named: [(path: String, sha256: String)] = []
        for item in items where item.kind == .file {
            let p = path(item)
            named.append((p, item.sha256))
            for c in item.conflicts { named.append((p + " (conflict version of \(c.device))", c.sha256)) }
        }
        return named.sorted { $0.path < $1.path }
    }
}
