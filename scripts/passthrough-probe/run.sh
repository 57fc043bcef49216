#!/bin/sh
# Builds the probe and shows, with passthrough off then on, how many read requests reach the daemon while
# `cat` reads a 64 MiB file through the mount. Run as root (FUSE_DEV_IOC_BACKING_OPEN needs CAP_SYS_ADMIN).
set -e
here=$(cd "$(dirname "$0")" && pwd); src=$here/../../Sources/CPassthrough; tmp=$(mktemp -d)
gcc -O2 -Wall -o "$tmp/probe" "$here/probe.c" "$src/passthrough.c" -I"$src/include" $(pkg-config --cflags --libs fuse3)
head -c 64M /dev/urandom > "$tmp/backing"; mkdir "$tmp/mnt"
for pt in 0 1; do
    "$tmp/probe" "$tmp/mnt" "$tmp/backing" $pt 2> "$tmp/log" & pid=$!
    while ! grep -q probe /proc/mounts; do sleep 0.1; done
    cmp "$tmp/mnt/f" "$tmp/backing" && echo "passthrough=$pt: content identical"
    fusermount3 -u "$tmp/mnt"; wait $pid || true
    sed "s/^/  /" "$tmp/log"
done
rm -rf "$tmp"
