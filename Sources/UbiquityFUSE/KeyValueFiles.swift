// The key-value store in the mount: `MOUNT/.kvstore/KEY` is a file per key, `MOUNT/.kvstore/.json/KEY` the
// same keys as typed JSON (`{"type":"integer","value":5}`), `MOUNT/.kvstore/.changes` the change records
// (one JSON object a line) that `ubiquityfs kv watch` follows. Nodes are virtual, like `.versions`, with ids
// that cannot clash with item ids (those have no ':'):
//   "kv:"  .kvstore     "kv:KEY"  a key as text     "kvj:"  .kvstore/.json     "kvj:KEY"  a key as JSON
//   "kvc:" .kvstore/.changes
// Text mapping: a file written holds a string value of exactly the bytes written (what `echo` writes, its
// newline too, `cat` reads back); bytes that are not UTF-8 make a data value. Reading a string gives its bytes;
// any other type reads as its typed JSON and a newline.
// An open handle works on a private unlinked copy of the value (O_TRUNC empties it); the copy becomes the
// value at flush or release, so a write over a limit fails at close and stores nothing: ENAMETOOLONG for a
// key over 64 bytes (at lookup and create), EFBIG for a value over 1 MB (at write and close), EDQUOT when the
// key count would pass the quota (at the create of a new key, and at close) or the total would (at close).
//
// What must hold: a value changes only at a commit (`kvCommit`: a flush after a write, or the release), through
// `KeyValueStore.set`, so it is replaced whole or not at all; a handle refused at a write stays refused and its
// close stores nothing. A handle's copy is an unlinked file in the store's staging (`makeStagingFile`), never
// in the content folder. A key's node exists while the key has a value or a handle is open on it.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

extension FileSystem {
    static let kvName = WireRules.keyValueFolder
    static let kvJSONName = ".json"
    static let kvChangesName = ".changes"
    static let kvDirID = NodeID.kvDir(typed: false).description
    static let kvJSONDirID = NodeID.kvDir(typed: true).description
    static let kvChangesID = NodeID.kvChanges.description

    func isKVID(_ id: String) -> Bool { NodeID(parsing: id).isKeyValue }

    static func kvKeyID(_ key: String, typed: Bool) -> String { NodeID.kvKey(key, typed: typed).description }

    /// The node of a kv id: a key's node exists while the key has a value or a handle is open on it. A store
    /// that cannot be read throws (EIO at a lookup, a listing, an open), never "no such key".
    func kvNode(_ id: String) throws(CoreError) -> Node? {
        guard let kv else { return nil }
        switch NodeID(parsing: id) {
        case .kvDir(let typed): return .kvDir(typed: typed)
        case .kvChanges: return .kvChanges
        case .kvKey(let key, let typed):
            guard try kv.value(key) != nil || kvOpenIDs().contains(id) else { return nil }
            return .kvKey(key, typed: typed)
        default: return nil
        }
    }

    func kvChildren(typed: Bool) throws(CoreError) -> [(name: String, id: String)] {
        var list: [(name: String, id: String)] = []
        if !typed { list = [(FileSystem.kvJSONName, FileSystem.kvJSONDirID), (FileSystem.kvChangesName, FileSystem.kvChangesID)] }
        // The names .json and .changes are taken in .kvstore itself: such keys show under .json only.
        for key in try kv?.keys() ?? [] where typed || (key != FileSystem.kvJSONName && key != FileSystem.kvChangesName) {
            list.append((key, FileSystem.kvKeyID(key, typed: typed)))
        }
        return list
    }

    /// The child `name` of a kv directory (or `.kvstore` in the root); nil when `parent` is neither.
    func kvChild(_ parent: String, _ name: String) throws(CoreError) -> (id: String, node: Node)?? {
        if parent == core.rootID && sameName(name, FileSystem.kvName) {
            return .some(try kvNode(FileSystem.kvDirID).map { (FileSystem.kvDirID, $0) })
        }
        guard parent == FileSystem.kvDirID || parent == FileSystem.kvJSONDirID else { return nil }
        let typed = parent == FileSystem.kvJSONDirID
        if !typed && name == FileSystem.kvJSONName { return .some((FileSystem.kvJSONDirID, .kvDir(typed: true))) }
        if !typed && name == FileSystem.kvChangesName { return .some((FileSystem.kvChangesID, .kvChanges)) }
        if name.utf8.count > KVLimits.maxKeyBytes { throw .nameTooLong }
        let id = FileSystem.kvKeyID(name, typed: typed)
        return .some(try kvNode(id).map { (id, $0) })
    }

    /// A key's content as read through the mount.
    func kvBytes(_ key: String, typed: Bool) throws(CoreError) -> [UInt8] {
        guard let value = try kv?.value(key) else { return [] }
        if !typed, case .string(let s) = value { return Array(s.utf8) }
        return ((try? Array(JSONEncoder.wire.encode(value))) ?? []) + [0x0a]
    }

    /// The value a file's bytes stand for.
    func kvValue(_ bytes: [UInt8], typed: Bool) throws(CoreError) -> KVValue {
        if typed {
            guard let v = try? JSONDecoder().decode(KVValue.self, from: Data(bytes)) else {
                throw .invalidArgument("not a typed JSON value")
            }
            return v
        }
        return KVValue(text: bytes)
    }

    func kvChangeBytes() -> [UInt8] {
        var out: [UInt8] = []
        for c in kv?.changeRecords() ?? [] { out += ((try? Array(JSONEncoder.wire.encode(c))) ?? []) + [0x0a] }
        return out
    }

    /// Ids of keys with a handle open (a key being created has no value before its close).
    func kvOpenIDs() -> Set<String> { Set(openFiles().map(\.id).filter { $0.hasPrefix("kv") }) }

    /// Keys being created: a handle is open on them and they have no value yet.
    func kvNewKeys() throws(CoreError) -> Set<String> {
        var keys = Set<String>()
        for id in kvOpenIDs() {
            guard case .kvKey(let key, _) = NodeID(parsing: id), try kv?.value(key) == nil else { continue }
            keys.insert(key)
        }
        return keys
    }

    // MARK: operations

    func kvCreate(_ dirID: String, _ name: String) throws(CoreError) -> (Entry, Opened) {
        guard dirID == FileSystem.kvDirID || dirID == FileSystem.kvJSONDirID else { throw .readOnly }
        if name.utf8.count > KVLimits.maxKeyBytes { throw .nameTooLong }
        if dirID == FileSystem.kvDirID && (name == FileSystem.kvJSONName || name == FileSystem.kvChangesName) {
            throw .exists
        }
        let id = FileSystem.kvKeyID(name, typed: dirID == FileSystem.kvJSONDirID)
        // A new key past the count is refused here, not only at close, which shells do not check.
        if try kv?.value(name) == nil, try kvNewKeys().subtracting([name]).count + (kv?.keys().count ?? 0) >= KVLimits.maxKeys {
            throw .quotaExceeded("over the quota (more than \(KVLimits.maxKeys) keys)")
        }
        let file = try kvHandle(id, content: [], writable: true)
        file.wrote = true
        let fh = addHandle(file)
        // (The key's node exists from here on: a handle is open on it.)
        guard let node = node(id) else {
            release(fh)
            throw .notFound
        }
        return (entry(id, node), Opened(fh: fh, directIO: true))
    }

    func kvOpen(_ id: String, flags: Int32) throws(CoreError) -> Opened {
        let writable = flags & O_ACCMODE != O_RDONLY
        let truncate = flags & O_TRUNC != 0
        let content: [UInt8]
        switch node(id) {
        case .kvChanges:
            if writable { throw .readOnly }
            content = kvChangeBytes()
        case .kvKey(let key, let typed):
            content = truncate ? [] : try kvBytes(key, typed: typed)
        default:
            throw .notFound
        }
        let file = try kvHandle(id, content: content, writable: writable)
        file.wrote = writable && truncate
        return Opened(fh: addHandle(file), directIO: true)
    }

    /// A handle on a private unlinked file in the store's staging area, holding `content`.
    private func kvHandle(_ id: String, content: [UInt8], writable: Bool) throws(CoreError) -> OpenFile {
        let fd = try core.makeStagingFile(prefix: "kv")
        do { try fd.writeAll(content) } catch {
            fd.close()
            throw CoreError.from(error) // the store's own file: EIO, or ENOSPC
        }
        return OpenFile(id: id, fd: fd, writable: writable)
    }

    func kvWrite(_ data: WriteData, _ offset: off_t, _ file: OpenFile) throws(AdapterError) -> Int {
        let limit = file.id.hasPrefix(FileSystem.kvJSONDirID) ? KVLimits.maxBodyBytes : KVLimits.maxTotalBytes
        if Int(offset) + data.count > limit {
            file.refused = .fileTooBig
            throw .core(.fileTooBig)
        }
        let n = data.write(file.fd.raw, offset)
        if n < 0 { throw .system(Errno(Int32(-n))) }
        file.wrote = true
        file.wroteData = true
        return n
    }

    /// Makes a written handle's bytes the key's value. Over a limit: the error and nothing stored; the
    /// handle's bytes are dropped either way, so release does not try again. A handle only opened with O_TRUNC
    /// (or created) commits its empty value at release, so a write refused after it stores nothing.
    func kvCommit(_ file: OpenFile, releasing: Bool = false) throws(CoreError) {
        guard file.wrote, file.wroteData || releasing, let kv else { return }
        file.wrote = false
        file.wroteData = false
        if let refused = file.refused { throw refused }
        let typed = file.id.hasPrefix(FileSystem.kvJSONDirID)
        let key = String(file.id.dropFirst(typed ? 4 : 3))
        let size = Int(lseek(file.fd.raw, 0, SEEK_END))
        var bytes = [UInt8](repeating: 0, count: max(0, size))
        let got = bytes.withUnsafeMutableBytes { pread(file.fd.raw, $0.baseAddress, $0.count, 0) }
        if got != bytes.count { throw .io("cannot read the written value back") }
        try kv.set(key, try kvValue(bytes, typed: typed))
    }

    func kvSetattr(_ ino: UInt64, _ id: String, _ changes: AttributeChanges, _ fh: UInt64?) throws(AdapterError) -> Attributes {
        guard let node = node(id), case .kvKey = node else { throw .core(.readOnly) }
        if let size = changes.size {
            guard let fh, let file = file(fh), file.writable else { throw .core(.readOnly) }
            if Int(size) > KVLimits.maxBodyBytes { throw .core(.fileTooBig) }
            if ftruncate(file.fd.raw, off_t(size)) != 0 { throw .system(.current) }
            file.refused = nil
            file.wrote = true
            file.wroteData = true
        }
        return Attributes(stat: attributes(node, of: id), timeout: 0)
    }

    func kvRemove(_ dirID: String, _ name: String) throws(CoreError) {
        guard dirID == FileSystem.kvDirID || dirID == FileSystem.kvJSONDirID else { throw .readOnly }
        if dirID == FileSystem.kvDirID && (name == FileSystem.kvJSONName || name == FileSystem.kvChangesName) {
            throw .readOnly
        }
        guard let kv else { throw .notFound }
        if name.utf8.count > KVLimits.maxKeyBytes { throw .nameTooLong }
        try kv.set(name, nil)
    }
}
