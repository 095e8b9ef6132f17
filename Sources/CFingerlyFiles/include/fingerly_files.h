#ifndef FINGERLY_FILES_H
#define FINGERLY_FILES_H

#include <stdbool.h>
#include <stdint.h>

/// How `fingerly_open_beneath` resolved a path, for tests that must exercise both routes.
typedef enum {
    /// openat2 with RESOLVE_IN_ROOT when the kernel has it, else the component walk.
    fingerly_resolution_automatic = 0,
    /// Always the component-wise O_NOFOLLOW walk, as on kernels before 5.6 or under a seccomp
    /// filter that refuses openat2.
    fingerly_resolution_walk = 1,
} fingerly_resolution;

/// Opens `path` beneath the directory `root_fd` as if `root_fd` were "/": every symbolic link,
/// absolute or relative, and every "..", is resolved inside it, and magic links (/proc/…/fd,
/// /proc/…/root) are refused. With `follow_final` false a final symbolic link is opened
/// itself (O_PATH), for readlink and lstat-like questions. Returns a descriptor, or -errno.
int fingerly_open_beneath(int root_fd, const char *path, int flags, bool follow_final, fingerly_resolution resolution);

/// The target of the symbolic link open as `fd` (O_PATH | O_NOFOLLOW). Returns its length, or -errno.
long fingerly_read_link_fd(int fd, char *buffer, unsigned long capacity);

/// stat of an open descriptor, plus the birth time where the filesystem keeps one.
typedef struct {
    uint32_t mode;
    uint32_t uid;
    uint64_t size;
    int64_t modified_seconds;
    /// The nanoseconds of the modification time, and the inode change time (ctime), which no
    /// unprivileged caller can set: together with the identity they tell a rewritten file.
    uint32_t modified_nanoseconds;
    uint32_t changed_nanoseconds;
    int64_t changed_seconds;
    /// -1 when the filesystem keeps no birth time.
    int64_t birth_seconds;
    /// st_dev as stat(2) encodes it (makedev), and st_ino: a file's identity.
    uint64_t device;
    uint64_t inode;
} fingerly_file_status;

/// O_PATH, which Swift's Glibc module does not declare (it is behind _GNU_SOURCE).
extern const int fingerly_open_path_flag;

/// Returns 0, or -errno.
int fingerly_status_fd(int fd, fingerly_file_status *out);

/// The status of what an absolute path of the live host names, its final link followed. Returns 0, or -errno.
int fingerly_status_path(const char *path, fingerly_file_status *out);

/// The status of one entry of an open directory, a final link not followed. `name` is one path
/// component: a name holding "/" is refused with -EINVAL. Returns 0, or -errno.
int fingerly_status_entry(int directory, const char *name, fingerly_file_status *out);

#endif
