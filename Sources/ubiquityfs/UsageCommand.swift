// `ubiquityfs usage`: what the account stores on the remote, per container, against its quota, and what this
// device holds, from the `usage` attribute of the mount's root (AccountUsage.swift).
//
// What must hold: the figures shown were fetched after the command began when the remote answers within a few
// seconds (reading the attribute asks the daemon for newer ones); older ones are shown with their time, and
// none at all is one plain line and status 1, never zeros made up.
import Foundation
import Glibc
import UbiquityBase

enum UsageCommand {
    static let help = """
    usage: ubiquityfs usage MOUNT [--json]

    What the account stores on the remote, per container of the mount holding MOUNT: its documents (under
    Documents/), its other data, its kept past versions and its Recently Deleted; the account's total against
    its quota (one quota for all of the user's containers, and what it counts: every stored chunk, once);
    and what this device holds locally. --json: the figures as the root's user.ubiquity.usage attribute has
    them. Evicting files (ubiquityfs evict) frees room here, not on the remote: deleting does that.
    """

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: [], switches: ["--help", "--json"])
        if args.has("--help") { return print(help) }
        guard args.positional.count == 1 else { throw UsageError("usage needs one MOUNT") }
        let root = try TrashCommand.mountRoot(of: absolutePath(args.positional[0]))
        let began = Date()
        var text = try StatusCommand.attribute(root, "usage")
        // Reading it asked the daemon for newer figures: wait a little for them.
        while Date().timeIntervalSince(began) < 6, text.flatMap(fetchedAt).map({ $0 < began.addingTimeInterval(-1) }) ?? true {
            usleep(250_000)
            text = try StatusCommand.attribute(root, "usage")
        }
        guard let text, let data = text.data(using: .utf8),
              let report = try? JSONDecoder().decode(Report.self, from: data) else {
            throw CommandFailure("no usage known for \(root) yet: the remote has not answered")
        }
        if args.has("--json") { return print(text) }
        printTable([["CONTAINER", "DOCUMENTS", "DATA", "VERSIONS", "DELETED", "IN ALL"]] + report.containers.map { c in
            [c.container, readableSize(c.documents), readableSize(c.data), readableSize(c.versions),
             readableSize(c.deleted), readableSize(c.documents + c.data + c.versions + c.deleted)]
        })
        let percent = report.quota > 0 ? Int((Double(report.used) * 100 / Double(report.quota)).rounded(.down)) : 100
        print("\nthe account stores \(readableSize(report.used)) of \(readableSize(report.quota)) (\(percent)%), "
              + "as of \(report.at); this device holds \(readableSize(report.local)) locally")
        if report.used >= report.quota {
            print("the account is full: changes wait on the devices until something is deleted or the quota raised")
        }
    }

    private struct Row: Decodable {
        let container: String
        let documents, data, versions, deleted: Int64
    }

    private struct Report: Decodable {
        let at: String
        let used, quota, local: Int64
        let containers: [Row]
    }

    /// When the figures of a `usage` value were fetched.
    private static func fetchedAt(_ text: String) -> Date? {
        guard let data = text.data(using: .utf8),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let at = object["at"] as? String else { return nil }
        return ISO8601DateFormatter().date(from: at)
    }

    private static func printTable(_ rows: [[String]]) {
        let widths = (0..<rows[0].count).map { i in rows.map { $0[i].count }.max() ?? 0 }
        for row in rows {
            print(row.enumerated().map { i, cell in
                i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0)
            }.joined(separator: "  "))
        }
    }
}
