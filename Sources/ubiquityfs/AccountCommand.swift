// `ubiquityfs remote user ...` and `ubiquityfs remote device ...`: the accounts of a remote (Accounts.swift).
//
// What must hold: a new key is shown to no one but the file it goes to: that file is created (mode 0600,
// refusing one that exists) before the key is made, so a key is never registered without a file that holds
// it, and the key is written there only, never printed. The commands work on the metadata directly, while
// servers run on it: the servers look every key up at every request.
import Foundation
import Glibc
import UbiquityBase
import UbiquityStub

enum AccountCommand {
    static let help = """
    usage: ubiquityfs remote user add|remove NAME --data DIR [--metadata postgresql://... [--metadata-password-file F]]
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
    The first time a store is opened it gets the user `default`, whose device `token` has the key in DIR/token
    (or --token-file) when that file exists: what the single-token remote had.
    Names are 1 to 64 of A-Z a-z 0-9 . - _, not starting with . or -. Run them on the machine of the server,
    as its user: they read and write DIR (or the --metadata database) directly, while servers run.
    """

    static func run(_ kind: String, _ words: [String]) throws {
        let args = try Arguments(words, valued: ["--data", "--metadata", "--metadata-password-file", "--token-file", "--key-file"],
                                 switches: ["--help"])
        if args.has("--help") { return print(help) }
        guard let action = args.positional.first else { throw UsageError("remote \(kind) needs add, remove, list or revoke") }
        let names = Array(args.positional.dropFirst())
        let accounts = try open(args)
        defer { accounts.close() }
        switch (kind, action, names.count) {
        case ("user", "add", 1):
            try accounts.addUser(names[0])
            say("added user \(names[0])")
        case ("user", "remove", 1):
            try accounts.removeUser(names[0])
            say("removed user \(names[0]) and every key of its devices")
        case ("user", "list", 0):
            for user in try accounts.users() { say("\(user.name) \(isoDate(user.created))") }
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
            throw UsageError(kind == "user" ? "remote user takes add NAME, remove NAME or list"
                                            : "remote device takes add USER DEVICE, list [USER] or revoke USER DEVICE")
        }
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
