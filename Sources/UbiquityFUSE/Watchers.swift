// Changes from other devices raise on this device the inotify events the same change made here would raise
// (Part 19), so editors, `tail -F`, build watchers and file managers see them. The kernel raises those events
// only for operations that pass through its VFS, so the daemon repeats each remote change through its own mount,
// from one thread of its own (the announcer), and answers that thread's requests from what the core holds
// already, changing nothing:
//
//   made elsewhere        looked up as absent, then mknod/mkdir/symlink      IN_CREATE
//   removed elsewhere     looked up as still there, then unlink/rmdir        IN_DELETE
//   moved elsewhere       the old name there and the new one absent, rename  IN_MOVED_FROM, IN_MOVED_TO
//   attributes            chmod to the mode it has                           IN_ATTRIB
//   content, local copy   opened for writing, truncated to its size, closed  IN_OPEN, IN_MODIFY, IN_CLOSE_WRITE
//     (held open elsewhere through passthrough: truncated by path)             IN_MODIFY
//   content, no copy      chmod to the mode it has                           IN_ATTRIB
//
// What must hold: only requests of the announcer thread (the kernel sends the caller's thread id with each)
// are answered this way, and only for the change it is repeating (`Scene`); nothing the announcer does reaches
// the core. Only changes in folders the kernel holds an inode of are repeated: nobody can watch a folder the
// kernel has not loaded (a watch pins its inode), so a first pull of a large container repeats nothing below
// what was looked at. The announcer gets its changes through the notifier queue, after the kernel's caches were
// told, holds no lock while it calls the mount, and nothing waits for it: a call that gets no answer (an
// unmount under way) holds up nobody. A repeat that fails (a name taken again meanwhile, no permission to
// chmod) is logged at debug level and given up: the change itself is in place already.
import Foundation
import Glibc
import UbiquityBase
import UbiquityCore

final class Announcer: Sendable {
    enum Change {
        /// `name` in `parent` now names an item.
        case added(parent: String, name: String)
        /// `name` in `parent` (at `path` in the mount; nil when `parent` is gone too) no longer names item `id`, a
        /// folder when `isDirectory`.
        case removed(parent: String, name: String, id: String, isDirectory: Bool, path: String?)
        case changed(id: String, content: Bool)
    }

    /// What the announcer is repeating now: names it looks up as absent, and names it looks up as still there.
    struct Scene {
        var absent: Set<String> = []
        /// Item id and whether it is a folder, by name.
        var present: [String: (id: String, isDirectory: Bool)] = [:]
        static func key(_ parent: String, _ name: String) -> String { parent + "/" + name }
    }

    private struct State {
        var queue: [Change] = []
        /// The announcer thread's id, once its loop has begun.
        var thread: pid_t = 0
        var scene = Scene()
        /// The file system it repeats changes through, and where that is mounted (both set at the mount).
        weak var fs: FileSystem?
        var mountpoint = ""
    }
    private let state = Locked(State())
    // Below the threads answering programs' requests: a burst from elsewhere must not slow them.
    private let loop = Loop(name: "announce", priority: .background)
    private let log = Logger("watch")
    /// Most changes kept waiting; past it the oldest are dropped (logged): a burst must not grow without bound.
    static let backlog = 100_000

    /// Starts repeating changes through `fs`, mounted at `mountpoint`; until then, changes are dropped.
    func start(_ fs: FileSystem, at mountpoint: String) {
        state.withLock {
            $0.fs = fs
            $0.mountpoint = mountpoint
        }
        loop.start { [self] in run() }
    }

    /// Ends the thread, waiting a moment for it: a repeat that is waiting for an answer of a mount whose loop
    /// has ended gets it at the unmount, and the thread then ends by itself.
    func stop() { loop.stopAndJoin(timeout: 1) }

    /// True for a request sent by the announcer thread.
    func isMine(_ caller: Caller) -> Bool {
        guard let pid = caller.pid else { return false }
        return state.withLock { $0.thread != 0 && $0.thread == pid }
    }

    /// True while its thread runs (from the mount to the unmount).
    var isRunning: Bool { loop.isRunning }

    /// The scene the announcer is in (for its own requests).
    var scene: Scene { state.withLock { $0.scene } }

    func add(_ change: Change) {
        guard loop.isRunning else { return }
        state.withLock { s in
            if s.queue.count >= Announcer.backlog { s.queue.removeFirst(s.queue.count / 2) }
            s.queue.append(change)
        }
        loop.wake()
    }

    private func run() {
        state.withLock { $0.thread = currentThreadID() }
        while !loop.isStopping {
            if state.withLock({ $0.queue.isEmpty }) {
                loop.pause(nanoseconds: 60_000_000_000)
                continue
            }
            // A moment to gather what one remote change brings (a move is a removal and an addition).
            usleep(20_000)
            let batch = state.withLock { s -> [Change] in
                defer { s.queue.removeAll() }
                return s.queue
            }
            repeatBatch(batch)
        }
    }

    private func repeatBatch(_ batch: [Change]) {
        guard let fs = state.withLock({ $0.fs }), fs.session != nil else { return }
        // Where each item added in the batch is now: a removal of the same item is its move (one look-up each).
        var addedAt: [String: Int] = [:]
        for (j, change) in batch.enumerated() {
            if case .added(let p, let n) = change, let id = fs.core.lookup(parent: p, name: n)?.id, addedAt[id] == nil {
                addedAt[id] = j
            }
        }
        let removedAt = removedPaths(batch)
        var removals: [String: (parent: String, name: String, isDirectory: Bool)] = [:]
        for case .removed(let parent, let name, let id, let isDir, _) in batch { removals[id] = (parent, name, isDir) }
        var done = Set<String>(), paired = Set<Int>()
        for (index, change) in batch.enumerated() {
            switch change {
            case .removed(let parent, let name, let id, let isDir, _):
                guard let path = removedAt[index] else { continue }
                if let j = addedAt.removeValue(forKey: id), case .added(let p, let n) = batch[j] {
                    paired.insert(j)
                    act("move", of: path, in: Scene(absent: [Scene.key(p, n)], present: [Scene.key(parent, name): (id, isDir)])) {
                        rename(path, self.path(fs, p, n))
                    }
                } else {
                    act("delete", of: path, in: Scene(present: removedChain(id, in: removals))) {
                        isDir ? rmdir(path) : unlink(path)
                    }
                }
                done.insert(id)
            case .added(let parent, let name):
                guard !paired.contains(index), let item = fs.core.lookup(parent: parent, name: name) else { continue }
                let path = self.path(fs, parent, name)
                act("create", of: path, in: Scene(absent: [Scene.key(parent, name)])) {
                    switch item.kind {
                    case .dir: return mkdir(path, 0o755)
                    case .symlink: return symlink(item.target ?? "", path)
                    case .file: return mknod(path, S_IFREG | 0o644, 0)
                    case .fifo, .socket: return 0
                    }
                }
                done.insert(item.id)
            case .changed(let id, let content):
                guard done.insert(id).inserted, let item = fs.core.item(id), let parent = item.parent else { continue }
                let path = self.path(fs, parent, item.name)
                if content && item.kind == .file && item.hasLocal && rewrite(path, size: item.size) { continue }
                act("attributes", of: path, in: Scene()) { chmod(path, mode_t(item.mode) & 0o7777) }
            }
        }
    }

    /// Where each item removed in the batch was, by its index. One below a folder removed in the same batch
    /// (`rm -rf` elsewhere: the files go before their folder, and all are gone from the core by now) was below
    /// that folder's path; one whose folder is nowhere to be found is not repeated.
    private func removedPaths(_ batch: [Change]) -> [Int: String] {
        var at: [Int: String] = [:], byID: [String: String] = [:]
        var unknown: [(index: Int, parent: String, name: String, id: String)] = []
        for (index, change) in batch.enumerated() {
            guard case .removed(let parent, let name, let id, _, let path) = change else { continue }
            if let path { at[index] = path; byID[id] = path } else { unknown.append((index, parent, name, id)) }
        }
        while true {
            let found = unknown.filter { byID[$0.parent] != nil }
            if found.isEmpty { return at }
            for r in found {
                let path = byID[r.parent]! + "/" + r.name
                at[r.index] = path
                byID[r.id] = path
            }
            unknown.removeAll { byID[$0.id] != nil }
        }
    }

    /// The names the removal of `id` needs looked up as still there: its own, and those of the folders above it
    /// removed in the same batch (`removals`; gone from the core, they are still on the path to it).
    private func removedChain(_ id: String, in removals: [String: (parent: String, name: String, isDirectory: Bool)])
        -> [String: (id: String, isDirectory: Bool)] {
        var present: [String: (id: String, isDirectory: Bool)] = [:]
        var cur = id
        while let r = removals[cur], present.count <= removals.count {
            present[Scene.key(r.parent, r.name)] = (cur, r.isDirectory)
            cur = r.parent
        }
        return present
    }

    /// Opens `path` for writing, truncates it to `size` and closes it. Where the open fails (the kernel refuses
    /// an ordinary open of a file other programs hold open through passthrough, with EIO), truncates it by
    /// path: IN_MODIFY alone, which is what a reader following the file (`tail -F`) waits for.
    private func rewrite(_ path: String, size: Int64) -> Bool {
        var ok = false
        act("content", of: path, in: Scene()) {
            let fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else {
                let rc = truncate(path, off_t(size))
                ok = rc == 0
                return rc
            }
            defer { close(fd) }
            let rc = ftruncate(fd, off_t(size))
            ok = rc == 0
            return rc
        }
        return ok
    }

    private func act(_ what: String, of path: String, in scene: Scene, _ call: () -> Int32) {
        state.withLock { $0.scene = scene }
        defer { state.withLock { $0.scene = Scene() } }
        if call() != 0 { log.debug("the \(what) of \(path) made elsewhere raised no event here: \(Errno.current)") }
    }

    /// Where `name` in folder `parent` is in the mount.
    func path(_ fs: FileSystem, _ parent: String, _ name: String) -> String {
        let dir = fs.core.path(of: parent)
        return state.withLock { $0.mountpoint } + (dir.isEmpty ? "" : "/" + dir) + "/" + name
    }
}

extension FileSystem {
    // MARK: the announcer's own requests

    /// lookup(2) from the announcer: the entry the change it repeats had (nil: look it up as any other).
    func announcedLookup(_ parent: UInt64, _ name: String) -> Entry? {
        guard let dirID = inodes.id(parent) else { return nil }
        let key = Announcer.Scene.key(dirID, name), scene = announcer.scene
        if scene.absent.contains(key) { return .negative(timeout: 0) }
        guard let (id, isDirectory) = scene.present[key] else { return nil }
        // Gone from the core (deleted elsewhere) or elsewhere now (moved): what the kernel needs to remove or
        // move it, as the item was.
        if let item = core.item(id) {
            return Entry(ino: inodes.remember(id), attributes: attributes(item), timeout: 0)
        }
        return Entry(ino: inodes.remember(id), attributes: goneAttributes(id, isDirectory: isDirectory), timeout: 0)
    }

    /// getattr(2) from the announcer of an item gone from the core that the change it repeats still has (a
    /// folder deleted elsewhere with its files, which the kernel checks on the way to each of them); nil for
    /// any other.
    func announcedAttributes(_ ino: UInt64) -> Attributes? {
        guard let id = inodes.id(ino), core.item(id) == nil,
              let gone = announcer.scene.present.values.first(where: { $0.id == id }) else { return nil }
        return Attributes(stat: goneAttributes(id, isDirectory: gone.isDirectory), timeout: 0)
    }

    /// What the kernel is told of an item gone from the core while the announcer repeats its removal.
    private func goneAttributes(_ id: String, isDirectory: Bool) -> stat {
        virtualAttributes(number: inodes.number(id), mode: isDirectory ? S_IFDIR | 0o755 : S_IFREG | 0o644, size: 0,
                          mtime: nowNanoseconds())
    }

    /// mknod, mkdir or symlink from the announcer: the item made elsewhere, as it is.
    func announcedEntry(_ parent: UInt64, _ name: String) throws(CoreError) -> Entry {
        guard let dirID = inodes.id(parent), let item = core.lookup(parent: dirID, name: name) else { throw .notFound }
        return entry(item)
    }

    /// open(2) from the announcer: a handle that reads and writes nothing.
    func announcedOpen() throws(CoreError) -> Opened {
        let fd: FileDescriptor
        do { fd = try FileDescriptor.open("/dev/null", O_RDONLY) } catch { throw CoreError(error) }
        return Opened(fh: addHandle(OpenFile(id: NodeID.announced.description, fd: fd, writable: false)), directIO: true)
    }

    /// Queues a change for the announcer, while mounted only: unmounted, its paths would be below "" (this
    /// machine's own root) or below the bare mount point.
    func repeatElsewhere(_ change: Announcer.Change) {
        notifier.async { [self] in
            guard session != nil else { return }
            announcer.add(change)
        }
    }
}
