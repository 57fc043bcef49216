// A thin, safe wrapper over SQLite: one connection, prepared statements, typed binds and columns.
// A Database is not thread-safe by itself; callers serialise access (the store holds a lock).
//
// What must hold: a connection is opened NOMUTEX, so it must never be used by two threads at once: the core's
// `Store` is a field of `CoreState` behind `Container.state`, the `Checkpointer` has a connection of its own, the
// stub and the key-value store guard theirs with their own lock. Every result code other than OK, ROW and DONE
// becomes a thrown `SQLiteError` (its `kind` names a busy, full or corrupt database): nothing here ignores a
// failure, except a ROLLBACK after a failed body, whose error is the one thrown. `transaction` nests by joining
// the open transaction, so an operation stays one transaction. A `Row` lives only inside its callback.
// Each SQL text is prepared once and its statement kept (`statements`): a use binds, steps, then resets it
// and clears its bindings, so no use sees another's values and no reset statement holds a read open. A
// statement already running (a query inside another's row callback) is never reused: that use gets its own.
// Use `query`/`forEach` for statements run often (`exec` parses its text every time).
import CSQLite
import Foundation

public struct SQLiteError: Error, Equatable, CustomStringConvertible {
    public let code: Int32
    public let message: String
    public init(code: Int32, message: String) {
        self.code = code
        self.message = message
    }
    public var description: String { "sqlite error \(code): \(message)" }
    /// True when the disk (or quota) is full.
    public var isDiskFull: Bool { code & 0xff == SQLITE_FULL }

    /// What went wrong, by the primary result code.
    public enum Kind: Sendable { case busy, full, corrupt, constraint, other }
    public var kind: Kind {
        switch code & 0xff {
        case SQLITE_BUSY, SQLITE_LOCKED: return .busy
        case SQLITE_FULL: return .full
        case SQLITE_CORRUPT, SQLITE_NOTADB: return .corrupt
        case SQLITE_CONSTRAINT: return .constraint
        default: return .other
        }
    }
}

/// A value bound into, or read out of, a statement.
public enum SQLValue: Equatable, Sendable {
    case null
    case int(Int64)
    case text(String)
    case blob([UInt8])
}

public final class Database {
    private var handle: OpaquePointer?
    public let path: String
    /// Prepared statements by their SQL, reset between uses.
    private var statements: [String: OpaquePointer] = [:]
    /// The SQL of the cached statements running now (a row callback may run another query).
    private var running: Set<String> = []

    /// Opens (creating if needed) the database at `path`.
    public init(path: String) throws {
        self.path = path
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close(db)
            throw SQLiteError(code: rc, message: "\(path): \(message)")
        }
        handle = db
        sqlite3_busy_timeout(db, 5000)
    }

    deinit {
        for stmt in statements.values { sqlite3_finalize(stmt) }
        sqlite3_close_v2(handle)
    }

    private func check(_ rc: Int32) throws {
        guard rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW else {
            throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(handle)))
        }
    }

    /// Runs one or more statements that take no parameters.
    public func exec(_ sql: String) throws {
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let message = err.map { String(cString: $0) } ?? "exec failed"
            sqlite3_free(err)
            throw SQLiteError(code: rc, message: message)
        }
    }

    /// Runs a statement with parameters and returns every row, copied out of the statement.
    @discardableResult
    public func query(_ sql: String, _ params: [SQLValue] = []) throws -> [Values] {
        var rows: [Values] = []
        try forEach(sql, params) { rows.append($0.values) }
        return rows
    }

    /// Runs a statement and calls `body` for each row, without collecting them.
    public func forEach(_ sql: String, _ params: [SQLValue] = [], _ body: (Row) throws -> Void) throws {
        try run(sql, params) { try body($0); return true }
    }

    /// The first row `pick` takes (returns non-nil for), stepping no further; nil if it takes none.
    public func first<T>(_ sql: String, _ params: [SQLValue] = [], _ pick: (Row) throws -> T?) throws -> T? {
        var found: T?
        try run(sql, params) { row in
            found = try pick(row)
            return found == nil
        }
        return found
    }

    /// Runs a statement, calling `body` for each row while it returns true.
    private func run(_ sql: String, _ params: [SQLValue], _ body: (Row) throws -> Bool) throws {
        if running.contains(sql) || (statements[sql] == nil && statements.count >= Database.keptStatements) {
            var stmt: OpaquePointer?
            try check(sqlite3_prepare_v2(handle, sql, -1, &stmt, nil))
            defer { sqlite3_finalize(stmt) }
            guard let stmt else { throw SQLiteError(code: SQLITE_MISUSE, message: "no statement in: \(sql)") }
            return try step(stmt, params, body)
        }
        let stmt = try statement(sql)
        running.insert(sql)
        defer {
            sqlite3_reset(stmt)
            sqlite3_clear_bindings(stmt)
            running.remove(sql)
        }
        try step(stmt, params, body)
    }

    /// How many statements are kept at most (the store's SQL is a few dozen constant texts).
    static let keptStatements = 256

    /// The kept statement of `sql`, prepared at its first use.
    private func statement(_ sql: String) throws -> OpaquePointer {
        if let stmt = statements[sql] { return stmt }
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else {
            sqlite3_finalize(stmt)
            try check(rc)
            throw SQLiteError(code: SQLITE_MISUSE, message: "no statement in: \(sql)")
        }
        statements[sql] = stmt
        return stmt
    }

    /// Binds `params` to `stmt` and steps it, calling `body` for each row while it returns true.
    private func step(_ stmt: OpaquePointer, _ params: [SQLValue], _ body: (Row) throws -> Bool) throws {
        for (i, p) in params.enumerated() {
            let idx = Int32(i + 1)
            switch p {
            case .null: try check(sqlite3_bind_null(stmt, idx))
            case .int(let v): try check(sqlite3_bind_int64(stmt, idx, v))
            case .text(let s): try check(sqlite3_bind_text(stmt, idx, s, -1, ubq_sqlite_transient()))
            case .blob(let b):
                try check(b.withUnsafeBytes { sqlite3_bind_blob(stmt, idx, $0.baseAddress, Int32(b.count), ubq_sqlite_transient()) })
            }
        }
        while true {
            let rc = sqlite3_step(stmt)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { try check(rc); break }
            if try !body(Row(stmt: stmt)) { break }
        }
    }

    /// Runs `body` inside one transaction; rolls back if it throws. Inside a transaction already, `body`
    /// simply joins it.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        if sqlite3_get_autocommit(handle) == 0 { return try body() }
        try exec("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try exec("COMMIT")
            return result
        } catch {
            try? exec("ROLLBACK")
            throw error
        }
    }

    /// Adds a column to an existing table unless it has it already: the schema migration of a database made
    /// by an older version (`definition` is the column's type and default, e.g. `TEXT`).
    public func addColumnIfMissing(_ table: String, _ column: String, _ definition: String) throws {
        var found = false
        try forEach("SELECT name FROM pragma_table_info(?)", [.text(table)]) { if $0.text(0) == column { found = true } }
        if !found { try exec("ALTER TABLE \(table) ADD COLUMN \(column) \(definition)") }
    }

    public var changes: Int { Int(sqlite3_changes(handle)) }
    /// False while a transaction is open.
    public var isAutocommit: Bool { sqlite3_get_autocommit(handle) != 0 }
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
}

/// One result row; valid only inside the callback that receives it (see `values` for a copy).
public struct Row {
    fileprivate let stmt: OpaquePointer

    /// A copy of the row that outlives the statement.
    public var values: Values {
        Values(columns: (0..<sqlite3_column_count(stmt)).map { i in
            switch sqlite3_column_type(stmt, i) {
            case SQLITE_NULL: return .null
            case SQLITE_INTEGER: return .int(int(i))
            case SQLITE_BLOB: return .blob(blob(i))
            default: return .text(text(i))
            }
        })
    }

    public func int(_ i: Int32) -> Int64 { sqlite3_column_int64(stmt, i) }
    public func isNull(_ i: Int32) -> Bool { sqlite3_column_type(stmt, i) == SQLITE_NULL }
    public func text(_ i: Int32) -> String {
        guard let p = sqlite3_column_text(stmt, i) else { return "" }
        return String(cString: p)
    }
    public func optionalText(_ i: Int32) -> String? { isNull(i) ? nil : text(i) }
    /// The column's UTF-8 bytes, without making a String (valid only inside `body`; empty for NULL).
    public func withText<T>(_ i: Int32, _ body: (UnsafeBufferPointer<UInt8>) throws -> T) rethrows -> T {
        let p = sqlite3_column_text(stmt, i)
        let n = p == nil ? 0 : Int(sqlite3_column_bytes(stmt, i))
        return try body(UnsafeBufferPointer(start: p, count: n))
    }
    public func blob(_ i: Int32) -> [UInt8] {
        let n = Int(sqlite3_column_bytes(stmt, i))
        guard n > 0, let p = sqlite3_column_blob(stmt, i) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: n))
    }
}

/// A row copied out of its statement.
public struct Values: Sendable {
    public let columns: [SQLValue]

    public func int(_ i: Int32) -> Int64 {
        switch columns[Int(i)] {
        case .int(let v): return v
        case .text(let t): return Int64(t) ?? 0
        default: return 0
        }
    }

    public func text(_ i: Int32) -> String {
        switch columns[Int(i)] {
        case .text(let t): return t
        case .int(let v): return String(v)
        case .blob(let b): return String(decoding: b, as: UTF8.self)
        case .null: return ""
        }
    }
}
