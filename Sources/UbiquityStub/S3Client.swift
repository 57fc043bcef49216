// A minimal S3 client on libcurl for the stub's blob store: path-style requests signed with AWS Signature V4
// (libcurl's CURLOPT_AWS_SIGV4), bodies from a file, answers to memory or to a file.
//
// What must hold: credentials come from the environment or a file, never from the command line, and never
// appear in a log line or an error. A request is one easy handle used by one thread for its whole transfer; the
// C callbacks reach the request's box through an unmanaged pointer that lives as long as `curl_easy_perform`.
// A transfer that fails below HTTP, or an answer of 5xx, is refused with 503 (the blob store is away, clients
// retry); the cause is in its message.
import CCurl
import Foundation
import UbiquityBase
#if canImport(Glibc)
import Glibc
#endif

private let curlGlobalInit: CURLcode = ubq_curl_global_init()

/// Where the bucket is and who may use it: `s3://BUCKET[/PREFIX]?endpoint=URL[&region=R]` plus credentials.
/// A prefix keeps this stub's objects apart from others' in one bucket.
public struct S3Location: Sendable, CustomStringConvertible {
    public var bucket: String
    /// Empty, or a key prefix ending in "/".
    public var prefix: String = ""
    public var endpoint: String
    public var region: String = "us-east-1"
    public var accessKey: String
    public var secretKey: String

    /// Parses the URL; credentials from `credentialsFile` (lines KEY=VALUE) or else the environment.
    public init(url: String, credentialsFile: String?, environment: [String: String]) throws {
        guard let c = URLComponents(string: url), c.scheme == "s3", let host = c.host, !host.isEmpty else {
            throw StubError("--blobs takes s3://BUCKET?endpoint=URL, not \(url)")
        }
        bucket = host
        let path = c.path.split(separator: "/").joined(separator: "/")
        if !path.isEmpty { prefix = path + "/" }
        guard prefix.utf8.allSatisfy({ $0 > 32 && $0 < 127 && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "%") }) else {
            throw StubError("the S3 key prefix \(prefix) must be plain printable ASCII")
        }
        let query = Dictionary((c.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        if let r = query["region"], !r.isEmpty { region = r }
        endpoint = query["endpoint"].map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
            ?? "https://s3.\(region).amazonaws.com"
        guard endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://") else {
            throw StubError("the S3 endpoint must be an http:// or https:// URL, not \(endpoint)")
        }
        var values = environment
        if let file = credentialsFile {
            if let why = secretFileRefusal(file) { throw StubError("refusing the S3 credentials file: \(why)") }
            guard let data = FileManager.default.contents(atPath: file) else {
                throw StubError("cannot read the S3 credentials file \(file)")
            }
            values = Self.parseCredentials(String(decoding: data, as: UTF8.self))
        }
        guard let key = values["AWS_ACCESS_KEY_ID"], !key.isEmpty,
              let secret = values["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else {
            throw StubError("S3 needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, in the environment or --s3-credentials FILE")
        }
        accessKey = key
        secretKey = secret
    }

    /// `KEY=VALUE` lines (also `key = value` as in ~/.aws/credentials); blank lines and # comments are skipped.
    static func parseCredentials(_ text: String) -> [String: String] {
        var out: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let t = line.trimmingCharacters(in: .whitespaces)
            guard !t.isEmpty, !t.hasPrefix("#"), let eq = t.firstIndex(of: "=") else { continue }
            let key = t[..<eq].trimmingCharacters(in: .whitespaces).uppercased()
            let value = t[t.index(after: eq)...].trimmingCharacters(in: .whitespaces)
            out[key] = value
        }
        return out
    }

    public var description: String { "s3://\(bucket)/\(prefix) at \(endpoint)" }
}

/// One S3 answer: status, headers (names lowercased) and the body kept in memory (error bodies, listings).
struct S3Answer {
    var status: Int = 0
    var headers: [String: String] = [:]
    var body: [UInt8] = []
    var text: String { String(decoding: body, as: UTF8.self) }

    /// The `<Code>` of an S3 error body, for messages.
    var errorCode: String { S3Client.tag("Code", in: text).first ?? "HTTP \(status)" }
}

/// The state of one transfer, reached from the C callbacks.
private final class S3Transfer {
    var answer = S3Answer()
    /// Where a 2xx body goes (a download); nil keeps it in memory.
    let sink: FileDescriptor?
    var sinkOffset: Int64 = 0
    var sinkFailure: Errno?
    let source: FileDescriptor?
    var sourceOffset: Int64 = 0
    var sourceFailure: Errno?
    var hasher: SHA256Hasher? = SHA256Hasher()
    /// libcurl's message buffer, owned here so its address stays valid for the whole transfer.
    let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(ubq_curl_error_size()))

    init(sink: FileDescriptor?, source: FileDescriptor?) {
        self.sink = sink; self.source = source
        errorBuffer.initialize(repeating: 0, count: Int(ubq_curl_error_size()))
    }

    deinit { errorBuffer.deallocate() }

    func receive(_ buf: UnsafeRawBufferPointer) -> Int {
        if let sink, answer.status / 100 == 2 {
            do { try sink.writeAll(buf, at: sinkOffset) } catch { sinkFailure = error; return 0 }
            sinkOffset += Int64(buf.count)
            hasher?.update(buf)
        } else if answer.body.count < 1 << 20 {
            answer.body.append(contentsOf: buf)
        }
        return buf.count
    }

    func header(_ buf: UnsafeRawBufferPointer) {
        let line = String(decoding: buf, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if line.hasPrefix("HTTP/") {
            answer.headers = [:]
            let parts = line.split(separator: " ")
            if parts.count >= 2, let s = Int(parts[1]) { answer.status = s }
        } else if let colon = line.firstIndex(of: ":") {
            answer.headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }

    func send(into buf: UnsafeMutableRawBufferPointer) -> Int {
        guard let source else { return 0 }
        do {
            let n = try source.read(into: buf, at: sourceOffset)
            sourceOffset += Int64(n)
            return n
        } catch {
            sourceFailure = error
            return ubq_readfunc_abort()
        }
    }
}

final class S3Client: Sendable {
    let location: S3Location
    /// Seconds to connect, and seconds a transfer may move nothing before it is given up.
    let connectSeconds = 5
    let stallSeconds = 30

    init(_ location: S3Location) {
        _ = curlGlobalInit
        self.location = location
    }

    /// `/BUCKET/KEY` escaped for a URL path (keys here are plain: hex, dots, slashes).
    func url(_ key: String, query: String = "") -> String {
        let path = key.isEmpty ? "/\(location.bucket)" : "/\(location.bucket)/\(key)"
        return location.endpoint + path + (query.isEmpty ? "" : "?" + query)
    }

    /// One request. `upload` sends `length` bytes of a file; `download` takes a 2xx body into a file (from 0).
    func perform(_ method: String, _ key: String, query: String = "", headers: [String] = [],
                 upload: (FileDescriptor, Int64)? = nil, download: FileDescriptor? = nil) throws(ServerFailure) -> (S3Answer, String?) {
        guard let h = curl_easy_init() else { throw .refused(503, "blob store: libcurl could not make a handle") }
        defer { curl_easy_cleanup(h) }
        let t = S3Transfer(sink: download, source: upload?.0)
        let ctx = Unmanaged.passUnretained(t).toOpaque()
        _ = ubq_easy_setopt_string(h, CURLOPT_URL, url(key, query: query))
        _ = ubq_easy_setopt_long(h, CURLOPT_NOSIGNAL, 1)
        _ = ubq_easy_setopt_long(h, CURLOPT_CONNECTTIMEOUT, connectSeconds)
        _ = ubq_easy_setopt_long(h, CURLOPT_LOW_SPEED_LIMIT, 1)
        _ = ubq_easy_setopt_long(h, CURLOPT_LOW_SPEED_TIME, stallSeconds)
        _ = ubq_easy_setopt_string(h, CURLOPT_AWS_SIGV4, "aws:amz:\(location.region):s3")
        _ = ubq_easy_setopt_string(h, CURLOPT_USERNAME, location.accessKey)
        _ = ubq_easy_setopt_string(h, CURLOPT_PASSWORD, location.secretKey)
        _ = ubq_easy_setopt_pointer(h, CURLOPT_ERRORBUFFER, t.errorBuffer)
        _ = ubq_easy_setopt_write_function(h) { ptr, size, count, ctx in
            Unmanaged<S3Transfer>.fromOpaque(ctx!).takeUnretainedValue()
                .receive(UnsafeRawBufferPointer(start: ptr, count: size * count))
        }
        _ = ubq_easy_setopt_pointer(h, CURLOPT_WRITEDATA, ctx)
        _ = ubq_easy_setopt_header_function(h) { ptr, size, count, ctx in
            Unmanaged<S3Transfer>.fromOpaque(ctx!).takeUnretainedValue()
                .header(UnsafeRawBufferPointer(start: ptr, count: size * count))
            return size * count
        }
        _ = ubq_easy_setopt_pointer(h, CURLOPT_HEADERDATA, ctx)
        switch method {
        case "HEAD": _ = ubq_easy_setopt_long(h, CURLOPT_NOBODY, 1)
        case "GET": _ = ubq_easy_setopt_long(h, CURLOPT_HTTPGET, 1)
        default: _ = ubq_easy_setopt_string(h, CURLOPT_CUSTOMREQUEST, method)
        }
        if let (_, length) = upload {
            _ = ubq_easy_setopt_long(h, CURLOPT_UPLOAD, 1)
            _ = ubq_easy_setopt_off(h, CURLOPT_INFILESIZE_LARGE, curl_off_t(length))
            _ = ubq_easy_setopt_read_function(h) { buf, size, count, ctx in
                Unmanaged<S3Transfer>.fromOpaque(ctx!).takeUnretainedValue()
                    .send(into: UnsafeMutableRawBufferPointer(start: buf, count: size * count))
            }
            _ = ubq_easy_setopt_pointer(h, CURLOPT_READDATA, ctx)
        }
        var list: UnsafeMutablePointer<curl_slist>? = nil
        // (No "Expect:" to switch off 100-continue: libcurl would sign that empty header without sending it.)
        for line in headers { list = curl_slist_append(list, line) }
        defer { curl_slist_free_all(list) }
        _ = ubq_easy_setopt_slist(h, CURLOPT_HTTPHEADER, list)
        let code = withExtendedLifetime(t) { curl_easy_perform(h) }
        _ = ubq_easy_setopt_pointer(h, CURLOPT_ERRORBUFFER, nil)
        if let e = t.sinkFailure { throw ServerFailure(e, "writing what the blob store sent") }
        if let e = t.sourceFailure { throw ServerFailure(e, "reading what goes to the blob store") }
        guard code == CURLE_OK else {
            let detail = String(cString: t.errorBuffer)
            let why = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            throw .refused(503, "blob store \(location.endpoint) unreachable: \(why)")
        }
        if t.answer.status >= 500 {
            throw .refused(503, "blob store \(location.endpoint) answered \(t.answer.status) \(t.answer.errorCode)")
        }
        var digest: String?
        if download != nil, var h = t.hasher.take() { digest = h.finalizeHex() }
        return (t.answer, digest)
    }

    /// The texts of every `<name>...</name>` in `xml`, in order, with the five XML entities decoded.
    static func tag(_ name: String, in xml: String) -> [String] {
        var out: [String] = []
        var rest = xml[...]
        let open = "<\(name)>", close = "</\(name)>"
        while let a = rest.range(of: open), let b = rest.range(of: close, range: a.upperBound..<rest.endIndex) {
            let raw = String(rest[a.upperBound..<b.lowerBound])
            out.append(raw.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
                .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#34;", with: "\"")
                .replacingOccurrences(of: "&apos;", with: "'").replacingOccurrences(of: "&amp;", with: "&"))
            rest = rest[b.upperBound...]
        }
        return out
    }
}
