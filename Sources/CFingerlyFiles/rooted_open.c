#define _GNU_SOURCE
#include "fingerly_files.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// The kernel's own limit on links in one lookup; the walk keeps the same one.
enum { link_hop_limit = 40, depth_limit = 256, component_limit = 4096 };

static int open_with_openat2(int root_fd, const char *path, int flags, bool follow_final) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)(flags | O_CLOEXEC | (follow_final ? 0 : (O_PATH | O_NOFOLLOW)));
    if (!follow_final) how.flags &= ~(uint64_t)(O_RDONLY | O_WRONLY | O_RDWR | O_NONBLOCK | O_DIRECTORY);
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    // An empty path names the root itself, which openat2 takes as "." only.
    long fd = syscall(SYS_openat2, root_fd, *path ? path : ".", &how, sizeof how);
    return fd < 0 ? -errno : (int)fd;
}

// Holds the components still to walk, most recent link target first. Texts come from the
// caller or from readlink, and are copied in, so a hostile tree cannot grow it past its size.
typedef struct {
    char text[component_limit * 2];
    size_t length;
} pending_path;

// Puts `prefix` in front of what is pending, with a separating slash.
static int push_front(pending_path *pending, const char *prefix, size_t prefix_length) {
    if (prefix_length + 1 + pending->length + 1 > sizeof pending->text) return -ENAMETOOLONG;
    memmove(pending->text + prefix_length + 1, pending->text, pending->length + 1);
    memcpy(pending->text, prefix, prefix_length);
    pending->text[prefix_length] = '/';
    pending->length += prefix_length + 1;
    return 0;
}

// A name longer than this is ENAMETOOLONG for every Linux filesystem.
enum { name_limit = 255 };

// Takes the next component off the front into `component` (name_limit + 1 bytes); returns its
// length (0 at the end). A component longer than a name can be is taken off but not copied:
// its length, past name_limit, tells the caller to refuse it. The pending text is the tree's
// (a link target, a name built from a uevent), so nothing of it may size a copy.
static size_t pop_front(pending_path *pending, char *component) {
    size_t start = 0;
    while (start < pending->length && pending->text[start] == '/') start++;
    size_t end = start;
    while (end < pending->length && pending->text[end] != '/') end++;
    size_t length = end - start;
    size_t copied = length > name_limit ? 0 : length;
    memcpy(component, pending->text + start, copied);
    component[copied] = 0;
    memmove(pending->text, pending->text + end, pending->length - end + 1);
    pending->length -= end;
    return length;
}

static bool only_slashes(const pending_path *pending) {
    for (size_t index = 0; index < pending->length; index++) if (pending->text[index] != '/') return false;
    return true;
}

// Resolution by hand: each component opened O_PATH | O_NOFOLLOW relative to the directory
// before it, links read with readlinkat on that descriptor and spliced into the pending path,
// ".." popped from a stack of descriptors that never goes above the root. Nothing is resolved
// by the kernel across a link, so a directory swapped for a link mid-walk is seen as a link.
static int open_by_walking(int root_fd, const char *path, int flags, bool follow_final) {
    static __thread pending_path pending;
    size_t path_length = strnlen(path, sizeof pending.text);
    if (path_length >= sizeof pending.text - 1) return -ENAMETOOLONG;
    memcpy(pending.text, path, path_length + 1);
    pending.length = path_length;

    int stack[depth_limit];
    int depth = 0;
    stack[0] = root_fd;  // not owned: never closed here
    int hops = 0;
    int result = -ENOENT;
    char component[name_limit + 1];
    char target[component_limit + 1];

    for (;;) {
        size_t length = pop_front(&pending, component);
        bool final = only_slashes(&pending);
        if (length == 0) {
            // Nothing but slashes was left: the path named a directory already on the stack.
            result = (int)openat(stack[depth], ".", (flags | O_CLOEXEC) & ~O_NOFOLLOW);
            if (result < 0) result = -errno;
            break;
        }
        if (length > name_limit) { result = -ENAMETOOLONG; break; }
        bool is_dot = strcmp(component, ".") == 0, is_dot_dot = strcmp(component, "..") == 0;
        if (is_dot || is_dot_dot) {
            if (is_dot_dot && depth > 0) close(stack[depth--]);
            if (!final) continue;
            result = (int)openat(stack[depth], ".", (flags | O_CLOEXEC) & ~O_NOFOLLOW);
            if (result < 0) result = -errno;
            break;
        }
        int node = (int)openat(stack[depth], component, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (node < 0) { result = -errno; break; }
        struct stat info;
        if (fstat(node, &info) != 0) { result = -errno; close(node); break; }
        if (S_ISLNK(info.st_mode) && (!final || follow_final)) {
            ssize_t target_length = readlinkat(node, "", target, sizeof target - 1);
            close(node);
            if (target_length < 0) { result = -errno; break; }
            if (++hops > link_hop_limit) { result = -ELOOP; break; }
            if (target_length > 0 && target[0] == '/') {
                while (depth > 0) close(stack[depth--]);
            }
            if (push_front(&pending, target, (size_t)target_length) != 0) { result = -ENAMETOOLONG; break; }
            continue;
        }
        if (final) {
            if (!follow_final) { result = node; break; }
            // Reopen the checked node for real through its own descriptor's name in its parent;
            // O_NOFOLLOW refuses a link swapped in since the check.
            result = (int)openat(stack[depth], component, flags | O_CLOEXEC | O_NOFOLLOW);
            if (result < 0) result = -errno;
            close(node);
            break;
        }
        if (!S_ISDIR(info.st_mode)) { close(node); result = -ENOTDIR; break; }
        if (depth + 1 >= depth_limit) { close(node); result = -ENAMETOOLONG; break; }
        stack[++depth] = node;
    }
    while (depth > 0) close(stack[depth--]);
    return result;
}

int fingerly_open_beneath(int root_fd, const char *path, int flags, bool follow_final, fingerly_resolution resolution) {
    while (*path == '/') path++;
    if (resolution == fingerly_resolution_automatic) {
        int fd = open_with_openat2(root_fd, path, flags, follow_final);
        // ENOSYS: kernel before 5.6; EPERM: a seccomp filter that refuses it. Anything else
        // is the answer for this path.
        if (fd != -ENOSYS && fd != -EPERM) return fd;
    }
    int walk_flags = follow_final ? flags : O_PATH;
    return open_by_walking(root_fd, path, walk_flags, follow_final);
}
