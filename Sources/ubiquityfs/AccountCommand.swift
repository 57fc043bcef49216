// `ubiquityfs remote user ...` and `ubiquityfs remote device ...`: the accounts of a remote (Accounts.swift).
//
// What must hold: a new key is shown to no one but the file it goes to: that file is created (mode 0600,
// refusing one that exists) before the key is made, so a key is never registered without a file that holds
// it, and the key is written there only, never printed. The commands work on the metadata directly, while
// servers run on it: the servers look every key up at every request.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore
import UbiquityStub

enum AccountCommand {
    static let help = """
    usage: ubiquityfs remote user add|remove NAME --data DIR [--metadata postgresql://... [--metadata-password-file F]]
           ubiquityfs remote user add|set NAME [--quota SIZE] [--containers N] [--items N] --data DIR [--metadata ...]
           ubiquityfs remote user list --data DIR [--metadata ...]
           ubiquityfs remote device add USER DEVICE --key-file FILE --data DIR [--metadata ...]
           ubiquityfs remote device list [USER] --data DIR [--metadata ...]
           ubiquityfs remote device revoke USER DEVICE --data DIR [--metadata ...]

    The users of a remote and their devices' keys. A key (256 random bits, 64 hex digits) opens its own user's
    containers only; another user's containers are not there for it. `device add` writes the new key to FILE
    (created, mode 0600; give it to the device's `mount --token-file`); the remote keeps only its hash.
    `device revoke` refuses the key from its next request on; the device's mount keeps its changes queued
    until it is mounted with a new key. `user remove` removes the user and every key of its devices; its
    containers stay in the store, and a user added later under that name does not get them.
    Each user's limits, shared by all of the user's containers: --quota, the bytes stored (K, M, G or T,
    powers of 1024; kept versions and Recently Deleted count too), --containers and --items (live files,
    folders and links). `default` sets a limit back to the standard one (1T, 100 containers, 1000000
    items); `user list` shows them, `remote usage` what each user has. Past a limit the server refuses
    what would add (507 over quota) and keeps what is stored; the devices keep their changes queued.
    The first time a store is opened it gets the user `default`, whose device `token` has the key in DIR/token
    (or --token-file) when that file exists: what the single-token remote had.
    Names are 1 to 64 of A-Z a-z 0-9 . - _, not starting with . or -. Run them on the machine of the server,
    as its user: they read and write DIR (or the --metadata database) directly, while servers run.
    """

    static func run(_ kind: String, _ words: [String]) throws {
        let args = try Arguments(words, valued: ["--data", "--metadata", "--metadata-password-file", "--token-file", "--key-file",
                                                 "--quota", "--containers", "--items"],
                                 switches: ["--help"])
        if args.has("--help") { return print(help) }
        guard let action = args.positional.first else { throw UsageError("remote \(kind) needs add, remove, list or revoke") }
        let names = Array(args.positional.dropFirst())
        let limits = try limitChanges(args)
        if !limits.isEmpty && !(kind == "user" && ["add", "set"].contains(action)) {
            throw UsageError("--quota, --containers and --items go with remote user add or set")
        }
        let accounts = try open(args)
        defer { accounts.close() }
        switch (kind, action, names.count) {
        case ("user", "add", 1):
            try accounts.addUser(names[0])
            if !limits.isEmpty { try accounts.setLimits(names[0]) { for change in limits { change(&$0) } } }
            say("added user \(names[0])")
        case ("user", "set", 1):
            guard !limits.isEmpty else { throw UsageError("remote user set needs --quota, --containers or --items") }
            try accounts.setLimits(names[0]) { for change in limits { change(&$0) } }
            let now = try accounts.limits(names[0])
            say("user \(names[0]): \(describe(now))")
        case ("user", "remove", 1):
            try accounts.removeUser(names[0])
            say("removed user \(names[0]) and every key of its devices")
        case ("user", "list", 0):
            for user in try accounts.users() {
                say("\(user.name) \(isoDate(user.created)) \(describe(try accounts.limits(user.name)))")
            }
        case ("device", "add", 2):
            try addDevice(accounts, user: names[0], device: names[1], keyFile: args.value("--key-file"))
        case ("device", "list", 0...1):
            for d in try accounts.devices(of: names.first) {
                say("\(d.owner) \(d.name) " + (d.revoked.map { "revoked \(isoDate($0))" } ?? "active \(isoDate(d.created))"))
            }
        case ("device", "revoke", 2):
            try accounts.revoke(user: names[0], device: names[1])
            say("revoked the key of \(names[0])'s device \(names[1])")
        default:
            throw UsageError(kind == "user" ? "remote user takes add NAME, set NAME, remove NAME or list"
                                            : "remote device takes add USER DEVICE, list [USER] or revoke USER DEVICE")
        }
    }

    /// The changes --quota, --containers and --items ask for (`default`: back to the standard limit).
    private static func limitChanges(_ args: Arguments) throws -> [(inout LimitSettings) -> Void] {
        var changes: [(inout LimitSettings) -> Void] = []
        if let text = args.value("--quota") {
            let value: Int64?
            if text == "default" { value = nil } else {
                guard case .bytes(let n)? = SizeSpec.parse(text), n > 0 else {
                    throw UsageError("--quota takes bytes with K, M, G or T (powers of 1024), like 50G, or default; not '\(text)'")
                }
                value = n
            }
            changes.append { $0.storage = value }
        }
        for (name, key) in [("--containers", \LimitSettings.containers), ("--items", \LimitSettings.items)] {
            guard let text = args.value(name) else { continue }
            let value: Int64?
            if text == "default" { value = nil } else {
                guard let n = Int64(text), n >= 0 else { throw UsageError("\(name) takes a count or default; not '\(text)'") }
                value = n
            }
            changes.append { $0[keyPath: key] = value }
        }
        return changes
    }

    private static func describe(_ l: UserLimits) -> String {
        "quota \(readableSize(l.storage)), at most \(l.containers) containers and \(l.items) items"
    }

    private static func open(_ args: Arguments) throws -> Accounts {
        guard let data = args.value("--data") else { throw UsageError("the account commands need --data DIR") }
        umask(0o077)
        let dir = absolutePath(data)
        let (url, password) = try RemoteCommand.metadata(args)
        return try Accounts(dataDir: dir, metadataURL: url, metadataPassword: password,
                            tokenPath: args.value("--token-file").map(absolutePath) ?? dir + "/token")
    }

    private static func addDevice(_ accounts: Accounts, user: String, device: String, keyFile: String?) throws {
        guard let keyFile else { throw UsageError("remote device add needs --key-file FILE, where the new key goes") }
        let path = absolutePath(keyFile)
        let fd: FileDescriptor
        do { fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600) } catch {
            throw StubError("cannot create the key file \(path): \(error)" + (error == .exists ? " (it exists: give a new path)" : ""))
        }
        var written = false
        defer {
            fd.close()
            if !written { unlink(path) }
        }
        fchmod(fd.raw, 0o600)
        let key = try accounts.addDevice(user: user, device: device)
        do {
            try fd.writeAll(Array((key + "\n").utf8))
            try fd.sync()
        } catch {
            try? accounts.revoke(user: user, device: device) // a key no file holds opens nothing
            throw StubError("cannot write the key file \(path): \(error); the device's key was revoked")
        }
        written = true
        say("added device \(device) of user \(user); its key is in \(path)")
    }

    private static func isoDate(_ ns: Int64) -> String {
        let f = ISO8601DateFormatter()
        return f.string(from: Date(timeIntervalSince1970: TimeInterval(ns) / 1e9))
    }
}
