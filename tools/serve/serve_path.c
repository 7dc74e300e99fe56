/* serve_path.c — JSON `path` items of `qvl serve` (on only with --allowed-media-path): the name a client sends is
 * normalised without touching the filesystem (absolute, ".", ".." and "//" resolved) and refused unless it is under
 * the allowed root, before anything is opened: whether a file outside the root exists is never told apart. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    return 0;
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
