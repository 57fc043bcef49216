// Readdir packing: pages never pass the kernel's size, hold whole entries in order, and resume where the last
// page ended; an entry that does not fit ends the page (and in readdirplus its lookup is taken back).
import CFuse
import Glibc
import Testing
@testable import UbiquityFUSE

/// One record read back from a page: FUSE's dirent (ino, off, namelen, type, name, padded to 8 bytes).
private struct Record: Equatable {
    let ino: UInt64, offset: UInt64, type: UInt32, name: String
}

/// The records of a page; `header` bytes (a direntplus's entry part) come before each dirent.
private func records(_ bytes: [CChar], header: Int = 0) -> [Record] {
    let raw = bytes.map { UInt8(bitPattern: $0) }
    func number<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T {
        raw[at..<at + MemoryLayout<T>.size].reversed().reduce(T(0)) { $0 << 8 | T($1) }
    }
    var out: [Record] = [], at = 0
    while at < raw.count {
        let d = at + header
        let length = Int(number(d + 16, UInt32.self))
        let name = String(decoding: raw[(d + 24)..<(d + 24 + length)], as: UTF8.self)
        out.append(Record(ino: number(d, UInt64.self), offset: number(d + 8, UInt64.self),
                          type: number(d + 20, UInt32.self), name: name))
        at = d + (24 + length + 7) / 8 * 8
    }
    return out
}

/// A listing with names of every length from 1 to 255 bytes, files and directories in turn.
private let listing: [FileSystem.DirEntry] = (1...255).map { n in
    FileSystem.DirEntry(name: String(repeating: Character(UnicodeScalar(UInt8(97 + n % 26))), count: n),
                        id: "id\(n)", type: n % 2 == 0 ? S_IFDIR : S_IFREG)
}

private func inode(_ e: FileSystem.DirEntry) -> UInt64 { UInt64(e.name.utf8.count) + 100 }

@Suite struct DirectoryPagesTests {
    @Test func aLargeBufferTakesTheWholeListingInOrder() {
        let page = DirectoryPacking.plain(listing, from: 0, size: 1 << 20, ino: inode)
        #expect(page.next == listing.count)
        let got = records(page.bytes)
        #expect(got.map(\.name) == listing.map(\.name))
        #expect(got.map(\.offset) == (1...UInt64(listing.count)).map { $0 })
        #expect(got.map(\.ino) == listing.map(inode))
        #expect(got.map(\.type) == listing.map { UInt32($0.type >> 12) })
    }

    @Test func recordsAreTheNamePlusTheHeaderPaddedToEightBytes() {
        for (length, size) in [(1, 32), (8, 32), (9, 40), (16, 40), (17, 48), (255, 280)] {
            let entry = FileSystem.DirEntry(name: String(repeating: "x", count: length), id: nil, type: S_IFREG)
            let page = DirectoryPacking.plain([entry], from: 0, size: 4096, ino: inode)
            #expect(page.bytes.count == size, "a name of \(length) bytes")
        }
    }

    @Test func pagesResumeWhereTheLastEndedAndNeverPassTheirSize() {
        for size in [280, 300, 512, 1000, 4096] {
            var names: [String] = [], start = 0, pages = 0
            while start < listing.count {
                let page = DirectoryPacking.plain(listing, from: start, size: size, ino: inode)
                #expect(page.bytes.count <= size)
                #expect(page.next > start, "a page of \(size) bytes from \(start) took nothing")
                let got = records(page.bytes)
                // Each record's offset is where the next readdir resumes: the index after it.
                #expect(got.map(\.offset) == (UInt64(start + 1)...UInt64(page.next)).map { $0 })
                names += got.map(\.name)
                start = page.next
                pages += 1
                if pages > listing.count { break }
            }
            #expect(names == listing.map(\.name), "pages of \(size) bytes")
        }
    }

    @Test func aBufferTooSmallForTheNextEntryTakesNothingAndResumesThere() {
        for size in [0, 1, 24, 279] {
            let page = DirectoryPacking.plain(listing, from: 254, size: size, ino: inode) // the 255-byte name
            #expect(page.bytes.isEmpty)
            #expect(page.next == 254)
        }
        let exact = DirectoryPacking.plain(listing, from: 254, size: 280, ino: inode)
        #expect(records(exact.bytes).map(\.name) == [listing[254].name])
        #expect(exact.next == 255)
    }

    @Test func anEntryThatDoesNotFitEndsThePageEvenIfALaterOneWouldFit() {
        let list = [FileSystem.DirEntry(name: "a", id: nil, type: S_IFREG),
                    FileSystem.DirEntry(name: String(repeating: "b", count: 100), id: nil, type: S_IFREG),
                    FileSystem.DirEntry(name: "c", id: nil, type: S_IFREG)]
        let page = DirectoryPacking.plain(list, from: 0, size: 32 + 64, ino: inode)
        #expect(records(page.bytes).map(\.name) == ["a"])
        #expect(page.next == 1)
    }

    @Test func anOffsetAtOrPastTheEndGivesAnEmptyPage() {
        for start in [listing.count, listing.count + 10] {
            let page = DirectoryPacking.plain(listing, from: start, size: 4096, ino: inode)
            #expect(page.bytes.isEmpty)
            #expect(page.next == start)
        }
    }

    @Test func readdirplusTakesBackTheLookupOfTheEntryThatDidNotFit() {
        let one = fuse_add_direntry_plus(nil, nil, 0, "a", nil, 0) // the size of one record with a 1-byte name
        let list = (1...5).map { FileSystem.DirEntry(name: "\($0)", id: "id\($0)", type: S_IFREG) }
        var given: [UInt64] = [], takenBack: [UInt64] = []
        let page = DirectoryPacking.plus(list, from: 1, size: 2 * one + one / 2, entry: { e in
            var st = stat()
            st.st_ino = UInt(UInt64(e.name)! + 10)
            st.st_mode = e.type
            given.append(UInt64(st.st_ino))
            return Entry(ino: UInt64(st.st_ino), attributes: st, timeout: 1)
        }, unused: { takenBack.append($0.ino) })
        #expect(page.next == 3)
        #expect(page.bytes.count == 2 * one)
        #expect(given == [12, 13, 14])
        #expect(takenBack == [14])
        let got = records(page.bytes, header: one - 32)
        #expect(got.map(\.name) == ["2", "3"])
        #expect(got.map(\.offset) == [2, 3])
    }
}
