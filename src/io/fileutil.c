/* fileutil.c — see fileutil.h. */
#include "io/fileutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

int fu_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

qvl_status fu_join(char *buf, size_t n, const char *dir, const char *name, qvl_error *err) {
    const size_t dl = strlen(dir);
    const char *sep = dl && dir[dl - 1] == '/' ? "" : "/";
    int k = snprintf(buf, n, "%s%s%s", dir, sep, name);
    if (k < 0 || (size_t)k >= n) return err_fail(err, QVL_ERR_LIMIT, "path too long: %s%s%s", dir, sep, name);
    return QVL_OK;
}

int fu_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

const char *fu_kind(unsigned mode) {
    mode_t m = (mode_t)mode;
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) || S_ISBLK(m) ? "a device"
           : S_ISSOCK(m) ? "a socket" : S_ISREG(m) ? "a regular file" : "a special file";
}

qvl_status fu_open_fd(const char *path, int *fd, size_t *size, qvl_error *err) {
    *fd = -1;
    *size = 0;
    /* O_NONBLOCK: opening a FIFO with no writer (or some devices) would otherwise block here. */
    int d = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (d < 0) return err_fail(err, QVL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    qvl_status s = QVL_OK;
    int fl;
    if (fstat(d, &st) != 0) s = err_fail(err, QVL_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = err_fail(err, QVL_ERR_IO, "%s: not a regular file (it is %s)", path, fu_kind((unsigned)st.st_mode));
    else if (st.st_size < 0 || (uint64_t)st.st_size > SIZE_MAX)
        s = err_fail(err, QVL_ERR_LIMIT, "%s: file size %lld does not fit in memory", path, (long long)st.st_size);
    else if ((fl = fcntl(d, F_GETFL)) < 0 || fcntl(d, F_SETFL, fl & ~O_NONBLOCK) != 0)
        s = err_fail(err, QVL_ERR_IO, "%s: cannot clear O_NONBLOCK: %s", path, strerror(errno));
    if (s != QVL_OK) {
        close(d);
        return s;
    }
    *fd = d;
    *size = (size_t)st.st_size;
    return QVL_OK;
}

int fu_pread_full(int fd, void *p, size_t n, uint64_t off, size_t *got) {
    *got = 0;
    if (off > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX - off) return errno = EOVERFLOW, -1;
    while (*got < n) {
        const ssize_t r = pread(fd, (unsigned char *)p + *got, n - *got, (off_t)(off + *got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        *got += (size_t)r;
    }
    return 0;
}

qvl_status fu_open_regular(const char *path, FILE **f, size_t *size, qvl_error *err) {
    *f = NULL;
    int fd;
    TRY(fu_open_fd(path, &fd, size, err));
    if (!(*f = fdopen(fd, "rb"))) { /* it allocates the stream */
        int e = errno;
        close(fd);
        return err_fail(err, e == ENOMEM ? QVL_ERR_NOMEM : QVL_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    return QVL_OK;
}

qvl_status fu_read_file(const char *path, size_t limit, char **out, size_t *len, qvl_error *err) {
    *out = NULL;
    *len = 0;
    FILE *f;
    size_t n;
    TRY(fu_open_regular(path, &f, &n, err));
    if (n > limit) {
        fclose(f);
        return err_fail(err, QVL_ERR_LIMIT, "%s: %zu bytes, more than the %zu allowed", path, n, limit);
    }
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n + 1);
    }
    if (fread(buf, 1, n, f) != n) {
        int bad = ferror(f), e = errno;
        free(buf);
        fclose(f);
        if (bad) return err_fail(err, QVL_ERR_IO, "%s: read error: %s", path, strerror(e));
        return err_fail(err, QVL_ERR_IO, "%s: short read (the file shrank while it was read)", path);
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return QVL_OK;
}

qvl_status fu_check_dest(const char *path, qvl_error *err) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: the output path names a directory, not a file", path);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: exists and is not a regular file (it is %s); refusing to "
                        "replace it", path, fu_kind((unsigned)st.st_mode));
    return QVL_OK;
}

int fu_make_tmp(const char *path, char **out) {
    *out = NULL;
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = slash ? slash + 1 : path;
    size_t n = dl + strlen(base) + 16;
    char *t = malloc(n);
    if (!t) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(t, n, "%.*s.%s.XXXXXX", (int)dl, path, base);
    int fd = mkstemp(t); /* O_CREAT|O_EXCL: a link or file planted at the name makes it pick another */
    if (fd < 0) {
        int e = errno;
        free(t);
        errno = e;
        return -1;
    }
    *out = t;
    return fd;
}

qvl_status fu_tmp_open(fu_tmpfile *t, const char *path, qvl_error *err) {
    memset(t, 0, sizeof *t);
    TRY(fu_check_dest(path, err));
    t->path = path;
    int fd = fu_make_tmp(path, &t->tmp);
    if (fd < 0) return err_fail(err, errno == ENOMEM ? QVL_ERR_NOMEM : QVL_ERR_IO,
                                "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
    if (!(t->f = fdopen(fd, "wb"))) {
        qvl_status s = err_fail(err, errno == ENOMEM ? QVL_ERR_NOMEM : QVL_ERR_IO, "%s: cannot open: %s", t->tmp,
                                strerror(errno));
        close(fd);
        unlink(t->tmp);
        free(t->tmp);
        t->tmp = NULL;
        return s;
    }
    return QVL_OK;
}

void fu_tmp_write(fu_tmpfile *t, const void *p, size_t n) {
    if (!t->bad && n && fwrite(p, 1, n, t->f) != n) t->bad = 1, t->err_no = errno;
}

qvl_status fu_tmp_finish(fu_tmpfile *t, qvl_status s, int sync, qvl_error *err) {
    if (!t->f) return s;
    /* mkstemp made it 0600; the finished file is readable like any other output. */
    if (s == QVL_OK && !t->bad && (fflush(t->f) != 0 || fchmod(fileno(t->f), 0644) != 0 ||
                                   (sync && fsync(fileno(t->f)) != 0)))
        t->bad = 1, t->err_no = errno;
    if (fclose(t->f) != 0 && !t->bad) t->bad = 1, t->err_no = errno;
    t->f = NULL;
    if (s == QVL_OK && t->bad) s = err_fail(err, QVL_ERR_IO, "%s: write failed: %s", t->tmp, strerror(t->err_no));
    if (s == QVL_OK && rename(t->tmp, t->path) != 0)
        s = err_fail(err, QVL_ERR_IO, "%s: cannot rename from %s: %s", t->path, t->tmp, strerror(errno));
    if (s != QVL_OK) unlink(t->tmp);
    free(t->tmp);
    t->tmp = NULL;
    return s;
}
