/* simd_x86.h — small AVX2 helpers shared by the *_avx2.c and *_avx512.c kernels (include only from files
 * compiled with -mavx2). */
#ifndef QVL_CPU_SIMD_X86_H
#define QVL_CPU_SIMD_X86_H

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* In-register transpose of an 8×8 float tile: r[i] holds row i before, column i after. */
static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Attention block set-up shared by the AVX2 and AVX-512 kernels: copy nq query rows into qs (zero rows up to nqp),
 * clear the output accumulator o, and reset the running max / sum / tile max of the first n_state rows. */
static inline void attn_stage_queries(const float *q, size_t ldq, int nq, int nqp, int n_state, int hd, float *qs,
                                      float *o, float *mrow, float *lrow, float *tmax) {
    for (int i = 0; i < nqp; i++) {
        if (i < nq) memcpy(qs + (size_t)i * hd, q + (size_t)i * ldq, (size_t)hd * sizeof(float));
        else memset(qs + (size_t)i * hd, 0, (size_t)hd * sizeof(float));
        memset(o + (size_t)i * hd, 0, (size_t)hd * sizeof(float));
    }
    for (int i = 0; i < n_state; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
        tmax[i] = -INFINITY; /* rows past nqp only fill the last vector of rows */
    }
}

/* Transposed key tile kt[d][j] (row stride bk floats, 32-byte aligned rows) of nkt key rows, zero columns from
 * nkt up to nk16 (a multiple of 16). hd is a multiple of 8. */
static inline void attn_load_kt(const float *k, size_t ldk, int nkt, int nk16, int hd, float *kt, int bk) {
    for (int jb = 0; jb < nk16; jb += 8)
        for (int db = 0; db < hd; db += 8) {
            __m256 r[8];
            for (int x = 0; x < 8; x++)
                r[x] = jb + x < nkt ? _mm256_loadu_ps(k + (size_t)(jb + x) * ldk + db) : _mm256_setzero_ps();
            transpose8(r);
            for (int x = 0; x < 8; x++) _mm256_store_ps(kt + (size_t)(db + x) * bk + jb, r[x]);
        }
}

#endif
