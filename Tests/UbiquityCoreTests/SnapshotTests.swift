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

    /// A small file's bytes read for a batch and the content generation given with them are of one moment: a
    /// truncate that came between the two made the old bytes look current (the generation was the truncate's),
    /// so the push of the old bytes marked the file clean, and the next eviction and download lost the
    /// truncate (test_randomized_content_race_matches_model: a file back at its size before a truncate).
    @Test func aSmallFilesBytesAndGenerationAreOfOneMoment() throws {
        let between = Box<(@Sendable (String) -> Void)?>(nil)
        let dev = try Device(remote, name: "a") { config in
            config.environment.afterUploadRead = { id in between.value?(id) }
        }
        let f = try dev.createFile("small.txt", bytes("the content before the truncate"))
        #expect(eventually { dev.pending == 0 })
        try dev.write(f.id, bytes("changed: the content the truncate cuts"))
        let truncated = Box(false)
        between.value = { [container = dev.container] id in
            guard id == f.id, !truncated.value else { return }
            truncated.value = true
            // The truncate, on another thread, as a program's comes: it waits for the read if the read holds
            // the file (half a second at most here).
            let done = DispatchSemaphore(value: 0)
            DispatchQueue.global().async { _ = try? container.truncate(f.id, to: 7); done.signal() }
            _ = done.wait(timeout: .now() + 0.5)
        }
        defer { between.value = nil }
        let read = try #require(try dev.container.smallContentForUpload(f.id, limit: 1 << 20))
        #expect(eventually { dev.content(f.id) == bytes("changed") }, "the truncate went through")
        let now = dev.container.read { $0.contentGeneration[f.id] ?? 0 }
        #expect(read.generation != now || read.bytes == bytes("changed"),
                "bytes \(String(decoding: read.bytes, as: UTF8.self)) given as of the content's generation now")
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
