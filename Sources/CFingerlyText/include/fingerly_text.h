#ifndef FINGERLY_TEXT_H
#define FINGERLY_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/// Copies `length` bytes of `text` into `out` (`capacity` bytes, NUL included), cut short of a
/// split UTF-8 sequence when it does not fit. Returns true when cut. The one bounded copy of the
/// C shims: every text field they fill goes through it.
bool fingerly_copy_bounded(char *out, size_t capacity, const char *text, size_t length);

/// `fingerly_copy_bounded` of a NUL-terminated `text`, never reading past `capacity` bytes of it.
bool fingerly_copy_text(char *out, size_t capacity, const char *text);

#endif
