// A small argument parser: `--flag VALUE`, `--switch`, and positional words, with one plain line on error.
//
// What must hold: an option the command did not declare is an error, never ignored, and so are a switch given
// a value (`--wait=1`), a valued option without one and a number that is not a whole number of zero or more;
// each is a `UsageError`, which main.swift turns into exit status 2. `fail` prints one line and never returns.
import Foundation
import Glibc

struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

struct Arguments {
    private(set) var positional: [String] = []
    private var values: [String: String] = [:]
    private var switches: Set<String> = []

    /// Parses `words` knowing which flags take a value and which are switches; anything else is an error.
    init(_ words: [String], valued: Set<String>, switches known: Set<String>) throws {
        var i = 0
        while i < words.count {
            let w = words[i]
            if w.hasPrefix("--") {
                var name = w, inline: String?
                if let eq = w.firstIndex(of: "=") { name = String(w[..<eq]); inline = String(w[w.index(after: eq)...]) }
                if valued.contains(name) {
                    if let inline { values[name] = inline } else {
                        i += 1
                        guard i < words.count else { throw UsageError("\(name) needs a value") }
                        values[name] = words[i]
                    }
                } else if known.contains(name) && inline == nil {
                    switches.insert(name)
                } else {
                    throw UsageError("unknown option \(w)")
                }
            } else {
                positional.append(w)
            }
            i += 1
        }
    }

    func value(_ name: String) -> String? { values[name] }
    func has(_ name: String) -> Bool { switches.contains(name) }

    func int(_ name: String) throws -> Int? {
        guard let v = values[name] else { return nil }
        guard let n = Int(v), n >= 0 else { throw UsageError("\(name) takes a whole number, not '\(v)'") }
        return n
    }
}

/// Prints a command's `--json` answer: indented, keys sorted.
func printJSON(_ object: Any) throws {
    let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted])
    print(String(decoding: data, as: UTF8.self))
}

/// Prints one line to stderr and exits non-zero.
func fail(_ message: String, code: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("ubiquityfs: \(message)\n".utf8))
    exit(code)
}

func say(_ message: String) {
    FileHandle.standardOutput.write(Data((message + "\n").utf8))
}

/// Where ubiquityfs keeps its data: $XDG_DATA_HOME/ubiquityfs, else ~/.local/share/ubiquityfs.
func dataDirectory() -> String {
    let env = ProcessInfo.processInfo.environment
    if let xdg = env["XDG_DATA_HOME"], xdg.hasPrefix("/") { return xdg + "/ubiquityfs" }
    let home = env["HOME"] ?? NSHomeDirectory()
    return home + "/.local/share/ubiquityfs"
}

/// An absolute, normalised form of a path given on the command line.
func absolutePath(_ path: String) -> String {
    let url = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
    return url.standardizedFileURL.path
}

/// The path of this executable, to start daemons and the embedded stub.
func selfExecutable() -> String {
    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
}
