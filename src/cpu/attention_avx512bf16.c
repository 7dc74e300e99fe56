/* attention_avx512bf16.c — one attention work item in bf16 arithmetic on AVX512-BF16 (bf16.h's definition, bit
 * for bit): Q·Kᵀ and P·V by VDPBF16PS on pair-interleaved tiles (Q pairs broadcast against 16 keys' pairs; P pairs
 * broadcast against 16 head columns' pairs of two keys), online softmax in f32 with bf16_exp's operations
 * lane-wise. Any even head_dim up to 128 (64 and 72 in the towers), any segment length. Compiled with
 * -mavx512bf16, called only after cpu_has_avx512bf16(). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "cpu/bf16.h"
#include "cpu/kernels_avx2.h" /* attention tiling */

static inline __m512 dp(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }

/* bf16_exp lane-wise (same operations, same order). */
static inline __m512 exp16(__m512 x) {
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(e));
}

/* bf16_round lane-wise: 16 bf16 in the low halves of 16 dwords. */
static inline __m512i round16(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}

/* 16 bf16 (low halves of dwords) → 8 pair dwords. */
static inline __m256i pairs8(__m512i r) { return _mm512_cvtepi64_epi32(_mm512_or_si512(r, _mm512_srli_epi64(r, 16))); }

/* bf16_row_sum's order on 16 lane sums. */
static inline float tree16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(b);
}

static inline uint32_t pair_of(const float *x, int n, int i) {
    const uint32_t lo = i < n ? bf16_round(x[i]) : 0, hi = i + 1 < n ? bf16_round(x[i + 1]) : 0;
    return lo | hi << 16;
}

void attn_bf16_block_avx512bf16(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                                float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    const int hp = (hd + 1) / 2, dpad = (hd + 15) & ~15, ndv = dpad / 16;
    uint32_t *qp = (uint32_t *)(void *)ws;
    uint32_t *kt = qp + (size_t)ATTN_BQ_MAX * hp;
    uint32_t *vt = kt + (size_t)hp * ATTN_BK_MAX;
    float *s = (float *)(void *)(vt + (size_t)ATTN_BK_MAX / 2 * dpad);
    uint32_t *pp = (uint32_t *)(void *)(s + (size_t)ATTN_BQ_MAX * ATTN_BK_MAX);
    float *o = (float *)(void *)(pp + (size_t)ATTN_BQ_MAX * ATTN_BK_MAX / 2);
    float *mrow = o + (size_t)ATTN_BQ_MAX * dpad, *lrow = mrow + ATTN_BQ_MAX;
    (void)s;
    for (int i = 0; i < nq; i++) {
        for (int p = 0; p < hp; p++) qp[(size_t)i * hp + p] = pair_of(q + (size_t)i * ldq, hd, 2 * p);
        for (int d = 0; d < dpad; d++) o[(size_t)i * dpad + d] = 0.0f;
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
    }
    for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
        nkt = attn_key_tile(nk, j0);
        const int nv = (nkt + 15) / 16, npair = (nkt + 1) / 2;
        for (int p = 0; p < hp; p++)
            for (int j = 0; j < nv * 16; j++)
                kt[(size_t)p * ATTN_BK_MAX + j] = j < nkt ? pair_of(k + (size_t)(j0 + j) * ldk, hd, 2 * p) : 0;
        for (int jp = 0; jp < npair; jp++) {
            const float *v0 = v + (size_t)(j0 + 2 * jp) * ldv, *v1 = 2 * jp + 1 < nkt ? v0 + ldv : NULL;
            for (int d = 0; d < dpad; d++) {
                const uint32_t lo = d < hd ? bf16_round(v0[d]) : 0, hi = d < hd && v1 ? bf16_round(v1[d]) : 0;
                vt[(size_t)jp * dpad + d] = lo | hi << 16;
            }
        }
        for (int i = 0; i < nq; i++) {
            /* scores of 16·nv keys */
            __m512 acc[5];
            for (int c = 0; c < 5; c++) acc[c] = _mm512_setzero_ps();
            const uint32_t *qi = qp + (size_t)i * hp;
            for (int p = 0; p < hp; p++) {
                const __m512i x = _mm512_set1_epi32((int)qi[p]);
                const uint32_t *kr = kt + (size_t)p * ATTN_BK_MAX;
                for (int c = 0; c < nv; c++) acc[c] = dp(acc[c], x, _mm512_loadu_si512(kr + 16 * c));
            }
            __m512 mx = _mm512_set1_ps(-INFINITY);
            for (int c = 0; c < nv; c++) {
                const int left = nkt - 16 * c;
                const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
                acc[c] = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), m, _mm512_mul_ps(acc[c], _mm512_set1_ps(scale)));
                mx = _mm512_max_ps(mx, acc[c]);
            }
            const float m_old = mrow[i], m_new = fmaxf(m_old, _mm512_reduce_max_ps(mx)), alpha = bf16_exp(m_old - m_new);
            __m512 sum = _mm512_setzero_ps();
            uint32_t *pi = pp + (size_t)i * (ATTN_BK_MAX / 2);
            for (int c = 0; c < nv; c++) {
                const __m512i pb = round16(exp16(_mm512_sub_ps(acc[c], _mm512_set1_ps(m_new))));
                sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(pb, 16)));
                _mm256_storeu_si256((__m256i *)(void *)(pi + 8 * c), pairs8(pb));
            }
            lrow[i] = lrow[i] * alpha + tree16(sum);
            mrow[i] = m_new;
            /* P·V */
            __m512 ov[8];
            float *oi = o + (size_t)i * dpad;
            const __m512 va = _mm512_set1_ps(alpha);
            for (int c = 0; c < ndv; c++) ov[c] = _mm512_mul_ps(_mm512_loadu_ps(oi + 16 * c), va);
            for (int jp = 0; jp < npair; jp++) {
                const __m512i x = _mm512_set1_epi32((int)pi[jp]);
                const uint32_t *vr = vt + (size_t)jp * dpad;
                for (int c = 0; c < ndv; c++) ov[c] = dp(ov[c], x, _mm512_loadu_si512(vr + 16 * c));
            }
            for (int c = 0; c < ndv; c++) _mm512_storeu_ps(oi + 16 * c, ov[c]);
        }
    }
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < hd; d++) out[(size_t)i * ldo + d] = o[(size_t)i * dpad + d] / lrow[i];
}
