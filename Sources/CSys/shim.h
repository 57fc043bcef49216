// Linux calls that Glibc's Swift module map leaves out.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <linux/falloc.h>

// Starts writing a range of a file to disk without waiting (sync_file_range(2) with SYNC_FILE_RANGE_WRITE).
static inline int ubq_start_writeback(int fd, long long offset, long long length) {
    return sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
}

// Allocates, punches or zeroes a range of a file (fallocate(2); `mode` takes its FALLOC_FL_* flags).
static inline int ubq_fallocate(int fd, int mode, long long offset, long long length) {
    return fallocate(fd, mode, offset, length);
}

// The calling thread's id (gettid(2)), as the kernel sends it with a FUSE request.
static inline int ubq_gettid(void) { return (int)gettid(); }

// Names the calling thread (pthread_setname_np(3); the kernel keeps 15 bytes), as `top -H` and gdb show it.
static inline void ubq_name_thread(const char *name) {
    char short_name[16];
    snprintf(short_name, sizeof short_name, "%s", name);
    pthread_setname_np(pthread_self(), short_name);
}

// Returns free heap memory to the system (malloc_trim(3)).
static inline void ubq_trim_heap(void) { malloc_trim(0); }

// Makes the empty file `dst` a copy of the first `length` bytes of `src`: a reflink where the file system
// shares blocks (FICLONE), else an in-kernel copy (copy_file_range(2)) of each data segment, so no byte passes
// through the process and holes stay holes (SEEK_DATA/SEEK_HOLE; a file system without them reports all data).
// Returns 0 or -errno.
static inline int ubq_copy_file(int dst, int src, long long length) {
    if (ioctl(dst, FICLONE, src) == 0) return 0;
    off_t data = 0;
    while (data < length) {
        data = lseek(src, data, SEEK_DATA);
        if (data < 0) { if (errno == ENXIO) break; return -errno; } // only a hole is left
        if (data >= length) break;
        off_t hole = lseek(src, data, SEEK_HOLE);
        if (hole < 0) return -errno;
        if (hole > length) hole = length;
        off_t in = data, out = data;
        while (in < hole) {
            ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(hole - in), 0);
            if (n < 0) return -errno;
            if (n == 0) break; // the source ended early
        }
        data = hole;
    }
    return ftruncate(dst, length) == 0 ? 0 : -errno;
}

// Deallocates a range of a file, which then reads as zeros (fallocate(2) with PUNCH_HOLE, KEEP_SIZE).
static inline int ubq_punch_hole(int fd, long long offset, long long length) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length);
}
