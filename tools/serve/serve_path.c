/* serve_path.c — JSON `path` items of `qvl serve` (on only with --allowed-media-path). The name a client sends is
 * normalised without touching the filesystem (absolute, ".", ".." and "//" resolved) and refused unless it is under
 * the allowed root, before anything is opened: whether a file outside the root exists is never told apart. It is
 * then opened from the root's descriptor one component at a time with O_NOFOLLOW, so no symbolic link is followed
 * and nothing outside the root is opened, and the file read into memory once, under the item and request byte
 * limits checked on its fstat size before the read. The item goes on as ENCODED bytes: its cache key and its decode
 * see the same bytes, and no name is resolved again later (a file swapped for a link to another one after the check
 * can be neither what is encoded nor what is cached under the first one's key). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve.h"

int srv_path_normalize(const char *cwd, const char *path, char *out, size_t cap) {
    if (!path || !*path || cap < 2) return -1;
    /* the absolute form: components are appended to out one by one, ".." drops the last one ("/.." is "/") */
    size_t n = 0;
    out[n++] = '/';
    for (int part = path[0] == '/' ? 1 : 0; part < 2; part++) {
        const char *s = part == 0 ? cwd : path;
        if (!s) return -1;
        while (*s) {
            while (*s == '/') s++;
            const char *e = s;
            while (*e && *e != '/') e++;
            const size_t k = (size_t)(e - s);
            if (k == 0 || (k == 1 && s[0] == '.')) {
                /* nothing */
            } else if (k == 2 && s[0] == '.' && s[1] == '.') {
                while (n > 1 && out[n - 1] != '/') n--;
                if (n > 1) n--; /* the '/' before the dropped component */
            } else {
                if (n > 1) {
                    if (n + 1 >= cap) return -1;
                    out[n++] = '/';
                }
                if (n + k >= cap) return -1;
                memcpy(out + n, s, k);
                n += k;
            }
            s = e;
        }
    }
    out[n] = 0;
    return 0;
}

int srv_root_open(srv_root *r, const char *dir, char *msg, size_t cap) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    if (!getcwd(r->cwd, sizeof r->cwd)) {
        snprintf(msg, cap, "the working directory: %s", strerror(errno));
        return -1;
    }
    if (!realpath(dir, r->real)) {
        snprintf(msg, cap, "%s: %s", dir, strerror(errno));
        return -1;
    }
    if (srv_path_normalize(r->cwd, dir, r->given, sizeof r->given)) {
        snprintf(msg, cap, "%s: the path is too long", dir);
        return -1;
    }
    r->fd = open(r->real, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r->fd < 0) {
        snprintf(msg, cap, "%s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

void srv_root_close(srv_root *r) {
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
}

/* The part of the normalised `p` below `root` ("" for the root itself), or NULL when p is not under it. */
static const char *below(const char *root, const char *p) {
    const size_t n = strlen(root);
    if (n == 1) return p + 1; /* the root is "/" */
    if (strncmp(p, root, n) || (p[n] != '/' && p[n] != 0)) return NULL;
    return p[n] == '/' ? p + n + 1 : p + n;
}

const char *srv_path_below(const srv_root *r, const char *norm) {
    const char *rel = below(r->real, norm);
    return rel ? rel : below(r->given, norm);
}

/* Open `rel` (normalised: no "", ".", ".." components) below the directory `dfd`, following no link: each directory
 * as O_PATH, the last component for reading (O_NONBLOCK: a FIFO does not block the open; it is refused by the
 * caller's fstat). The descriptor, or -1 with errno set; *link set when a component was a symbolic link. */
static int open_beneath(int dfd, const char *rel, int *link) {
    *link = 0;
    if (!*rel) return openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char comp[PATH_MAX];
    int cur = dfd;
    for (;;) {
        const char *slash = strchr(rel, '/');
        const size_t k = slash ? (size_t)(slash - rel) : strlen(rel);
        if (k >= sizeof comp) {
            errno = ENAMETOOLONG;
            break;
        }
        memcpy(comp, rel, k);
        comp[k] = 0;
        const int flags = slash ? O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                                : O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
        int fd = openat(cur, comp, flags);
        if (fd < 0) {
            const int saved = errno;
            struct stat st;
            if ((saved == ELOOP || saved == ENOTDIR) && fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISLNK(st.st_mode))
                *link = 1;
            errno = saved;
        }
        if (cur != dfd) close(cur);
        if (fd < 0 || !slash) return fd;
        cur = fd;
        rel = slash + 1;
    }
    if (cur != dfd) close(cur);
    return -1;
}

int srv_read_path(const srv_root *r, srv_in_item *it, size_t i, size_t max_item_bytes, size_t max_body_bytes,
                  size_t *budget, srv_err *e) {
    char norm[PATH_MAX];
    const char *name = it->path;
    if (srv_path_normalize(r->cwd, name, norm, sizeof norm)) {
        srv_err_set(e, 400, (int)i, "item %zu: the path is too long", i);
        return -1;
    }
    const char *rel = srv_path_below(r, norm);
    if (!rel) { /* decided from the name alone: nothing outside the root is looked at */
        srv_err_set(e, 400, (int)i, "item %zu: '%s' is not under the allowed media path", i, name);
        return -1;
    }
    int link = 0;
    const int fd = open_beneath(r->fd, rel, &link);
    if (fd < 0) {
        if (link)
            srv_err_set(e, 400, (int)i, "item %zu: '%s' goes through a symbolic link, and links are not followed "
                        "under the allowed media path", i, name);
        else
            srv_err_set(e, 422, (int)i, "item %zu: cannot open '%s': %s", i, name, strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    uint8_t *data = NULL;
    if (fstat(fd, &st)) {
        srv_err_set(e, 422, (int)i, "item %zu: cannot open '%s': %s", i, name, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        srv_err_set(e, 400, (int)i, "item %zu: '%s' is a directory: the server does not accept a directory of frames "
                    "(send a video file, or the items' bytes)", i, name);
    } else if (!S_ISREG(st.st_mode)) {
        srv_err_set(e, 422, (int)i, "item %zu: '%s' is not a regular file", i, name);
    } else if (st.st_size <= 0) {
        srv_err_set(e, 422, (int)i, "item %zu: '%s' is empty", i, name);
    } else if ((uint64_t)st.st_size > max_item_bytes) {
        srv_err_set(e, 413, (int)i, "item %zu: %lld bytes, over the %zu-byte item limit (max_input_bytes)", i,
                    (long long)st.st_size, max_item_bytes);
    } else if ((uint64_t)st.st_size > *budget) {
        srv_err_set(e, 413, (int)i, "item %zu: %lld bytes, more than the %zu left of the request's %zu-byte body "
                    "limit (max_body_bytes: one request's path items are read into memory, and count as its body)",
                    i, (long long)st.st_size, *budget, max_body_bytes);
    } else if (!(data = malloc((size_t)st.st_size))) {
        srv_err_set(e, 500, (int)i, "item %zu: out of memory for %lld bytes", i, (long long)st.st_size);
    } else {
        const size_t size = (size_t)st.st_size;
        size_t got = 0;
        int rerr = 0;
        while (got < size) {
            const ssize_t k = pread(fd, data + got, size - got, (off_t)got);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) rerr = errno;
            if (k <= 0) break;
            got += (size_t)k;
        }
        if (rerr) {
            srv_err_set(e, 422, (int)i, "item %zu: reading '%s': %s", i, name, strerror(rerr));
        } else if (got < size) {
            srv_err_set(e, 422, (int)i, "item %zu: '%s' changed while it was read (%zu bytes, then %zu)", i, name,
                        size, got);
        } else {
            free(it->path);
            it->path = NULL;
            it->data = data;
            it->size = size;
            *budget -= size;
            data = NULL;
            rc = 0;
        }
    }
    free(data);
    close(fd);
    return rc;
}
