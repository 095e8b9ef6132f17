#include "fingerly_sha256.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#if __has_include(<sys/platform/x86.h>)
#include <sys/platform/x86.h>

// glibc asked the CPU when it started and keeps the answers: in a virtual machine every CPUID is an exit to the
// hypervisor, and the three below cost a start 50 microseconds.
bool fingerly_sha256_hardware_available(void) {
    return CPU_FEATURE_ACTIVE(SSSE3) && CPU_FEATURE_ACTIVE(SSE4_1) && CPU_FEATURE_ACTIVE(SHA);
}
#else
bool fingerly_sha256_hardware_available(void) {
    unsigned int eax, ebx, ecx, edx;
    __cpuid(0, eax, ebx, ecx, edx);
    if (eax < 7) return false;
    __cpuid(1, eax, ebx, ecx, edx);
    bool ssse3 = ecx & (1u << 9), sse41 = ecx & (1u << 19);
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    bool sha = ebx & (1u << 29);
    return ssse3 && sse41 && sha;
}
#endif

// SHA256RNDS2 keeps the working variables as two lanes-reversed halves, {F,E,B,A} and {H,G,D,C} from lane 0
// up, and runs two rounds on the two lowest lanes of its third operand; MSG1 and MSG2 are the two halves of
// the message schedule, four words at a time.
__attribute__((target("sha,ssse3,sse4.1")))
void fingerly_sha256_compress_hardware(uint32_t state[8], const uint8_t *input, size_t blocks,
                                       const uint32_t round_constants[64]) {
    // Each 32-bit word of a block is big-endian.
    const __m128i byte_swap = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
    __m128i first = _mm_loadu_si128((const __m128i *)state);         // a b c d
    __m128i second = _mm_loadu_si128((const __m128i *)(state + 4));  // e f g h
    __m128i abef = _mm_shuffle_epi32(_mm_unpacklo_epi64(first, second), 0x1b);
    __m128i cdgh = _mm_shuffle_epi32(_mm_unpackhi_epi64(first, second), 0x1b);
    for (size_t block = 0; block < blocks; block++, input += 64) {
        const __m128i abef_before = abef, cdgh_before = cdgh;
        __m128i words[4];
        for (int part = 0; part < 4; part++)
            words[part] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(input + 16 * part)), byte_swap);
        for (int group = 0; group < 16; group++) {
            __m128i current = words[group & 3];
            if (group >= 4) {
                // W[t..t+3] from W[t-16..t-1]: MSG1 adds sigma0 of the words after W[t-16..], then W[t-7..t-4]
                // are added and MSG2 adds sigma1 of the two words before each.
                __m128i partial = _mm_sha256msg1_epu32(current, words[(group + 1) & 3]);
                partial = _mm_add_epi32(partial, _mm_alignr_epi8(words[(group + 3) & 3], words[(group + 2) & 3], 4));
                current = _mm_sha256msg2_epu32(partial, words[(group + 3) & 3]);
                words[group & 3] = current;
            }
            __m128i scheduled = _mm_add_epi32(current, _mm_loadu_si128((const __m128i *)(round_constants + 4 * group)));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, scheduled);
            // Two rounds give the new {A,B,E,F}, and the old {A,B,E,F} are the new {C,D,G,H}: the two variables
            // trade roles over the first instruction and trade back over the second.
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(scheduled, 0x0e));
        }
        abef = _mm_add_epi32(abef, abef_before);
        cdgh = _mm_add_epi32(cdgh, cdgh_before);
    }
    __m128i ab_ef = _mm_shuffle_epi32(abef, 0x1b), cd_gh = _mm_shuffle_epi32(cdgh, 0x1b);
    _mm_storeu_si128((__m128i *)state, _mm_unpacklo_epi64(ab_ef, cd_gh));
    _mm_storeu_si128((__m128i *)(state + 4), _mm_unpackhi_epi64(ab_ef, cd_gh));
}
#else
bool fingerly_sha256_hardware_available(void) { return false; }

void fingerly_sha256_compress_hardware(uint32_t state[8], const uint8_t *input, size_t blocks,
                                       const uint32_t round_constants[64]) {
    (void)state; (void)input; (void)blocks; (void)round_constants;
}
#endif
