/* resize.c — antialiased bicubic resize of uint8 images, bit-exact with torch's _upsample_bicubic2d_aa (uint8) and
 * with Pillow's ImagingResample (8 bpc). See resize.h for the contract and
 * shared/reference/resize-exact.md §3–4 for the upstream arithmetic this file reproduces.
 *
 * Structure: build one fixed-point table per changed axis (double weights, quantised per kind), then a horizontal
 * pass into a uint8 intermediate (only the rows the vertical pass reads) and a vertical pass into dst. Both passes
 * are threaded over rows; every output byte is a pure function of its inputs, so any thread count gives the same
 * bytes. The portable loops here are the reference; resize_avx2.c does the same integer sums faster. */
#include "image/resize.h"

#include <math.h>
#include <string.h>

#include "core/cpu.h"
#include "core/error.h"

static int g_allow_simd = 1;

void resize_set_simd(int allow) { g_allow_simd = allow != 0; }

/* ---- Coefficients (shared double arithmetic, resize-exact.md §3.2 / §4.2) ---- */

/* Keys cubic with a = −0.5 in torch's form (aa_filter: cubic_convolution1/2). For a = −0.5 it is bit-identical to
 * Pillow's (((x − 5)x + 8)x − 4)·a: every intermediate is the Pillow one times −1/2, and scaling by a power of two
 * commutes with rounding. */
static double cubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

/* Per-axis constants. scale = n/m; the filter widens by max(scale, 1) when shrinking. */
typedef struct axis_geom {
    int n, m, ksize;
    double scale, support, invscale;
} axis_geom;

static axis_geom geom(int n, int m) {
    axis_geom g;
    g.n = n;
    g.m = m;
    g.scale = (double)n / (double)m;
    double fs = g.scale >= 1.0 ? g.scale : 1.0;
    g.support = 2.0 * fs;
    g.invscale = 1.0 / fs;
    g.ksize = (int)ceil(g.support) * 2 + 1;
    return g;
}

/* Window of output o and its normalised double weights w[0 .. *cnt) (w may be NULL to get the window only). */
static void window(const axis_geom *g, int o, int *first, int *cnt, double *w) {
    double center = g->scale * (o + 0.5);
    int lo = (int)(center - g->support + 0.5); /* C cast: truncation toward 0, as upstream */
    if (lo < 0) lo = 0;
    int hi = (int)(center + g->support + 0.5);
    if (hi > g->n) hi = g->n;
    int c = hi - lo;
    if (c < 0) c = 0;
    if (c > g->ksize) c = g->ksize; /* torch clamps; never triggers */
    *first = lo;
    *cnt = c;
    if (!w) return;
    double total = 0.0;
    for (int j = 0; j < c; j++) {
        w[j] = cubic(((double)(j + lo) - center + 0.5) * g->invscale);
        total += w[j];
    }
    if (total != 0.0)
        for (int j = 0; j < c; j++) w[j] /= total;
}

/* Round half away from zero, as both upstreams: (int)(v ± 0.5). */
static int32_t quantize(double w, int prec) {
    double v = w * (double)(1 << prec);
    return v < 0.0 ? (int32_t)(v - 0.5) : (int32_t)(v + 0.5);
}

/* torch's precision rule (_compute_index_ranges_int16_weights): the first p in 0..21 whose next step would not fit
 * int16, else 22. */
static int torch_precision(double wt_max) {
    int p;
    for (p = 0; p < 22; p++)
        if ((int)(0.5 + wt_max * (double)(1 << (p + 1))) >= (1 << 15)) break;
    return p;
}

/* ---- Workspace plan ---- */

typedef struct axis_mem {
    int32_t *first, *count, *w32;
    int16_t *w16lo, *w16hi;
    double *dw; /* [ksize] scratch for one window's double weights */
} axis_mem;

typedef struct plan {
    size_t total;
    axis_mem h, v;
    uint8_t *mid; /* [sh][dw][c] when both passes run */
} plan;

/* Reserve `bytes` at 64-byte alignment after *off; 1 on overflow. */
static int reserve(size_t *off, size_t count, size_t elem, uint8_t *base, void **out) {
    size_t bytes, o;
    if (size_mul_overflow(count, elem, &bytes)) return 1;
    if (size_add_overflow(*off, 63, &o)) return 1;
    o &= ~(size_t)63;
    if (size_add_overflow(o, bytes, off)) return 1;
    if (base) *out = base + o;
    return 0;
}

static int reserve_axis(size_t *off, int n, int m, uint8_t *base, axis_mem *am) {
    axis_geom g = geom(n, m);
    size_t k4 = ((size_t)g.ksize + 3) & ~(size_t)3, mk, mk4;
    if (size_mul_overflow((size_t)m, (size_t)g.ksize, &mk) || size_mul_overflow((size_t)m, k4, &mk4)) return 1;
    return reserve(off, (size_t)m, sizeof(int32_t), base, (void **)&am->first) ||
           reserve(off, (size_t)m, sizeof(int32_t), base, (void **)&am->count) ||
           reserve(off, mk, sizeof(int32_t), base, (void **)&am->w32) ||
           reserve(off, mk4, sizeof(int16_t), base, (void **)&am->w16lo) ||
           reserve(off, mk4, sizeof(int16_t), base, (void **)&am->w16hi) ||
           reserve(off, (size_t)g.ksize, sizeof(double), base, (void **)&am->dw);
}

/* Lay out the workspace at `base` (NULL: only measure). 1 on overflow. Sizes must already be valid. The
 * intermediate fits either pass order: [sh][dw][c] (horizontal first) or [dh][sw][c] (vertical first). */
static int make_plan(int sw, int sh, int dw, int dh, int c, uint8_t *base, plan *p) {
    memset(p, 0, sizeof *p);
    size_t off = 0;
    if (sw != dw && reserve_axis(&off, sw, dw, base, &p->h)) return 1;
    if (sh != dh && reserve_axis(&off, sh, dh, base, &p->v)) return 1;
    if (sw != dw && sh != dh) {
        size_t a, b;
        if (size_mul_overflow((size_t)sh, (size_t)dw, &a) || size_mul_overflow((size_t)dh, (size_t)sw, &b)) return 1;
        if (size_mul_overflow(a > b ? a : b, (size_t)c, &a)) return 1;
        if (reserve(&off, a, 1, base, (void **)&p->mid)) return 1;
    }
    if (size_add_overflow(off, 64, &p->total)) return 1; /* slack to align the caller's pointer */
    return 0;
}

static int sizes_valid(int sw, int sh, int dw, int dh, int c) {
    return sw >= 1 && sh >= 1 && dw >= 1 && dh >= 1 && c >= 1 && c <= 4 && sw <= RESIZE_MAX_SIDE &&
           sh <= RESIZE_MAX_SIDE && dw <= RESIZE_MAX_SIDE && dh <= RESIZE_MAX_SIDE;
}

size_t resize_workspace_size(int sw, int sh, int dw, int dh, int channels) {
    plan p;
    if (!sizes_valid(sw, sh, dw, dh, channels)) return 0;
    if (make_plan(sw, sh, dw, dh, channels, NULL, &p)) return 0;
    /* The whole image must also be addressable. */
    size_t a, b;
    if (size_mul_overflow((size_t)sw * (size_t)sh, (size_t)channels, &a) ||
        size_mul_overflow((size_t)dw * (size_t)dh, (size_t)channels, &b))
        return 0;
    return p.total;
}

/* Fill the tables of axis n → m for `kind` into am and describe them in ax. */
static void build_axis(int n, int m, resize_kind kind, int c, const axis_mem *am, resize_axis *ax) {
    axis_geom g = geom(n, m);
    int k4 = (g.ksize + 3) & ~3;
    int prec = 22; /* Pillow: PRECISION_BITS = 32 − 8 − 2 */
    if (kind == RESIZE_TORCHVISION) {
        double wt_max = 0.0;
        for (int o = 0; o < m; o++) {
            int first, cnt;
            window(&g, o, &first, &cnt, am->dw);
            for (int j = 0; j < cnt; j++)
                if (am->dw[j] > wt_max) wt_max = am->dw[j];
        }
        prec = torch_precision(wt_max);
    }
    int split = 0;
    ax->simd_end = m;
    for (int o = 0; o < m; o++) {
        int first, cnt;
        window(&g, o, &first, &cnt, am->dw);
        am->first[o] = first;
        am->count[o] = cnt;
        int32_t *w32 = am->w32 + (size_t)o * (size_t)g.ksize;
        int16_t *lo = am->w16lo + (size_t)o * (size_t)k4, *hi = am->w16hi + (size_t)o * (size_t)k4;
        for (int j = 0; j < k4; j++) {
            int32_t q = j < cnt ? quantize(am->dw[j], prec) : 0;
            if (j < g.ksize) w32[j] = q;
            /* hi = round(q / 2^16) so that lo = q − hi·2^16 lies in [−2^15, 2^15). |q| < 2^23. */
            int32_t h = (int32_t)((q + 32768) >> 16);
            hi[j] = (int16_t)h;
            lo[j] = (int16_t)(q - h * 65536);
            if (h != 0) split = 1;
        }
        /* The AVX2 horizontal loop reads 16 bytes at pixel first + j for j = 0, 4, ... < cnt. */
        long last = ((long)first + (long)(((cnt + 3) & ~3) - 4)) * c + 16;
        if (ax->simd_end == m && (cnt < 1 || last > (long)n * c)) ax->simd_end = o;
    }
    ax->n_in = n;
    ax->n_out = m;
    ax->ksize = g.ksize;
    ax->ksize4 = k4;
    ax->prec = prec;
    ax->split = split;
    ax->first = am->first;
    ax->count = am->count;
    ax->w32 = am->w32;
    ax->w16lo = am->w16lo;
    ax->w16hi = am->w16hi;
}

/* ---- Portable passes ---- */

static inline uint8_t clamp8(int32_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* Outputs [o0, n_out) of one row. `c` is a constant after inlining into the switch below. Right shift of a negative
 * int is arithmetic (floor) with GCC and Clang, as upstream relies on. */
static inline void hrow_c(const uint8_t *s, uint8_t *d, const resize_axis *ax, int o0, int c) {
    const int32_t bias = (int32_t)1 << (ax->prec - 1);
    for (int o = o0; o < ax->n_out; o++) {
        const uint8_t *p = s + (size_t)ax->first[o] * (size_t)c;
        const int32_t *k = ax->w32 + (size_t)o * (size_t)ax->ksize;
        const int cnt = ax->count[o];
        int32_t a[4] = {bias, bias, bias, bias};
        for (int j = 0; j < cnt; j++)
            for (int ch = 0; ch < c; ch++) a[ch] += (int32_t)p[j * c + ch] * k[j];
        for (int ch = 0; ch < c; ch++) d[(size_t)o * (size_t)c + (size_t)ch] = clamp8(a[ch] >> ax->prec);
    }
}

static void hrow_scalar(const uint8_t *s, uint8_t *d, const resize_axis *ax, int o0, int c) {
    switch (c) {
    case 1: hrow_c(s, d, ax, o0, 1); break;
    case 2: hrow_c(s, d, ax, o0, 2); break;
    case 3: hrow_c(s, d, ax, o0, 3); break;
    default: hrow_c(s, d, ax, o0, 4); break;
    }
}

/* Bytes [b0, b1) of output row o: src rows `stride` bytes apart. */
static void vrow_scalar(const uint8_t *src, size_t stride, uint8_t *d, size_t b0, size_t b1, const resize_axis *ax,
                        int o) {
    enum { CHUNK = 512 };
    int32_t acc[CHUNK];
    const int32_t bias = (int32_t)1 << (ax->prec - 1);
    const int32_t *k = ax->w32 + (size_t)o * (size_t)ax->ksize;
    const uint8_t *rows = src + (size_t)ax->first[o] * stride;
    const int cnt = ax->count[o];
    for (size_t b = b0; b < b1; b += CHUNK) {
        const size_t n = b1 - b < CHUNK ? b1 - b : CHUNK;
        for (size_t i = 0; i < n; i++) acc[i] = bias;
        for (int j = 0; j < cnt; j++) {
            const uint8_t *r = rows + (size_t)j * stride + b;
            const int32_t w = k[j];
            for (size_t i = 0; i < n; i++) acc[i] += (int32_t)r[i] * w;
        }
        for (size_t i = 0; i < n; i++) d[b + i] = clamp8(acc[i] >> ax->prec);
    }
}

/* ---- Driver ---- */

/* The two passes, as ranges of output rows for pool_for. */
typedef struct pass_job {
    const uint8_t *src;
    uint8_t *dst;
    size_t src_row, dst_row;
    int r0, c, simd;
    const resize_axis *ax;
} pass_job;

static void hpass_rows(void *ctx, long b, long e, int thread) {
    (void)thread;
    const pass_job *j = ctx;
    for (int y = j->r0 + (int)b; y < j->r0 + (int)e; y++) {
        const uint8_t *s = j->src + (size_t)y * j->src_row;
        uint8_t *d = j->dst + (size_t)y * j->dst_row;
        int o0 = 0;
#if QVL_WITH_X86
        if (j->simd && j->ax->simd_end > 0) {
            resize_hrow_avx2(s, d, j->c, j->ax);
            o0 = j->ax->simd_end;
        }
#endif
        hrow_scalar(s, d, j->ax, o0, j->c);
    }
}

static void hpass(const uint8_t *src, size_t src_row, uint8_t *dst, size_t dst_row, int r0, int r1,
                  const resize_axis *h, int c, int simd, thread_pool *pool) {
    pass_job j = {src, dst, src_row, dst_row, r0, c, simd, h};
    pool_for(pool, r1 - r0, 0, hpass_rows, &j);
}

static void vpass_rows(void *ctx, long b, long e, int thread) {
    (void)thread;
    const pass_job *j = ctx;
    const size_t row = j->dst_row, n32 = j->simd ? row & ~(size_t)31 : 0;
    for (int y = (int)b; y < (int)e; y++) {
        uint8_t *d = j->dst + (size_t)y * row;
#if QVL_WITH_X86
        if (n32) resize_vrow_avx2(j->src, row, d, n32, j->ax, y);
#endif
        vrow_scalar(j->src, row, d, n32, row, j->ax, y);
    }
}

static void vpass(const uint8_t *src, uint8_t *dst, size_t row, const resize_axis *v, int simd, thread_pool *pool) {
    pass_job j = {src, dst, row, row, 0, 0, simd, v};
    pool_for(pool, v->n_out, 0, vpass_rows, &j);
}

qvl_status resize_u8(const uint8_t *src, int sw, int sh, int channels, uint8_t *dst, int dw, int dh,
                     resize_kind kind, void *ws, thread_pool *pool, qvl_error *err) {
    if (!src || !dst) return err_fail(err, QVL_ERR_INVALID_ARG, "resize: NULL %s", src ? "dst" : "src");
    if (kind != RESIZE_TORCHVISION && kind != RESIZE_PIL && kind != RESIZE_PIL_LEGACY)
        return err_fail(err, QVL_ERR_INVALID_ARG, "resize: unknown kind %d", (int)kind);
    if (sw < 1 || sh < 1 || dw < 1 || dh < 1 || channels < 1 || channels > 4)
        return err_fail(err, QVL_ERR_INVALID_ARG, "resize: bad size %dx%d -> %dx%d with %d channels (need sides >= 1, "
                        "channels 1..4)", sw, sh, dw, dh, channels);
    size_t need = resize_workspace_size(sw, sh, dw, dh, channels);
    if (need == 0)
        return err_fail(err, QVL_ERR_LIMIT, "resize: %dx%d -> %dx%d exceeds the size limit (side <= %d, bytes fit "
                        "size_t)", sw, sh, dw, dh, RESIZE_MAX_SIDE);
    const size_t c = (size_t)channels;
    const int need_h = sw != dw, need_v = sh != dh;
    if (!need_h && !need_v) {
        memcpy(dst, src, (size_t)sw * (size_t)sh * c);
        return QVL_OK;
    }
    if (!ws) return err_fail(err, QVL_ERR_INVALID_ARG, "resize: NULL workspace (%zu bytes needed)", need);

    uint8_t *base = (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    plan p;
    if (make_plan(sw, sh, dw, dh, channels, base, &p))
        return err_fail(err, QVL_ERR_INTERNAL, "resize: workspace plan overflowed after the size check");
    const resize_kind coef_kind = kind == RESIZE_TORCHVISION ? RESIZE_TORCHVISION : RESIZE_PIL;
    resize_axis h = {0}, v = {0};
    if (need_h) build_axis(sw, dw, coef_kind, channels, &p.h, &h);
    if (need_v) build_axis(sh, dh, coef_kind, channels, &p.v, &v);
    /* Pillow 13 ImagingResampleInner: vertical first if the height loses more than twice the pixels the width
     * does. torch and older Pillow always go horizontal first. */
    const int vfirst = need_h && need_v && kind == RESIZE_PIL && sh - dh > 0 && sh - dh > (sw - dw) * 2;

    /* Horizontal-first reads only the source rows the vertical pass needs (as Pillow; no effect on values). */
    int r0 = 0, r1 = sh;
    if (need_v && !vfirst) {
        r0 = sh;
        r1 = 0;
        for (int o = 0; o < dh; o++) {
            if (v.count[o] < 1) continue;
            if (v.first[o] < r0) r0 = v.first[o];
            if (v.first[o] + v.count[o] > r1) r1 = v.first[o] + v.count[o];
        }
    }
    const int simd = QVL_WITH_X86 && g_allow_simd && cpu_has_avx2(); /* 0: n32 = 0, the scalar loops do it all */
    if (vfirst) { /* src [sh][sw] → mid [dh][sw] → dst [dh][dw] */
        vpass(src, p.mid, (size_t)sw * c, &v, simd, pool);
        hpass(p.mid, (size_t)sw * c, dst, (size_t)dw * c, 0, dh, &h, channels, simd, pool);
    } else { /* src [sh][sw] → mid [sh][dw] (rows r0..r1) → dst [dh][dw]; either pass may be absent */
        if (need_h) hpass(src, (size_t)sw * c, need_v ? p.mid : dst, (size_t)dw * c, r0, r1, &h, channels, simd, pool);
        if (need_v) vpass(need_h ? p.mid : src, dst, (size_t)dw * c, &v, simd, pool);
    }
    return QVL_OK;
}
