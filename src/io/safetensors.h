/* safetensors.h — reader (pread, or a buffer in memory) and writer for the safetensors format.
 *
 * Format: an 8-byte little-endian header length N, N bytes of UTF-8 JSON mapping tensor names to
 * {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte after the header) plus an
 * optional "__metadata__" object of string values, then the data. The reader validates everything before use:
 * N bounded by the file and by ST_MAX_HEADER, valid JSON object, known dtype, shape × dtype size == end − begin
 * (overflow-checked), spans inside the file, spans pairwise non-overlapping. */
#ifndef QVL_IO_SAFETENSORS_H
#define QVL_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

#define ST_MAX_HEADER (100u * 1024u * 1024u) /* 100 MiB, as the reference implementation */
#define ST_MAX_DIMS 8

typedef enum st_dtype {
    ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_U16, ST_U32, ST_U64,
    ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT
} st_dtype;

typedef struct st_tensor {
    char *name;                /* owned, NUL-terminated */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;           /* byte offset of the data in the file (or buffer) */
    const void *data;          /* into the buffer (st_parse, st_load; alignment not guaranteed); NULL for a file
                                * opened with st_open, whose bytes st_read reads */
} st_tensor;

typedef struct st_file {
    char *path;                /* owned copy, may be NULL for buffers */
    int fd;                    /* st_open: the open file, read by st_read; -1 otherwise */
    void *buf;                 /* st_load: the file's bytes, owned */
    size_t size;               /* the file's size when it was opened */
    st_tensor *tensors;        /* sorted by name */
    size_t n_tensors;
    char **meta_keys;          /* __metadata__ keys and values, owned */
    char **meta_vals;
    size_t n_meta;
} st_file;

/* A caller's bound on the shapes a header declares (st_load_checked, st_parse_checked): called once the header has
 * parsed as a JSON object and before any tensor is validated, with the name and declared shape of each tensor
 * entry whose shape is a list of at most ST_MAX_DIMS integers below 2^53 (any other is left to the validation,
 * which refuses it). A status other than QVL_OK ends the parse with it. So that a limit on what a header claims is
 * reported as that limit, not as the spans of a truncated file being outside it. */
typedef qvl_status (*st_shape_check)(void *user, const char *name, int ndim, const int64_t *shape, qvl_error *err);

/* Size in bytes of one element; 0 for an invalid dtype. Name as written in the header ("BF16"...). */
size_t st_dtype_size(st_dtype d);
const char *st_dtype_name(st_dtype d);

/* Open a file and validate its header, keeping it open for st_read (the data is not read). On failure *out is NULL
 * and nothing leaks. */
qvl_status st_open(const char *path, st_file **out, qvl_error *err);
/* Read a whole file of at most `limit` bytes into memory and validate it; the tensors' data point into it. */
qvl_status st_load(const char *path, size_t limit, st_file **out, qvl_error *err);
/* st_load with `check` (NULL: none) run over the declared shapes first, given `user`. */
qvl_status st_load_checked(const char *path, size_t limit, st_shape_check check, void *user, st_file **out,
                           qvl_error *err);
/* Copy bytes [off, off + n) of tensor t of f to dst: pread for st_open's files, a copy for the others. A read error,
 * or the file ending early (shrunk since it was opened), is QVL_ERR_IO naming the file, the tensor and the byte. */
qvl_status st_read(const st_file *f, const st_tensor *t, uint64_t off, size_t n, void *dst, qvl_error *err);
/* Validate a buffer in memory (used by the fuzz target); tensors point into `buf`, which must outlive the result. */
qvl_status st_parse(const void *buf, size_t len, const char *label, st_file **out, qvl_error *err);
/* st_parse with `check` (NULL: none) run over the declared shapes first, given `user`. */
qvl_status st_parse_checked(const void *buf, size_t len, const char *label, st_shape_check check, void *user,
                            st_file **out, qvl_error *err);
void st_close(st_file *f);

/* Binary search by exact name; NULL if absent. */
const st_tensor *st_find(const st_file *f, const char *name);
/* __metadata__ value or NULL. */
const char *st_meta(const st_file *f, const char *key);

/* Writer: tensors are written in the order given (offsets ascending, 8-byte aligned header). */
typedef struct st_wtensor {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;          /* nbytes = prod(shape) * dtype size */
} st_wtensor;

qvl_status st_write(const char *path, const st_wtensor *t, size_t n, const char *const *meta_kv, size_t n_meta,
                    qvl_error *err);
/* The header st_write writes for t[0..n) (data in that order, no gaps) and the metadata pairs, padded with spaces to
 * a multiple of 8 bytes; validates names (unique, not "__metadata__"), dtypes and sizes; `path` names the file in
 * messages. *hdr is malloc'd. */
qvl_status st_build_header(const char *path, const st_wtensor *t, size_t n, const char *const *meta_kv, size_t n_meta, char **hdr,
                           size_t *hdr_len, qvl_error *err);

/* st_write's meta_kv holds n_meta key/value pairs as 2·n_meta strings (key0, value0, key1, ...), written as the
 * "__metadata__" object first in the header.
 *
 * Streaming writer (st_write.c): like st_write, but tensor i's bytes are produced on demand by
 * fill(user, i, buf, nbytes, err) into a scratch buffer of exactly nbytes (t[i].data is ignored), so at most one
 * tensor is held in memory. A non-OK status from fill aborts the write (the temporary file is removed). */
typedef qvl_status (*st_fill_fn)(void *user, size_t i, void *buf, size_t nbytes, qvl_error *err);
qvl_status st_write_stream(const char *path, const st_wtensor *t, size_t n, const char *const *meta_kv,
                           size_t n_meta, st_fill_fn fill, void *user, qvl_error *err);

#endif
