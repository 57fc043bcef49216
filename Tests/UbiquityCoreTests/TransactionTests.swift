// One operation, one transaction: a store write that fails (here on a really full disk) leaves the index, the
// database and the content files as they were before the operation.
import Foundation
import Testing
@testable import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting
#if canImport(Glibc)
import Glibc
#endif

/// A small tmpfs mounted for one test (needs root, as the integration tests do), unmounted when released.
final class SmallDisk {
    let path: String
    private let dir = TempDir()

    init(megabytes: Int) throws {
        path = dir.path + "/disk"
        try makeDirectories(path)
        try SmallDisk.run("/bin/mount", "-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path)
    }

    deinit { try? SmallDisk.run("/bin/umount", "-l", path) }

    /// Fills the disk: writes a file until the disk refuses more.
    func fill(_ name: String) {
        guard let fd = try? FileDescriptor.open(path + "/" + name, O_WRONLY | O_CREAT | O_APPEND, mode: 0o600) else { return }
        defer { fd.close() }
        let block = [UInt8](repeating: 7, count: 4096)
        while block.withUnsafeBytes({ Glibc.write(fd.raw, $0.baseAddress, $0.count) }) > 0 {}
    }

    static func run(_ tool: String, _ args: String...) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = args
        try p.run()
        p.waitUntilExit()
        if p.terminationStatus != 0 { throw Errno(EIO) }
    }
}

@Suite struct TransactionTests {
    /// (The rename is a save by rename: its content files move before the commit, and back on its rollback.)
    @Test func aFullDiskDuringARenameOverAFileLeavesBothNames() throws {
        try #require(getuid() == 0, "mounting a small tmpfs needs root")
        let disk = try SmallDisk(megabytes: 8)
        let remote = Link(MemoryRemote())
        let dev = try Device(remote, name: "a", storeDirectory: disk.path + "/store")
        remote.offline = true // nothing but the rename writes to the store meanwhile
        let a = try dev.createFile("a.txt", bytes("the file that moves"))
        let b = try dev.createFile("b.txt", bytes("the file it would replace"))
        disk.fill("filler")
        // The store gives up its reserve on a full disk and tries once more: take that room too.
        try? removeFile(disk.path + "/store/reserve")
        disk.fill("filler2")

        #expect(throws: CoreError.noSpace) {
            try dev.container.rename(parent: dev.docs, name: "a.txt", newParent: dev.docs, newName: "b.txt",
                                     noReplace: false)
        }
        #expect(dev.lookup("a.txt")?.id == a.id)
        #expect(dev.lookup("b.txt")?.id == b.id)
        #expect(dev.content(b.id) == bytes("the file it would replace"))
        #expect(dev.content(a.id) == bytes("the file that moves"))
        // The database agrees with the index.
        let stored = try dev.container.storedItems().filter { !$0.deleted }
        #expect(stored.first { $0.id == a.id }?.name == "a.txt")
        #expect(stored.first { $0.id == b.id }?.name == "b.txt")

        // With room again the same rename goes through, as a save by rename (a.txt never went up): b.txt keeps
        // its id and takes a.txt's content.
        try removeFile(disk.path + "/filler")
        let saved = try dev.container.rename(parent: dev.docs, name: "a.txt", newParent: dev.docs, newName: "b.txt",
                                             noReplace: false)
        #expect(saved == SavedOver(new: a.id, kept: b.id))
        #expect(dev.lookup("b.txt")?.id == b.id && dev.lookup("a.txt") == nil)
        #expect(dev.content(b.id) == bytes("the file that moves"))
        #expect(try dev.container.checkStore(repair: false).isClean)
    }

    @Test func aProgramFillingTheDiskLeavesTheReserveToDeletes() throws {
        try #require(getuid() == 0, "mounting a small tmpfs needs root")
        let disk = try SmallDisk(megabytes: 8)
        let remote = Link(MemoryRemote())
        let dev = try Device(remote, name: "a", storeDirectory: disk.path + "/store")
        remote.offline = true // nothing can be uploaded, so no copy may be evicted for room
        var names: [String] = []
        var refusal: Error?
        while refusal == nil && names.count < 1000 {
            let name = "fill\(names.count)"
            do { _ = try dev.createFile(name, [UInt8](repeating: 1, count: 64 * 1024)) } catch { refusal = error }
            guard let made = dev.lookup(name) else { continue }
            names.append(name)
            if refusal != nil { dev.container.closed(made.id, writable: true) } // as the program's exit would
        }
        #expect(refusal != nil, "the disk filled")
        // The program's creates and records took what was free, not the reserve kept for what frees space.
        #expect(FileManager.default.fileExists(atPath: disk.path + "/store/reserve"))
        for name in names {
            try dev.container.remove(parent: dev.docs, name: name, directory: false)
        }
        #expect(dev.lookup(names[0]) == nil)
        _ = try dev.createFile("after.txt", bytes("room again"))
        #expect(dev.content(dev.lookup("after.txt")!.id) == bytes("room again"))
        let report = try dev.container.checkStore(repair: false)
        #expect(report.isClean, "\(report.problems)")
    }

    /// On a disk another program filled, evicting the copies that may go to make the store's reserve again
    /// is in vain when they cannot make it: they stay, readable (they were evicted, and then read EIO while
    /// the disk stayed full). Copies that can make it still go.
    @Test func copiesStayWhenEvictingThemCannotMakeRoomForTheReserve() throws {
        try #require(getuid() == 0, "mounting a small tmpfs needs root")
        let disk = try SmallDisk(megabytes: 8)
        let dev = try Device(MemoryRemote(), name: "a", storeDirectory: disk.path + "/store")
        let small = try dev.createFile("small.txt", bytes("a copy that is on the remote"))
        #expect(eventually { dev.pending == 0 })
        disk.fill("filler")
        try? removeFile(disk.path + "/store/reserve")
        disk.fill("filler2")
        dev.container.evictIfNeeded()
        #expect(dev.container.item(small.id)?.hasLocal == true)
        #expect(dev.content(small.id) == bytes("a copy that is on the remote"))

        try removeFile(disk.path + "/filler")
        try removeFile(disk.path + "/filler2")
        let big = try dev.createFile("big.bin", [UInt8](repeating: 9, count: 3 << 20))
        #expect(eventually { dev.pending == 0 })
        disk.fill("filler")
        try? removeFile(disk.path + "/store/reserve")
        disk.fill("filler2")
        dev.container.evictIfNeeded()
        #expect(dev.container.item(big.id)?.hasLocal == false)
        #expect(dev.container.read { $0.store.hasRoom }, "the reserve is back")
    }
}
