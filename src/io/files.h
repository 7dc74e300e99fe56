/* files.h — the buffer form of qvl_read_rows (src/io/files.c), for the fuzz target. */
#ifndef QVL_IO_FILES_H
#define QVL_IO_FILES_H

#include <stddef.h>

#include "qvl.h"

/* qvl_read_rows_limited on `len` bytes in memory (`label` names them in messages): the same sniffing, checks,
 * limits (NULL: the defaults; len against max_input_bytes) and outputs (free with free()). */
qvl_status rows_parse(const void *buf, size_t len, const char *label, const qvl_limits *limits, float **rows,
                      size_t *n_rows, size_t *row_len, qvl_grid **grids, size_t *n_grids, qvl_error *err);

#endif
