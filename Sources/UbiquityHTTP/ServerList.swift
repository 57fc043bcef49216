// The servers a client may talk to (`mount --remote URL,URL,...`), all assumed to serve the same container
// store with the same token: one is in use; when it stops answering the client moves on to the next, and after
// the last comes back to the first. Kept free of libcurl so the tests can check the rotation alone.
//
// What must hold: `lock` guards `index`. A failure moves on only if it was met on the server still in use, so
// many requests failing together on one server move the client on once, not once each. Which failures mean
// "stopped answering" is `meansGone`: no connection, no answer in time, a lost connection, or a 502, 503 or 504
// (a server going away, or a proxy in front of one); any other answer is the store's, the same on every server.
//
// Lock order (docs/ARCHITECTURE.md, "Threads, and the order of locks"): a leaf.
import Foundation
import UbiquityBase
import UbiquityCore

final class ServerList: Sendable {
    /// Base URLs without trailing slashes, in the order given.
    let urls: [String]
    /// The index of the server in use.
    private let index = Locked(0)

    /// `urls` must not be empty.
    init(_ urls: [String]) {
        precondition(!urls.isEmpty, "a client needs a server")
        self.urls = urls.map { url in
            var base = url
            while base.hasSuffix("/") { base.removeLast() }
            return base
        }
    }

    /// The base URL in use.
    var current: String { urls[index.withLock { $0 }] }

    /// The server of a request URL built on one of the bases (nil for none).
    func server(of requestURL: String) -> Int? {
        urls.firstIndex { requestURL == $0 || requestURL.hasPrefix($0 + "/") || requestURL.hasPrefix($0 + "?") }
    }

    /// A request on server `failed` met a failure that means it stopped answering: moves on to the next if
    /// that server is still the one in use. Returns the base URL now in use when this call moved on, else nil
    /// (a single server, or another request already moved on).
    func stoppedAnswering(_ failed: Int) -> String? {
        index.withLock { index in
            guard urls.count > 1, failed == index else { return nil }
            index = (index + 1) % urls.count
            return urls[index]
        }
    }

    /// Whether a failure means the server stopped answering (so another may answer instead).
    static func meansGone(_ error: RemoteError) -> Bool {
        switch error {
        case .unreachable: return true
        case .server(let status, _): return meansGone(status: status)
        default: return false
        }
    }

    /// Whether an HTTP status means the server is going away (or the one behind a proxy is gone).
    static func meansGone(status: Int) -> Bool { status == 502 || status == 503 || status == 504 }
}
