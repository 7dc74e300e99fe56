/* files.c — the public file helpers of qvl.h ("Files"): pixel rows in from .npy or safetensors (under the
 * caller's qvl_limits), float32 outputs out to .npy or safetensors. Thin wrappers over io/npy.c and
 * io/safetensors.h. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/limits.h"
#include "io/files.h"
#include "io/fileutil.h"
#include "cpu/ops.h"
#include "io/npy.h"
#include "io/safetensors.h"

void qvl_free(void *p) { free(p); }

/* Widen a stored tensor's elements to float32. Only the float dtypes that pixel values plausibly come in. */
static qvl_status tensor_to_f32(const st_tensor *t, float *dst, size_t n, const char *path, qvl_error *err) {
    const unsigned char *src = t->data;
    switch (t->dtype) {
    case ST_F32: memcpy(dst, src, n * sizeof(float)); return QVL_OK;
    case ST_F16: op_to_f32(src, QVL_DTYPE_F16, dst, n); return QVL_OK;
    case ST_BF16: op_to_f32(src, QVL_DTYPE_BF16, dst, n); return QVL_OK;
    case ST_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        return QVL_OK;
    default:
        return err_fail(err, QVL_ERR_SHAPE, "%s: %s has dtype %s (want F32, F16, BF16 or F64)", path, t->name,
                        st_dtype_name(t->dtype));
    }
}

/* grid_thw, when present, into a malloc'd array (*grids, *n_grids; untouched when absent), each value in
 * 1..INT32_MAX, each grid's t·h·w within lim->max_item_patches and their sum within lim->max_call_patches. The
 * array is at most a twelfth of the file's bytes, which max_input_bytes bounds. */
static qvl_status read_grids(const st_file *f, const char *path, const qvl_limits *lim, qvl_grid **grids,
                             size_t *n_grids, qvl_error *err) {
    const st_tensor *g = st_find(f, "grid_thw");
    if (!g) return QVL_OK;
    if (g->dtype != ST_I64 && g->dtype != ST_I32)
        return err_fail(err, QVL_ERR_SHAPE, "%s: grid_thw has dtype %s (want I64 or I32)", path,
                        st_dtype_name(g->dtype));
    size_t n;
    if (g->ndim == 2 && g->shape[1] == 3) n = (size_t)g->shape[0];
    else if (g->ndim == 1 && g->shape[0] == 3) n = 1;
    else
        return err_fail(err, QVL_ERR_SHAPE, "%s: grid_thw has %d dimensions [%lld, %lld, ...] (want [n, 3])", path,
                        g->ndim, g->ndim > 0 ? (long long)g->shape[0] : 0LL,
                        g->ndim > 1 ? (long long)g->shape[1] : 0LL);
    if (n == 0) return QVL_OK;
    qvl_grid *out = calloc(n, sizeof *out);
    if (!out) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    const unsigned char *p = g->data;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t v[3];
        for (int k = 0; k < 3; k++) {
            if (g->dtype == ST_I64) {
                memcpy(&v[k], p + 8 * (3 * i + (size_t)k), 8);
            } else {
                int32_t x;
                memcpy(&x, p + 4 * (3 * i + (size_t)k), 4);
                v[k] = x;
            }
            if (v[k] < 1 || v[k] > INT32_MAX) {
                free(out);
                return err_fail(err, QVL_ERR_SHAPE, "%s: grid_thw[%zu][%d] = %lld is out of range (want 1..%d)", path,
                                i, k, (long long)v[k], INT32_MAX);
            }
        }
        uint64_t rows;
        if (__builtin_mul_overflow((uint64_t)v[0], (uint64_t)v[1], &rows) ||
            __builtin_mul_overflow(rows, (uint64_t)v[2], &rows))
            rows = UINT64_MAX;
        if (rows > lim->max_item_patches) {
            free(out);
            return limit_fail(err, "max_item_patches", lim->max_item_patches,
                              "%s: grid_thw[%zu] (t=%lld, h=%lld, w=%lld) is %llu patch rows, more than the %llu "
                              "allowed per item", path, i, (long long)v[0], (long long)v[1], (long long)v[2],
                              (unsigned long long)rows, (unsigned long long)lim->max_item_patches);
        }
        total += rows; /* each ≤ max_item_patches: the sum is checked as it grows */
        if (total > lim->max_call_patches) {
            free(out);
            return limit_fail(err, "max_call_patches", lim->max_call_patches,
                              "%s: grid_thw[0..%zu] are %llu patch rows, more than the %llu allowed in one call", path,
                              i, (unsigned long long)total, (unsigned long long)lim->max_call_patches);
        }
        out[i] = (qvl_grid){(int32_t)v[0], (int32_t)v[1], (int32_t)v[2]};
    }
    *grids = out;
    *n_grids = n;
    return QVL_OK;
}

/* The rows a tensor (`what`: pixel_values [rows, row_len], or the item{i}.pixel_values together) holds against
 * max_call_patches. */
static qvl_status rows_claim(const char *path, const char *what, const qvl_limits *lim, uint64_t rows,
                             qvl_error *err) {
    if (rows > lim->max_call_patches)
        return limit_fail(err, "max_call_patches", lim->max_call_patches,
                          "%s: %s: %llu rows, more than the %llu allowed in one call", path, what,
                          (unsigned long long)rows, (unsigned long long)lim->max_call_patches);
    return QVL_OK;
}

typedef struct claim_ctx {
    const char *path;
    const qvl_limits *lim;
} claim_ctx;

/* The index i of a name "item{i}.pixel_values" (i in decimal, no sign, no leading zero), or -1. */
static long item_index(const char *name) {
    if (strncmp(name, "item", 4) != 0) return -1;
    const char *d = name + 4;
    long i = 0;
    size_t k = 0;
    for (; d[k] >= '0' && d[k] <= '9'; k++) {
        if (k == 9 || (k == 1 && d[0] == '0')) return -1; /* at most 9 digits; "item01" is not an index */
        i = 10 * i + (d[k] - '0');
    }
    return k && strcmp(d + k, ".pixel_values") == 0 ? i : -1;
}

/* The st_shape_check of rows files: pixel_values' rows (or one input's, item{i}.pixel_values) as the header declares
 * them, before the reader checks the tensors' spans against the file, so that a truncated file claiming too many
 * rows fails with the limit (as a .npy does) rather than as a short file. (An item tensor is held to it even beside
 * a pixel_values that makes it unread: the bound is on what an untrusted header may claim.) */
static qvl_status check_claim(void *user, const char *name, int ndim, const int64_t *shape, qvl_error *err) {
    const claim_ctx *c = user;
    if (ndim != 2 || (strcmp(name, "pixel_values") != 0 && item_index(name) < 0)) return QVL_OK;
    return rows_claim(c->path, name, c->lim, (uint64_t)shape[0], err); /* st_rows refuses another shape */
}

/* An item{i}.pixel_values tensor and its i. */
typedef struct item_rows {
    long i;
    const st_tensor *t;
} item_rows;

static int by_item_index(const void *a, const void *b) {
    const long x = ((const item_rows *)a)->i, y = ((const item_rows *)b)->i;
    return (x > y) - (x < y);
}

/* The rows of a file `qvl encode --preprocess-only` wrote: item{i}.pixel_values [rows_i, row_len] for each input
 * that succeeded (a failed one has none), in the order of i, and grid_thw with one row per such input. *items: a
 * malloc'd array of those tensors (NULL and 0 when the file has none), their rows summed in *rows, checked against
 * max_call_patches; each is 2-D, all of one row length (*row_len). */
static qvl_status item_tensors(const st_file *f, const char *path, const qvl_limits *lim, item_rows **items,
                               size_t *n_items, size_t *rows, size_t *row_len, qvl_error *err) {
    *items = NULL, *n_items = 0, *rows = 0, *row_len = 0;
    if (!f->n_tensors) return QVL_OK;
    item_rows *t = malloc(f->n_tensors * sizeof *t);
    if (!t) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    size_t n = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const long k = item_index(f->tensors[i].name);
        if (k >= 0) t[n++] = (item_rows){k, &f->tensors[i]};
    }
    if (!n) {
        free(t);
        return QVL_OK;
    }
    qsort(t, n, sizeof *t, by_item_index);
    uint64_t sum = 0;
    qvl_status s = QVL_OK;
    for (size_t i = 0; i < n && s == QVL_OK; i++) {
        const st_tensor *x = t[i].t, *x0 = t[0].t;
        if (x->ndim != 2)
            s = err_fail(err, QVL_ERR_SHAPE, "%s: %s has %d dimensions (want 2)", path, x->name, x->ndim);
        else if (i && x->shape[1] != x0->shape[1])
            s = err_fail(err, QVL_ERR_SHAPE, "%s: %s has rows of %lld values, %s of %lld", path, x->name,
                         (long long)x->shape[1], x0->name, (long long)x0->shape[1]);
        else if ((uint64_t)x->shape[0] > UINT64_MAX - sum || (sum += (uint64_t)x->shape[0]) > SIZE_MAX)
            s = err_fail(err, QVL_ERR_LIMIT, "%s: the item{i}.pixel_values rows' count overflows", path);
        else if (sum > lim->max_call_patches) /* each is at most that (check_claim), not their sum */
            s = rows_claim(path, "the item{i}.pixel_values together", lim, sum, err);
    }
    if (s != QVL_OK) {
        free(t);
        return s;
    }
    *items = t, *n_items = n, *rows = (size_t)sum, *row_len = (size_t)t[0].t->shape[1];
    return QVL_OK;
}

/* pixel_values and grid_thw of a safetensors file in memory validated with check_claim (which held its row count
 * to max_call_patches), every other size checked against *lim before the rows are allocated. Outputs set only on
 * success. */
static qvl_status st_rows(const st_file *f, const char *path, const qvl_limits *lim, float **rows, size_t *n_rows,
                          size_t *row_len, qvl_grid **grids, size_t *n_grids, qvl_error *err) {
    const st_tensor *t = st_find(f, "pixel_values");
    item_rows *items = NULL; /* without pixel_values: --preprocess-only's item{i}.pixel_values, in order */
    size_t n_items = 0, r, c, n;
    if (t) {
        if (t->ndim != 2)
            return err_fail(err, QVL_ERR_SHAPE, "%s: pixel_values has %d dimensions (want 2)", path, t->ndim);
        r = (size_t)t->shape[0], c = (size_t)t->shape[1];
    } else {
        TRY(item_tensors(f, path, lim, &items, &n_items, &r, &c, err));
        if (!n_items)
            return err_fail(err, QVL_ERR_SHAPE, "%s: no tensor \"pixel_values\" (nor item{i}.pixel_values, as qvl "
                            "encode --preprocess-only writes)", path);
    }
    qvl_grid *g = NULL;
    size_t ng = 0;
    float *out = NULL;
    qvl_status s = QVL_OK;
    if (size_mul_overflow(r, c, &n) || n > SIZE_MAX / sizeof(float))
        s = err_fail(err, QVL_ERR_LIMIT, "%s: pixel_values [%zu, %zu] size overflows", path, r, c);
    if (s == QVL_OK && grids) s = read_grids(f, path, lim, &g, &ng, err);
    if (s == QVL_OK && !(out = malloc(n ? n * sizeof(float) : 1)))
        s = err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %zu floats", path, n);
    if (s == QVL_OK && t) s = tensor_to_f32(t, out, n, path, err);
    for (size_t i = 0, at = 0; s == QVL_OK && i < n_items; i++) { /* rows of each, one after the other */
        const size_t k = (size_t)items[i].t->shape[0] * c;
        s = tensor_to_f32(items[i].t, out + at, k, path, err);
        at += k;
    }
    free(items);
    if (s != QVL_OK) {
        free(out);
        free(g);
        return s;
    }
    *rows = out;
    *n_rows = r;
    *row_len = c;
    if (grids) {
        *grids = g;
        *n_grids = ng;
    }
    return QVL_OK;
}

/* The arguments and outputs every entry point checks and clears the same way. */
static qvl_status rows_args(const char *fn, const char *src_name, const void *src, float **rows, size_t *n_rows,
                            size_t *row_len, qvl_grid **grids, size_t *n_grids, qvl_error *err) {
    if (!src || !rows || !n_rows || !row_len || (grids && !n_grids))
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                        !src ? src_name : !rows ? "rows" : !n_rows ? "n_rows" : !row_len ? "row_len" : "n_grids");
    *rows = NULL;
    *n_rows = *row_len = 0;
    if (grids) {
        *grids = NULL;
        *n_grids = 0;
    }
    return QVL_OK;
}

/* Chosen by content, never by name: a .npy starts with \x93NUMPY, a safetensors file with its 8-byte header
 * length and then the header's '{' (the format requires it). *npy: 1 for .npy, 0 for safetensors. */
static qvl_status sniff_rows(const unsigned char *magic, size_t got, const char *path, int *npy, qvl_error *err) {
    *npy = got >= 6 && memcmp(magic, "\x93NUMPY", 6) == 0;
    if (!*npy && (got < 9 || magic[8] != '{'))
        return err_fail(err, QVL_ERR_FORMAT, "%s: neither a .npy (magic \\x93NUMPY) nor a safetensors file (8-byte "
                        "header length, then '{'): %s", path, got < 9 ? "the file is too short" :
                        "its first bytes match neither");
    return QVL_OK;
}

qvl_status rows_parse(const void *buf, size_t len, const char *label, const qvl_limits *limits, float **rows,
                      size_t *n_rows, size_t *row_len, qvl_grid **grids, size_t *n_grids, qvl_error *err) {
    err_clear(err);
    TRY(rows_args("rows_parse", "buf", buf, rows, n_rows, row_len, grids, n_grids, err));
    qvl_limits lim;
    TRY(limits_take(&lim, limits, "rows_parse limits", err));
    if (len > lim.max_input_bytes)
        return limit_fail(err, "max_input_bytes", lim.max_input_bytes, "%s: %zu bytes, more than the %llu allowed",
                          label, len, (unsigned long long)lim.max_input_bytes);
    int npy;
    TRY(sniff_rows(buf, len, label, &npy, err));
    if (npy) return npy_parse_f32(buf, len, label, &lim, rows, n_rows, row_len, err);
    st_file *f = NULL;
    claim_ctx cc = {label, &lim};
    TRY(st_parse_checked(buf, len, label, check_claim, &cc, &f, err));
    qvl_status s = st_rows(f, label, &lim, rows, n_rows, row_len, grids, n_grids, err);
    st_close(f);
    return s;
}

static qvl_status read_rows(const char *fn, const char *path, const qvl_limits *limits, float **rows, size_t *n_rows,
                            size_t *row_len, qvl_grid **grids, size_t *n_grids, qvl_error *err) {
    err_clear(err);
    TRY(rows_args(fn, "path", path, rows, n_rows, row_len, grids, n_grids, err));
    qvl_limits lim;
    TRY(limits_take(&lim, limits, fn, err));
    FILE *f;
    size_t fsize;
    TRY(fu_open_regular(path, &f, &fsize, err));
    if ((uint64_t)fsize > lim.max_input_bytes) { /* before a byte is read */
        fclose(f);
        return limit_fail(err, "max_input_bytes", lim.max_input_bytes, "%s: %zu bytes, more than the %llu allowed",
                          path, fsize, (unsigned long long)lim.max_input_bytes);
    }
    unsigned char magic[9] = {0};
    size_t got = fread(magic, 1, sizeof magic, f);
    int bad = ferror(f), e = errno;
    fclose(f);
    /* a read error is no evidence about the format */
    if (bad) return err_fail(err, QVL_ERR_IO, "%s: read error: %s", path, strerror(e));
    int npy;
    TRY(sniff_rows(magic, got, path, &npy, err));
    if (npy) return npy_read_f32(path, &lim, rows, n_rows, row_len, err);
    st_file *sf = NULL;
    /* read whole (at most max_input_bytes, checked again as it is read): the rows are copied out of it */
    const size_t cap = lim.max_input_bytes < SIZE_MAX ? (size_t)lim.max_input_bytes : SIZE_MAX;
    claim_ctx cc = {path, &lim};
    TRY(st_load_checked(path, cap, check_claim, &cc, &sf, err));
    qvl_status s = st_rows(sf, path, &lim, rows, n_rows, row_len, grids, n_grids, err);
    st_close(sf);
    return s;
}

qvl_status qvl_read_rows_limited(const char *path, const qvl_limits *limits, float **rows, size_t *n_rows,
                                 size_t *row_len, qvl_grid **grids, size_t *n_grids, qvl_error *err) {
    return read_rows("qvl_read_rows_limited", path, limits, rows, n_rows, row_len, grids, n_grids, err);
}

qvl_status qvl_read_rows(const char *path, float **rows, size_t *n_rows, size_t *row_len, qvl_grid **grids,
                         size_t *n_grids, qvl_error *err) {
    return read_rows("qvl_read_rows", path, NULL, rows, n_rows, row_len, grids, n_grids, err);
}

qvl_status qvl_write_npy(const char *path, const float *data, size_t rows, size_t cols, qvl_error *err) {
    err_clear(err);
    return npy_write_f32(path, data, rows, cols, err);
}

qvl_status qvl_write_safetensors(const char *path, const qvl_out_tensor *t, size_t n, const qvl_grid *grids,
                                 size_t n_grids, const char *const *meta_kv, size_t n_meta, qvl_error *err) {
    err_clear(err);
    if (!path || (n && !t) || (n_grids && !grids))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_write_safetensors: %s is NULL",
                        !path ? "path" : (n && !t) ? "t (with n > 0)" : "grids (with n_grids > 0)");
    size_t total;
    if (size_add_overflow(n, n_grids ? 1 : 0, &total) || total > SIZE_MAX / sizeof(st_wtensor))
        return err_fail(err, QVL_ERR_LIMIT, "%s: qvl_write_safetensors: %zu tensors is too many", path, n);
    st_wtensor *w = calloc(total ? total : 1, sizeof *w);
    int64_t *g = n_grids ? calloc(n_grids, 3 * sizeof(int64_t)) : NULL;
    if (!w || (n_grids && !g)) {
        free(w);
        free(g);
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < n; i++) {
        if (t[i].rows > INT64_MAX || t[i].cols > INT64_MAX) {
            free(w);
            free(g);
            return err_fail(err, QVL_ERR_LIMIT, "%s: tensor %zu (%s) of %zu x %zu is too large", path, i,
                            t[i].name ? t[i].name : "no name", t[i].rows, t[i].cols);
        }
        w[i] = (st_wtensor){.name = t[i].name, .dtype = ST_F32, .ndim = 2, .data = t[i].data};
        w[i].shape[0] = (int64_t)t[i].rows;
        w[i].shape[1] = (int64_t)t[i].cols;
    }
    if (n_grids) {
        for (size_t i = 0; i < n_grids; i++) {
            g[3 * i] = grids[i].t;
            g[3 * i + 1] = grids[i].h;
            g[3 * i + 2] = grids[i].w;
        }
        w[n] = (st_wtensor){.name = "grid_thw", .dtype = ST_I64, .ndim = 2, .data = g};
        w[n].shape[0] = (int64_t)n_grids;
        w[n].shape[1] = 3;
    }
    qvl_status s = st_write(path, w, total, meta_kv, n_meta, err);
    free(w);
    free(g);
    return s;
}
