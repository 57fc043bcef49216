// What every RemoteClient promises (docs/WIRE.md), written once against `any RemoteClient` and run against
// each backend of `Backend.all`: conditional creates, updates and deletes with the current item on a
// refusal, blobs and their hash check, the change feed's pages and tokens, long polls, the key-value store,
// and the errors for unknown items. A test passes on the stub by definition of the wire; a backend that fails
// one is wrong, not the test.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore
#if canImport(Glibc)
import Glibc
#endif

// MARK: - helpers

func directory(_ id: String, in parent: String = WireRules.documentsID, name: String? = nil) -> WireItem {
    WireItem(id: id, parent: parent, name: name ?? id, kind: .dir, mode: 0o755, mtime: 1, size: 0, sha256: "")
}

func file(_ id: String, in parent: String = WireRules.documentsID, name: String? = nil, bytes: [UInt8] = [])
    -> WireItem {
    WireItem(id: id, parent: parent, name: name ?? id, kind: .file, mode: 0o644, mtime: 1,
             size: Int64(bytes.count), sha256: sha256Hex(bytes))
}

extension Subject {
    /// Uploads `bytes` as a blob; returns its SHA-256.
    @discardableResult
    func upload(_ bytes: [UInt8]) throws -> String {
        let path = dir + "/up-\(randomHex(bytes: 4))"
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let sha = sha256Hex(bytes)
        try remote.uploadBlob(sha256: sha, size: Int64(bytes.count), fromFile: path, progress: nil)
        return sha
    }

    /// The blob's bytes from `offset` on, as downloaded (through `client`, else this remote) into a fresh file
    /// positioned at `offset`.
    func download(_ sha: String, from offset: Int64 = 0, prefix: [UInt8] = [],
                  through client: (any RemoteClient)? = nil) throws -> [UInt8] {
        let path = dir + "/down-\(randomHex(bytes: 4))"
        _ = FileManager.default.createFile(atPath: path, contents: Data(prefix))
        let fd = try FileDescriptor.open(path, O_WRONLY)
        _ = lseek(fd.raw, off_t(offset), SEEK_SET)
        defer { fd.close() }
        try (client ?? remote).downloadBlob(sha256: sha, offset: offset, to: fd, progress: nil)
        return [UInt8](FileManager.default.contents(atPath: path) ?? Data())
    }

    /// Every answer of the feed from `token` on, following `more`.
    func feed(since token: String?) throws -> (pages: [WireChanges], token: String) {
        var pages: [WireChanges] = []
        var token = token
        repeat {
            let page = try remote.changes(since: token, waitSeconds: 0)
            pages.append(page)
            token = page.token
        } while pages.last!.more && pages.count < 100
        return (pages, token!)
    }
}

/// The error a call threw, or nil when it succeeded.
func failure<T>(_ body: () throws -> T) -> RemoteError? {
    do { _ = try body(); return nil } catch let e as RemoteError { return e } catch {
        Issue.record("not a RemoteError: \(error)")
        return nil
    }
}

// MARK: - the suite

@Suite(.serialized) struct RemoteConformanceTests {
    @Test(arguments: Backend.all) func openContainerHasRootAndDocuments(backend: Backend) throws {
        let s = try backend.make(nil)
        let c = try s.remote.openContainer()
        #expect(c.root == WireRules.rootID)
        let docs = try s.remote.item(WireRules.documentsID)
        #expect(docs.kind == .dir && docs.parent == WireRules.rootID && docs.name == "Documents" && !docs.deleted)
        #expect(try s.remote.openContainer().token == c.token, "opening again changes nothing")
    }

    @Test(arguments: Backend.all) func createAssignsAVersionAndASecondCreateIsRefused(backend: Backend) throws {
        let s = try backend.make(nil)
        let made = try s.remote.putItem(directory("d1"), ifMatch: nil)
        #expect(made.version > 0 && !made.deleted && made.parent == WireRules.documentsID && made.name == "d1")
        #expect(try s.remote.item("d1") == made)
        guard case .preconditionFailed(let current, _)? = failure({ try s.remote.putItem(directory("d1"), ifMatch: nil) })
        else { Issue.record("a second create must be refused with 412"); return }
        #expect(current == made)
    }

    @Test(arguments: Backend.all) func updateNeedsTheCurrentVersion(backend: Backend) throws {
        let s = try backend.make(nil)
        let v1 = try s.remote.putItem(directory("d1"), ifMatch: nil)
        var renamed = directory("d1", name: "renamed")
        let v2 = try s.remote.putItem(renamed, ifMatch: v1.version)
        #expect(v2.version > v1.version && v2.name == "renamed")
        renamed.name = "stale"
        guard case .preconditionFailed(let current, _)? = failure({ try s.remote.putItem(renamed, ifMatch: v1.version) })
        else { Issue.record("a write on an old version must be refused with 412"); return }
        #expect(current == v2, "the refusal carries the current item")
        #expect(try s.remote.item("d1") == v2, "a refused write changes nothing")
        #expect(failure({ try s.remote.putItem(directory("nobody"), ifMatch: 3) }).map(isNotFound) == true)
    }

    @Test(arguments: Backend.all) func deleteNeedsTheCurrentVersionAndLeavesATombstone(backend: Backend) throws {
        let s = try backend.make(nil)
        let v1 = try s.remote.putItem(directory("d1"), ifMatch: nil)
        let v2 = try s.remote.putItem(directory("d1", name: "e"), ifMatch: v1.version)
        guard case .preconditionFailed(let current, _)? = failure({ try s.remote.deleteItem("d1", ifMatch: v1.version) })
        else { Issue.record("a delete of an old version must be refused with 412"); return }
        #expect(current == v2)
        let tomb = try s.remote.deleteItem("d1", ifMatch: v2.version)
        #expect(tomb.deleted && tomb.version > v2.version && tomb.id == "d1")
        #expect(try s.remote.item("d1") == tomb, "a tombstone is still an item")
        guard case .preconditionFailed? = failure({ try s.remote.deleteItem("d1", ifMatch: tomb.version) }) else {
            Issue.record("deleting a tombstone must be refused with 412"); return
        }
        if case .rejected(let status, _)? = failure({ try s.remote.deleteItem(WireRules.rootID, ifMatch: 1) }) {
            #expect(status == 400)
        } else { Issue.record("deleting the root must be refused with 400") }
    }

    @Test(arguments: Backend.all) func writeOnATombstoneRevivesIt(backend: Backend) throws {
        let s = try backend.make(nil)
        let v1 = try s.remote.putItem(directory("d1"), ifMatch: nil)
        let tomb = try s.remote.deleteItem("d1", ifMatch: v1.version)
        let back = try s.remote.putItem(directory("d1"), ifMatch: tomb.version)
        #expect(!back.deleted && back.version > tomb.version)
        guard case .preconditionFailed(let current, _)? = failure({ try s.remote.putItem(directory("d1"), ifMatch: nil) })
        else { Issue.record("a create over a tombstone must be refused with 412"); return }
        #expect(current == back)
    }

    @Test(arguments: Backend.all) func directoryWithChildrenIsNotDeleted(backend: Backend) throws {
        let s = try backend.make(nil)
        let d = try s.remote.putItem(directory("d1"), ifMatch: nil)
        let child = try s.remote.putItem(directory("c1", in: "d1"), ifMatch: nil)
        guard case .conflict(_, let current)? = failure({ try s.remote.deleteItem("d1", ifMatch: d.version) }) else {
            Issue.record("deleting a directory with a live child must be refused with 409"); return
        }
        #expect(current == child, "the refusal carries the child in the way")
        _ = try s.remote.deleteItem("c1", ifMatch: child.version)
        #expect(try s.remote.deleteItem("d1", ifMatch: d.version).deleted)
    }

    @Test(arguments: Backend.all) func namesArePlacesOfOneLiveItem(backend: Backend) throws {
        let s = try backend.make(nil)
        let a = try s.remote.putItem(directory("a1", name: "same"), ifMatch: nil)
        guard case .conflict(_, let current)? = failure({ try s.remote.putItem(directory("b1", name: "same"), ifMatch: nil) })
        else { Issue.record("a taken name must be refused with 409"); return }
        #expect(current == a)
        // Names compare byte for byte: the decomposed form of "é" is another name.
        _ = try s.remote.putItem(directory("n1", name: "caf\u{e9}"), ifMatch: nil)
        #expect(try s.remote.putItem(directory("n2", name: "cafe\u{301}"), ifMatch: nil).name == "cafe\u{301}")
        // A deleted holder frees the name.
        _ = try s.remote.deleteItem("a1", ifMatch: a.version)
        #expect(try s.remote.putItem(directory("b1", name: "same"), ifMatch: nil).name == "same")
    }

    @Test(arguments: Backend.all) func parentMustBeALiveDirectoryNotBelowTheItem(backend: Backend) throws {
        let s = try backend.make(nil)
        let top = try s.remote.putItem(directory("top"), ifMatch: nil)
        _ = try s.remote.putItem(directory("low", in: "top"), ifMatch: nil)
        #expect(isMisplaced(failure({ try s.remote.putItem(directory("top", in: "low"), ifMatch: top.version) })))
        #expect(isMisplaced(failure({ try s.remote.putItem(directory("x1", in: "missing"), ifMatch: nil) })))
        let gone = try s.remote.putItem(directory("gone"), ifMatch: nil)
        _ = try s.remote.deleteItem("gone", ifMatch: gone.version)
        #expect(isMisplaced(failure({ try s.remote.putItem(directory("x2", in: "gone"), ifMatch: nil) })))
    }

    @Test(arguments: Backend.all) func malformedItemsAreRejected(backend: Backend) throws {
        let s = try backend.make(nil)
        let d = try s.remote.putItem(directory("d1"), ifMatch: nil)
        #expect(status(failure({ try s.remote.putItem(file("d1"), ifMatch: d.version) })) == 400, "no change of kind")
        #expect(status(failure({ try s.remote.putItem(directory("bad id!"), ifMatch: nil) })) == 400)
        #expect(status(failure({ try s.remote.putItem(directory("d2", name: ".."), ifMatch: nil) })) == 400)
        #expect(status(failure({ try s.remote.putItem(directory("d3", name: "a/b"), ifMatch: nil) })) == 400)
        var fifo = directory("f1")
        fifo.kind = .fifo
        #expect(status(failure({ try s.remote.putItem(fifo, ifMatch: nil) })) == 400)
    }

    @Test(arguments: Backend.all) func unknownItemsAndBlobsAreNotFound(backend: Backend) throws {
        let s = try backend.make(nil)
        #expect(isNotFound(failure({ try s.remote.item("nobody") })))
        #expect(isNotFound(failure({ try s.remote.deleteItem("nobody", ifMatch: 1) })))
        #expect(isNotFound(failure({ try s.download(sha256Hex(Array("never uploaded".utf8))) })))
        #expect(try s.remote.hasBlob(sha256: sha256Hex(Array("never uploaded".utf8))) == false)
    }
}

func isNotFound(_ e: RemoteError?) -> Bool { if case .notFound? = e { return true } else { return false } }
func isMisplaced(_ e: RemoteError?) -> Bool { if case .misplaced? = e { return true } else { return false } }
func status(_ e: RemoteError?) -> Int? { if case .rejected(let s, _)? = e { return s } else { return nil } }
