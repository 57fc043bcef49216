// The libcurl layer: a pool of easy handles shared by all threads, and one request = one `CurlRequest` box that
// the C callbacks reach through an unmanaged context pointer. Response bodies go either to memory (small JSON,
// capped) or straight to a file descriptor (blob downloads); request bodies come from memory or a file
// descriptor (blob uploads), so big transfers keep memory bounded by libcurl's own buffers.
//
// What must hold: an easy handle serves one request at a time: taken from the pool (reset when reused) and given back
// after it; the pool's lock guards only the idle list (a leaf). A `CurlRequest` is touched only by the thread that runs
// its transfer (the callbacks run inside its `curl_easy_perform`). Download bytes go to the file only for an answer
// that starts where asked (200 from 0, 206 from the offset); a body kept in memory never passes its cap. A failure on
// this side (disk full, a file that cannot be read) is kept as its own case, never as the network's.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): the pool's is a leaf.
import Foundation
import CCurl
import UbiquityBase
import UbiquityCore
#if canImport(Glibc)
import Glibc
#endif

/// Once per process, before any handle exists (thread-safe through Swift's lazy global initialisation).
private let curlGlobalInit: CURLcode = ubq_curl_global_init()

/// Easy handles kept for reuse, so connections stay alive across calls from any thread.
final class CurlHandlePool: Sendable {
    /// Idle easy handles (C pointers: only ever used by one thread at a time, taken out of here first).
    private let idle = Locked<[UnsafeMutableRawPointer]>([])
    private let maxIdle: Int

    init(maxIdle: Int = 16) {
        _ = curlGlobalInit
        self.maxIdle = maxIdle
    }

    deinit {
        for h in idle.withLock({ $0 }) { curl_easy_cleanup(h) }
    }

    /// A reset handle (a fresh one when none is idle), or nil if libcurl cannot make one.
    func acquire() -> UnsafeMutableRawPointer? {
        if let h = idle.withLock({ $0.popLast() }) {
            curl_easy_reset(h)
            return h
        }
        return curl_easy_init()
    }

    func release(_ h: UnsafeMutableRawPointer) {
        let kept = idle.withLock { idle in
            guard idle.count < maxIdle else { return false }
            idle.append(h)
            return true
        }
        if !kept { curl_easy_cleanup(h) }
    }
}

/// Where the response body goes.
enum ResponseSink {
    /// Keep it in memory, up to `limit` bytes (more fails the request).
    case memory(limit: Int)
    /// A blob download: write 200/206 bodies to `fd`, the blob's byte `offset` at the file's `base + offset`
    /// (a chunk lands at its place in a file: `base`), and on; error bodies go to memory.
    case file(FileDescriptor, offset: Int64, base: Int64 = 0)
}

/// Where the request body comes from.
enum RequestSource {
    case none
    case memory([UInt8])
    /// `length` bytes read from `fd` at its current position.
    case file(FileDescriptor, length: Int64)
}

/// State of one request, reached from the C callbacks.
final class CurlRequest {
    let handle: UnsafeMutableRawPointer
    let sink: ResponseSink
    let progress: TransferProgress?

    /// The final HTTP status, read when the body starts (or after the transfer).
    var status = 0
    /// Body bytes kept in memory: the whole answer for `.memory`, only an error answer for `.file`.
    var body: [UInt8] = []
    /// The body was larger than allowed: the transfer was stopped.
    var bodyTooLarge = false
    /// `Content-Range` of the final answer.
    var contentRange: String?
    /// `X-Error` of the final answer: the error's one line, also on answers without a body (HEAD).
    var errorHeader: String?
    /// A problem found on our side (local write or read failed, server answered something unusable).
    var localFailure: RemoteError?
    /// The caller's progress callback asked to stop.
    var cancelled = false

    /// For `.file`: bytes written so far, as an absolute offset in the blob.
    private(set) var fileOffset: Int64 = 0
    private var bodyDecided = false
    private var bodyToFile = false

    /// The request sends a file (a blob upload).
    var isUpload: Bool { sourceFD != nil }

    /// For uploads from a file.
    private var sourceFD: FileDescriptor?
    private var sourceRemaining: Int64 = 0

    private var lastReported: Int64 = -1
    private var lastReportTime: Int64 = 0

    let errorBuffer: UnsafeMutablePointer<CChar>

    init(handle: UnsafeMutableRawPointer, sink: ResponseSink, source: RequestSource, progress: TransferProgress?) {
        self.handle = handle
        self.sink = sink
        self.progress = progress
        let size = Int(ubq_curl_error_size())
        errorBuffer = .allocate(capacity: size)
        errorBuffer.initialize(repeating: 0, count: size)
        if case .file(_, let offset, _) = sink { fileOffset = offset }
        if case .file(let fd, let length) = source { sourceFD = fd; sourceRemaining = length }
    }

    deinit { errorBuffer.deallocate() }

    var errorText: String { String(cString: errorBuffer) }

    private func readStatus() -> Int {
        var code = 0
        _ = ubq_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    /// Body bytes arrived. Returns how many were taken; anything else makes libcurl stop with a write error.
    func receive(_ chunk: UnsafeRawBufferPointer) -> Int {
        if !bodyDecided {
            bodyDecided = true
            status = readStatus()
            if case .file(_, let offset, _) = sink, status < 400 {
                if let problem = checkDownloadStart(offset: offset) {
                    localFailure = problem
                    return 0
                }
                bodyToFile = true
            }
        }
        if bodyToFile, case .file(let fd, _, let base) = sink {
            do {
                try fd.writeAll(chunk, at: base + fileOffset)
            } catch {
                localFailure = .landing(error)
                return 0
            }
            fileOffset += Int64(chunk.count)
            return chunk.count
        }
        let limit: Int
        if case .memory(let l) = sink, status < 400 { limit = l } else { limit = HTTPMapping.maxErrorBody }
        if body.count + chunk.count > limit {
            bodyTooLarge = true
            return 0
        }
        body.append(contentsOf: chunk)
        return chunk.count
    }

    /// Whether a download answer fits the request: 200 (or a 206 from 0) for offset 0, a 206 starting at the
    /// offset otherwise.
    private func checkDownloadStart(offset: Int64) -> RemoteError? {
        switch status {
        case 200 where offset == 0:
            return nil
        case 206:
            let start = contentRange.flatMap(HTTPMapping.contentRangeStart)
            if start == offset { return nil }
            return .server(status: 206, message: "partial answer starts at \(contentRange ?? "nothing"), not \(offset)")
        case 200:
            return .server(status: 200, message: "the server ignored the range request from byte \(offset)")
        default:
            return .server(status: status, message: "unexpected answer HTTP \(status) to a blob download")
        }
    }

    /// A header line arrived (also status lines, of every answer including interim ones).
    func header(_ line: UnsafeRawBufferPointer) {
        let text = String(decoding: line, as: UTF8.self)
        if text.hasPrefix("HTTP/") { contentRange = nil; errorHeader = nil; return }
        guard let colon = text.firstIndex(of: ":") else { return }
        let name = text[..<colon].lowercased()
        if name == "content-range" {
            contentRange = text[text.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
        } else if name == "x-error" {
            errorHeader = text[text.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// libcurl wants up to `buffer.count` bytes of the request body. Returns the count, 0 at the end.
    func send(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let fd = sourceFD else { return 0 }
        let want = Int(min(Int64(buffer.count), sourceRemaining))
        if want == 0 { return 0 }
        do {
            let n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            if n == 0 {
                localFailure = .corrupt("the file to upload ended \(sourceRemaining) bytes early")
                return ubq_readfunc_abort()
            }
            sourceRemaining -= Int64(n)
            return n
        } catch {
            localFailure = .localFile("cannot read the file to upload", cause: error)
            return ubq_readfunc_abort()
        }
    }

    /// For transfers: give up when no byte moved for this long (ns). libcurl's own low-speed check averages
    /// over a few seconds' window, so it notices a stall only some seconds late; this one is exact.
    var stallLimit: Int64?
    /// The transfer was abandoned because nothing moved for `stallLimit`.
    private(set) var stalled = false
    private var movedCount: Int64 = -1
    private var movedTime: Int64 = 0

    /// Periodic progress from libcurl (several times a second, also while idle). Returns false to abort.
    func tick(downloaded: Int64, uploaded: Int64) -> Bool {
        let now = monotonicNanoseconds()
        if let stallLimit {
            let moved = downloaded + uploaded
            if moved != movedCount {
                movedCount = moved
                movedTime = now
            } else if now - movedTime >= stallLimit {
                stalled = true
                return false
            }
        }
        guard let progress else { return true }
        let done: Int64
        if case .file = sink { done = fileOffset } else { done = uploaded }
        // Report every change, and at least twice a second while stalled so a cancel still gets through.
        guard done != lastReported || now - lastReportTime >= 500_000_000 else { return true }
        lastReported = done
        lastReportTime = now
        if !progress(done) {
            cancelled = true
            return false
        }
        return true
    }

    /// The status after a finished transfer (a body-less answer never called `receive`).
    func finish() {
        if !bodyDecided || status == 0 { status = readStatus() }
    }
}
