// The pure parts of the HTTP client: building URLs and turning an HTTP status with its error body into a
// RemoteError. Kept free of libcurl so the tests can check them without a server.
//
// What must hold: no I/O here, so the same answer always maps to the same error. The statuses are those of
// docs/WIRE.md: 401, 404, 409 and 412 (with the item in the way), 422 (a misplaced item; for a blob upload,
// bytes that do not hash to their name), 5xx as `server` (transient); any other refusal is `rejected`, never
// retried. An error body that does not decode is still an answer (its first line is the message). Every path
// segment and query value is escaped, so no id, token or name can change the shape of a URL.
import Foundation
import UbiquityBase
import UbiquityCore

enum HTTPMapping {
    /// Largest error body kept (error answers are one-line JSON).
    static let maxErrorBody = 64 * 1024

    /// Percent-encodes everything except RFC 3986 unreserved characters, so the result is safe both as a
    /// path segment and as a query value.
    static func escape(_ s: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            let unreserved = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a)
                || b == 0x2d || b == 0x2e || b == 0x5f || b == 0x7e
            if unreserved {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                out.unicodeScalars.append("%")
                out.unicodeScalars.append(Unicode.Scalar(hex[Int(b >> 4)]))
                out.unicodeScalars.append(Unicode.Scalar(hex[Int(b & 0xf)]))
            }
        }
        return out
    }

    /// `base` (trailing slashes dropped) + "/" + escaped segments + "?k=v&..." with escaped values.
    /// Query pairs whose value is nil are left out.
    static func url(base: String, segments: [String], query: [(String, String?)] = []) -> String {
        var s = base
        while s.hasSuffix("/") { s.removeLast() }
        for seg in segments { s += "/" + escape(seg) }
        var first = true
        for (k, v) in query {
            guard let v else { continue }
            s += (first ? "?" : "&") + escape(k) + "=" + escape(v)
            first = false
        }
        return s
    }

    /// "host:port" of a base URL, for readable messages.
    static func hostPort(_ base: String) -> String {
        var s = Substring(base)
        if let r = s.range(of: "://") { s = s[r.upperBound...] }
        if let slash = s.firstIndex(of: "/") { s = s[..<slash] }
        if let at = s.lastIndex(of: "@") { s = s[s.index(after: at)...] }
        return String(s)
    }

    /// The decoded error body, if it is the JSON the wire promises.
    static func decodeError(_ body: [UInt8]) -> WireError? {
        guard !body.isEmpty else { return nil }
        // Not decoding is an answer too (a proxy's HTML page): `message` then shows the body's first line.
        return try? JSONDecoder().decode(WireError.self, from: Data(body))
    }

    /// The message of an error answer: the body's `error`, else the first line of the body, else the status.
    static func message(status: Int, body: [UInt8], decoded: WireError?) -> String {
        if let e = decoded?.error, !e.isEmpty { return e }
        if !body.isEmpty {
            let text = String(decoding: body.prefix(200), as: UTF8.self)
                .split(whereSeparator: { $0 == "\n" || $0 == "\r" }).first.map(String.init) ?? ""
            if !text.isEmpty { return "HTTP \(status): \(text)" }
        }
        return "HTTP \(status)"
    }

    /// The RemoteError for a non-success HTTP answer. 422 is a refused place for an item, and for a blob upload
    /// (`blobUpload`) bytes that do not hash to their name; 429 (a key or a user holding its share of the
    /// server's connections) is the server's, tried again later, as a 5xx; 507 is the user's quota (or item or
    /// container limit), a refusal of its own.
    static func error(status: Int, body: [UInt8], blobUpload: Bool = false) -> RemoteError {
        let decoded = decodeError(body)
        let msg = message(status: status, body: body, decoded: decoded)
        switch status {
        case 401: return .unauthorized
        case 404: return .notFound(msg)
        case 409: return .conflict(msg, current: decoded?.current)
        case 412: return .preconditionFailed(current: decoded?.current, yours: decoded?.yours)
        case 422 where blobUpload: return .corrupt(msg)
        case 422: return .misplaced(msg)
        case 507: return .overQuota(msg)
        case 429, 500...599: return .server(status: status, message: msg)
        default: return .rejected(status: status, message: msg)
        }
    }

    /// One batch entry's answer as its single call would have it.
    static func result(_ r: WireBatchResult) -> BatchResult {
        if r.status == 208, let applied = r.applied, let current = r.current {
            return .failure(.alreadyApplied(version: applied, current: current))
        }
        if (200...299).contains(r.status), let item = r.item { return .success(item) }
        let answer = WireError(error: r.error ?? "", current: r.current, yours: r.yours)
        let body = (try? JSONEncoder.wire.encode(answer)).map(Array.init)
        return .failure(error(status: (200...299).contains(r.status) ? 500 : r.status, body: body ?? []))
    }

    /// Start A of a `Content-Range: bytes A-B/N` (nil for `bytes */N` or anything else).
    static func contentRangeStart(_ value: String) -> Int64? {
        let v = value.trimmingCharacters(in: .whitespaces)
        guard v.lowercased().hasPrefix("bytes ") else { return nil }
        let rest = v.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard let dash = rest.firstIndex(of: "-") else { return nil }
        return Int64(rest[..<dash])
    }

    /// Total length N of a `Content-Range: bytes A-B/N` or `bytes */N`.
    static func contentRangeTotal(_ value: String) -> Int64? {
        guard let slash = value.lastIndex(of: "/") else { return nil }
        return Int64(value[value.index(after: slash)...].trimmingCharacters(in: .whitespaces))
    }
}
