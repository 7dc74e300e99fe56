/* test_plan.c — the plan API: every item kind, each failing alone; outputs equal qvl_encode of the plan's rows bit
 * for bit whatever the grouping, in both layouts and all three dtypes; video timing; cancellation (before, and
 * between groups through the callback); a reserved context encodes without allocating; plans without a context;
 * the items array of an older (shorter) qvl_item; ROWS items with a patch geometry out of range; FRAMES items
 * refused before their frames are allocated, and one refused by its grid reporting no frame table; rows of a plan
 * without a ctx counted by their length against the patch limits; a plan reserved for and encoded on a ctx of
 * lower limits. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu/ops.h"
#include "model/tower.h"
#include "qvl.h"
#include "testutil.h"

/* ---- allocation counter (glibc lets a program replace malloc; the forwarders keep one heap) ----------------- */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static volatile long g_allocs;
static _Atomic size_t g_largest; /* the largest request since it was last reset */
static void count(size_t n) {
    g_allocs++;
    size_t was = atomic_load(&g_largest);
    while (n > was && !atomic_compare_exchange_weak(&g_largest, &was, n)) {}
}
void *malloc(size_t n) { count(n); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { count(b && a > SIZE_MAX / b ? SIZE_MAX : a * b); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { count(n); return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *aligned_alloc(size_t a, size_t n) { count(n); return __libc_memalign(a, n); }
void *memalign(size_t a, size_t n) { count(n); return __libc_memalign(a, n); }
int posix_memalign(void **p, size_t a, size_t n) {
    count(n);
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12;
}
#endif

static char g_dir[1024], g_dir2[1024];
static qvl_model *g_m, *g_m2;
static qvl_model_info g_in;

static qvl_ctx *new_ctx(qvl_model *m, int threads) {
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = threads;
    qvl_ctx *c = NULL;
    qvl_error err;
    CHECK(qvl_ctx_create(m, &cp, &c, &err) == QVL_OK);
    return c;
}

/* Reference: qvl_encode of one item's rows into merged / ds planes (f32, [1 + n_ds, T, O]). */
static float *reference(qvl_ctx *c, const float *rows, qvl_grid g) {
    const size_t T = qvl_merged_tokens(&g, 1), O = (size_t)g_in.out_hidden, nds = (size_t)g_in.n_deepstack;
    float *out = calloc((1 + nds) * T * O, sizeof *out);
    float *ds[QVL_MAX_DEEPSTACK] = {0};
    for (size_t d = 0; d < nds; d++) ds[d] = out + (1 + d) * T * O;
    qvl_error err;
    CHECK(qvl_encode(c, rows, qvl_patch_rows(&g, 1), &g, 1, out, ds, &err) == QVL_OK);
    return out;
}

static const char *photo(char *buf, size_t n) { return tu_source_path("tests/data/photos/rocket.jpg", buf, n); }

/* Items of every kind, good and bad, encoded together; each ok item equals qvl_encode of its rows. */
static void test_kinds(void) {
    qvl_ctx *c = new_ctx(g_m, 2);
    char p1[1024], p2[1024];
    photo(p1, sizeof p1);
    size_t png_n = 0;
    unsigned char *png = tu_read_file(tu_source_path("tests/data/photos/chelsea.png", p2, sizeof p2), &png_n);
    CHECK(png != NULL);
    qvl_image img = {0};
    qvl_error err;
    CHECK(qvl_image_load(p1, NULL, &img, &err) == QVL_OK);
    /* the photo as RGBA with a padded stride, alpha 255 (the same pixels as RGB) */
    const size_t stride = (size_t)img.width * 4 + 12;
    uint8_t *rgba = calloc(stride * (size_t)img.height, 1);
    for (int y = 0; y < img.height; y++)
        for (int x = 0; x < img.width; x++) {
            memcpy(rgba + y * stride + x * 4, img.rgb + ((size_t)y * img.width + x) * 3, 3);
            rgba[y * stride + x * 4 + 3] = 255;
        }
    /* a small clip of 5 frames (odd: the last repeats) at 10 fps */
    enum { FW = 64, FH = 48, NF = 5 };
    uint8_t *fr = malloc((size_t)NF * FW * FH * 3);
    uint32_t st = 7;
    for (size_t i = 0; i < (size_t)NF * FW * FH * 3; i++) fr[i] = (uint8_t)(tu_frand(&st) * 127 + 128);
    qvl_pixels frames[NF];
    for (int f = 0; f < NF; f++) frames[f] = (qvl_pixels){fr + (size_t)f * FW * FH * 3, FW, FH, 3, 0};
    qvl_pixels bad_frames[2] = {frames[0], {fr, FW - 2, FH, 3, 0}};
    /* patch rows */
    const qvl_grid rg = {1, 4, 6};
    const size_t RL = (size_t)g_in.row_len, rn = qvl_patch_rows(&rg, 1);
    float *rows = malloc(rn * RL * sizeof *rows);
    for (size_t i = 0; i < rn * RL; i++) rows[i] = tu_frand(&st);

    enum { N = 11 };
    qvl_item it[N];
    for (int i = 0; i < N; i++) qvl_item_default(&it[i]);
    it[0].kind = QVL_ITEM_PATH, it[0].path = p1;
    it[1].kind = QVL_ITEM_ENCODED, it[1].data = png, it[1].size = png_n, it[1].label = "chelsea bytes";
    it[2].kind = QVL_ITEM_PIXELS, it[2].image = (qvl_pixels){img.rgb, img.width, img.height, 3, 0};
    it[3].kind = QVL_ITEM_PIXELS, it[3].image = (qvl_pixels){rgba, img.width, img.height, 4, stride};
    it[4].kind = QVL_ITEM_FRAMES, it[4].frames = frames, it[4].n_frames = NF, it[4].fps = 10;
    it[5].kind = QVL_ITEM_ROWS, it[5].rows = rows, it[5].grid = rg, it[5].row_len = RL;
    it[6].kind = QVL_ITEM_PATH, it[6].path = "/nonexistent/missing.jpg";                      /* bad */
    it[7].kind = QVL_ITEM_ROWS, it[7].rows = rows, it[7].grid = (qvl_grid){1, 3, 6};          /* bad: h odd */
    it[8].kind = QVL_ITEM_PIXELS, it[8].image = (qvl_pixels){img.rgb, img.width, img.height, 2, 0}; /* bad */
    it[9].kind = QVL_ITEM_FRAMES, it[9].frames = bad_frames, it[9].n_frames = 2, it[9].label = "mixed clip"; /* bad */
    it[10].kind = QVL_ITEM_ROWS, it[10].rows = rows, it[10].grid = rg, it[10].row_len = RL + 1; /* bad: row length */
    const int good[] = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
    const char *names[] = {NULL, NULL, NULL, NULL, NULL, NULL, "missing.jpg", "t=1, h=3", "channels", "mixed clip",
                           "values"};

    qvl_plan *plan = NULL;
    CHECK(qvl_plan_create(c, it, N, NULL, &plan, &err) == QVL_OK && err.status == QVL_OK);
    CHECK(qvl_plan_count(plan) == N && qvl_plan_ok_count(plan) == 6);
    void *outs[N] = {0};
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        qvl_item_info in;
        qvl_plan_item(plan, i, &in);
        CHECK((in.status == QVL_OK) == good[i]);
        if (!good[i]) {
            CHECK(in.message && strstr(in.message, names[i]) != NULL);
            printf("  item %d fails alone: %s\n", i, in.message);
            continue;
        }
        CHECK(in.n_tokens == in.n_rows / 4 && in.out_cols == (size_t)g_in.out_hidden * (1 + g_in.n_deepstack));
        CHECK(in.n_planes == 1 && in.out_bytes == in.n_tokens * in.out_cols * 4);
        total += in.out_bytes;
        outs[i] = malloc(in.out_bytes);
    }
    CHECK(qvl_plan_out_bytes(plan) == total);
    qvl_item_info vi;
    qvl_plan_item(plan, 4, &vi);
    CHECK(strcmp(vi.kind, "frames") == 0 && vi.n_frames == NF && vi.grid.t == 3 && vi.n_timestamps == 3);
    CHECK(vi.source_fps == 10 && vi.frame_indices && vi.frame_indices[4] == 4);
    /* (i0/fps + i1/fps)/2 over [0,1], [2,3], [4,4] */
    CHECK(vi.timestamps && vi.timestamps[0] == (0 / 10.0 + 1 / 10.0) / 2 && vi.timestamps[1] == (0.2 + 0.3) / 2 &&
          vi.timestamps[2] == (0.4 + 0.4) / 2);
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_OK && err.status == QVL_OK);

    /* Each ok item against qvl_encode of its own rows: CONCAT rows are [merged | ds0 | ds1]. */
    const size_t O = (size_t)g_in.out_hidden, nds = (size_t)g_in.n_deepstack;
    for (int i = 0; i < N; i++) {
        if (!good[i]) continue;
        qvl_item_info in;
        qvl_plan_item(plan, i, &in);
        float *ref = reference(c, qvl_plan_rows(plan, i), in.grid);
        int same = 1;
        for (size_t t = 0; t < in.n_tokens; t++)
            for (size_t d = 0; d <= nds; d++)
                same &= memcmp((float *)outs[i] + t * in.out_cols + d * O, ref + (d * in.n_tokens + t) * O,
                               O * sizeof(float)) == 0;
        CHECK(same);
        free(ref);
    }
    /* The same image by path, bytes of the decoded file, RGB pixels and strided RGBA pixels: the same outputs. */
    qvl_item_info a, b;
    qvl_plan_item(plan, 0, &a);
    qvl_plan_item(plan, 2, &b);
    CHECK(a.out_bytes == b.out_bytes && memcmp(outs[0], outs[2], a.out_bytes) == 0);
    CHECK(memcmp(outs[0], outs[3], a.out_bytes) == 0);
    CHECK(a.src_width == 640 && a.src_height == 427 && strcmp(a.kind, "image") == 0);

    /* One item a pass (max_batch_rows 1) gives the same bytes as one pass over all. */
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.max_batch_rows = 1;
    qvl_plan *p1p = NULL;
    CHECK(qvl_plan_create(c, it, 6, &pp, &p1p, &err) == QVL_OK);
    void *o2[6];
    for (int i = 0; i < 6; i++) {
        qvl_item_info in;
        qvl_plan_item(p1p, i, &in);
        o2[i] = malloc(in.out_bytes);
    }
    CHECK(qvl_plan_encode(c, p1p, o2, &err) == QVL_OK);
    for (int i = 0; i < 6; i++) {
        qvl_item_info in;
        qvl_plan_item(p1p, i, &in);
        CHECK(memcmp(o2[i], outs[i], in.out_bytes) == 0);
        free(o2[i]);
    }
    qvl_plan_free(p1p);

    /* SPLIT, no DeepStack, BF16 / F16: the f32 CONCAT values rounded to nearest even. */
    for (int dt = 0; dt < 3; dt++) {
        qvl_plan_params_default(&pp);
        pp.layout = QVL_OUTPUT_SPLIT;
        pp.dtype = dt == 0 ? QVL_DTYPE_F32 : dt == 1 ? QVL_DTYPE_BF16 : QVL_DTYPE_F16;
        pp.deepstack = dt != 2;
        qvl_plan *q = NULL;
        CHECK(qvl_plan_create(c, it, 6, &pp, &q, &err) == QVL_OK);
        for (int i = 0; i < 6; i++) {
            qvl_item_info in;
            qvl_plan_item(q, i, &in);
            CHECK(in.n_planes == (dt != 2 ? 1 + nds : 1) && in.out_cols == O);
            CHECK(in.out_bytes == in.n_tokens * O * in.n_planes * (dt ? 2 : 4));
            o2[i] = malloc(in.out_bytes);
        }
        CHECK(qvl_plan_encode(c, q, o2, &err) == QVL_OK);
        int same = 1;
        for (int i = 0; i < 6; i++) {
            qvl_item_info in, ci;
            qvl_plan_item(q, i, &in);
            qvl_plan_item(plan, i, &ci);
            for (size_t d = 0; d < in.n_planes; d++)
                for (size_t t = 0; t < in.n_tokens; t++)
                    for (size_t j = 0; j < O; j++) {
                        float want = ((float *)outs[i])[t * ci.out_cols + d * O + j];
                        size_t at = (d * in.n_tokens + t) * O + j;
                        if (dt == 0) same &= ((float *)o2[i])[at] == want;
                        else if (dt == 1) same &= ((uint16_t *)o2[i])[at] == op_f32_to_bf16(want);
                        else same &= ((uint16_t *)o2[i])[at] == op_f32_to_f16(want);
                    }
            free(o2[i]);
        }
        CHECK(same);
        qvl_plan_free(q);
    }
    /* A NULL output for an ok item fails that item alone. */
    void *held = outs[1];
    outs[1] = NULL;
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "outputs[1]"));
    qvl_plan_item(plan, 1, &a);
    qvl_plan_item(plan, 0, &b);
    CHECK(a.status == QVL_ERR_INVALID_ARG && b.status == QVL_OK);
    outs[1] = held;
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_OK); /* encodable again */

    /* A plan without a ctx: the same rows; it cannot be encoded. */
    qvl_plan *pre = NULL;
    CHECK(qvl_plan_create(NULL, it, 6, NULL, &pre, &err) == QVL_OK && qvl_plan_ok_count(pre) == 6);
    for (int i = 0; i < 6; i++) {
        qvl_item_info in;
        qvl_plan_item(pre, i, &in);
        CHECK(in.out_bytes == 0 && in.n_rows > 0 &&
              memcmp(qvl_plan_rows(pre, i), qvl_plan_rows(plan, i), in.n_rows * RL * sizeof(float)) == 0);
    }
    CHECK(qvl_plan_encode(c, pre, outs, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "without a ctx"));
    qvl_plan_free(pre);

    /* A plan made for another model. */
    qvl_ctx *c2 = new_ctx(g_m2, 1);
    CHECK(qvl_plan_encode(c2, plan, outs, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "another model"));
    qvl_ctx_free(c2);

    for (int i = 0; i < N; i++) free(outs[i]);
    qvl_plan_free(plan);
    free(rows);
    free(fr);
    free(rgba);
    free(png);
    qvl_image_free(&img);
    qvl_ctx_free(c);
}

/* ROWS items whose preprocessing gives a patch geometry out of range (a merge of 0 divided the grid check by zero
 * without a ctx: SIGFPE, the whole batch lost) fail alone, with or without a ctx; so does a grid checked against
 * a merge of 0 by the tower itself. */
static void test_rows_geometry(void) {
    static float rows[16 * 1536];
    qvl_preprocess_params bad[6];
    for (int i = 0; i < 6; i++) qvl_preprocess_params_default(&bad[i]);
    bad[0].merge = 0, bad[1].patch = 0, bad[2].temporal_patch = 0;
    bad[3].merge = 17, bad[4].patch = 1025, bad[5].merge = -2;
    enum { N = 8 };
    qvl_item it[N];
    for (int i = 0; i < N; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_ROWS, it[i].rows = rows, it[i].grid = (qvl_grid){1, 4, 4};
        if (i >= 1 && i <= 6) it[i].preprocess = &bad[i - 1];
    }
    const char *why[N] = {NULL, "merge 0", "patch 0", "temporal_patch 0", "merge 17", "patch 1025", "merge -2", NULL};
    qvl_ctx *c = new_ctx(g_m, 1);
    for (int with_ctx = 0; with_ctx < 2; with_ctx++) {
        qvl_plan *plan = NULL;
        qvl_error err;
        CHECK(qvl_plan_create(with_ctx ? c : NULL, it, N, NULL, &plan, &err) == QVL_OK);
        CHECK(qvl_plan_ok_count(plan) == 2);
        for (int i = 0; i < N; i++) {
            qvl_item_info in;
            qvl_plan_item(plan, i, &in);
            if (!why[i]) {
                CHECK(in.status == QVL_OK && in.n_rows == 16 && in.n_tokens == 4);
                continue;
            }
            CHECK(in.status == QVL_ERR_INVALID_ARG && strstr(in.message, why[i]) != NULL);
            if (i == 1) printf("  %s: %s\n", with_ctx ? "ctx" : "no ctx", in.message);
        }
        qvl_plan_free(plan);
    }
    qvl_ctx_free(c);
    qvl_error err;
    const qvl_grid g = {1, 4, 4};
    CHECK(tower_check_grid(0, &g, "grid", &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "merge size 0"));
    CHECK(tower_check_grid(-1, &g, "grid", &err) == QVL_ERR_INVALID_ARG);
    CHECK(tower_check_grid(2, &g, "grid", &err) == QVL_OK);
}

/* FRAMES items are held to the image limit frame by frame, and to equal sizes, before their frames are copied into
 * one block: a frame claiming 4000x4000 pixels over max_image_pixels fails without that block (48 MB) being
 * allocated (it was allocated, then the first frame refused). The frames' pixels are never read. */
static void test_frames_alloc(void) {
    static uint8_t tiny[300 * 3]; /* the largest frame whose pixels are read: 300x1 */
    qvl_pixels big = {tiny, 4000, 4000, 3, 0}, small = {tiny, 16, 16, 3, 0};
    qvl_pixels mixed[3] = {small, small, {tiny, 4000, 16, 3, 0}};
    qvl_pixels thin[2] = {{tiny, 300, 1, 3, 0}, {tiny, 300, 1, 3, 0}}; /* aspect ratio 300: refused by the grid */
    qvl_limits l;
    qvl_limits_default(&l);
    l.max_image_pixels = 1000;
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.limits = &l;
    qvl_item it[3];
    for (int i = 0; i < 3; i++) qvl_item_default(&it[i]);
    it[0].kind = QVL_ITEM_FRAMES, it[0].frames = &big, it[0].n_frames = 1, it[0].fps = 2;
    it[1].kind = QVL_ITEM_FRAMES, it[1].frames = mixed, it[1].n_frames = 3, it[1].fps = 2;
    it[2].kind = QVL_ITEM_FRAMES, it[2].frames = thin, it[2].n_frames = 2, it[2].fps = 2;
    qvl_plan *plan = NULL;
    qvl_error err;
#ifdef COUNT_ALLOCS
    atomic_store(&g_largest, 0);
#endif
    CHECK(qvl_plan_create(NULL, it, 3, &pp, &plan, &err) == QVL_OK);
#ifdef COUNT_ALLOCS
    const size_t largest = atomic_load(&g_largest);
    printf("  FRAMES over the image limit: largest allocation %zu bytes\n", largest);
    CHECK(largest < (size_t)1 << 20);
#endif
    qvl_item_info in;
    qvl_plan_item(plan, 0, &in);
    CHECK(in.status == QVL_ERR_LIMIT && strstr(in.message, "frame 0: a 4000x4000 image") != NULL &&
          strstr(in.message, "max_image_pixels = 1000") != NULL);
    qvl_plan_item(plan, 1, &in);
    CHECK(in.status == QVL_ERR_INVALID_ARG && strstr(in.message, "frame 2 is 4000x16, frame 0 is 16x16") != NULL);
    /* failed in qvl_video_grid: no frame table, so no frames counted for it (n_frames was 2 beside NULL) */
    qvl_plan_item(plan, 2, &in);
    CHECK(in.status == QVL_ERR_INVALID_ARG && strstr(in.message, "aspect ratio") != NULL);
    CHECK(in.n_frames == 0 && in.frame_indices == NULL && in.src_width == 300 && in.total_frames == 2);
    qvl_plan_free(plan);
}

/* A plan without a ctx counts a row longer than Qwen3-VL's 1536 values as one patch row per 1536 values against the
 * patch limits, so that they bound its rows' bytes: a 1x1 image at patch 1024, merge 16, temporal_patch 16 is 256
 * rows of 50 M values (51 GB, requested before; refused now before anything is allocated for it). */
static void test_rows_bytes(void) {
    static uint8_t px[3] = {10, 20, 30};
    qvl_preprocess_params huge, p64;
    qvl_preprocess_params_default(&huge);
    huge.patch = 1024, huge.merge = 16, huge.temporal_patch = 16;
    qvl_preprocess_params_default(&p64);
    p64.patch = 64; /* rows of 3·2·64·64 = 24576 values: 16 patch rows each */
    qvl_item it[3];
    for (int i = 0; i < 3; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_PIXELS, it[i].image = (qvl_pixels){px, 1, 1, 3, 0}, it[i].preprocess = &p64;
    }
    it[0].preprocess = &huge;
    qvl_plan *plan = NULL;
    qvl_error err;
    qvl_item_info in;
#ifdef COUNT_ALLOCS
    atomic_store(&g_largest, 0);
#endif
    CHECK(qvl_plan_create(NULL, it, 1, NULL, &plan, &err) == QVL_OK);
#ifdef COUNT_ALLOCS
    CHECK(atomic_load(&g_largest) < (size_t)1 << 20);
#endif
    qvl_plan_item(plan, 0, &in);
    printf("  patch 1024 without a ctx: %s\n", in.message);
    CHECK(in.status == QVL_ERR_LIMIT && strstr(in.message, "256 patch rows of 50331648 values") != NULL &&
          strstr(in.message, "counted as 8388608 rows") != NULL && strstr(in.message, "max_item_patches = 262144"));
    qvl_plan_free(plan);

    /* each 1x1 image at patch 64 is a 1x4x4 grid: 16 rows, counted as 256 */
    qvl_limits l;
    qvl_limits_default(&l);
    l.max_item_patches = 255;
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.limits = &l;
    CHECK(qvl_plan_create(NULL, it + 1, 1, &pp, &plan, &err) == QVL_OK);
    qvl_plan_item(plan, 0, &in);
    CHECK(in.status == QVL_ERR_LIMIT && strstr(in.message, "16 patch rows of 24576 values, counted as 256") != NULL &&
          strstr(in.message, "max_item_patches = 255") != NULL);
    qvl_plan_free(plan);
    l.max_item_patches = 256; /* at the limit */
    l.max_call_patches = 511; /* the second item's 256 do not fit beside the first's */
    CHECK(qvl_plan_create(NULL, it + 1, 2, &pp, &plan, &err) == QVL_OK && qvl_plan_ok_count(plan) == 1);
    qvl_plan_item(plan, 0, &in);
    CHECK(in.status == QVL_OK && in.n_rows == 16 && qvl_plan_held_bytes(plan) == 16 * 24576 * sizeof(float));
    qvl_plan_item(plan, 1, &in);
    CHECK(in.status == QVL_ERR_LIMIT && strstr(in.message, "to the 256 of the items before it") != NULL &&
          strstr(in.message, "max_call_patches = 511") != NULL);
    qvl_plan_free(plan);
    l.max_call_patches = 512;
    CHECK(qvl_plan_create(NULL, it + 1, 2, &pp, &plan, &err) == QVL_OK && qvl_plan_ok_count(plan) == 2);
    qvl_plan_free(plan);
}

static int g_polls, g_cancel_after;
static int cancel_after(void *user) {
    (void)user;
    return ++g_polls > g_cancel_after;
}

/* Cancellation: a raised flag fails every item with QVL_ERR_CANCELLED; a callback that fires during the second
 * group leaves the first group's items encoded. */
static void test_cancel(void) {
    qvl_ctx *c = new_ctx(g_m, 2);
    const qvl_grid g = {1, 4, 4};
    const size_t RL = (size_t)g_in.row_len, rn = qvl_patch_rows(&g, 1);
    float *rows = malloc(rn * RL * sizeof *rows);
    uint32_t st = 3;
    for (size_t i = 0; i < rn * RL; i++) rows[i] = tu_frand(&st);
    qvl_item it[3];
    for (int i = 0; i < 3; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_ROWS, it[i].rows = rows, it[i].grid = g;
    }
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.max_batch_rows = rn; /* three groups */
    qvl_plan *plan = NULL;
    qvl_error err;
    CHECK(qvl_plan_create(c, it, 3, &pp, &plan, &err) == QVL_OK);
    qvl_item_info in;
    qvl_plan_item(plan, 0, &in);
    void *outs[3] = {malloc(in.out_bytes), malloc(in.out_bytes), malloc(in.out_bytes)};
    qvl_ctx_cancel(c);
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_ERR_CANCELLED && strstr(err.message, "cancel"));
    for (int i = 0; i < 3; i++) {
        qvl_plan_item(plan, i, &in);
        CHECK(in.status == QVL_ERR_CANCELLED);
    }
    qvl_ctx_uncancel(c);
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_OK);
    /* Polls per group: one before the patch embedding, one per block, one per DeepStack merger, one before the
     * merger. Cancel a little into the second group. */
    const int per_group = 1 + g_in.depth + g_in.n_deepstack + 1;
    g_polls = 0;
    g_cancel_after = per_group + 2;
    qvl_ctx_set_cancel_fn(c, cancel_after, NULL);
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_ERR_CANCELLED);
    qvl_plan_item(plan, 0, &in);
    CHECK(in.status == QVL_OK);
    qvl_plan_item(plan, 1, &in);
    CHECK(in.status == QVL_ERR_CANCELLED && strstr(in.message, "block"));
    qvl_plan_item(plan, 2, &in);
    CHECK(in.status == QVL_ERR_CANCELLED && strstr(in.message, "not encoded"));
    qvl_ctx_set_cancel_fn(c, NULL, NULL);
    qvl_ctx_uncancel(c);
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_OK);
    for (int i = 0; i < 3; i++) free(outs[i]);
    qvl_plan_free(plan);
    free(rows);
    qvl_ctx_free(c);
}

/* qvl_ctx_cancel from another thread while an encode runs: the encode's third poll waits until the other thread
 * has cancelled, so the cancel lands mid-encode every time (TSan: test_plan_tsan). */
typedef struct canceller {
    qvl_ctx *c;
    atomic_int polls, cancelled;
} canceller;

static int wait_for_cancel(void *user) {
    canceller *k = user;
    if (atomic_fetch_add(&k->polls, 1) + 1 == 3)
        while (!atomic_load(&k->cancelled)) sched_yield();
    return 0;
}

static void *cancel_thread(void *user) {
    canceller *k = user;
    while (atomic_load(&k->polls) < 3) sched_yield();
    qvl_ctx_cancel(k->c);
    atomic_store(&k->cancelled, 1);
    return NULL;
}

static void test_cancel_thread(void) {
    qvl_ctx *c = new_ctx(g_m, 2);
    const qvl_grid g = {1, 4, 4};
    const size_t RL = (size_t)g_in.row_len, rn = qvl_patch_rows(&g, 1);
    float *rows = calloc(rn * RL, sizeof *rows);
    qvl_item it[2];
    for (int i = 0; i < 2; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_ROWS, it[i].rows = rows, it[i].grid = g;
    }
    qvl_plan *plan = NULL;
    qvl_error err;
    CHECK(qvl_plan_create(c, it, 2, NULL, &plan, &err) == QVL_OK);
    void *outs[2] = {malloc(qvl_plan_out_bytes(plan)), NULL};
    qvl_item_info in;
    qvl_plan_item(plan, 0, &in);
    outs[1] = (unsigned char *)outs[0] + in.out_bytes;
    canceller k = {.c = c};
    qvl_ctx_set_cancel_fn(c, wait_for_cancel, &k);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, cancel_thread, &k) == 0);
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_ERR_CANCELLED);
    pthread_join(th, NULL);
    qvl_plan_item(plan, 1, &in);
    CHECK(in.status == QVL_ERR_CANCELLED);
    free(outs[0]);
    free(rows);
    qvl_plan_free(plan);
    qvl_ctx_free(c);
}

/* After qvl_ctx_reserve_plan, encoding that plan (and a smaller one, and again) allocates nothing. */
static void test_reserve(void) {
    qvl_ctx *c = new_ctx(g_m, 2);
    char p1[1024];
    qvl_item it[2];
    qvl_item_default(&it[0]);
    it[0].path = photo(p1, sizeof p1);
    qvl_item_default(&it[1]);
    it[1].path = p1;
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.dtype = QVL_DTYPE_BF16; /* the staging buffer too */
    qvl_plan *plan = NULL, *small = NULL;
    qvl_error err;
    CHECK(qvl_plan_create(c, it, 2, &pp, &plan, &err) == QVL_OK);
    CHECK(qvl_plan_create(c, it, 1, &pp, &small, &err) == QVL_OK);
    CHECK(qvl_plan_scratch_bytes(small) <= qvl_plan_scratch_bytes(plan) && qvl_plan_held_bytes(plan) > 0);
    void *outs[2] = {malloc(qvl_plan_out_bytes(plan)), NULL};
    qvl_item_info in;
    qvl_plan_item(plan, 0, &in);
    outs[1] = (unsigned char *)outs[0] + in.out_bytes;
    CHECK(qvl_ctx_reserve_plan(c, plan, &err) == QVL_OK);
    CHECK(qvl_ctx_scratch_size(c) == qvl_plan_scratch_bytes(plan));
#ifdef COUNT_ALLOCS
    long before = g_allocs;
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_OK);
    CHECK(qvl_plan_encode(c, small, outs, &err) == QVL_OK);
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_OK);
    long n = g_allocs - before;
    CHECK(n == 0);
    printf("  reserved encodes: %ld allocations\n", n);
#else
    CHECK(qvl_plan_encode(c, plan, outs, &err) == QVL_OK);
    printf("  (allocation count not checked under a sanitizer)\n");
#endif
    free(outs[0]);
    qvl_plan_free(plan);
    qvl_plan_free(small);
    qvl_ctx_free(c);
}

/* One item's ROWS (grid g, rows from seed) encoded on ctx c in dtype dt: its output (malloc'd), NULL on failure. */
static void *encode_rows(qvl_ctx *c, qvl_grid g, size_t row_len, unsigned seed, qvl_dtype dt, size_t *bytes) {
    const size_t n = (size_t)g.t * g.h * g.w * row_len;
    float *rows = malloc(n * sizeof *rows);
    if (!rows) return NULL;
    uint32_t rs = seed;
    for (size_t i = 0; i < n; i++) rows[i] = tu_frand(&rs) * 2 - 1;
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_ROWS, it.rows = rows, it.grid = g;
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.dtype = dt;
    qvl_plan *plan = NULL;
    qvl_error err;
    void *out = NULL;
    qvl_item_info in;
    if (qvl_plan_create(c, &it, 1, &pp, &plan, &err) == QVL_OK && (qvl_plan_item(plan, 0, &in), in.status == QVL_OK) &&
        (out = malloc(in.out_bytes)) && qvl_plan_encode(c, plan, &out, &err) == QVL_OK) {
        *bytes = in.out_bytes;
    } else {
        free(out);
        out = NULL;
    }
    qvl_plan_free(plan);
    free(rows);
    return out;
}

/* A ctx's scratch, laid out for a larger encode, serves a smaller one: the MLPs run in row chunks of near-even size
 * under 882 rows, so fewer rows may take a larger chunk (1008 rows: two of 504; 672: one of 672), and the chunk
 * buffers were sized by the larger encode's chunk. The smaller encode overran them into the GEMM and attention
 * workspaces (wrong tokens, different from run to run, or a crash, on a model with wide MLPs: qwen3-vl-2b and
 * qwen3.5-27b widths; the tiny model's overrun landed where it did no harm). Its tokens must be a fresh ctx's: the
 * block MLPs (f32 output, rows 1008 then 672, and 896 then 672) and the merger's staging buffer for a bf16 output
 * (tokens 1008 then 672: rows 4032 then 2688). */
static void test_scratch_reuse(const char *root) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/wide", root);
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    sp.preset = "qwen3-vl-2b", sp.depth = 1, sp.seed = 3;
    qvl_error err;
    qvl_model *m = NULL;
    CHECK(qvl_synth_write(&sp, dir, &err) == QVL_OK && qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    if (!m) return;
    qvl_model_info mi;
    qvl_model_get_info(m, &mi);
    static const struct {
        int t_big, t_small;
        qvl_dtype dt;
    } cases[] = {{9, 6, QVL_DTYPE_F32}, {8, 6, QVL_DTYPE_F32}, {36, 24, QVL_DTYPE_BF16}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        qvl_ctx *used = new_ctx(m, 2), *fresh = new_ctx(m, 2);
        size_t b0 = 0, b1 = 0, b2 = 0;
        void *big = encode_rows(used, (qvl_grid){cases[k].t_big, 8, 14}, (size_t)mi.row_len, 5, cases[k].dt, &b0);
        void *after = encode_rows(used, (qvl_grid){cases[k].t_small, 8, 14}, (size_t)mi.row_len, 6, cases[k].dt, &b1);
        void *alone = encode_rows(fresh, (qvl_grid){cases[k].t_small, 8, 14}, (size_t)mi.row_len, 6, cases[k].dt, &b2);
        const int same = big && after && alone && b1 == b2 && memcmp(after, alone, b1) == 0;
        CHECK(same);
        printf("  %d temporal patches after %d on one ctx (%s): %s a fresh ctx's\n", cases[k].t_small, cases[k].t_big,
               qvl_dtype_name(cases[k].dt), same ? "the same bytes as" : "NOT");
        free(big), free(after), free(alone);
        qvl_ctx_free(used), qvl_ctx_free(fresh);
    }
    qvl_model_free(m);
}

/* A plan reserved for and encoded on another ctx whose limits are lower: groups never reach past the plan's own
 * (an item failing on that ctx does not join its neighbours into a larger group than planned), so the encode
 * allocates nothing after qvl_ctx_reserve_plan; and the reserve stays within the ctx's call limit. */
static void test_reserve_elsewhere(void) {
    qvl_ctx *a = new_ctx(g_m, 1);
    qvl_limits l;
    qvl_limits_default(&l);
    l.max_item_patches = 8;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = 1;
    cp.limits = &l;
    qvl_ctx *b = NULL, *c = NULL;
    qvl_error err;
    CHECK(qvl_ctx_create(g_m, &cp, &b, &err) == QVL_OK);
    l.max_item_patches = 16, l.max_call_patches = 8;
    CHECK(qvl_ctx_create(g_m, &cp, &c, &err) == QVL_OK);
    if (!b || !c) return;
    const size_t RL = (size_t)g_in.row_len;
    float *rows = calloc(12 * RL, sizeof *rows);
    uint32_t st = 11;
    for (size_t i = 0; i < 12 * RL; i++) rows[i] = tu_frand(&st);
    /* 8, 12, 8 rows under max_batch_rows 16: three groups of one, the largest 12 rows */
    const qvl_grid g[3] = {{1, 2, 4}, {1, 2, 6}, {1, 2, 4}};
    qvl_item it[3];
    for (int i = 0; i < 3; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_ROWS, it[i].rows = rows, it[i].grid = g[i];
    }
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.max_batch_rows = 16;
    qvl_plan *plan = NULL;
    CHECK(qvl_plan_create(a, it, 3, &pp, &plan, &err) == QVL_OK && qvl_plan_ok_count(plan) == 3);
    void *outs[3];
    for (int i = 0; i < 3; i++) {
        qvl_item_info in;
        qvl_plan_item(plan, i, &in);
        outs[i] = malloc(in.out_bytes);
    }
    CHECK(qvl_ctx_reserve_plan(b, plan, &err) == QVL_OK && qvl_ctx_scratch_size(b) == qvl_plan_scratch_bytes(plan));
#ifdef COUNT_ALLOCS
    long before = g_allocs;
#endif
    /* on b the 12-row item is over max_item_patches 8; the two 8-row items are not one group of 16 */
    CHECK(qvl_plan_encode(b, plan, outs, &err) == QVL_ERR_LIMIT && strstr(err.message, "item 1: grid 1x2x6"));
#ifdef COUNT_ALLOCS
    const long n = g_allocs - before;
    printf("  reserved, encoded on a ctx of lower limits: %ld allocations\n", n);
    CHECK(n == 0);
#endif
    CHECK(qvl_ctx_scratch_size(b) == qvl_plan_scratch_bytes(plan));
    /* c encodes at most 8 rows a call: its reserve is for 8 rows, not the plan's 12 */
    CHECK(qvl_ctx_reserve_plan(c, plan, &err) == QVL_OK && qvl_ctx_scratch_size(c) > 0 &&
          qvl_ctx_scratch_size(c) < qvl_plan_scratch_bytes(plan));
    for (int i = 0; i < 3; i++) free(outs[i]);
    qvl_plan_free(plan);
    free(rows);
    qvl_ctx_free(a);
    qvl_ctx_free(b);
    qvl_ctx_free(c);
}

/* Items of an older, shorter qvl_item (stride = its struct_size): the missing fields take their defaults. A
 * zeroed item array is refused. */
static void test_item_abi(void) {
    qvl_ctx *c = new_ctx(g_m, 1);
    const size_t old = offsetof(qvl_item, row_len); /* a header from before row_len, preprocess, video, decode */
    /* slack after the array, so that the compiler's view of a whole qvl_item at arr + old stays in bounds */
    unsigned char *arr = calloc(1, 2 * old + sizeof(qvl_item));
    char p1[1024];
    for (int i = 0; i < 2; i++) {
        qvl_item *it = (qvl_item *)(arr + i * old);
        qvl_item_init(it, old);
        it->kind = QVL_ITEM_PATH;
        it->path = photo(p1, sizeof p1);
    }
    qvl_plan *plan = NULL;
    qvl_error err;
    CHECK(qvl_plan_create(c, (const qvl_item *)arr, 2, NULL, &plan, &err) == QVL_OK && qvl_plan_ok_count(plan) == 2);
    qvl_plan_free(plan);
    memset(arr, 0, 2 * old);
    CHECK(qvl_plan_create(c, (const qvl_item *)arr, 2, NULL, &plan, &err) == QVL_ERR_INVALID_ARG && !plan &&
          strstr(err.message, "qvl_item_default"));
    qvl_plan_params pp;
    memset(&pp, 0, sizeof pp);
    qvl_item one;
    qvl_item_default(&one);
    one.path = p1;
    CHECK(qvl_plan_create(c, &one, 1, &pp, &plan, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "struct_size"));
    qvl_plan_params_default(&pp);
    pp.dtype = (qvl_dtype)9;
    CHECK(qvl_plan_create(c, &one, 1, &pp, &plan, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "dtype"));
    free(arr);
    qvl_ctx_free(c);
}

/* A directory of frame images is decoded with the item's decode params (EXIF orientation, alpha), as the same file
 * given as an image is: its frames, source size and rows are those of a FRAMES item holding that image's pixels
 * (before, the directory took the default params: rotated, alpha over white, whatever the item said, while its
 * key hashed the item's). */
static void test_frames_dir_decode(const char *root) {
    char dir[1100], src[1024];
    snprintf(dir, sizeof dir, "%s/exif_frames", root);
    CHECK(mkdir(dir, 0755) == 0);
    tu_source_path("tests/data/images/png_rgba_exif_6.png", src, sizeof src); /* 48x40 RGBA, orientation 6 */
    size_t n;
    void *png = tu_read_file(src, &n);
    CHECK(png && tu_write_file(tu_path(dir, "f0.png"), png, n) && tu_write_file(tu_path(dir, "f1.png"), png, n));
    free(png);
    for (int v = 0; v < 4; v++) {
        qvl_decode_params dp;
        qvl_decode_params_default(&dp);
        dp.apply_exif = !(v & 1);
        dp.alpha = v & 2 ? QVL_ALPHA_DROP : QVL_ALPHA_WHITE;
        qvl_image img;
        qvl_error err;
        CHECK(qvl_image_load(src, &dp, &img, &err) == QVL_OK);
        CHECK(img.width == (dp.apply_exif ? 40 : 48) && img.height == (dp.apply_exif ? 48 : 40));
        qvl_pixels fr[2] = {{img.rgb, img.width, img.height, 3, 0}, {img.rgb, img.width, img.height, 3, 0}};
        qvl_item it[2];
        qvl_item_default(&it[0]);
        it[0].kind = QVL_ITEM_PATH, it[0].path = dir, it[0].decode = &dp;
        qvl_item_default(&it[1]);
        it[1].kind = QVL_ITEM_FRAMES, it[1].frames = fr, it[1].n_frames = 2, it[1].decode = &dp;
        qvl_plan *plan = NULL;
        CHECK(qvl_plan_create(NULL, it, 2, NULL, &plan, &err) == QVL_OK);
        qvl_item_info a = {0}, b = {0};
        if (plan) qvl_plan_item(plan, 0, &a), qvl_plan_item(plan, 1, &b);
        printf("frames dir, apply_exif %d, alpha %s: %s %dx%d (%s), frames %dx%d\n", dp.apply_exif,
               v & 2 ? "drop" : "white", qvl_status_name(a.status), a.src_width, a.src_height, a.message,
               b.src_width, b.src_height);
        CHECK(a.status == QVL_OK && b.status == QVL_OK && strcmp(a.kind, "frames") == 0);
        CHECK(a.src_width == img.width && a.src_height == img.height && a.n_frames == 2 && a.n_rows == b.n_rows);
        const float *ra = plan ? qvl_plan_rows(plan, 0) : NULL, *rb = plan ? qvl_plan_rows(plan, 1) : NULL;
        CHECK(ra && rb && a.n_rows > 0 && memcmp(ra, rb, a.n_rows * 1536 * sizeof *ra) == 0);
        qvl_plan_free(plan);
        qvl_image_free(&img);
    }
}

/* Cancellation reaches into decoding: qvl_plan_params.cancel_fn and the ctx's flag are polled before each item and
 * within its decode (a JPEG's progress calls, a PNG's reads, a video's packets); a cancelled item fails alone with
 * QVL_ERR_CANCELLED, the plan is still made, and items before it keep their rows. */
static void test_decode_cancel(void) {
    char jpg[1024], png[1024], vid[1024];
    photo(jpg, sizeof jpg);
    tu_source_path("tests/data/photos/chelsea.png", png, sizeof png);
    tu_source_path("tests/data/video/video_testsrc_30.mp4", vid, sizeof vid);
    const char *paths[3] = {jpg, png, vid}, *what[3] = {"JPEG: decode cancelled", "PNG: decode cancelled",
                                                         "video decode cancelled after"};
    /* not the video under ThreadSanitizer: FFmpeg's frame threads sync through atomics it cannot see (uninstrumented
     * libavcodec), which it reports as races */
#ifdef __SANITIZE_THREAD__
    const int n = 2;
#else
    const int n = QVL_WITH_VIDEO ? 3 : 2;
#endif
    qvl_item it[3];
    for (int i = 0; i < 3; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_PATH, it[i].path = paths[i];
    }
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.cancel_fn = cancel_after;
    qvl_plan *plan = NULL;
    qvl_error err;
    qvl_item_info in;
    for (int i = 0; i < n; i++) {
        /* not cancelled: polled more than once (within the decode), and the item is whole */
        g_polls = 0, g_cancel_after = 1 << 30;
        CHECK(qvl_plan_create(NULL, &it[i], 1, &pp, &plan, &err) == QVL_OK);
        qvl_plan_item(plan, 0, &in);
        const int polls = g_polls;
        printf("decode cancel: %s polled %d times\n", paths[i], polls);
        CHECK(in.status == QVL_OK && polls >= 2);
        qvl_plan_free(plan);
        /* the first poll (before decoding) passes, one within the decode cancels */
        g_polls = 0, g_cancel_after = polls / 2 > 1 ? polls / 2 : 1;
        CHECK(qvl_plan_create(NULL, &it[i], 1, &pp, &plan, &err) == QVL_OK);
        qvl_plan_item(plan, 0, &in);
        printf("  cancelled at poll %d: %s\n", g_polls, in.message);
        CHECK(in.status == QVL_ERR_CANCELLED && strstr(in.message, what[i]) && g_polls == g_cancel_after + 1);
        CHECK(qvl_plan_ok_count(plan) == 0 && qvl_plan_rows(plan, 0) == NULL);
        qvl_plan_free(plan);
    }
    /* cancelled from the first poll: every item, before it is decoded; a ctx's flag does the same */
    g_polls = 0, g_cancel_after = 0;
    CHECK(qvl_plan_create(NULL, it, (size_t)n, &pp, &plan, &err) == QVL_OK);
    for (int i = 0; i < n; i++) {
        qvl_plan_item(plan, i, &in);
        CHECK(in.status == QVL_ERR_CANCELLED && strstr(in.message, "not decoded: cancelled"));
    }
    qvl_plan_free(plan);
    qvl_ctx *c = new_ctx(g_m, 1);
    qvl_ctx_cancel(c);
    CHECK(qvl_plan_create(c, it, (size_t)n, NULL, &plan, &err) == QVL_OK && qvl_plan_ok_count(plan) == 0);
    qvl_plan_item(plan, 0, &in);
    CHECK(in.status == QVL_ERR_CANCELLED && strstr(in.message, "not decoded: cancelled"));
    qvl_plan_free(plan);
    qvl_ctx_uncancel(c);
    CHECK(qvl_plan_create(c, it, (size_t)n, NULL, &plan, &err) == QVL_OK && qvl_plan_ok_count(plan) == (size_t)n);
    qvl_plan_free(plan);
    /* cancelled within the second item: the first keeps its rows */
    g_polls = 0, g_cancel_after = 1 << 30;
    CHECK(qvl_plan_create(NULL, it, 1, &pp, &plan, &err) == QVL_OK);
    qvl_plan_free(plan);
    g_cancel_after = g_polls + 1, g_polls = 0;
    CHECK(qvl_plan_create(NULL, it, 2, &pp, &plan, &err) == QVL_OK && qvl_plan_ok_count(plan) == 1);
    qvl_plan_item(plan, 0, &in);
    CHECK(in.status == QVL_OK && qvl_plan_rows(plan, 0) != NULL);
    qvl_plan_item(plan, 1, &in);
    CHECK(in.status == QVL_ERR_CANCELLED && strstr(in.message, "PNG: decode cancelled"));
    qvl_plan_free(plan);
    qvl_ctx_free(c);
}

int main(void) {
    char root[900];
    tu_tmpdir(root, sizeof root);
    snprintf(g_dir, sizeof g_dir, "%s/a", root);
    snprintf(g_dir2, sizeof g_dir2, "%s/b", root);
    tu_synth(g_dir, "tiny", 1, QVL_LAYOUT_HF);
    tu_synth(g_dir2, "tiny", 2, QVL_LAYOUT_HF);
    qvl_error err;
    CHECK(qvl_model_load(g_dir, NULL, &g_m, &err) == QVL_OK);
    CHECK(qvl_model_load(g_dir2, NULL, &g_m2, &err) == QVL_OK);
    if (!g_m || !g_m2) return tu_finish("test_plan");
    qvl_model_get_info(g_m, &g_in);
    test_rows_geometry(); /* patch rows and caller frames only */
    test_frames_alloc();
    test_rows_bytes();
    test_reserve_elsewhere();
    test_scratch_reuse(root);
    test_cancel();
    test_cancel_thread();
    if (QVL_WITH_MEDIA) {
        test_kinds();
        test_reserve();
        test_item_abi();
        test_frames_dir_decode(root);
        test_decode_cancel();
    } else {
        printf("test_plan: only the patch-row cases, built without image decoders (QVL_MEDIA=OFF)\n");
    }
    qvl_model_free(g_m);
    qvl_model_free(g_m2);
    tu_rmtree(root);
    return tu_finish("test_plan");
}
