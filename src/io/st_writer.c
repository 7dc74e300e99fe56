/* st_writer.c — the streaming safetensors writer (qvl_st_writer): tensors are written as they are produced, so a
 * caller never holds more than the piece it is writing. The data goes into a fresh temporary file in the
 * destination's directory (created with O_EXCL, so nothing planted there is followed) after a reserved header
 * region; finish writes the header into that region, padded with spaces as the format allows (or, when the
 * header outgrew it, writes a second temporary with the header in front), then renames it over the destination.
 * A failed or aborted writer removes its temporary and leaves the destination untouched. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/fileutil.h"
#include "io/safetensors.h"

enum { DEFAULT_RESERVE = 64 * 1024, MAX_META = 1 << 16 };

typedef struct wentry {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
    uint64_t off, filled; /* a group's tensor: its data offset, and the bytes given so far */
} wentry;

struct qvl_st_writer {
    int fd;
    char *path, *tmp;
    uint64_t reserve; /* bytes before the data: the 8-byte length and the header region */
    uint64_t written; /* data bytes so far */
    wentry *t;
    size_t n, cap;
    char **meta; /* key, value, key, value ... */
    size_t n_meta, cap_meta;
    uint64_t open_left; /* bytes the current tensor still expects */
    size_t group0, group_n; /* the open group (qvl_st_writer_group): tensors t[group0 ...], group_n of them */
    qvl_status failed;  /* sticky */
    char fail_msg[1024];
};

static qvl_status sticky(qvl_st_writer *w, qvl_error *err) {
    if (err) {
        err->status = w->failed;
        snprintf(err->message, sizeof err->message, "%s", w->fail_msg);
    }
    return w->failed;
}

static qvl_status fail(qvl_st_writer *w, qvl_error *err, qvl_status s, const char *msg) {
    w->failed = s;
    snprintf(w->fail_msg, sizeof w->fail_msg, "%.300s: %.700s", w->path, msg);
    return sticky(w, err);
}

qvl_status qvl_st_writer_open(const char *path, size_t header_reserve, qvl_st_writer **out, qvl_error *err) {
    err_clear(err);
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_open: path is %s", path ? "the empty string" : "NULL");
    TRY(fu_check_dest(path, err));
    if (header_reserve > ST_MAX_HEADER)
        return err_fail(err, QVL_ERR_LIMIT, "%s: header_reserve %zu exceeds the format's %u", path, header_reserve,
                        ST_MAX_HEADER);
    qvl_st_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    }
    w->fd = fu_make_tmp(path, &w->tmp);
    if (w->fd < 0) {
        int e = errno;
        free(w->path);
        free(w);
        return err_fail(err, e == ENOMEM ? QVL_ERR_NOMEM : QVL_ERR_IO, "%s: cannot create a temporary file beside it "
                        "(%s)", path, strerror(e));
    }
    uint64_t r = header_reserve ? header_reserve : DEFAULT_RESERVE;
    w->reserve = 8 + (r + 7) / 8 * 8;
    *out = w;
    return QVL_OK;
}

static qvl_status pwrite_all(int fd, const void *p, size_t n, uint64_t off) {
    const unsigned char *b = p;
    while (n) {
        ssize_t k = pwrite(fd, b, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return QVL_ERR_IO;
        b += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return QVL_OK;
}

static qvl_status close_open_tensor(qvl_st_writer *w, qvl_error *err) {
    for (size_t k = 0; k < w->group_n; k++) {
        const wentry *e = &w->t[w->group0 + k];
        if (e->filled == e->nbytes) continue;
        char m[300];
        snprintf(m, sizeof m, "tensor %.200s is %" PRIu64 " bytes short", e->name, e->nbytes - e->filled);
        return fail(w, err, QVL_ERR_INVALID_ARG, m);
    }
    w->group_n = 0;
    if (w->open_left) {
        char m[300];
        snprintf(m, sizeof m, "tensor %s is %" PRIu64 " bytes short", w->t[w->n - 1].name, w->open_left);
        return fail(w, err, QVL_ERR_INVALID_ARG, m);
    }
    return QVL_OK;
}

qvl_status qvl_st_writer_meta(qvl_st_writer *w, const char *key, const char *value, qvl_error *err) {
    err_clear(err);
    if (!w) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_meta: writer is NULL");
    if (w->failed) return sticky(w, err);
    if (!key || !value) return fail(w, err, QVL_ERR_INVALID_ARG, key ? "metadata value is NULL" : "metadata key is NULL");
    for (size_t i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[2 * i], key) == 0) {
            char m[300];
            snprintf(m, sizeof m, "metadata key \"%.200s\" given twice", key);
            return fail(w, err, QVL_ERR_INVALID_ARG, m);
        }
    if (w->n_meta >= MAX_META) return fail(w, err, QVL_ERR_LIMIT, "more than 65536 metadata keys");
    if (w->n_meta == w->cap_meta) {
        size_t cap = w->cap_meta ? 2 * w->cap_meta : 16;
        char **q = realloc(w->meta, 2 * cap * sizeof *q);
        if (!q) return fail(w, err, QVL_ERR_NOMEM, "out of memory for metadata");
        w->meta = q;
        w->cap_meta = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return fail(w, err, QVL_ERR_NOMEM, "out of memory for metadata");
    }
    w->meta[2 * w->n_meta] = k;
    w->meta[2 * w->n_meta + 1] = v;
    w->n_meta++;
    return QVL_OK;
}

static int dtype_of(const char *s, st_dtype *d) {
    static const struct { const char *n; st_dtype d; } k[] = {
        {"F32", ST_F32}, {"F16", ST_F16}, {"BF16", ST_BF16}, {"F64", ST_F64}, {"I64", ST_I64}, {"I32", ST_I32},
        {"I16", ST_I16}, {"I8", ST_I8}, {"U8", ST_U8}, {"BOOL", ST_BOOL}, {"U16", ST_U16}, {"U32", ST_U32},
        {"U64", ST_U64}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(s, k[i].n) == 0) return *d = k[i].d, 0;
    return -1;
}

/* One more tensor in the list, its data to come at offset `written` (nothing written here). */
static qvl_status declare(qvl_st_writer *w, const char *name, const char *dtype, const int64_t *shape, int ndim,
                          qvl_error *err) {
    char m[400];
    if (!name || !*name || strcmp(name, "__metadata__") == 0) {
        snprintf(m, sizeof m, "tensor name %s is not allowed", !name ? "NULL" : !*name ? "\"\"" : "\"__metadata__\"");
        return fail(w, err, QVL_ERR_INVALID_ARG, m);
    }
    st_dtype d;
    if (!dtype || dtype_of(dtype, &d) != 0) {
        snprintf(m, sizeof m, "tensor %.200s: dtype \"%.20s\" is not a safetensors dtype (F32, F16, BF16, I32, I64...)",
                 name, dtype ? dtype : "(null)");
        return fail(w, err, QVL_ERR_INVALID_ARG, m);
    }
    if (ndim < 0 || ndim > ST_MAX_DIMS || (ndim && !shape)) {
        snprintf(m, sizeof m, "tensor %.200s: %d dimensions (0..%d, with a shape)", name, ndim, ST_MAX_DIMS);
        return fail(w, err, QVL_ERR_INVALID_ARG, m);
    }
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            snprintf(m, sizeof m, "tensor name %.200s given twice", name);
            return fail(w, err, QVL_ERR_INVALID_ARG, m);
        }
    uint64_t nb = st_dtype_size(d);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(nb, (uint64_t)shape[i], &nb)) {
            snprintf(m, sizeof m, "tensor %.200s: dimension %d (%" PRId64 ") is negative or the size overflows", name,
                     i, shape[i]);
            return fail(w, err, QVL_ERR_LIMIT, m);
        }
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        wentry *q = realloc(w->t, cap * sizeof *q);
        if (!q) return fail(w, err, QVL_ERR_NOMEM, "out of memory for the tensor list");
        w->t = q;
        w->cap = cap;
    }
    wentry *e = &w->t[w->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name))) return fail(w, err, QVL_ERR_NOMEM, "out of memory for the tensor list");
    e->dtype = d;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->nbytes = nb;
    e->off = w->written;
    w->n++;
    return QVL_OK;
}

qvl_status qvl_st_writer_tensor(qvl_st_writer *w, const char *name, const char *dtype, const int64_t *shape, int ndim,
                                qvl_error *err) {
    err_clear(err);
    if (!w) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_tensor: writer is NULL");
    if (w->failed) return sticky(w, err);
    TRY(close_open_tensor(w, err));
    TRY(declare(w, name, dtype, shape, ndim, err));
    w->open_left = w->t[w->n - 1].nbytes;
    return QVL_OK;
}

qvl_status qvl_st_writer_group(qvl_st_writer *w, size_t n, const char *const *names, const char *dtype,
                               const int64_t *shape, int ndim, qvl_error *err) {
    err_clear(err);
    if (!w) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_group: writer is NULL");
    if (w->failed) return sticky(w, err);
    TRY(close_open_tensor(w, err));
    if (!n || !names) return fail(w, err, QVL_ERR_INVALID_ARG, "qvl_st_writer_group: no tensors");
    const size_t first = w->n;
    for (size_t k = 0; k < n; k++) {
        TRY(declare(w, names[k], dtype, shape, ndim, err));
        if (__builtin_add_overflow(w->written, w->t[w->n - 1].nbytes, &w->written)) /* its region, for data_to */
            return fail(w, err, QVL_ERR_LIMIT, "qvl_st_writer_group: the tensors' sizes overflow");
    }
    w->group0 = first, w->group_n = n;
    return QVL_OK;
}

qvl_status qvl_st_writer_data_to(qvl_st_writer *w, size_t k, const void *data, size_t n, qvl_error *err) {
    err_clear(err);
    if (!w) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_data_to: writer is NULL");
    if (w->failed) return sticky(w, err);
    if (n && !data) return fail(w, err, QVL_ERR_INVALID_ARG, "qvl_st_writer_data_to: data is NULL");
    char m[400];
    if (k >= w->group_n) {
        snprintf(m, sizeof m, "qvl_st_writer_data_to: tensor %zu of a group of %zu", k, w->group_n);
        return fail(w, err, QVL_ERR_INVALID_ARG, m);
    }
    wentry *e = &w->t[w->group0 + k];
    if (n > e->nbytes - e->filled) {
        snprintf(m, sizeof m, "%zu bytes given, tensor %.200s expects %" PRIu64 " more", n, e->name,
                 e->nbytes - e->filled);
        return fail(w, err, QVL_ERR_INVALID_ARG, m);
    }
    if (pwrite_all(w->fd, data, n, w->reserve + e->off + e->filled) != QVL_OK) {
        snprintf(m, sizeof m, "write failed (%s)", strerror(errno));
        return fail(w, err, QVL_ERR_IO, m);
    }
    e->filled += n;
    return QVL_OK;
}

qvl_status qvl_st_writer_drop(qvl_st_writer *w, qvl_error *err) {
    err_clear(err);
    if (!w) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_drop: writer is NULL");
    if (w->failed) return sticky(w, err);
    size_t first = w->n;
    if (w->group_n) first = w->group0;
    else if (w->open_left) first = w->n - 1;
    if (first == w->n) return QVL_OK;
    w->written = w->t[first].off; /* the data given so far is cut off with them */
    for (size_t i = first; i < w->n; i++) free(w->t[i].name);
    w->n = first;
    w->group_n = 0, w->open_left = 0;
    return ftruncate(w->fd, (off_t)(w->reserve + w->written)) == 0 ? QVL_OK
                                                                      : fail(w, err, QVL_ERR_IO, "truncate failed");
}



qvl_status qvl_st_writer_data(qvl_st_writer *w, const void *data, size_t n, qvl_error *err) {
    err_clear(err);
    if (!w) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_data: writer is NULL");
    if (w->failed) return sticky(w, err);
    if (n && !data) return fail(w, err, QVL_ERR_INVALID_ARG, "qvl_st_writer_data: data is NULL");
    if (w->group_n) return fail(w, err, QVL_ERR_INVALID_ARG, "qvl_st_writer_data: a group is open (its tensors are "
                                "filled by qvl_st_writer_data_to)");
    if (n > w->open_left) {
        char m[400];
        snprintf(m, sizeof m, "%zu bytes given, the current tensor %.200s expects %" PRIu64 " more", n,
                 w->n ? w->t[w->n - 1].name : "(none)", w->open_left);
        return fail(w, err, QVL_ERR_INVALID_ARG, m);
    }
    if (pwrite_all(w->fd, data, n, w->reserve + w->written) != QVL_OK) {
        char m[200];
        snprintf(m, sizeof m, "write failed (%s)", strerror(errno));
        return fail(w, err, QVL_ERR_IO, m);
    }
    w->written += n;
    w->open_left -= n;
    return QVL_OK;
}

static void writer_free(qvl_st_writer *w) {
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    for (size_t i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
    free(w->meta);
    free(w->tmp);
    free(w->path);
    free(w);
}

void qvl_st_writer_abort(qvl_st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp);
    writer_free(w);
}

/* The header did not fit the reserved region: a second temporary with the header first, then the data. */
static qvl_status relocate(qvl_st_writer *w, const unsigned char *head, size_t head_len, qvl_error *err) {
    char *t2 = NULL;
    int fd2 = fu_make_tmp(w->path, &t2);
    if (fd2 < 0) {
        char m[160];
        int e = errno;
        snprintf(m, sizeof m, "cannot create a second temporary file (%s)", strerror(e));
        return fail(w, err, e == ENOMEM ? QVL_ERR_NOMEM : QVL_ERR_IO, m);
    }
    qvl_status s = pwrite_all(fd2, head, head_len, 0);
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = s == QVL_OK ? malloc(CHUNK) : NULL;
    if (s == QVL_OK && !buf) s = QVL_ERR_NOMEM;
    for (uint64_t off = 0; s == QVL_OK && off < w->written;) {
        size_t n = w->written - off < CHUNK ? (size_t)(w->written - off) : CHUNK;
        ssize_t k = pread(w->fd, buf, n, (off_t)(w->reserve + off));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) s = QVL_ERR_IO;
        else s = pwrite_all(fd2, buf, (size_t)k, head_len + off), off += (uint64_t)k;
    }
    free(buf);
    if (s != QVL_OK) {
        close(fd2);
        unlink(t2);
        free(t2);
        return fail(w, err, s, s == QVL_ERR_NOMEM ? "out of memory moving the data" : "moving the data failed");
    }
    close(w->fd);
    unlink(w->tmp);
    free(w->tmp);
    w->fd = fd2;
    w->tmp = t2;
    return QVL_OK;
}

qvl_status qvl_st_writer_finish(qvl_st_writer *w, qvl_error *err) {
    err_clear(err);
    if (!w) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_st_writer_finish: writer is NULL");
    qvl_status s = w->failed ? sticky(w, err) : close_open_tensor(w, err);
    st_wtensor *t = NULL;
    char *hdr = NULL;
    size_t hdr_len = 0;
    if (s == QVL_OK && !(t = calloc(w->n ? w->n : 1, sizeof *t))) s = fail(w, err, QVL_ERR_NOMEM, "out of memory");
    for (size_t i = 0; s == QVL_OK && i < w->n; i++) {
        t[i] = (st_wtensor){.name = w->t[i].name, .dtype = w->t[i].dtype, .ndim = w->t[i].ndim};
        memcpy(t[i].shape, w->t[i].shape, sizeof t[i].shape);
    }
    if (s == QVL_OK) {
        qvl_error he;
        err_clear(&he);
        s = st_build_header(w->path, t, w->n, (const char *const *)w->meta, w->n_meta, &hdr, &hdr_len, &he);
        if (s != QVL_OK) { /* the message already names the path */
            w->failed = s;
            snprintf(w->fail_msg, sizeof w->fail_msg, "%s", he.message);
            s = sticky(w, err);
        }
    }
    if (s == QVL_OK) {
        if (8 + (uint64_t)hdr_len <= w->reserve) { /* pad the header to fill the region */
            size_t region = (size_t)(w->reserve - 8);
            char *p = realloc(hdr, region);
            if (!p) s = fail(w, err, QVL_ERR_NOMEM, "out of memory");
            else {
                hdr = p;
                memset(hdr + hdr_len, ' ', region - hdr_len);
                hdr_len = region;
            }
        }
    }
    unsigned char *head = NULL;
    if (s == QVL_OK && !(head = malloc(8 + hdr_len))) s = fail(w, err, QVL_ERR_NOMEM, "out of memory");
    if (s == QVL_OK) {
        for (int k = 0; k < 8; k++) head[k] = (unsigned char)((uint64_t)hdr_len >> (8 * k));
        memcpy(head + 8, hdr, hdr_len);
        if (8 + (uint64_t)hdr_len == w->reserve) {
            if (pwrite_all(w->fd, head, 8 + hdr_len, 0) != QVL_OK) s = fail(w, err, QVL_ERR_IO, "header write failed");
        } else {
            s = relocate(w, head, 8 + hdr_len, err);
        }
    }
    free(head);
    free(hdr);
    free(t);
    if (s == QVL_OK && fsync(w->fd) != 0) s = fail(w, err, QVL_ERR_IO, "fsync failed");
    if (s == QVL_OK && fchmod(w->fd, 0644) != 0) s = fail(w, err, QVL_ERR_IO, "chmod failed");
    if (close(w->fd) != 0 && s == QVL_OK) s = fail(w, err, QVL_ERR_IO, "close failed");
    w->fd = -1;
    if (s == QVL_OK && rename(w->tmp, w->path) != 0) {
        char m[200];
        snprintf(m, sizeof m, "cannot rename the temporary file into place (%s)", strerror(errno));
        s = fail(w, err, QVL_ERR_IO, m);
    }
    if (s != QVL_OK) unlink(w->tmp);
    writer_free(w);
    return s;
}
