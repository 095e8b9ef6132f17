#ifndef FINGERLY_SQLITE_H
#define FINGERLY_SQLITE_H

#include <sqlite3.h>

// SQLITE_TRANSIENT is a function-like cast Swift cannot import: binds that copy their argument.
int fingerly_sqlite_bind_text(sqlite3_stmt *statement, int index, const char *text, int length);
int fingerly_sqlite_bind_blob(sqlite3_stmt *statement, int index, const void *bytes, int length);

// sqlite3_db_config is variadic. Closing the last connection checkpoints the WAL into the main
// file unless this is set; tests turn it off to show a commit lives in the WAL alone.
int fingerly_sqlite_set_checkpoint_on_close(sqlite3 *database, int enabled);

// Why libsqlite3 could not be used (it is opened on the first call into it, sqlite_loader.c), or NULL.
const char *fingerly_sqlite_problem(void);

#endif
