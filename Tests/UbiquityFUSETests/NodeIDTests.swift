// The adapter's node ids: every kind parses back from its string, and an item's id stays an item's.
import Testing
@testable import UbiquityFUSE

@Suite struct NodeIDTests {
    @Test func everyKindParsesBackFromItsString() {
        let all: [NodeID] = [.item("4f2a9c"), .item("root"), .versionsDir(item: "root"),
                             .versionsDir(item: "4f2a9c"), .version(item: "4f2a9c", conflict: "c7"),
                             .pastVersion(item: "4f2a9c", version: 17),
                             .kvDir(typed: false), .kvDir(typed: true), .kvKey("theme", typed: false),
                             .kvKey("a:b", typed: true), .kvChanges, .trashDir, .trashList, .trashItem("4f2a9c"), .announced]
        for id in all { #expect(NodeID(parsing: id.description) == id) }
    }

    @Test func onlyVirtualNodesAreVirtualAndOnlyKeyValueNodesAreKeyValue() {
        #expect(!NodeID(parsing: "4f2a9c").isVirtual)
        #expect(NodeID(parsing: "v:4f2a9c").isVirtual && !NodeID(parsing: "v:4f2a9c").isKeyValue)
        #expect(NodeID(parsing: "c:4f2a9c:c7").isVirtual && NodeID(parsing: "p:4f2a9c:17").isVirtual)
        #expect(NodeID(parsing: "kv:").isKeyValue && NodeID(parsing: "kvj:x").isKeyValue && NodeID(parsing: "kvc:").isKeyValue)
    }
}
