#ifndef FINGERLY_TEXT_BUFFER_H
#define FINGERLY_TEXT_BUFFER_H

#include <string.h>

/// A caller-owned, NUL-terminated output buffer that C helpers fill line by line for Swift.
struct text_out {
    char *buffer;
    size_t capacity;
    size_t length;
};

/// Appends as much of `text` as fits; a full buffer truncates rather than overflows.
static inline void put(struct text_out *out, const char *text) {
    if (out->capacity == 0 || out->length + 1 >= out->capacity) return;
    size_t length = strlen(text);
    if (out->length + length >= out->capacity) length = out->capacity - out->length - 1;
    memcpy(out->buffer + out->length, text, length);
    out->length += length;
    out->buffer[out->length] = 0;
}

#endif
