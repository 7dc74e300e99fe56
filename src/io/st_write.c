/* st_write.c — the safetensors writer: a deterministic header (tensors in the caller's order, offsets ascending,
 * "__metadata__" first, padded with spaces to a multiple of 8 bytes), then the data, written to "<path>.tmp" and
 * renamed into place so a reader never sees a half-written file. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "io/fileutil.h"
#include "io/safetensors.h"

/* A growable byte buffer for the header. `failed` is sticky so callers check once at the end. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int failed;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (n > SIZE_MAX - b->len - 1) { b->failed = 1; return; }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) { b->failed = 1; return; }
            cap *= 2;
        }
        char *q = realloc(b->p, cap);
        if (!q) { b->failed = 1; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, uint64_t v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control characters escaped; other bytes copied (UTF-8 passes). */
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            sb_put(b, e, 2);
        } else if (*c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *c);
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* Validate one tensor descriptor and compute its byte size (overflow-checked). */
static qvl_status wtensor_nbytes(const char *path, size_t i, const st_wtensor *t, uint64_t *nbytes, qvl_error *err) {
    if (!t->name || !t->name[0])
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: tensor %zu has %s name", path, i,
                        t->name ? "an empty" : "a NULL");
    if (strcmp(t->name, "__metadata__") == 0)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: tensor %zu: the name \"__metadata__\" is reserved", path, i);
    size_t es = st_dtype_size(t->dtype);
    if (es == 0)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: tensor %s: invalid dtype %d", path, t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: tensor %s: %d dimensions (want 0..%d)", path, t->name,
                        t->ndim, ST_MAX_DIMS);
    uint64_t n = es;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: tensor %s: dimension %d is %" PRId64 " (want >= 0)", path,
                            t->name, d, t->shape[d]);
        if (__builtin_mul_overflow(n, (uint64_t)t->shape[d], &n))
            return err_fail(err, QVL_ERR_LIMIT, "%s: tensor %s: size overflows", path, t->name);
    }
    if (n > SIZE_MAX) return err_fail(err, QVL_ERR_LIMIT, "%s: tensor %s: size overflows", path, t->name);
    *nbytes = n;
    return QVL_OK;
}

qvl_status st_build_header(const char *path, const st_wtensor *t, size_t n, const char *const *meta_kv,
                           size_t n_meta, char **hdr, size_t *hdr_len, qvl_error *err) {
    for (size_t i = 0; i < n_meta; i++)
        if (!meta_kv || !meta_kv[2 * i] || !meta_kv[2 * i + 1])
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: metadata pair %zu has a NULL %s", path, i,
                            !meta_kv ? "list (meta_kv)" : !meta_kv[2 * i] ? "key" : "value");
    /* Duplicate names would make the header ambiguous; n is a few hundred at most in practice. */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (t[i].name && t[j].name && strcmp(t[i].name, t[j].name) == 0)
                return err_fail(err, QVL_ERR_INVALID_ARG, "%s: tensors %zu and %zu are both named %s", path, i, j,
                                t[i].name);

    sbuf b = {0};
    int first = 1;
    sb_put(&b, "{", 1);
    if (n_meta) {
        sb_str(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < n_meta; i++) {
            if (i) sb_put(&b, ",", 1);
            sb_json_str(&b, meta_kv[2 * i]);
            sb_put(&b, ":", 1);
            sb_json_str(&b, meta_kv[2 * i + 1]);
        }
        sb_put(&b, "}", 1);
        first = 0;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t nb;
        qvl_status s = wtensor_nbytes(path, i, &t[i], &nb, err);
        if (s != QVL_OK) { free(b.p); return s; }
        if (!first) sb_put(&b, ",", 1);
        first = 0;
        sb_json_str(&b, t[i].name);
        sb_str(&b, ":{\"dtype\":");
        sb_json_str(&b, st_dtype_name(t[i].dtype));
        sb_str(&b, ",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) {
            if (d) sb_put(&b, ",", 1);
            sb_u64(&b, (uint64_t)t[i].shape[d]);
        }
        sb_str(&b, "],\"data_offsets\":[");
        sb_u64(&b, off);
        sb_put(&b, ",", 1);
        if (__builtin_add_overflow(off, nb, &off)) {
            free(b.p);
            return err_fail(err, QVL_ERR_LIMIT, "%s: total size overflows", path);
        }
        sb_u64(&b, off);
        sb_str(&b, "]}");
    }
    sb_put(&b, "}", 1);
    while (!b.failed && b.len % 8 != 0) sb_put(&b, " ", 1);
    if (b.failed) {
        free(b.p);
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory building the header", path);
    }
    if (b.len > ST_MAX_HEADER) {
        free(b.p);
        return err_fail(err, QVL_ERR_LIMIT, "%s: header of %zu bytes exceeds %u", path, b.len, ST_MAX_HEADER);
    }
    *hdr = b.p;
    *hdr_len = b.len;
    return QVL_OK;
}

/* The shared body of st_write and st_write_stream: with fill == NULL each tensor's bytes come from t[i].data. */
static qvl_status write_file(const char *path, const st_wtensor *t, size_t n, const char *const *meta_kv,
                             size_t n_meta, st_fill_fn fill, void *user, qvl_error *err) {
    if (!path || (n && !t))
        return err_fail(err, QVL_ERR_INVALID_ARG, "safetensors writer: %s is NULL", !path ? "path" : "t (with n > 0)");
    char *hdr = NULL;
    size_t hdr_len = 0;
    TRY(st_build_header(path, t, n, meta_kv, n_meta, &hdr, &hdr_len, err));

    fu_tmpfile tf;
    qvl_status s = fu_tmp_open(&tf, path, err);
    if (s != QVL_OK) {
        free(hdr);
        return s;
    }
    void *scratch = NULL;
    size_t scratch_cap = 0;
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)hdr_len >> (8 * k));
    fu_tmp_write(&tf, len8, 8);
    fu_tmp_write(&tf, hdr, hdr_len);
    for (size_t i = 0; i < n && s == QVL_OK && !tf.bad; i++) {
        uint64_t nb;
        if ((s = wtensor_nbytes(path, i, &t[i], &nb, err)) != QVL_OK) break;
        const void *src = t[i].data;
        if (fill) {
            if (nb > scratch_cap) {
                void *q = realloc(scratch, (size_t)nb);
                if (!q) {
                    s = err_fail(err, QVL_ERR_NOMEM, "%s: tensor %s: cannot allocate %" PRIu64 " bytes", path,
                                 t[i].name, nb);
                    break;
                }
                scratch = q;
                scratch_cap = (size_t)nb;
            }
            if ((s = fill(user, i, scratch, (size_t)nb, err)) != QVL_OK) break;
            src = scratch;
        } else if (nb && !src) {
            s = err_fail(err, QVL_ERR_INVALID_ARG, "%s: tensor %s: data is NULL", path, t[i].name);
            break;
        }
        fu_tmp_write(&tf, src, (size_t)nb);
    }
    s = fu_tmp_finish(&tf, s, 1, err); /* fsync: checkpoints are large and read back by other processes */
    free(scratch);
    free(hdr);
    return s;
}

qvl_status st_write(const char *path, const st_wtensor *t, size_t n, const char *const *meta_kv, size_t n_meta,
                    qvl_error *err) {
    return write_file(path, t, n, meta_kv, n_meta, NULL, NULL, err);
}

qvl_status st_write_stream(const char *path, const st_wtensor *t, size_t n, const char *const *meta_kv,
                           size_t n_meta, st_fill_fn fill, void *user, qvl_error *err) {
    if (!fill)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: st_write_stream: fill is NULL", path ? path : "(no path)");
    return write_file(path, t, n, meta_kv, n_meta, fill, user, err);
}
