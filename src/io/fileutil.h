/* fileutil.h — small file helpers shared by the loaders. */
#ifndef QVL_IO_FILEUTIL_H
#define QVL_IO_FILEUTIL_H

#include <stddef.h>

#include "qvl.h"

/* Read a whole regular file of at most `limit` bytes into a NUL-terminated malloc'd buffer. */
qvl_status qvl_read_file(const char *path, size_t limit, char **out, size_t *len, qvl_error *err);
/* 1 if `path` names an existing regular file. */
int qvl_is_file(const char *path);
/* snprintf into buf; QVL_ERR_LIMIT naming the path if it does not fit. */
qvl_status qvl_join(char *buf, size_t n, const char *dir, const char *name, qvl_error *err);

#endif
