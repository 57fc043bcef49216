// Linux calls that Glibc's Swift module map leaves out.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <malloc.h>

// Starts writing a range of a file to disk without waiting (sync_file_range(2) with SYNC_FILE_RANGE_WRITE).
static inline int ubq_start_writeback(int fd, long long offset, long long length) {
    return sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
}

// Allocates, punches or zeroes a range of a file (fallocate(2); `mode` takes its FALLOC_FL_* flags).
static inline int ubq_fallocate(int fd, int mode, long long offset, long long length) {
    return fallocate(fd, mode, offset, length);
}

// Returns free heap memory to the system (malloc_trim(3)).
static inline void ubq_trim_heap(void) { malloc_trim(0); }
