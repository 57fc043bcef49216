// FUSE passthrough (kernel 6.9+) on libfuse 3.14, which has no API for it: a custom io between libfuse and
// /dev/fuse that amends the INIT reply (FUSE_PASSTHROUGH, max_stack_depth) and the open replies marked with a
// backing id (FOPEN_PASSTHROUGH). See docs/PASSTHROUGH.md for the kernel interface and what it demands.
//
// What must hold: `ubq_pt_install` is called after fuse_session_mount and before the loop reads INIT;
// passthrough is only asked for when the kernel offers it and the writeback cache is off; a mark is set
// just before its open reply is sent and cleared just after, so no mark outlives its reply. A process may
// serve several sessions (a mount of several containers): each connection's state is its own, found by the
// fd of its /dev/fuse (`devfd`, fuse_session_fd), and marks are keyed by handle number alone, so handle
// numbers must be unique in the process.
#ifndef UBQ_PASSTHROUGH_H
#define UBQ_PASSTHROUGH_H
#include <stdint.h>

struct fuse_session;

/// Puts the custom io on the mounted session; `want` = ask for passthrough when offered. 0 or -errno.
int ubq_pt_install(struct fuse_session *se, int want);
/// 1 once the INIT reply asked for passthrough (the kernel offered it and we wanted it), else 0.
int ubq_pt_negotiated(int devfd);
/// 1 when the request this thread read last (a write, a setattr, an open or a create) asks the daemon to
/// clear the setuid bit, and the setgid bit if the group may execute; its handler calls this on that thread.
int ubq_kills_suidgid(void);
/// 1 when the kernel's INIT offered passthrough (whether or not we took it).
int ubq_pt_offered(int devfd);
/// Registers `fd` (a file opened by the daemon) as a backing file: its id (> 0), or -errno.
int ubq_pt_backing_open(int devfd, int fd);
/// Drops a backing id (files already open on it keep their backing file). 0 or -errno.
int ubq_pt_backing_close(int devfd, int backing_id);
/// The open (or create) reply carrying file handle `fh` gets FOPEN_PASSTHROUGH with `backing_id`.
/// Returns 0, or -1 when too many marks are pending (then the open goes the ordinary way).
int ubq_pt_mark(uint64_t fh, int32_t backing_id);
/// Clears the mark for `fh`; returns 1 when its reply was amended, 0 when it was not (or never marked).
int ubq_pt_unmark(uint64_t fh);

#endif
