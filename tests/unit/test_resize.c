/* test_resize.c — resize_u8 against torchvision and Pillow, byte for byte.
 *
 * tests/fixtures/resize/corpus.safetensors (tests/oracle/resize_oracle.py) holds ~70 (src, dst) cases: small ones
 * with the input and all outputs stored, large ones with a generated input (gen_image, the oracle's recipe) and
 * the outputs' xxh64. Every case runs with AVX2 (where the CPU has it) on 2 threads and with the portable loops on
 * 1 thread, for each kind (torchvision, Pillow 13, Pillow <= 12.1 pass order). Also: the worked examples of resize-exact.md §5, thread counts 1/2/3 identical,
 * AVX2 = portable loops for 1..4 channels, invalid sizes rejected. QVL_RESIZE_BENCH=1 times a 4000×3000 → 1344×1008 RGB downscale. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "core/error.h"
#include "image/resize.h"
#include "io/safetensors.h"
#include "testutil.h"

/* resize_oracle.py gen_image: 1 noise, 2 texture. */
static void gen_image(int gen, uint64_t seed, int h, int w, int c, uint8_t *out) {
    for (uint64_t y = 0; y < (uint64_t)h; y++)
        for (uint64_t x = 0; x < (uint64_t)w; x++)
            for (uint64_t ch = 0; ch < (uint64_t)c; ch++) {
                uint64_t i = (y * (uint64_t)w + x) * (uint64_t)c + ch;
                uint64_t r = tu_splitmix64(seed * (1ull << 32) + i);
                uint64_t v = gen == 1 ? r >> 56
                                      : x * x / 8 + 3 * y + 85 * ch + ((x >> 4) ^ (y >> 4)) * 29 + (r >> 61);
                out[i] = (uint8_t)(v & 255);
            }
}

/* Resize with a freshly sized workspace; returns the status. */
static qvl_status run(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh, resize_kind kind,
                      int threads, int simd) {
    size_t wsz = resize_workspace_size(sw, sh, dw, dh, c);
    void *ws = malloc(wsz ? wsz : 1);
    qvl_error err;
    err_clear(&err);
    resize_set_simd(simd);
    qvl_status s = resize_u8(src, sw, sh, c, dst, dw, dh, kind, ws, tu_pool(threads), &err);
    resize_set_simd(1);
    if (s != QVL_OK) fprintf(stderr, "resize_u8: %s\n", err.message);
    free(ws);
    return s;
}

static int32_t get_i32(const st_tensor *t, size_t i) {
    int32_t v;
    memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
    return v;
}

static uint64_t get_u64(const st_tensor *t, size_t i) {
    uint64_t v;
    memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
    return v;
}

static const st_tensor *find_u8(const st_file *f, const char *prefix, int idx, size_t n) {
    char name[32];
    snprintf(name, sizeof name, "%s_%03d", prefix, idx);
    const st_tensor *t = st_find(f, name);
    CHECK(t != NULL && t->dtype == ST_U8 && t->nbytes == n);
    return t && t->dtype == ST_U8 && t->nbytes == n ? t : NULL;
}

static void test_corpus(void) {
    char path[1024];
    st_file *f = NULL;
    qvl_error err;
    err_clear(&err);
    tu_source_path("tests/fixtures/resize/corpus.safetensors", path, sizeof path);
    CHECK(st_load(path, SIZE_MAX, &f, &err) == QVL_OK);
    if (!f) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    const st_tensor *cases = st_find(f, "cases"), *hashes = st_find(f, "hashes");
    CHECK(cases && cases->dtype == ST_I32 && cases->ndim == 2 && cases->shape[1] == 8);
    CHECK(hashes && hashes->dtype == ST_U64 && hashes->ndim == 2 && hashes->shape[1] == 3);
    if (!cases || !hashes || cases->shape[1] != 8 || hashes->shape[1] != 3 || hashes->shape[0] != cases->shape[0]) {
        st_close(f);
        return;
    }
    printf("corpus: %lld cases (torch %s, torchvision %s, pillow %s)\n", (long long)cases->shape[0],
           st_meta(f, "torch") ? st_meta(f, "torch") : "?", st_meta(f, "torchvision") ? st_meta(f, "torchvision") : "?",
           st_meta(f, "pillow") ? st_meta(f, "pillow") : "?");
    int n_bad = 0;
    for (int i = 0; i < (int)cases->shape[0]; i++) {
        int sw = get_i32(cases, 8 * (size_t)i + 0), sh = get_i32(cases, 8 * (size_t)i + 1);
        int c = get_i32(cases, 8 * (size_t)i + 2), dw = get_i32(cases, 8 * (size_t)i + 3);
        int dh = get_i32(cases, 8 * (size_t)i + 4), gen = get_i32(cases, 8 * (size_t)i + 5);
        int seed = get_i32(cases, 8 * (size_t)i + 6), stored = get_i32(cases, 8 * (size_t)i + 7);
        size_t ns = (size_t)sw * (size_t)sh * (size_t)c, nd = (size_t)dw * (size_t)dh * (size_t)c;
        uint8_t *gsrc = NULL;
        const uint8_t *src;
        if (gen == 0) {
            const st_tensor *t = find_u8(f, "src", i, ns);
            if (!t) continue;
            src = t->data;
        } else {
            gsrc = malloc(ns);
            gen_image(gen, (uint64_t)seed, sh, sw, c, gsrc);
            src = gsrc;
        }
        uint8_t *out = malloc(nd);
        static const char *const names[3] = {"tv", "pil", "pilh"};
        static const resize_kind kinds[3] = {RESIZE_TORCHVISION, RESIZE_PIL, RESIZE_PIL_LEGACY};
        for (int k = 0; k < 3; k++) {
            const resize_kind kind = kinds[k];
            const st_tensor *want = stored ? find_u8(f, names[k], i, nd) : NULL;
            if (stored && !want) continue;
            for (int variant = 0; variant < 2; variant++) {
                const int threads = variant == 0 ? 2 : 1, simd = variant == 0;
                char what[128];
                snprintf(what, sizeof what, "case %d %dx%dx%d -> %dx%d %s %s", i, sw, sh, c, dw, dh, names[k],
                         simd ? "simd/2 threads" : "scalar/1 thread");
                memset(out, 0xA5, nd);
                int ok = run(src, sw, sh, c, out, dw, dh, kind, threads, simd) == QVL_OK;
                if (ok && want) ok = tu_same_bytes(out, want->data, nd, what);
                if (ok && !want && XXH64(out, nd, 0) != get_u64(hashes, 3 * (size_t)i + (size_t)k)) {
                    fprintf(stderr, "  %s: xxh64 differs\n", what);
                    ok = 0;
                }
                CHECK(ok);
                n_bad += !ok;
            }
        }
        free(out);
        free(gsrc);
    }
    printf("corpus: %d mismatching runs\n", n_bad);
    st_close(f);
}

/* resize-exact.md §5: 1×2 [118, 232] → 1×3 and 1×3 [4, 184, 221] → 1×2, one channel. */
static void test_worked_examples(void) {
    const uint8_t up[2] = {118, 232}, down[3] = {4, 184, 221};
    uint8_t o[3];
    for (int simd = 0; simd < 2; simd++) {
        CHECK(run(up, 2, 1, 1, o, 3, 1, RESIZE_TORCHVISION, 1, simd) == QVL_OK);
        CHECK(o[0] == 110 && o[1] == 175 && o[2] == 240);
        CHECK(run(up, 2, 1, 1, o, 3, 1, RESIZE_PIL, 1, simd) == QVL_OK);
        CHECK(o[0] == 111 && o[1] == 175 && o[2] == 239);
        CHECK(run(down, 3, 1, 1, o, 2, 1, RESIZE_TORCHVISION, 1, simd) == QVL_OK);
        CHECK(o[0] == 65 && o[1] == 215);
        CHECK(run(down, 3, 1, 1, o, 2, 1, RESIZE_PIL, 1, simd) == QVL_OK);
        CHECK(o[0] == 66 && o[1] == 215);
    }
}

static void test_threads(void) {
    const int sw = 517, sh = 389, dw = 203, dh = 301, c = 3;
    uint8_t *src = malloc((size_t)sw * sh * c), *a = malloc((size_t)dw * dh * c), *b = malloc((size_t)dw * dh * c);
    gen_image(1, 77, sh, sw, c, src);
    for (int k = 0; k < 3; k++) {
        CHECK(run(src, sw, sh, c, a, dw, dh, (resize_kind)k, 1, 1) == QVL_OK);
        for (int t = 2; t <= 3; t++) {
            memset(b, 0, (size_t)dw * dh * c);
            CHECK(run(src, sw, sh, c, b, dw, dh, (resize_kind)k, t, 1) == QVL_OK);
            CHECK(memcmp(a, b, (size_t)dw * dh * c) == 0);
        }
        CHECK(run(src, sw, sh, c, b, dw, dh, (resize_kind)k, 2, 0) == QVL_OK);
        CHECK(memcmp(a, b, (size_t)dw * dh * c) == 0);
    }
    free(src);
    free(a);
    free(b);
}

/* AVX2 against the portable loops on random shapes, every channel count (2 has no oracle) and kind. */
static void test_simd_vs_scalar(void) {
    uint64_t st = 12345;
    for (int it = 0; it < 60; it++) {
        int v[5];
        for (int k = 0; k < 5; k++) v[k] = (int)((st = tu_splitmix64(st)) >> 58) + 1; /* 1..64 */
        const int sw = v[0] * (it % 3 + 1), sh = v[1], dw = v[2], dh = v[3] * (it % 2 + 1), c = (it % 4) + 1;
        size_t ns = (size_t)sw * sh * c, nd = (size_t)dw * dh * c;
        uint8_t *src = malloc(ns), *a = malloc(nd), *b = malloc(nd);
        gen_image(1 + it % 2, (uint64_t)it, sh, sw, c, src);
        for (int k = 0; k < 3; k++) {
            CHECK(run(src, sw, sh, c, a, dw, dh, (resize_kind)k, 1, 0) == QVL_OK);
            CHECK(run(src, sw, sh, c, b, dw, dh, (resize_kind)k, 2, 1) == QVL_OK);
            int ok = tu_same_bytes(b, a, nd, "simd vs scalar");
            if (!ok) fprintf(stderr, "  (%dx%dx%d -> %dx%d kind %d)\n", sw, sh, c, dw, dh, k);
            CHECK(ok);
        }
        free(src);
        free(a);
        free(b);
    }
}

static void test_invalid(void) {
    uint8_t px[16] = {0}, out[16];
    uint8_t ws[4096];
    qvl_error err;
    const int bad[][5] = {{0, 1, 1, 1, 3}, {1, 0, 1, 1, 3}, {1, 1, 0, 1, 3}, {1, 1, 1, -2, 3},
                          {2, 2, 1, 1, 0}, {2, 2, 1, 1, 5}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(resize_workspace_size(bad[i][0], bad[i][1], bad[i][2], bad[i][3], bad[i][4]) == 0);
        err_clear(&err);
        CHECK(resize_u8(px, bad[i][0], bad[i][1], bad[i][4], out, bad[i][2], bad[i][3], RESIZE_TORCHVISION, ws, NULL,
                        &err) == QVL_ERR_INVALID_ARG);
        CHECK(err.status == QVL_ERR_INVALID_ARG && err.message[0] != '\0');
    }
    err_clear(&err);
    CHECK(resize_u8(px, 2, 2, 3, out, 1, 1, (resize_kind)7, ws, NULL, &err) == QVL_ERR_INVALID_ARG);
    err_clear(&err);
    CHECK(resize_u8(NULL, 2, 2, 3, out, 1, 1, RESIZE_PIL, ws, NULL, &err) == QVL_ERR_INVALID_ARG);
    err_clear(&err);
    CHECK(resize_u8(px, 2, 2, 3, out, 1, 1, RESIZE_PIL, NULL, NULL, &err) == QVL_ERR_INVALID_ARG);
    err_clear(&err);
    CHECK(resize_u8(px, RESIZE_MAX_SIDE + 1, 1, 1, out, 1, 1, RESIZE_PIL, ws, NULL, &err) == QVL_ERR_LIMIT);
    CHECK(resize_workspace_size(RESIZE_MAX_SIDE + 1, 1, 1, 1, 1) == 0);
    CHECK(resize_workspace_size(RESIZE_MAX_SIDE, 1, 1, 1, 4) > 0);
    CHECK(resize_workspace_size(2, 2, 1, 1, 3) <= sizeof ws);
}

/* Opt-in timing of a phone-photo-sized downscale. */
static void bench(void) {
    const int sw = 4000, sh = 3000, dw = 1344, dh = 1008, c = 3;
    uint8_t *src = malloc((size_t)sw * sh * c), *dst = malloc((size_t)dw * dh * c);
    void *ws = malloc(resize_workspace_size(sw, sh, dw, dh, c));
    gen_image(2, 9, sh, sw, c, src);
    for (int k = 0; k < 2; k++)
        for (int simd = 1; simd >= 0; simd--)
            for (int t = 1; t <= 2; t++) {
                resize_set_simd(simd);
                double best = 1e9;
                for (int rep = 0; rep < 3; rep++) {
                    double t0 = tu_now();
                    CHECK(resize_u8(src, sw, sh, c, dst, dw, dh, (resize_kind)k, ws, tu_pool(t), NULL) == QVL_OK);
                    double el = tu_now() - t0;
                    if (el < best) best = el;
                }
                printf("bench 4000x3000 -> 1344x1008 %-11s %s %d thread(s): %.1f ms\n",
                       k == 0 ? "torchvision" : "pil", simd ? "avx2  " : "scalar", t, best * 1e3);
            }
    resize_set_simd(1);
    free(src);
    free(dst);
    free(ws);
}

int main(void) {
    test_worked_examples();
    test_invalid();
    test_threads();
    test_simd_vs_scalar();
    test_corpus();
    if (getenv("QVL_RESIZE_BENCH")) bench();
    return tu_finish("test_resize");
}
