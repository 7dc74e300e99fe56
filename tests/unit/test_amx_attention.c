/* test_amx_attention.c — attention on AMX tiles (src/cpu/attention_amx.c) against its element-by-element
 * definition (attn_amx_ref, bf16.h: TDPBF16PS's order for Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ, the bf16 definition's
 * online softmax), bit for bit, on segments at and around every edge of its blocking (16-query groups, 16-key
 * blocks, 32-key steps, 64/80-key tiles with a padded last step, 192/240-row query tiles, several segments per
 * call), head dims 64 and 72 (32-dim K tiles, 16-dim Oᵀ tiles, 72 padded), the other head dims the tiles take
 * (one K tile; four, i.e. every tile register) and some they leave to the bf16 blocks, outputs NaN-poisoned,
 * ending at a guard page or with poisoned gaps between rows, 1, 2 and 16 threads; each case with K and V laid out
 * per work item and from the pack in the call's scratch (room for every head, for one, for some: groups; one byte
 * short of one head: the per-item path; unaligned pointers), the same bits either way, the scratch checked written
 * exactly where the pack goes (its padding, which no output shows, included) and untouched otherwise.
 *
 * Everywhere: the kernel over the C model of the tile instructions (amx_emulated.c), all portable C; on an
 * AVX512-BF16 CPU also the kernel with the instruction build's AVX-512 layouts and softmax over the model, and
 * the backend's amx-emulated entry. The definition is checked against f64 softmax attention within bf16 rounding
 * and shown to differ from the VDPBF16PS-order definition. Where AMX is usable the instruction kernel runs the
 * same cases; elsewhere the test says that the hardware half did not run, and exits 77 (skipped) after the rest
 * passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "cpu/attention.h"
#include "cpu/bf16.h"
#include "testutil.h"

static int hw;    /* the AMX set is usable here */
static int exact; /* ... and its tiles gave the definition's bits in the start-up check */
static int simd; /* AVX512-BF16: the _emulated_simd build runs */
static const backend *be_emu;
static int n_differ, n_amx_cases, n_packed;
static double worst_order, least_swap = INFINITY; /* amx_attn_excess: VDPBF16PS order; two output rows swapped */

typedef void (*run_fn)(const attn_args *, void *, thread_pool *);

static void fill(float *x, size_t n, uint32_t *st, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = tu_frand(st) * scale;
}

static void poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

static int all_written(const float *o, int S, int H, size_t ldo) {
    for (int i = 0; i < S; i++)
        for (int d = 0; d < H; d++)
            if (isnan(o[(size_t)i * ldo + d])) return 0;
    return 1;
}

/* Softmax attention in f64 on the f32 inputs, relative L2 error of got against it. */
static double err_f64(const attn_args *a, const float *got) {
    const int hd = a->head_dim;
    double num = 0, den = 0;
    int max_len = 0;
    for (int s = 0; s < a->n_seg; s++)
        if (a->cu[s + 1] - a->cu[s] > max_len) max_len = a->cu[s + 1] - a->cu[s];
    double *p = malloc((size_t)max_len * sizeof(double)), *o = malloc((size_t)hd * sizeof(double));
    for (int s = 0; s < a->n_seg; s++) {
        const int base = a->cu[s], len = a->cu[s + 1] - base;
        for (int h = 0; h < a->n_heads; h++)
            for (int i = base; i < base + len; i++) {
                const float *qi = a->q + (size_t)i * a->ldq + (size_t)h * hd;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < len; j++) {
                    const float *kj = a->k + (size_t)(base + j) * a->ldk + (size_t)h * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)qi[e] * kj[e];
                    p[j] = d * a->scale;
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j < len; j++) sum += p[j] = exp(p[j] - mx);
                for (int e = 0; e < hd; e++) o[e] = 0;
                for (int j = 0; j < len; j++) {
                    const float *vj = a->v + (size_t)(base + j) * a->ldv + (size_t)h * hd;
                    for (int e = 0; e < hd; e++) o[e] += p[j] / sum * vj[e];
                }
                for (int e = 0; e < hd; e++) {
                    const double g = got[(size_t)i * a->ldo + (size_t)h * hd + e];
                    num += (g - o[e]) * (g - o[e]), den += o[e] * o[e];
                }
            }
    }
    free(p), free(o);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Bytes of one head's K and V pack (attention_amx.c, from its layout: per segment, K rows rounded up to 16 keys of
 * 32·ceil(hd / 32) bf16, and Vᵀ steps of 32 keys, 16·ceil(hd / 16) rows of 16 dwords). */
static size_t pack_head_bytes(const int *lens, int n_seg, int hd) {
    const size_t ht = ((size_t)hd + 31) / 32, hb = ((size_t)hd + 15) / 16;
    size_t dw = 0;
    for (int s = 0; s < n_seg; s++)
        dw += ((size_t)lens[s] + 15) / 16 * 16 * 16 * ht + ((size_t)lens[s] + 31) / 32 * 16 * hb * 16;
    return dw * sizeof(uint32_t);
}

/* The scratch after a call that packed `heads` heads at a time (0: none, the per-item path): the bytes [p1, p1 +
 * heads·head_bytes) from the 64-byte boundary p1 at or after p all written (no 0xffff word is left of the 0xff
 * poison: the pack holds bf16 of finite values or zeros), every other byte of the buffer untouched. */
static int scratch_as_expected(const unsigned char *buf, size_t buf_bytes, const unsigned char *p, size_t heads,
                               size_t head_bytes) {
    const size_t lo = (size_t)((((uintptr_t)p + 63) & ~(uintptr_t)63) - (uintptr_t)buf);
    const size_t hi = heads ? lo + heads * head_bytes : 0;
    for (size_t i = 0; i < buf_bytes; i++) {
        if (heads && i >= lo && i < hi) {
            if ((i - lo) % 2 == 0 && buf[i] == 0xff && buf[i + 1] == 0xff) return 0;
        } else if (buf[i] != 0xff) {
            return 0;
        }
    }
    return 1;
}

/* Segments lens[0 .. n_seg) of nh heads of hd, q/k/v the thirds of a fused qkv buffer; outputs with a gap of `gap`
 * poisoned floats after each row (0: the last row ends at a guard page). two: also 2 and 16 threads. Each set runs
 * without scratch, then with scratch for the K and V pack (attention_amx.c): room for every head (unaligned), one
 * byte short of one head (the per-item path), exactly one head at an unaligned pointer (groups of one), and room
 * for half the heads and a half (groups: 5 heads with room for 2 pack 2, 2, 1). */
static void attn_case(const int *lens, int n_seg, int hd, int nh, int gap, int two) {
    const int H = nh * hd;
    int cu[16], S = 0;
    cu[0] = 0;
    for (int s = 0; s < n_seg; s++) cu[s + 1] = S += lens[s];
    uint32_t st = (uint32_t)(S * 131 + hd * 7 + n_seg);
    float *qkv = malloc((size_t)S * 3 * H * sizeof(float));
    fill(qkv, (size_t)S * 3 * H, &st, 2.0f);
    const size_t ldo = (size_t)H + (size_t)gap, on = (size_t)S * ldo;
    float *ref = malloc(on * sizeof(float)), *vdp = malloc(on * sizeof(float));
    attn_args a = {.q = qkv, .k = qkv + H, .v = qkv + 2 * H, .ldq = 3 * (size_t)H, .ldk = 3 * (size_t)H,
                   .ldv = 3 * (size_t)H, .out = ref, .ldo = ldo, .n_heads = nh, .head_dim = hd, .cu = cu,
                   .n_seg = n_seg, .scale = 1.0f / sqrtf((float)hd)};
    char what[160];
    snprintf(what, sizeof what, "S %d (%d segments, first %d) hd %d heads %d gap %d", S, n_seg, lens[0], hd, nh, gap);
    poison(ref, on);
    attn_amx_ref(&a);
    CHECK(all_written(ref, S, H, ldo));
    const double rel = err_f64(&a, ref);
    if (!(rel < 2e-2)) printf("%s: definition vs f64 relative error %.3g\n", what, rel);
    CHECK(rel < 2e-2);
    poison(vdp, on);
    a.out = vdp;
    attn_bf16_ref(&a);
    const int differs = memcmp(ref, vdp, on * sizeof(float)) != 0;
    if (attn_amx_takes(hd)) {
        n_amx_cases++;
        n_differ += differs;
        /* amx_attn_excess (for tiles that sum in another order): the VDPBF16PS order is within its bound of the
         * TDPBF16PS one; two rows swapped are not */
        const double x = amx_attn_excess(&a, vdp, ref);
        if (!(x <= 1.0)) printf("%s: VDPBF16PS order at %.3g of the bound\n", what, x);
        CHECK(x <= 1.0);
        if (x > worst_order) worst_order = x;
        if (lens[0] >= 2) {
            for (int d = 0; d < H; d++) {
                const float t = vdp[d];
                vdp[d] = vdp[ldo + (size_t)d], vdp[ldo + (size_t)d] = t;
            }
            const double sw = amx_attn_excess(&a, vdp, ref);
            CHECK(sw > 1.0);
            if (sw < least_swap) least_swap = sw;
        }
    } else {
        CHECK(!differs); /* the bf16 blocks' arithmetic for head dims the tiles leave */
    }

    void *ws = malloc(attn_amx_workspace_size(hd, 16));
    float *out = tu_guarded_alloc(on * sizeof(float));
    a.out = out;
    struct { const char *name; run_fn run; int on; } sets[] = {
        {"emulated", attn_amx_run_emulated, 1},
#if QVL_WITH_X86
        {"emulated-simd", attn_amx_run_emulated_simd, simd},
        {"amx", attn_amx_run, hw},
#endif
    };
    float *out1 = malloc(on * sizeof(float));
    const size_t head_bytes = pack_head_bytes(lens, n_seg, hd), buf_bytes = (size_t)nh * head_bytes + 256;
    unsigned char *buf = tu_guarded_alloc(buf_bytes); /* ends at a guard page */
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
        if (!sets[s].on) continue;
        /* tiles that sum in another order than the definition (start-up check): within the bound of it, and the
         * thread counts the same bits */
        const int inexact = strcmp(sets[s].name, "amx") == 0 && !exact;
        static const int nts[] = {1, 2, 16}; /* 16: more threads than items on the short segments */
        for (int ti = 0; ti < (two ? 3 : 1); ti++) {
            const int nt = nts[ti];
            poison(out, on);
            sets[s].run(&a, ws, tu_pool(nt));
            char w2[224];
            snprintf(w2, sizeof w2, "amx attention %s (%s, %d threads)", what, sets[s].name, nt);
            if (!inexact) {
                CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)ref, on * sizeof(float), w2));
                continue;
            }
            const double x = amx_attn_excess(&a, out, ref);
            if (!(x <= 1.0)) printf("%s: %.3g of the bound from the definition\n", w2, x);
            CHECK(x <= 1.0);
            if (nt == 1) memcpy(out1, out, on * sizeof(float));
            else CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)out1, on * sizeof(float), w2));
        }
        if (!inexact) memcpy(out1, ref, on * sizeof(float)); /* the per-item path's bits: the definition's */
        /* With scratch: the same bits as without (and so, where the tiles are exact, the definition's), and the
         * pack written where it should be (nothing outside it; nothing at all when it does not fit one head). */
        const size_t fit_half = nh / 2 > 1 ? (size_t)nh / 2 : 1;
        const struct { size_t off, bytes; } zs[] = {
            {1, buf_bytes - 1},
            {3, 0}, /* bytes: the alignment pad + head_bytes - 1 */
            {5, 0}, /* bytes: the alignment pad + head_bytes */
            {0, fit_half * head_bytes + head_bytes / 2},
        };
        for (int z = 0; z < 4; z++) {
            unsigned char *p = buf + zs[z].off;
            const size_t pad = (size_t)((((uintptr_t)p + 63) & ~(uintptr_t)63) - (uintptr_t)p);
            const size_t bytes = z == 1 ? pad + head_bytes - 1 : z == 2 ? pad + head_bytes : zs[z].bytes;
            const size_t fit = bytes >= pad ? (bytes - pad) / head_bytes : 0;
            /* heads per group, as attention_amx.c groups them (the fewest groups of near-equal size) */
            const size_t groups = fit == 0 ? 0 : fit >= (size_t)nh ? 1 : ((size_t)nh + fit - 1) / fit;
            const size_t heads = !attn_amx_takes(hd) || groups == 0 ? 0 : ((size_t)nh + groups - 1) / groups;
            a.scratch = p;
            a.scratch_bytes = bytes;
            for (int ti = 0; ti < (two ? 3 : 1); ti++) {
                const int nt = nts[ti];
                poison(out, on);
                memset(buf, 0xff, buf_bytes);
                sets[s].run(&a, ws, tu_pool(nt));
                char w2[288];
                snprintf(w2, sizeof w2, "amx attention %s (%s, %d threads, scratch +%zu %zu of %zu per head: %zu heads "
                         "a group)", what, sets[s].name, nt, zs[z].off, bytes, head_bytes, heads);
                const unsigned char *got = (const unsigned char *)out;
                CHECK(tu_same_bytes(got, (const unsigned char *)out1, on * sizeof(float), w2));
                if (!inexact) CHECK(tu_same_bytes(got, (const unsigned char *)ref, on * sizeof(float), w2));
                const int as_expected = scratch_as_expected(buf, buf_bytes, p, heads, head_bytes);
                if (!as_expected) printf("%s: the scratch is not as the pack should leave it\n", w2);
                CHECK(as_expected);
                n_packed += heads > 0 && as_expected;
            }
            a.scratch = NULL;
            a.scratch_bytes = 0;
        }
    }
    tu_guarded_free(buf);
    free(out1);
    free(ws);
    if (be_emu && hd <= 72 && S <= 100) { /* the backend entry routes to the emulated kernel, in its workspace */
        void *bws = malloc(be_emu->attention_ws(hd, 2));
        unsigned char *sc = malloc((size_t)nh * head_bytes + 64);
        snprintf(what + strlen(what), sizeof what - strlen(what), " (backend %s)", be_emu->name);
        for (int z = 0; z < 2; z++) { /* without scratch, and with it for every head (the call passes it on) */
            be_attn ba = {a.q, a.k, a.v, a.ldq, a.ldk, a.ldv, out, ldo, nh, hd, cu, n_seg, a.scale, z ? sc : NULL,
                          z ? (size_t)nh * head_bytes + 64 : 0, NULL, NULL};
            poison(out, on);
            if (z) memset(sc, 0xff, (size_t)nh * head_bytes + 64);
            be_emu->attention(be_emu, &ba, bws, tu_pool(2));
            CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)ref, on * sizeof(float), what));
            if (z && attn_amx_takes(hd))
                CHECK(scratch_as_expected(sc, (size_t)nh * head_bytes + 64, sc, (size_t)nh, head_bytes));
        }
        free(sc);
        free(bws);
    }
    tu_guarded_free(out);
    free(ref), free(vdp), free(qkv);
}

int main(void) {
    const double t0 = tu_now();
    int usable = 0;
    const char *status = backend_amx_status(&usable);
    hw = usable;
    exact = backend_amx_exact();
    simd = QVL_WITH_X86 && cpu_has_avx512bf16();
    be_emu = backend_find("amx-emulated");
    CHECK(be_emu != NULL);
    printf("test_amx_attention: AMX-BF16 on this CPU: %s; AVX-512 parts over the model: %s\n", status,
           simd ? "yes" : "no (no AVX512-BF16)");
    /* test_bf16's attention edges: 16-row groups and vectors, 48-row blocks, odd key counts, 16-key blocks,
     * 32-key steps (and a padded last step: 65-80-key last tiles), 64/80-key tiles, 192/240-row query tiles. */
    static const int segs[][4] = {{1, 2, 3, 0},    {7, 8, 9, 0},     {15, 16, 17, 0}, {31, 32, 33, 0},
                                  {47, 48, 49, 0},  {63, 64, 65, 0},  {79, 80, 81, 0}, {144, 31, 0, 0},
                                  {192, 193, 0, 0}, {208, 95, 0, 0}, {240, 241, 0, 0}, {433, 0, 0, 0},
                                  {784, 0, 0, 0}};
    const int nsegs = (int)(sizeof segs / sizeof *segs);
    for (int i = 0; i < nsegs; i++) {
        int m = 0;
        while (m < 4 && segs[i][m]) m++;
        const int big = i >= nsegs - 2; /* 433 and 784 rows: one head, one thread count (the model is slow) */
        attn_case(segs[i], m, 64, big ? 1 : 2, i % 2 ? 3 : 0, !big);
        attn_case(segs[i], m, 72, big ? 1 : 2, i % 2 ? 0 : 5, !big);
    }
    /* The start-up checks (for the backend's AMX check) agree in every build that runs here. */
    CHECK(attn_amx_check_emulated() == 2);
#if QVL_WITH_X86
    if (simd) CHECK(attn_amx_check_emulated_simd() == 2);
    if (hw) { /* exact: both start-up checks gave the definition's bits; else either may be inexact (1) */
        const int r = attn_amx_check();
        CHECK(exact ? r == 2 : r >= 1);
    }
#endif
    /* Many segments of awkward lengths in one call (K rows of each padded to 16 keys and Vᵀ to 32 in the pack,
     * segment after segment), and five heads (groups of 2, 2 and 1 with room for two). */
    static const int awk[] = {1, 15, 16, 17, 31, 33, 63, 65, 80, 81, 200};
    attn_case(awk, 11, 64, 2, 0, 1);
    attn_case(awk, 11, 72, 2, 3, 1);
    static const int five[] = {81, 17, 144};
    attn_case(five, 3, 72, 5, 0, 1);
    static const int more[] = {33, 17, 80};
    attn_case(more, 3, 2, 2, 1, 1);   /* one K tile, one Oᵀ tile */
    attn_case(more, 3, 40, 2, 0, 1);  /* two K tiles, three Oᵀ tiles */
    attn_case(more, 3, 128, 2, 0, 1); /* four K tiles, eight Oᵀ tiles */
    attn_case(more, 3, 96, 1, 2, 1);  /* three full K tiles */
    attn_case(more, 3, 7, 2, 0, 1);   /* odd: the bf16 blocks */
    attn_case(more, 3, 130, 1, 0, 1); /* wider than the tiles take: the bf16 blocks */
    /* The orders differ: most cases the tiles take come out differently from the VDPBF16PS definition. */
    printf("test_amx_attention: %d of %d tile cases differ from the VDPBF16PS-order definition (%.1f s)\n", n_differ,
           n_amx_cases, tu_now() - t0);
    CHECK(n_differ * 2 > n_amx_cases);
    printf("test_amx_attention: %d runs with K and V packed per (segment, head) in the scratch\n", n_packed);
    CHECK(n_packed > 0);
    printf("test_amx_attention: in units of amx_attn_excess's bound, the VDPBF16PS order at most %.3g, two output "
           "rows swapped at least %.3g\n", worst_order, least_swap);
    if (!hw && tu_failures == 0) {
        printf("test_amx_attention: the AMX attention passes over the C model of the tile instructions%s; AMX is not "
               "usable here (%s), so the instructions themselves were not run (skipped)\n",
               simd ? " (portable and with its AVX-512 parts)" : "", status);
        tu_finish("test_amx_attention");
        return TU_SKIP;
    }
    return tu_finish("test_amx_attention");
}
