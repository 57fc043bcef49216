// The store's integrity check (`ubiquityfs check --store DIR`): everything the invariants at the top of
// Model.swift promise, verified against the files on disk, with an optional repair of what can be repaired
// without losing anything (a corrupt clean copy is dropped and fetched again at the next open; leftovers in
// staging and content files of no item are removed). Dirty content is never touched.
import Foundation
import UbiquityBase

public struct CheckReport: Sendable {
    public var items = 0
    public var verifiedFiles = 0
    public var problems: [String] = []
    public var repaired: [String] = []
    public var isClean: Bool { problems.isEmpty }
}

extension Store {
    /// Checks the database and the content files; with `repair`, fixes what can be fixed safely.
    public func check(repair: Bool) throws -> CheckReport {
        var report = CheckReport()
        let verdict = try db.query("PRAGMA integrity_check").first.map { $0.text(0) } ?? "no answer"
        if verdict != "ok" { report.problems.append("database: \(verdict)") }
        var items = try loadItems()
        report.items = items.count
        let byID = Dictionary(items.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var names: NameTable = [:]
        for item in items where !item.deleted {
            guard let parent = item.parent else { continue }
            if byID[parent].map({ $0.deleted || !$0.isDirectory }) ?? true {
                report.problems.append("\(item.name) (\(item.id)): its parent \(parent) is missing")
            }
            let key = parent + "/" + item.name
            if let other = names[key] {
                report.problems.append("\(item.name): two items (\(other), \(item.id)) share one name")
            }
            names[key] = item.id
        }
        let pending = Set(try pendingIDs())
        for item in items where item.isPending && !pending.contains(item.id) {
            report.problems.append("\(item.name) (\(item.id)): changed here but missing from the journal")
        }
        for index in items.indices where items[index].kind == .file && !items[index].deleted {
            if let fixed = try checkContent(&items[index], repair: repair, report: &report) { try save(fixed) }
        }
        try checkLeftovers(known: Set(byID.keys), conflicts: items, repair: repair, report: &report)
        return report
    }

    /// Verifies one file's local content; returns the item to save when repaired.
    private func checkContent(_ item: inout Item, repair: Bool, report: inout CheckReport) throws -> Item? {
        let path = contentPath(item.id)
        let exists = FileManager.default.fileExists(atPath: path)
        if item.hasLocal != exists {
            report.problems.append("\(item.name) (\(item.id)): " + (exists ? "content file not recorded" : "content file missing"))
            // A local-only file's copy is its only one: reported, never dropped.
            guard repair, !item.dirty, !item.isLocalOnly else { return nil }
            if exists { removeLeftover(path) }
            item.hasLocal = false
            item.localSHA = nil
            report.repaired.append("\(item.name): dropped; it is fetched again when opened")
            return item
        }
        guard exists, !item.dirty, let expected = item.localSHA else { return nil }
        let (sha, _) = try sha256OfFile(path)
        report.verifiedFiles += 1
        guard sha != expected else { return nil }
        report.problems.append("\(item.name) (\(item.id)): local content is corrupt (hash \(sha.prefix(12)), expected \(expected.prefix(12)))")
        guard repair, !item.isLocalOnly else { return nil }
        removeLeftover(path)
        item.hasLocal = false
        item.localSHA = nil
        report.repaired.append("\(item.name): corrupt copy dropped; it is fetched again when opened")
        return item
    }

    /// Content files of no item and staging leftovers.
    /// Removes a leftover for a repair; what the report says of it.
    private func removed(_ path: String, as name: String) -> String {
        do { try removeFile(path) } catch { return "\(name): cannot remove it: \(error)" }
        return "\(name): removed"
    }

    private func checkLeftovers(known: Set<String>, conflicts items: [Item], repair: Bool,
                                report: inout CheckReport) throws {
        var conflictFiles = Set<String>()
        for item in items { for c in item.conflicts { conflictFiles.insert(item.id + "." + c.id) } }
        // A folder that cannot be listed fails the check: it cannot say the store is sound.
        for name in try FileManager.default.contentsOfDirectory(atPath: contentDirectory) {
            if known.contains(name) || conflictFiles.contains(name) { continue }
            report.problems.append("content/\(name): belongs to no item")
            if repair { report.repaired.append(removed(contentDirectory + "/" + name, as: "content/\(name)")) }
        }
        for name in try FileManager.default.contentsOfDirectory(atPath: stagingDirectory) {
            report.problems.append("staging/\(name): an interrupted download")
            if repair { report.repaired.append(removed(stagingDirectory + "/" + name, as: "staging/\(name)")) }
        }
    }
}
