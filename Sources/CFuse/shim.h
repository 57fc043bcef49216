#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
