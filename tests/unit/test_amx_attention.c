/* test_amx_attention.c — attention on AMX tiles (src/cpu/attention_amx.c) against its element-by-element
 * definition (attn_amx_ref, bf16.h: TDPBF16PS's order for Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ, the bf16 definition's
 * online softmax), bit for bit, on segments at and around every edge of its blocking (16-query groups, 16-key
 * blocks, 32-key steps, 64/80-key tiles with a padded last step, 192/240-row query tiles, several segments per
 * call), head dims 64 and 72 (32-dim K tiles, 16-dim Oᵀ tiles, 72 padded), the other head dims the tiles take
 * (one K tile; four, i.e. every tile register) and some they leave to the bf16 blocks, outputs NaN-poisoned,
 * ending at a guard page or with poisoned gaps between rows, 1 and 2 threads.
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
static int n_differ, n_amx_cases;
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

/* Segments lens[0 .. n_seg) of nh heads of hd, q/k/v the thirds of a fused qkv buffer; outputs with a gap of `gap`
 * poisoned floats after each row (0: the last row ends at a guard page). two: also 2 threads. */
static void attn_case(const int *lens, int n_seg, int hd, int nh, int gap, int two) {
    const int H = nh * hd;
    int cu[8], S = 0;
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
    }
    free(out1);
    free(ws);
    if (be_emu && hd <= 72 && S <= 100) { /* the backend entry routes to the emulated kernel, in its workspace */
        void *bws = malloc(be_emu->attention_ws(hd, 2));
        be_attn ba = {a.q, a.k, a.v, a.ldq, a.ldk, a.ldv, out, ldo, nh, hd, cu, n_seg, a.scale, NULL, 0};
        poison(out, on);
        be_emu->attention(be_emu, &ba, bws, tu_pool(2));
        snprintf(what + strlen(what), sizeof what - strlen(what), " (backend %s)", be_emu->name);
        CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)ref, on * sizeof(float), what));
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
    size_t n;
    const backend *const *t = backend_table(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i]->name, "amx-emulated") == 0) be_emu = t[i];
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
    if (hw) CHECK(attn_amx_check() == (exact ? 2 : 1));
#endif
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
