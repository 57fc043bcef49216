// Accounts: the users of a remote, their devices' keys, and the containers a key opens.
//
// What must hold: the metadata keeps only the SHA-256 of each key. A key is 256 bits from the system's
// generator, so its hash can be neither reversed nor searched, and looking a key up by its hash (through an
// index, not a constant-time compare) tells a timing attacker nothing of any key. Every request looks its key up
// again, so a key revoked on any server sharing the metadata is refused at its next request. A key opens its own
// user's containers only: each user's container ids are stored under the user's prefix (`ContainerScope`), so
// another user's container is simply not there (404), and a container a key creates is its own user's.
// The first opening of a store makes the user `default` with the empty prefix and, when there is a token file,
// registers its key as that user's device `token`: a store of the single-token remote keeps its containers and
// its token. That happens once in a store's life (the setting `accounts`), so a revoked or removed token is
// never registered again.
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

public struct StubUser: Equatable, Sendable {
    public let name: String
    /// What the user's container ids are stored under; "" only for the user made from a single-token store.
    let prefix: String
    public let created: Int64
}

public struct StubDevice: Equatable, Sendable {
    public let owner: String
    public let name: String
    public let created: Int64
    /// When the key was revoked; nil while it opens the user's containers.
    public let revoked: Int64?
}

/// Who a request's key belongs to, and so which containers it sees.
struct Account: Equatable {
    let user: String
    let device: String
    let prefix: String
}

/// Container ids as the metadata and the blob stores keep them: a user's prefix, then the id on the wire.
enum ContainerScope {
    /// A prefix is "u", 16 hex digits and "~"; "~" never appears in a container id on the wire.
    static func newPrefix() -> String { "u" + randomHex(bytes: 8) + "~" }

    static func isValidPrefix(_ p: String) -> Bool {
        p.isEmpty || (p.utf8.count == 18 && p.hasPrefix("u") && p.hasSuffix("~") && isHex(p.dropFirst().dropLast()))
    }

    /// A stored id: an optional prefix and a valid wire id.
    static func isValidStoredID(_ id: String) -> Bool {
        guard let tilde = id.firstIndex(of: "~") else { return WireRules.isValidContainerID(id) }
        let prefix = String(id[...tilde])
        return !prefix.isEmpty && isValidPrefix(prefix) && WireRules.isValidContainerID(String(id[id.index(after: tilde)...]))
    }

    /// The id on the wire of a stored id.
    static func wireID(_ stored: String) -> String {
        stored.firstIndex(of: "~").map { String(stored[stored.index(after: $0)...]) } ?? stored
    }

    private static func isHex(_ s: Substring) -> Bool {
        s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}

/// Names of users and devices: 1 to 64 of letters, digits, '.', '-', '_', not starting with '.' or '-'.
public enum AccountNames {
    public static func problem(_ name: String, what: String) -> String? {
        let ok = name.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c == 0x2e || c == 0x2d || c == 0x5f
        }
        guard ok, (1...64).contains(name.utf8.count), let first = name.utf8.first, first != 0x2e, first != 0x2d else {
            return "'\(name)' is not a \(what) name (1 to 64 of A-Z a-z 0-9 . - _, not starting with . or -)"
        }
        return nil
    }
}

public final class Accounts: Sendable {
    /// The user a single-token store's containers and token become.
    public static let firstUser = "default"
    /// The device name its token gets.
    public static let tokenDevice = "token"
    private let meta: any StubMetadata

    init(meta: any StubMetadata) { self.meta = meta }

    /// The metadata of `--data DIR` (its stub.sqlite) or of `--metadata URL`, for the commands that manage
    /// accounts; the store is opened once (see `bootstrap`) with the token file at `tokenPath`, if there is one.
    public convenience init(dataDir: String, metadataURL: String?, metadataPassword: String?, tokenPath: String) throws {
        try makeDirectories(dataDir)
        let meta: any StubMetadata = try metadataURL.map { (url) throws(ServerFailure) in try PostgresMetadata(url: url, password: metadataPassword) }
            ?? SQLiteMetadata(path: dataDir + "/stub.sqlite")
        self.init(meta: meta)
        try bootstrap(token: FileManager.default.fileExists(atPath: tokenPath) ? StubServer.loadOrCreateToken(tokenPath) : nil)
    }

    public func close() { meta.close() }

    /// Whether the store was opened before (and so has its accounts).
    func isStarted() throws(ServerFailure) -> Bool { try meta.read { (tx) throws(ServerFailure) in try tx.setting("accounts") } != nil }

    /// The first opening of a store: user `default` with the empty prefix, and `token` as its device's key.
    /// Later openings change nothing.
    func bootstrap(token: String?) throws(ServerFailure) {
        try meta.write { (tx) throws(ServerFailure) in
            guard try tx.claimSetting("accounts", "1") else { return }
            let now = nowNanoseconds()
            _ = try tx.insertUser(StubUser(name: Self.firstUser, prefix: "", created: now))
            if let token {
                _ = try tx.insertDevice(StubDevice(owner: Self.firstUser, name: Self.tokenDevice, created: now, revoked: nil),
                                        keyHash: Self.keyHash(token))
            }
        }
    }

    /// The account of an `Authorization` header's bearer key, or why there is none (the 401's message).
    func authenticate(_ header: String?) throws(ServerFailure) -> Result<Account, StubFailure> {
        guard let header, header.hasPrefix("Bearer ") else { return .failure(StubFailure(401, "missing key")) }
        let key = String(header.dropFirst(7))
        guard key.utf8.count == 64, isSHA256Hex(key) else { return .failure(StubFailure(401, "wrong key")) }
        guard let (device, prefix) = try meta.read({ (tx) throws(ServerFailure) in try tx.device(keyHash: Self.keyHash(key)) }) else {
            return .failure(StubFailure(401, "wrong key"))
        }
        if device.revoked != nil { return .failure(StubFailure(401, "this device's key was revoked")) }
        return .success(Account(user: device.owner, device: device.name, prefix: prefix))
    }

    static func keyHash(_ key: String) -> String { sha256Hex(Array(key.utf8)) }

    // MARK: Managing

    public func users() throws -> [StubUser] { try meta.read { (tx) throws(ServerFailure) in try tx.users() } }

    public func addUser(_ name: String) throws {
        if let why = AccountNames.problem(name, what: "user") { throw StubError(why) }
        let added = try meta.write { (tx) throws(ServerFailure) in try tx.insertUser(StubUser(name: name, prefix: ContainerScope.newPrefix(), created: nowNanoseconds())) }
        if !added { throw StubError("there is a user \(name) already") }
    }

    /// Removes the user and every key of its devices. Its containers stay in the store under its prefix, which
    /// no other user is ever given: a user added later under the same name starts empty.
    public func removeUser(_ name: String) throws {
        guard try meta.write({ (tx) throws(ServerFailure) in try tx.deleteUser(name) }) else { throw StubError("there is no user \(name)") }
    }

    /// A new key for a new device of `user`: answered once, kept only as its hash.
    public func addDevice(user: String, device: String) throws -> String {
        if let why = AccountNames.problem(device, what: "device") { throw StubError(why) }
        let key = randomHex(bytes: 32)
        let outcome = try meta.write { (tx) throws(ServerFailure) -> String? in
            guard try tx.users().contains(where: { $0.name == user }) else { return "there is no user \(user)" }
            let added = try tx.insertDevice(StubDevice(owner: user, name: device, created: nowNanoseconds(), revoked: nil),
                                            keyHash: Self.keyHash(key))
            return added ? nil : "user \(user) has a device \(device) already (a revoked one keeps its name)"
        }
        if let outcome { throw StubError(outcome) }
        return key
    }

    public func devices(of user: String?) throws -> [StubDevice] {
        let found = try meta.read { (tx) throws(ServerFailure) -> [StubDevice]? in
            if let user, try !tx.users().contains(where: { $0.name == user }) { return nil }
            return try tx.devices(owner: user)
        }
        guard let found else { throw StubError("there is no user \(user ?? "")") }
        return found
    }

    /// The user's limits, the standard ones where none was set.
    public func limits(_ user: String) throws -> UserLimits { try userLimits(user) }

    func userLimits(_ user: String) throws(ServerFailure) -> UserLimits {
        try meta.read { (tx) throws(ServerFailure) in try tx.limits(user).limits }
    }

    /// The limits set for the user (nil: the standard one); `change` edits them.
    @discardableResult
    public func setLimits(_ user: String, _ change: (inout LimitSettings) -> Void) throws -> LimitSettings {
        let set = try meta.write { (tx) throws(ServerFailure) -> LimitSettings? in
            guard try tx.users().contains(where: { $0.name == user }) else { return nil }
            var settings = try tx.limits(user)
            change(&settings)
            try tx.setLimits(user, settings)
            return settings
        }
        guard let set else { throw StubError("there is no user \(user)") }
        return set
    }

    public func revoke(user: String, device: String) throws {
        let outcome = try meta.write { (tx) throws(ServerFailure) -> String? in
            guard let d = try tx.devices(owner: user).first(where: { $0.name == device }) else {
                return "user \(user) has no device \(device)"
            }
            if d.revoked != nil { return "the key of \(user)'s device \(device) was revoked already" }
            _ = try tx.revokeDevice(owner: user, name: device, at: nowNanoseconds())
            return nil
        }
        if let outcome { throw StubError(outcome) }
    }
}
