/* npy.h — a minimal NumPy .npy reader and writer for float32 matrices.
 *
 * Reader: format versions 1.0, 2.0 and 3.0; dtypes '<f4' (read as is), '<f8' and '<f2' (converted to float32);
 * C order only (fortran_order True is rejected). A 1-D array [n] reads as [1, n]; an N-D array [d0, d1, ...] reads
 * as [d0, d1·d2·...]; 0-D arrays are rejected. Every size is overflow-checked and the data must fit in the file.
 * Writer: version 1.0, '<f4', shape (rows, cols), header padded to a multiple of 64 bytes as NumPy does; written
 * to "<path>.tmp" and renamed into place. */
#ifndef QVL_IO_NPY_H
#define QVL_IO_NPY_H

#include <stddef.h>

#include "qvl.h"

/* Read `path` into a malloc'd [rows, cols] float32 array (*data, freed by the caller with free()). On failure
 * *data is NULL and nothing leaks. With `lim` (NULL: no limits), the file's size is checked against
 * lim->max_input_bytes before it is read and the header's rows against lim->max_call_patches before anything
 * else is allocated (QVL_ERR_LIMIT naming the limit). */
qvl_status npy_read_f32(const char *path, const qvl_limits *lim, float **data, size_t *rows, size_t *cols,
                        qvl_error *err);

/* Same, from a buffer in memory (`label` names it in errors). */
qvl_status npy_parse_f32(const void *buf, size_t len, const char *label, const qvl_limits *lim, float **data,
                         size_t *rows, size_t *cols, qvl_error *err);

/* Write [rows, cols] float32 `data` (row-major) as a .npy file. */
qvl_status npy_write_f32(const char *path, const float *data, size_t rows, size_t cols, qvl_error *err);

#endif
