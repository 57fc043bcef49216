// The local store limit: size parsing, the order of eviction, and what the evictor must leave.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct CacheTests {
    let remote = MemoryRemote()
    /// Each file takes exactly this much on disk (whole blocks, no zero block to become a hole).
    static let fileSize = 64 << 10

    static func content(_ seed: Int) -> [UInt8] {
        (0..<fileSize).map { UInt8(truncatingIfNeeded: ($0 &* 131) ^ (seed &* 17) | 1) }
    }

    @Test func sizesParse() {
        #expect(SizeSpec.parse("500K") == .bytes(500 << 10))
        #expect(SizeSpec.parse("50M") == .bytes(50 << 20))
        #expect(SizeSpec.parse("2G") == .bytes(2 << 30))
        #expect(SizeSpec.parse("1T") == .bytes(1 << 40))
        #expect(SizeSpec.parse("2g") == .bytes(2 << 30))
        #expect(SizeSpec.parse("1048576") == .bytes(1_048_576))
        #expect(SizeSpec.parse("0") == .bytes(0))
        #expect(SizeSpec.parse("10%") == .percent(10))
        #expect(SizeSpec.parse("12.5%") == .percent(12.5))
        for bad in ["", "M", "12Q", "-1", "-1G", "1.5G", "150%", "0%", "%", "10 M", "99999999999T", "١٠M"] {
            #expect(SizeSpec.parse(bad) == nil, "\(bad)")
        }
        #expect(SizeSpec.percent(25).bytes(of: 1000) == 250)
        #expect(SizeSpec.bytes(7).bytes(of: 1000) == 7)
    }

    /// Seeds files named `names` and makes a device whose store may hold `limitFiles` of them.
    private func device(_ names: [String], limitFiles: Int, link: Link? = nil) throws -> (Device, [String: String]) {
        var ids: [String: String] = [:]
        for (i, name) in names.enumerated() {
            ids[name] = remote.seed(path: "Documents/" + name, bytes: CacheTests.content(i), device: "other", mtime: 5).id
        }
        let dev = try Device(link ?? remote, name: "a") { $0.cacheLimit = Int64(limitFiles * CacheTests.fileSize) }
        return (dev, ids)
    }

    /// Fetches, opens and closes a file, as `cat` does.
    private func read(_ c: Container, _ id: String) throws {
        let fetched = DispatchSemaphore(value: 0)
        _ = c.fetch(id) { _ in fetched.signal() }
        #expect(fetched.wait(timeout: .now() + 15) == .success)
        guard case .opened(let fd) = try c.open(id, writable: false, truncate: false) else {
            Issue.record("fetched content must open"); return
        }
        fd.close()
        c.closed(id, writable: false)
    }

    private func isLocal(_ dev: Device, _ id: String) -> Bool { dev.container.item(id)?.hasLocal == true }

    @Test func aDownloadEvictsTheLeastRecentlyUsedFile() throws {
        let (dev, ids) = try device(["a", "b", "c", "d"], limitFiles: 3)
        for name in ["a", "b", "c", "a"] { try read(dev.container, ids[name]!) }
        #expect(dev.container.cacheStatus().used == Int64(3 * CacheTests.fileSize))
        try read(dev.container, ids["d"]!)
        #expect(!isLocal(dev, ids["b"]!))
        #expect(isLocal(dev, ids["a"]!) && isLocal(dev, ids["c"]!) && isLocal(dev, ids["d"]!))
        let status = dev.container.cacheStatus()
        #expect(status.used == Int64(3 * CacheTests.fileSize) && status.limit == Int64(3 * CacheTests.fileSize))
        #expect(status.evictedFiles == 1 && status.recent.map(\.path) == ["Documents/b"])
    }

    @Test func theOrderSurvivesARestart() throws {
        let dir = TempDir()
        _ = quietLogs
        var ids: [String] = []
        for i in 0..<3 { ids.append(remote.seed(path: "Documents/f\(i)", bytes: CacheTests.content(i), device: "o", mtime: 5).id) }
        var config = ContainerConfig(device: "a")
        config.cacheLimit = Int64(2 * CacheTests.fileSize)
        do {
            let c = try Container(store: try Store(directory: dir.path + "/store"), remote: remote, config: config)
            try c.start(initialSync: true)
            for id in [ids[1], ids[0]] { try read(c, id) }
            c.stop()
        }
        let c = try Container(store: try Store(directory: dir.path + "/store"), remote: remote, config: config)
        try c.start(initialSync: true)
        defer { c.stop() }
        #expect(c.cacheStatus().used == Int64(2 * CacheTests.fileSize))
        #expect(CacheAccount.leastRecentlyUsed(c.read { $0.cache.order }) == [ids[1], ids[0]])
    }

    @Test func pinnedDirtyAndOpenFilesAreNeverEvicted() throws {
        let link = Link(remote)
        let (dev, ids) = try device(["pinned", "open", "clean"], limitFiles: 3, link: link)
        try dev.container.setPinned(ids["pinned"]!, true)
        #expect(eventually { dev.container.item(ids["pinned"]!)?.isCurrent == true })
        try read(dev.container, ids["clean"]!)
        try read(dev.container, ids["open"]!)
        guard case .opened(let held) = try dev.container.open(ids["open"]!, writable: false, truncate: false) else {
            Issue.record("local content must open"); return
        }
        link.offline = true // the written file stays dirty
        let dirty = try dev.createFile("dirty", CacheTests.content(9))
        dev.container.evictIfNeeded()
        #expect(!isLocal(dev, ids["clean"]!))
        #expect(isLocal(dev, ids["pinned"]!) && isLocal(dev, ids["open"]!) && isLocal(dev, dirty.id))
        // Refused by the manual evict too (dirty, pinned) or only by the evictor (open for reading).
        let why = dev.container.mutate { (s: inout CoreState) in
            [ids["pinned"]!, ids["open"]!, dirty.id].map { s.autoEvictionRefusal(s.items[$0]!) }
        }
        #expect(why == ["pinned is pinned", "open is open", "dirty has changes not yet uploaded"])
        // Over the limit with nothing that may go: everything stays.
        let dirty2 = try dev.createFile("dirty2", CacheTests.content(10))
        dev.container.evictIfNeeded()
        #expect(isLocal(dev, ids["open"]!) && isLocal(dev, dirty2.id))
        held.close()
        dev.container.closed(ids["open"]!, writable: false)
        dev.container.evictIfNeeded()
        #expect(!isLocal(dev, ids["open"]!))
        #expect(isLocal(dev, ids["pinned"]!) && isLocal(dev, dirty.id) && isLocal(dev, dirty2.id))
    }

    @Test func aFileLargerThanTheLimitStillDownloadsAndGoesAfterItsLastClose() throws {
        let (dev, ids) = try device(["big"], limitFiles: 0)
        let id = ids["big"]!
        #expect(dev.fetch(id).map { (try? $0.get()) != nil } == true)
        guard case .opened(let fd) = try dev.container.open(id, writable: false, truncate: false) else {
            Issue.record("fetched content must open"); return
        }
        dev.container.evictIfNeeded()
        #expect(isLocal(dev, id))
        fd.close()
        dev.container.closed(id, writable: false)
        #expect(eventually { !isLocal(dev, id) })
    }
}
