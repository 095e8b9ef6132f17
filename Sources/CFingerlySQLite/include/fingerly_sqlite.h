#ifndef FINGERLY_SQLITE_H
#define FINGERLY_SQLITE_H

#include <sqlite3.h>

// SQLITE_TRANSIENT is a function-like cast Swift cannot import: binds that copy their argument.
int fingerly_sqlite_bind_text(sqlite3_stmt *statement, int index, const char *text, int length);
int fingerly_sqlite_bind_blob(sqlite3_stmt *statement, int index, const void *bytes, int length);

#endif
