// What the pusher uploads is a copy of one moment of the content (Snapshots.swift): the bytes it hashes are the
// bytes it sends, whatever is written after the copy, and a sparse file's copy keeps its holes.
import Foundation
import Testing
import UbiquityBase
@_spi(Simulation) @testable import UbiquityCore
import UbiquityTesting

@Suite struct SnapshotTests {
    let remote = MemoryRemote()

    @Test func theUploadIsACopyThatLaterWritesDoNotReach() throws {
        let dev = try Device(remote, name: "a")
        let f = try dev.container.createFile(parent: dev.docs, name: "log", mode: 0o644)
        try dev.write(f.id, bytes("first"))
        let upload = try dev.container.contentForUpload(f.id)
        defer { upload.done() }
        #expect(upload.path != dev.container.contentPath(f.id))
        try dev.write(f.id, bytes("second, longer"))
        #expect(FileManager.default.contents(atPath: upload.path).map { [UInt8]($0) } == bytes("first"))
        #expect(upload.generation != nil)
    }

    @Test func aSparseFilesCopyKeepsItsHoles() throws {
        let dev = try Device(remote, name: "a")
        let f = try dev.container.createFile(parent: dev.docs, name: "sparse", mode: 0o644)
        guard case .opened(let fd) = try dev.container.open(f.id, writable: true, truncate: false) else {
            Issue.record("a new file opens"); return
        }
        let size: Int64 = 1 << 30
        try dev.container.willWrite(f.id)
        try fd.truncate(size)
        try bytes("data").withUnsafeBytes { try fd.writeAll($0, at: size / 2) }
        fd.close()
        try dev.container.flushed(f.id)
        dev.container.closed(f.id, writable: true)
        let upload = try dev.container.contentForUpload(f.id)
        defer { upload.done() }
        var st = stat()
        #expect(stat(upload.path, &st) == 0)
        #expect(Int64(st.st_size) == size)
        #expect(Int64(st.st_blocks) * 512 < 1 << 20, "a gigabyte of holes is not written out")
        let copy = try FileDescriptor.open(upload.path, O_RDONLY)
        defer { copy.close() }
        var buf = [UInt8](repeating: 0, count: 4)
        _ = try buf.withUnsafeMutableBytes { try copy.read(into: $0, at: size / 2) }
        #expect(buf == bytes("data"))
    }
}
