/* test_limits.c — small hostile images whose cost the decoders' limits (src/image/decode.h) must bound.
 *
 * Each file is built here, deterministically, written to a temporary directory and loaded with qvl_image_load:
 *   PNG  a 1x1 image whose tEXt / zTXt / iTXt chunk claims 2 GiB (libpng allocated the claim: 2.1 GB, 5 s);
 *        a claim of exactly DEC_PNG_MAX_CHUNK_BYTES is still read (and found truncated); a side over the pixel
 *        limit is refused by libpng's user limit as a limit;
 *   JPEG a progressive gray image with 704 scans (a valid successive-approximation script: every coefficient band
 *        on its own, one bit at a time), over DEC_JPEG_MAX_SCANS, and the same script cut at exactly that many
 *        scans, which decodes;
 *   GIF  a 65535x65535 logical screen holding a 1x1 frame, and a 1x1 screen whose 1x1 frame sits at (65000, 65000);
 *   WebP tests/data/images/webp_anim.webp with its VP8X canvas set to 16383x16383.
 * Every one must fail with QVL_ERR_LIMIT (or FORMAT where noted) and a message naming the file and the limit, in
 * under a second, with the process's peak RSS (getrusage) growing by less than 64 MiB.
 * Then the limits as an API (qvl_limits), on the tiny synthetic model and without decoders: defaults, refusal of
 * zero limits, grids over max_item_patches / max_call_patches refused by qvl_encode, plans and
 * qvl_limits_check_grids before any allocation, a plan's limits lowering (never raising) its ctx's, a plan encoded on
 * a ctx of lower limits (each item over them failing alone, the groups within its call limit), PIXELS and
 * FRAMES items over the image and video limits, lowered decoder limits (scans, PNG chunks, canvas, input bytes);
 * NaN / infinity in ROWS items, qvl_encode input, weights (at load, naming the tensor) and outputs
 * (QVL_ERR_NONFINITE); an exact size above the budget; min_pixels in preprocessor_config.json bounded.
 * With QVL_TEST_LIMITS_OUT set to a directory the files are also written there (how fuzz/corpus/decode/limit_*
 * were made). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "qvl.h"
#include "testutil.h"

#if QVL_WITH_MEDIA
#include <jpeglib.h> /* after stdio.h */
#endif

#define MAX_GROWTH_KIB (64 * 1024)
#define MAX_SECONDS 1.0

static char g_dir[4096];
static const qvl_limits *g_lim; /* limits expect() decodes under (NULL: the defaults) */

static long peak_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void put_file(const char *dir, const char *name, const uint8_t *d, size_t n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    CHECK(tu_write_file(path, d, n));
}

/* Write `name`, load it with max_pixels (0: the default), and check the status, that the message names the file
 * and holds each of the `want` strings (NULL-terminated), the time and the RSS growth. */
static void expect(const char *name, const uint8_t *d, size_t n, uint64_t max_pixels, qvl_status want_status,
                   const char *const *want) {
    char path[4096 + 256];
    put_file(g_dir, name, d, n, path, sizeof path);
    const char *keep = getenv("QVL_TEST_LIMITS_OUT");
    if (keep && *keep) {
        char kp[4096 + 256];
        put_file(keep, name, d, n, kp, sizeof kp);
    }
    qvl_decode_params p;
    qvl_decode_params_default(&p);
    if (max_pixels) p.max_pixels = max_pixels;
    p.limits = g_lim;
    qvl_image img;
    qvl_error err;
    err_clear(&err);
    long before = peak_kib();
    double t0 = tu_now();
    qvl_status s = qvl_image_load(path, &p, &img, &err);
    double dt = tu_now() - t0;
    long grew = peak_kib() - before;
    int ok = s == want_status && err.status == s;
    if (s != QVL_OK) ok = ok && strstr(err.message, path) != NULL && img.rgb == NULL;
    for (size_t i = 0; want && want[i]; i++) ok = ok && strstr(err.message, want[i]) != NULL;
    printf("  %-24s %zu bytes: %s in %.3f s, peak RSS +%ld KiB: %s\n", name, n, qvl_status_name(s), dt, grew,
           s == QVL_OK ? "decoded" : err.message);
    if (!ok) fprintf(stderr, "  %s: got %s, want %s\n", name, qvl_status_name(s), qvl_status_name(want_status));
    CHECK(ok);
    CHECK(dt < MAX_SECONDS);
    CHECK(grew < MAX_GROWTH_KIB);
    qvl_image_free(&img);
}

/* ---- PNG ------------------------------------------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* signature, IHDR (w x h, 8-bit gray), then a `type` chunk header claiming `claim` bytes and 12 bytes of it */
static size_t png_bomb(uint8_t *b, uint32_t w, uint32_t h, const char *type, uint32_t claim) {
    memcpy(b, "\x89PNG\r\n\x1a\n", 8);
    put32(b + 8, 13);
    memcpy(b + 12, "IHDR", 4);
    put32(b + 16, w);
    put32(b + 20, h);
    memcpy(b + 24, "\x08\x00\x00\x00\x00", 5);
    put32(b + 29, crc32_png(b + 12, 17));
    put32(b + 33, claim);
    memcpy(b + 37, type, 4);
    if (claim == 0) { /* an empty chunk with its CRC */
        put32(b + 41, crc32_png(b + 37, 4));
        return 45;
    }
    memcpy(b + 41, "Comment\0\0\0\0\0", 12);
    return 53;
}

static void test_png(void) {
    static const char *const types[] = {"tEXt", "zTXt", "iTXt"};
    uint8_t b[64];
    char name[64];
    for (int i = 0; i < 3; i++) {
        size_t n = png_bomb(b, 1, 1, types[i], 0x7ffffff0u);
        snprintf(name, sizeof name, "limit_%s_2g.png", types[i]);
        const char *want[] = {types[i], "2147483632", "8388608", NULL};
        expect(name, b, n, 0, QVL_ERR_LIMIT, want);
    }
    /* exactly at the limit: libpng reads it and finds the file truncated */
    size_t n = png_bomb(b, 1, 1, "tEXt", 8u << 20);
    const char *trunc[] = {"truncated", NULL};
    expect("limit_tEXt_8m.png", b, n, 0, QVL_ERR_FORMAT, trunc);
    /* a side over the pixel limit: libpng's user limit, reported as the limit */
    n = png_bomb(b, 1, 1000, "tEXt", 0);
    const char *side[] = {"999 pixels", NULL};
    expect("limit_side.png", b, n, 999, QVL_ERR_LIMIT, side);
}

/* ---- JPEG ------------------------------------------------------------------------------------------------------ */

#if QVL_WITH_MEDIA
/* A progressive 8-bit gray JPEG of w x h holding the first `nscans` scans of the longest valid
 * successive-approximation script: DC with Al = 10 then its 10 refinements, then each AC coefficient band k = 1..63
 * on its own with Al = 10 and its 10 refinements: 11 + 63·11 = 704 scans. Returns a malloc'd buffer. */
static uint8_t *jpeg_scans(int w, int h, int nscans, size_t *size) {
    enum { AL = 10, ALL = 11 + 63 * 11 };
    static jpeg_scan_info script[ALL];
    int k = 0;
    for (int al = AL; al >= 0; al--)
        script[k++] = (jpeg_scan_info){1, {0}, 0, 0, al == AL ? 0 : al + 1, al};
    for (int band = 1; band <= 63; band++)
        for (int al = AL; al >= 0; al--) script[k++] = (jpeg_scan_info){1, {0}, band, band, al == AL ? 0 : al + 1, al};
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 1;
    c.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    c.scan_info = script;
    c.num_scans = nscans < ALL ? nscans : ALL;
    jpeg_start_compress(&c, TRUE);
    JSAMPLE *row = malloc((size_t)w);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) row[x] = (JSAMPLE)((x * 7 + y * 13) & 255);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    free(row);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    uint8_t *out = malloc(n);
    memcpy(out, buf, n);
    free(buf);
    *size = n;
    return out;
}

static void test_jpeg(void) {
    size_t n;
    uint8_t *d = jpeg_scans(32, 32, 704, &n);
    const char *scans[] = {"500 scans", "at scan 501", NULL};
    expect("limit_704_scans.jpg", d, n, 0, QVL_ERR_LIMIT, scans);
    free(d);
    d = jpeg_scans(32, 32, 500, &n);
    expect("limit_500_scans.jpg", d, n, 0, QVL_OK, NULL);
    /* a server's lower scan limit */
    qvl_limits l;
    qvl_limits_default(&l);
    l.max_jpeg_scans = 100;
    g_lim = &l;
    const char *low[] = {"100 scans", "at scan 101", "max_jpeg_scans = 100", "--limit max_jpeg_scans=N", NULL};
    expect("limit_100_scans.jpg", d, n, 0, QVL_ERR_LIMIT, low);
    g_lim = NULL;
    free(d);
    /* A plan made without a ctx (preprocessing only: `qvl encode --preprocess-only`) takes its own limits as they
     * are, raised ones too (they were lowered by the defaults: a raised scan limit was ignored) */
    {
        d = jpeg_scans(32, 32, 704, &n);
        qvl_item it;
        qvl_item_default(&it);
        it.kind = QVL_ITEM_ENCODED, it.data = d, it.size = n;
        qvl_plan_params pp;
        qvl_plan_params_default(&pp);
        qvl_limits raised;
        qvl_limits_default(&raised);
        raised.max_jpeg_scans = 1000;
        qvl_plan *plan = NULL;
        qvl_item_info info;
        qvl_error err;
        CHECK(qvl_plan_create(NULL, &it, 1, &pp, &plan, &err) == QVL_OK && plan);
        if (plan) qvl_plan_item(plan, 0, &info);
        CHECK(plan && info.status == QVL_ERR_LIMIT && strstr(info.message, "max_jpeg_scans = 500"));
        qvl_plan_free(plan);
        pp.limits = &raised;
        plan = NULL;
        CHECK(qvl_plan_create(NULL, &it, 1, &pp, &plan, &err) == QVL_OK && plan);
        if (plan) qvl_plan_item(plan, 0, &info);
        CHECK(plan && info.status == QVL_OK);
        qvl_plan_free(plan);
        free(d);
    }
    /* The decoding work, scans · pixels: 20 scans of 256 x 256 pass a budget of exactly that and are refused as the
     * 11th scan begins under a budget of 10 scans' (the scan count alone let a 500-scan 8192 x 8192 file take
     * 26.6 s). */
    d = jpeg_scans(256, 256, 20, &n);
    l.max_decode_work = (uint64_t)256 * 256 * 20;
    g_lim = &l;
    expect("work_20_scans.jpg", d, n, 0, QVL_OK, NULL);
    l.max_decode_work = (uint64_t)256 * 256 * 11 - 1;
    const char *work[] = {"11 scans of 65536 pixels", "720895 pixel-scans", "max_decode_work = 720895",
                          "--limit max_decode_work=N", NULL};
    expect("work_over_budget.jpg", d, n, 0, QVL_ERR_LIMIT, work);
    g_lim = NULL;
    free(d);
}
#endif

/* ---- GIF ------------------------------------------------------------------------------------------------------- */

/* GIF89a, logical screen sw x sh without a palette, one 1x1 frame at (x, y): LZW min code size 2, one data block
 * (clear, index 0, end) */
static size_t gif_frame(uint8_t *b, uint16_t sw, uint16_t sh, uint16_t x, uint16_t y) {
    static const uint8_t tail[] = {0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b};
    size_t k = 0;
    memcpy(b, "GIF89a", 6), k = 6;
    b[k++] = (uint8_t)sw, b[k++] = (uint8_t)(sw >> 8), b[k++] = (uint8_t)sh, b[k++] = (uint8_t)(sh >> 8);
    b[k++] = 0, b[k++] = 0, b[k++] = 0;
    b[k++] = 0x2c;
    b[k++] = (uint8_t)x, b[k++] = (uint8_t)(x >> 8), b[k++] = (uint8_t)y, b[k++] = (uint8_t)(y >> 8);
    memcpy(b + k, tail, sizeof tail);
    return k + sizeof tail;
}

static void test_gif(void) {
    uint8_t b[64];
    size_t n = gif_frame(b, 65535, 65535, 0, 0);
    const char *screen[] = {"GIF logical screen", "65535x65535", "178956970", NULL};
    expect("limit_screen.gif", b, n, 0, QVL_ERR_LIMIT, screen);
    n = gif_frame(b, 1, 1, 65000, 65000);
    const char *offset[] = {"GIF canvas", "65001x65001", "178956970", NULL};
    expect("limit_offset.gif", b, n, 0, QVL_ERR_LIMIT, offset);
    /* the same frame at (99, 99) within a 100x100 limit decodes to the grown canvas */
    n = gif_frame(b, 1, 1, 99, 99);
    expect("limit_offset_ok.gif", b, n, 100 * 100, QVL_OK, NULL);
}

/* ---- WebP ------------------------------------------------------------------------------------------------------ */

static void test_webp(void) {
    char path[4096];
    tu_source_path("tests/data/images/webp_anim.webp", path, sizeof path);
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    if (!fp) return;
    uint8_t b[8192];
    size_t n = fread(b, 1, sizeof b, fp);
    fclose(fp);
    CHECK(n > 30 && memcmp(b + 12, "VP8X", 4) == 0 && (b[20] & 0x02));
    if (n <= 30) return;
    /* canvas width − 1 and height − 1, 24-bit little-endian at 24 and 27 */
    const uint32_t side = 16383 - 1;
    for (int i = 0; i < 3; i++) b[24 + i] = b[27 + i] = (uint8_t)(side >> (8 * i));
    const char *canvas[] = {"WebP canvas", "16383x16383", "178956970", NULL};
    expect("limit_canvas.webp", b, n, 0, QVL_ERR_LIMIT, canvas);
}


/* Decoder limits lowered through qvl_decode_params.limits, and each message naming the setting that binds. */
static void test_decode_limits(void) {
    qvl_limits l;
    qvl_limits_default(&l);
    uint8_t b[64];
    g_lim = &l;
    l.max_png_chunk_bytes = 64;
    size_t n = png_bomb(b, 1, 1, "tEXt", 100);
    const char *chunk[] = {"claims 100 bytes", "max_png_chunk_bytes = 64", NULL};
    expect("limit_chunk_64.png", b, n, 0, QVL_ERR_LIMIT, chunk);
    l.max_png_chunk_bytes = 8 << 20;
    n = png_bomb(b, 1, 1000, "tEXt", 0); /* the image limit set by max_pixels: named as such */
    const char *side[] = {"999 pixels", "qvl_decode_params.max_pixels = 999", NULL};
    expect("limit_side_named.png", b, n, 999, QVL_ERR_LIMIT, side);
    l.max_image_pixels = 999;
    const char *side2[] = {"999 pixels", "limit max_image_pixels = 999", NULL};
    expect("limit_side_lim.png", b, n, 0, QVL_ERR_LIMIT, side2);
    l.max_image_pixels = 178956970;
    l.max_canvas_pixels = 5000; /* the 1x1 frame at (99, 99): a 100x100 canvas, within the image limit */
    n = gif_frame(b, 1, 1, 99, 99);
    const char *canvas[] = {"GIF canvas", "100x100", "max_canvas_pixels = 5000", NULL};
    expect("limit_canvas_5000.gif", b, n, 0, QVL_ERR_LIMIT, canvas);
    l.max_canvas_pixels = 178956970;
    l.max_input_bytes = 20;
    const char *bytes[] = {"max_input_bytes = 20", NULL};
    expect("limit_bytes.gif", b, n, 0, QVL_ERR_LIMIT, bytes);
    qvl_image img;
    qvl_error err;
    qvl_decode_params dp;
    qvl_decode_params_default(&dp);
    dp.limits = &l;
    CHECK(qvl_image_decode(b, n, &dp, &img, &err) == QVL_ERR_LIMIT && strstr(err.message, "is 29 bytes") != NULL);
    g_lim = NULL;
    l.max_input_bytes = 0;
    CHECK(qvl_image_decode(b, n, &dp, &img, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "max_input_bytes is 0"));
}

/* ---- limits as an API ------------------------------------------------------------------------------------------ */

static char g_model[4096 + 32];

/* err holds `want` with a message that has every string of `needles` (NULL-terminated). */
static int is_err(qvl_status s, const qvl_error *err, qvl_status want, const char *const *needles) {
    int ok = s == want && err->status == want;
    for (size_t i = 0; needles && needles[i]; i++) ok = ok && strstr(err->message, needles[i]) != NULL;
    if (!ok) fprintf(stderr, "  got %s: %s\n", qvl_status_name(s), err->message);
    return ok;
}

static void test_limits_struct(void) {
    qvl_limits l;
    qvl_limits_default(&l);
    CHECK(l.struct_size == sizeof l);
    CHECK(l.max_image_pixels == 178956970u && l.max_canvas_pixels == 178956970u);
    CHECK(l.max_input_bytes == (uint64_t)1 << 31 && l.max_png_chunk_bytes == (uint64_t)8 << 20);
    CHECK(l.max_jpeg_scans == 500 && l.max_video_frames == 4096 && l.max_video_pixels == (uint64_t)1 << 30);
    CHECK(l.max_decode_work == (uint64_t)1 << 31 && l.max_video_decode_pixels == (uint64_t)1 << 38);
    CHECK(l.max_item_patches == 262144 && l.max_call_patches == 1048576);
    qvl_grid g[2] = {{1, 16384, 16384}, {1, 4, 4}};
    qvl_error err;
    const char *item[] = {"grid 0", "268435456 patch rows", "max_item_patches = 262144", "--limit max_item_patches=N",
                          NULL};
    CHECK(is_err(qvl_limits_check_grids(NULL, g, 1, &err), &err, QVL_ERR_LIMIT, item));
    l.max_call_patches = 20;
    g[0] = (qvl_grid){1, 2, 8};
    const char *call[] = {"grids 0..1", "32 patch rows", "max_call_patches = 20", NULL};
    CHECK(is_err(qvl_limits_check_grids(&l, g, 2, &err), &err, QVL_ERR_LIMIT, call));
    CHECK(qvl_limits_check_grids(&l, g, 1, &err) == QVL_OK && err.status == QVL_OK);
    l.max_jpeg_scans = 0;
    const char *zero[] = {"max_jpeg_scans is 0", NULL};
    CHECK(is_err(qvl_limits_check_grids(&l, g, 1, &err), &err, QVL_ERR_INVALID_ARG, zero));
    qvl_limits z;
    memset(&z, 0, sizeof z);
    CHECK(qvl_limits_check_grids(&z, g, 1, &err) == QVL_ERR_INVALID_ARG);
}

static qvl_model *load_model(const char *dir, qvl_error *err) {
    qvl_model *m = NULL;
    if (qvl_model_load(dir, NULL, &m, err) != QVL_OK) return NULL;
    return m;
}

/* A plan made on a ctx of default limits, encoded on `low` (max_item_patches 24, max_call_patches 32) and on one
 * whose call limit (20) is below an item: each item over a limit of the encoding ctx fails alone, named, and the
 * groups shrink to that ctx's call limit, so every other item encodes, to the same bytes as on the first ctx. */
static void test_encode_elsewhere(qvl_model *m, qvl_ctx *low) {
    qvl_ctx *ctx, *call20;
    qvl_error err;
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    qvl_limits l;
    qvl_limits_default(&l);
    l.max_call_patches = 20;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.limits = &l;
    CHECK(qvl_ctx_create(m, &cp, &call20, &err) == QVL_OK);
    if (!ctx || !call20) return;
    const size_t row_len = 1536;
    float *px = malloc(64 * row_len * sizeof *px);
    uint32_t st = 3;
    for (size_t i = 0; i < 64 * row_len; i++) px[i] = tu_frand(&st);
    enum { N = 5 };
    const qvl_grid g[N] = {{1, 4, 4}, {1, 8, 8}, {1, 4, 4}, {1, 4, 6}, {1, 4, 4}};
    const char *labels[N] = {"a", "big", "c", "wide", "e"};
    qvl_item it[N];
    for (int i = 0; i < N; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_ROWS, it[i].rows = px, it[i].grid = g[i], it[i].label = labels[i];
    }
    qvl_plan *plan = NULL;
    CHECK(qvl_plan_create(ctx, it, N, NULL, &plan, &err) == QVL_OK && qvl_plan_ok_count(plan) == N);
    if (!plan) return;
    void *want[N], *got[N];
    size_t bytes[N];
    for (int i = 0; i < N; i++) {
        qvl_item_info in;
        qvl_plan_item(plan, i, &in);
        bytes[i] = in.out_bytes;
        want[i] = calloc(1, bytes[i]);
        got[i] = calloc(1, bytes[i]);
    }
    CHECK(qvl_plan_encode(ctx, plan, want, &err) == QVL_OK);
    /* on `low`: only "big" (64 rows) is over max_item_patches; a + c + wide + e are 72 rows, grouped within 32 */
    qvl_status s = qvl_plan_encode(low, plan, got, &err);
    const char *big[] = {"big: grid 1x8x8", "64 patch rows", "max_item_patches = 24", NULL};
    CHECK(is_err(s, &err, QVL_ERR_LIMIT, big));
    for (int i = 0; i < N; i++) {
        qvl_item_info in;
        qvl_plan_item(plan, i, &in);
        if (i == 1) {
            printf("  encoded on a ctx of lower limits: %s\n", in.message);
            CHECK(in.status == QVL_ERR_LIMIT && strstr(in.message, "big: grid 1x8x8") == in.message);
        } else {
            CHECK(in.status == QVL_OK && memcmp(got[i], want[i], in.out_bytes) == 0);
        }
    }
    /* on call20: "big" (64) and "wide" (24) are each over its call limit; the 16-row items encode one by one */
    for (int i = 0; i < N; i++) memset(got[i], 0, bytes[i]);
    s = qvl_plan_encode(call20, plan, got, &err);
    const char *call[] = {"big: grid 1x8x8", "max_call_patches = 20", NULL};
    CHECK(is_err(s, &err, QVL_ERR_LIMIT, call));
    for (int i = 0; i < N; i++) {
        qvl_item_info in;
        qvl_plan_item(plan, i, &in);
        if (i == 1 || i == 3)
            CHECK(in.status == QVL_ERR_LIMIT && strstr(in.message, labels[i]) == in.message &&
                  strstr(in.message, "max_call_patches = 20") != NULL);
        else
            CHECK(in.status == QVL_OK && memcmp(got[i], want[i], in.out_bytes) == 0);
    }
    CHECK(qvl_plan_encode(ctx, plan, got, &err) == QVL_OK); /* and again on the first: every item */
    for (int i = 0; i < N; i++) {
        free(want[i]);
        free(got[i]);
    }
    qvl_plan_free(plan);
    free(px);
    qvl_ctx_free(ctx);
    qvl_ctx_free(call20);
}

static void no_tap(void *user, const char *stage, const float *data, size_t rows, size_t cols) {
    (void)user, (void)stage, (void)data, (void)rows, (void)cols;
}

/* A grid of 268 M rows handed to qvl_encode: refused from the grid alone, before the scratch for it is sized or any
 * pixel is read (the 16-float buffer behind it would be overrun otherwise); then a ctx whose limits were lowered. */
static void test_encode_limits(qvl_model *m) {
    qvl_ctx *ctx;
    qvl_error err;
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    if (!ctx) return;
    float few[16] = {0}, out[16];
    qvl_grid big = {1, 16384, 16384};
    long before = peak_kib();
    qvl_status s = qvl_encode(ctx, few, (size_t)16384 * 16384, &big, 1, out, NULL, &err);
    const char *want[] = {"268435456 patch rows", "max_item_patches", NULL};
    CHECK(is_err(s, &err, QVL_ERR_LIMIT, want));
    CHECK(peak_kib() - before < MAX_GROWTH_KIB);
    CHECK(qvl_ctx_scratch_size(ctx) == 0);
    qvl_ctx_free(ctx);

    qvl_limits l;
    qvl_limits_default(&l);
    l.max_call_patches = 32;
    l.max_item_patches = 24;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.limits = &l;
    CHECK(qvl_ctx_create(m, &cp, &ctx, &err) == QVL_OK);
    l.max_call_patches = 1; /* copied at create: later changes do not reach the ctx */
    if (!ctx) return;
    const size_t row_len = 1536;
    float *px = calloc(40 * row_len, sizeof *px), *o = calloc(10 * 96, sizeof *o);
    qvl_grid two[2] = {{1, 4, 4}, {1, 4, 6}};
    const char *call[] = {"40 patch rows", "max_call_patches = 32", NULL};
    CHECK(is_err(qvl_encode(ctx, px, 40, two, 2, o, NULL, &err), &err, QVL_ERR_LIMIT, call));
    qvl_grid wide = {1, 2, 16};
    const char *item[] = {"32 patch rows", "max_item_patches = 24", NULL};
    CHECK(is_err(qvl_encode(ctx, px, 32, &wide, 1, o, NULL, &err), &err, QVL_ERR_LIMIT, item));
    /* with a tap set, which has qvl_encode reserve early (the DeepStack features the caller skips reach the tap
     * through the ctx's scratch), the grids are still checked before any scratch is sized for them */
    qvl_ctx_set_tap(ctx, no_tap, NULL);
    CHECK(is_err(qvl_encode(ctx, px, 40, two, 2, o, NULL, &err), &err, QVL_ERR_LIMIT, call));
    CHECK(qvl_ctx_scratch_size(ctx) == 0);
    qvl_ctx_set_tap(ctx, NULL, NULL);
    CHECK(qvl_encode(ctx, px, 24, &two[1], 1, o, NULL, &err) == QVL_OK);

    /* plans on that ctx: the plan's own limits lower the ctx's, never raise them */
    qvl_item it[3];
    qvl_grid g[3] = {{1, 4, 4}, {1, 4, 4}, {1, 2, 16}};
    for (int i = 0; i < 3; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_ROWS;
        it[i].rows = px;
        it[i].grid = g[i];
    }
    qvl_limits raise;
    qvl_limits_default(&raise); /* every field above the ctx's: the ctx's stay */
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.limits = &raise;
    qvl_plan *plan = NULL;
    CHECK(qvl_plan_create(ctx, it, 3, &pp, &plan, &err) == QVL_OK);
    qvl_item_info info;
    qvl_plan_item(plan, 0, &info);
    CHECK(info.status == QVL_OK);
    qvl_plan_item(plan, 1, &info); /* 16 + 16 = 32 rows: at the limit */
    CHECK(info.status == QVL_OK);
    qvl_plan_item(plan, 2, &info);
    CHECK(info.status == QVL_ERR_LIMIT && strstr(info.message, "max_item_patches = 24") != NULL);
    qvl_plan_free(plan);
    raise.max_call_patches = 20; /* lowered by the plan: the second item no longer fits */
    CHECK(qvl_plan_create(ctx, it, 2, &pp, &plan, &err) == QVL_OK);
    qvl_plan_item(plan, 1, &info);
    CHECK(info.status == QVL_ERR_LIMIT && strstr(info.message, "adds 16 patch rows to the 16") != NULL &&
          strstr(info.message, "max_call_patches = 20") != NULL);
    printf("  plan over its call limit: %s\n", info.message);
    qvl_plan_free(plan);
    test_encode_elsewhere(m, ctx);
    free(px);
    free(o);
    qvl_ctx_free(ctx);
}

/* PIXELS and FRAMES items over the image / video limits fail before anything is copied; a FRAMES item's frames
 * stay the caller's (each goes into the rows as it is converted), so max_video_pixels, which bounds the frames a
 * video holds, does not refuse one. */
static void test_item_limits(qvl_model *m) {
    qvl_ctx *ctx;
    qvl_error err;
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    if (!ctx) return;
    static uint8_t rgb[64 * 64 * 3];
    qvl_limits l;
    qvl_limits_default(&l);
    l.max_image_pixels = 64 * 63;
    l.max_video_frames = 3;
    l.max_video_pixels = 2 * 64 * 64;
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.limits = &l;
    qvl_pixels px = {rgb, 64, 64, 3, 0}, small = {rgb, 60, 60, 3, 0};
    qvl_pixels frames[4] = {px, px, px, px}, smalls[3] = {small, small, small}; /* 3 · 60 · 60 > 8192 */
    qvl_item it[3];
    for (int i = 0; i < 3; i++) qvl_item_default(&it[i]);
    it[0].kind = QVL_ITEM_PIXELS, it[0].image = px;
    it[1].kind = QVL_ITEM_FRAMES, it[1].frames = frames, it[1].n_frames = 4;
    it[2].kind = QVL_ITEM_FRAMES, it[2].frames = smalls, it[2].n_frames = 3;
    qvl_plan *plan = NULL;
    CHECK(qvl_plan_create(ctx, it, 3, &pp, &plan, &err) == QVL_OK);
    qvl_item_info info;
    const char *want[2] = {"max_image_pixels = 4032", "max_video_frames = 3"};
    for (size_t i = 0; i < 2; i++) {
        qvl_plan_item(plan, i, &info);
        printf("  item %zu: %s\n", i, info.message);
        CHECK(info.status == QVL_ERR_LIMIT && strstr(info.message, want[i]) != NULL);
    }
    qvl_plan_item(plan, 2, &info);
    CHECK(info.status == QVL_OK && info.n_frames == 3);
    qvl_plan_free(plan);
    qvl_ctx_free(ctx);
}

/* A video of frame images (BMP: read in every build) over the frame and video-pixel limits: refused from the
 * sampled count and the first frame's size, before the frames are allocated. */
static void test_video_limits(void) {
    char paths[3][4096 + 64];
    const char *pp[3];
    uint8_t bmp[54 + 8 * 8 * 3] = {'B', 'M'};
    bmp[2] = sizeof bmp, bmp[10] = 54, bmp[14] = 40, bmp[18] = 8, bmp[22] = 8, bmp[26] = 1, bmp[28] = 24;
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "frame%d.bmp", i);
        put_file(g_dir, name, bmp, sizeof bmp, paths[i], sizeof paths[i]);
        pp[i] = paths[i];
    }
    qvl_limits l;
    qvl_limits_default(&l);
    l.max_video_frames = 2;
    qvl_video_params vp;
    qvl_video_params_default(&vp);
    vp.limits = &l;
    vp.num_frames = 3;
    qvl_video v;
    qvl_error err;
    const char *frames[] = {"sampling picks 3 frames", "max_video_frames = 2", NULL};
    CHECK(is_err(qvl_video_from_images(pp, 3, &vp, &v, &err), &err, QVL_ERR_LIMIT, frames));
    l.max_video_frames = 3;
    l.max_video_pixels = 3 * 64 - 1;
    const char *pixels[] = {"3 frames of 8x8", "max_video_pixels = 191", NULL};
    CHECK(is_err(qvl_video_from_images(pp, 3, &vp, &v, &err), &err, QVL_ERR_LIMIT, pixels));
    l.max_video_pixels = 3 * 64;
    CHECK(qvl_video_from_images(pp, 3, &vp, &v, &err) == QVL_OK && v.n_frames == 3);
    qvl_video_free(&v);
}

/* max_video_decode_pixels: checked before decoding from the container's frame count (every frame up to the last
 * sampled one is decoded), and frame by frame while decoding (a stream without a frame count is decoded once to
 * count it: that pass counts too). 64x48 clips of 60 frames (tests/data/video/README.md). */
static void test_video_decode_budget(void) {
    char mp4[1024], webm[1024], msg[64];
    tu_source_path("tests/data/video/video_testsrc_30.mp4", mp4, sizeof mp4);
    tu_source_path("tests/data/video/video_testsrc_30.webm", webm, sizeof webm);
    const uint64_t px = 64 * 48;
    qvl_limits l;
    qvl_limits_default(&l);
    qvl_video_params vp;
    qvl_video_params_default(&vp);
    vp.limits = &l;
    qvl_video v;
    qvl_error err;
    CHECK(qvl_video_load(mp4, &vp, &v, &err) == QVL_OK && v.n_frames > 0);
    const uint64_t last = v.n_frames > 0 ? (uint64_t)v.indices[v.n_frames - 1] : 0;
    qvl_video_free(&v);
    l.max_video_decode_pixels = (last + 1) * px - 1;
    snprintf(msg, sizeof msg, "means decoding %llu frames,", (unsigned long long)last + 1);
    const char *before[] = {msg, "max_video_decode_pixels", NULL};
    CHECK(is_err(qvl_video_load(mp4, &vp, &v, &err), &err, QVL_ERR_LIMIT, before));
    printf("video decode budget, mp4: %s\n", err.message);
    l.max_video_decode_pixels = (last + 1) * px;
    CHECK(qvl_video_load(mp4, &vp, &v, &err) == QVL_OK);
    qvl_video_free(&v);
    /* WebM: 60 frames counted first, then decoded up to the last sampled one */
    l.max_video_decode_pixels = 60 * px - 1;
    const char *counting[] = {"59 frames of 64x48 decoded, one more passes", NULL};
    CHECK(is_err(qvl_video_load(webm, &vp, &v, &err), &err, QVL_ERR_LIMIT, counting));
    printf("video decode budget, webm: %s\n", err.message);
    l.max_video_decode_pixels = (60 + last + 1) * px - 1;
    const char *after[] = {"after counting them", NULL};
    CHECK(is_err(qvl_video_load(webm, &vp, &v, &err), &err, QVL_ERR_LIMIT, after));
    l.max_video_decode_pixels = (60 + last + 1) * px;
    CHECK(qvl_video_load(webm, &vp, &v, &err) == QVL_OK && (uint64_t)v.indices[v.n_frames - 1] == last);
    qvl_video_free(&v);
}

/* NaN and infinity: in ROWS items and qvl_encode input (refused, naming the row and column), and in the output of
 * finite but huge rows (the patch GEMM overflows to infinity, which becomes NaN downstream). */
static void test_nonfinite_rows(qvl_model *m) {
    qvl_ctx *ctx;
    qvl_error err;
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    if (!ctx) return;
    const size_t row_len = 1536;
    float *px = calloc(16 * row_len, sizeof *px), *out = calloc(4 * 96, sizeof *out);
    qvl_grid g = {1, 4, 4};
    px[3 * row_len + 7] = NAN;
    const char *nan_at[] = {"row 3, column 7 is NaN", NULL};
    CHECK(is_err(qvl_encode(ctx, px, 16, &g, 1, out, NULL, &err), &err, QVL_ERR_NONFINITE, nan_at));
    CHECK(strcmp(qvl_status_name(QVL_ERR_NONFINITE), "non-finite value") == 0);
    CHECK(strcmp(qvl_status_name(QVL_ERR_RESAMPLED), "sampled again") == 0);
    px[3 * row_len + 7] = 0;
    px[15 * row_len + 1535] = -INFINITY;
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_ROWS, it.rows = px, it.grid = g;
    qvl_plan *plan = NULL;
    CHECK(qvl_plan_create(ctx, &it, 1, NULL, &plan, &err) == QVL_OK);
    qvl_item_info info;
    qvl_plan_item(plan, 0, &info);
    CHECK(info.status == QVL_ERR_NONFINITE && strstr(info.message, "row 15, column 1535 is -inf") != NULL);
    qvl_plan_free(plan);
    /* finite rows whose patch embedding overflows: the output is flagged */
    for (size_t i = 0; i < 16 * row_len; i++) px[i] = 3e38f;
    const char *out_bad[] = {"the tower's output is not finite", "merged token 0", NULL};
    CHECK(is_err(qvl_encode(ctx, px, 16, &g, 1, out, NULL, &err), &err, QVL_ERR_NONFINITE, out_bad));
    CHECK(qvl_plan_create(ctx, &it, 1, NULL, &plan, &err) == QVL_OK);
    void *o = malloc(4096 * 4);
    qvl_plan_item(plan, 0, &info);
    CHECK(info.status == QVL_OK && info.out_bytes <= 4096 * 4);
    CHECK(qvl_plan_encode(ctx, plan, &o, &err) == QVL_ERR_NONFINITE);
    qvl_plan_item(plan, 0, &info);
    printf("  huge rows: %s\n", info.message);
    CHECK(info.status == QVL_ERR_NONFINITE && strstr(info.message, "not finite") != NULL);
    qvl_plan_free(plan);
    free(o);
    free(px);
    free(out);
    qvl_ctx_free(ctx);
}

/* One bf16 value of tensor `name` in dir/model.safetensors set to `bits`. */
static void poke_bf16(const char *dir, const char *name, size_t index, uint16_t bits) {
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_file *f = NULL;
    qvl_error err;
    CHECK(st_open(path, &f, &err) == QVL_OK);
    if (!f) return;
    const st_tensor *t = st_find(f, name);
    CHECK(t != NULL);
    off_t off = t ? (off_t)(t->offset + (off_t)(2 * index)) : 0;
    st_close(f);
    if (!t) return;
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    uint8_t b[2] = {(uint8_t)bits, (uint8_t)(bits >> 8)};
    CHECK(pwrite(fd, b, 2, off) == 2);
    close(fd);
}

static void test_nonfinite_weights(void) {
    char dir[4096 + 64];
    snprintf(dir, sizeof dir, "%s/nan-model", g_dir);
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    qvl_error err;
    CHECK(qvl_synth_write(&sp, dir, &err) == QVL_OK);
    poke_bf16(dir, "model.visual.blocks.2.mlp.linear_fc1.weight", 64 * 5 + 9, 0x7fc0); /* NaN at row 5, column 9 */
    qvl_model *m = (qvl_model *)1;
    qvl_status s = qvl_model_load(dir, NULL, &m, &err);
    printf("  NaN weight: %s\n", err.message);
    const char *w[] = {"blocks.2.mlp.linear_fc1.weight", "element 329 (row 5, column 9)", NULL};
    CHECK(is_err(s, &err, QVL_ERR_NONFINITE, w) && m == NULL);
    qvl_load_params lp; /* a describe-only load (qvl info) reads and checks every weight too */
    qvl_load_params_default(&lp);
    lp.describe_only = 1;
    m = (qvl_model *)1;
    CHECK(is_err(qvl_model_load(dir, &lp, &m, &err), &err, QVL_ERR_NONFINITE, w) && m == NULL);
    poke_bf16(dir, "model.visual.blocks.2.mlp.linear_fc1.weight", 64 * 5 + 9, 0x3f80);
    poke_bf16(dir, "model.visual.blocks.1.attn.qkv.bias", 17, 0xff80); /* -inf in a bias */
    s = qvl_model_load(dir, NULL, &m, &err);
    printf("  inf bias: %s\n", err.message);
    const char *b[] = {"blocks.1.attn.qkv.bias", "element 17", NULL};
    CHECK(is_err(s, &err, QVL_ERR_NONFINITE, b) && m == NULL);
    poke_bf16(dir, "model.visual.blocks.1.attn.qkv.bias", 17, 0);
    CHECK(qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    qvl_model_free(m);
}

/* An exact size above the budget, non-finite normalisation, and a min_pixels that would blow up every image. */
static void test_preprocess_limits(void) {
    static uint8_t rgb[64 * 64 * 3];
    qvl_image img = {64, 64, rgb};
    qvl_preprocess_params p;
    qvl_preprocess_params_default(&p);
    p.size_h = p.size_w = 8192;
    qvl_grid g;
    qvl_error err;
    const char *size[] = {"8192x8192 is 67108864 pixels", "max_pixels 16777216", NULL};
    CHECK(is_err(qvl_image_grid(&img, &p, &g, &err), &err, QVL_ERR_LIMIT, size));
    p.size_h = p.size_w = 4096;
    CHECK(qvl_image_grid(&img, &p, &g, &err) == QVL_OK && g.h == 256);
    p.size_h = p.size_w = 0;
    p.image_mean[1] = NAN;
    CHECK(qvl_image_grid(&img, &p, &g, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "image_mean[1]"));

    char dir[4096 + 64], path[4096 + 128];
    snprintf(dir, sizeof dir, "%s/bigmin", g_dir);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("{\"min_pixels\": 400000000, \"max_pixels\": 1000000000000}", f);
    fclose(f);
    qvl_preprocess_params_default(&p);
    qvl_status s = qvl_preprocess_params_load(dir, &p, NULL, &err);
    printf("  min_pixels 4e8: %s\n", err.message);
    const char *minp[] = {"min pixels", "400000000", "1562500 patch rows", "max_item_patches", NULL};
    CHECK(is_err(s, &err, QVL_ERR_LIMIT, minp));
    f = fopen(path, "w");
    fputs("{\"min_pixels\": 67108864, \"max_pixels\": 1000000000000}", f); /* 262144 patch rows: at the limit */
    fclose(f);
    CHECK(qvl_preprocess_params_load(dir, &p, NULL, &err) == QVL_OK && p.min_pixels == 67108864);
}

static void test_api(void) {
    test_limits_struct();
    snprintf(g_model, sizeof g_model, "%s/tiny", g_dir);
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    qvl_error err;
    CHECK(qvl_synth_write(&sp, g_model, &err) == QVL_OK);
    qvl_model *m = load_model(g_model, &err);
    CHECK(m != NULL);
    if (m) {
        test_encode_limits(m);
        test_item_limits(m);
        test_nonfinite_rows(m);
    }
    qvl_model_free(m);
    test_nonfinite_weights();
    test_preprocess_limits();
    test_video_limits();
    if (QVL_WITH_VIDEO) test_video_decode_budget();
}

int main(void) {
    CHECK(tu_tmpdir(g_dir, sizeof g_dir) != NULL);
    test_api();
    if (QVL_WITH_MEDIA) {
        test_png();
        test_gif();
        test_webp();
        test_decode_limits();
    } else {
        printf("test_limits: decoder cases skipped, built without image decoders (QVL_MEDIA=OFF)\n");
    }
#if QVL_WITH_MEDIA
    test_jpeg();
#endif
    CHECK(tu_rmtree(g_dir));
    return tu_finish("test_limits");
}
