// Part 21, point 3: each user's limits over HTTP. Past a limit only what adds is refused (507), before anything is
// stored: a blob of new bytes before its body, a batch's creates and new inline content one entry at a time, a new
// container; deletes, updates and bytes the store holds already go through. Limits belong to the user.
import Foundation
import Testing
import UbiquityBase
import UbiquitySim
@testable import UbiquityStub

@Suite struct QuotaTests {
    private func batch(_ f: Fixture, _ entries: [WireBatchEntry]) throws -> [Int] {
        let a = try f.call("POST", "/v1/containers/\(cid)/batch", json: WireBatch(entries: entries))
        #expect(a.status == 200, "\(a.text)")
        return try a.decode(WireBatchAnswer.self).results.map(\.status)
    }

    @Test func aBlobPastTheQuotaIsRefusedAndBytesAlreadyStoredAreNot() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        try f.server.accounts.setLimits(Accounts.firstUser) { $0.storage = 100 }
        let first = Array(repeating: UInt8(1), count: 60), second = Array(repeating: UInt8(2), count: 60)
        #expect(try f.putBlob(first).status == 201)
        let refused = try f.putBlob(second)
        #expect(refused.status == 507 && refused.text.contains("stores 60 B of 100 B and this needs 60 B more"), "\(refused.text)")
        #expect(try f.call("HEAD", "/v1/containers/\(cid)/blobs/\(sha256Hex(second))").status == 404, "nothing stored")
        #expect(try f.putBlob(first).status == 200, "bytes the store holds add nothing")
        try f.server.accounts.setLimits(Accounts.firstUser) { $0.storage = nil }
        #expect(try f.putBlob(second).status == 201)
        #expect(try f.server.userUsage().first { $0.user == Accounts.firstUser }?.storage == 120)
    }

    /// Random uploads of a few blobs, some again, while the quota changes now and then: each answer is the one
    /// a model of the stored bytes gives (200 for bytes held already, 507 past the quota, else 201). A fresh seed
    /// each run (QUOTA_SEED repeats one), named in every failure.
    @Test func uploadsUnderAChangingQuotaAnswerAsAModelOfTheStoredBytes() throws {
        let seed = ProcessInfo.processInfo.environment["QUOTA_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...1 << 40)
        var rng = SimRNG(seed: seed)
        let f = try Fixture()
        _ = try f.openContainer()
        let pool = (0..<10).map { i in Array(repeating: UInt8(i), count: 10 + rng.int(90)) }
        var stored: [String: Int64] = [:]
        var quota: Int64?
        for step in 0..<60 {
            if rng.chance(0.15) {
                quota = rng.chance(0.2) ? nil : Int64(rng.int(600))
                try f.server.accounts.setLimits(Accounts.firstUser) { $0.storage = quota }
            }
            let blob = pool[rng.int(pool.count)], sha = sha256Hex(blob)
            let used = stored.values.reduce(0, +)
            let expected = stored[sha] != nil ? 200 : quota.map { used + Int64(blob.count) > $0 } == true ? 507 : 201
            let got = try f.putBlob(blob).status
            #expect(got == expected, "seed \(seed), step \(step): \(blob.count) bytes with \(used) stored, quota \(quota.map(String.init) ?? "none")")
            if got == 201 { stored[sha] = Int64(blob.count) }
        }
        #expect(try f.server.userUsage().first { $0.user == Accounts.firstUser }?.storage == stored.values.reduce(0, +), "seed \(seed)")
    }

    @Test func aBatchPastTheLimitsRefusesOnlyTheEntriesThatAdd() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        #expect(try batch(f, [.put(dir("d1", "one"), ifMatch: nil)]) == [200])
        // The root, Documents and d1 are three items; one more may come.
        try f.server.accounts.setLimits(Accounts.firstUser) { $0.items = 4 }
        let small = Array("inline".utf8)
        #expect(try batch(f, [.put(dir("d2", "two"), ifMatch: nil), .put(dir("d3", "three"), ifMatch: nil),
                              .put(dir("d1", "renamed"), ifMatch: 3)]) == [200, 507, 200])
        // At the limit a delete still goes, and then a create fits again.
        #expect(try batch(f, [.delete("d2", ifMatch: 4), .put(dir("d3", "three"), ifMatch: nil)]) == [200, 507],
                "the count is the last one taken plus what was made since: a delete frees room at the next count")
        // Storage: an entry whose inline content would pass the quota is refused alone.
        try f.server.accounts.setLimits(Accounts.firstUser) { $0.items = nil; $0.storage = 3 }
        #expect(try batch(f, [.put(file("f1", "f1", small), ifMatch: nil, content: small), .put(dir("d4", "four"), ifMatch: nil)])
                == [507, 200])
    }

    @Test func aNewContainerPastTheLimitIsRefusedAndAnOldOneStillOpens() throws {
        let f = try Fixture()
        _ = try f.openContainer()
        try f.server.accounts.setLimits(Accounts.firstUser) { $0.containers = 1 }
        let refused = try f.call("PUT", "/v1/containers/iCloud.com.example.other")
        #expect(refused.status == 507 && refused.text.contains("1 containers, at most 1"), "\(refused.text)")
        #expect(try f.call("PUT", "/v1/containers/\(cid)").status == 200)
        #expect(try f.server.store.containerIDs() == [cid])
    }

    @Test func limitsBelongToTheUserAndGoWithIt() throws {
        let f = try Fixture()
        let accounts = f.server.accounts
        try accounts.addUser("alice")
        try accounts.setLimits("alice") { $0.storage = 5 << 30; $0.items = 10 }
        #expect(try accounts.limits("alice") == UserLimits(storage: 5 << 30, containers: 100, items: 10))
        #expect(try accounts.limits(Accounts.firstUser) == .standard)
        #expect(throws: StubError.self) { try accounts.setLimits("nobody") { $0.items = 1 } }
        try accounts.removeUser("alice")
        try accounts.addUser("alice")
        #expect(try accounts.limits("alice") == .standard, "a user added again under the name starts with the standard limits")
    }
}
