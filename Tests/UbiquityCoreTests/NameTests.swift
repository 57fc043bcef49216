// Names compare byte for byte everywhere in the core: canonically equivalent names (NFC "é" and NFD "e" +
// combining accent), which Swift's String equality treats as equal, are different names.
import Foundation
import Testing
import UbiquityBase
@testable import UbiquityCore
import UbiquityTesting

@Suite struct NameTests {
    let remote = MemoryRemote()
    let nfc = "caf\u{e9}.txt", nfd = "cafe\u{301}.txt"

    @Test func nfcAndNfdNamesAreTwoFilesThatBothSync() throws {
        #expect(nfc == nfd && !sameName(nfc, nfd)) // what the core must not be fooled by
        let a = try Device(remote, name: "a")
        let b = try Device(remote, name: "b")
        let composed = try a.createFile(nfc, bytes("composed"))
        let decomposed = try a.createFile(nfd, bytes("decomposed"))
        #expect(composed.id != decomposed.id)
        #expect(eventually(10) { a.pending == 0 })
        #expect(Array(try remote.item(composed.id).name.utf8) == Array(nfc.utf8))
        #expect(Array(try remote.item(decomposed.id).name.utf8) == Array(nfd.utf8))
        #expect(eventually(10) { b.lookup(nfc)?.id == composed.id && b.lookup(nfd)?.id == decomposed.id })
        #expect(try b.container.list(b.docs).count == 2)
        #expect(b.fetch(decomposed.id).map { (try? $0.get()) != nil } == true)
        #expect(b.content(decomposed.id) == bytes("decomposed"))
    }

    /// A rename to the canonically equivalent name meets a newer remote version with the old name: the rename
    /// is still pushed (it was taken for "nothing left to push" when names compared with ==).
    @Test func renameToTheEquivalentNameIsPushedOverANewerVersion() throws {
        let f = remote.seed(path: "Documents/\(nfc)", bytes: bytes("x"), device: "seed", mtime: 1)
        let linkA = Link(remote)
        let a = try Device(linkA, name: "a")
        let b = try Device(remote, name: "b")
        linkA.offline = true
        try a.container.rename(parent: a.docs, name: nfc, newParent: a.docs, newName: nfd, noReplace: false)
        // b moves the file away and back: a newer remote version with the old name and the same attributes.
        try b.container.rename(parent: b.docs, name: nfc, newParent: b.docs, newName: "tmp.txt", noReplace: false)
        #expect(eventually(10) { (try? remote.item(f.id).name) == "tmp.txt" })
        try b.container.rename(parent: b.docs, name: "tmp.txt", newParent: b.docs, newName: nfc, noReplace: false)
        #expect(eventually(10) { (try? remote.item(f.id)).map { sameName($0.name, nfc) } == true })
        linkA.offline = false
        a.nudge()
        #expect(eventually(10) { (try? remote.item(f.id)).map { sameName($0.name, nfd) } == true })
        #expect(eventually(10) { a.pending == 0 && b.lookup(nfd)?.id == f.id && b.lookup(nfc) == nil })
    }
}
