/* swap_open.c — a test shim (LD_PRELOAD) that makes one path show other contents after its first open: the second
 * and later opens of QVL_TEST_SWAP_FROM (by that exact string, through open, openat or fopen) open
 * QVL_TEST_SWAP_TO instead. It stands for a file replaced between two reads of it: cli_media.sh checks that
 * `qvl encode --cache` keys and encodes the same bytes (a file read once) rather than the two versions. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int opens;

/* The path to open in place of `path`: QVL_TEST_SWAP_TO from its second open on, else path itself. */
static const char *swapped(const char *path) {
    const char *from = getenv("QVL_TEST_SWAP_FROM"), *to = getenv("QVL_TEST_SWAP_TO");
    if (!path || !from || !to || strcmp(path, from) != 0) return path;
    return atomic_fetch_add(&opens, 1) ? to : path;
}

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef FILE *(*fopen_fn)(const char *, const char *);

/* The C library's definition of `name` (the next object's after this one). */
static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

/* The mode argument, present only with O_CREAT or O_TMPFILE. */
#define MODE_ARG(flags)                                                         \
    int mode = 0;                                                               \
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {                \
        va_list ap;                                                             \
        va_start(ap, flags);                                                    \
        mode = va_arg(ap, int);                                                 \
        va_end(ap);                                                             \
    }

int open(const char *path, int flags, ...) {
    MODE_ARG(flags);
    return ((open_fn)next("open"))(swapped(path), flags, mode);
}
int open64(const char *path, int flags, ...) {
    MODE_ARG(flags);
    return ((open_fn)next("open64"))(swapped(path), flags, mode);
}
int openat(int dir, const char *path, int flags, ...) {
    MODE_ARG(flags);
    return ((openat_fn)next("openat"))(dir, swapped(path), flags, mode);
}
int openat64(int dir, const char *path, int flags, ...) {
    MODE_ARG(flags);
    return ((openat_fn)next("openat64"))(dir, swapped(path), flags, mode);
}
FILE *fopen(const char *path, const char *how) { return ((fopen_fn)next("fopen"))(swapped(path), how); }
FILE *fopen64(const char *path, const char *how) { return ((fopen_fn)next("fopen64"))(swapped(path), how); }
