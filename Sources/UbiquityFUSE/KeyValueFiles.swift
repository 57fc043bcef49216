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

/// `.kvstore`: a file per key, as text and (under `.json`) as typed JSON, and the change records.
struct KeyValueTree: VirtualTree {
    let fs: FileSystem
    var kv: KeyValueStore? { fs.kv }

    static let jsonName = ".json"
    static let changesName = ".changes"
    static let textID = NodeID.kvDir(typed: false), jsonID = NodeID.kvDir(typed: true)

    var folderName: String { WireRules.keyValueFolder }
    var folderID: NodeID { KeyValueTree.textID }
    var isShown: Bool { kv != nil }

    func owns(_ id: NodeID) -> Bool { id.isKeyValue }

    /// A key's node exists while the key has a value or a handle is open on it. A store that cannot be read
    /// throws (EIO at a lookup, a listing, an open, a stat), never "no such key".
    func node(_ id: NodeID) throws(CoreError) -> Node? {
        guard let kv else { return nil }
        switch id {
        case .kvDir(let typed): return .kvDir(typed: typed)
        case .kvChanges: return .kvChanges
        case .kvKey(let key, let typed):
            guard try kv.value(key) != nil || openIDs().contains(id.description) else { return nil }
            return .kvKey(key, typed: typed)
        default: return nil
        }
    }

    func children(_ id: NodeID, _ node: Node) throws(CoreError) -> [Listed] {
        guard case .kvDir(let typed) = node else { throw .notDirectory }
        var list: [Listed] = []
        if !typed {
            list = [(KeyValueTree.jsonName, KeyValueTree.jsonID.description, nil),
                    (KeyValueTree.changesName, NodeID.kvChanges.description, nil)]
        }
        // The names .json and .changes are taken in .kvstore itself: such keys show under .json only.
        for key in try kv?.keys() ?? [] where typed || !KeyValueTree.isFolderOwnName(key) {
            list.append((key, NodeID.kvKey(key, typed: typed).description, nil))
        }
        return list
    }

    /// `.json` and `.changes`, the names `.kvstore` keeps for itself.
    static func isFolderOwnName(_ name: String) -> Bool { name == jsonName || name == changesName }

    func child(_ parent: NodeID, _ name: String) throws(CoreError) -> (id: String, node: Node)? {
        guard case .kvDir(let typed) = parent else { return nil }
        if !typed && name == KeyValueTree.jsonName { return (KeyValueTree.jsonID.description, .kvDir(typed: true)) }
        if !typed && name == KeyValueTree.changesName { return (NodeID.kvChanges.description, .kvChanges) }
        if name.utf8.count > KVLimits.maxKeyBytes { throw .nameTooLong }
        let id = NodeID.kvKey(name, typed: typed)
        return try node(id).map { (id.description, $0) }
    }

    func attributes(_ node: Node, number: UInt64) -> stat {
        switch node {
        case .kvDir(let typed):
            var st = fs.virtualAttributes(number: number, mode: S_IFDIR | 0o755, size: 4096, mtime: nowNanoseconds())
            if !typed { st.st_nlink = 3 } // and .json's `..`
            return st
        case .kvKey(let key, let typed):
            // (A value that cannot be read shows as empty: the read of it then fails with EIO.)
            return fs.virtualAttributes(number: number, mode: S_IFREG | 0o644,
                                        size: Int64(((try? bytes(key, typed: typed)) ?? []).count), mtime: nowNanoseconds())
        case .kvChanges:
            return fs.virtualAttributes(number: number, mode: S_IFREG | 0o444, size: Int64(changeBytes().count),
                                        mtime: nowNanoseconds())
        default:
            return stat()
        }
    }

    /// A key's content as read through the mount.
    func bytes(_ key: String, typed: Bool) throws(CoreError) -> [UInt8] {
        guard let value = try kv?.value(key) else { return [] }
        if !typed, case .string(let s) = value { return Array(s.utf8) }
        return ((try? Array(JSONEncoder.wire.encode(value))) ?? []) + [0x0a]
    }

    /// The value a file's bytes stand for.
    func value(_ bytes: [UInt8], typed: Bool) throws(CoreError) -> KVValue {
        if typed {
            guard let v = try? JSONDecoder().decode(KVValue.self, from: Data(bytes)) else {
                throw .invalidArgument("not a typed JSON value")
            }
            return v
        }
        return KVValue(text: bytes)
    }

    func changeBytes() -> [UInt8] {
        var out: [UInt8] = []
        for c in kv?.changeRecords() ?? [] { out += ((try? Array(JSONEncoder.wire.encode(c))) ?? []) + [0x0a] }
        return out
    }

    /// Ids of keys with a handle open (a key being created has no value before its close).
    func openIDs() -> Set<String> { Set(fs.openFiles().map(\.id).filter { NodeID(parsing: $0).isKeyValue }) }

    /// Keys being created: a handle is open on them and they have no value yet.
    func newKeys() throws(CoreError) -> Set<String> {
        var keys = Set<String>()
        for id in openIDs() {
            guard case .kvKey(let key, _) = NodeID(parsing: id), try kv?.value(key) == nil else { continue }
            keys.insert(key)
        }
        return keys
    }

    // MARK: operations

    func create(in parent: NodeID, _ name: String) throws(CoreError) -> (Entry, Opened) {
        guard case .kvDir(let typed) = parent else { throw .readOnly }
        if name.utf8.count > KVLimits.maxKeyBytes { throw .nameTooLong }
        if !typed && KeyValueTree.isFolderOwnName(name) { throw .exists }
        let id = NodeID.kvKey(name, typed: typed)
        // A new key past the count is refused here, not only at close, which shells do not check.
        if try kv?.value(name) == nil, try newKeys().subtracting([name]).count + (kv?.keys().count ?? 0) >= KVLimits.maxKeys {
            throw .quotaExceeded("over the quota (more than \(KVLimits.maxKeys) keys)")
        }
        let file = try handle(id.description, content: [], writable: true)
        file.wrote = true
        let fh = fs.addHandle(file)
        // (The key's node exists from here on: a handle is open on it.)
        let made: Node?
        do { made = try node(id) } catch {
            fs.release(fh)
            throw error
        }
        guard let made else {
            fs.release(fh)
            throw .notFound
        }
        return (fs.entry(id.description, made), Opened(fh: fh, directIO: true))
    }

    func open(_ id: String, _ node: Node, flags: Int32, _ caller: Caller, waiter: Waiter,
              done: @escaping Completion<Opened>) {
        done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try open(id, node, flags: flags) } })
    }

    private func open(_ id: String, _ node: Node, flags: Int32) throws(CoreError) -> Opened {
        let writable = flags & O_ACCMODE != O_RDONLY
        let truncate = flags & O_TRUNC != 0
        let content: [UInt8]
        switch node {
        case .kvChanges:
            if writable { throw .readOnly }
            content = changeBytes()
        case .kvKey(let key, let typed):
            content = truncate ? [] : try bytes(key, typed: typed)
        default:
            throw .isDirectory
        }
        let file = try handle(id, content: content, writable: writable)
        file.wrote = writable && truncate
        return Opened(fh: fs.addHandle(file), directIO: true)
    }

    /// A handle on a private unlinked file in the store's staging area, holding `content`.
    private func handle(_ id: String, content: [UInt8], writable: Bool) throws(CoreError) -> FileSystem.OpenFile {
        let fd = try fs.core.makeStagingFile(prefix: "kv")
        do { try fd.writeAll(content) } catch {
            fd.close()
            throw CoreError(error) // the store's own file: EIO, or ENOSPC
        }
        return FileSystem.OpenFile(id: id, fd: fd, writable: writable)
    }

    func write(_ data: WriteData, at offset: off_t, _ file: FileSystem.OpenFile) throws(AdapterError) -> Int {
        let limit = KeyValueTree.isTyped(file) ? KVLimits.maxBodyBytes : KVLimits.maxTotalBytes
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

    private static func isTyped(_ file: FileSystem.OpenFile) -> Bool {
        if case .kvKey(_, let typed) = NodeID(parsing: file.id) { return typed }
        return false
    }

    func flush(_ file: FileSystem.OpenFile) throws(CoreError) { try commit(file) }

    func release(_ file: FileSystem.OpenFile) {
        do { try commit(file, releasing: true) } catch {
            fs.log.error("release of \(file.id): the value is not stored: \(error)")
        }
    }

    /// Makes a written handle's bytes the key's value. Over a limit: the error and nothing stored; the
    /// handle's bytes are dropped either way, so release does not try again. A handle only opened with O_TRUNC
    /// (or created) commits its empty value at release, so a write refused after it stores nothing.
    private func commit(_ file: FileSystem.OpenFile, releasing: Bool = false) throws(CoreError) {
        guard file.wrote, file.wroteData || releasing, let kv, case .kvKey(let key, let typed) = NodeID(parsing: file.id) else {
            return
        }
        file.wrote = false
        file.wroteData = false
        if let refused = file.refused { throw refused }
        let size = Int(lseek(file.fd.raw, 0, SEEK_END))
        var bytes = [UInt8](repeating: 0, count: max(0, size))
        let got = bytes.withUnsafeMutableBytes { pread(file.fd.raw, $0.baseAddress, $0.count, 0) }
        if got != bytes.count { throw .io("cannot read the written value back") }
        try kv.set(key, try value(bytes, typed: typed))
    }

    func setattr(_ id: String, _ node: Node, _ changes: AttributeChanges, fh: UInt64?) throws(AdapterError) -> Attributes {
        guard case .kvKey = node else { throw .core(.readOnly) }
        if let size = changes.size {
            guard let fh, let file = fs.file(fh), file.writable else { throw .core(.readOnly) }
            if Int(size) > KVLimits.maxBodyBytes { throw .core(.fileTooBig) }
            if ftruncate(file.fd.raw, off_t(size)) != 0 { throw .system(.current) }
            file.refused = nil
            file.wrote = true
            file.wroteData = true
        }
        return Attributes(stat: fs.attributes(node, of: id), timeout: 0)
    }

    func remove(in parent: NodeID, _ name: String, directory: Bool, done: @escaping Completion<Void>) {
        done(Result { () throws(AdapterError) in try adapting { () throws(CoreError) in try remove(parent, name, directory: directory) } })
    }

    private func remove(_ parent: NodeID, _ name: String, directory: Bool) throws(CoreError) {
        guard !directory, case .kvDir(let typed) = parent, typed || !KeyValueTree.isFolderOwnName(name) else {
            throw .readOnly
        }
        guard let kv else { throw .notFound }
        if name.utf8.count > KVLimits.maxKeyBytes { throw .nameTooLong }
        try kv.set(name, nil)
    }
}
