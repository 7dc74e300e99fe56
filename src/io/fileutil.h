/* fileutil.h — small file helpers shared by the loaders. */
#ifndef QVL_IO_FILEUTIL_H
#define QVL_IO_FILEUTIL_H

#include <stddef.h>
#include <stdio.h>

#include "qvl.h"

/* What a non-regular file is, for messages: "a FIFO", "a directory", "a device", "a socket", "a special file". */
const char *fu_kind(unsigned mode);
/* Open a path for reading without blocking on it: open(O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_NOCTTY), fstat, refuse
 * anything but a regular file (naming the path and what it is), then clear O_NONBLOCK. *fd and its size. A FIFO,
 * a device or a directory fails at once instead of blocking in open() or read(). */
qvl_status fu_open_fd(const char *path, int *fd, size_t *size, qvl_error *err);
/* fu_open_fd as a FILE*: *f and its size. Errors name the path (cannot open, not a regular file, too large for
 * size_t). */
qvl_status fu_open_regular(const char *path, FILE **f, size_t *size, qvl_error *err);
/* Read a whole regular file of at most `limit` bytes into a NUL-terminated malloc'd buffer. */
qvl_status fu_read_file(const char *path, size_t limit, char **out, size_t *len, qvl_error *err);
/* pread n bytes at byte `off` of fd into p, retrying interrupted and short reads; *got: the bytes read. 0 when
 * they all were or the file ended first (*got < n), -1 with errno set on a read error (EOVERFLOW: off + n past
 * what off_t holds). */
int fu_pread_full(int fd, void *p, size_t n, uint64_t off, size_t *got);
/* 1 if `path` names an existing regular file. */
int fu_is_file(const char *path);
/* 1 if something exists at `path` (following links): a loader that finds it opens it and reports what it is. */
int fu_exists(const char *path);
/* dir/name into buf (no second '/' where dir ends in one: "frames/" + name); QVL_ERR_LIMIT naming the path if it does
 * not fit. */
qvl_status fu_join(char *buf, size_t n, const char *dir, const char *name, qvl_error *err);

/* Refuse a destination that exists and is not a regular file (a directory, a FIFO, a device, a socket; a symlink
 * to one): replacing it would destroy it, or writing it would block. A path ending in '/', "." or ".." names a
 * directory. QVL_ERR_INVALID_ARG naming the path and what it is. */
qvl_status fu_check_dest(const char *path, qvl_error *err);
/* Create a unique temporary file "<dir>/.<name>.XXXXXX" beside `path` (mkstemp: O_CREAT|O_EXCL, mode 0600, never
 * following a link planted there). The fd, and the malloc'd name in *tmp; -1 with errno set on failure. A
 * temporary left by a killed process is a dot-file with a random name: it never clobbers, or is mistaken for,
 * anything else. */
int fu_make_tmp(const char *path, char **tmp);

/* A file written whole or not at all: the bytes go to a unique temporary beside `path` (fu_make_tmp), renamed over
 * `path` only when every write succeeded, removed otherwise. */
typedef struct fu_tmpfile {
    FILE *f;
    char *tmp;        /* the temporary's name, malloc'd */
    const char *path;
    int bad;          /* a write failed (errno kept in err_no) */
    int err_no;
} fu_tmpfile;
/* Check the destination (fu_check_dest) and create its temporary for writing. */
qvl_status fu_tmp_open(fu_tmpfile *t, const char *path, qvl_error *err);
/* Append n bytes (a failure is remembered and reported by fu_tmp_finish). */
void fu_tmp_write(fu_tmpfile *t, const void *p, size_t n);
/* With s == QVL_OK and every write done: flush (and fsync when `sync`), close and rename into place. Otherwise, or
 * when that fails, close and remove the temporary file. Returns s when it was not QVL_OK, else the outcome. */
qvl_status fu_tmp_finish(fu_tmpfile *t, qvl_status s, int sync, qvl_error *err);

#endif
