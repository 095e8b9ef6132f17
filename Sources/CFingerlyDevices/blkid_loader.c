// libblkid is opened on the first call into it, not by the loader at start: only the deferred tier's
// filesystem probe reads a device node itself, and only when udev's database and /dev/disk say nothing.
// These definitions stand in for the library's, under its names, so BlockIdentity calls them as
// before; hidden, they interpose on nothing of the host's or of libudev's.
#include "fingerly_devices.h"
#include "fingerly_lazy_library.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

// libc's declarations first: under the pragma only the library's, whose definitions here are hidden.
#pragma GCC visibility push(hidden)
#include <blkid/blkid.h>
#pragma GCC visibility pop

#define FINGERLY_BLKID_SONAME "libblkid.so.1"

// Each function once: its result type, name, parameters, arguments, and what it answers when the
// library cannot be loaded (blkid_free_probe, which returns nothing, is written out below).
#define FINGERLY_BLKID_FUNCTIONS(F) \
    F(blkid_probe, blkid_new_probe, (void), (), NULL) \
    F(int, blkid_probe_set_device, (blkid_probe p, int fd, blkid_loff_t offset, blkid_loff_t size), \
      (p, fd, offset, size), -1) \
    F(int, blkid_probe_enable_superblocks, (blkid_probe p, int enable), (p, enable), -1) \
    F(int, blkid_probe_set_superblocks_flags, (blkid_probe p, int flags), (p, flags), -1) \
    F(int, blkid_probe_enable_partitions, (blkid_probe p, int enable), (p, enable), -1) \
    F(int, blkid_probe_set_partitions_flags, (blkid_probe p, int flags), (p, flags), -1) \
    F(int, blkid_do_safeprobe, (blkid_probe p), (p), -1) \
    F(blkid_partlist, blkid_probe_get_partitions, (blkid_probe p), (p), NULL) \
    F(int, blkid_partlist_numof_partitions, (blkid_partlist l), (l), -1) \
    F(blkid_partition, blkid_partlist_get_partition, (blkid_partlist l, int n), (l, n), NULL) \
    F(const char *, blkid_partition_get_uuid, (blkid_partition p), (p), NULL) \
    F(int, blkid_probe_lookup_value, (blkid_probe p, const char *name, const char **data, size_t *length), \
      (p, name, data, length), -1)

#define FINGERLY_BLKID_SLOT(result, name, parameters, arguments, fallback) result (*name) parameters;

// Written once, under loadOnce, before `ready` is released.
static struct {
    FINGERLY_BLKID_FUNCTIONS(FINGERLY_BLKID_SLOT)
    void (*blkid_free_probe)(blkid_probe p);
} blkid;

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static char loadProblem[512] = FINGERLY_BLKID_SONAME " could not be loaded: pthread_once failed";
static atomic_bool ready;

static void load(void) {
#define FINGERLY_BLKID_ENTRY(result, name, parameters, arguments, fallback) {#name, (void **)&blkid.name},
    struct fingerly_lazy_function const functions[] = {
        FINGERLY_BLKID_FUNCTIONS(FINGERLY_BLKID_ENTRY)
        {"blkid_free_probe", (void **)&blkid.blkid_free_probe},
    };
    size_t count = sizeof functions / sizeof functions[0];
    if (fingerly_lazy_library_open(FINGERLY_BLKID_SONAME, functions, count, loadProblem, sizeof loadProblem)) {
        atomic_store_explicit(&ready, 1, memory_order_release);
    }
}

static _Bool loaded(void) {
    if (atomic_load_explicit(&ready, memory_order_acquire)) return 1;
    if (pthread_once(&loadOnce, load) != 0) return 0;
    return atomic_load_explicit(&ready, memory_order_acquire);
}

#define FINGERLY_BLKID_STUB(result, name, parameters, arguments, fallback) \
    __attribute__((visibility("hidden"))) result name parameters { \
        return loaded() ? blkid.name arguments : fallback; \
    }
FINGERLY_BLKID_FUNCTIONS(FINGERLY_BLKID_STUB)

// Only a probe blkid_new_probe made reaches here, and it exists only once the library is loaded.
__attribute__((visibility("hidden"))) void blkid_free_probe(blkid_probe p) {
    if (loaded()) blkid.blkid_free_probe(p);
}

const char *fingerly_blkid_problem(void) {
    return loaded() ? NULL : loadProblem;
}
