// The FUSE floor for scripts/bench: a minimal passthrough file system on libfuse3's low-level API.
//
// usage: floor BACKING_DIR MOUNTPOINT [-d]
//
// What must hold here:
// - It does only what any FUSE file system must do per request: every operation is passed to the backing
//   directory with *at() system calls on one O_PATH descriptor per known inode, so what it costs is the floor
//   that FUSE itself sets (the kernel round trip and libfuse's dispatch), not the work of a real file system.
// - It is set up like ubiquityfs (Sources/UbiquityFUSE/Session.swift, Sources/CFuse/shim.h and
//   FileSystem.swift): the same mount options (default_permissions, allow_other as root), the same INIT
//   wishes (1 MiB max_write and readahead, replies spliced, readdirplus, parallel directory operations; no
//   writeback cache, no locks), the same cache timeouts (10 s for entries, attributes and negative entries),
//   keep_cache on open and not on create, and the same multi-threaded loop (10 idle, 64 threads at most).
// - Extended attributes are those of a plain file system with none set: getxattr answers ENODATA and
//   listxattr an empty list (never ENOSYS, which would make the kernel stop asking and flatter the floor).
// - An inode lives while the kernel holds a lookup of it: known inodes are found by the backing (st_dev,
//   st_ino) in one table behind one mutex, and a forget that brings the count to zero closes and frees it.
// - It raises its limit of open files as far as it may (the hard limit, or the kernel's nr_open with
//   CAP_SYS_RESOURCE). Past a budget under that limit (a 100,000-item tree is 100,000 inodes), a new
//   non-directory is kept by its file handle instead (name_to_handle_at) and opened by it (open_by_handle_at)
//   for the request that needs it; directories, the parents of every *at() call, always keep their descriptor.
// - Files are created by the daemon's own user (the bench runs as root); no ownership is passed through.
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

static const double cache_timeout = 10.0;  // as FileSystem.cacheTimeout in ubiquityfs

// ------------------------------------------------------------------------------------------- inodes

struct node {
    int fd;             // O_PATH|O_NOFOLLOW descriptor of the backing object, or -1: then `handle` is set
    struct file_handle *handle;
    dev_t dev;
    ino_t ino;
    uint64_t nlookup;   // lookups the kernel holds; the root is never forgotten
    struct node *next;  // chain in the table
};

static struct node root;
static struct node **table;
static size_t table_size, table_count;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static long fds_held, fd_budget;  // descriptors the nodes hold, and how many they may (under table_lock)
static int handles_work;          // whether file handles can be made and opened here (set once at start)
static int mount_fd = -1;         // the backing directory opened for reading: open_by_handle_at refuses O_PATH

static size_t slot(dev_t dev, ino_t ino, size_t size) {
    uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)dev;
    return (size_t)(h % size);
}

// Doubles the table; called with the lock held.
static void grow(void) {
    size_t size = table_size ? table_size * 2 : 4096;
    struct node **t = calloc(size, sizeof *t);
    if (!t) return;  // the chains just get longer
    for (size_t i = 0; i < table_size; i++) {
        for (struct node *n = table[i], *next; n; n = next) {
            next = n->next;
            size_t s = slot(n->dev, n->ino, size);
            n->next = t[s];
            t[s] = n;
        }
    }
    free(table);
    table = t;
    table_size = size;
}

static struct node *node_of(fuse_ino_t ino) {
    return ino == FUSE_ROOT_ID ? &root : (struct node *)(uintptr_t)ino;
}

static fuse_ino_t ino_of(struct node *n) {
    return n == &root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

// The file handle of the object `fd` names, or NULL.
static struct file_handle *handle_of(int fd) {
    struct file_handle *h = malloc(sizeof *h + MAX_HANDLE_SZ);
    int mount_id;
    if (!h) return NULL;
    h->handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(fd, "", h, &mount_id, AT_EMPTY_PATH) != 0) {
        free(h);
        return NULL;
    }
    return h;
}

// Puts a new node's descriptor away for its handle when the nodes hold their budget; called with the lock held.
static void keep(struct node *n, int fd, const struct stat *st) {
    n->fd = fd;
    if (handles_work && fds_held >= fd_budget && !S_ISDIR(st->st_mode) && (n->handle = handle_of(fd))) {
        close(fd);
        n->fd = -1;
        return;
    }
    fds_held++;
}

// A descriptor of the node's object for one request (give it back with let_go), or -1 with errno set.
static int hold(struct node *n) {
    return n->fd >= 0 ? n->fd : open_by_handle_at(mount_fd, n->handle, O_PATH | O_CLOEXEC);
}

static void let_go(struct node *n, int fd) {
    if (n->fd < 0 && fd >= 0) close(fd);
}

// The known node of the object with attributes `st`, counting one lookup, or NULL; called with the lock held.
static struct node *find_locked(const struct stat *st) {
    if (root.dev == st->st_dev && root.ino == st->st_ino) return &root;  // never forgotten, so not counted
    if (!table) return NULL;
    struct node *n = table[slot(st->st_dev, st->st_ino, table_size)];
    while (n && !(n->dev == st->st_dev && n->ino == st->st_ino)) n = n->next;
    if (n) n->nlookup++;
    return n;
}

static struct node *find(const struct stat *st) {
    pthread_mutex_lock(&table_lock);
    struct node *n = find_locked(st);
    pthread_mutex_unlock(&table_lock);
    return n;
}

// Finds or adds the node for an object just opened as `fd` (O_PATH) with attributes `st`, counting one lookup.
// Takes `fd` over: closes it when the object was known already. Returns NULL when out of memory.
static struct node *remember(int fd, const struct stat *st) {
    pthread_mutex_lock(&table_lock);
    struct node *n = find_locked(st);
    if (n) {
        pthread_mutex_unlock(&table_lock);
        close(fd);
        return n;
    }
    if (table_count >= table_size) grow();
    if (!table || !(n = calloc(1, sizeof *n))) {
        pthread_mutex_unlock(&table_lock);
        close(fd);
        return NULL;
    }
    size_t s = slot(st->st_dev, st->st_ino, table_size);
    keep(n, fd, st);
    n->dev = st->st_dev;
    n->ino = st->st_ino;
    n->nlookup = 1;
    n->next = table[s];
    table[s] = n;
    table_count++;
    pthread_mutex_unlock(&table_lock);
    return n;
}

static void forget_one(fuse_ino_t ino, uint64_t count) {
    struct node *n = node_of(ino);
    if (n == &root) return;
    pthread_mutex_lock(&table_lock);
    if (n->nlookup > count) {
        n->nlookup -= count;
        pthread_mutex_unlock(&table_lock);
        return;
    }
    struct node **p = &table[slot(n->dev, n->ino, table_size)];
    while (*p && *p != n) p = &(*p)->next;
    if (*p) *p = n->next;
    table_count--;
    if (n->fd >= 0) fds_held--;
    pthread_mutex_unlock(&table_lock);
    if (n->fd >= 0) close(n->fd);
    free(n->handle);
    free(n);
}

// A path through /proc naming a node's object, for the calls that cannot take an O_PATH descriptor.
static void proc_path(char buf[64], int fd) { snprintf(buf, 64, "/proc/self/fd/%d", fd); }

static int stat_node(int fd, struct stat *st) {
    return fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

// Looks `name` up under `parent`, filling `e` (counting one lookup) or returning an errno.
// An object known already costs one fstatat; a new one is opened, and its attributes are those of what was opened.
static int lookup_entry(fuse_ino_t parent, const char *name, struct fuse_entry_param *e) {
    memset(e, 0, sizeof *e);
    int pfd = node_of(parent)->fd;
    if (fstatat(pfd, name, &e->attr, AT_SYMLINK_NOFOLLOW) != 0) return errno;
    struct node *n = find(&e->attr);
    if (!n) {
        int fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) return errno;
        int err = stat_node(fd, &e->attr);
        if (err) {
            close(fd);
            return err;
        }
        if (!(n = remember(fd, &e->attr))) return ENOMEM;
    }
    e->ino = ino_of(n);
    e->attr_timeout = cache_timeout;
    e->entry_timeout = cache_timeout;
    return 0;
}

// Answers a request that made `name` under `parent` (rc is the call's result): with its entry, or the errno.
static void reply_made(fuse_req_t req, int rc, fuse_ino_t parent, const char *name) {
    if (rc != 0) {
        fuse_reply_err(req, errno);
        return;
    }
    struct fuse_entry_param e;
    int err = lookup_entry(parent, name, &e);
    if (err) fuse_reply_err(req, err);
    else fuse_reply_entry(req, &e);
}

// --------------------------------------------------------------------------------------- operations

static void op_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    conn->max_write = 1 << 20;
    conn->max_readahead = 1 << 20;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
    if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct fuse_entry_param e;
    int err = lookup_entry(parent, name, &e);
    if (err == ENOENT) {  // a negative entry, cached as ubiquityfs caches its own
        memset(&e, 0, sizeof e);
        e.entry_timeout = cache_timeout;
        fuse_reply_entry(req, &e);
    } else if (err) {
        fuse_reply_err(req, err);
    } else {
        fuse_reply_entry(req, &e);
    }
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    forget_one(ino, nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
    for (size_t i = 0; i < count; i++) forget_one(forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct stat st;
    int err;
    if (fi) {
        err = fstat((int)fi->fh, &st) == 0 ? 0 : errno;
    } else {
        struct node *n = node_of(ino);
        int fd = hold(n);
        err = fd < 0 ? errno : stat_node(fd, &st);
        let_go(n, fd);
    }
    if (err) fuse_reply_err(req, err);
    else fuse_reply_attr(req, &st, cache_timeout);
}

// Applies the time changes of a setattr, through the open file when there is one.
static int set_times(int fd, const struct stat *attr, int to_set, struct fuse_file_info *fi) {
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_nsec = UTIME_OMIT}};
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) ts[0].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_ATIME) ts[0] = attr->st_atim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) ts[1].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_MTIME) ts[1] = attr->st_mtim;
    if (fi) return futimens((int)fi->fh, ts);
    char path[64];
    proc_path(path, fd);
    return utimensat(AT_FDCWD, path, ts, 0);
}

// Applies a setattr to the object `fd` names (through the open file when there is one); returns 0 or an errno.
static int apply_setattr(int fd, const struct stat *attr, int to_set, struct fuse_file_info *fi) {
    char path[64];
    proc_path(path, fd);
    int rc = 0;
    if (to_set & FUSE_SET_ATTR_MODE) rc = fi ? fchmod((int)fi->fh, attr->st_mode) : chmod(path, attr->st_mode);
    if (rc == 0 && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
        uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
        gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
        rc = fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    }
    if (rc == 0 && (to_set & FUSE_SET_ATTR_SIZE))
        rc = fi ? ftruncate((int)fi->fh, attr->st_size) : truncate(path, attr->st_size);
    if (rc == 0 && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
                              FUSE_SET_ATTR_MTIME_NOW)))
        rc = set_times(fd, attr, to_set, fi);
    return rc == 0 ? 0 : errno;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
    struct node *n = node_of(ino);
    int fd = hold(n);
    int err = fd < 0 ? errno : apply_setattr(fd, attr, to_set, fi);
    let_go(n, fd);
    if (err) fuse_reply_err(req, err);
    else op_getattr(req, ino, fi);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino) {
    char buf[PATH_MAX + 1];
    struct node *node = node_of(ino);
    int fd = hold(node);
    ssize_t n = fd < 0 ? -1 : readlinkat(fd, "", buf, sizeof buf);
    int err = errno;
    let_go(node, fd);
    if (n < 0) fuse_reply_err(req, err);
    else if (n >= (ssize_t)sizeof buf) fuse_reply_err(req, ENAMETOOLONG);
    else {
        buf[n] = 0;
        fuse_reply_readlink(req, buf);
    }
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
    reply_made(req, mknodat(node_of(parent)->fd, name, mode, rdev), parent, name);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    reply_made(req, mkdirat(node_of(parent)->fd, name, mode), parent, name);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
    reply_made(req, symlinkat(link, node_of(parent)->fd, name), parent, name);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
    fuse_reply_err(req, unlinkat(node_of(parent)->fd, name, 0) == 0 ? 0 : errno);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
    fuse_reply_err(req, unlinkat(node_of(parent)->fd, name, AT_REMOVEDIR) == 0 ? 0 : errno);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags) {
    int rc = renameat2(node_of(parent)->fd, name, node_of(newparent)->fd, newname, flags);
    fuse_reply_err(req, rc == 0 ? 0 : errno);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
    int fd = openat(node_of(parent)->fd, name, (fi->flags | O_CREAT | O_CLOEXEC) & ~O_NOFOLLOW, mode);
    if (fd < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    struct fuse_entry_param e;
    int err = lookup_entry(parent, name, &e);
    if (err) {
        close(fd);
        fuse_reply_err(req, err);
        return;
    }
    fi->fh = (uint64_t)fd;
    if (fuse_reply_create(req, &e, fi) != 0) {  // the request was interrupted: nobody holds the file
        close(fd);
        forget_one(e.ino, 1);
    }
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    char path[64];
    struct node *n = node_of(ino);
    int pfd = hold(n);
    proc_path(path, pfd);
    int fd = pfd < 0 ? -1 : open(path, (fi->flags | O_CLOEXEC) & ~(O_NOFOLLOW | O_CREAT));
    int err = errno;
    let_go(n, pfd);
    if (fd < 0) {
        errno = err;
        fuse_reply_err(req, errno);
        return;
    }
    fi->fh = (uint64_t)fd;
    fi->keep_cache = 1;
    if (fuse_reply_open(req, fi) != 0) close(fd);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino;
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = (int)fi->fh;
    buf.buf[0].pos = off;
    fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
                         struct fuse_file_info *fi) {
    (void)ino;
    struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
    out.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    out.buf[0].fd = (int)fi->fh;
    out.buf[0].pos = off;
    ssize_t n = fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_MOVE);
    if (n < 0) fuse_reply_err(req, (int)-n);
    else fuse_reply_write(req, (size_t)n);
}

// A close of one of the file's descriptors: closing a duplicate reports what a close of the backing file would.
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    int fd = dup((int)fi->fh);
    fuse_reply_err(req, fd < 0 ? errno : (close(fd) == 0 ? 0 : errno));
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    close((int)fi->fh);
    fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)ino;
    int rc = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
    fuse_reply_err(req, rc == 0 ? 0 : errno);
}

// ------------------------------------------------------------------------------------- directories

struct dir {
    DIR *dp;
    off_t pos;               // the offset the next entry read from dp has
    struct dirent *pending;  // an entry read but not yet sent (it did not fit), or NULL
};

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct dir *d = calloc(1, sizeof *d);
    if (!d) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int fd = openat(node_of(ino)->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(d->dp = fdopendir(fd))) {
        int err = errno;
        if (fd >= 0) close(fd);
        free(d);
        fuse_reply_err(req, err);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    if (fuse_reply_open(req, fi) != 0) {
        closedir(d->dp);
        free(d);
    }
}

// Adds one entry at `p` (room `left`); returns its size, or 0 when it does not fit (then nothing is counted).
static size_t add_entry(fuse_req_t req, fuse_ino_t ino, char *p, size_t left, struct dirent *de, int plus) {
    if (!plus) {
        struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t)de->d_type << 12};
        size_t need = fuse_add_direntry(req, p, left, de->d_name, &st, de->d_off);
        return need <= left ? need : 0;
    }
    if (fuse_add_direntry_plus(req, p, 0, de->d_name, NULL, de->d_off) > left) return 0;
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
        e.attr.st_ino = de->d_ino;  // no lookup is counted for these (the kernel ignores them)
        e.attr.st_mode = (mode_t)de->d_type << 12;
    } else {
        int err = lookup_entry(ino, de->d_name, &e);
        if (err) {  // gone meanwhile: list the name without attributes
            memset(&e, 0, sizeof e);
            e.attr.st_ino = de->d_ino;
            e.attr.st_mode = (mode_t)de->d_type << 12;
        }
    }
    return fuse_add_direntry_plus(req, p, left, de->d_name, &e, de->d_off);
}

static void read_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi, int plus) {
    struct dir *d = (struct dir *)(uintptr_t)fi->fh;
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (off != d->pos) {
        seekdir(d->dp, off);
        d->pos = off;
        d->pending = NULL;
    }
    size_t used = 0;
    int err = 0;
    for (;;) {
        struct dirent *de = d->pending;
        if (!de) {
            errno = 0;
            if (!(de = readdir(d->dp))) {
                err = errno;
                break;
            }
        }
        size_t n = add_entry(req, ino, buf + used, size - used, de, plus);
        if (n == 0) {
            d->pending = de;
            break;
        }
        used += n;
        d->pending = NULL;
        d->pos = de->d_off;
    }
    if (err && used == 0) fuse_reply_err(req, err);
    else fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    read_dir(req, ino, size, off, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    read_dir(req, ino, size, off, fi, 1);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    struct dir *d = (struct dir *)(uintptr_t)fi->fh;
    closedir(d->dp);
    free(d);
    fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)fi;
    int fd = openat(node_of(ino)->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 ? -1 : (datasync ? fdatasync(fd) : fsync(fd));
    int err = rc == 0 ? 0 : errno;
    if (fd >= 0) close(fd);
    fuse_reply_err(req, err);
}

// ------------------------------------------------------------------------------- the rest, and main

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
    struct statvfs sv;
    (void)ino;  // one backing file system
    if (fstatvfs(root.fd, &sv) != 0) fuse_reply_err(req, errno);
    else fuse_reply_statfs(req, &sv);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
    (void)ino, (void)name, (void)size;
    fuse_reply_err(req, ENODATA);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    (void)ino;
    if (size == 0) fuse_reply_xattr(req, 0);
    else fuse_reply_buf(req, NULL, 0);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .symlink = op_symlink,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .rename = op_rename,
    .create = op_create,
    .open = op_open,
    .read = op_read,
    .write_buf = op_write_buf,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
};

// One descriptor per known inode: lifts RLIMIT_NOFILE to the hard limit, or to the kernel's nr_open when allowed.
static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t hard = rl.rlim_max;
    unsigned long nr_open = 0;
    FILE *f = fopen("/proc/sys/fs/nr_open", "r");
    if (f) {
        if (fscanf(f, "%lu", &nr_open) != 1) nr_open = 0;
        fclose(f);
    }
    if (nr_open > hard) {
        rl.rlim_cur = rl.rlim_max = nr_open;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0) return;  // needs CAP_SYS_RESOURCE
    }
    rl.rlim_cur = rl.rlim_max = hard;
    setrlimit(RLIMIT_NOFILE, &rl);
}

// Sets the nodes' budget of descriptors and whether file handles can stand in for descriptors past it (they
// need CAP_DAC_READ_SEARCH). Only other nodes than directories give way to handles (a directory's descriptor
// is the base of every lookup in it), so half the limit is the budget: the other half is for the directories
// made past it, open files and directories, and libfuse.
static void plan_descriptors(void) {
    struct rlimit rl;
    long limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : 1024;
    fd_budget = limit / 2;
    mount_fd = openat(root.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct file_handle *h = handle_of(root.fd);
    int fd = h && mount_fd >= 0 ? open_by_handle_at(mount_fd, h, O_PATH | O_CLOEXEC) : -1;
    handles_work = fd >= 0;
    if (fd >= 0) close(fd);
    free(h);
}

static int open_root(const char *backing) {
    root.fd = open(backing, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root.fd < 0) {
        fprintf(stderr, "floor: cannot open %s: %s\n", backing, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat_node(root.fd, &st) != 0) return -1;
    root.dev = st.st_dev;
    root.ino = st.st_ino;
    root.nlookup = 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || (argc == 4 && strcmp(argv[3], "-d") != 0) || argc > 4) {
        fprintf(stderr, "usage: floor BACKING_DIR MOUNTPOINT [-d]\n");
        return 2;
    }
    raise_fd_limit();
    umask(0);  // the kernel has applied the caller's umask to the modes it sends
    if (open_root(argv[1]) != 0) return 1;
    plan_descriptors();
    char opts[] = "default_permissions,fsname=floor,subtype=floor,allow_other";
    if (getuid() != 0) opts[strlen(opts) - strlen(",allow_other")] = 0;
    char *args[] = {argv[0], "-o", opts, argc == 4 ? "-d" : NULL, NULL};
    struct fuse_args fargs = FUSE_ARGS_INIT(argc == 4 ? 4 : 3, args);
    struct fuse_session *se = fuse_session_new(&fargs, &ops, sizeof ops, NULL);
    if (!se) return 1;
    if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[2]) != 0) {
        fuse_session_destroy(se);
        return 1;
    }
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_idle_threads(cfg, 10);
    fuse_loop_cfg_set_max_threads(cfg, 64);
    int rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return rc == 0 ? 0 : 1;
}
