#ifndef FINGERLY_COPY_TEXT_H
#define FINGERLY_COPY_TEXT_H

#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

/// Copies as much of `text` as fits in `capacity` bytes, NUL included, never reading further
/// into `text` than that. A cut never ends inside a UTF-8 sequence. Returns true when cut.
static inline bool copy_text(char *out, size_t capacity, const char *text) {
    if (capacity == 0) return text[0] != 0;
    size_t length = strnlen(text, capacity);
    bool cut = length == capacity;
    if (cut) {
        length = capacity - 1;
        size_t start = length;
        while (start > 0 && length - start < 3 && ((unsigned char)text[start - 1] & 0xC0) == 0x80) start--;
        if (start > 0) {
            unsigned char lead = (unsigned char)text[start - 1];
            size_t expected = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            if (start - 1 + expected > length) length = start - 1;
        }
    }
    memcpy(out, text, length);
    out[length] = 0;
    return cut;
}

/// The file of the object mapped at `address`, cut to fit; empty when none is.
static inline void copy_object_path(const void *address, char *out, size_t capacity) {
    Dl_info info;
    if (capacity == 0) return;
    out[0] = 0;
    if (address && dladdr(address, &info) && info.dli_fname) copy_text(out, capacity, info.dli_fname);
}

#endif
