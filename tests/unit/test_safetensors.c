/* test_safetensors.c — the safetensors reader against hand-built files: every malformed header gives a status and a
 * message (never a crash, checked under ASan/LSan), and valid files expose the right names, shapes, dtypes, data
 * pointers and metadata; a file that shrinks after it was opened. Uses only the reader (st_open/st_load/st_parse/st_read),
 * not the writer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "testutil.h"

/* Bytes of a safetensors file: 8-byte little-endian `hlen`, `json` (its length may differ from hlen), `data`. */
typedef struct buf {
    uint8_t *p;
    size_t n;
} buf;

static buf make_raw(uint64_t hlen, const char *json, const void *data, size_t dlen) {
    size_t jl = strlen(json);
    buf b = {malloc(8 + jl + dlen + 1), 8 + jl + dlen};
    for (int i = 0; i < 8; i++) b.p[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(b.p + 8, json, jl);
    if (dlen) memcpy(b.p + 8 + jl, data, dlen);
    return b;
}

static buf make_st(const char *json, const void *data, size_t dlen) { return make_raw(strlen(json), json, data, dlen); }

static char g_dir[256];

static const char *write_file(const char *name, const buf *b, char *path, size_t n) {
    snprintf(path, n, "%s/%s", g_dir, name);
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (fp) {
        if (b->n) CHECK(fwrite(b->p, 1, b->n, fp) == b->n);
        fclose(fp);
    }
    return path;
}

/* Both st_parse on the bytes and st_open on a file holding them must fail with `want` and a message. */
static void expect_fail_buf(const char *what, buf b, qvl_status want) {
    qvl_error err;
    st_file *f = (st_file *)&err; /* poison: must come back NULL */
    err_clear(&err);
    qvl_status s = st_parse(b.p, b.n, what, &f, &err);
    CHECK(s == want);
    CHECK(err.status == want);
    CHECK(f == NULL);
    CHECK(err.message[0] != '\0');
    CHECK(strstr(err.message, what) != NULL); /* names the file */
    if (s != want) fprintf(stderr, "  %s: st_parse gave %d (%s)\n", what, (int)s, err.message);
    st_close(f == (st_file *)&err ? NULL : f);

    char path[512];
    write_file(what, &b, path, sizeof path);
    f = (st_file *)&err;
    err_clear(&err);
    s = st_open(path, &f, &err);
    CHECK(s == want);
    CHECK(f == NULL);
    CHECK(err.message[0] != '\0');
    CHECK(strstr(err.message, what) != NULL);
    if (s != want) fprintf(stderr, "  %s: st_open gave %d (%s)\n", what, (int)s, err.message);
    else printf("  %-22s -> %s\n", what, err.message);
    st_close(f == (st_file *)&err ? NULL : f);
    free(b.p);
}

static void expect_bad(const char *what, const char *json, size_t dlen) {
    uint8_t *data = calloc(dlen ? dlen : 1, 1);
    expect_fail_buf(what, make_st(json, data, dlen), QVL_ERR_FORMAT);
    free(data);
}

static void test_malformed(void) {
    /* Size and framing. */
    expect_fail_buf("empty", (buf){calloc(1, 1), 0}, QVL_ERR_FORMAT);
    expect_fail_buf("seven", (buf){calloc(7, 1), 7}, QVL_ERR_FORMAT);
    expect_fail_buf("truncated", make_raw(100, "{}", NULL, 0), QVL_ERR_FORMAT);
    expect_fail_buf("huge_hlen", make_raw(UINT64_C(1) << 63, "{}", NULL, 0), QVL_ERR_FORMAT);
    expect_fail_buf("max_hlen", make_raw(UINT64_MAX, "{}", NULL, 0), QVL_ERR_FORMAT);
    expect_fail_buf("over_limit", make_raw((uint64_t)ST_MAX_HEADER + 1, "{}", NULL, 0), QVL_ERR_FORMAT);
    expect_fail_buf("zero_hlen", make_raw(0, "", NULL, 0), QVL_ERR_FORMAT);
    /* JSON. */
    expect_bad("bad_json", "{\"a\": {", 0);
    expect_bad("not_object", "[1, 2, 3]", 0);
    expect_bad("string_root", "\"hello\"", 0);
    expect_bad("trailing", "{} x", 0);
    expect_bad("entry_not_obj", "{\"a\": 5}", 0);
    expect_bad("no_dtype", "{\"a\": {\"shape\": [], \"data_offsets\": [0, 4]}}", 4);
    expect_bad("no_shape", "{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4);
    expect_bad("no_offsets", "{\"a\": {\"dtype\": \"F32\", \"shape\": []}}", 4);
    /* dtype. */
    expect_bad("unknown_dtype", "{\"a\": {\"dtype\": \"F128\", \"shape\": [1], \"data_offsets\": [0, 16]}}", 16);
    expect_bad("dtype_number", "{\"a\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4);
    expect_bad("dtype_lower", "{\"a\": {\"dtype\": \"f32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4);
    /* shape. */
    expect_bad("shape_negative", "{\"a\": {\"dtype\": \"U8\", \"shape\": [-1], \"data_offsets\": [0, 0]}}", 0);
    expect_bad("shape_fraction", "{\"a\": {\"dtype\": \"U8\", \"shape\": [1.5], \"data_offsets\": [0, 1]}}", 4);
    expect_bad("shape_string", "{\"a\": {\"dtype\": \"U8\", \"shape\": [\"2\"], \"data_offsets\": [0, 2]}}", 4);
    expect_bad("shape_huge", "{\"a\": {\"dtype\": \"U8\", \"shape\": [1e300], \"data_offsets\": [0, 2]}}", 4);
    expect_bad("shape_2p53", "{\"a\": {\"dtype\": \"U8\", \"shape\": [9007199254740992], \"data_offsets\": [0, 2]}}",
               4);
    expect_bad("shape_not_array", "{\"a\": {\"dtype\": \"U8\", \"shape\": 4, \"data_offsets\": [0, 4]}}", 4);
    expect_bad("too_many_dims",
               "{\"a\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 1);
    expect_bad("shape_mismatch", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24);
    expect_bad("shape_overflow",
               "{\"a\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296, 16], \"data_offsets\": [0, 0]}}", 0);
    expect_bad("size_overflow",
               "{\"a\": {\"dtype\": \"F64\", \"shape\": [4294967296, 536870912], \"data_offsets\": [0, 0]}}", 0);
    /* data_offsets. */
    expect_bad("span_outside", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 8);
    expect_bad("span_reversed", "{\"a\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [4, 0]}}", 8);
    expect_bad("offsets_arity1", "{\"a\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [0]}}", 8);
    expect_bad("offsets_arity3", "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1, 2]}}", 8);
    expect_bad("offsets_negative", "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [-1, 0]}}", 8);
    expect_bad("offsets_fraction", "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0.5, 1.5]}}", 8);
    expect_bad("overlap",
               "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
               " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
               12);
    expect_bad("overlap_nested",
               "{\"a\": {\"dtype\": \"U8\", \"shape\": [16], \"data_offsets\": [0, 16]},"
               " \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [2, 4]},"
               " \"c\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [8, 12]}}",
               16);
    expect_bad("same_span",
               "{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]},"
               " \"b\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}",
               4);
    /* Names and metadata. */
    expect_bad("duplicate",
               "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
               " \"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}",
               2);
    expect_bad("meta_number", "{\"__metadata__\": {\"format\": \"pt\", \"n\": 3}}", 0);
    expect_bad("meta_not_obj", "{\"__metadata__\": [\"pt\"]}", 0);
    expect_bad("meta_twice", "{\"__metadata__\": {}, \"__metadata__\": {}}", 0);
    expect_bad("meta_dupkey", "{\"__metadata__\": {\"k\": \"1\", \"k\": \"2\"}}", 0);
    /* Failure after some tensors and metadata were already copied must free them (LeakSanitizer). */
    expect_bad("late_failure",
               "{\"__metadata__\": {\"format\": \"pt\"},"
               " \"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
               " \"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]},"
               " \"c\": {\"dtype\": \"BAD\", \"shape\": [1], \"data_offsets\": [2, 3]}}",
               3);

    /* A missing file and a directory are I/O errors. */
    qvl_error err;
    st_file *f = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.safetensors", g_dir);
    err_clear(&err);
    CHECK(st_open(path, &f, &err) == QVL_ERR_IO);
    CHECK(f == NULL && err.status == QVL_ERR_IO && strstr(err.message, "does-not-exist") != NULL);
    err_clear(&err);
    CHECK(st_open(g_dir, &f, &err) == QVL_ERR_IO);
    CHECK(f == NULL && err.message[0] != '\0');
    /* NULL arguments. */
    err_clear(&err);
    CHECK(st_parse(NULL, 0, "x", NULL, &err) == QVL_ERR_INVALID_ARG);
    err_clear(&err);
    CHECK(st_parse(NULL, 8, "x", &f, &err) == QVL_ERR_INVALID_ARG && f == NULL);
    CHECK(st_open(path, &f, NULL) == QVL_ERR_IO); /* err may be NULL */
}

static void test_valid_empty(void) {
    qvl_error err;
    st_file *f = NULL;
    char path[512];
    /* Zero tensors, with the Python writer's space padding after the object. */
    buf b = make_st("{}      ", NULL, 0);
    write_file("zero.safetensors", &b, path, sizeof path);
    err_clear(&err);
    CHECK(st_open(path, &f, &err) == QVL_OK);
    CHECK(f != NULL);
    if (f) {
        CHECK(f->n_tensors == 0 && f->n_meta == 0);
        CHECK(st_find(f, "a") == NULL);
        CHECK(st_meta(f, "format") == NULL);
        CHECK(f->path && strcmp(f->path, path) == 0);
        CHECK(f->size == b.n);
    }
    st_close(f);
    free(b.p);

    /* Only metadata (null metadata counts as none). */
    b = make_st("{\"__metadata__\": null}", NULL, 0);
    err_clear(&err);
    CHECK(st_parse(b.p, b.n, "nullmeta", &f, &err) == QVL_OK);
    if (f) CHECK(f->n_tensors == 0 && f->n_meta == 0 && f->path == NULL && f->fd == -1 && f->buf == NULL);
    st_close(f);
    free(b.p);

    /* A 0-size tensor (a zero dimension) and a scalar (no dimensions), plus a zero-length span inside another. */
    const float scalar = 2.5f;
    b = make_st("{\"empty\": {\"dtype\": \"BF16\", \"shape\": [3, 0, 7], \"data_offsets\": [2, 2]},"
                " \"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}",
                &scalar, sizeof scalar);
    err_clear(&err);
    f = NULL;
    CHECK(st_parse(b.p, b.n, "zerosize", &f, &err) == QVL_OK);
    if (f) {
        CHECK(f->n_tensors == 2);
        const st_tensor *e = st_find(f, "empty");
        CHECK(e && e->ndim == 3 && e->shape[0] == 3 && e->shape[1] == 0 && e->shape[2] == 7 && e->nbytes == 0);
        CHECK(e && e->dtype == ST_BF16);
        const st_tensor *s = st_find(f, "s");
        CHECK(s && s->ndim == 0 && s->nbytes == 4 && s->dtype == ST_F32);
        if (s) {
            float v;
            memcpy(&v, s->data, sizeof v);
            CHECK(v == 2.5f);
            CHECK((const uint8_t *)s->data == b.p + b.n - 4);
        }
    } else {
        fprintf(stderr, "  zerosize: %s\n", err.message);
    }
    st_close(f);
    free(b.p);
}

static void test_valid_several(void) {
    /* Tensors listed out of name order and out of offset order, with a gap, all dtypes of interest, metadata. */
    uint8_t data[64];
    for (int i = 0; i < 64; i++) data[i] = (uint8_t)i;
    const char *json = "{\"zeta\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [40, 56]},"
                       " \"__metadata__\": {\"format\": \"pt\", \"note\": \"qvl test\", \"a\": \"\"},"
                       " \"alpha.weight\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]},"
                       " \"mid\": {\"dtype\": \"I64\", \"shape\": [1, 1, 2], \"data_offsets\": [16, 32]},"
                       " \"f8\": {\"dtype\": \"F8_E4M3\", \"shape\": [4], \"data_offsets\": [32, 36]},"
                       " \"b\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [56, 64], \"extra\": 1}}";
    buf b = make_st(json, data, sizeof data);
    char path[512];
    write_file("several.safetensors", &b, path, sizeof path);
    for (int loaded = 0; loaded < 2; loaded++) { /* st_open (pread), then st_load (in memory) */
        qvl_error err;
        err_clear(&err);
        st_file *f = NULL;
        CHECK((loaded ? st_load(path, b.n, &f, &err) : st_open(path, &f, &err)) == QVL_OK);
        if (!f) {
            fprintf(stderr, "  several: %s\n", err.message);
            break;
        }
        CHECK(err.status == QVL_OK);
        CHECK(loaded ? f->fd == -1 && f->buf != NULL : f->fd >= 0 && f->buf == NULL);
        CHECK(f->n_tensors == 5);
        const char *sorted[] = {"alpha.weight", "b", "f8", "mid", "zeta"};
        for (size_t i = 0; i < 5 && i < f->n_tensors; i++) CHECK(strcmp(f->tensors[i].name, sorted[i]) == 0);
        const uint64_t base = b.n - sizeof data; /* the data section's offset in the file */
        const struct {
            const char *name;
            st_dtype dtype;
            uint64_t begin, nbytes;
        } want[] = {{"alpha.weight", ST_BF16, 0, 12}, {"mid", ST_I64, 16, 16}, {"f8", ST_F8_E4M3, 32, 4},
                    {"zeta", ST_F32, 40, 16}, {"b", ST_U8, 56, 8}};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const st_tensor *t = st_find(f, want[i].name);
            CHECK(t && t->dtype == want[i].dtype && t->nbytes == want[i].nbytes);
            if (!t) continue;
            CHECK(t->offset == base + want[i].begin);
            CHECK(loaded ? (const uint8_t *)t->data == (const uint8_t *)f->buf + t->offset : t->data == NULL);
            uint8_t got[16] = {0};
            CHECK(st_read(f, t, 0, (size_t)t->nbytes, got, &err) == QVL_OK);
            CHECK(memcmp(got, data + want[i].begin, (size_t)t->nbytes) == 0);
            CHECK(st_read(f, t, 2, 2, got, &err) == QVL_OK && got[0] == data[want[i].begin + 2]);
            /* outside the tensor: refused, nothing read */
            CHECK(st_read(f, t, 0, (size_t)t->nbytes + 1, got, &err) == QVL_ERR_INVALID_ARG);
            CHECK(st_read(f, t, t->nbytes + 1, 0, got, &err) == QVL_ERR_INVALID_ARG);
        }
        const st_tensor *t = st_find(f, "alpha.weight");
        CHECK(t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
        t = st_find(f, "mid");
        CHECK(t && t->ndim == 3 && t->shape[2] == 2);
        CHECK(st_find(f, "alpha") == NULL);
        CHECK(st_find(f, "zz") == NULL);
        CHECK(st_find(f, "") == NULL);
        CHECK(st_find(f, "__metadata__") == NULL);
        CHECK(st_find(NULL, "b") == NULL);

        CHECK(f->n_meta == 3);
        CHECK(st_meta(f, "format") && strcmp(st_meta(f, "format"), "pt") == 0);
        CHECK(st_meta(f, "note") && strcmp(st_meta(f, "note"), "qvl test") == 0);
        CHECK(st_meta(f, "a") && st_meta(f, "a")[0] == '\0');
        CHECK(st_meta(f, "missing") == NULL);
        CHECK(st_meta(NULL, "format") == NULL);
        st_close(f);
    }
    /* st_load's byte limit: one byte short of the file is refused before anything is read */
    qvl_error err;
    st_file *f = (st_file *)1;
    CHECK(st_load(path, b.n - 1, &f, &err) == QVL_ERR_LIMIT && f == NULL);
    st_close(NULL);
    free(b.p);
}

/* A file that shrinks after st_open validated it (another process truncating or rewriting it): st_read must report
 * QVL_ERR_IO naming the file, the tensor and where the file now ends. A mapping would have raised SIGBUS here. */
static void test_shrunk_after_open(void) {
    uint8_t data[4096];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7);
    buf b = make_st("{\"w\": {\"dtype\": \"U8\", \"shape\": [4096], \"data_offsets\": [0, 4096]}}", data,
                    sizeof data);
    char path[512];
    write_file("shrinks.safetensors", &b, path, sizeof path);
    qvl_error err;
    st_file *f = NULL;
    CHECK(st_open(path, &f, &err) == QVL_OK);
    const st_tensor *t = f ? st_find(f, "w") : NULL;
    CHECK(t != NULL);
    if (t) {
        CHECK(truncate(path, (off_t)(b.n - 1000)) == 0);
        uint8_t got[4096];
        CHECK(st_read(f, t, 0, 1000, got, &err) == QVL_OK && memcmp(got, data, 1000) == 0); /* still there */
        err_clear(&err);
        CHECK(st_read(f, t, 0, sizeof got, got, &err) == QVL_ERR_IO);
        printf("  shrunk: %s\n", err.message);
        char ends[64];
        snprintf(ends, sizeof ends, "ends at byte %zu", b.n - 1000);
        CHECK(strstr(err.message, path) && strstr(err.message, "tensor 'w'") && strstr(err.message, ends) &&
              strstr(err.message, "truncated"));
        CHECK(truncate(path, 0) == 0);
        err_clear(&err);
        CHECK(st_read(f, t, 4000, 96, got, &err) == QVL_ERR_IO);
        printf("  emptied: %s\n", err.message);
        CHECK(strstr(err.message, "ends at byte 0,") != NULL);
    }
    st_close(f);
    free(b.p);
}

static void test_dtypes(void) {
    CHECK(st_dtype_size(ST_F32) == 4 && st_dtype_size(ST_BF16) == 2 && st_dtype_size(ST_F64) == 8);
    CHECK(st_dtype_size(ST_BOOL) == 1 && st_dtype_size(ST_F8_E5M2) == 1 && st_dtype_size(ST_U64) == 8);
    CHECK(st_dtype_size(ST_DTYPE_COUNT) == 0 && st_dtype_size((st_dtype)-1) == 0);
    CHECK(strcmp(st_dtype_name(ST_BF16), "BF16") == 0 && strcmp(st_dtype_name(ST_F8_E4M3), "F8_E4M3") == 0);
    CHECK(st_dtype_name(ST_DTYPE_COUNT) != NULL);
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
        /* Every dtype name round-trips through a header. */
        char json[160];
        size_t sz = st_dtype_size((st_dtype)d);
        snprintf(json, sizeof json, "{\"t\": {\"dtype\": \"%s\", \"shape\": [3], \"data_offsets\": [0, %zu]}}",
                 st_dtype_name((st_dtype)d), 3 * sz);
        uint8_t data[24] = {0};
        buf b = make_st(json, data, 3 * sz);
        qvl_error err;
        err_clear(&err);
        st_file *f = NULL;
        CHECK(st_parse(b.p, b.n, "dtype", &f, &err) == QVL_OK);
        CHECK(f && f->n_tensors == 1 && f->tensors[0].dtype == (st_dtype)d && f->tensors[0].nbytes == 3 * sz);
        st_close(f);
        free(b.p);
    }
}

/* A NUL inside a header string (raw, or the escape \u0000) would cut a tensor name short in C: refused, naming
 * the byte. An escaped backslash before "u0000" is an ordinary name and still parses. */
static void test_nul_in_header(void) {
    static const char raw[] = "{\"ab\0c\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
    size_t jl = sizeof raw - 1; /* the NUL at byte 4 of the header (byte 12 of the file) included */
    buf b = {malloc(8 + jl + 4), 8 + jl + 4};
    for (int i = 0; i < 8; i++) b.p[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(b.p + 8, raw, jl);
    memset(b.p + 8 + jl, 0, 4);
    qvl_error err;
    st_file *f = NULL;
    err_clear(&err);
    CHECK(st_parse(b.p, b.n, "rawnul", &f, &err) == QVL_ERR_FORMAT && f == NULL);
    CHECK(strstr(err.message, "rawnul") && strstr(err.message, "byte 12"));
    printf("  %-22s -> %s\n", "raw NUL", err.message);
    st_close(f);
    expect_fail_buf("rawnul", b, QVL_ERR_FORMAT);

    static const float one = 1.0f;
    buf e = make_st("{\"ab\\u0000c\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", &one, 4);
    f = NULL;
    err_clear(&err);
    CHECK(st_parse(e.p, e.n, "escnul", &f, &err) == QVL_ERR_FORMAT && f == NULL);
    CHECK(strstr(err.message, "escnul") && strstr(err.message, "byte 12"));
    st_close(f);
    expect_fail_buf("escnul", e, QVL_ERR_FORMAT);
    expect_bad("escnul_meta", "{\"__metadata__\": {\"k\": \"v\\u0000w\"}}", 0);

    buf ok = make_st("{\"ab\\\\u0000c\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", &one, 4);
    f = NULL;
    err_clear(&err);
    CHECK(st_parse(ok.p, ok.n, "backslash", &f, &err) == QVL_OK);
    CHECK(f && st_find(f, "ab\\u0000c") != NULL);
    st_close(f);
    free(ok.p);
}

int main(void) {
    if (!tu_tmpdir(g_dir, sizeof g_dir)) {
        fprintf(stderr, "test_safetensors: cannot create a temp dir\n");
        return 1;
    }
    test_dtypes();
    test_malformed();
    test_valid_empty();
    test_valid_several();
    test_nul_in_header();
    test_shrunk_after_open();

    /* Clean up the temp dir. */
    if (!tu_rmtree(g_dir)) fprintf(stderr, "test_safetensors: could not remove %s\n", g_dir);
    return tu_finish("test_safetensors");
}
