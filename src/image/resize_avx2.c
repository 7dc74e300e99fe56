/* resize_avx2.c — AVX2 versions of resize.c's two passes: the same integer sums, so the same bytes.
 *
 * Weights come as int16 (resize_axis.w16lo; Pillow's 22-bit weights are split into hi·2^16 + lo, both int16) and
 * products are formed with _mm256_madd_epi16 (uint8 pixels zero-extended to int16). Sums are taken modulo 2^32;
 * the exact total of each output fits int32, so (hi_sum << 16) + lo_sum + bias wraps to the exact value. Then the
 * arithmetic shift and the saturating packs give clamp(acc >> prec, 0, 255), as the portable loops.
 * Compiled with -mavx2; call only after cpu_level() >= 2 (core/cpu.h). */
#include <immintrin.h>
#include <string.h>

#include "image/resize.h"

/* Horizontal: per output pixel, groups of 4 taps. The 16 bytes at pixel first + j are broadcast to both lanes;
 * a byte shuffle makes lane L hold, per channel, the int16 pair (tap j + 2L, tap j + 2L + 1), so madd against
 * (w[j + 2L], w[j + 2L + 1]) repeated gives one int32 partial sum per channel and lane. */
void resize_hrow_avx2(const uint8_t *src_row, uint8_t *dst_row, int c, const resize_axis *ax) {
    int8_t m[32];
    for (int lane = 0; lane < 2; lane++)
        for (int ch = 0; ch < 4; ch++)
            for (int t = 0; t < 2; t++) {
                int idx = lane * 16 + 2 * (2 * ch + t);
                m[idx] = ch < c ? (int8_t)((2 * lane + t) * c + ch) : (int8_t)0x80;
                m[idx + 1] = (int8_t)0x80;
            }
    const __m256i mask = _mm256_loadu_si256((const __m256i *)m);
    const __m256i perm = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m128i bias = _mm_set1_epi32((int32_t)1 << (ax->prec - 1));
    const __m128i shift = _mm_cvtsi32_si128(ax->prec);
    const size_t k4 = (size_t)ax->ksize4;

    for (int o = 0; o < ax->simd_end; o++) {
        const uint8_t *p = src_row + (size_t)ax->first[o] * (size_t)c;
        const int16_t *wl = ax->w16lo + (size_t)o * k4;
        const int cnt = ax->count[o];
        __m256i acc = _mm256_setzero_si256();
        __m128i sum;
        if (!ax->split) {
            for (int j = 0; j < cnt; j += 4) {
                __m256i px = _mm256_shuffle_epi8(
                    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p + (size_t)j * (size_t)c))),
                    mask);
                __m256i w = _mm256_permutevar8x32_epi32(
                    _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(wl + j))), perm);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(px, w));
            }
            sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        } else {
            const int16_t *wh = ax->w16hi + (size_t)o * k4;
            __m256i acch = _mm256_setzero_si256();
            for (int j = 0; j < cnt; j += 4) {
                __m256i px = _mm256_shuffle_epi8(
                    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p + (size_t)j * (size_t)c))),
                    mask);
                __m256i w = _mm256_permutevar8x32_epi32(
                    _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(wl + j))), perm);
                __m256i wph = _mm256_permutevar8x32_epi32(
                    _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(wh + j))), perm);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(px, w));
                acch = _mm256_add_epi32(acch, _mm256_madd_epi16(px, wph));
            }
            __m128i lo = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
            __m128i hi = _mm_add_epi32(_mm256_castsi256_si128(acch), _mm256_extracti128_si256(acch, 1));
            sum = _mm_add_epi32(lo, _mm_slli_epi32(hi, 16));
        }
        sum = _mm_sra_epi32(_mm_add_epi32(sum, bias), shift);
        __m128i packed = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
        uint32_t v = (uint32_t)_mm_cvtsi128_si32(packed);
        memcpy(dst_row + (size_t)o * (size_t)c, &v, (size_t)c);
    }
}

/* One tap pair (rows r0, r1 with weights packed as the int16 pair in wv) into four int32 accumulators holding bytes
 * [0-3|16-19], [4-7|20-23], [8-11|24-27], [12-15|28-31] of the 32-byte chunk. */
static inline void vmadd(const uint8_t *r0, const uint8_t *r1, __m256i wv, __m256i a[4]) {
    const __m256i zero = _mm256_setzero_si256();
    __m256i x = _mm256_loadu_si256((const __m256i *)r0), y = _mm256_loadu_si256((const __m256i *)r1);
    __m256i lo = _mm256_unpacklo_epi8(x, y), hi = _mm256_unpackhi_epi8(x, y);
    a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), wv));
    a[1] = _mm256_add_epi32(a[1], _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), wv));
    a[2] = _mm256_add_epi32(a[2], _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), wv));
    a[3] = _mm256_add_epi32(a[3], _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), wv));
}

static inline __m256i pair(const int16_t *w) {
    int32_t v;
    memcpy(&v, w, sizeof v);
    return _mm256_set1_epi32(v);
}

/* Vertical: 32 output bytes at a time, two source rows per madd (an odd last tap pairs with a zero weight). The
 * packs undo the unpack interleaving lane by lane, so the bytes come out in order. */
void resize_vrow_avx2(const uint8_t *src, size_t stride, uint8_t *dst_row, size_t n32, const resize_axis *ax,
                      int o) {
    const size_t k4 = (size_t)ax->ksize4;
    const int16_t *wl = ax->w16lo + (size_t)o * k4, *wh = ax->w16hi + (size_t)o * k4;
    const uint8_t *rows = src + (size_t)ax->first[o] * stride;
    const int cnt = ax->count[o];
    const __m256i bias = _mm256_set1_epi32((int32_t)1 << (ax->prec - 1));
    const __m128i shift = _mm_cvtsi32_si128(ax->prec);
    for (size_t b = 0; b < n32; b += 32) {
        __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
        for (int j = 0; j < cnt; j += 2) {
            const uint8_t *r0 = rows + (size_t)j * stride + b;
            vmadd(r0, j + 1 < cnt ? r0 + stride : r0, pair(wl + j), a);
        }
        if (ax->split) {
            __m256i h[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                            _mm256_setzero_si256()};
            for (int j = 0; j < cnt; j += 2) {
                const uint8_t *r0 = rows + (size_t)j * stride + b;
                vmadd(r0, j + 1 < cnt ? r0 + stride : r0, pair(wh + j), h);
            }
            for (int i = 0; i < 4; i++) a[i] = _mm256_add_epi32(a[i], _mm256_slli_epi32(h[i], 16));
        }
        for (int i = 0; i < 4; i++) a[i] = _mm256_sra_epi32(_mm256_add_epi32(a[i], bias), shift);
        __m256i out = _mm256_packus_epi16(_mm256_packs_epi32(a[0], a[1]), _mm256_packs_epi32(a[2], a[3]));
        _mm256_storeu_si256((__m256i *)(dst_row + b), out);
    }
}
