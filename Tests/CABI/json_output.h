/*
 * What the C hosts in this directory share: their one-line JSON records quote text the same way.
 * Header-only, each host compiles alone.
 */
#ifndef FINGERLY_TEST_JSON_OUTPUT_H
#define FINGERLY_TEST_JSON_OUTPUT_H
#include <stdio.h>

/* text as a JSON string on stdout; bytes past ASCII pass through, so the caller keeps them UTF-8. */
static inline void put_json_string(const char *text) {
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') printf("\\%c", *c);
        else if (*c < 0x20) printf("\\u%04x", *c);
        else putchar(*c);
    }
    putchar('"');
}
#endif
