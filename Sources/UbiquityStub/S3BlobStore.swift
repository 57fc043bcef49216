// Blobs in an S3-compatible bucket (`remote serve --blobs s3://BUCKET?endpoint=URL`), one object per blob at
// [PREFIX/]blobs/CONTAINER/SHA256 and per manifest at [PREFIX/]blobs/CONTAINER/SHA256.chunks, with a local cache
// of verified copies of blobs from which downloads are served.
//
// What must hold: only this code writes under blobs/, and only bytes the server has hashed to the object's name
// (or, for a manifest, JSON the server has checked); a blob's PUT carries `If-None-Match: *` (an object already
// there, 412, is a success: blobs never change), a manifest's none (a manifest may be replaced); each carries
// Content-MD5 and its ETag is checked, and for a blob a HEAD confirms the size before `put` returns, so the
// metadata that names a blob is committed only after the bucket holds it whole. The stub never serves bytes it
// has not verified: `open` hands out a cached copy whose SHA-256 and size were checked when it was fetched
// whole. Two downloads of one uncached blob fetch it once (`fetching`). The cache stays under its byte limit by
// dropping the copies used least recently; a copy being served stays readable through its open descriptor.
// Manifests are not cached: each read is a GET.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): `lookups` is a leaf.
import CCrypto
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

final class S3BlobStore: BlobStore, Sendable {
    let client: S3Client
    let cacheDir: String
    let cacheLimit: Int64
    private struct Lookups {
        /// Objects known to be in the bucket, by key, with their sizes.
        var known: [String: Int64] = [:]
        /// Objects being fetched into the cache now.
        var fetching: Set<String> = []
    }
    private let lookups = Locked(Lookups())

    /// Checks the bucket (creating it when missing) and empties the cache's leftovers of cut-short fetches.
    init(location: S3Location, cacheDir: String, cacheLimit: Int64 = 1 << 30) throws {
        client = S3Client(location)
        self.cacheDir = cacheDir
        self.cacheLimit = cacheLimit
        try makeDirectories(cacheDir + "/tmp")
        for name in folderNames(cacheDir + "/tmp", for: "cut-short fetches to remove") {
            removeLeftover(cacheDir + "/tmp/" + name)
        }
        do {
            try ensureBucket()
        } catch {
            throw StubError("\(location): \(error.message)")
        }
    }

    private func ensureBucket() throws(ServerFailure) {
        let (head, _) = try client.perform("HEAD", "")
        if head.status == 200 { return }
        guard head.status == 404 else {
            throw .fault("the bucket answered HEAD with \(head.status) (are the credentials right?)")
        }
        let (made, _) = try client.perform("PUT", "")
        guard made.status == 200 || made.errorCode == "BucketAlreadyOwnedByYou" else {
            throw .fault("cannot create the bucket: \(made.errorCode)")
        }
    }

    private func key(_ cid: String, _ sha256: String) -> String {
        precondition(ContainerScope.isValidStoredID(cid) && isSHA256Hex(sha256))
        return client.location.prefix + "blobs/\(cid)/\(sha256)"
    }

    private func cachePath(_ cid: String, _ sha256: String) -> String { cacheDir + "/" + cid + "/" + sha256 }

    private func remember(_ key: String, _ size: Int64?) {
        lookups.withLock { $0.known[key] = size }
    }

    /// Nothing to do: a bucket has no directories.
    func addContainer(_ cid: String) throws(ServerFailure) {}

    func size(_ cid: String, _ sha256: String) throws(ServerFailure) -> Int64? {
        if sha256 == emptySHA256 { return 0 }
        let key = self.key(cid, sha256)
        let cached = lookups.withLock { $0.known[key] }
        if let cached { return cached }
        let (a, _) = try client.perform("HEAD", key)
        switch a.status {
        case 200:
            guard let size = a.headers["content-length"].flatMap({ Int64($0) }) else {
                throw .refused(503, "blob store answered HEAD without a length")
            }
            remember(key, size)
            return size
        case 404:
            return nil
        default:
            throw .refused(503, "blob store answered HEAD with \(a.status) \(a.errorCode)")
        }
    }

    func put(_ cid: String, _ sha256: String, size: Int64, tmpPath: String, replacing: Bool) throws(ServerFailure) -> Bool {
        defer { removeLeftover(tmpPath) }
        let key = self.key(cid, sha256)
        // Known to be there: nothing to do. Not known: a large one is asked about first (not sent again for
        // nothing), a small one is not (a round trip per small file of a batch); `If-None-Match: *` leaves an
        // object that is there as it is.
        if !replacing && lookups.withLock({ $0.known[key] }) != nil { return false }
        if !replacing && size > Int64(WireBatchLimits.maxInlineBytes), try self.size(cid, sha256) != nil { return false }
        // A damaged object is written over; otherwise only a missing one is written.
        let headers = (replacing ? [] : ["If-None-Match: *"]) + ["Content-Type: application/octet-stream"]
        let created = try upload(tmpPath, size: size, as: key, sha256: sha256, headers: headers)
        let (head, _) = try client.perform("HEAD", key)
        guard head.status == 200, head.headers["content-length"].flatMap({ Int64($0) }) == size else {
            throw .refused(503, "blob store does not hold \(size) bytes after the upload (HEAD \(head.status))")
        }
        remember(key, size)
        // The verified upload is also the first cached copy.
        do {
            try makeDirectories(cacheDir + "/" + cid)
            try renameFile(tmpPath, cachePath(cid, sha256))
        } catch {
            Logger("s3").warning("cannot keep blob \(sha256) of \(cid) in the cache \(cacheDir) (its reads go to the blob store): \(error)")
        }
        return created
    }

    /// PUTs the file `path` (`size` bytes hashing to `sha256`) as the object `key`, with its Content-MD5, and
    /// checks the ETag; false when `If-None-Match: *` found the object there (written meanwhile by another
    /// upload of the same bytes).
    private func upload(_ path: String, size: Int64, as key: String, sha256: String, headers: [String]) throws(ServerFailure) -> Bool {
        let fd = try ServerFailure.file("opening \(path) to upload", try FileDescriptor.open(path, O_RDONLY))
        defer { fd.close() }
        let md5 = try Self.md5(fd)
        let (a, _) = try client.perform("PUT", key, headers: headers + [
            "Content-MD5: \(Data(md5).base64EncodedString())", "x-amz-content-sha256: \(sha256)",
        ], upload: (fd, size))
        switch a.status {
        case 200, 201:
            let etag = a.headers["etag"]?.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) ?? ""
            if etag.count == 32 && etag.lowercased() != hexString(md5) {
                throw .refused(503, "blob store stored other bytes than sent (ETag \(etag))")
            }
            return true
        case 412, 409:
            return false
        default:
            throw .refused(503, "blob store refused the upload: \(a.status) \(a.errorCode)")
        }
    }

    private static func md5(_ fd: FileDescriptor) throws(ServerFailure) -> [UInt8] {
        let ctx = EVP_MD_CTX_new()!
        defer { EVP_MD_CTX_free(ctx) }
        EVP_DigestInit_ex(ctx, EVP_md5(), nil)
        try ServerFailure.file("reading a file to upload", try fd.forEachChunk { chunk in
            if let base = chunk.baseAddress, chunk.count > 0 { EVP_DigestUpdate(ctx, base, chunk.count) }
        })
        var digest = [UInt8](repeating: 0, count: 16)
        var len: UInt32 = 0
        EVP_DigestFinal_ex(ctx, &digest, &len)
        return digest
    }

    func open(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) -> FileDescriptor {
        let path = cachePath(cid, sha256), key = self.key(cid, sha256)
        if let fd = try? FileDescriptor.open(path, O_RDONLY) { futimens(fd.raw, nil); return fd }
        let cached = lookups.wait(until: nil, for: { !$0.fetching.contains(key) }) { l -> FileDescriptor? in
            if let fd = try? FileDescriptor.open(path, O_RDONLY) { return fd } // another thread fetched it
            l.fetching.insert(key)
            return nil
        }
        if let cached { return cached }
        defer { lookups.withLock(notifying: true) { _ = $0.fetching.remove(key) } }
        try fetch(cid, sha256, size: size, into: path)
        evict(keeping: path)
        return try ServerFailure.file("opening a cached blob", try FileDescriptor.open(path, O_RDONLY))
    }

    func isSound(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) -> Bool {
        if sha256 == emptySHA256 { return true }
        let (tmp, fd) = try temporaryFile(".check")
        defer { fd.close(); removeLeftover(tmp) }
        let (a, digest) = try client.perform("GET", key(cid, sha256), download: fd)
        switch a.status {
        case 200:
            guard digest == sha256 else { return false }
            return try ServerFailure.file("stat of a fetched blob", try fd.stat()).st_size == size
        case 404: return false
        default: throw .refused(503, "blob store answered GET with \(a.status) \(a.errorCode)")
        }
    }

    /// A new file (mode 0600) in the cache's tmp folder, named with `suffix`, open for reading and writing; the
    /// caller closes and removes it.
    private func temporaryFile(_ suffix: String) throws(ServerFailure) -> (path: String, fd: FileDescriptor) {
        let path = cacheDir + "/tmp/" + randomHex(bytes: 12) + suffix
        return (path, try ServerFailure.file("creating \(path)", try FileDescriptor.open(path, O_RDWR | O_CREAT | O_EXCL, mode: 0o600)))
    }

    /// Downloads the whole object to a temporary file and moves it into the cache once it hashes to its name.
    private func fetch(_ cid: String, _ sha256: String, size: Int64, into path: String) throws(ServerFailure) {
        let (tmp, fd) = try temporaryFile(".part")
        defer { fd.close(); removeLeftover(tmp) }
        let (a, digest) = try client.perform("GET", key(cid, sha256), download: fd)
        switch a.status {
        case 200:
            break
        case 404:
            remember(key(cid, sha256), nil)
            throw .refused(404, "no such blob")
        default:
            throw .refused(503, "blob store answered GET with \(a.status) \(a.errorCode)")
        }
        let got = try ServerFailure.file("stat of a fetched blob", try fd.stat()).st_size
        guard digest == sha256, Int64(got) == size else {
            // Damaged in the blob store (a second read says so), not on the way: it counts as absent from now on.
            if (try? isSound(cid, sha256, size: size)) == false, (try? delete(cid, sha256)) != nil {
                Logger("s3").error("blob \(sha256) of \(cid) is damaged in the blob store: taken away, so that its next upload stores it again")
            }
            throw .refused(503, "blob store returned \(got) bytes hashing to \(digest ?? "?"), not the blob")
        }
        try ServerFailure.file("making a cache folder", try makeDirectories(cacheDir + "/" + cid))
        try ServerFailure.file("renaming a fetched blob into the cache", try renameFile(tmp, path))
    }

    /// Drops the least recently used cached copies until the cache is under its limit.
    private func evict(keeping: String) {
        var files: [(path: String, size: Int64, used: Int64)] = []
        for cid in folderNames(cacheDir, for: "the cache's containers") where cid != "tmp" {
            for name in folderNames(cacheDir + "/" + cid, for: "the cache's copies") {
                let p = cacheDir + "/" + cid + "/" + name
                var st = stat()
                guard stat(p, &st) == 0 else { continue }
                files.append((p, Int64(st.st_size), nanoseconds(st.st_mtim)))
            }
        }
        var total = files.reduce(0) { $0 + $1.size }
        for f in files.sorted(by: { $0.used < $1.used }) where total > cacheLimit && f.path != keeping {
            removeLeftover(f.path)
            total -= f.size
        }
    }

    /// Nothing is kept of an object taken away.
    func wasSetAside(_ cid: String, _ sha256: String) -> Bool { false }

    /// The cached copy goes; the object too when it is damaged in the blob store itself.
    func setAsideDamaged(_ cid: String, _ sha256: String, size: Int64) throws(ServerFailure) {
        removeLeftover(cachePath(cid, sha256))
        guard try !isSound(cid, sha256, size: size) else { return }
        try delete(cid, sha256)
    }

    func delete(_ cid: String, _ sha256: String) throws(ServerFailure) {
        let key = self.key(cid, sha256)
        let (a, _) = try client.perform("DELETE", key)
        guard a.status / 100 == 2 || a.status == 404 else {
            throw .refused(503, "blob store answered DELETE with \(a.status) \(a.errorCode)")
        }
        remember(key, nil)
        removeLeftover(cachePath(cid, sha256))
    }

    func list(_ cid: String) throws(ServerFailure) -> [StoredBlob] {
        try listed(cid, suffix: "")
    }

    /// The manifest's object: beside the blob's.
    private func manifestKey(_ cid: String, _ sha256: String) -> String { key(cid, sha256) + manifestSuffix }

    func putManifest(_ cid: String, _ sha256: String, json: [UInt8]) throws(ServerFailure) -> Bool {
        let key = manifestKey(cid, sha256)
        let (head, _) = try client.perform("HEAD", key)
        guard head.status == 200 || head.status == 404 else {
            throw .refused(503, "blob store answered HEAD with \(head.status) \(head.errorCode)")
        }
        let tmp = try writeTemporary(json, in: cacheDir + "/tmp")
        defer { removeLeftover(tmp) }
        _ = try upload(tmp, size: Int64(json.count), as: key, sha256: sha256Hex(json),
                       headers: ["Content-Type: application/json"])
        return head.status == 404
    }

    func manifest(_ cid: String, _ sha256: String) throws(ServerFailure) -> [UInt8]? {
        // Through a file: an answer kept in memory stops at 1 MiB, and a manifest may be larger.
        let (tmp, fd) = try temporaryFile(".chunks")
        defer { fd.close(); removeLeftover(tmp) }
        let (a, _) = try client.perform("GET", manifestKey(cid, sha256), download: fd)
        switch a.status {
        case 200:
            return try readAll(fd)
        case 404:
            return nil
        default:
            throw .refused(503, "blob store answered GET with \(a.status) \(a.errorCode)")
        }
    }

    func deleteManifest(_ cid: String, _ sha256: String) throws(ServerFailure) {
        let (a, _) = try client.perform("DELETE", manifestKey(cid, sha256))
        guard a.status / 100 == 2 || a.status == 404 else {
            throw .refused(503, "blob store answered DELETE with \(a.status) \(a.errorCode)")
        }
    }

    func listManifests(_ cid: String) throws(ServerFailure) -> [StoredBlob] {
        try listed(cid, suffix: manifestSuffix)
    }

    /// The container's objects named `{sha256}{suffix}`, with their sizes and times.
    private func listed(_ cid: String, suffix: String) throws(ServerFailure) -> [StoredBlob] {
        guard ContainerScope.isValidStoredID(cid) else { return [] }
        let prefix = client.location.prefix + "blobs/\(cid)/"
        var found: [StoredBlob] = []
        var token: String?
        repeat {
            // Parameters in canonical (sorted) order, as Signature V4 signs them.
            var query = token.map { "continuation-token=" + Self.escape($0) + "&" } ?? ""
            query += "list-type=2&prefix=" + Self.escape(prefix)
            let (a, _) = try client.perform("GET", "", query: query)
            guard a.status == 200 else { throw .refused(503, "blob store answered a listing with \(a.status) \(a.errorCode)") }
            for entry in S3Client.tag("Contents", in: a.text) {
                guard let key = S3Client.tag("Key", in: entry).first, key.hasPrefix(prefix),
                      let size = S3Client.tag("Size", in: entry).first.flatMap({ Int64($0) }) else { continue }
                guard let sha = storedHash(String(key.dropFirst(prefix.count)), suffix: suffix) else { continue }
                // LastModified is cut to whole seconds: round it up, so a blob never looks older than it is.
                let modified = S3Client.tag("LastModified", in: entry).first.flatMap(Self.parseDate).map { $0 + 1_000_000_000 }
                found.append(StoredBlob(sha256: sha, size: size, stored: modified ?? nowNanoseconds()))
            }
            let truncated = S3Client.tag("IsTruncated", in: a.text).first == "true"
            token = truncated ? S3Client.tag("NextContinuationToken", in: a.text).first : nil
        } while token != nil
        return found
    }

    /// RFC 3986 percent-encoding of everything but unreserved characters.
    static func escape(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                 UInt8(ascii: "~"):
                out.unicodeScalars.append(UnicodeScalar(b))
            default:
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }

    /// An S3 timestamp (2026-12-01T13:10:34Z, perhaps with fractions) in nanoseconds since the epoch.
    static func parseDate(_ s: String) -> Int64? {
        let f = ISO8601DateFormatter()
        f.formatOptions = s.contains(".") ? [.withInternetDateTime, .withFractionalSeconds] : [.withInternetDateTime]
        return f.date(from: s).map { Int64($0.timeIntervalSince1970 * 1e9) }
    }
}
