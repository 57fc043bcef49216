// The owner's side of a shared folder in the core (Door/Sharing.swift): the share attributes come from the
// remote's records as last fetched, and no attribute read waits for the remote.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct SharingTests {
    let remote = MemoryRemote()

    /// A share made on another device shows once the records are over a minute old and a read of an attribute
    /// has fetched them again in the background; until then, and during that fetch, the records are read as
    /// they are.
    @Test func aShareMadeElsewhereShowsOnceTheRecordsAreFetchedAgain() throws {
        let folder = remote.seed(path: "Documents/team", bytes: nil, device: "seed", mtime: 1)
        let file = remote.seed(path: "Documents/team/plan.txt", bytes: bytes("the plan"), device: "seed", mtime: 1)
        let outside = remote.seed(path: "Documents/mine.txt", bytes: bytes("mine"), device: "seed", mtime: 1)
        let now = Box<Int64>(1_800_000_000_000_000_000)
        let dev = try Device(remote, name: "a") { $0.environment.clock = { now.value } }
        #expect(eventually { dev.container.shareRecords.withLock { $0.fetchedAt } != 0 }, "fetched at start")
        #expect(dev.container.shareAttributes(file.id).isEmpty)

        remote.setShares([WireShare(id: String(repeating: "a", count: 32), container: "c", folder: folder.id,
                                    name: "team", owner: "alice", user: "bob", readOnly: false, created: 1)])
        #expect(dev.container.shareAttributes(file.id).isEmpty, "records under a minute old are not fetched again")
        now.value += ShareRecords.freshNanoseconds + 1
        let owner: [String: String] = ["isShared": "1", "sharedRole": "owner", "sharedPermissions": "readWrite",
                                       "sharedOwner": "alice"]
        func shown(_ id: String) -> [String: String] {
            Dictionary(uniqueKeysWithValues: dev.container.shareAttributes(id).map { ($0.name, $0.value) })
        }
        #expect(eventually { shown(file.id) == owner })
        #expect(shown(folder.id) == owner)
        #expect(shown(outside.id).isEmpty)
    }

    /// A remote that keeps no shares (one older than them) is asked once: the attributes stay absent.
    @Test func aRemoteWithoutSharesIsNotAskedAgain() throws {
        let link = Link(remote)
        link.sharesUnknown.value = true
        let now = Box<Int64>(1_800_000_000_000_000_000)
        let dev = try Device(link, name: "a") { $0.environment.clock = { now.value } }
        #expect(eventually { dev.container.shareRecords.withLock { $0.unsupported } })
        now.value += ShareRecords.freshNanoseconds + 1
        #expect(dev.container.shareAttributes(dev.docs).isEmpty)
        #expect(!dev.container.shareRecords.withLock { $0.fetching }, "not asked again")
    }
}
