/* safetensors.c — the reader half of safetensors.h: validate a file's header completely, and read the tensors'
 * bytes with pread (st_open) or from memory (st_parse, st_load). (The writer, st_write, lives in st_write.c.)
 *
 * Files are read, never mapped: a mapped file that shrinks or fails to read (truncated by another process, an NFS
 * or FUSE I/O error) raises SIGBUS in whatever touches the page, which no status can report; pread returns the
 * error or the short count, reported as QVL_ERR_IO naming the file and the tensor.
 *
 * Everything read from the file is untrusted: every size is bounded and overflow-checked before it is used, every
 * failure returns a status with a message naming the file, the tensor and the numbers involved, and every failure
 * path frees what it built. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "io/fileutil.h"
#include "io/jsonutil.h"

/* Largest integer a JSON number (a double in cJSON) holds exactly: 2^53. */
#define ST_MAX_JSON_INT 9007199254740992.0

/* Tensor names are printed with this many bytes at most, so the rest of a message survives a long name. */
#define ST_NAME_FMT "%.200s"

static const struct {
    const char *name;
    size_t size;
} st_dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2},         [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8},   [ST_I32] = {"I32", 4},   [ST_I16] = {"I16", 2},           [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},     [ST_BOOL] = {"BOOL", 1}, [ST_U16] = {"U16", 2},           [ST_U32] = {"U32", 4},
    [ST_U64] = {"U64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

size_t st_dtype_size(st_dtype d) { return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].size : 0; }

const char *st_dtype_name(st_dtype d) { return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].name : "?"; }

static int st_dtype_parse(const char *s, st_dtype *out) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *out = (st_dtype)i;
            return 1;
        }
    }
    return 0;
}

void st_close(st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    if (f->fd >= 0) close(f->fd);
    free(f->buf);
    free(f->path);
    free(f);
}

static char *st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* A JSON number that is an integer in [0, 2^53): cJSON keeps numbers as doubles, so "1.5", "-1", "1e300" and
 * non-numbers are all rejected here rather than silently truncated. */
static int st_json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0.0 && v < ST_MAX_JSON_INT)) return 0; /* also rejects NaN */
    uint64_t u = (uint64_t)v;
    if ((double)u != v) return 0;
    *out = u;
    return 1;
}

/* Parse one tensor entry `e` (already known not to be __metadata__) into `t`; its name is copied last so that a
 * failure leaves nothing to free. `begin`/`end` receive the span relative to the data section. */
static qvl_status st_parse_entry(const cJSON *e, const char *label, const uint8_t *data, uint64_t data_start,
                                 size_t data_size, st_tensor *t, uint64_t *begin, uint64_t *end, qvl_error *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return err_fail(err, QVL_ERR_FORMAT, "%s: tensor '" ST_NAME_FMT "' is not a JSON object", label, name);

    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!jd || !js || !jo)
        return err_fail(err, QVL_ERR_FORMAT, "%s: tensor '" ST_NAME_FMT "' lacks \"%s\"", label, name,
                        !jd ? "dtype" : !js ? "shape" : "data_offsets");

    if (!cJSON_IsString(jd) || !jd->valuestring)
        return err_fail(err, QVL_ERR_FORMAT, "%s: tensor '" ST_NAME_FMT "' dtype is not a string", label, name);
    if (!st_dtype_parse(jd->valuestring, &t->dtype))
        return err_fail(err, QVL_ERR_FORMAT, "%s: tensor '" ST_NAME_FMT "' has unknown dtype '%.32s'", label, name,
                        jd->valuestring);

    if (!cJSON_IsArray(js))
        return err_fail(err, QVL_ERR_FORMAT, "%s: tensor '" ST_NAME_FMT "' shape is not an array", label, name);
    int ndim = cJSON_GetArraySize(js);
    if (ndim > ST_MAX_DIMS)
        return err_fail(err, QVL_ERR_FORMAT, "%s: tensor '" ST_NAME_FMT "' has %d dimensions, at most %d supported",
                        label, name, ndim, ST_MAX_DIMS);
    uint64_t elems = 1;
    int overflow = 0;
    int k = 0;
    for (const cJSON *d = js->child; d; d = d->next, k++) {
        uint64_t v;
        if (!st_json_uint(d, &v))
            return err_fail(err, QVL_ERR_FORMAT,
                            "%s: tensor '" ST_NAME_FMT "' shape[%d] is not a non-negative integer below 2^53", label,
                            name, k);
        t->shape[k] = (int64_t)v;
        if (__builtin_mul_overflow(elems, v, &elems)) overflow = 1;
    }
    t->ndim = ndim;
    for (k = ndim; k < ST_MAX_DIMS; k++) t->shape[k] = 0;
    /* A zero dimension makes the product 0 whatever overflowed before it. */
    for (k = 0; k < ndim; k++)
        if (t->shape[k] == 0) overflow = 0, elems = 0;

    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return err_fail(err, QVL_ERR_FORMAT, "%s: tensor '" ST_NAME_FMT "' data_offsets is not a [begin, end] pair",
                        label, name);
    if (!st_json_uint(jo->child, begin) || !st_json_uint(jo->child->next, end))
        return err_fail(err, QVL_ERR_FORMAT,
                        "%s: tensor '" ST_NAME_FMT "' data_offsets are not non-negative integers below 2^53", label,
                        name);
    if (*begin > *end || *end > data_size)
        return err_fail(err, QVL_ERR_FORMAT,
                        "%s: tensor '" ST_NAME_FMT "' data_offsets [%llu, %llu] outside the data section (%zu bytes)",
                        label, name, (unsigned long long)*begin, (unsigned long long)*end, data_size);

    uint64_t nbytes;
    if (overflow || __builtin_mul_overflow(elems, (uint64_t)st_dtype_size(t->dtype), &nbytes))
        return err_fail(err, QVL_ERR_FORMAT,
                        "%s: tensor '" ST_NAME_FMT "' shape x %s size overflows 64 bits (data_offsets span %llu bytes)",
                        label, name, st_dtype_name(t->dtype), (unsigned long long)(*end - *begin));
    if (nbytes != *end - *begin)
        return err_fail(err, QVL_ERR_FORMAT,
                        "%s: tensor '" ST_NAME_FMT "' shape and dtype %s need %llu bytes but data_offsets [%llu, %llu] "
                        "span %llu",
                        label, name, st_dtype_name(t->dtype), (unsigned long long)nbytes,
                        (unsigned long long)*begin, (unsigned long long)*end, (unsigned long long)(*end - *begin));
    t->nbytes = nbytes;
    t->offset = data_start + *begin;
    t->data = data ? data + *begin : NULL;

    t->name = st_strdup(name);
    if (!t->name) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory copying a tensor name", label);
    return QVL_OK;
}

/* Copy __metadata__ (an object of strings; null counts as absent) into f, sorted by key, duplicates rejected. */
typedef struct st_kv {
    const char *k, *v;
} st_kv;

static int st_kv_cmp(const void *a, const void *b) { return strcmp(((const st_kv *)a)->k, ((const st_kv *)b)->k); }

static qvl_status st_parse_meta(const cJSON *m, const char *label, st_file *f, qvl_error *err) {
    if (cJSON_IsNull(m)) return QVL_OK;
    if (!cJSON_IsObject(m)) return err_fail(err, QVL_ERR_FORMAT, "%s: __metadata__ is not a JSON object", label);
    size_t n = 0;
    for (const cJSON *e = m->child; e; e = e->next, n++) {
        if (!cJSON_IsString(e) || !e->valuestring)
            return err_fail(err, QVL_ERR_FORMAT, "%s: __metadata__ value for '" ST_NAME_FMT "' is not a string",
                            label, e->string);
    }
    if (n == 0) return QVL_OK;
    st_kv *kv = malloc(n * sizeof *kv);
    f->meta_keys = calloc(n, sizeof *f->meta_keys);
    f->meta_vals = calloc(n, sizeof *f->meta_vals);
    if (!kv || !f->meta_keys || !f->meta_vals) {
        free(kv);
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for %zu metadata entries", label, n);
    }
    size_t i = 0;
    for (const cJSON *e = m->child; e; e = e->next, i++) kv[i] = (st_kv){e->string, e->valuestring};
    qsort(kv, n, sizeof *kv, st_kv_cmp);
    for (i = 0; i + 1 < n; i++) {
        if (strcmp(kv[i].k, kv[i + 1].k) == 0) {
            qvl_status s = err_fail(err, QVL_ERR_FORMAT, "%s: __metadata__ key '" ST_NAME_FMT "' appears twice",
                                    label, kv[i].k);
            free(kv);
            return s;
        }
    }
    for (i = 0; i < n; i++) {
        f->meta_keys[i] = st_strdup(kv[i].k);
        f->meta_vals[i] = st_strdup(kv[i].v);
        f->n_meta = i + 1; /* st_close frees entries [0, n_meta) even if one of this pair is NULL */
        if (!f->meta_keys[i] || !f->meta_vals[i]) {
            free(kv);
            return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory copying metadata", label);
        }
    }
    free(kv);
    return QVL_OK;
}

/* Span of tensor `idx`, for the overlap check. */
typedef struct st_span {
    uint64_t begin, end;
    size_t idx;
} st_span;

static int st_span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int st_tensor_cmp(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* A NUL byte in the header, raw or as the escape \u0000 inside a string, would silently cut a C string (a tensor
 * name, a metadata key or value) short: refused, naming its byte offset in the file (the header starts at 8). */
static qvl_status st_check_nul(const char *json, size_t n, const char *label, qvl_error *err) {
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        size_t at = i;
        if (json[i] == '\0') goto nul;
        if (!in_str) {
            in_str = json[i] == '"';
        } else if (json[i] == '"') {
            in_str = 0;
        } else if (json[i] == '\\' && i + 1 < n) {
            if (json[i + 1] == 'u' && i + 5 < n && memcmp(json + i + 2, "0000", 4) == 0) goto nul;
            i++; /* the escaped character; a \uXXXX's digits are plain characters */
        }
        continue;
    nul:
        return err_fail(err, QVL_ERR_FORMAT, "%s: header has a NUL character at byte %zu of the file%s (a "
                        "tensor name or metadata string would be cut short)", label, at + 8,
                        json[at] == '\0' ? "" : " (escaped as \\u0000)");
    }
    return QVL_OK;
}

/* An entry's "shape" as declared, for a caller's st_shape_check: 1 when it is a list of at most ST_MAX_DIMS integers
 * below 2^53 (into shape[0..*ndim)), else 0. */
static int st_declared_shape(const cJSON *e, int64_t *shape, int *ndim) {
    const cJSON *js = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "shape") : NULL;
    if (!cJSON_IsArray(js) || cJSON_GetArraySize(js) > ST_MAX_DIMS) return 0;
    int k = 0;
    for (const cJSON *d = js->child; d; d = d->next, k++) {
        uint64_t v;
        if (!st_json_uint(d, &v)) return 0;
        shape[k] = (int64_t)v;
    }
    *ndim = k;
    return 1;
}

/* Parse the JSON header text `json` (NUL-terminated copy, `n` bytes) into f; the data section of `data_size` bytes
 * starts at byte `data_start` of the file, and at `data` in memory (NULL: a file read with st_read). `check` (may be
 * NULL) sees the declared shapes before anything is validated against the file. */
static qvl_status st_parse_header(const char *json, size_t n, const char *label, const uint8_t *data,
                                  uint64_t data_start, size_t data_size, st_shape_check check, void *user, st_file *f,
                                  qvl_error *err) {
    TRY(st_check_nul(json, n, label, err));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, n, &end, 0);
    if (!root) {
        TRY(json_parse_failure(json, n, label, err));
        size_t at = end && end >= json && end <= json + n ? (size_t)(end - json) : 0;
        return err_fail(err, QVL_ERR_FORMAT, "%s: header is not valid JSON (error near byte %zu of %zu)", label, at,
                        n);
    }
    qvl_status s = QVL_OK;
    st_span *spans = NULL;
    /* serde (the reference reader) allows only whitespace after the value; the Python writer pads with spaces. */
    for (const char *p = end ? end : json + n; p < json + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = err_fail(err, QVL_ERR_FORMAT, "%s: header has trailing bytes after the JSON value (at byte %zu of %zu)",
                         label, (size_t)(p - json), n);
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        s = err_fail(err, QVL_ERR_FORMAT, "%s: header is JSON but not an object", label);
        goto done;
    }
    for (const cJSON *e = root->child; check && e; e = e->next) {
        int64_t shape[ST_MAX_DIMS];
        int ndim;
        if (strcmp(e->string, "__metadata__") == 0 || !st_declared_shape(e, shape, &ndim)) continue;
        if ((s = check(user, e->string, ndim, shape, err)) != QVL_OK) goto done;
    }

    size_t count = 0;
    int have_meta = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (have_meta) {
                s = err_fail(err, QVL_ERR_FORMAT, "%s: __metadata__ appears twice", label);
                goto done;
            }
            have_meta = 1;
            if ((s = st_parse_meta(e, label, f, err)) != QVL_OK) goto done;
        } else {
            count++;
        }
    }
    if (count == 0) goto done;

    f->tensors = calloc(count, sizeof *f->tensors);
    spans = malloc(count * sizeof *spans);
    if (!f->tensors || !spans) {
        s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for %zu tensors", label, count);
        goto done;
    }
    size_t i = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        s = st_parse_entry(e, label, data, data_start, data_size, &f->tensors[i], &spans[i].begin, &spans[i].end,
                           err);
        if (s != QVL_OK) goto done;
        spans[i].idx = i;
        f->n_tensors = ++i;
    }

    /* Overlap: sorted by begin, every non-empty span must start at or after the furthest end seen so far. Empty
     * spans hold no bytes and overlap nothing. */
    qsort(spans, count, sizeof *spans, st_span_cmp);
    uint64_t reach = 0;
    size_t reach_idx = 0;
    int have_reach = 0;
    for (i = 0; i < count; i++) {
        if (spans[i].begin == spans[i].end) continue;
        if (have_reach && spans[i].begin < reach) {
            s = err_fail(err, QVL_ERR_FORMAT,
                         "%s: tensor '" ST_NAME_FMT "' data_offsets [%llu, %llu] overlap tensor '" ST_NAME_FMT
                         "' ending at %llu",
                         label, f->tensors[spans[i].idx].name, (unsigned long long)spans[i].begin,
                         (unsigned long long)spans[i].end, f->tensors[reach_idx].name, (unsigned long long)reach);
            goto done;
        }
        reach = spans[i].end;
        reach_idx = spans[i].idx;
        have_reach = 1;
    }

    /* cJSON keeps duplicate keys; after sorting by name they are neighbours. */
    qsort(f->tensors, count, sizeof *f->tensors, st_tensor_cmp);
    for (i = 0; i + 1 < count; i++) {
        if (strcmp(f->tensors[i].name, f->tensors[i + 1].name) == 0) {
            s = err_fail(err, QVL_ERR_FORMAT, "%s: tensor '" ST_NAME_FMT "' appears twice in the header", label,
                         f->tensors[i].name);
            goto done;
        }
    }

done:
    free(spans);
    cJSON_Delete(root);
    return s;
}

/* The header length in the first 8 bytes `len8` of a file of `size` bytes, checked: at most ST_MAX_HEADER, inside
 * the file, long enough for a JSON object. */
static qvl_status st_header_len(const uint8_t *len8, size_t size, const char *label, size_t *out, qvl_error *err) {
    if (size < 8)
        return err_fail(err, QVL_ERR_FORMAT, "%s: file is %zu bytes, shorter than the 8-byte header length", label,
                        size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
    if (n > ST_MAX_HEADER)
        return err_fail(err, QVL_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit", label,
                        (unsigned long long)n, (unsigned)ST_MAX_HEADER);
    if (n > size - 8)
        return err_fail(err, QVL_ERR_FORMAT, "%s: header length %llu exceeds the %zu bytes after the length field",
                        label, (unsigned long long)n, size - 8);
    if (n < 2) return err_fail(err, QVL_ERR_FORMAT, "%s: header length %llu is too short for a JSON object", label,
                               (unsigned long long)n);
    *out = (size_t)n;
    return QVL_OK;
}

/* A fresh st_file (fd -1) from the header text `json` (a malloc'd NUL-terminated copy of its n bytes, freed here)
 * of a file of `size` bytes whose data section is at `data` in memory (NULL: to be read with st_read). */
static qvl_status st_from_header(char *json, size_t n, size_t size, const uint8_t *data, const char *label,
                                 st_shape_check check, void *user, st_file **out, qvl_error *err) {
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) {
        free(json);
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for a %zu-byte header", label, n);
    }
    f->fd = -1;
    f->size = size;
    qvl_status s = st_parse_header(json, n, label, data, 8 + (uint64_t)n, size - 8 - n, check, user, f, err);
    free(json);
    if (s != QVL_OK) {
        st_close(f);
        return s;
    }
    *out = f;
    return QVL_OK;
}

/* Validate `buf` and fill a fresh st_file whose tensors point into it (path left to the caller). */
static qvl_status st_parse_impl(const uint8_t *buf, size_t len, const char *label, st_shape_check check, void *user,
                                st_file **out, qvl_error *err) {
    *out = NULL;
    size_t n;
    TRY(st_header_len(buf, len, label, &n, err));
    /* A NUL-terminated copy keeps the JSON parser inside the header even if it looked one byte too far. */
    char *json = malloc(n + 1);
    if (!json) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for a %zu-byte header", label, n);
    memcpy(json, buf + 8, n);
    json[n] = '\0';
    return st_from_header(json, n, len, buf + 8 + n, label, check, user, out, err);
}

qvl_status st_parse_checked(const void *buf, size_t len, const char *label, st_shape_check check, void *user,
                            st_file **out, qvl_error *err) {
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "st_parse: out is NULL");
    *out = NULL;
    if (!label) label = "<buffer>";
    if (!buf && len) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: buffer is NULL but length is %zu", label, len);
    return st_parse_impl(buf, len, label, check, user, out, err);
}

qvl_status st_parse(const void *buf, size_t len, const char *label, st_file **out, qvl_error *err) {
    return st_parse_checked(buf, len, label, NULL, NULL, out, err);
}

static const char *st_errstr(int e, char *buf, size_t n) {
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
    return strerror_r(e, buf, n);
#else
    if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "error %d", e);
    return buf;
#endif
}

/* Read exactly n bytes at `at` of fd: of tensor t (NULL: of `what`), named in the message only on failure. A short
 * count is the file ending early: it shrank since it was opened and validated. */
static qvl_status st_pread(int fd, void *dst, size_t n, uint64_t at, size_t opened_size, const char *path,
                           const st_tensor *t, const char *what, qvl_error *err) {
    size_t got;
    const int rc = fu_pread_full(fd, dst, n, at, &got);
    if (rc == 0 && got == n) return QVL_OK;
    const int e = errno;
    char desc[256], eb[128];
    if (t)
        snprintf(desc, sizeof desc, "tensor '" ST_NAME_FMT "' (%llu bytes from byte %llu)", t->name,
                 (unsigned long long)t->nbytes, (unsigned long long)t->offset);
    else
        snprintf(desc, sizeof desc, "%s", what);
    at += got;
    if (rc != 0)
        return err_fail(err, e == ENOMEM ? QVL_ERR_NOMEM : QVL_ERR_IO, "%s: read error in %s at byte %llu: %s",
                        path, desc, (unsigned long long)at, st_errstr(e, eb, sizeof eb));
    struct stat st;
    const long long now = fstat(fd, &st) == 0 ? (long long)st.st_size : (long long)at;
    return err_fail(err, QVL_ERR_IO, "%s: the file ends at byte %lld, before byte %llu of %s, but was %zu bytes when "
                    "it was opened (truncated or rewritten while being read)", path, now, (unsigned long long)at,
                    desc, opened_size);
}

qvl_status st_open(const char *path, st_file **out, qvl_error *err) {
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "st_open: out is NULL");
    *out = NULL;
    if (!path) return err_fail(err, QVL_ERR_INVALID_ARG, "st_open: path is NULL");
    int fd;
    size_t size, n = 0;
    TRY(fu_open_fd(path, &fd, &size, err)); /* a FIFO or device fails here instead of blocking */
    uint8_t len8[8];
    char *json = NULL;
    st_file *f = NULL;
    qvl_status s = size < 8 ? QVL_OK : st_pread(fd, len8, 8, 0, size, path, NULL, "the header length", err);
    if (s == QVL_OK) s = st_header_len(len8, size, path, &n, err);
    if (s == QVL_OK && !(json = malloc(n + 1)))
        s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for a %zu-byte header", path, n);
    if (s == QVL_OK) s = st_pread(fd, json, n, 8, size, path, NULL, "the header", err);
    if (s == QVL_OK) {
        json[n] = '\0';
        s = st_from_header(json, n, size, NULL, path, NULL, NULL, &f, err); /* frees json */
        json = NULL;
    }
    free(json);
    if (s == QVL_OK && !(f->path = st_strdup(path))) s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    if (s != QVL_OK) {
        st_close(f);
        close(fd);
        return s;
    }
    f->fd = fd;
    *out = f;
    return QVL_OK;
}

qvl_status st_load_checked(const char *path, size_t limit, st_shape_check check, void *user, st_file **out,
                           qvl_error *err) {
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "st_load: out is NULL");
    *out = NULL;
    if (!path) return err_fail(err, QVL_ERR_INVALID_ARG, "st_load: path is NULL");
    char *buf;
    size_t len;
    TRY(fu_read_file(path, limit, &buf, &len, err));
    st_file *f = NULL;
    qvl_status s = st_parse_impl((const uint8_t *)buf, len, path, check, user, &f, err);
    if (s == QVL_OK && !(f->path = st_strdup(path))) s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    if (s != QVL_OK) {
        st_close(f);
        free(buf);
        return s;
    }
    f->buf = buf;
    *out = f;
    return QVL_OK;
}

qvl_status st_load(const char *path, size_t limit, st_file **out, qvl_error *err) {
    return st_load_checked(path, limit, NULL, NULL, out, err);
}

qvl_status st_read(const st_file *f, const st_tensor *t, uint64_t off, size_t n, void *dst, qvl_error *err) {
    if (!f || !t || (n && !dst) || off > t->nbytes || n > t->nbytes - off)
        return err_fail(err, QVL_ERR_INVALID_ARG, "st_read: bytes [%llu, +%zu) of %s are not inside the tensor",
                        (unsigned long long)off, n, t && t->name ? t->name : "(no tensor)");
    if (t->data) {
        if (n) memcpy(dst, (const unsigned char *)t->data + off, n);
        return QVL_OK;
    }
    return st_pread(f->fd, dst, n, t->offset + off, f->size, f->path ? f->path : "<file>", t, NULL, err);
}

/* Index of `key` among n names sorted by strcmp, the name of entry i at base + i·stride (a `const char *`
 * field or element); n when absent. */
static size_t find_sorted(const char *key, const void *base, size_t n, size_t stride) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const char *name;
        memcpy(&name, (const unsigned char *)base + mid * stride, sizeof name);
        const int c = strcmp(key, name);
        if (c == 0) return mid;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return n;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    if (!f || !name || f->n_tensors == 0) return NULL;
    const size_t i = find_sorted(name, &f->tensors[0].name, f->n_tensors, sizeof f->tensors[0]);
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const char *st_meta(const st_file *f, const char *key) {
    if (!f || !key || f->n_meta == 0) return NULL;
    const size_t i = find_sorted(key, f->meta_keys, f->n_meta, sizeof f->meta_keys[0]);
    return i < f->n_meta ? f->meta_vals[i] : NULL;
}
