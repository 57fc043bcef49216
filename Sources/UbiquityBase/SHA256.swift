// Incremental SHA-256 on OpenSSL's EVP interface; used to verify every byte that crosses the wire.
//
// What must hold: a digest is always lowercase hex of 64 digits (`hexString`), the one form stored in the
// database, sent on the wire and checked by `isSHA256Hex`. A `SHA256Hasher` is `~Copyable`, so its OpenSSL
// context has one owner and is freed once; `finalizeHex` is called once, last. A file is hashed in 1 MiB chunks
// (`forEachChunk`), never read whole into memory.
import CCrypto
import Foundation

public struct SHA256Hasher: ~Copyable {
    private let ctx: OpaquePointer

    public init() {
        ctx = EVP_MD_CTX_new()!
        EVP_DigestInit_ex(ctx, EVP_sha256(), nil)
    }

    deinit { EVP_MD_CTX_free(ctx) }

    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        EVP_DigestUpdate(ctx, base, buffer.count)
    }

    public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// Returns the digest as lowercase hex. Call it once, last.
    public mutating func finalizeHex() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        EVP_DigestFinal_ex(ctx, &digest, &len)
        return hexString(digest)
    }
}

public func hexString(_ bytes: [UInt8]) -> String {
    let digits: [UInt8] = Array("0123456789abcdef".utf8)
    var out = [UInt8](); out.reserveCapacity(bytes.count * 2)
    for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
    return String(decoding: out, as: UTF8.self)
}

/// SHA-256 of a whole buffer.
public func sha256Hex(_ bytes: [UInt8]) -> String {
    var h = SHA256Hasher(); h.update(bytes); return h.finalizeHex()
}

/// SHA-256 and size of a file, read in large chunks without holding it in memory.
/// `keepGoing` is asked before each MiB: false stops the read with ECANCELED (a file deleted meanwhile).
public func sha256OfFile(_ path: String,
                         while keepGoing: () -> Bool = { true }) throws -> (sha256: String, size: Int64) {
    let fd = try FileDescriptor.open(path, O_RDONLY)
    defer { fd.close() }
    var h = SHA256Hasher()
    var total: Int64 = 0
    try fd.forEachChunk { (chunk) throws(Errno) in
        if !keepGoing() { throw Errno(ECANCELED) }
        h.update(chunk)
        total += Int64(chunk.count)
    }
    return (h.finalizeHex(), total)
}

/// The SHA-256 of no bytes at all, the hash of every empty file.
public let emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/// True for a 64-digit lowercase hex string.
public func isSHA256Hex(_ s: String) -> Bool {
    s.utf8.count == 64 && s.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
}

/// The SHA-256 of what a descriptor's file holds, read from its start.
public func sha256Hex(of fd: FileDescriptor) throws(Errno) -> String {
    var hasher = SHA256Hasher()
    try fd.forEachChunk { hasher.update($0) }
    return hasher.finalizeHex()
}

/// The SHA-256 of `count` bytes of a descriptor's file from `offset` (fewer where the file ends).
public func sha256Hex(of fd: FileDescriptor, at offset: Int64, count: Int64) throws(Errno) -> String {
    var hasher = SHA256Hasher()
    try fd.forEachChunk(from: offset, count: count) { hasher.update($0) }
    return hasher.finalizeHex()
}
