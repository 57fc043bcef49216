// Packing a directory listing into readdir answers. What must hold here:
// - a page never holds more than the kernel's `size` bytes, and holds whole entries only;
// - entries go in listing order from the offset asked for, and each entry's offset is the index of the one after
//   it, so the next readdir, given that offset, resumes exactly after the last entry the kernel took;
// - an entry that does not fit is not packed and ends the page; in readdirplus its lookup is taken back
//   (`unused`), since the kernel never saw it.
import CFuse
import Glibc

/// One readdir answer's worth of a listing.
struct DirectoryPage {
    /// The packed records (libfuse's dirent or direntplus records), at most the size asked for.
    var bytes: [CChar]
    /// The index of the first entry not packed: the offset the next readdir gives.
    var next: Int
}

enum DirectoryPacking {
    /// Packs entries `start..<count` into at most `size` bytes, stopping at the first that does not fit.
    /// `add(index, buffer, space, offset)` writes entry `index` with its offset when it fits in `space` bytes
    /// and returns the bytes it needs either way (as fuse_add_direntry does).
    static func pack(count: Int, from start: Int, size: Int,
                     add: (_ index: Int, _ buffer: UnsafeMutablePointer<CChar>, _ space: Int, _ offset: off_t) -> Int)
        -> DirectoryPage {
        var buf = [CChar](repeating: 0, count: max(size, 0))
        var used = 0
        var index = max(start, 0)
        buf.withUnsafeMutableBufferPointer { whole in
            // An empty buffer has no address, and nothing fits in it.
            guard let base = whole.baseAddress else { return }
            while index < count {
                let n = add(index, base + used, size - used, off_t(index + 1))
                if n > size - used { break }
                used += n
                index += 1
            }
        }
        return DirectoryPage(bytes: Array(buf.prefix(used)), next: index)
    }

    /// Plain readdir records: name, type and inode (`ino` of the entry).
    static func plain(_ list: [FileSystem.DirEntry], from start: Int, size: Int,
                      ino: (FileSystem.DirEntry) -> UInt64) -> DirectoryPage {
        pack(count: list.count, from: start, size: size) { index, buffer, space, offset in
            var st = stat()
            st.st_mode = list[index].type
            st.st_ino = UInt(ino(list[index]))
            // libfuse does not use the request here.
            return fuse_add_direntry(nil, buffer, space, list[index].name, &st, offset)
        }
    }

    /// readdirplus records: `param` gives each entry's entry reply (counting a lookup when its inode is not 0),
    /// `unused` takes back the one of an entry that did not fit.
    static func plus(_ list: [FileSystem.DirEntry], from start: Int, size: Int,
                     param: (FileSystem.DirEntry) -> fuse_entry_param,
                     unused: (fuse_entry_param) -> Void) -> DirectoryPage {
        pack(count: list.count, from: start, size: size) { index, buffer, space, offset in
            var p = param(list[index])
            let n = fuse_add_direntry_plus(nil, buffer, space, list[index].name, &p, offset)
            if n > space { unused(p) }
            return n
        }
    }
}
