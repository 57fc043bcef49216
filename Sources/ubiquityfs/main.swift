// The `ubiquityfs` command: mount, unmount, the remote stub, and the status and transfer actions.
//
// What must hold: the exit status is 0 on success (`--help` too), 2 for a usage error (an unknown command or
// option, told with a pointer to `--help`) and 1 for any other failure, told as one plain line on stderr
// (`fail`); results go to stdout. SIGPIPE is ignored, so a reader that goes away (`| head`) makes a write
// error, not a kill. This file only dispatches: each command's work is in its own file.
import Foundation
import CFuse
import Glibc
import UbiquityBase

/// The release: the number of the last part of the road it has (docs: README, "Where we stand").
let ubiquityfsVersion = "0.17.0"

let usage = """
usage: ubiquityfs COMMAND [OPTIONS]
       ubiquityfs --version

commands:
  mount MOUNTPOINT [--remote URL[,URL...] --token-file FILE [--ca-file FILE]] [--container ID] [--store DIR]
        [--device NAME] [--foreground]
                                    mount a container (without --remote: on a private stub started for it)
  mount MOUNTPOINT --containers ID,ID,... | --all-containers [...]
                                    several containers, a folder each (iCloud~com~example~notes)
  unmount [--force] MOUNTPOINT      unmount (refused while changes wait to upload, unless --force)
  remote serve --data DIR [--listen 127.0.0.1:PORT] [--latency-ms N] [--bandwidth BYTES_PER_S]
        [--token-file FILE] [--tls-cert FILE --tls-key FILE]
                                    run the remote stub
  remote seed --data DIR [--container ID] [--device NAME] DEST=SOURCE...
                                    put local files into a stopped stub's container, as if from another device
  remote usage --data DIR [--json]  the bytes of each container's live files, history and Recently Deleted
  remote user add|remove|list [NAME] --data DIR
  remote device add|list|revoke USER [DEVICE] [--key-file FILE] --data DIR
                                    the remote's users and their devices' keys
  status [--json] PATH...           the sync status of files in a mount, as a table
  evict | download [--wait] | pin | unpin PATH...
                                    drop local copies, fetch them, keep them downloaded, or stop keeping them
  sync --wait PATH                  wait until every change in the mount (or the file) is on the remote
  check --store DIR [--repair]      check a store's database and local copies
  query MOUNT [--scope documents|data|all] [--name GLOB] [--container ID] [--live] [--json]
                                    list the mount's items with their status; --live: follow their changes
  pause | resume PATH               stop syncing a container (its changes wait here), or go on
  usage [--json] MOUNT              what the account stores per container, against its quota
  kv get|set|delete|list|watch [--json] MOUNT [KEY [VALUE]]
                                    the container's key-value store
  trash list|restore|empty [--json] MOUNT [PATH...]
                                    Recently Deleted: list it, bring items back, or remove them for good
  history [--json] PATH             the kept versions of a file
  rewind DIR --to TIME [--dry-run]  bring a folder back to how it was on the remote at TIME
  delete-data PATH [--documents] [--yes]
                                    delete an app's data (outside Documents/) on every device, restorable whole
  share add|remove PATH USER [--read-only] | share list [--json] [PATH] | share leave MOUNT
                                    share a folder with another user of the remote, or stop; list the shares
  chunks [--json | --summary] FILE...
                                    how a file's content is cut into chunks (each with its SHA-256, or a hole)

Run 'ubiquityfs COMMAND --help' for the options of one command.
"""

OpenSSLAtExit.leaveCleanupToTheKernel()
signal(SIGPIPE, SIG_IGN)
var words = Array(CommandLine.arguments.dropFirst())
guard let command = words.first else { print(usage); exit(2) }
words.removeFirst()

do {
    switch command {
    case "--help", "-h", "help":
        print(usage)
    case "--version", "-V":
        print("ubiquityfs \(ubiquityfsVersion) (libfuse \(String(cString: fuse_pkgversion())))")
    case "mount":
        try MountCommand.run(words)
    case "unmount", "umount":
        try UnmountCommand.run(words)
    case "remote":
        try RemoteCommand.run(words)
    case "status":
        try StatusCommand.runStatus(words)
    case "evict", "download", "pin", "unpin":
        try StatusCommand.runAction(command, words)
    case "sync":
        try SyncCommand.run(words)
    case "check":
        try CheckCommand.run(words)
    case "usage":
        try UsageCommand.run(words)
    case "pause", "resume":
        try PauseCommand.run(command, words)
    case "query":
        try QueryCommand.run(words)
    case "kv":
        try KVCommand.run(words)
    case "chunks":
        try ChunksCommand.run(words)
    case "trash":
        try TrashCommand.run(words)
    case "history":
        try TrashCommand.runHistory(words)
    case "rewind":
        try TrashCommand.runRewind(words)
    case "delete-data":
        try DeleteDataCommand.run(words)
    case "share":
        try ShareCommand.run(words)
    default:
        fail("unknown command '\(command)'; see 'ubiquityfs --help'", code: 2)
    }
} catch let error as UsageError {
    fail("\(error.description); see 'ubiquityfs \(command) --help'", code: 2)
} catch {
    fail("\(error)")
}
