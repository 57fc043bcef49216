// The custom io of passthrough.h. Constants and layouts are the kernel's UAPI (include/uapi/linux/fuse.h,
// protocol 7.40, Linux 6.9): Debian's /usr/include/linux/fuse.h here predates them, so they are defined here.
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include "passthrough.h"
#include <fuse3/fuse_lowlevel.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#define UBQ_FUSE_INIT 26
#define UBQ_FUSE_WRITEBACK_CACHE (1u << 16)
#define UBQ_FUSE_INIT_EXT (1u << 30)
#define UBQ_FUSE_PASSTHROUGH_FLAGS2 (1u << (37 - 32)) // FUSE_PASSTHROUGH is 1ULL << 37, carried in flags2
#define UBQ_FOPEN_PASSTHROUGH (1u << 7)
#define UBQ_FUSE_HANDLE_KILLPRIV_V2 (1u << 28)
#define UBQ_FUSE_SETATTR 4
#define UBQ_FUSE_OPEN 14
#define UBQ_FUSE_WRITE 16
#define UBQ_FUSE_CREATE 35
#define UBQ_FATTR_KILL_SUIDGID (1u << 11)
#define UBQ_FUSE_WRITE_KILL_SUIDGID (1u << 2)
#define UBQ_FUSE_OPEN_KILL_SUIDGID (1u << 0)

struct ubq_backing_map { int32_t fd; uint32_t flags; uint64_t padding; };
#define UBQ_FUSE_DEV_IOC_MAGIC 229
#define UBQ_FUSE_DEV_IOC_BACKING_OPEN _IOW(UBQ_FUSE_DEV_IOC_MAGIC, 1, struct ubq_backing_map)
#define UBQ_FUSE_DEV_IOC_BACKING_CLOSE _IOW(UBQ_FUSE_DEV_IOC_MAGIC, 2, uint32_t)

struct ubq_in_header { uint32_t len, opcode; uint64_t unique, nodeid; uint32_t uid, gid, pid; uint16_t extlen, pad; };
struct ubq_init_in { uint32_t major, minor, max_readahead, flags, flags2, unused[11]; };
struct ubq_out_header { uint32_t len; int32_t error; uint64_t unique; };
struct ubq_init_out {
    uint32_t major, minor, max_readahead, flags;
    uint16_t max_background, congestion_threshold;
    uint32_t max_write, time_gran;
    uint16_t max_pages, map_alignment;
    uint32_t flags2, max_stack_depth;
    uint16_t request_timeout, unused[11];
};
struct ubq_open_out { uint64_t fh; uint32_t open_flags; int32_t backing_id; };
// Where the requests that carry a kill flag keep it: the byte offset of its 32-bit field in the request's
// argument (fuse_setattr_in.valid, fuse_open_in.open_flags, fuse_write_in.write_flags, fuse_create_in.open_flags).
#define UBQ_SETATTR_VALID_AT 0
#define UBQ_OPEN_FLAGS_AT 4
#define UBQ_WRITE_FLAGS_AT 20
#define UBQ_CREATE_FLAGS_AT 12
#define UBQ_ENTRY_OUT_SIZE 128

// One FUSE connection of the process (a daemon of several containers has one per container), found by the
// fd of its /dev/fuse: what it asked for and what its INIT offered and settled.
struct ubq_conn {
    _Atomic int fd; // -1: a free slot
    int want;
    _Atomic int offered, negotiated, killpriv;
    _Atomic uint64_t init_unique;
};
#define UBQ_CONNS 64
static struct ubq_conn ubq_conns[UBQ_CONNS];
static pthread_once_t ubq_conns_once = PTHREAD_ONCE_INIT;
// The kill flag of the request this thread read last: libfuse's loop threads each read a request and run its
// handler on the same thread, so the handler's call of ubq_kills_suidgid sees its own request's flag.
static _Thread_local int ubq_kill;

static void ubq_conns_init(void) {
    for (int i = 0; i < UBQ_CONNS; i++) atomic_store(&ubq_conns[i].fd, -1);
}

// The connection of /dev/fuse fd `fd` (NULL when it has no custom io of ours).
static struct ubq_conn *ubq_conn(int fd) {
    for (int i = 0; i < UBQ_CONNS; i++) if (atomic_load(&ubq_conns[i].fd) == fd) return &ubq_conns[i];
    return NULL;
}

#define UBQ_MARKS 256
static pthread_mutex_t ubq_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t fh; int32_t id; int used, done; } ubq_marks[UBQ_MARKS];
static _Atomic int ubq_mark_count;

// Whether the 32-bit field at `at` in a request argument of `left` bytes has `bit` set (0 if it is not there).
static int ubq_has_bit(const void *arg, size_t left, size_t at, uint32_t bit) {
    uint32_t field;
    if (left < at + sizeof field) return 0;
    memcpy(&field, (const char *)arg + at, sizeof field);
    return (field & bit) != 0;
}

static ssize_t ubq_read(int fd, void *buf, size_t len, void *ud) {
    (void)ud;
    ssize_t n = read(fd, buf, len); // libfuse reads errno after -1: return as read(2) does
    if (n < 0) return n;
    ubq_kill = 0;
    if ((size_t)n < sizeof(struct ubq_in_header)) return n;
    const struct ubq_in_header *h = buf;
    const void *arg = h + 1;
    size_t left = (size_t)n - sizeof(struct ubq_in_header);
    struct ubq_conn *c;
    switch (h->opcode) {
    case UBQ_FUSE_INIT:
        if (left >= sizeof(struct ubq_init_in) && (c = ubq_conn(fd)) != NULL) {
            const struct ubq_init_in *in = arg;
            int ext = (in->flags & UBQ_FUSE_INIT_EXT) != 0;
            atomic_store(&c->offered, ext && (in->flags2 & UBQ_FUSE_PASSTHROUGH_FLAGS2));
            atomic_store(&c->killpriv, (in->flags & UBQ_FUSE_HANDLE_KILLPRIV_V2) != 0);
            atomic_store(&c->init_unique, h->unique);
        }
        break;
    case UBQ_FUSE_SETATTR: ubq_kill = ubq_has_bit(arg, left, UBQ_SETATTR_VALID_AT, UBQ_FATTR_KILL_SUIDGID); break;
    case UBQ_FUSE_OPEN: ubq_kill = ubq_has_bit(arg, left, UBQ_OPEN_FLAGS_AT, UBQ_FUSE_OPEN_KILL_SUIDGID); break;
    case UBQ_FUSE_WRITE: ubq_kill = ubq_has_bit(arg, left, UBQ_WRITE_FLAGS_AT, UBQ_FUSE_WRITE_KILL_SUIDGID); break;
    case UBQ_FUSE_CREATE: ubq_kill = ubq_has_bit(arg, left, UBQ_CREATE_FLAGS_AT, UBQ_FUSE_OPEN_KILL_SUIDGID); break;
    }
    return n;
}

static void ubq_amend_init(struct ubq_conn *c, struct ubq_init_out *out) {
    // Kernel 5.12+: the kernel stops asking for security.capability at every write to a file with no setuid or
    // setgid bit (SB_NOSEC), and leaves the clearing of those bits to the daemon (ubq_kills_suidgid).
    if (atomic_load(&c->killpriv)) out->flags |= UBQ_FUSE_HANDLE_KILLPRIV_V2;
    if (!c->want || !atomic_load(&c->offered) || (out->flags & UBQ_FUSE_WRITEBACK_CACHE)) return;
    out->flags |= UBQ_FUSE_INIT_EXT;
    out->flags2 |= UBQ_FUSE_PASSTHROUGH_FLAGS2;
    out->max_stack_depth = 1; // the backing files are on a plain (unstacked) file system
    atomic_store(&c->negotiated, 1);
}

static void ubq_amend_open(struct ubq_open_out *out) {
    pthread_mutex_lock(&ubq_lock);
    for (int i = 0; i < UBQ_MARKS; i++) {
        if (ubq_marks[i].used && ubq_marks[i].fh == out->fh) {
            out->open_flags |= UBQ_FOPEN_PASSTHROUGH;
            out->backing_id = ubq_marks[i].id;
            ubq_marks[i].done = 1;
            break;
        }
    }
    pthread_mutex_unlock(&ubq_lock);
}

static ssize_t ubq_writev(int fd, struct iovec *iov, int count, void *ud) {
    (void)ud;
    struct ubq_conn *c = ubq_conn(fd);
    if (c != NULL && count >= 2 && iov[0].iov_len == sizeof(struct ubq_out_header)) {
        const struct ubq_out_header *h = iov[0].iov_base;
        if (h->error == 0 && h->unique == atomic_load(&c->init_unique) && iov[1].iov_len >= 40) {
            ubq_amend_init(c, iov[1].iov_base);
        } else if (h->error == 0 && atomic_load(&ubq_mark_count) > 0) {
            // Replies of 16 bytes (open, opendir) or an entry and an open (create); handles are unique.
            if (count == 2 && iov[1].iov_len == sizeof(struct ubq_open_out))
                ubq_amend_open(iov[1].iov_base);
            else if (count == 2 && iov[1].iov_len == UBQ_ENTRY_OUT_SIZE + sizeof(struct ubq_open_out))
                ubq_amend_open((void *)((char *)iov[1].iov_base + UBQ_ENTRY_OUT_SIZE));
        }
    }
    return writev(fd, iov, count); // as writev(2): libfuse reads errno after -1
}

// Replies with data from a file (reads of files not passed through) keep libfuse's splice: without this
// callback libfuse copies them through user space. Requests are never spliced in (FUSE_CAP_SPLICE_READ is
// off, and INIT is read before any capability), so every request passes through ubq_read.
static ssize_t ubq_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len, unsigned int flags,
                               void *ud) {
    (void)ud;
    return splice(fdin, offin, fdout, offout, len, flags);
}

int ubq_pt_install(struct fuse_session *se, int want) {
    static const struct fuse_custom_io io = { .writev = ubq_writev, .read = ubq_read, .splice_send = ubq_splice_send };
    pthread_once(&ubq_conns_once, ubq_conns_init);
    int fd = fuse_session_fd(se);
    pthread_mutex_lock(&ubq_lock);
    struct ubq_conn *c = ubq_conn(fd); // an fd of a session that ended, now another's
    if (c == NULL) c = ubq_conn(-1);
    if (c != NULL) {
        c->want = want;
        atomic_store(&c->offered, 0);
        atomic_store(&c->negotiated, 0);
        atomic_store(&c->killpriv, 0);
        atomic_store(&c->init_unique, UINT64_MAX);
        atomic_store(&c->fd, fd);
    }
    pthread_mutex_unlock(&ubq_lock);
    if (c == NULL) return -1;
    return fuse_session_custom_io(se, &io, fd);
}

int ubq_pt_negotiated(int devfd) {
    struct ubq_conn *c = ubq_conn(devfd);
    return c != NULL && atomic_load(&c->negotiated);
}
int ubq_kills_suidgid(void) { return ubq_kill; }
int ubq_pt_offered(int devfd) {
    struct ubq_conn *c = ubq_conn(devfd);
    return c != NULL && atomic_load(&c->offered);
}

int ubq_pt_backing_open(int devfd, int fd) {
    struct ubq_backing_map map = { .fd = fd, .flags = 0, .padding = 0 };
    int id = ioctl(devfd, UBQ_FUSE_DEV_IOC_BACKING_OPEN, &map);
    return id < 0 ? -errno : id;
}

int ubq_pt_backing_close(int devfd, int backing_id) {
    uint32_t id = (uint32_t)backing_id;
    return ioctl(devfd, UBQ_FUSE_DEV_IOC_BACKING_CLOSE, &id) < 0 ? -errno : 0;
}

int ubq_pt_mark(uint64_t fh, int32_t backing_id) {
    pthread_mutex_lock(&ubq_lock);
    int slot = -1;
    for (int i = 0; i < UBQ_MARKS && slot < 0; i++) if (!ubq_marks[i].used) slot = i;
    if (slot >= 0) {
        ubq_marks[slot].fh = fh; ubq_marks[slot].id = backing_id;
        ubq_marks[slot].used = 1; ubq_marks[slot].done = 0;
        atomic_fetch_add(&ubq_mark_count, 1);
    }
    pthread_mutex_unlock(&ubq_lock);
    return slot >= 0 ? 0 : -1;
}

int ubq_pt_unmark(uint64_t fh) {
    int done = 0;
    pthread_mutex_lock(&ubq_lock);
    for (int i = 0; i < UBQ_MARKS; i++) {
        if (ubq_marks[i].used && ubq_marks[i].fh == fh) {
            done = ubq_marks[i].done;
            ubq_marks[i].used = 0;
            atomic_fetch_sub(&ubq_mark_count, 1);
            break;
        }
    }
    pthread_mutex_unlock(&ubq_lock);
    return done;
}
