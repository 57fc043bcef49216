// What one live query shows: the scopes and the name pattern, and each batch's added, changed and removed
// relative to what the client was shown before.
import Testing
@testable import UbiquityCore

@Suite struct QueryTests {
    func entry(_ path: String, _ rendered: String = "v1", dir: Bool = false) -> QueryEntry {
        QueryEntry(path: path, name: String(path.split(separator: "/").last!), isDirectory: dir, rendered: path + rendered)
    }

    @Test func scopesAreApplesAndThePatternIsOnTheName() {
        let docs = QueryFilter(scope: .documents, name: nil), data = QueryFilter(scope: .data, name: nil)
        let all = QueryFilter(scope: .all, name: "*.txt")
        #expect(docs.matches(path: "Documents/a.txt", name: "a.txt") && !docs.matches(path: "Documents", name: "Documents"))
        #expect(!docs.matches(path: "settings.txt", name: "settings.txt"))
        #expect(data.matches(path: "settings.txt", name: "settings.txt") && data.matches(path: "Data/Documents/x", name: "x"))
        #expect(!data.matches(path: "Documents", name: "Documents") && !data.matches(path: "Documents/a", name: "a"))
        #expect(all.matches(path: "Documents/sub/a.txt", name: "a.txt") && !all.matches(path: "a.txt.bak", name: "a.txt.bak"))
    }

    @Test func aBatchSaysAddedChangedAndRemovedOnlyOfWhatDiffers() {
        var view = QueryView(filter: QueryFilter(scope: .documents, name: nil))
        let gathered = [view.gather("a", entry("Documents/a")), view.gather("s", entry("settings")),
                        view.gather("b", entry("Documents/b"))]
        #expect(gathered == [true, false, true])
        let told = view.batch(["a": entry("Documents/a"), "b": entry("Documents/b", "v2"), "c": entry("Documents/c")],
                              gone: [])
        #expect(told.added == ["Documents/cv1"] && told.changed == ["Documents/bv2"] && told.removed.isEmpty)
        // Moved out of the scope, deleted, and gone without ever being shown.
        let out = view.batch(["a": entry("elsewhere/a")], gone: ["b", "never"])
        #expect(out.added.isEmpty && out.changed.isEmpty)
        #expect(Set(out.removed.map { "\($0.id) \($0.path)" }) == ["a Documents/a", "b Documents/b"])
        #expect(view.count == 1)
        // Moved back in: added again.
        let back = view.batch(["a": entry("Documents/a")], gone: [])
        #expect(back.added == ["Documents/av1"])
    }
}
