#define _GNU_SOURCE
#include "fingerly_files.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

long fingerly_read_link_fd(int fd, char *buffer, unsigned long capacity) {
    ssize_t length = readlinkat(fd, "", buffer, capacity);
    return length < 0 ? -errno : (long)length;
}

const int fingerly_open_path_flag = O_PATH;

static int status_at(int directory, const char *path, int flags, fingerly_file_status *out) {
    struct statx info;
    int result;
    // A path on FUSE or NFS can be interrupted by a signal: asked again, as every open is.
    do result = statx(directory, path, flags, STATX_BASIC_STATS | STATX_BTIME, &info);
    while (result != 0 && errno == EINTR);
    if (result != 0) return -errno;
    out->mode = info.stx_mode;
    out->uid = info.stx_uid;
    out->size = info.stx_size;
    out->modified_seconds = info.stx_mtime.tv_sec;
    out->modified_nanoseconds = info.stx_mtime.tv_nsec;
    out->changed_seconds = info.stx_ctime.tv_sec;
    out->changed_nanoseconds = info.stx_ctime.tv_nsec;
    out->birth_seconds = (info.stx_mask & STATX_BTIME) && info.stx_btime.tv_sec > 0 ? info.stx_btime.tv_sec : -1;
    out->device = makedev(info.stx_dev_major, info.stx_dev_minor);
    out->inode = info.stx_ino;
    return 0;
}

int fingerly_status_fd(int fd, fingerly_file_status *out) {
    return status_at(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, out);
}

int fingerly_status_path(const char *path, fingerly_file_status *out) {
    return status_at(AT_FDCWD, path, 0, out);
}

int fingerly_status_entry(int directory, const char *name, fingerly_file_status *out) {
    // One component only: a path would walk out of the directory the caller confined itself to.
    if (name[0] == '\0' || strchr(name, '/') != NULL) return -EINVAL;
    return status_at(directory, name, AT_SYMLINK_NOFOLLOW, out);
}
