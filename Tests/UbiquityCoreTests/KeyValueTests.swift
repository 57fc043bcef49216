// The key-value store: typed values, Apple's limits, last-writer-wins, two devices on one MemoryRemote.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct KeyValueTests {
    init() { _ = quietLogs }

    func roundTrip(_ v: KVValue) throws -> KVValue {
        try JSONDecoder().decode(KVValue.self, from: JSONEncoder.wire.encode(v))
    }

    @Test func everyPropertyListTypeKeepsItsType() throws {
        let values: [KVValue] = [.string("héllo\n"), .integer(-5), .real(2.5), .boolean(true), .date(1_764_547_200_123_456_789),
                                 .data([0, 1, 2, 255]), .array([.integer(1), .real(2.5), .boolean(false)]),
                                 .dictionary(["a": .array([.string("x")]), "b": .dictionary([:])])]
        for v in values { #expect(try roundTrip(v) == v) }
        // an integer stays an integer, a real with no fraction stays a real
        #expect(try roundTrip(.real(5)) == .real(5))
        #expect(String(decoding: try JSONEncoder.wire.encode(KVValue.integer(5)), as: UTF8.self)
            == #"{"type":"integer","value":5}"#)
        #expect(throws: (any Error).self) { try JSONDecoder().decode(KVValue.self, from: Data(#"{"type":"set","value":1}"#.utf8)) }
    }

    @Test func limitsAreApples() {
        let mb = KVLimits.maxTotalBytes
        #expect(KVLimits.violation(key: String(repeating: "k", count: 64), value: .integer(1), live: [:]) == nil)
        #expect(KVLimits.violation(key: String(repeating: "k", count: 65), value: .integer(1), live: [:]) == .keyTooLong)
        #expect(KVLimits.violation(key: "é", value: .data(Array(repeating: 0, count: mb + 1)), live: [:]) == .valueTooLarge)
        #expect(KVLimits.violation(key: "k", value: .data(Array(repeating: 0, count: mb - 1)), live: [:]) == nil)
        #expect(KVLimits.violation(key: "k", value: .string("x"), live: ["other": mb - 2]) == .overTotal)
        // replacing a key counts its new value only
        #expect(KVLimits.violation(key: "k", value: .string("x"), live: ["k": mb - 2]) == nil)
        var full: [String: Int] = [:]
        for i in 0..<1024 { full["k\(i)"] = 1 }
        #expect(KVLimits.violation(key: "new", value: .integer(1), live: full) == .tooManyKeys)
        #expect(KVLimits.violation(key: "k5", value: .integer(1), live: full) == nil)
        #expect(KVLimits.violation(key: "new", value: nil, live: full) == nil) // a delete always fits
    }

    @Test func theLaterWriteWinsAndTiesGoByDevice() {
        let a = WireKVEntry(key: "k", value: .integer(1), mtime: 10, device: "laptop")
        let b = WireKVEntry(key: "k", value: .integer(2), mtime: 11, device: "desktop")
        let tie = WireKVEntry(key: "k", value: .integer(3), mtime: 10, device: "phone")
        #expect(b.wins(over: a) && !a.wins(over: b))
        #expect(tie.wins(over: a) && !a.wins(over: tie))
        #expect(!a.wins(over: a) && a.sameWrite(as: a))
    }

    func device(_ dir: TempDir, _ name: String, _ remote: MemoryRemote) throws -> KeyValueStore {
        try KeyValueStore(directory: dir.path, device: name, account: "acct", remote: remote)
    }

    @Test func twoDevicesConvergeOnTheLaterWrite() throws {
        let remote = MemoryRemote()
        let da = TempDir(), db = TempDir()
        let a = try device(da, "laptop", remote), b = try device(db, "desktop", remote)
        remote.offline = true
        a.start(); b.start()
        defer { a.stop(); b.stop(); remote.offline = true }
        try a.set("k", .string("from A"))
        usleep(1000)
        try b.set("k", .string("from B"))
        #expect(try a.value("k") == .string("from A")) // offline: each keeps its own
        remote.offline = false
        #expect(eventually(10) { (try? a.value("k")) == .string("from B") && (try? b.value("k")) == .string("from B") })
        // reported as the initial sync (the first feed answer) or a server change, whichever brought it
        #expect(eventually(5) { a.changeRecords().contains { $0.keys == ["k"] && $0.reason != .accountChange } })
        try a.set("k", nil)
        #expect(eventually(10) { (try? b.value("k")) == .some(nil) && (try? b.keys())?.isEmpty == true })
    }

    @Test func localLimitsStoreNothing() throws {
        let dir = TempDir()
        let kv = try KeyValueStore(directory: dir.path, device: "d", account: "acct", remote: nil)
        #expect(throws: CoreError.nameTooLong) { try kv.set(String(repeating: "k", count: 65), .integer(1)) }
        #expect(throws: CoreError.fileTooBig) { try kv.set("k", .data(Array(repeating: 0, count: (1 << 20) + 1))) }
        try kv.set("half", .data(Array(repeating: 0, count: 600 << 10)))
        #expect(throws: CoreError.quotaExceeded(KVLimits.Violation.overTotal.message)) {
            try kv.set("other", .data(Array(repeating: 0, count: 600 << 10)))
        }
        #expect(try kv.keys() == ["half"])
    }

    @Test func valuesSurviveReopeningAndAnotherAccountDropsThem() throws {
        let dir = TempDir()
        do {
            let kv = try KeyValueStore(directory: dir.path, device: "d", account: "acct", remote: nil)
            try kv.set("k", .boolean(true))
        }
        let again = try KeyValueStore(directory: dir.path, device: "d", account: "acct", remote: nil)
        #expect(try again.value("k") == .boolean(true))
        let other = try KeyValueStore(directory: dir.path, device: "d", account: "someone else", remote: nil)
        #expect(try other.value("k") == nil)
        #expect(other.changeRecords().map(\.reason) == [.accountChange])
        #expect(other.changeRecords().first?.keys == ["k"])
    }

    @Test func theMemoryRemoteKeepsTheWinnerAndRefusesOverQuota() throws {
        let remote = MemoryRemote()
        let first = try remote.putKV(WireKVEntry(key: "k", value: .integer(1), mtime: 20, device: "a"))
        let older = try remote.putKV(WireKVEntry(key: "k", value: .integer(2), mtime: 10, device: "b"))
        #expect(older == first && first.seq == 1)
        _ = try remote.putKV(WireKVEntry(key: "big", value: .data(Array(repeating: 0, count: 1000 << 10)), mtime: 1, device: "a"))
        #expect(throws: RemoteError.self) {
            try remote.putKV(WireKVEntry(key: "more", value: .data(Array(repeating: 0, count: 100 << 10)), mtime: 1, device: "a"))
        }
        #expect(try remote.kvChanges(since: 0, waitSeconds: 0).entries.map(\.key) == ["k", "big"])
    }

    @Test func aStoredValueThatDoesNotDecodeFailsTheWriteNotCountsAsNothing() throws {
        let dir = TempDir()
        let kv = try device(dir, "laptop", MemoryRemote())
        try kv.set("a", .string("x"))
        try Database(path: dir.path + "/state.sqlite").exec("UPDATE kv_local SET value = '{broken' WHERE key = 'a'")
        // Before: the broken value counted as 0 bytes in the quota and the write went through.
        #expect {
            try kv.set("b", .integer(1))
        } throws: { error in
            guard case CoreError.store(.badValue("a", "kv value", _)) = error else { return false }
            return true
        }
    }
}
