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
 * With QVL_TEST_LIMITS_OUT set to a directory the files are also written there (how fuzz/corpus/decode/limit_*
 * were made). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/error.h"
#include "qvl.h"
#include "testutil.h"

#if QVL_WITH_MEDIA
#include <jpeglib.h> /* after stdio.h */
#endif

#define MAX_GROWTH_KIB (64 * 1024)
#define MAX_SECONDS 1.0

static char g_dir[4096];

static long peak_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void put_file(const char *dir, const char *name, const uint8_t *d, size_t n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    CHECK(fwrite(d, 1, n, fp) == n);
    CHECK(fclose(fp) == 0);
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

int main(void) {
    if (!QVL_WITH_MEDIA) {
        printf("test_limits: skipped, built without image decoders (QVL_MEDIA=OFF)\n");
        return TU_SKIP;
    }
    CHECK(tu_tmpdir(g_dir, sizeof g_dir) != NULL);
    test_png();
    test_gif();
    test_webp();
#if QVL_WITH_MEDIA
    test_jpeg();
#endif
    CHECK(tu_rmtree(g_dir));
    return tu_finish("test_limits");
}
