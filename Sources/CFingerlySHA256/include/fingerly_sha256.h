#ifndef FINGERLY_SHA256_H
#define FINGERLY_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/// Whether this CPU has the SHA extensions (and the SSSE3 and SSE4.1 the rounds below also use).
bool fingerly_sha256_hardware_available(void);

/// Runs `blocks` 64-byte blocks from `input` (any alignment) through SHA-256's compression function
/// with the SHA extensions; `state` is a..h, `round_constants` the standard's K (SHA256.swift declares them).
/// Call only where fingerly_sha256_hardware_available().
void fingerly_sha256_compress_hardware(uint32_t state[8], const uint8_t *input, size_t blocks,
                                       const uint32_t round_constants[64]);

#endif
