// open(2) with O_CREAT of a name that an item from another device took after the kernel's lookup found it free:
// the kernel sends a create, and the file that is there is opened, as open(2) opens it (EEXIST only for
// O_EXCL). Before, every such open failed with EEXIST (test_wire_fuzz, writes on two devices at once).
import Foundation
import Glibc
import Testing
@testable import UbiquityFUSE
import UbiquityBase
@_spi(Simulation) import UbiquityCore

@Suite struct CreateTests {
    @Test func aCreateOfANameTakenMeanwhileOpensTheFileThere() throws {
        let run = try RefRun()
        let dev = run.a
        let root: UInt64 = 1
        // The name is taken after the kernel's lookup: made in the core, as an item that arrives is.
        let made = try dev.container.createFile(parent: dev.container.rootID, name: "x.txt", mode: 0o644)
        func create(_ flags: Int32) -> Result<(Entry, Opened), AdapterError>? {
            let answer = Answer<(Entry, Opened)>()
            dev.fs.create(root, "x.txt", 0o644, flags: flags, .unknown, clearsSUIDGID: nil, waiter: PatientWaiter()) {
                answer.value = $0
            }
            return dev.settle(answer)
        }
        guard case .failure(let refusal)? = create(O_WRONLY | O_CREAT | O_EXCL), refusal.errno == EEXIST else {
            Issue.record("O_EXCL: EEXIST")
            return
        }
        guard case .success(let (entry, opened))? = create(O_WRONLY | O_CREAT | O_TRUNC) else {
            Issue.record("without O_EXCL the file there opens")
            return
        }
        #expect(entry.ino == (try dev.ino("x.txt")))
        #expect(dev.fs.inodes.id(entry.ino) == made.id)
        _ = try dev.fs.write(opened.fh, WriteData(Array("written".utf8)), at: 0)
        try dev.fs.flush(opened.fh)
        dev.fs.release(opened.fh)
        #expect(dev.container.item(made.id)?.size == 7)
    }
}
