// `ubiquityfs chunks`: how a file's content is cut into content-defined chunks (UbiquityBase/Chunker.swift),
// each with its SHA-256, or a hole.
//
// What must hold: it only reads the files it is given (a file of a mount is read as any program reads it, so
// one not downloaded is downloaded first); a path that is missing or not a regular file is one line on stderr
// and exit 1, after the others are shown.
import Foundation
import Glibc
import UbiquityBase

enum ChunksCommand {
    static let help = """
    usage: ubiquityfs chunks [--json | --summary] FILE...

    Shows how each FILE's content is cut into chunks: offset, size and SHA-256 of each, or "hole" for a run of
    zeros (never stored or sent). --summary: one line per file (chunks, holes, bytes, and the speed of the cut
    and hashes); --json: every chunk as JSON.
    """

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: [], switches: ["--json", "--summary", "--help"])
        if args.has("--help") { return print(help) }
        guard !args.positional.isEmpty else { throw UsageError("chunks needs a FILE") }
        guard !(args.has("--json") && args.has("--summary")) else {
            throw UsageError("--json and --summary do not go together")
        }
        var files: [[String: Any]] = []
        var failed = false
        for path in args.positional {
            do {
                let started = monotonicNanoseconds()
                let chunks = try chunks(of: path)
                let seconds = Double(monotonicNanoseconds() - started) / 1e9
                if args.has("--json") {
                    files.append(["path": path, "chunks": chunks.map(json)])
                } else if args.has("--summary") {
                    print(summary(path, chunks, seconds: seconds))
                } else {
                    print("\(path):")
                    for c in chunks { print("  \(c.offset)\t\(c.size)\t\(c.sha256 ?? "hole")") }
                }
            } catch {
                FileHandle.standardError.write(Data("ubiquityfs: \(error)\n".utf8))
                failed = true
            }
        }
        if args.has("--json") {
            try printJSON(files)
        }
        if failed { exit(1) }
    }

    private static func chunks(of path: String) throws -> [Chunk] {
        var st = stat()
        guard stat(path, &st) == 0 else { throw CommandFailure("\(path): \(Errno(errno))") }
        guard st.st_mode & S_IFMT == S_IFREG else { throw CommandFailure("\(path) is not a regular file") }
        do {
            return try Chunker.chunks(ofFile: path)
        } catch let error as Errno {
            throw CommandFailure("\(path): \(error)")
        }
    }

    private static func json(_ c: Chunk) -> [String: Any] {
        var out: [String: Any] = ["offset": c.offset, "size": c.size]
        if let sha = c.sha256 { out["sha256"] = sha } else { out["hole"] = true }
        return out
    }

    private static func summary(_ path: String, _ chunks: [Chunk], seconds: Double) -> String {
        let data = chunks.filter { !$0.isHole }
        let total = chunks.reduce(Int64(0)) { $0 + $1.size }
        let inData = data.reduce(Int64(0)) { $0 + $1.size }
        let average = data.isEmpty ? 0 : inData / Int64(data.count)
        let speed = seconds > 0 ? Double(inData) / seconds / 1e6 : 0
        return "\(path): \(data.count) chunks, \(chunks.count - data.count) holes, \(total) bytes, "
            + "\(total - inData) in holes, \(average) a chunk on average, "
            + String(format: "%.0f MB/s", speed)
    }
}
