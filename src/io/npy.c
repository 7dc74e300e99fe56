/* npy.c — see npy.h. The header is a Python dict literal; this parser accepts exactly the three keys NumPy writes
 * ('descr', 'fortran_order', 'shape'), in any order, with either quote style and optional trailing commas.
 * Data bytes are taken as little-endian, the host order of every platform qvl targets. */
#include "io/npy.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/limits.h"
#include "cpu/ops.h"
#include "io/fileutil.h"

#define NPY_MAX_DIMS 32
/* The header dict's length: NumPy writes a few hundred bytes and np.load refuses more than 10000 by default; a
 * version 2.0/3.0 length field can claim 4 GiB, which is refused before anything is allocated for it. */
#define NPY_MAX_HEADER 65535u

typedef struct npy_header {
    int elem;        /* 2, 4 or 8: f16, f32, f64 */
    int fortran;     /* 1 if fortran_order True */
    int ndim;
    uint64_t shape[NPY_MAX_DIMS];
    size_t data_off; /* byte offset of the data */
} npy_header;

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int accept(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) { c->p++; return 1; }
    return 0;
}

/* A quoted string into out (NUL-terminated, truncated to n − 1); returns 0 on a malformed literal. */
static int parse_str(cursor *c, char *out, size_t n) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t k = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\') return 0; /* NumPy never escapes in these fields */
        if (k + 1 < n) out[k++] = *c->p;
        c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    out[k] = '\0';
    return 1;
}

static int parse_u64(cursor *c, uint64_t *v) {
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (__builtin_mul_overflow(x, 10u, &x) || __builtin_add_overflow(x, (uint64_t)(*c->p - '0'), &x)) return 0;
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 longs */
    *v = x;
    return 1;
}

static int parse_word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return 0;
    c->p += n;
    return 1;
}

static qvl_status parse_header(const unsigned char *buf, size_t len, const char *label, npy_header *h, qvl_error *err) {
    memset(h, 0, sizeof *h);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return err_fail(err, QVL_ERR_FORMAT, "%s: not a .npy file (bad magic)", label);
    int major = buf[6];
    size_t hlen, pre;
    if (major == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        pre = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return err_fail(err, QVL_ERR_FORMAT, "%s: truncated .npy header", label);
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        pre = 12;
    } else {
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: .npy format version %d.%d", label, major, buf[7]);
    }
    if (hlen > NPY_MAX_HEADER)
        return err_fail(err, QVL_ERR_FORMAT, "%s: .npy header of %zu bytes is over the %u allowed (NumPy writes a "
                        "few hundred)", label, hlen, NPY_MAX_HEADER);
    if (hlen > len - pre)
        return err_fail(err, QVL_ERR_FORMAT, "%s: .npy header of %zu bytes exceeds the file", label, hlen);
    h->data_off = pre + hlen;

    cursor c = {(const char *)buf + pre, (const char *)buf + pre + hlen};
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    if (!accept(&c, '{')) goto malformed;
    while (!accept(&c, '}')) {
        char key[32], val[32];
        if (!parse_str(&c, key, sizeof key) || !accept(&c, ':')) goto malformed;
        if (strcmp(key, "descr") == 0) {
            if (!parse_str(&c, val, sizeof val)) goto malformed;
            if (strcmp(val, "<f4") == 0) h->elem = 4;
            else if (strcmp(val, "<f8") == 0) h->elem = 8;
            else if (strcmp(val, "<f2") == 0) h->elem = 2;
            else return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: .npy dtype '%s' (want <f4, <f8 or <f2)", label, val);
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_word(&c, "False")) h->fortran = 0;
            else if (parse_word(&c, "True")) h->fortran = 1;
            else goto malformed;
            have_fortran = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!accept(&c, '(')) goto malformed;
            h->ndim = 0;
            while (!accept(&c, ')')) {
                if (h->ndim == NPY_MAX_DIMS)
                    return err_fail(err, QVL_ERR_LIMIT, "%s: .npy array has more than %d dimensions", label,
                                    NPY_MAX_DIMS);
                if (!parse_u64(&c, &h->shape[h->ndim])) goto malformed;
                h->ndim++;
                if (!accept(&c, ',')) {
                    if (!accept(&c, ')')) goto malformed;
                    break;
                }
            }
            have_shape = 1;
        } else {
            return err_fail(err, QVL_ERR_FORMAT, "%s: unexpected .npy header key '%s'", label, key);
        }
        if (!accept(&c, ',')) {
            if (!accept(&c, '}')) goto malformed;
            break;
        }
    }
    if (!have_descr || !have_fortran || !have_shape)
        return err_fail(err, QVL_ERR_FORMAT, "%s: .npy header lacks %s", label,
                        !have_descr ? "'descr'" : !have_fortran ? "'fortran_order'" : "'shape'");
    if (h->fortran) return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: fortran-order .npy arrays are not supported", label);
    if (h->ndim == 0) return err_fail(err, QVL_ERR_SHAPE, "%s: 0-dimensional .npy array", label);
    return QVL_OK;
malformed:
    return err_fail(err, QVL_ERR_FORMAT, "%s: malformed .npy header at byte %zu of %zu (want {'descr': ..., "
                    "'fortran_order': ..., 'shape': (...)})", label, (size_t)(c.p - (const char *)buf - pre), hlen);
}

/* Rows and columns of the header's shape, the rows within lim->max_call_patches (when `lim` is given: checked
 * first, so a claim over the limit is refused as such even from a truncated file) and the element count bounded
 * by the bytes present. */
static qvl_status header_dims(const npy_header *h, size_t avail, const char *label, const qvl_limits *lim,
                              size_t *rows, size_t *cols, qvl_error *err) {
    uint64_t r = h->ndim == 1 ? 1 : h->shape[0], c = 1;
    if (lim && r > lim->max_call_patches)
        return limit_fail(err, "max_call_patches", lim->max_call_patches,
                          "%s: the .npy header claims %llu pixel rows, more than the %llu allowed in one call", label,
                          (unsigned long long)r, (unsigned long long)lim->max_call_patches);
    for (int d = h->ndim == 1 ? 0 : 1; d < h->ndim; d++)
        if (__builtin_mul_overflow(c, h->shape[d], &c))
            return err_fail(err, QVL_ERR_LIMIT, "%s: .npy array size overflows", label);
    uint64_t count, bytes;
    if (__builtin_mul_overflow(r, c, &count) || __builtin_mul_overflow(count, (uint64_t)h->elem, &bytes) ||
        count > SIZE_MAX / sizeof(float))
        return err_fail(err, QVL_ERR_LIMIT, "%s: .npy array size overflows", label);
    if (bytes > avail)
        return err_fail(err, QVL_ERR_FORMAT, "%s: .npy data needs %llu bytes, file has %zu", label,
                        (unsigned long long)bytes, avail);
    if (bytes < avail) /* a wrong shape or a damaged file: refused rather than read as a prefix */
        return err_fail(err, QVL_ERR_FORMAT, "%s: .npy data is %llu bytes by its shape, but %zu bytes follow the "
                        "header (%zu trailing)", label, (unsigned long long)bytes, avail,
                        avail - (size_t)bytes);
    *rows = (size_t)r;
    *cols = (size_t)c;
    return QVL_OK;
}

static void convert(const unsigned char *src, int elem, float *dst, size_t n) {
    if (elem != 8) {
        op_to_f32(src, elem == 4 ? QVL_DTYPE_F32 : QVL_DTYPE_F16, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        double d;
        memcpy(&d, src + 8 * i, 8);
        dst[i] = (float)d;
    }
}

/* The size of a whole input against lim->max_input_bytes. */
static qvl_status input_bytes(uint64_t size, const char *label, const qvl_limits *lim, qvl_error *err) {
    if (lim && size > lim->max_input_bytes)
        return limit_fail(err, "max_input_bytes", lim->max_input_bytes, "%s: %llu bytes, more than the %llu allowed",
                          label, (unsigned long long)size, (unsigned long long)lim->max_input_bytes);
    return QVL_OK;
}

qvl_status npy_parse_f32(const void *buf, size_t len, const char *label, const qvl_limits *lim, float **data,
                         size_t *rows, size_t *cols, qvl_error *err) {
    if (!buf || !data || !rows || !cols)
        return err_fail(err, QVL_ERR_INVALID_ARG, "npy_parse_f32: %s is NULL",
                        !buf ? "buf" : !data ? "data" : !rows ? "rows" : "cols");
    *data = NULL;
    npy_header h;
    size_t r, c;
    TRY(input_bytes(len, label, lim, err));
    TRY(parse_header(buf, len, label, &h, err));
    TRY(header_dims(&h, len - h.data_off, label, lim, &r, &c, err));
    size_t n = r * c; /* checked in header_dims */
    float *out = malloc(n ? n * sizeof(float) : 1);
    if (!out) return err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %zu floats", label, n);
    convert((const unsigned char *)buf + h.data_off, h.elem, out, n);
    *data = out;
    *rows = r;
    *cols = c;
    return QVL_OK;
}

qvl_status npy_read_f32(const char *path, const qvl_limits *lim, float **data, size_t *rows, size_t *cols,
                        qvl_error *err) {
    if (!path || !data || !rows || !cols)
        return err_fail(err, QVL_ERR_INVALID_ARG, "npy_read_f32: %s is NULL",
                        !path ? "path" : !data ? "data" : !rows ? "rows" : "cols");
    *data = NULL;
    FILE *f;
    size_t size;
    TRY(fu_open_regular(path, &f, &size, err));
    if (input_bytes(size, path, lim, err) != QVL_OK) {
        fclose(f);
        return QVL_ERR_LIMIT;
    }
    /* Read the header first (at most 12 + NPY_MAX_HEADER bytes: a longer claim is refused by parse_header from
     * the first 12 bytes alone, before anything is allocated for it), then the data straight into the
     * float array when it is already float32, so a large file is held once. */
    unsigned char pre[12];
    size_t got = fread(pre, 1, size < 12 ? size : 12, f);
    if (ferror(f)) { /* not a short file: the format checks below would say it is */
        int e = errno;
        fclose(f);
        return err_fail(err, QVL_ERR_IO, "%s: read error: %s", path, strerror(e));
    }
    size_t hdr_total = 10;
    if (got >= 10 && memcmp(pre, "\x93NUMPY", 6) == 0 && pre[6] != 1 && got >= 12)
        hdr_total = 12 + ((size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24);
    else if (got >= 10)
        hdr_total = 10 + ((size_t)pre[8] | (size_t)pre[9] << 8);
    if (hdr_total > size) hdr_total = size;
    if (hdr_total > 12 + NPY_MAX_HEADER) hdr_total = got; /* parse_header refuses the claim in these bytes */
    unsigned char *hbuf = malloc(hdr_total ? hdr_total : 1);
    if (!hbuf) {
        fclose(f);
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(hbuf, pre, got < hdr_total ? got : hdr_total);
    qvl_status s = QVL_OK;
    if (hdr_total > got && fread(hbuf + got, 1, hdr_total - got, f) != hdr_total - got) {
        s = err_fail(err, QVL_ERR_IO, "%s: read failed", path);
        goto done;
    }
    npy_header h;
    size_t r, c;
    if ((s = parse_header(hbuf, hdr_total, path, &h, err)) != QVL_OK) goto done;
    if ((s = header_dims(&h, size - h.data_off, path, lim, &r, &c, err)) != QVL_OK) goto done;
    size_t n = r * c;
    float *out = malloc(n ? n * sizeof(float) : 1);
    if (!out) {
        s = err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %zu floats", path, n);
        goto done;
    }
    if (h.elem == 4) {
        if (fread(out, 4, n, f) != n) {
            free(out);
            s = err_fail(err, QVL_ERR_IO, "%s: short read", path);
            goto done;
        }
    } else {
        /* Convert in chunks to keep the staging buffer small. */
        enum { CHUNK = 1 << 16 };
        unsigned char *stage = malloc((size_t)CHUNK * (size_t)h.elem);
        if (!stage) {
            free(out);
            s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        for (size_t i = 0; i < n; i += CHUNK) {
            size_t k = n - i < CHUNK ? n - i : CHUNK;
            if (fread(stage, (size_t)h.elem, k, f) != k) {
                free(stage);
                free(out);
                s = err_fail(err, QVL_ERR_IO, "%s: short read", path);
                goto done;
            }
            convert(stage, h.elem, out + i, k);
        }
        free(stage);
    }
    *data = out;
    *rows = r;
    *cols = c;
done:
    free(hbuf);
    fclose(f);
    return s;
}

qvl_status npy_write_f32(const char *path, const float *data, size_t rows, size_t cols, qvl_error *err) {
    if (!path || (!data && rows && cols))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_write_npy: %s is NULL",
                        !path ? "path" : "data (with rows x cols > 0)");
    size_t n;
    if (size_mul_overflow(rows, cols, &n) || n > SIZE_MAX / sizeof(float))
        return err_fail(err, QVL_ERR_LIMIT, "%s: array of %zu x %zu floats overflows", path, rows, cols);
    char dict[128];
    int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", rows, cols);
    if (dl < 0 || (size_t)dl >= sizeof dict) return err_fail(err, QVL_ERR_INTERNAL, "%s: npy header overflow", path);
    /* 10 preamble bytes + dict + spaces + '\n', total a multiple of 64. */
    size_t total = (10 + (size_t)dl + 1 + 63) / 64 * 64;
    unsigned char hdr[256];
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    size_t hlen = total - 10;
    hdr[8] = (unsigned char)(hlen & 0xff);
    hdr[9] = (unsigned char)(hlen >> 8);
    memcpy(hdr + 10, dict, (size_t)dl);
    memset(hdr + 10 + dl, ' ', total - 10 - (size_t)dl - 1);
    hdr[total - 1] = '\n';

    fu_tmpfile t;
    TRY(fu_tmp_open(&t, path, err));
    fu_tmp_write(&t, hdr, total);
    fu_tmp_write(&t, data, n * sizeof(float));
    return fu_tmp_finish(&t, QVL_OK, 0, err);
}
