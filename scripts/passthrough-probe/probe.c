// Step 1 of docs/PASSTHROUGH.md: a one-file FUSE file system on libfuse 3.14's low-level API that opens its
// file with FUSE passthrough through Sources/CPassthrough, and counts the read requests it still sees.
// Build and run (as root): see run.sh next to it.
#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include "passthrough.h"
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *backing_path;
static int use_pt;
static _Atomic long reads_seen;

static void fill(struct stat *st, fuse_ino_t ino) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == 1) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; return; }
    struct stat b; stat(backing_path, &b);
    st->st_mode = S_IFREG | 0644; st->st_nlink = 1; st->st_size = b.st_size;
}
static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    if (parent != 1 || strcmp(name, "f")) return (void)fuse_reply_err(req, ENOENT);
    struct fuse_entry_param e = { .ino = 2, .attr_timeout = 1, .entry_timeout = 1 };
    fill(&e.attr, 2); fuse_reply_entry(req, &e);
}
static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi; struct stat st; fill(&st, ino); fuse_reply_attr(req, &st, 1);
}
static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    int fd = open(backing_path, fi->flags & O_ACCMODE);
    if (fd < 0) return (void)fuse_reply_err(req, errno);
    fi->fh = (uint64_t)fd;
    int id = 0;
    if (use_pt && ubq_pt_negotiated()) {
        id = ubq_pt_backing_open(fd);
        fprintf(stderr, "probe: BACKING_OPEN fd %d -> %d%s\n", fd, id, id < 0 ? strerror(-id) : "");
        if (id > 0) ubq_pt_mark(fi->fh, id);
    }
    fuse_reply_open(req, fi);
    if (id > 0) {
        fprintf(stderr, "probe: open reply amended: %d\n", ubq_pt_unmark(fi->fh));
        // The kernel holds its own reference once the open succeeded: the id can go.
        fprintf(stderr, "probe: BACKING_CLOSE %d -> %d\n", id, ubq_pt_backing_close(id));
    }
}
static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino; atomic_fetch_add(&reads_seen, 1);
    char *buf = malloc(size); ssize_t n = pread((int)fi->fh, buf, size, off);
    if (n < 0) fuse_reply_err(req, errno); else fuse_reply_buf(req, buf, (size_t)n);
    free(buf);
}
static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino; close((int)fi->fh);
    fprintf(stderr, "probe: release, read requests seen so far: %ld\n", atomic_load(&reads_seen));
    fuse_reply_err(req, 0);
}
static void op_init(void *ud, struct fuse_conn_info *conn) {
    (void)ud; conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: probe MOUNTPOINT BACKING_FILE 0|1\n"); return 2; }
    backing_path = argv[2]; use_pt = atoi(argv[3]);
    struct fuse_lowlevel_ops ops = { .init = op_init, .lookup = op_lookup, .getattr = op_getattr,
        .open = op_open, .read = op_read, .release = op_release };
    char *fargv[] = { "probe", "-o", "fsname=probe", NULL };
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se || fuse_session_mount(se, argv[1]) != 0) return 1;
    int rc = ubq_pt_install(se, use_pt);
    fprintf(stderr, "probe: custom io installed: %d\n", rc);
    fuse_set_signal_handlers(se);
    // The first request is INIT: the loop reads it through the custom io.
    rc = fuse_session_loop(se);
    fprintf(stderr, "probe: offered %d negotiated %d, read requests seen: %ld\n",
            ubq_pt_offered(), ubq_pt_negotiated(), atomic_load(&reads_seen));
    fuse_remove_signal_handlers(se); fuse_session_unmount(se); fuse_session_destroy(se);
    return rc;
}
