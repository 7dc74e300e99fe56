/* test_read_rows.c — qvl_read_rows / qvl_read_rows_limited on hostile and borderline files: the file's size against
 * max_input_bytes before a byte is read (a sparse 256 MiB file under a 1 MiB limit), the rows a header claims
 * against max_call_patches before the rows are allocated (a .npy claiming 1048577 x 1536 floats in 192 bytes, a
 * safetensors pixel_values of 1048577 rows, all present or in a file 64 bytes long), a .npy header length claiming 4 GiB (and 256 MiB, in a sparse file
 * that holds them) refused before anything is allocated for it, grid_thw against max_item_patches and
 * max_call_patches, each limit just at (read) and one above (refused, with a message naming the file, the limit
 * and how to raise it), truncated files, and rows_parse (the buffer form the fuzz target drives) agreeing.
 * The hostile cases must each leave the process's peak RSS (getrusage) less than 64 MiB higher. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/error.h"
#include "io/files.h"
#include "qvl.h"
#include "testutil.h"

#define MAX_GROWTH_KIB (64 * 1024)

static char g_dir[4096];

static const char *tpath(const char *name) { return tu_path(g_dir, name); }

static long peak_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Write `n` bytes to `path`, then extend the file (sparse: no disk, no memory) to `size` when larger. */
static void put(const char *path, const void *d, size_t n, uint64_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(write(fd, d, n) == (ssize_t)n);
    if (size > n) CHECK(ftruncate(fd, (off_t)size) == 0);
    CHECK(close(fd) == 0);
}

/* A .npy header (version 1.0, or 2.0 when `v2`) holding `dict`, padded to 64 bytes as NumPy does, into buf;
 * returns its length. */
static size_t npy_header(unsigned char *buf, int v2, const char *dict) {
    size_t pre = v2 ? 12 : 10, dl = strlen(dict), total = (pre + dl + 1 + 63) / 64 * 64, hl = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = v2 ? 2 : 1;
    buf[7] = 0;
    for (size_t i = 0; i < (v2 ? 4u : 2u); i++) buf[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', total - pre - dl - 1);
    buf[total - 1] = '\n';
    return total;
}

/* A safetensors file: the JSON header `hdr` padded to 8 bytes, then `data_len` data bytes (zeros, sparse past the
 * first `have` of `data`). */
static void put_st(const char *path, const char *hdr, const void *data, size_t have, uint64_t data_len) {
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    unsigned char *b = malloc(8 + padded + have);
    CHECK(b != NULL);
    if (!b) return;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(b + 8, hdr, hl);
    memset(b + 8 + hl, ' ', padded - hl);
    if (have) memcpy(b + 8 + padded, data, have);
    put(path, b, 8 + padded + have, 8 + padded + data_len);
    free(b);
}

typedef struct got {
    qvl_status s;
    float *rows;
    size_t n_rows, row_len, n_grids;
    qvl_grid *grids;
    qvl_error err;
} got;

static got rd(const char *path, const qvl_limits *lim, int want_grids) {
    got g;
    memset(&g, 0, sizeof g);
    g.n_rows = g.row_len = g.n_grids = 99;
    g.s = qvl_read_rows_limited(path, lim, &g.rows, &g.n_rows, &g.row_len, want_grids ? &g.grids : NULL,
                                want_grids ? &g.n_grids : NULL, &g.err);
    return g;
}

static void done(got *g) {
    qvl_free(g->rows);
    qvl_free(g->grids);
}

/* A refusal: status `want`, no outputs, the message holds the file's name and each of `a`, `b`, `c` (NULL: skip). */
static void refused(const char *what, got g, const char *name, qvl_status want, const char *a, const char *b,
                    const char *c) {
    int ok = g.s == want && g.rows == NULL && g.n_rows == 0 && g.row_len == 0 && g.grids == NULL &&
             strstr(g.err.message, name) && (!a || strstr(g.err.message, a)) && (!b || strstr(g.err.message, b)) &&
             (!c || strstr(g.err.message, c));
    CHECK(ok);
    printf("  %-28s %s: %s\n", what, qvl_status_name(g.s), g.err.message);
    if (!ok) printf("  %s: want %s with '%s', '%s', '%s', '%s'\n", what, qvl_status_name(want), name, a ? a : "",
                    b ? b : "", c ? c : "");
    done(&g);
}

static qvl_limits limits(uint64_t input_bytes, uint64_t item_patches, uint64_t call_patches) {
    qvl_limits l;
    qvl_limits_default(&l);
    if (input_bytes) l.max_input_bytes = input_bytes;
    if (item_patches) l.max_item_patches = item_patches;
    if (call_patches) l.max_call_patches = call_patches;
    return l;
}

/* Claims over the limits, refused before what they claim is allocated or read. */
static void test_hostile(void) {
    unsigned char h[256];
    long before = peak_kib();

    /* 1048577 x 1536 float32 (6 GiB) claimed by a 192-byte file: the claim is over max_call_patches, which is the
     * refusal, not the truncation. */
    size_t n = npy_header(h, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1048577, 1536), }");
    memset(h + n, 0, 64);
    put(tpath("claim.npy"), h, n + 64, 0);
    refused("npy rows claim", rd(tpath("claim.npy"), NULL, 1), "claim.npy", QVL_ERR_LIMIT, "max_call_patches",
            "1048577", "--limit max_call_patches=N");

    /* The same claim as a safetensors pixel_values of 1048577 x 1 F32 (4 MiB, all present). */
    put_st(tpath("claim.safetensors"),
           "{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1048577,1],\"data_offsets\":[0,4194308]}}", NULL, 0,
           4194308);
    refused("safetensors rows claim", rd(tpath("claim.safetensors"), NULL, 1), "claim.safetensors", QVL_ERR_LIMIT,
            "max_call_patches", "1048577", "qvl_limits.max_call_patches");

    /* The .npy's claim as a safetensors pixel_values of 1048577 x 1536 F32 in a file of 64 data bytes: the limit
     * again, not the spans outside the data section (a format error before); through rows_parse too. A claim
     * within the limit in the same short file is the format error, and so is a header that does not parse. */
    put_st(tpath("claim_short.safetensors"),
           "{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1048577,1536],\"data_offsets\":[0,6442456064]}}",
           h, 64, 64);
    refused("safetensors truncated claim", rd(tpath("claim_short.safetensors"), NULL, 1), "claim_short.safetensors",
            QVL_ERR_LIMIT, "max_call_patches", "1048577 rows", "qvl_limits.max_call_patches");
    size_t blen = 0;
    unsigned char *b = tu_read_file(tpath("claim_short.safetensors"), &blen);
    CHECK(b != NULL);
    got bg;
    memset(&bg, 0, sizeof bg);
    bg.s = rows_parse(b, blen, "claim buffer", NULL, &bg.rows, &bg.n_rows, &bg.row_len, &bg.grids, &bg.n_grids,
                      &bg.err);
    refused("safetensors buffer claim", bg, "claim buffer", QVL_ERR_LIMIT, "max_call_patches", "1048577", NULL);
    free(b);
    qvl_limits high = limits(0, 0, 2000000);
    refused("truncated, claim within", rd(tpath("claim_short.safetensors"), &high, 1), "claim_short.safetensors",
            QVL_ERR_FORMAT, "outside the data section", NULL, NULL);
    put_st(tpath("claim_bad.safetensors"),
           "{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1048577,1536],\"data_offsets\":[0,6442456064]},}",
           h, 64, 64);
    refused("claim in a broken header", rd(tpath("claim_bad.safetensors"), NULL, 1), "claim_bad.safetensors",
            QVL_ERR_FORMAT, "not valid JSON", NULL, NULL);

    /* A version 2.0 header length of 4 GiB - 1 in a 64-byte file, and of 256 MiB in a sparse file that holds it:
     * refused from the length field, before a buffer for the header is allocated. */
    n = npy_header(h, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }");
    h[8] = h[9] = h[10] = h[11] = 0xff;
    put(tpath("hlen4g.npy"), h, n, 0);
    refused("npy header 4 GiB", rd(tpath("hlen4g.npy"), NULL, 1), "hlen4g.npy", QVL_ERR_FORMAT, "4294967295",
            "65535", NULL);
    h[8] = h[9] = h[10] = 0;
    h[11] = 0x10; /* 256 MiB */
    put(tpath("hlen256m.npy"), h, n, 12 + ((uint64_t)256 << 20) + 4);
    refused("npy header 256 MiB", rd(tpath("hlen256m.npy"), NULL, 1), "hlen256m.npy", QVL_ERR_FORMAT, "268435456",
            "65535", NULL);

    /* A valid 256 MiB .npy (sparse: zeros) under max_input_bytes = 1 MiB: refused from its size, before it is
     * read. */
    n = npy_header(h, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 1024), }");
    put(tpath("big.npy"), h, n, n + ((uint64_t)256 << 20));
    qvl_limits l = limits(1 << 20, 0, 0);
    refused("npy over max_input_bytes", rd(tpath("big.npy"), &l, 1), "big.npy", QVL_ERR_LIMIT, "max_input_bytes",
            "1048576", "--limit max_input_bytes=N");

    long growth = peak_kib() - before;
    CHECK(growth < MAX_GROWTH_KIB);
    printf("  peak RSS growth over the hostile files: %ld KiB (bound %d)\n", growth, MAX_GROWTH_KIB);
}

/* Each limit at the file's value (read) and one below it (refused), for both formats. */
static void test_borders(void) {
    float px[6 * 4];
    for (int i = 0; i < 24; i++) px[i] = (float)i * 0.5f;
    qvl_error err;
    CHECK(qvl_write_npy(tpath("r.npy"), px, 6, 4, &err) == QVL_OK);
    const qvl_out_tensor t[1] = {{"pixel_values", px, 6, 4}};
    const qvl_grid g2[2] = {{1, 2, 3}, {1, 2, 2}}; /* 6 + 4 = 10 rows: more than the file's 6 */
    CHECK(qvl_write_safetensors(tpath("r.safetensors"), t, 1, g2, 2, NULL, 0, &err) == QVL_OK);
    struct stat_like {
        const char *name;
        uint64_t size;
    } f[2] = {{"r.npy", 0}, {"r.safetensors", 0}};
    for (int i = 0; i < 2; i++) {
        FILE *fp = fopen(tpath(f[i].name), "rb");
        CHECK(fp != NULL);
        if (!fp) return;
        fseek(fp, 0, SEEK_END);
        f[i].size = (uint64_t)ftell(fp);
        fclose(fp);
    }

    for (int i = 0; i < 2; i++) {
        const char *p = tpath(f[i].name);
        /* max_input_bytes: exactly the file's size is read, one byte less refuses it */
        qvl_limits l = limits(f[i].size, 0, 0);
        got g = rd(p, &l, 1);
        CHECK(g.s == QVL_OK && g.n_rows == 6 && g.row_len == 4 && g.rows && memcmp(g.rows, px, sizeof px) == 0);
        done(&g);
        l = limits(f[i].size - 1, 0, 0);
        refused("max_input_bytes - 1", rd(p, &l, 1), f[i].name, QVL_ERR_LIMIT, "max_input_bytes", "more than the",
                NULL);
        /* max_call_patches against the rows: 6 reads (the npy; the safetensors' grids are checked below), 5
         * refuses */
        l = limits(0, 0, i == 0 ? 6 : 10);
        g = rd(p, &l, 1);
        CHECK(g.s == QVL_OK && g.n_rows == 6);
        done(&g);
        l = limits(0, 0, 5);
        refused("max_call_patches - 1", rd(p, &l, 1), f[i].name, QVL_ERR_LIMIT, "max_call_patches", "6 ", NULL);
    }

    /* grid_thw: each grid against max_item_patches (6 reads, 5 refuses grid 0), their sum (10) against
     * max_call_patches (10 reads, 9 refuses although the rows are 6); not asked for, they are not checked. */
    const char *p = tpath("r.safetensors");
    qvl_limits l = limits(0, 6, 0);
    got g = rd(p, &l, 1);
    CHECK(g.s == QVL_OK && g.n_grids == 2 && g.grids && g.grids[0].w == 3 && g.grids[1].w == 2);
    done(&g);
    l = limits(0, 5, 0);
    refused("max_item_patches - 1", rd(p, &l, 1), "r.safetensors", QVL_ERR_LIMIT, "max_item_patches",
            "grid_thw[0] (t=1, h=2, w=3)", NULL);
    g = rd(p, &l, 0);
    CHECK(g.s == QVL_OK && g.n_rows == 6 && g.grids == NULL && g.n_grids == 99);
    done(&g);
    l = limits(0, 0, 9);
    g = rd(p, &l, 0); /* 6 rows, grids not read: within 9 */
    CHECK(g.s == QVL_OK);
    done(&g);
    refused("grid sum over max_call", rd(p, &l, 1), "r.safetensors", QVL_ERR_LIMIT, "max_call_patches",
            "grid_thw[0..1] are 10 patch rows", NULL);

    /* a limit of 0 is the caller's mistake */
    l = limits(0, 0, 0);
    l.max_input_bytes = 0;
    got z = rd(p, &l, 1);
    CHECK(z.s == QVL_ERR_INVALID_ARG && strstr(z.err.message, "max_input_bytes") && z.rows == NULL);
    done(&z);

    /* qvl_read_rows is the defaults */
    float *rows = NULL;
    qvl_grid *grids = NULL;
    size_t nr = 0, rl = 0, ng = 0;
    CHECK(qvl_read_rows(p, &rows, &nr, &rl, &grids, &ng, &err) == QVL_OK && nr == 6 && rl == 4 && ng == 2);
    qvl_free(rows);
    qvl_free(grids);
}

/* Truncated files are format errors, within the limits. */
static void test_truncated(void) {
    unsigned char h[256];
    size_t n = npy_header(h, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4), }");
    memset(h + n, 0, 4 * 23);
    put(tpath("short.npy"), h, n + 4 * 23, 0); /* one float short */
    refused("npy one float short", rd(tpath("short.npy"), NULL, 1), "short.npy", QVL_ERR_FORMAT, "96 bytes",
            "92", NULL);
    put(tpath("hdr.npy"), h, 40, 0); /* cut inside the header */
    refused("npy cut in the header", rd(tpath("hdr.npy"), NULL, 1), "hdr.npy", QVL_ERR_FORMAT, NULL, NULL, NULL);
    float px[24] = {0};
    const char *hdr = "{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[6,4],\"data_offsets\":[0,96]}}";
    put_st(tpath("short.safetensors"), hdr, px, 92, 92);
    refused("safetensors one float short", rd(tpath("short.safetensors"), NULL, 1), "short.safetensors",
            QVL_ERR_FORMAT, NULL, NULL, NULL);
    put(tpath("tiny.safetensors"), "\x10\0\0\0\0\0\0\0{", 9, 0);
    refused("safetensors cut header", rd(tpath("tiny.safetensors"), NULL, 1), "tiny.safetensors", QVL_ERR_FORMAT,
            NULL, NULL, NULL);
}

/* rows_parse (the buffer form) gives what the file reader gives, under the same limits. */
static void test_buffer(void) {
    const char *names[2] = {"r.npy", "r.safetensors"};
    for (int i = 0; i < 2; i++) {
        FILE *fp = fopen(tpath(names[i]), "rb");
        CHECK(fp != NULL);
        if (!fp) return;
        unsigned char buf[1024];
        size_t len = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        unsigned char *exact = malloc(len);
        CHECK(exact != NULL);
        if (!exact) return;
        memcpy(exact, buf, len);
        float *rows = NULL;
        qvl_grid *grids = NULL;
        size_t nr = 0, rl = 0, ng = 0;
        qvl_error err;
        qvl_limits l = limits(len, 0, 0);
        CHECK(rows_parse(exact, len, names[i], &l, &rows, &nr, &rl, &grids, &ng, &err) == QVL_OK && nr == 6 &&
              rl == 4 && ng == (i ? 2u : 0u));
        free(rows);
        free(grids);
        l = limits(len - 1, 0, 0);
        CHECK(rows_parse(exact, len, names[i], &l, &rows, &nr, &rl, &grids, &ng, &err) == QVL_ERR_LIMIT &&
              rows == NULL && strstr(err.message, "max_input_bytes") && strstr(err.message, names[i]));
        l = limits(0, 0, 5);
        CHECK(rows_parse(exact, len, names[i], &l, &rows, &nr, &rl, &grids, &ng, &err) == QVL_ERR_LIMIT &&
              rows == NULL && strstr(err.message, "max_call_patches"));
        free(exact);
    }
}

/* The rows of a file `qvl encode --preprocess-only` wrote (item{i}.pixel_values per input that succeeded, grid_thw):
 * read in the order of i (item10 after item2, whatever the header's order), gaps (a failed input) skipped; one row
 * length; their sum under max_call_patches; a name that is not item{i} ignored. */
static void test_items(void) {
    float px[10 * 4];
    for (int i = 0; i < 40; i++) px[i] = (float)i;
    qvl_error err;
    /* item10: rows 0-1, item2: rows 2-5, item0: rows 6-9 as written; read back item0, item2, item10 */
    const qvl_out_tensor t[4] = {{"item10.pixel_values", px, 2, 4}, {"item2.pixel_values", px + 8, 4, 4},
                                 {"item0.pixel_values", px + 24, 4, 4}, {"item01.pixel_values", px, 1, 4}};
    const qvl_grid g3[3] = {{1, 2, 2}, {1, 2, 2}, {1, 1, 2}};
    CHECK(qvl_write_safetensors(tpath("items.safetensors"), t, 4, g3, 3, NULL, 0, &err) == QVL_OK);
    got g = rd(tpath("items.safetensors"), NULL, 1);
    CHECK(g.s == QVL_OK && g.n_rows == 10 && g.row_len == 4 && g.n_grids == 3 && g.rows);
    if (g.rows) {
        CHECK(memcmp(g.rows, px + 24, 16 * sizeof(float)) == 0);      /* item0 */
        CHECK(memcmp(g.rows + 16, px + 8, 16 * sizeof(float)) == 0);  /* item2 */
        CHECK(memcmp(g.rows + 32, px, 8 * sizeof(float)) == 0);       /* item10 */
    }
    done(&g);
    /* the rows' sum against max_call_patches: 10 reads, 9 refuses (each alone is under it) */
    qvl_limits l = limits(0, 0, 10);
    g = rd(tpath("items.safetensors"), &l, 1);
    CHECK(g.s == QVL_OK && g.n_rows == 10);
    done(&g);
    l = limits(0, 0, 9);
    refused("items over max_call_patches", rd(tpath("items.safetensors"), &l, 1), "items.safetensors", QVL_ERR_LIMIT,
            "max_call_patches", "10 ", NULL);
    /* rows of another length */
    const qvl_out_tensor u[2] = {{"item0.pixel_values", px, 2, 4}, {"item1.pixel_values", px, 2, 5}};
    CHECK(qvl_write_safetensors(tpath("mixed.safetensors"), u, 2, NULL, 0, NULL, 0, &err) == QVL_OK);
    refused("items of two row lengths", rd(tpath("mixed.safetensors"), NULL, 1), "mixed.safetensors", QVL_ERR_SHAPE,
            "item1.pixel_values", "5 values", "item0.pixel_values");
    /* neither pixel_values nor item{i}.pixel_values: both named */
    const qvl_out_tensor v[1] = {{"item01.pixel_values", px, 2, 4}};
    CHECK(qvl_write_safetensors(tpath("none.safetensors"), v, 1, NULL, 0, NULL, 0, &err) == QVL_OK);
    refused("no rows tensor", rd(tpath("none.safetensors"), NULL, 1), "none.safetensors", QVL_ERR_SHAPE,
            "\"pixel_values\"", "item{i}.pixel_values", NULL);
}

int main(void) {
    if (!tu_tmpdir(g_dir, sizeof g_dir)) {
        fprintf(stderr, "test_read_rows: no temp dir\n");
        return 1;
    }
    test_hostile(); /* first: the peak RSS is a high-water mark */
    test_borders();
    test_truncated();
    test_buffer();
    test_items();
    tu_rmtree(g_dir);
    return tu_finish("test_read_rows");
}
