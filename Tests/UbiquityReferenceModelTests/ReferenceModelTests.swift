// The adapter against its reference model (ReferenceModel.swift): fresh random sequences, and the sequences it
// found, shrunk, kept as they are. `UBIQUITY_REFTEST_SEED` and `UBIQUITY_REFTEST_RUNS` run other seeds; a
// failure names its seed and prints its shrunk op-list, ready to be kept below.
import Foundation
import Testing
@testable import UbiquityFUSE
import UbiquityBase

@Suite(.serialized) struct ReferenceModelTests {
    init() { Log.shared.configure(level: .error, path: nil) }

    static func environment(_ name: String, _ fallback: UInt64) -> UInt64 {
        ProcessInfo.processInfo.environment[name].flatMap { UInt64($0) } ?? fallback
    }

    @Test func randomSequencesAgreeWithTheModel() {
        let first = Self.environment("UBIQUITY_REFTEST_SEED", 1)
        let runs = Self.environment("UBIQUITY_REFTEST_RUNS", 300)
        for seed in first..<(first + runs) {
            let ops = RefOp.sequence(seed: seed, count: 60)
            guard let v = RefRun.check(ops) else { continue }
            let shrunk = RefRun.shrink(ops, v)
            let again = RefRun.check(shrunk).map { "\($0)" } ?? "(passes alone)"
            Issue.record("seed \(seed): \(v)\nshrunk to \(again):\n[\(shrunk.map(\.description).joined(separator: ",\n "))]")
            return
        }
    }
}

/// Sequences the model found, shrunk; each names what was wrong before its fix.
@Suite(.serialized) struct ReferenceModelRegressions {
    init() { Log.shared.configure(level: .error, path: nil) }

    func expectAgrees(_ ops: [RefOp]) {
        if let v = RefRun.check(ops) { Issue.record("\(v)") }
    }

    /// Seed 25: a truncation to a non-zero size of a file whose newer version had arrived but was not
    /// downloaded cut the older local copy, and uploaded that over the other device's edit.
    @Test func aTruncationOfAStaleCopyTruncatesTheNewestVersion() {
        expectAgrees([.remoteWrite(name: 1, bytes: Array("cu".utf8)),
                      .open(p: 0, name: 1, .read),
                      .remoteWrite(name: 1, bytes: Array("jhh".utf8)),
                      .truncate(name: 1, size: 9)])
    }

    /// Part 13's "EIO while held open" and "failed O_TRUNC", as the model finds them with the fix taken out
    /// (`inodeHoldsAnotherContent` off: seed 46, shrunk): a file held open, evicted, opened again on the same
    /// inode, which now had handles on two content files (the kernel then fails a passthrough open with EIO
    /// after the daemon truncated, or serves the holder's stale pages).
    @Test func anOpenAfterAnEvictionWhileHeldGetsAnInodeOfItsOwn() {
        expectAgrees([.remoteWrite(name: 1, bytes: Array("epj".utf8)),
                      .open(p: 0, name: 1, .read),
                      .evict(name: 1),
                      .open(p: 0, name: 1, .read)])
        expectAgrees([.remoteWrite(name: 1, bytes: Array("epj".utf8)),
                      .open(p: 0, name: 1, .read),
                      .evict(name: 1),
                      .open(p: 1, name: 1, .truncate),
                      .read(p: 0, h: 0)])
    }

    /// The same with a newer version arriving instead of an eviction.
    @Test func anOpenAfterANewVersionWhileHeldGetsAnInodeOfItsOwn() {
        expectAgrees([.remoteWrite(name: 1, bytes: Array("old".utf8)),
                      .open(p: 0, name: 1, .read),
                      .remoteWrite(name: 1, bytes: Array("newer".utf8)),
                      .open(p: 1, name: 1, .readWrite),
                      .read(p: 0, h: 0),
                      .read(p: 1, h: 0)])
    }

    /// Seed 1001866 (fresh): offline, an open for writing of a file whose newer version had arrived but could not
    /// be downloaded got the older copy, and what was written to it was pushed over the newer version as its
    /// successor: the other device's edit was lost without a conflict. The older copy now opens to read only.
    @Test func anOlderCopyServedOfflineDoesNotOpenForWriting() {
        expectAgrees([.create(p: 1, name: 1),
                      .close(p: 1, h: 1),
                      .sync,
                      .remoteWrite(name: 1, bytes: Array("cwool".utf8)),
                      .network(up: false),
                      .open(p: 0, name: 1, .readWrite),
                      .open(p: 0, name: 1, .readWrite),
                      .write(p: 0, h: 0, offset: 0, bytes: Array("sxl".utf8))])
    }

    /// Seed 1001964 (fresh): `mkdir d; (sync); mkdir e; mv d e/d; mv e d`. The new folder needed the name its
    /// own content still held on the remote, whose move in turn waited for the new folder: the pusher gave the
    /// new folder a free name for good, and every device showed "d 2" for the "d" named here.
    @Test func aNewFolderThatTakesTheNameOfTheFolderMovedIntoItKeepsIt() {
        expectAgrees([.mkdir(dir: 0), .sync, .mkdir(dir: 1), .moveDir(from: 0, to: 3), .moveDir(from: 1, to: 0)])
    }

    /// Seed 2026120603 (fresh): offline, `mkdir e e/d; mv a e/d/a; touch a`. The new `a` waits for the old one
    /// to leave the name, whose move waits for `e/d`, which waits for `e`: the pusher pushed `e` first, found
    /// the name still held and gave the new file a free name for good: every device showed "a 2".
    @Test func aNewFileWhoseNameIsFreedByAMoveIntoNewFoldersKeepsIt() {
        expectAgrees([.remoteWrite(name: 0, bytes: Array("ltgtn".utf8)),
                      .network(up: false),
                      .mkdir(dir: 1),
                      .mkdir(dir: 3),
                      .rename(from: 0, to: 6),
                      .create(p: 0, name: 0)])
    }

    /// Seed 56201 (fresh): a file deleted here, a new one created under its name and lost unclosed with the
    /// daemon; the model forgot that the name still had the delete to push, and let the other device edit it.
    @Test func aNameWhoseNewFileWasLostInACrashStillHasItsDeleteToPush() {
        expectAgrees([.remoteWrite(name: 0, bytes: Array("lhdak".utf8)),
                      .unlink(name: 0),
                      .create(p: 1, name: 0),
                      .restart,
                      .remoteWrite(name: 0, bytes: Array("hqzjaq".utf8))])
    }

    /// Seed 11362, after the model took conflicts and attributes: a version from elsewhere that only adds bytes at
    /// the end of a copy held open for reading is appended in place, so the holder reads the new bytes (the
    /// model had given the holder the content it opened; the product is right, `tail -F` needs it).
    @Test func aNewVersionThatOnlyAppendsReachesAReaderInPlace() {
        expectAgrees([.create(p: 0, name: 1),
                      .close(p: 0, h: 2),
                      .sync,
                      .open(p: 1, name: 1, .read),
                      .remoteWrite(name: 1, bytes: Array("hjbgz".utf8)),
                      .open(p: 0, name: 1, .readWrite),
                      .read(p: 1, h: 0)])
    }

    /// Both devices write a file while they miss each other, then the conflict version is made current or
    /// discarded: one version wins on both devices, the other is listed under `.versions` until resolved.
    @Test func aConflictIsKeptAsAVersionAndResolvedByMvOrRm() {
        for promote in [true, false] {
            expectAgrees([.remoteWrite(name: 0, bytes: Array("one".utf8)),
                          .setXattr(name: 0, key: 0, value: Array("x".utf8)),
                          .conflict(name: 0, here: Array("here".utf8), there: Array("there".utf8)),
                          .status(name: 0),
                          .xattrs(name: 0),
                          .resolve(name: 0, promote: promote),
                          .status(name: 0),
                          .sync])
        }
    }

    /// Seed 10102645 (a fault of the model's, not the adapter's): an open that waited for its content ran the
    /// other downloads asked for too, among them the new version of a file held open for reading, which only
    /// appended and so reached its reader in place; the model took it only at the next sync.
    @Test func aWaitForOneFileInstallsWhatOthersWaitedForToo() {
        expectAgrees([.create(p: 1, name: 1),
                      .close(p: 1, h: 1),
                      .sync,
                      .open(p: 1, name: 1, .read),
                      .remoteWrite(name: 1, bytes: Array("te".utf8)),
                      .remoteWrite(name: 0, bytes: Array("vwbiip".utf8)),
                      .open(p: 0, name: 0, .readWrite),
                      .read(p: 1, h: 1)])
    }

    /// The key-value store as `.kvstore`: a key written, read as text and as typed JSON, listed in both
    /// folders, written over, removed (again: ENOENT), and a key one byte too long refused (ENAMETOOLONG);
    /// through a restart, whose store keeps every value.
    @Test func theKeyValueFolderAgreesWithTheModel() {
        expectAgrees([.kvWrite(key: 0, bytes: Array("one".utf8)),
                      .kvRead(key: 0),
                      .kvWrite(key: 1, bytes: Array("two".utf8)),
                      .kvWrite(key: 0, bytes: Array("three".utf8)),
                      .kvWrite(key: 2, bytes: Array("long".utf8)),
                      .kvRead(key: 2),
                      .kvRemove(key: 2),
                      .restart,
                      .kvRead(key: 0),
                      .kvRemove(key: 1),
                      .kvRemove(key: 1),
                      .kvRead(key: 1)])
    }

    /// CI, seed 141: a restart found the store "in use by another daemon". Remote changes started the announcer
    /// (Watchers.swift) on an adapter that was never mounted: its thread held the adapter, and so the container
    /// and its store's lock, past the crash; and it repeated each change on a path below "" (the root of this
    /// machine's own file system: `mkdir /d`). Unmounted, nothing is repeated.
    @Test func anAdapterNotMountedRepeatsNoChangeElsewhere() throws {
        let run = try RefRun()
        try run.run([.remoteWrite(name: 1, bytes: Array("ab".utf8)), .remoteMoveDir(from: 0, to: 1), .sync])
        run.a.fs.notifier.sync {}
        #expect(!run.a.fs.announcer.isRunning)
    }
}
