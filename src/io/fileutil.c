/* fileutil.c — see fileutil.h. */
#include "io/fileutil.h"

#include <errno.h>
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
    int k = snprintf(buf, n, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= n) return err_fail(err, QVL_ERR_LIMIT, "path too long: %s/%s", dir, name);
    return QVL_OK;
}

qvl_status fu_open_regular(const char *path, FILE **f, size_t *size, qvl_error *err) {
    *f = fopen(path, "rb");
    if (!*f) return err_fail(err, QVL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    qvl_status s = QVL_OK;
    if (fstat(fileno(*f), &st) != 0 || !S_ISREG(st.st_mode))
        s = err_fail(err, QVL_ERR_IO, "%s: not a regular file", path);
    else if ((uint64_t)st.st_size > SIZE_MAX) s = err_fail(err, QVL_ERR_LIMIT, "%s: file too large", path);
    if (s != QVL_OK) {
        fclose(*f);
        *f = NULL;
        return s;
    }
    *size = (size_t)st.st_size;
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
        free(buf);
        fclose(f);
        return err_fail(err, QVL_ERR_IO, "%s: short read", path);
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return QVL_OK;
}

qvl_status fu_tmp_open(fu_tmpfile *t, const char *path, qvl_error *err) {
    memset(t, 0, sizeof *t);
    const size_t plen = strlen(path);
    if (!(t->tmp = malloc(plen + 5))) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    memcpy(t->tmp, path, plen);
    memcpy(t->tmp + plen, ".tmp", 5);
    t->path = path;
    if (!(t->f = fopen(t->tmp, "wb"))) {
        qvl_status s = err_fail(err, QVL_ERR_IO, "%s: cannot create: %s", t->tmp, strerror(errno));
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
    if (s == QVL_OK && !t->bad && (fflush(t->f) != 0 || (sync && fsync(fileno(t->f)) != 0)))
        t->bad = 1, t->err_no = errno;
    if (fclose(t->f) != 0 && !t->bad) t->bad = 1, t->err_no = errno;
    t->f = NULL;
    if (s == QVL_OK && t->bad) s = err_fail(err, QVL_ERR_IO, "%s: write failed: %s", t->tmp, strerror(t->err_no));
    if (s == QVL_OK && rename(t->tmp, t->path) != 0)
        s = err_fail(err, QVL_ERR_IO, "%s: cannot rename from %s: %s", t->path, t->tmp, strerror(errno));
    if (s != QVL_OK) remove(t->tmp);
    free(t->tmp);
    t->tmp = NULL;
    return s;
}
