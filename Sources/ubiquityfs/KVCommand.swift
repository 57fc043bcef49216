// `ubiquityfs kv get|set|delete|list|watch MOUNT ...`: the key-value store of a mount through its files,
// `MOUNT/.kvstore/KEY` (a value as text), `MOUNT/.kvstore/.json/KEY` (as typed JSON) and
// `MOUNT/.kvstore/.changes` (the change records, which watch follows).
//
// What must hold: the command reaches the store only through those files, never a socket or the database, so
// the mount's checks and limits apply to it as to any program. A set writes the whole value and checks the
// close, where the mount stores it or refuses it (a quota or size refusal shows there); each refusal's errno
// becomes one plain line (`message`). `watch` prints each record once, in order, by its sequence number, and says on stderr
// when it has read where it starts, after which no record is missed.
import Foundation
import Glibc
import UbiquityBase

enum KVCommand {
    static let help = """
    usage: ubiquityfs kv get [--json] MOUNT KEY        print a value (--json: typed, {"type":"integer","value":5})
           ubiquityfs kv set [--json] MOUNT KEY [VALUE]  set a value (without VALUE: read from stdin)
           ubiquityfs kv delete MOUNT KEY
           ubiquityfs kv list [--json] MOUNT            the keys (--json: one object of keys and typed values)
           ubiquityfs kv watch [--json] [--all] MOUNT   print each change that came from elsewhere, one line each:
                                                        the reason (ServerChange, InitialSyncChange,
                                                        QuotaViolationChange, AccountChange) and the keys;
                                                        --all: first those kept since the mount started;
                                                        once it is watching it says so on stderr (a line
                                                        beginning "kv watch: watching"), so a script can wait

    Limits (Apple's): keys of 1 to 64 bytes of UTF-8 (here also without '/', and not . or ..), at most 1024
    keys, at most 1 MB in all.
    """

    static func run(_ words: [String]) throws {
        let args = try Arguments(words, valued: [], switches: ["--json", "--all", "--help"])
        if args.has("--help") { return print(help) }
        var rest = args.positional
        guard !rest.isEmpty else { throw UsageError("kv needs an action: get, set, delete, list or watch") }
        let action = rest.removeFirst()
        guard !rest.isEmpty else { throw UsageError("kv \(action) needs a MOUNT") }
        let mount = rest.removeFirst()
        try StatusCommand.needOneContainer(mount, "kv \(action)")
        let dir = mount + "/.kvstore"
        var st = stat()
        guard stat(dir, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw CommandFailure("kv \(action): \(dir) is not there: not a ubiquityfs mount")
        }
        let json = args.has("--json")
        let keyDir = json ? dir + "/.json" : dir
        func key() throws -> String {
            guard let k = rest.first else { throw UsageError("kv \(action) needs a KEY") }
            if let why = keyProblem(k) { throw CommandFailure("kv \(action): \(why)") }
            return k
        }
        do {
            switch action {
            case "get":
                let k = try key()
                var bytes = reserved.contains(k) && !json ? try text(ofTyped: readFile(dir + "/.json/" + k))
                    : try readFile(keyDir + "/" + k)
                if bytes.last != 0x0a { bytes.append(0x0a) }
                FileHandle.standardOutput.write(Data(bytes))
            case "set":
                let k = try key()
                let value = rest.count > 1 ? Array(rest[1].utf8) : Array(FileHandle.standardInput.readDataToEndOfFile())
                if reserved.contains(k) && !json {
                    try writeFile(dir + "/.json/" + k, typed(text: value))
                } else {
                    try writeFile(keyDir + "/" + k, value)
                }
            case "delete":
                if unlink(dir + "/.json/" + (try key())) != 0 { throw Errno.current }
            case "list":
                try list(dir, json: json)
            case "watch":
                try watch(dir + "/.changes", json: json, all: args.has("--all"))
            default:
                throw UsageError("unknown kv action '\(action)'")
            }
        } catch let e as Errno {
            if ["list", "watch"].contains(action) { throw CommandFailure("kv \(action): \(dir): \(e)") }
            throw CommandFailure("kv \(action): " + message(e.rawValue, key: rest.first ?? ""))
        }
    }

    /// Keys whose names `.kvstore` uses for itself: as text they go through their typed files in `.json`.
    static let reserved: Set = [".json", ".changes"]

    /// What is wrong with a key for the store and its file view, or nil.
    static func keyProblem(_ key: String) -> String? {
        if key.isEmpty { return "a key cannot be empty" }
        if key.contains("/") { return "a key cannot contain '/'" }
        if key == "." || key == ".." { return "the keys . and .. cannot be used" }
        if key.utf8.count > KVLimits.maxKeyBytes { return KVLimits.Violation.keyTooLong.message }
        if !isUTF8OnTheCommandLine(key) { return "a key must be UTF-8" }
        return nil
    }

    /// False when `key` came from an argument whose bytes are not UTF-8 (Swift's arguments replace them with
    /// U+FFFD, which would store another key than the one typed).
    static func isUTF8OnTheCommandLine(_ key: String) -> Bool {
        for i in 0..<Int(CommandLine.argc) {
            guard let arg = CommandLine.unsafeArgv[i] else { continue }
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(arg).assumingMemoryBound(to: UInt8.self),
                                            count: strlen(arg))
            if String(validating: bytes, as: UTF8.self) == nil && String(decoding: bytes, as: UTF8.self) == key {
                return false
            }
        }
        return true
    }

    /// A text value as its typed JSON file holds it (a string, or data when the bytes are not UTF-8).
    static func typed(text bytes: [UInt8]) throws -> [UInt8] {
        Array(try JSONEncoder.wire.encode(KVValue(text: bytes)))
    }

    /// What a text file of the key would read: a string's bytes, any other value as its typed JSON.
    static func text(ofTyped bytes: [UInt8]) throws -> [UInt8] {
        if case .string(let s)? = try? JSONDecoder().decode(KVValue.self, from: Data(bytes)) { return Array(s.utf8) }
        return bytes
    }

    /// One clear line for each refusal.
    static func message(_ code: Int32, key: String) -> String {
        switch code {
        case ENAMETOOLONG: return KVLimits.Violation.keyTooLong.message
        case EFBIG: return KVLimits.Violation.valueTooLarge.message
        case EDQUOT: return "over the quota (at most \(KVLimits.maxKeys) keys and 1 MB in all)"
        case ENOENT: return "no such key: \(key)"
        case EINVAL: return "not a typed JSON value (e.g. {\"type\":\"integer\",\"value\":5})"
        default: return String(cString: strerror(code))
        }
    }

    static func readFile(_ path: String) throws -> [UInt8] {
        let fd = try FileDescriptor.open(path, O_RDONLY)
        defer { fd.close() }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = try buf.withUnsafeMutableBytes { try fd.read(into: $0) }
            if n == 0 { return out }
            out += buf[0..<n]
        }
    }

    /// Writes the whole value and closes: the value is stored at close, where a quota refusal shows.
    static func writeFile(_ path: String, _ bytes: [UInt8]) throws {
        let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
        do { try fd.writeAll(bytes) } catch { _ = Glibc.close(fd.raw); throw error }
        if Glibc.close(fd.raw) != 0 { throw Errno.current }
    }

    static func list(_ dir: String, json: Bool) throws {
        let keys = try FileManager.default.contentsOfDirectory(atPath: dir + "/.json").sorted()
        guard json else { return keys.forEach { say($0) } }
        var parts: [String] = []
        for k in keys {
            guard let value = try? readFile(dir + "/.json/" + k) else { continue } // deleted meanwhile
            let name = String(decoding: try JSONEncoder.wire.encode(k), as: UTF8.self)
            parts.append(name + ":" + String(decoding: value, as: UTF8.self).trimmingCharacters(in: .newlines))
        }
        say("{" + parts.joined(separator: ",") + "}")
    }

    struct Record: Decodable { let seq: Int64; let reason: String; let keys: [String] }

    /// Follows the change records, printing those that arrive after it started (with `all`, also the kept ones).
    static func watch(_ path: String, json: Bool, all: Bool) throws {
        var seen = all ? 0 : try records(path).last?.0.seq ?? 0
        // The readiness signal: every record from here on is printed.
        FileHandle.standardError.write(Data("kv watch: watching \(path) after change \(seen)\n".utf8))
        while true {
            for (r, line) in try records(path) where r.seq > seen {
                seen = r.seq
                say(json ? line : ([r.reason] + r.keys).joined(separator: " "))
            }
            usleep(200_000)
        }
    }

    static func records(_ path: String) throws -> [(Record, String)] {
        let text = String(decoding: try readFile(path), as: UTF8.self)
        // The lines are the mount's own records (KeyValueFiles.swift); one this command cannot read is skipped,
        // so that it does not end the watch.
        return text.split(separator: "\n").compactMap { line in
            (try? JSONDecoder().decode(Record.self, from: Data(line.utf8))).map { ($0, String(line)) }
        }
    }
}
