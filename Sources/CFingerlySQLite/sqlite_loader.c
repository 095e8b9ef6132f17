// libsqlite3 is opened on the first call into it, not by the loader at start: a dry run, the integrity
// check and the C ABI's collection never store, and its 1,600 relocations were a fifth of the start.
// These definitions stand in for the library's, under its names, so the store's code calls them as
// before; hidden, they interpose on nothing of the host's or of the library's own.
#include "fingerly_lazy_library.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

// libc's declarations first: under the pragma only the library's, whose definitions here are hidden.
#pragma GCC visibility push(hidden)
#include <sqlite3.h>
#pragma GCC visibility pop


#include "fingerly_sqlite.h"

#define FINGERLY_SQLITE_SONAME "libsqlite3.so.0"

// Each function once: its result type, name, parameters, arguments, and what it answers when the
// library cannot be loaded (open_v2, errmsg and db_config are written out below).
#define FINGERLY_SQLITE_FUNCTIONS(F) \
    F(int, sqlite3_bind_blob, (sqlite3_stmt *s, int i, const void *b, int n, void (*d)(void *)), (s, i, b, n, d), \
      SQLITE_MISUSE) \
    F(int, sqlite3_bind_int64, (sqlite3_stmt *s, int i, sqlite3_int64 v), (s, i, v), SQLITE_MISUSE) \
    F(int, sqlite3_bind_null, (sqlite3_stmt *s, int i), (s, i), SQLITE_MISUSE) \
    F(int, sqlite3_bind_text, (sqlite3_stmt *s, int i, const char *t, int n, void (*d)(void *)), (s, i, t, n, d), \
      SQLITE_MISUSE) \
    F(int, sqlite3_bind_zeroblob, (sqlite3_stmt *s, int i, int n), (s, i, n), SQLITE_MISUSE) \
    F(int, sqlite3_busy_timeout, (sqlite3 *db, int ms), (db, ms), SQLITE_MISUSE) \
    F(sqlite3_int64, sqlite3_changes64, (sqlite3 *db), (db), 0) \
    F(int, sqlite3_clear_bindings, (sqlite3_stmt *s), (s), SQLITE_MISUSE) \
    F(int, sqlite3_close_v2, (sqlite3 *db), (db), SQLITE_OK) \
    F(const void *, sqlite3_column_blob, (sqlite3_stmt *s, int c), (s, c), NULL) \
    F(int, sqlite3_column_bytes, (sqlite3_stmt *s, int c), (s, c), 0) \
    F(sqlite3_int64, sqlite3_column_int64, (sqlite3_stmt *s, int c), (s, c), 0) \
    F(const unsigned char *, sqlite3_column_text, (sqlite3_stmt *s, int c), (s, c), NULL) \
    F(int, sqlite3_column_type, (sqlite3_stmt *s, int c), (s, c), SQLITE_NULL) \
    F(int, sqlite3_exec, (sqlite3 *db, const char *sql, int (*cb)(void *, int, char **, char **), void *a, char **e), \
      (db, sql, cb, a, e), SQLITE_MISUSE) \
    F(int, sqlite3_extended_result_codes, (sqlite3 *db, int on), (db, on), SQLITE_MISUSE) \
    F(int, sqlite3_finalize, (sqlite3_stmt *s), (s), SQLITE_OK) \
    F(int, sqlite3_get_autocommit, (sqlite3 *db), (db), 1) \
    F(int, sqlite3_libversion_number, (void), (), 0) \
    F(const char *, sqlite3_libversion, (void), (), "unknown") \
    F(int, sqlite3_prepare_v3, \
      (sqlite3 *db, const char *sql, int n, unsigned int f, sqlite3_stmt **s, const char **t), (db, sql, n, f, s, t), \
      SQLITE_MISUSE) \
    F(int, sqlite3_reset, (sqlite3_stmt *s), (s), SQLITE_MISUSE) \
    F(int, sqlite3_step, (sqlite3_stmt *s), (s), SQLITE_MISUSE) \
    F(int, sqlite3_wal_checkpoint_v2, (sqlite3 *db, const char *name, int mode, int *log, int *done), \
      (db, name, mode, log, done), SQLITE_MISUSE) \
    F(void *, sqlite3_wal_hook, (sqlite3 *db, int (*hook)(void *, sqlite3 *, const char *, int), void *a), \
      (db, hook, a), NULL)

#define FINGERLY_SQLITE_SLOT(result, name, parameters, arguments, fallback) result (*name) parameters;

// Written once, under loadOnce, before `ready` is released.
static struct {
    FINGERLY_SQLITE_FUNCTIONS(FINGERLY_SQLITE_SLOT)
    int (*sqlite3_open_v2)(const char *file, sqlite3 **db, int flags, const char *vfs);
    const char *(*sqlite3_errmsg)(sqlite3 *db);
    int (*sqlite3_db_config)(sqlite3 *db, int op, ...);
} sqlite;

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static char loadProblem[512] = FINGERLY_SQLITE_SONAME " could not be loaded: pthread_once failed";
static atomic_bool ready;

static void load(void) {
#define FINGERLY_SQLITE_ENTRY(result, name, parameters, arguments, fallback) {#name, (void **)&sqlite.name},
    struct fingerly_lazy_function const functions[] = {
        FINGERLY_SQLITE_FUNCTIONS(FINGERLY_SQLITE_ENTRY)
        {"sqlite3_open_v2", (void **)&sqlite.sqlite3_open_v2},
        {"sqlite3_errmsg", (void **)&sqlite.sqlite3_errmsg},
        {"sqlite3_db_config", (void **)&sqlite.sqlite3_db_config},
    };
    size_t count = sizeof functions / sizeof functions[0];
    if (fingerly_lazy_library_open(FINGERLY_SQLITE_SONAME, functions, count, loadProblem, sizeof loadProblem)) {
        atomic_store_explicit(&ready, 1, memory_order_release);
    }
}

static _Bool loaded(void) {
    if (atomic_load_explicit(&ready, memory_order_acquire)) return 1;
    if (pthread_once(&loadOnce, load) != 0) return 0;
    return atomic_load_explicit(&ready, memory_order_acquire);
}

#define FINGERLY_SQLITE_STUB(result, name, parameters, arguments, fallback) \
    __attribute__((visibility("hidden"))) result name parameters { \
        return loaded() ? sqlite.name arguments : fallback; \
    }
FINGERLY_SQLITE_FUNCTIONS(FINGERLY_SQLITE_STUB)

const char *fingerly_sqlite_problem(void) {
    return loaded() ? NULL : loadProblem;
}

// A store that cannot load the library fails at its open, with the loader's reason as the message.
__attribute__((visibility("hidden"))) int sqlite3_open_v2(const char *file, sqlite3 **db, int flags, const char *vfs) {
    if (loaded()) return sqlite.sqlite3_open_v2(file, db, flags, vfs);
    if (db) *db = NULL;
    return SQLITE_CANTOPEN;
}

__attribute__((visibility("hidden"))) const char *sqlite3_errmsg(sqlite3 *db) {
    return loaded() ? sqlite.sqlite3_errmsg(db) : loadProblem;
}

// Variadic: the one option used (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, in bind.c) takes an int and an int *.
__attribute__((visibility("hidden"))) int sqlite3_db_config(sqlite3 *db, int op, ...) {
    if (!loaded()) return SQLITE_MISUSE;
    va_list arguments;
    va_start(arguments, op);
    int value = va_arg(arguments, int);
    int *previous = va_arg(arguments, int *);
    va_end(arguments);
    return sqlite.sqlite3_db_config(db, op, value, previous);
}
