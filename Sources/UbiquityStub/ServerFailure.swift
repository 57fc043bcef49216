// The server's one error type. Every function of the stub that serves a request throws a ServerFailure, and the
// server answers each case in one exhaustive switch (`StubServer.failureReply`): a refusal with its status, a
// change already applied with 208, an engine away or a full disk with 503 (clients retry), anything else with 500.
// Start-up and the operator's commands throw StubError instead: a plain message for the command line.
//
// What must hold: the errors of the libraries below the stub become a case here where they are met, each kind by
// its own initializer (SQLite's, PostgreSQL's, a system call's errno); the libraries that throw untyped errors
// are bridged in one place each: UbiquityBase's Database by `database` (its only other failures are the stub's
// own, from the row readers it is passed), Foundation's JSON coders by `coding`, RewindPlanner by
// `StubStore.planning` (its refusals, and the failures of the store it reads).
import Foundation
import UbiquityBase

enum ServerFailure: Error, CustomStringConvertible {
    /// The request (or batch entry) refused as asked: its status, its message, and for 409 and 412 the item in
    /// the way.
    case refused(StubFailure)
    /// A retry of a change already applied: answered 208 with what it made and the item now (not a failure).
    case applied(WireApplied)
    /// The metadata engine cannot be reached (a database restarting, a connection lost): nothing asked for was
    /// applied; answered 503 so the client retries.
    case unavailable(String)
    /// The disk under the metadata or the blobs is full: 503, so clients retry.
    case diskFull(String)
    /// A fault of the server's own storage (a database error, a file or an object that cannot be read or
    /// written, a stored value that does not decode): 500, logged.
    case fault(String)

    /// A refusal: `status` with `message` (and the item in the way, or the change the caller made).
    static func refused(_ status: Int, _ message: String, current: WireItem? = nil,
                        yours: WireLastChange? = nil) -> ServerFailure {
        .refused(StubFailure(status, message, current: current, yours: yours))
    }

    init(_ error: SQLiteError) {
        self = error.isDiskFull ? .diskFull("\(error)") : .fault("\(error)")
    }

    init(_ error: PostgresError) {
        self = .fault("\(error)")
    }

    init(_ error: Errno, _ doing: String) {
        self = error == .noSpace ? .diskFull("\(doing): \(error)") : .fault("\(doing): \(error)")
    }

    /// Runs a system call on the server's own files (`doing` says what it does, for the log and the answer).
    static func file<T>(_ doing: @autoclosure () -> String, _ call: @autoclosure () throws(Errno) -> T) throws(ServerFailure) -> T {
        do { return try call() } catch { throw ServerFailure(error, doing()) }
    }

    /// Runs work on UbiquityBase's Database, whose own failures are SQLiteErrors (and whose row readers here
    /// throw ServerFailures).
    static func database<T>(_ body: () throws -> T) throws(ServerFailure) -> T {
        do {
            return try body()
        } catch let e as SQLiteError {
            throw ServerFailure(e)
        } catch let e as ServerFailure {
            throw e
        } catch {
            throw .fault("the database failed: \(error)")
        }
    }

    /// Runs JSON encoding or decoding of `what` (a stored value, or a body the server made itself): a failure is
    /// the server's own.
    static func coding<T>(_ what: String, _ body: () throws -> T) throws(ServerFailure) -> T {
        do { return try body() } catch { throw .fault("\(what) does not code: \(error)") }
    }

    var description: String {
        switch self {
        case .refused(let f): return "\(f)"
        case .applied: return "208 already applied"
        case .unavailable(let m): return "metadata unavailable: \(m)"
        case .diskFull(let m): return "disk full: \(m)"
        case .fault(let m): return m
        }
    }

    /// What went wrong, without the status.
    var message: String {
        if case .refused(let f) = self { return f.message }
        return description
    }

    /// The refusal, when this is one.
    var refusal: StubFailure? {
        if case .refused(let f) = self { return f }
        return nil
    }
}

/// A refusal that maps onto an HTTP status and an error body.
struct StubFailure: Error, CustomStringConvertible {
    let status: Int
    let message: String
    let current: WireItem?
    let yours: WireLastChange?
    init(_ status: Int, _ message: String, current: WireItem? = nil, yours: WireLastChange? = nil) {
        self.status = status; self.message = message; self.current = current; self.yours = yours
    }
    var description: String { "\(status) \(message)" }
    /// A refusal of the request (or batch entry) itself, not the server's trouble: a 4xx, or the user's quota
    /// (507), which a batch answers for the entry alone.
    var isEntrysOwn: Bool { status < 500 || status == QuotaRefusal.status }
}
