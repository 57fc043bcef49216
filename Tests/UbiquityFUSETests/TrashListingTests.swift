// Recently Deleted as a tree under `.trash`: what a deleted folder held shows inside it, names in one folder
// never clash (the newest delete keeps the name; `.list` is never taken), and emptying an entry takes what is
// inside it along.
import Testing
import UbiquityBase
@testable import UbiquityFUSE

@Suite struct TrashListingTests {
    private func deleted(_ id: String, _ name: String, in parent: String? = "docs", kind: ItemKind = .file,
                         at: Int64) -> WireVersion {
        WireVersion(id: id, version: 2, at: at, path: name, deleted: true, parent: parent, name: name, kind: kind,
                    mode: 0o644, mtime: at, size: 1, sha256: "", device: "laptop")
    }

    @Test func aDeletedFolderHoldsWhatWasDeletedInItAndNamesNeverClash() {
        let tree = TrashListing([
            deleted("p", "proj", kind: .dir, at: 50),
            deleted("f", "one.txt", in: "p", at: 49),
            deleted("n2", "notes.txt", at: 40),
            deleted("n1", "notes.txt", at: 30),
            deleted("l", ".list", at: 20),
            deleted("x", "fifo", kind: .fifo, at: 10),
        ])
        let top = (tree.folders[""] ?? []).map(\.name)
        #expect(top.count == 4)
        #expect(top[0] == "proj" && top[1] == "notes.txt" && top[3].hasPrefix(".list (deleted "))
        #expect(top[2].hasPrefix("notes (deleted ") && top[2].hasSuffix(").txt"))
        #expect(tree.child("", "notes.txt")?.id == "n2")
        #expect(tree.child("p", "one.txt")?.id == "f")
        #expect(tree.child("", "one.txt") == nil && tree.child("", "fifo") == nil)
    }

    @Test func emptyingAFolderTakesWhatIsInsideAlong() {
        var tree = TrashListing([deleted("p", "proj", kind: .dir, at: 50), deleted("q", "sub", in: "p", kind: .dir, at: 49),
                              deleted("f", "one.txt", in: "q", at: 48), deleted("n", "notes.txt", at: 40)])
        tree.remove("p")
        #expect(tree.entries.keys.sorted() == ["n"])
        #expect((tree.folders[""] ?? []).map(\.name) == ["notes.txt"])
    }
}
