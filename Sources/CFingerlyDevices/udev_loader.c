// libudev is opened on the first call into it, not by the loader at start: only the deferred tier's
// device probes enumerate devices, and a fast-tier run, the integrity check and the server never do.
// These definitions stand in for the library's, under its names, so UdevInventory calls them as
// before; hidden, they interpose on nothing of the host's (a Python or Ruby host with its own libudev).
#include "fingerly_devices.h"
#include "fingerly_lazy_library.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

// libc's declarations first: under the pragma only the library's, whose definitions here are hidden.
#pragma GCC visibility push(hidden)
#include <libudev.h>
#pragma GCC visibility pop

#define FINGERLY_UDEV_SONAME "libudev.so.1"

// Each function once: its result type, name, parameters, arguments, and what it answers when the
// library cannot be loaded (what libudev itself answers to a failed allocation or a missing device).
#define FINGERLY_UDEV_FUNCTIONS(F) \
    F(struct udev *, udev_new, (void), (), NULL) \
    F(struct udev *, udev_unref, (struct udev *u), (u), NULL) \
    F(struct udev_enumerate *, udev_enumerate_new, (struct udev *u), (u), NULL) \
    F(struct udev_enumerate *, udev_enumerate_unref, (struct udev_enumerate *e), (e), NULL) \
    F(int, udev_enumerate_add_match_subsystem, (struct udev_enumerate *e, const char *s), (e, s), -1) \
    F(int, udev_enumerate_scan_devices, (struct udev_enumerate *e), (e), -1) \
    F(struct udev_list_entry *, udev_enumerate_get_list_entry, (struct udev_enumerate *e), (e), NULL) \
    F(struct udev_list_entry *, udev_list_entry_get_next, (struct udev_list_entry *l), (l), NULL) \
    F(const char *, udev_list_entry_get_name, (struct udev_list_entry *l), (l), NULL) \
    F(const char *, udev_list_entry_get_value, (struct udev_list_entry *l), (l), NULL) \
    F(struct udev_device *, udev_device_new_from_syspath, (struct udev *u, const char *p), (u, p), NULL) \
    F(struct udev_device *, udev_device_unref, (struct udev_device *d), (d), NULL) \
    F(struct udev_device *, udev_device_get_parent, (struct udev_device *d), (d), NULL) \
    F(const char *, udev_device_get_subsystem, (struct udev_device *d), (d), NULL) \
    F(const char *, udev_device_get_devtype, (struct udev_device *d), (d), NULL) \
    F(const char *, udev_device_get_syspath, (struct udev_device *d), (d), NULL) \
    F(const char *, udev_device_get_sysname, (struct udev_device *d), (d), NULL) \
    F(const char *, udev_device_get_driver, (struct udev_device *d), (d), NULL) \
    F(struct udev_list_entry *, udev_device_get_properties_list_entry, (struct udev_device *d), (d), NULL) \
    F(const char *, udev_device_get_sysattr_value, (struct udev_device *d, const char *a), (d, a), NULL)

#define FINGERLY_UDEV_SLOT(result, name, parameters, arguments, fallback) result (*name) parameters;

// Written once, under loadOnce, before `ready` is released.
static struct {
    FINGERLY_UDEV_FUNCTIONS(FINGERLY_UDEV_SLOT)
} udev;

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static char loadProblem[512] = FINGERLY_UDEV_SONAME " could not be loaded: pthread_once failed";
static atomic_bool ready;

static void load(void) {
#define FINGERLY_UDEV_ENTRY(result, name, parameters, arguments, fallback) {#name, (void **)&udev.name},
    struct fingerly_lazy_function const functions[] = {FINGERLY_UDEV_FUNCTIONS(FINGERLY_UDEV_ENTRY)};
    size_t count = sizeof functions / sizeof functions[0];
    if (fingerly_lazy_library_open(FINGERLY_UDEV_SONAME, functions, count, loadProblem, sizeof loadProblem)) {
        atomic_store_explicit(&ready, 1, memory_order_release);
    }
}

static _Bool loaded(void) {
    if (atomic_load_explicit(&ready, memory_order_acquire)) return 1;
    if (pthread_once(&loadOnce, load) != 0) return 0;
    return atomic_load_explicit(&ready, memory_order_acquire);
}

#define FINGERLY_UDEV_STUB(result, name, parameters, arguments, fallback) \
    __attribute__((visibility("hidden"))) result name parameters { \
        return loaded() ? udev.name arguments : fallback; \
    }
FINGERLY_UDEV_FUNCTIONS(FINGERLY_UDEV_STUB)

const char *fingerly_udev_problem(void) {
    return loaded() ? NULL : loadProblem;
}
