// Idempotent changes (docs/WIRE.md "Change ids"), run against each backend of `Backend.all`: a put or delete
// that carries a change id is remembered per item and device; its retry is answered as already applied with
// the version it made and the item now, changes nothing, and is told apart from a success; the same id with
// another change is refused; writes without an id behave as before.
import Foundation
import Testing
import UbiquityBase
import UbiquityCore

/// The version and current item of an `.alreadyApplied` answer, or nil for any other outcome.
private func applied<T>(_ body: () throws -> T) -> (version: Int64, current: WireItem)? {
    if case .alreadyApplied(let version, let current)? = failure(body) { return (version, current) }
    return nil
}

@Suite(.serialized) struct ChangeIDConformanceTests {
    private let laptop = WireChangeID(id: "change-1", device: "laptop")

    @Test(arguments: Backend.all) func retryOfAPutIsAnsweredAsApplied(backend: Backend) throws {
        let s = try backend.make(nil)
        let created = try s.remote.putItem(directory("d1"), ifMatch: nil, change: laptop)
        let token = try s.remote.changes(since: nil, waitSeconds: 0).token
        let again = try #require(applied { try s.remote.putItem(directory("d1"), ifMatch: nil, change: laptop) })
        #expect(again.version == created.version && again.current == created)
        #expect(try s.remote.changes(since: token, waitSeconds: 0).items.isEmpty, "a retry writes nothing")
    }

    @Test(arguments: Backend.all) func retryAfterLaterChangesAnswersTheItemNow(backend: Backend) throws {
        let s = try backend.make(nil)
        let created = try s.remote.putItem(directory("d1"), ifMatch: nil, change: nil)
        var renamed = directory("d1", name: "Renamed")
        renamed.device = "laptop"
        let landed = try s.remote.putItem(renamed, ifMatch: created.version, change: laptop)
        // Elsewhere: changed further, then deleted.
        let phone = WireChangeID(id: "change-1", device: "phone")
        let further = try s.remote.putItem(directory("d1", name: "Further"), ifMatch: landed.version, change: phone)
        let tomb = try s.remote.deleteItem("d1", ifMatch: further.version, change: nil)
        let again = try #require(applied { try s.remote.putItem(renamed, ifMatch: created.version, change: laptop) })
        #expect(again.version == landed.version)
        #expect(again.current.deleted && again.current.version == tomb.version, "the item as it is now")
        #expect(try s.remote.item("d1").deleted, "the retry revived nothing")
    }

    @Test(arguments: Backend.all) func retryOfADeleteIsAnsweredAsApplied(backend: Backend) throws {
        let s = try backend.make(nil)
        let created = try s.remote.putItem(directory("d1"), ifMatch: nil, change: nil)
        let tomb = try s.remote.deleteItem("d1", ifMatch: created.version, change: laptop)
        #expect(tomb.deleted && tomb.device == "laptop", "the change's device names the tombstone")
        let again = try #require(applied { try s.remote.deleteItem("d1", ifMatch: created.version, change: laptop) })
        #expect(again.version == tomb.version && again.current == tomb)
    }

    @Test(arguments: Backend.all) func theSameIDWithAnotherChangeIsRefused(backend: Backend) throws {
        let s = try backend.make(nil)
        _ = try s.remote.putItem(directory("d1"), ifMatch: nil, change: laptop)
        let other = failure { try s.remote.putItem(directory("d1", name: "Other"), ifMatch: nil, change: laptop) }
        guard case .rejected(400, _)? = other else { Issue.record("got \(String(describing: other))"); return }
        #expect(try s.remote.item("d1").name == "d1")
    }

    @Test(arguments: Backend.all) func idsArePerDeviceAndANewIDIsANewChange(backend: Backend) throws {
        let s = try backend.make(nil)
        let created = try s.remote.putItem(directory("d1"), ifMatch: nil, change: laptop)
        // The same id from another device is that device's own change: judged by its condition.
        let phone = WireChangeID(id: laptop.id, device: "phone")
        guard case .preconditionFailed? = failure({ try s.remote.putItem(directory("d1"), ifMatch: nil, change: phone) })
        else { Issue.record("another device's id is not this one's"); return }
        // A new id of the same device is a new change, and the last one is what a retry is matched against.
        let next = WireChangeID(id: "change-2", device: "laptop")
        let renamed = try s.remote.putItem(directory("d1", name: "R"), ifMatch: created.version, change: next)
        guard case .preconditionFailed? = failure({ try s.remote.putItem(directory("d1"), ifMatch: nil, change: laptop) })
        else { Issue.record("only the last change per item and device is remembered"); return }
        #expect(applied { try s.remote.putItem(directory("d1", name: "R"), ifMatch: created.version, change: next) }?
            .version == renamed.version)
    }

    @Test(arguments: Backend.all) func writesWithoutIDsAreAnsweredAsBefore(backend: Backend) throws {
        let s = try backend.make(nil)
        let created = try s.remote.putItem(directory("d1"), ifMatch: nil, change: nil)
        guard case .preconditionFailed(let current, _)? = failure({ try s.remote.putItem(directory("d1"), ifMatch: nil) })
        else { Issue.record("a repeated create without an id is refused as before"); return }
        #expect(current == created)
        let tomb = try s.remote.deleteItem("d1", ifMatch: created.version)
        guard case .preconditionFailed? = failure({ try s.remote.deleteItem("d1", ifMatch: created.version) })
        else { Issue.record("a repeated delete without an id is refused as before"); return }
        #expect(try s.remote.item("d1") == tomb)
    }

    @Test(arguments: Backend.all) func aRefusalNamesTheAskingDevicesLastLandedChange(backend: Backend) throws {
        let s = try backend.make(nil)
        let created = try s.remote.putItem(directory("d1"), ifMatch: nil, change: nil)
        // The laptop's rename lands (its answer lost, say); the phone, having seen it, renames further.
        let landed = try s.remote.putItem(directory("d1", name: "R"), ifMatch: created.version, change: laptop)
        let phone = WireChangeID(id: "change-9", device: "phone")
        let further = try s.remote.putItem(directory("d1", name: "P"), ifMatch: landed.version, change: phone)
        // The laptop writes again from the version it knew: the 412 names the version its own change made.
        let own = WireLastChange(change: laptop.id, version: landed.version)
        let next = WireChangeID(id: "change-2", device: "laptop")
        let put = failure { try s.remote.putItem(directory("d1", name: "S"), ifMatch: created.version, change: next) }
        guard case .preconditionFailed(let current, let yours)? = put else { Issue.record("got \(String(describing: put))"); return }
        #expect(current == further)
        #expect(yours == own)
        let delete = failure { try s.remote.deleteItem("d1", ifMatch: created.version, change: next) }
        guard case .preconditionFailed(_, let yoursToo)? = delete else { Issue.record("got \(String(describing: delete))"); return }
        #expect(yoursToo == own, "a delete's refusal names it too")
        // A device with no change applied there, and a write without a change id, learn of none.
        let tablet = WireChangeID(id: "change-1", device: "tablet")
        guard case .preconditionFailed(_, let none)? = failure({ try s.remote.deleteItem("d1", ifMatch: created.version, change: tablet) }),
              case .preconditionFailed(_, let anonymous)? = failure({ try s.remote.deleteItem("d1", ifMatch: created.version) })
        else { Issue.record("stale writes are refused"); return }
        #expect(none == nil && anonymous == nil)
    }

    @Test(arguments: Backend.all) func aBadChangeIDIsRefused(backend: Backend) throws {
        let s = try backend.make(nil)
        let bad = WireChangeID(id: "no spaces", device: "laptop")
        guard case .rejected(400, _)? = failure({ try s.remote.putItem(directory("d1"), ifMatch: nil, change: bad) })
        else { Issue.record("a change id follows the item id rule"); return }
        #expect((try? s.remote.item("d1")) == nil, "nothing was written")
    }
}
