#define _GNU_SOURCE
#include "fingerly_integrity.h"

#include <stdint.h>
#include <time.h>

#include "raw_syscall.h"

// Why C: the measurement depends on the shape of the machine code, which Swift does not let us
// pin down. Each step below is its own pair of basic blocks, kept apart by the empty asm (which
// the compiler may neither merge nor turn into a conditional move), and which arm runs depends
// on the data. Natively the whole run costs about what the arithmetic chain does. A binary
// translator (valgrind, DynamoRIO, Pin, QEMU user mode) must translate each block the first
// time it runs, and with data-dependent paths most blocks are new on every call: the run costs
// it hundreds of times the chain, which it translates once and then runs nearly natively.
// Being CPU time in this thread, neither figure grows when the machine is busy.

#define FINGERLY_STEP(n)                                                                         \
    if ((value >> ((n) % 61)) & 1) {                                                             \
        value = value * (((uint64_t)(n) * 2654435761u) | 1) + (n);                               \
        __asm__ volatile("" : "+r"(value));                                                      \
    } else {                                                                                     \
        value ^= (uint64_t)(n) * 0x9E3779B97F4A7C15u;                                            \
        __asm__ volatile("" : "+r"(value));                                                      \
    }
#define FINGERLY_STEP4(n) FINGERLY_STEP(n) FINGERLY_STEP((n) + 1) FINGERLY_STEP((n) + 2) FINGERLY_STEP((n) + 3)
#define FINGERLY_STEP16(n) FINGERLY_STEP4(n) FINGERLY_STEP4((n) + 4) FINGERLY_STEP4((n) + 8) FINGERLY_STEP4((n) + 12)
#define FINGERLY_STEP64(n) FINGERLY_STEP16(n) FINGERLY_STEP16((n) + 16) FINGERLY_STEP16((n) + 32) FINGERLY_STEP16((n) + 48)
#define FINGERLY_STEP256(n) FINGERLY_STEP64(n) FINGERLY_STEP64((n) + 64) FINGERLY_STEP64((n) + 128) FINGERLY_STEP64((n) + 192)

__attribute__((noinline)) static uint64_t branchy_blocks(uint64_t value) {
    FINGERLY_STEP256(0)
    FINGERLY_STEP256(256)
    FINGERLY_STEP256(512)
    FINGERLY_STEP256(768)
    return value;
}

__attribute__((noinline)) static uint64_t arithmetic_chain(uint64_t value, unsigned rounds) {
    for (unsigned round = 0; round < rounds; round++) {
        value = value * 6364136223846793005u + 1442695040888963407u;
        __asm__ volatile("" : "+r"(value));
    }
    return value;
}

/// A clock's reading in nanoseconds, or -1 when it cannot be read or does not fit.
static int64_t in_nanoseconds(const struct timespec *time) {
    if (time->tv_sec < 0 || time->tv_nsec < 0 || time->tv_nsec >= 1000000000 || time->tv_sec > INT64_MAX / 1000000000 - 1) {
        return -1;
    }
    return (int64_t)time->tv_sec * 1000000000 + time->tv_nsec;
}

// Raw system calls, not libc's clock_gettime: a hook on the wrapper could make the fresh code
// look as cheap as the loop.
static int64_t nanoseconds(clockid_t clock) {
    struct timespec now;
    if (raw_syscall3(SYS_clock_gettime, clock, (long)&now, 0) != 0) return -1;
    return in_nanoseconds(&now);
}

int fingerly_measure_code_cost(uint64_t seed, fingerly_code_cost *cost) {
    struct timespec resolution;
    if (raw_syscall3(SYS_clock_getres, CLOCK_THREAD_CPUTIME_ID, (long)&resolution, 0) != 0) return -1;
    cost->cpu_clock_resolution_ns = in_nanoseconds(&resolution);
    if (cost->cpu_clock_resolution_ns < 0) return -1;
    // The chain runs in two halves, before and after the branches, and the cheaper half counts:
    // a translator's first half pays for translating the loop, and a half that an interrupt or
    // the translator's own housekeeping landed in is the dearer one.
    int64_t wall_start = nanoseconds(CLOCK_MONOTONIC);
    int64_t cpu_before = nanoseconds(CLOCK_THREAD_CPUTIME_ID);
    uint64_t value = arithmetic_chain(seed, FINGERLY_CHAIN_ROUNDS / 2);
    int64_t cpu_start = nanoseconds(CLOCK_THREAD_CPUTIME_ID);
    value = branchy_blocks(value ^ seed);
    int64_t cpu_middle = nanoseconds(CLOCK_THREAD_CPUTIME_ID);
    value = arithmetic_chain(value, FINGERLY_CHAIN_ROUNDS / 2);
    int64_t cpu_end = nanoseconds(CLOCK_THREAD_CPUTIME_ID);
    int64_t wall_end = nanoseconds(CLOCK_MONOTONIC);
    if (wall_start < 0 || cpu_before < 0 || cpu_start < 0 || cpu_middle < 0 || cpu_end < 0 || wall_end < 0) return -1;
    if (cpu_start < cpu_before || cpu_middle < cpu_start || cpu_end < cpu_middle || wall_end < wall_start) return -1;
    int64_t first_half = cpu_start - cpu_before, second_half = cpu_end - cpu_middle;
    cost->blocks_cpu_ns = cpu_middle - cpu_start;
    cost->chain_cpu_ns = 2 * (first_half < second_half ? first_half : second_half);
    cost->wall_ns = wall_end - wall_start;
    cost->result = value;
    return 0;
}
