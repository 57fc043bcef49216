// Rewind (docs/HISTORY.md "Rewind"), run against each backend of `Backend.all`: a folder whose files were
// overwritten with garbage comes back, each file as a new version; a deleted subfolder comes back; renames, a
// swap and a rotation are undone; what was created since goes to Recently Deleted and what was moved in goes back
// out (numbered when its old name is taken there, with what is in it now); a name held by what leaves is freed
// first; folders nested the other way round go back; modes and xattrs go back; a dry run changes nothing and lists
// what the real run then does; a rewind can itself be rewound; bad input is refused with one plain line and
// changes nothing.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore

private let second = HistoryRules.second

extension Subject {
    /// A time strictly between what was done before and what is done after (the clock moves on around it).
    func moment() -> Int64 {
        clock.advance(second)
        let now = clock.now()
        clock.advance(second)
        return now
    }

    /// Writes `text` over the file as a new version.
    @discardableResult
    func overwrite(_ item: WireItem, with text: String) throws -> WireItem {
        try upload(Array(text.utf8))
        var next = item
        next.sha256 = sha256Hex(Array(text.utf8))
        next.size = Int64(text.utf8.count)
        next.device = "phone"
        return try remote.putItem(next, ifMatch: item.version)
    }

    /// Moves or renames the item as it is now.
    @discardableResult
    func move(_ id: String, to parent: String, name: String) throws -> WireItem {
        var item = try remote.item(id)
        item.parent = parent
        item.name = name
        return try remote.putItem(item, ifMatch: item.version)
    }

    /// The file's content as the remote holds it now.
    func text(_ id: String) throws -> String {
        String(decoding: try download(try remote.item(id).sha256), as: UTF8.self)
    }

    func rewind(_ folder: String, to: Int64, dryRun: Bool = false) throws -> [WireRewindChange] {
        try remote.rewind(folder: folder, to: to, dryRun: dryRun, device: "laptop")
    }

    /// The feed's position now.
    func position() throws -> String { try remote.changes(since: nil, waitSeconds: 0).token }
}

/// The changes by id: what each is and its path.
private func byID(_ changes: [WireRewindChange]) -> [String: WireRewindChange] {
    Dictionary(changes.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
}

@Suite(.serialized) struct RewindConformanceTests {
    @Test(arguments: Backend.all) func aFolderOverwrittenWithGarbageComesBack(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        let ids = (0..<100).map { "p\($0)" }
        var files = try ids.map { try s.makeFile($0, "the original text of \($0)", in: "f1", name: "\($0).txt") }
        let to = s.moment()
        files = try files.map { try s.overwrite($0, with: "garbage \(randomHex(bytes: 8))") }
        let token = try s.position()
        let changes = try s.rewind("f1", to: to)
        #expect(changes.count == 100 && changes.allSatisfy { $0.what == .content })
        #expect(Set(changes.map(\.id)) == Set(ids))
        #expect(byID(changes)["p7"]?.path == "Documents/project/p7.txt")
        for (id, garbage) in zip(ids, files) {
            let now = try s.remote.item(id)
            #expect(try s.text(id) == "the original text of \(id)")
            #expect(now.version > garbage.version && now.device == "laptop" && !now.deleted)
            #expect(try s.remote.history(id: id).count == 3, "the rewind is a version of its own")
        }
        let fed = try s.feed(since: token).pages.flatMap(\.items)
        #expect(Set(fed.map(\.id)) == Set(ids), "each file reaches the feed as a new version")
    }

    @Test(arguments: Backend.all) func aDeletedSubfolderComesBack(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        let sub = try s.remote.putItem(directory("g1", in: "f1", name: "src"), ifMatch: nil)
        let a = try s.makeFile("a1", "alpha", in: "g1", name: "a.txt")
        let b = try s.makeFile("b1", "beta", in: "g1", name: "b.txt")
        let to = s.moment()
        try s.delete(a); try s.delete(b); try s.delete(sub)
        let changes = try s.rewind("f1", to: to)
        #expect(changes.map(\.id) == ["g1", "a1", "b1"], "the folder first")
        #expect(changes.allSatisfy { $0.what == .restore })
        #expect(changes.map(\.path) == ["Documents/project/src", "Documents/project/src/a.txt", "Documents/project/src/b.txt"])
        #expect(try !s.remote.item("g1").deleted && s.remote.item("g1").parent == "f1")
        #expect(try s.remote.item("a1").parent == "g1" && s.text("a1") == "alpha" && s.text("b1") == "beta")
        #expect(try s.trashIDs().isEmpty)
    }

    @Test(arguments: Backend.all) func renamesASwapAndARotationAreUndone(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        for (id, name) in [("x1", "x.txt"), ("y1", "y.txt"), ("r1", "r.txt"), ("a1", "a"), ("b1", "b"), ("c1", "c")] {
            try s.makeFile(id, "text of \(id)", in: "f1", name: name)
        }
        _ = try s.remote.putItem(directory("d1", in: "f1", name: "inner"), ifMatch: nil)
        let to = s.moment()
        try s.move("r1", to: "d1", name: "renamed.txt") // renamed and moved
        try s.move("x1", to: "f1", name: "swap"); try s.move("y1", to: "f1", name: "x.txt"); try s.move("x1", to: "f1", name: "y.txt")
        try s.move("a1", to: "f1", name: "t"); try s.move("c1", to: "f1", name: "a"); try s.move("b1", to: "f1", name: "c")
        try s.move("a1", to: "f1", name: "b")
        let changes = try s.rewind("f1", to: to)
        #expect(Set(changes.map(\.id)) == ["x1", "y1", "r1", "a1", "b1", "c1"] && changes.allSatisfy { $0.what == .move })
        for (id, name) in [("x1", "x.txt"), ("y1", "y.txt"), ("r1", "r.txt"), ("a1", "a"), ("b1", "b"), ("c1", "c")] {
            let item = try s.remote.item(id)
            #expect(item.parent == "f1" && item.name == name, "\(id) is \(item.name)")
            #expect(byID(changes)[id]?.path == "Documents/project/\(name)")
        }
        #expect(try s.text("x1") == "text of x1" && s.text("y1") == "text of y1")
    }

    @Test(arguments: Backend.all) func whatCameInSinceGoesOut(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        _ = try s.remote.putItem(directory("o1", name: "other"), ifMatch: nil)
        try s.makeFile("m1", "moved in", in: "o1", name: "m.txt")
        try s.makeFile("k1", "kept", in: "f1", name: "k.txt")
        let to = s.moment()
        try s.makeFile("n1", "created since", in: "f1", name: "n.txt")
        _ = try s.remote.putItem(directory("e1", in: "f1", name: "new folder"), ifMatch: nil)
        try s.makeFile("e2", "created since, in a new folder", in: "e1", name: "deep.txt")
        try s.move("m1", to: "f1", name: "m.txt")
        try s.makeFile("h1", "holds the old name", in: "o1", name: "m.txt")
        let changes = try s.rewind("f1", to: to)
        let by = byID(changes)
        #expect(Set(changes.map(\.id)) == ["n1", "e1", "e2", "m1"])
        #expect(by["m1"]?.what == .move && by["m1"]?.path == "Documents/other/m 2.txt", "numbered: its name is taken")
        #expect(by["n1"]?.what == .delete && by["n1"]?.path == "Documents/project/n.txt", "a delete's path before")
        #expect(by["e2"]?.what == .delete && by["e1"]?.what == .delete)
        #expect(changes.firstIndex { $0.id == "e2" }! < changes.firstIndex { $0.id == "e1" }!, "children deleted first")
        #expect(Set(try s.trashIDs()) == ["n1", "e1", "e2"], "to Recently Deleted")
        let m = try s.remote.item("m1")
        #expect(m.parent == "o1" && m.name == "m 2.txt" && !m.deleted)
        #expect(try s.remote.item("h1").name == "m.txt" && !s.remote.item("k1").deleted)
    }

    @Test(arguments: Backend.all) func namesHeldByWhatLeavesAreFreedFirst(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        let a = try s.makeFile("a1", "the old a", in: "f1", name: "a.txt")
        try s.makeFile("c1", "the data", in: "f1", name: "data")
        let to = s.moment()
        try s.delete(a)
        try s.makeFile("n1", "a new a", in: "f1", name: "a.txt")
        _ = try s.remote.putItem(directory("x1", name: "tmp"), ifMatch: nil)
        try s.move("x1", to: "f1", name: "tmp")
        try s.move("c1", to: "x1", name: "data")
        try s.move("x1", to: "f1", name: "data") // a new folder now holds the file's old name, and the file
        let changes = try s.rewind("f1", to: to)
        #expect(byID(changes).mapValues(\.what) == ["a1": .restore, "c1": .move, "n1": .delete, "x1": .delete])
        #expect(try s.remote.item("a1").name == "a.txt" && s.remote.item("a1").parent == "f1", "not numbered")
        #expect(try s.remote.item("c1").name == "data" && s.remote.item("c1").parent == "f1")
        #expect(try s.remote.item("x1").deleted && s.remote.item("n1").deleted)
    }

    @Test(arguments: Backend.all) func foldersNestedTheOtherWayRoundGoBack(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        _ = try s.remote.putItem(directory("b1", in: "f1", name: "B"), ifMatch: nil)
        _ = try s.remote.putItem(directory("a1", in: "b1", name: "A"), ifMatch: nil)
        try s.makeFile("t1", "text", in: "a1", name: "t.txt")
        let to = s.moment()
        try s.move("a1", to: "f1", name: "A")
        try s.move("b1", to: "a1", name: "B")
        let changes = try s.rewind("f1", to: to)
        #expect(Set(changes.map(\.id)) == ["a1", "b1"])
        #expect(byID(changes)["a1"]?.path == "Documents/project/B/A")
        #expect(try s.remote.item("b1").parent == "f1" && s.remote.item("a1").parent == "b1")
        #expect(try s.remote.item("t1").parent == "a1")
    }

    @Test(arguments: Backend.all) func aFolderMovedInGoesBackOutWithWhatIsInItNow(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        _ = try s.remote.putItem(directory("o1", name: "other"), ifMatch: nil)
        _ = try s.remote.putItem(directory("x1", in: "o1", name: "X"), ifMatch: nil)
        try s.makeFile("k1", "was in X", in: "x1", name: "old.txt")
        try s.makeFile("s1", "was in the project", in: "f1", name: "s.txt")
        try s.makeFile("u1", "was in the project, is out", in: "f1", name: "u.txt")
        let to = s.moment()
        try s.move("x1", to: "f1", name: "X")
        try s.makeFile("w1", "written in X since", in: "x1", name: "new.txt")
        try s.move("s1", to: "x1", name: "s.txt")
        try s.move("u1", to: "o1", name: "u.txt")
        let changes = try s.rewind("f1", to: to)
        #expect(byID(changes).mapValues(\.what) == ["x1": .move, "s1": .move, "u1": .move])
        #expect(byID(changes)["x1"]?.path == "Documents/other/X" && byID(changes)["u1"]?.path == "Documents/project/u.txt")
        #expect(try s.remote.item("x1").parent == "o1" && s.remote.item("w1").parent == "x1", "it goes with what is in it")
        #expect(try s.remote.item("s1").parent == "f1" && s.remote.item("u1").parent == "f1")
        #expect(try s.trashIDs().isEmpty)
    }

    @Test(arguments: Backend.all) func modesAndXattrsGoBack(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        var made = try s.makeFile("a1", "some text", in: "f1", name: "a.txt")
        made.xattrs = ["user.colour": Data("blue".utf8).base64EncodedString()]
        made = try s.remote.putItem(made, ifMatch: made.version)
        let to = s.moment()
        var changed = made
        changed.mode = 0o600
        changed.xattrs = ["user.colour": Data("red".utf8).base64EncodedString(), "user.more": ""]
        _ = try s.remote.putItem(changed, ifMatch: made.version)
        let changes = try s.rewind("f1", to: to)
        #expect(changes == [WireRewindChange(id: "a1", path: "Documents/project/a.txt", what: .metadata)])
        let back = try s.remote.item("a1")
        #expect(back.mode == made.mode && back.xattrs == made.xattrs && back.sha256 == made.sha256)
    }

    @Test(arguments: Backend.all) func aDryRunChangesNothingAndListsWhatTheRunDoes(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        let a = try s.makeFile("a1", "alpha", in: "f1", name: "a.txt")
        let b = try s.makeFile("b1", "beta", in: "f1", name: "b.txt")
        try s.makeFile("c1", "gamma", in: "f1", name: "c.txt")
        let to = s.moment()
        try s.overwrite(a, with: "garbage")
        try s.delete(b)
        try s.move("c1", to: "f1", name: "renamed.txt")
        try s.makeFile("n1", "new", in: "f1", name: "n.txt")
        let token = try s.position()
        let trash = try s.trashIDs()
        let dry = try s.rewind("f1", to: to, dryRun: true)
        #expect(try s.position() == token && s.feed(since: token).pages.flatMap(\.items).isEmpty, "nothing written")
        #expect(try s.trashIDs() == trash && s.text("a1") == "garbage")
        #expect(Set(dry.map(\.what)) == [.content, .restore, .move, .delete])
        let run = try s.rewind("f1", to: to)
        #expect(run == dry)
        #expect(try s.text("a1") == "alpha" && !s.remote.item("b1").deleted && s.remote.item("c1").name == "c.txt")
        #expect(try s.trashIDs() == ["n1"])
        #expect(try s.rewind("f1", to: to, dryRun: true).isEmpty, "once back, nothing is left to change")
    }

    @Test(arguments: Backend.all) func aRewindCanBeRewound(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        let ids = (0..<5).map { "p\($0)" }
        let files = try ids.map { try s.makeFile($0, "good \($0)", in: "f1") }
        let good = s.moment()
        for (id, item) in zip(ids, files) { try s.overwrite(item, with: "garbage \(id)") }
        let garbage = s.moment()
        #expect(try s.rewind("f1", to: good).count == 5)
        #expect(try ids.allSatisfy { try s.text($0) == "good \($0)" })
        s.clock.advance(second)
        let again = try s.rewind("f1", to: garbage)
        #expect(again.count == 5 && again.allSatisfy { $0.what == .content })
        #expect(try ids.allSatisfy { try s.text($0) == "garbage \($0)" }, "just before the first rewind: the garbage")
        #expect(try s.remote.history(id: "p0").count == 4)
    }

    @Test(arguments: Backend.all) func badInputIsRefusedWithOnePlainLineAndChangesNothing(backend: Backend) throws {
        let s = try backend.make(nil)
        let created = s.clock.now()
        _ = try s.remote.putItem(directory("f1", name: "project"), ifMatch: nil)
        let a = try s.makeFile("a1", "alpha", in: "f1", name: "a.txt")
        let to = s.moment()
        try s.overwrite(a, with: "garbage")
        let token = try s.position()
        let refusals: [(String, RemoteError?)] = [
            ("the future", failure { try s.rewind("f1", to: s.clock.now() + HistoryRules.hour) }),
            ("before the history", failure { try s.rewind("f1", to: created - HistoryRules.hour) }),
            ("a file", failure { try s.rewind("a1", to: to) }),
            ("a bad id", failure { try s.rewind("not an id!", to: to) }),
            ("a bad device", failure { try s.remote.rewind(folder: "f1", to: to, dryRun: false, device: "a\u{0}b") }),
        ]
        for (what, e) in refusals {
            guard case .rejected(400, let message)? = e else { Issue.record("\(what): expected 400, got \(String(describing: e))"); continue }
            #expect(!message.isEmpty && !message.contains("\n"), "\(what)")
        }
        guard case .notFound(let message)? = failure({ try s.rewind("nobody", to: to) }) else {
            Issue.record("an unknown folder: expected 404")
            return
        }
        #expect(!message.isEmpty && !message.contains("\n"))
        #expect(try s.position() == token && s.text("a1") == "garbage", "nothing changed")
        // A deleted folder is not a live one.
        let gone = try s.remote.putItem(directory("g1", name: "gone"), ifMatch: nil)
        try s.delete(gone)
        #expect(status(failure { try s.rewind("g1", to: s.clock.now()) }) == 400)
    }
}
