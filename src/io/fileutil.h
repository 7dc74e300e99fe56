/* fileutil.h — small file helpers shared by the loaders. */
#ifndef QVL_IO_FILEUTIL_H
#define QVL_IO_FILEUTIL_H

#include <stddef.h>
#include <stdio.h>

#include "qvl.h"

/* Open a regular file for reading: *f and its size. Errors name the path (cannot open, not a regular file, too
 * large for size_t). */
qvl_status fu_open_regular(const char *path, FILE **f, size_t *size, qvl_error *err);
/* Read a whole regular file of at most `limit` bytes into a NUL-terminated malloc'd buffer. */
qvl_status fu_read_file(const char *path, size_t limit, char **out, size_t *len, qvl_error *err);
/* 1 if `path` names an existing regular file. */
int fu_is_file(const char *path);
/* snprintf into buf; QVL_ERR_LIMIT naming the path if it does not fit. */
qvl_status fu_join(char *buf, size_t n, const char *dir, const char *name, qvl_error *err);

/* A file written whole or not at all: the bytes go to "<path>.tmp", renamed over `path` only when every write
 * succeeded, removed otherwise. */
typedef struct fu_tmpfile {
    FILE *f;
    char *tmp;        /* "<path>.tmp", malloc'd */
    const char *path;
    int bad;          /* a write failed (errno kept in err_no) */
    int err_no;
} fu_tmpfile;
/* Create "<path>.tmp" for writing. */
qvl_status fu_tmp_open(fu_tmpfile *t, const char *path, qvl_error *err);
/* Append n bytes (a failure is remembered and reported by fu_tmp_finish). */
void fu_tmp_write(fu_tmpfile *t, const void *p, size_t n);
/* With s == QVL_OK and every write done: flush (and fsync when `sync`), close and rename into place. Otherwise, or
 * when that fails, close and remove the temporary file. Returns s when it was not QVL_OK, else the outcome. */
qvl_status fu_tmp_finish(fu_tmpfile *t, qvl_status s, int sync, qvl_error *err);

#endif
