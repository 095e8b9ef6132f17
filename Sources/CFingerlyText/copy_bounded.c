#include "fingerly_text.h"

#include <string.h>

bool fingerly_copy_bounded(char *out, size_t capacity, const char *text, size_t length) {
    if (capacity == 0) return length > 0;
    bool cut = length >= capacity;
    if (cut) {
        length = capacity - 1;
        // Back to the start of a sequence the cut would split: at most three continuation bytes.
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

bool fingerly_copy_text(char *out, size_t capacity, const char *text) {
    if (capacity == 0) return text[0] != 0;
    // strnlen up to capacity: a length of capacity says "does not fit" without reading further.
    return fingerly_copy_bounded(out, capacity, text, strnlen(text, capacity));
}
