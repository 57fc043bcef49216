// The store: items, the pending journal, meta, the lock and staging, each across a reopen.
import Foundation
import Testing
import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting

@Suite struct StoreTests {
    let dir = TempDir()
    var path: String { dir.path + "/store" }

    func sample(_ id: String) -> Item {
        Item(id: id, parent: "documents", name: "notes \(id).txt", kind: .file, mode: 0o640, mtime: 1_700_000_000_123,
             ctime: 1_700_000_001_456, size: 42, remoteVersion: 0, remoteSHA: emptySHA256, remoteSize: 0,
             device: "laptop", hasLocal: true, localSHA: nil, dirty: true, metaDirty: true, deleted: false,
             pinned: false, xattrs: [:], conflicts: [])
    }

    /// An operation takes the database's write lock at its first write, not at its start: one that writes
    /// nothing (a close, a flush of what is recorded already) leaves the key-value store's connection free.
    @Test func anOperationTakesTheWriteLockAtItsFirstWrite() throws {
        let store = try Store(directory: path)
        let other = try Database(path: path + "/state.sqlite")
        try other.exec("PRAGMA busy_timeout=0")
        store.begin()
        try other.exec("BEGIN IMMEDIATE; COMMIT")
        try store.commit()

        store.begin()
        try store.save(sample("f1"))
        #expect(throws: SQLiteError.self) { try other.exec("BEGIN IMMEDIATE") }
        try store.commit()
        try other.exec("BEGIN IMMEDIATE; COMMIT")
        #expect(try store.loadItems().map(\.id) == ["f1"])

        store.begin()
        try store.save(sample("f2"))
        store.rollBack()
        try other.exec("BEGIN IMMEDIATE; COMMIT")
        #expect(try store.loadItems().map(\.id) == ["f1"])
    }

    @Test func itemRoundTripKeepsEveryField() throws {
        let file = Item(id: "f1", parent: "documents", name: "résumé ☃.txt", kind: .file, mode: 0o640,
                        mtime: 1_764_531_730_000_000_001, ctime: 1_764_531_730_000_000_002, size: 12,
                        remoteVersion: 17, remoteSHA: sha256Hex(bytes("hello world\n")), remoteSize: 12,
                        device: "laptop", hasLocal: true, localSHA: "abc", dirty: true, metaDirty: true,
                        deleted: false, pinned: true, xattrs: ["user.color": [0, 1, 0xff], "user.x": []],
                        conflicts: [WireConflict(id: "c1", sha256: emptySHA256, size: 0, mtime: 5, device: "phone")],
                        atime: 1_764_531_730_000_000_003, entriesMTime: 1_764_531_730_000_000_004)
        let tomb = Item(id: "d1", parent: nil, name: "dir", kind: .dir, mode: 0o7755, mtime: -1, ctime: 0, size: 0,
                        remoteVersion: 3, remoteSHA: "", remoteSize: 0, device: "", hasLocal: false, localSHA: nil,
                        dirty: false, metaDirty: false, deleted: true, pinned: false, xattrs: [:], conflicts: [])
        do {
            let store = try Store(directory: path)
            try store.save(file)
            try store.save(tomb)
        }
        let store = try Store(directory: path)
        let loaded = Dictionary(uniqueKeysWithValues: try store.loadItems().map { ($0.id, $0) })
        #expect(loaded["f1"] == file)
        #expect(loaded["d1"] == tomb)
        #expect(loaded.count == 2)
    }

    @Test func pendingJournalKeepsOrder() throws {
        do {
            let store = try Store(directory: path)
            for id in ["a", "b", "c"] { try store.saveChanged(sample(id)) }
            #expect(try store.pendingIDs() == ["a", "b", "c"])
            try store.saveChanged(sample("a"))
            #expect(try store.pendingIDs() == ["b", "c", "a"])
            // A plain save of an item with nothing to push leaves the journal; a pending one keeps its place.
            var clean = sample("b"); clean.dirty = false; clean.metaDirty = false
            try store.save(clean)
            try store.save(sample("c"))
            #expect(try store.pendingIDs() == ["c", "a"])
            try store.delete("c")
            #expect(try store.pendingIDs() == ["a"])
            #expect(try store.loadItems().map(\.id).sorted() == ["a", "b"])
        }
        let store = try Store(directory: path)
        try store.saveChanged(sample("d"))
        try store.saveChanged(sample("e"))
        #expect(try store.pendingIDs() == ["a", "d", "e"])
    }

    @Test func metaPersists() throws {
        do {
            let store = try Store(directory: path)
            #expect(try store.meta("token") == nil)
            try store.setMeta("token", "7")
            try store.setMeta("token", "12")
            try store.setMeta("device", "laptop")
            #expect(try store.meta("token") == "12")
        }
        let store = try Store(directory: path)
        #expect(try store.meta("token") == "12")
        #expect(try store.meta("device") == "laptop")
    }

    @Test func lockRefusesASecondStore() throws {
        do {
            let first = try Store(directory: path)
            #expect(throws: StoreError.inUse(directory: path)) { _ = try Store(directory: path) }
            withExtendedLifetime(first) {}
        }
        _ = try Store(directory: path) // released with the first
    }

    @Test func stagingIsEmptiedAtOpen() throws {
        do {
            let store = try Store(directory: path)
            #expect(FileManager.default.createFile(atPath: store.stagingDirectory + "/x-partial", contents: Data([1, 2])))
            #expect(FileManager.default.createFile(atPath: store.contentPath("kept"), contents: Data([3])))
        }
        let store = try Store(directory: path)
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.stagingDirectory).isEmpty)
        #expect(FileManager.default.fileExists(atPath: store.contentPath("kept")))
    }

    /// A store made with the first schema (before links, atime, the entry change time and owners): it opens, its
    /// items read as before (no target, atime as mtime, the mounting user's), and the new fields are kept from
    /// then on.
    @Test func storeWithTheFirstSchemaOpensAndKeepsTheNewFields() throws {
        try makeDirectories(path)
        do {
            let db = try Database(path: path + "/state.sqlite")
            try db.exec("""
            CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE items(
              id TEXT PRIMARY KEY, parent TEXT, name TEXT NOT NULL, kind TEXT NOT NULL, mode INTEGER NOT NULL,
              mtime INTEGER NOT NULL, ctime INTEGER NOT NULL, size INTEGER NOT NULL,
              remote_version INTEGER NOT NULL, remote_sha TEXT NOT NULL, remote_size INTEGER NOT NULL,
              device TEXT NOT NULL, has_local INTEGER NOT NULL, local_sha TEXT, dirty INTEGER NOT NULL,
              meta_dirty INTEGER NOT NULL, deleted INTEGER NOT NULL, pinned INTEGER NOT NULL,
              xattrs TEXT NOT NULL, conflicts TEXT NOT NULL);
            CREATE TABLE pending(id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
            INSERT INTO items VALUES('old', 'documents', 'old.txt', 'file', 420, 7000, 7001, 3, 2, 'abc', 3,
              'laptop', 0, NULL, 0, 0, 0, 0, '{}', '[]');
            """)
        }
        do {
            let store = try Store(directory: path)
            var old = try #require(try store.loadItems().first)
            #expect(old.id == "old" && old.mtime == 7000 && old.atime == nil && old.entriesMTime == 0)
            #expect(old.shownATime == 7000)
            #expect(old.target == nil && old.owner == nil)
            old.atime = 5000
            old.owner = Owner(uid: 1234, gid: 5678)
            old.entriesMTime = 9000
            try store.save(old)
            var link = old
            link.id = "l1"; link.kind = .symlink; link.target = "../t"
            try store.save(link)
        }
        let items = try Store(directory: path).loadItems()
        let old = try #require(items.first { $0.id == "old" })
        #expect(old.atime == 5000 && old.shownATime == 5000)
        #expect(old.entriesMTime == 9000 && old.shownMTime == 9000)
        #expect(old.owner == Owner(uid: 1234, gid: 5678))
        #expect(items.first { $0.id == "l1" }?.owner == Owner(uid: 1234, gid: 5678))
        #expect(items.first { $0.id == "l1" }?.target == "../t")
    }

    // MARK: failures keep their cause

    /// Changes the database behind an open store's back, through a second connection.
    func tamper(_ sql: String) throws { try Database(path: path + "/state.sqlite").exec(sql) }

    /// A store made before chunk places were recorded (no `chunk_places` table) opens, keeps its items, and
    /// records where chunks lie from then on.
    @Test func aStoreFromBeforeChunkPlacesOpensAndRecordsThem() throws {
        do {
            let store = try Store(directory: path)
            try store.save(sample("f1"))
        }
        try tamper("DROP TABLE chunk_places")
        let store = try Store(directory: path)
        #expect(try store.loadItems().map(\.id) == ["f1"])
        #expect(try store.chunkPlaces(String(repeating: "a", count: 64)).isEmpty)
        try store.placeChunks(of: "f1", [Chunk(offset: 0, size: 10, sha256: String(repeating: "a", count: 64)),
                                         Chunk(offset: 10, size: 5, sha256: nil)])
        let places = try store.chunkPlaces(String(repeating: "a", count: 64))
        #expect(places.count == 1 && places.first?.id == "f1" && places.first?.size == 10)
    }

    @Test func corruptXattrsMakeLoadThrowNotLoadEmpty() throws {
        let store = try Store(directory: path)
        var item = sample("f1"); item.xattrs = ["user.color": [1, 2]]
        try store.save(item)
        try tamper("UPDATE items SET xattrs = '{not json' WHERE id = 'f1'")
        #expect {
            _ = try store.loadItems()
        } throws: { error in
            guard case StoreError.badValue(let id, let column, _) = error else { return false }
            return id == "f1" && column == "xattrs"
        }
    }

    @Test func xattrValueNotBase64MakesLoadThrow() throws {
        let store = try Store(directory: path)
        try store.save(sample("f1"))
        try tamper(#"UPDATE items SET xattrs = '{"user.x":"%%%"}' WHERE id = 'f1'"#)
        #expect {
            _ = try store.loadItems()
        } throws: { error in
            guard case StoreError.badValue("f1", "xattrs", _) = error else { return false }
            return true
        }
    }

    @Test func corruptConflictsMakeLoadThrowNotLoadEmpty() throws {
        let store = try Store(directory: path)
        try store.save(sample("f1"))
        try tamper("UPDATE items SET conflicts = '[{\"id\": 3' WHERE id = 'f1'")
        #expect {
            _ = try store.loadItems()
        } throws: { error in
            guard case StoreError.badValue("f1", "conflicts", _) = error else { return false }
            return true
        }
    }

    @Test func failingMetaReadThrowsNotNil() throws {
        let store = try Store(directory: path)
        try store.setMeta("token", "12")
        try store.markCreateSent("f1", "{}")
        try tamper("DROP TABLE meta")
        #expect(throws: StoreError.self) { _ = try store.meta("token") }
        #expect(throws: StoreError.self) { _ = try store.createWasSent("f1") }
        #expect(throws: StoreError.self) { _ = try store.leftRemoteBase("f1") }
    }

    @Test func containerFreshnessThrowsWhenTheTokenCannotBeRead() throws {
        let c = try Container(store: try Store(directory: path), remote: MemoryRemote(), config: ContainerConfig(device: "a"))
        try c.mutateThrowing { s in try s.store.setMeta("token", "12") }
        #expect(try c.isFresh == false)
        try tamper("DROP TABLE meta")
        // Before: a failed read looked like a store that never synced, and a mount without the remote refused.
        #expect(throws: StoreError.self) { _ = try c.isFresh }
    }

    @Test func databaseErrorsHaveTypedCases() {
        // SQLite's primary codes: 5 busy, 13 full (and its extended codes), 11 corrupt, 26 not a database,
        // 19 constraint, 10 I/O.
        #expect(StoreError(SQLiteError(code: 5, message: "")) == .busy(SQLiteError(code: 5, message: "")))
        #expect(StoreError(SQLiteError(code: 13, message: "")) == .full(SQLiteError(code: 13, message: "")))
        #expect(StoreError(SQLiteError(code: 11, message: "")) == .corrupt(SQLiteError(code: 11, message: "")))
        #expect(StoreError(SQLiteError(code: 26, message: "")) == .corrupt(SQLiteError(code: 26, message: "")))
        #expect(StoreError(SQLiteError(code: 19 | 8 << 8, message: "")) == .constraint(SQLiteError(code: 19 | 8 << 8, message: "")))
        #expect(StoreError(SQLiteError(code: 10 | 3 << 8, message: "")) == .io(SQLiteError(code: 10 | 3 << 8, message: "")))
    }

    @Test func coreErrorKeepsTheCauseAndAFullDiskStaysNoSpace() {
        let corrupt = StoreError.corrupt(SQLiteError(code: 11, message: "malformed"))
        #expect(CoreError(corrupt) == .store(corrupt))
        #expect(CoreError(StoreError(SQLiteError(code: 11, message: "malformed"))) == .store(corrupt))
        #expect(CoreError(StoreError.full(SQLiteError(code: 13, message: ""))) == .noSpace)
        #expect(CoreError(StoreError(SQLiteError(code: 13, message: "database or disk is full"))) == .noSpace)
        #expect(CoreError(Errno.noSpace) == .noSpace)
        #expect(CoreError(Errno.accessDenied) == .system(.accessDenied))
        #expect(CoreError(RemoteError.unreachable("down")) == .remote(.unreachable("down")))
        #expect(CoreError(corrupt).description.contains("malformed"))
    }

    /// A delete removes the partial downloads of its item; it lists the staging folder only when a download was
    /// staged since the folder was last found empty (not at every `rm`).
    @Test func staleStagingIsLookedForOnlyAfterADownloadWasStaged() throws {
        let store = try Store(directory: path)
        let paths = store.paths
        func plant(_ name: String) -> String {
            let file = paths.staging + "/" + name
            FileManager.default.createFile(atPath: file, contents: Data("part".utf8))
            return file
        }
        paths.removeStaleStaging("a") // finds the folder empty
        let unannounced = plant("a-0123456789abcdef")
        paths.removeStaleStaging("a")
        #expect(FileManager.default.fileExists(atPath: unannounced)) // no download staged since: not looked for
        paths.staged.add()
        let partial = plant("b-0123456789abcdef"), conflict = plant("b.c1-0123456789abcdef"), other = plant("c-0123")
        paths.removeStaleStaging("b")
        #expect(!FileManager.default.fileExists(atPath: partial) && !FileManager.default.fileExists(atPath: conflict))
        #expect(FileManager.default.fileExists(atPath: other))
    }
}
