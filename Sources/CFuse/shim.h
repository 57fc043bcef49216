// libfuse3's low-level API, and the few helpers Swift cannot express: macros, bitfields and the loop config.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

// Runs the multi-threaded session loop with a bounded number of idle threads.
static inline int ubq_session_loop_mt(struct fuse_session *se, unsigned int max_idle, unsigned int max_threads) {
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_idle_threads(cfg, max_idle);
    fuse_loop_cfg_set_max_threads(cfg, max_threads);
    int rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
    return rc;
}

// Replies to a read with bytes of an open file, letting libfuse splice them without a copy through us.
static inline int ubq_reply_fd_read(fuse_req_t req, int fd, size_t size, off_t off) {
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = fd;
    buf.buf[0].pos = off;
    return fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

// Writes the bytes of a write request to an open file at `off`; with splice they go from the kernel's pipe
// to the file without a copy through us. Returns the count, or a negative errno.
static inline ssize_t ubq_write_buf_to_fd(struct fuse_bufvec *src, int fd, off_t off) {
    struct fuse_bufvec dst = FUSE_BUFVEC_INIT(fuse_buf_size(src));
    dst.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    dst.buf[0].fd = fd;
    dst.buf[0].pos = off;
    return fuse_buf_copy(&dst, src, FUSE_BUF_SPLICE_MOVE);
}

// Bitfields of fuse_file_info.
static inline void ubq_fi_set_keep_cache(struct fuse_file_info *fi, int on) { fi->keep_cache = on ? 1 : 0; }
static inline void ubq_fi_set_direct_io(struct fuse_file_info *fi, int on) { fi->direct_io = on ? 1 : 0; }

// Capabilities asked of the kernel at init.
static inline void ubq_conn_init(struct fuse_conn_info *conn, unsigned max_write) {
    conn->max_write = max_write;
    conn->max_readahead = max_write;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
    // (splice for write requests measured slower here: FUSE_CAP_SPLICE_READ stays off)
    if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    // No writeback cache: with it the kernel keeps its own size and times of regular files and ignores the
    // sizes we report, so a file changed on another device would keep showing its old size here.
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
    // The kernel clears setuid and setgid itself at a chown, a truncation and a write by another user (a
    // passthrough write never reaches us), sending the new mode as a setattr.
    conn->want &= ~(unsigned)FUSE_CAP_HANDLE_KILLPRIV;
    conn->want &= ~(unsigned)FUSE_CAP_POSIX_LOCKS;
    conn->want &= ~(unsigned)FUSE_CAP_FLOCK_LOCKS;
}

static inline int ubq_is_dir_mode(mode_t m) { return S_ISDIR(m); }
