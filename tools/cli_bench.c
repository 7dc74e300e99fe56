/* cli_bench.c — `qvl bench`: encode timings on a model at several input sizes, with the per-phase breakdown,
 * achieved GFLOP/s, the share of the measured peak of the unit the kernels run on (f32 FMA, AVX512-BF16's
 * VDPBF16PS or AMX's TDPBF16PS), and peak RSS. */
#include <getopt.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"

static const char bench_help[] =
    "Usage: qvl bench --model DIR [--sizes 224,448,896] [--video FRAMESxSIDE] [--batch NxSIDE] [--threads N]\n"
    "                 [--repeat N] [--isa auto|avx2|avx512|amx] [--precision f32|bf16|auto]\n"
    "\n"
    "Time qvl_encode on synthetic pixel rows (deterministic) at each square image size, a video and a batch of\n"
    "images in one call. Reports the median of --repeat runs after one warm-up, that run's per-phase breakdown,\n"
    "achieved GFLOP/s (GEMM + attention FLOPs) and the share of the peak of the unit the kernels run on, measured\n"
    "here with a loop of its instruction: f32 FMA, or for bf16 VDPBF16PS (AVX512-BF16) or TDPBF16PS (AMX tiles);\n"
    "none for the portable kernel sets (plain C), which get no share.\n"
    "\n"
    "Options:\n"
    "  -m, --model DIR      model directory\n"
    "  -s, --sizes LIST     square image sides in pixels, multiples of 32 (default 224,448,896)\n"
    "  -v, --video F x S    F frames of S x S pixels (default 8x448; 0x0 to skip)\n"
    "  -b, --batch N x S    N images of S x S pixels in one call (default 8x224; 0x0 to skip)\n"
    "  -t, --threads N      worker threads (default 0: all cores)\n"
    "  -r, --repeat N       timed runs per case (default 3)\n"
    "  -i, --isa SET        kernel set: auto (default: the widest this CPU runs), avx2, avx512, amx; the peak is\n"
    "                       measured with the vector width of the set in use\n"
    "  -P, --precision P    f32 (default), bf16 or auto (bf16 where it is faster here); bf16 rows are\n"
    "                       set against the bf16 unit's peak (the precise f32 GEMMs they include run slower)\n"
    "  -h, --help           show this help\n"
    "\n"
    "Examples:\n"
    "  qvl bench --model Qwen3-VL-2B-Instruct --sizes 448 --video 0x0 --batch 0x0\n"
    "  qvl bench --model Qwen3-VL-2B-Instruct --sizes 224 --video 4x224 --batch 4x224 --precision auto --repeat 1\n";

/* The 512-bit loops run 24 chains: a unit of two pipes and latency L needs 2·L chains in flight, and VDPBF16PS
 * on AMD Zen 5 reached only 92 % of its rate with 12 (measured: 8 / 12 / 16 / 24 chains 353 / 488-500 / 531 /
 * 525-533 GFLOP/s on one core, the bf16 GEMM's 14 x 32 micro-tile alone 511-525); 24 leaves room for a longer
 * latency and fits the 32 zmm registers. */
enum { CHAINS512 = 24 };

#if defined(__x86_64__) || defined(__i386__)
/* 12 independent FMA chains of 8 lanes per thread: the f32 FMA peak. */
__attribute__((target("avx2,fma"))) static double fma_loop(long iters) {
    typedef float v8 __attribute__((vector_size(32)));
    v8 a[12], m = {1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f};
    v8 add = {1e-7f, 1e-7f, 1e-7f, 1e-7f, 1e-7f, 1e-7f, 1e-7f, 1e-7f};
    for (int k = 0; k < 12; k++) a[k] = add * (float)k;
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = __builtin_ia32_vfmaddps256(a[k], m, add);
    float s = 0;
    for (int k = 0; k < 12; k++) s += a[k][0];
    return s;
}

/* The same with 16-lane AVX-512 FMAs, on CPUs whose kernels use them. */
__attribute__((target("avx512f"))) static double fma_loop512(long iters) {
    __m512 a[CHAINS512], m = _mm512_set1_ps(1.0000001f), add = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < CHAINS512; k++) a[k] = _mm512_set1_ps(1e-7f * (float)k);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 24
        for (int k = 0; k < CHAINS512; k++) a[k] = _mm512_fmadd_ps(a[k], m, add);
    float s = 0;
    for (int k = 0; k < CHAINS512; k++) s += _mm512_cvtss_f32(a[k]);
    return s;
}
/* CHAINS512 independent VDPBF16PS chains (16 lanes x 2 bf16 products each): the AVX512-BF16 peak. Called only when
 * the model runs the avx512bf16 backend (the library checked the CPU). */
__attribute__((target("avx512f,avx512bf16"))) static double bf16_loop(long iters) {
    __m512 a[CHAINS512];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f); /* finite as bf16 pairs */
    for (int k = 0; k < CHAINS512; k++) a[k] = _mm512_set1_ps(1e-7f * (float)k);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 24
        for (int k = 0; k < CHAINS512; k++) a[k] = _mm512_dpbf16_ps(a[k], (__m512bh)x, (__m512bh)y);
    float s = 0;
    for (int k = 0; k < CHAINS512; k++) s += _mm512_cvtss_f32(a[k]);
    return s;
}

/* TDPBF16PS on four independent 16 x 16 accumulator tiles (each 16 x 16 x 32: 16384 FLOP): the AMX-BF16 peak.
 * Called only when the model runs the amx backend (the library checked the CPU, enabled the tile data state for
 * this process and ran its start-up check). Inline asm that names the config it reads (gcc 12 drops the stores
 * before the _tile_loadconfig intrinsic at -O2). */
static double amx_loop(long iters) {
    struct { unsigned char palette, start, reserved[14]; unsigned short colsb[16]; unsigned char rows[16]; } cfg;
    static const unsigned short one = 0x3f80, tiny = 0x3380; /* bf16 1.0 and 2^-24: the sums stay finite */
    unsigned short *ab = aligned_alloc(64, 2 * 1024);
    float *c = aligned_alloc(64, 1024);
    if (!ab || !c) {
        free(ab), free(c);
        return 0;
    }
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    for (int i = 0; i < 512; i++) ab[i] = one, ab[512 + i] = tiny;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
                     "tileloadd (%0,%2,1), %%tmm4\n\ttileloadd (%0,%2,1), %%tmm5\n\t"
                     "tileloadd (%1,%2,1), %%tmm6\n\ttileloadd (%1,%2,1), %%tmm7" ::"r"(ab), "r"(ab + 512),
                     "r"(64L) : "memory");
    for (long i = 0; i < iters; i++)
        __asm__ volatile("tdpbf16ps %tmm6, %tmm4, %tmm0\n\ttdpbf16ps %tmm7, %tmm4, %tmm1\n\t"
                         "tdpbf16ps %tmm6, %tmm5, %tmm2\n\ttdpbf16ps %tmm7, %tmm5, %tmm3");
    __asm__ volatile("tilestored %%tmm0, (%0,%1,1)\n\ttilerelease" ::"r"(c), "r"(64L) : "memory");
    const double s = c[0] + c[255];
    free(ab), free(c);
    return s;
}
#else
/* No x86 kernel sets in this build: the library runs the portable set, and measure_peak reports no peak. */
static double fma_loop(long iters) { return (double)iters * 0.0; }
static double fma_loop512(long iters) { return (double)iters * 0.0; }
static double bf16_loop(long iters) { return (double)iters * 0.0; }
static double amx_loop(long iters) { return (double)iters * 0.0; }
#endif

/* The unit a model's kernels run on, whose peak %peak is taken against; none for the portable sets (plain C, in
 * whatever instructions the compiler chose: no one unit's peak says how near they are to the machine's limit). */
typedef enum peak_unit { UNIT_FMA_AVX2, UNIT_FMA_AVX512, UNIT_BF16_DOT, UNIT_AMX, UNIT_NONE } peak_unit;
static const char *const unit_name[] = {"f32 FMA", "f32 FMA", "bf16 VDPBF16PS", "bf16 TDPBF16PS", ""};
static const char *const unit_how[] = {"AVX2", "AVX-512", "AVX512-BF16", "AMX tiles", ""};

static peak_unit unit_of(const qvl_model_info *in) {
    if (strncmp(in->backend, "portable", 8) == 0 || in->isa < QVL_ISA_AVX2) return UNIT_NONE;
    if (in->precision == QVL_PRECISION_BF16 && strcmp(in->backend, "amx") == 0) return UNIT_AMX;
    if (in->precision == QVL_PRECISION_BF16 && strcmp(in->backend, "avx512bf16") == 0) return UNIT_BF16_DOT;
    return in->isa == QVL_ISA_AVX512 || in->isa == QVL_ISA_AMX ? UNIT_FMA_AVX512 : UNIT_FMA_AVX2;
}

typedef struct peak_arg {
    long iters;
    peak_unit unit;
    double sink;
} peak_arg;

static void *peak_thread(void *p) {
    peak_arg *a = p;
    switch (a->unit) {
    case UNIT_FMA_AVX2: a->sink = fma_loop(a->iters); break;
    case UNIT_FMA_AVX512: a->sink = fma_loop512(a->iters); break;
    case UNIT_BF16_DOT: a->sink = bf16_loop(a->iters); break;
    case UNIT_AMX: a->sink = amx_loop(a->iters); break;
    case UNIT_NONE: break;
    }
    return NULL;
}

/* The peak of `unit` (the kernel set the model was loaded for, which the library only resolves to a set this CPU
 * runs): `threads` threads running its loop at once; 0 for UNIT_NONE (which unit_of gives below AVX2). */
static double measure_peak(int threads, peak_unit unit) {
    /* FLOP per loop iteration: 12 vectors of AVX2 FMA (8 lanes x 2), CHAINS512 of AVX-512 FMA (16 lanes x 2) or
     * VDPBF16PS (16 lanes x 2 pairs x 2), or four 16 x 16 x 32 tile products */
    static const double flop_iter[] = {12.0 * 8 * 2, CHAINS512 * 16.0 * 2, CHAINS512 * 16.0 * 4,
                                       4.0 * 16 * 16 * 32 * 2};
    if (unit == UNIT_NONE) return 0;
    const long iters = unit == UNIT_AMX ? 2000000 : unit == UNIT_FMA_AVX2 ? 20000000 : 10000000;
    if (threads > 256) threads = 256;
    double best = 0, sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        peak_arg args[256];
        pthread_t tid[256];
        int started = 0;
        double t0 = cli_now_ms();
        for (int t = 0; t < threads; t++) {
            args[t] = (peak_arg){iters, unit, 0};
            if (t > 0 && pthread_create(&tid[t], NULL, peak_thread, &args[t]) == 0) started++;
            else if (t > 0) break;
        }
        peak_thread(&args[0]);
        for (int t = 1; t <= started; t++) pthread_join(tid[t], NULL);
        double s = (cli_now_ms() - t0) * 1e-3;
        for (int t = 0; t <= started; t++) sink += args[t].sink;
        double gf = (double)(started + 1) * (double)iters * flop_iter[unit] / s * 1e-9;
        if (gf > best) best = gf;
    }
    if (sink == 12345.678) puts("");
    return best;
}

typedef struct bench_case {
    char name[64];
    qvl_grid grids[64];
    size_t n_grids;
} bench_case;

/* One timed run: its wall time and the context's profile of it. */
typedef struct bench_run {
    double ms;
    qvl_profile p;
} bench_run;

static int cmp_run(const void *a, const void *b) {
    double x = ((const bench_run *)a)->ms, y = ((const bench_run *)b)->ms;
    return (x > y) - (x < y);
}

static int parse_pair(const char *s, long *a, long *b) {
    char buf[64], *x;
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    if (!(x = strchr(buf, 'x'))) return -1;
    *x = '\0';
    return cli_parse_long(buf, 0, 4096, a) || cli_parse_long(x + 1, 0, 16384, b) ? -1 : 0;
}

int cmd_bench(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"sizes", required_argument, NULL, 's'},
        {"video", required_argument, NULL, 'v'}, {"batch", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'}, {"repeat", required_argument, NULL, 'r'},
        {"isa", required_argument, NULL, 'i'}, {"precision", required_argument, NULL, 'P'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *model_dir = NULL, *sizes = "224,448,896";
    long video_f = 8, video_s = 448, batch_n = 8, batch_s = 224, threads = 0, repeat = 3;
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    int c;
    while ((c = getopt_long(argc, argv, ":m:s:v:b:t:r:i:P:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 's': sizes = optarg; break;
        case 'v': if (parse_pair(optarg, &video_f, &video_s)) return cli_usage("--video: '%s' is not FxS", optarg); break;
        case 'b': if (parse_pair(optarg, &batch_n, &batch_s)) return cli_usage("--batch: '%s' is not NxS", optarg); break;
        case 't': if (cli_parse_long(optarg, 0, QVL_MAX_THREADS, &threads)) return cli_usage("--threads: '%s' is not in 0..%d", optarg, QVL_MAX_THREADS); break;
        case 'r': if (cli_parse_long(optarg, 1, 1000, &repeat)) return cli_usage("--repeat: '%s' is not in 1..1000", optarg); break;
        case 'i':
            if (cli_parse_isa(optarg, &lp.isa)) return cli_usage("--isa: '%s' is not auto, avx2, avx512 or amx", optarg);
            break;
        case 'P':
            if (cli_parse_precision(optarg, &lp.precision))
                return cli_usage("--precision: '%s' is not f32, bf16 or auto", optarg);
            break;
        case 'h': fputs(bench_help, stdout); return 0;
        default: return cli_bad_option("bench", c, argv);
        }
    }
    if (optind < argc) return cli_usage("unexpected argument '%s' (see 'qvl bench --help')", argv[optind]);
    if (!model_dir) return cli_usage("bench needs --model DIR");

    bench_case cases[32];
    int n_cases = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", sizes);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n_cases < 24; tok = strtok_r(NULL, ",", &save)) {
        long side;
        if (cli_parse_long(tok, 32, 16384, &side) || side % 32) return cli_usage("--sizes: '%s' is not a multiple of 32", tok);
        bench_case *b = &cases[n_cases++];
        snprintf(b->name, sizeof b->name, "image %ld²", side);
        b->grids[0] = (qvl_grid){1, (int32_t)(side / 16), (int32_t)(side / 16)};
        b->n_grids = 1;
    }
    if (video_f > 0 && video_s > 0) {
        if (video_s % 32 || video_f % 2) return cli_usage("--video: frames must be even and the side a multiple of 32");
        bench_case *b = &cases[n_cases++];
        snprintf(b->name, sizeof b->name, "video %ldx%ld²", video_f, video_s);
        b->grids[0] = (qvl_grid){(int32_t)(video_f / 2), (int32_t)(video_s / 16), (int32_t)(video_s / 16)};
        b->n_grids = 1;
    }
    if (batch_n > 0 && batch_s > 0) {
        if (batch_s % 32 || batch_n > 64) return cli_usage("--batch: at most 64 images, side a multiple of 32");
        bench_case *b = &cases[n_cases++];
        snprintf(b->name, sizeof b->name, "batch %ldx%ld²", batch_n, batch_s);
        for (long i = 0; i < batch_n; i++) b->grids[i] = (qvl_grid){1, (int32_t)(batch_s / 16), (int32_t)(batch_s / 16)};
        b->n_grids = (size_t)batch_n;
    }

    qvl_error err;
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    if (qvl_model_load(model_dir, &lp, &m, &err) != QVL_OK) return cli_fail("%s", err.message);
    qvl_model_info in;
    qvl_model_get_info(m, &in);
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = (int)threads;
    if (qvl_ctx_create(m, &cp, &ctx, &err) != QVL_OK) {
        qvl_model_free(m);
        return cli_fail("%s", err.message);
    }
    const int nt = qvl_ctx_threads(ctx); /* what the pool got: the peak is measured on as many threads */
    /* The peak is measured again after every case: a shared or turbo-bound machine's clock drifts (seen: 338 to
     * 381 GFLOP/s within minutes on the 2-core VM), and each case is set against the mean of the peaks taken just
     * before and just after it. */
    const peak_unit unit = unit_of(&in);
    double peak_before = measure_peak(nt, unit);
    printf("model: %s (%s, depth %d, hidden %d, %s weights)\n", model_dir, in.model_type, in.depth, in.hidden,
           qvl_dtype_name(in.weight_dtype));
    if (unit == UNIT_NONE)
        printf("threads: %d, kernels: %s, no peak: the portable kernels (plain C) are set against no unit's peak, so "
               "no %%peak is given\n", nt, qvl_isa_name(in.isa));
    else
        printf("threads: %d, kernels: %s, measured %s peak: %.1f GFLOP/s (%s; measured again after each case, %%peak "
               "uses the mean around the case)\n", nt, qvl_isa_name(in.isa), unit_name[unit], peak_before,
               unit_how[unit]);
    printf("precision: %s (backend %s)\n\n", qvl_precision_name(in.precision), in.backend);
    printf("%-16s %7s %7s %10s %9s %7s | %8s %8s %8s %8s %8s %8s\n", "case", "patches", "tokens", "time ms", "GFLOP/s",
           "%peak", "patch", "pos/rope", "gemm", "attn", "norm", "merger");
    int rc = 0;
    size_t act_max = 0;
    for (int ci = 0; ci < n_cases && !rc; ci++) {
        bench_case *b = &cases[ci];
        size_t S = qvl_patch_rows(b->grids, b->n_grids), n_tok = S / 4;
        float *px = malloc(S * (size_t)in.row_len * sizeof(float));
        float *out = NULL, *ds[QVL_MAX_DEEPSTACK] = {0};
        if (!px || cli_alloc_outputs(n_tok, (size_t)in.out_hidden, in.n_deepstack, &out, ds)) {
            rc = cli_fail("out of memory for %s", b->name);
            goto next;
        }
        uint64_t st = 0x243F6A8885A308D3ull;
        for (size_t i = 0; i < S * (size_t)in.row_len; i++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            px[i] = (float)((st >> 40) & 0xffff) / 32767.5f - 1.0f;
        }
        static bench_run runs[1000];
        for (long r = -1; r < repeat; r++) {
            double t0 = cli_now_ms();
            if (qvl_encode(ctx, px, S, b->grids, b->n_grids, out, in.n_deepstack ? ds : NULL, &err) != QVL_OK) {
                rc = cli_fail("%s", err.message);
                goto next;
            }
            double t = cli_now_ms() - t0;
            if (r < 0) continue;
            runs[r].ms = t;
            qvl_ctx_get_profile(ctx, &runs[r].p);
        }
        /* Activations of this case: the input rows, every scratch buffer, the outputs. */
        size_t act = S * (size_t)in.row_len * sizeof(float) + qvl_ctx_scratch_size(ctx) +
                     n_tok * (size_t)in.out_hidden * sizeof(float) * (size_t)(1 + in.n_deepstack);
        if (act > act_max) act_max = act;
        /* the median run, and its phases: the phases of one run add up to its time (those of the fastest run
         * would not match the median beside them) */
        qsort(runs, (size_t)repeat, sizeof runs[0], cmp_run);
        const qvl_profile ph = runs[repeat / 2].p;
        const double peak_after = measure_peak(nt, unit), peak = 0.5 * (peak_before + peak_after);
        double med = runs[repeat / 2].ms, flops = ph.gemm_flops + ph.attention_flops;
        double gfs = flops / (med * 1e-3) * 1e-9;
        /* GEMM time: the block GEMMs, the patch embedding and the mergers (whose LayerNorm is counted in). */
        const double gemm_gfs = ph.gemm_flops / ((ph.gemm_ms + ph.patch_ms + ph.merger_ms) * 1e-3) * 1e-9;
        const double attn_gfs = ph.attention_ms > 0 ? ph.attention_flops / (ph.attention_ms * 1e-3) * 1e-9 : 0;
        char pct[3][16] = {"     -", "-", "-"}; /* %peak of the whole, the GEMMs, attention */
        if (peak > 0) {
            snprintf(pct[0], sizeof pct[0], "%6.1f%%", 100 * gfs / peak);
            snprintf(pct[1], sizeof pct[1], "%.0f%%", 100 * gemm_gfs / peak);
            snprintf(pct[2], sizeof pct[2], "%.0f%%", 100 * attn_gfs / peak);
        }
        printf("%-16s %7zu %7zu %10.1f %9.1f %7s | %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", b->name, S, n_tok, med,
               gfs, pct[0], ph.patch_ms, ph.pos_rope_ms, ph.gemm_ms, ph.attention_ms, ph.norm_ms,
               ph.merger_ms);
        printf("%-16s %7s %7s %10s GEMM %.1f GFLOP/s (%s), attention %.1f GFLOP/s (%s), %.1f GFLOP total", "", "", "",
               "", gemm_gfs, pct[1], attn_gfs, pct[2], flops * 1e-9);
        if (peak > 0) printf("; peak %.1f before, %.1f after", peak_before, peak_after);
        putchar('\n');
        peak_before = peak_after;
    next:
        free(px);
        free(out);
        for (int k = 0; k < QVL_MAX_DEEPSTACK; k++) free(ds[k]);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double mib = 1024.0 * 1024.0, rss = ru.ru_maxrss / 1024.0, wts = (double)in.weight_bytes / mib;
    printf("\npeak RSS: %.1f MiB (weights as stored: %.1f MiB)\n", rss, wts);
    if (act_max > 0)
        printf("activations of the largest case (input rows + scratch + outputs): %.1f MiB; peak RSS = weights + "
               "%.2f x activations (weights + 1.25 x activations = %.1f MiB)\n",
               (double)act_max / mib, (rss - wts) / ((double)act_max / mib), wts + 1.25 * (double)act_max / mib);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    return rc;
}
