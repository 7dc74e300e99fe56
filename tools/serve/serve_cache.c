/* serve_cache.c — the content-addressed embedding cache of `qvl serve` and `qvl cache`, on disk, shared by
 * processes without a server in between.
 *   root/objects/ab/<key>.safetensors   one entry per key (ab = the key's first two hex digits): "ec_cache" (the
 *                                       item's output matrix, the tensor vLLM's shared-storage encoder-cache
 *                                       connector loads; first, at the 64-byte data start, for zero-copy readers)
 *                                       then "grid_thw" I64 [1, 3] (not 8-byte aligned when the matrix's bytes are
 *                                       not a multiple of 8: read it with memcpy); __metadata__: qvl_entry, key,
 *                                       fingerprint, qvl_version, created, xxh3_128 of the data bytes
 *   root/tmp/                           temporaries: written whole, then renamed into objects/ (atomic; a writer
 *                                       killed mid-write leaves only a temporary, never a torn entry)
 *   root/gc/lock                        flock()ed by a garbage collector
 *   root/vllm-ec/<key>/encoder_cache.safetensors   optional hard links: vLLM's shared_storage_path layout
 * Reads take no lock: the checksum is verified on every read, and a mismatch deletes the entry (a miss).
 * Eviction: least recently used by mtime (reads refresh an mtime older than an hour), down to 90 % of the budget;
 * the collector re-checks each victim's mtime just before deleting it and skips one touched since its scan. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "serve.h"

#define ENTRY_MAX_BYTES ((size_t)4 << 30)

struct srv_cache {
    char root[PATH_MAX / 2];
    uint64_t max_bytes;
    uint64_t approx_bytes; /* this process's running estimate (scan at open, + its own writes) */
    int vllm_links;
    pthread_mutex_t mu;
};

const char *srv_cache_root(const srv_cache *c) { return c->root; }
void srv_cache_set_vllm_links(srv_cache *c, int on) { c->vllm_links = on; }

int srv_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'K': case 'k': shift = 10; break;
        case 'M': case 'm': shift = 20; break;
        case 'G': case 'g': shift = 30; break;
        case 'T': case 't': shift = 40; break;
        default: return -1;
        }
        end++;
        if (*end == 'i') end++;
        if (*end == 'B' || *end == 'b') end++;
        if (*end) return -1;
    }
    if (shift && v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int mkdir_p(const char *dir) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return -1;
    return 0;
}

static void entry_path(const srv_cache *c, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/objects/%.2s/%s.safetensors", c->root, key, key);
}

srv_cache *srv_cache_open(const char *root, uint64_t max_bytes, char *msg, size_t cap) {
    srv_cache *c = calloc(1, sizeof *c);
    if (!c || strlen(root) >= sizeof c->root - 128) {
        snprintf(msg, cap, "cache root '%s' is too long", root);
        free(c);
        return NULL;
    }
    snprintf(c->root, sizeof c->root, "%s", root);
    c->max_bytes = max_bytes;
    char d[PATH_MAX];
    static const char *subs[] = {"objects", "tmp", "gc", "vllm-ec"};
    for (int i = 0; i < 4; i++) {
        snprintf(d, sizeof d, "%s/%s", root, subs[i]);
        if (mkdir_p(d)) {
            snprintf(msg, cap, "cannot create cache directory %s: %s", d, strerror(errno));
            free(c);
            return NULL;
        }
    }
    snprintf(d, sizeof d, "%s/CACHEDIR.TAG", root);
    int fd = open(d, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
        static const char tag[] = "Signature: 8a477f597d28d172789f06886806bc55\n# qvl embedding cache\n";
        if (write(fd, tag, sizeof tag - 1) < 0) { /* only a marker for backup tools */ }
        close(fd);
    }
    pthread_mutex_init(&c->mu, NULL);
    size_t n;
    srv_cache_scan(c, &c->approx_bytes, &n);
    return c;
}

void srv_cache_close(srv_cache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void srv_entry_free(srv_entry *e) {
    free(e->file);
    memset(e, 0, sizeof *e);
}

static void hash_hex(const void *p, size_t n, char hex[33]) {
    XXH128_hash_t h = XXH3_128bits(p, n);
    snprintf(hex, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}

static int read_all(int fd, uint8_t *p, size_t n) {
    size_t off = 0;
    while (off < n) {
        ssize_t r = read(fd, p + off, n - off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        off += (size_t)r;
    }
    return 0;
}

/* Parse and verify an entry file in memory: 0 ok, -1 corrupt. */
static int entry_parse(uint8_t *file, size_t len, const char *key, srv_entry *out) {
    if (len < 8) return -1;
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)file[k] << (8 * k);
    if (hl > len - 8 || hl > (64u << 20)) return -1;
    cJSON *h = cJSON_ParseWithLength((const char *)file + 8, (size_t)hl);
    if (!h) return -1;
    int rc = -1;
    const uint8_t *data = file + 8 + hl;
    size_t dlen = len - 8 - (size_t)hl;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(meta, "key");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(meta, "xxh3_128");
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(h, "ec_cache");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(h, "grid_thw");
    char hex[33];
    if (!cJSON_IsString(k) || strcmp(k->valuestring, key) || !cJSON_IsString(x) || !ec || !g) goto done;
    hash_hex(data, dlen, hex);
    if (strcmp(hex, x->valuestring)) goto done;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(ec, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(ec, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(ec, "data_offsets");
    const cJSON *gof = cJSON_GetObjectItemCaseSensitive(g, "data_offsets");
    if (!cJSON_IsString(dt) || strlen(dt->valuestring) >= sizeof out->dtype || !cJSON_IsArray(sh) ||
        cJSON_GetArraySize(sh) < 2 || cJSON_GetArraySize(sh) > 3 || cJSON_GetArraySize(of) != 2 ||
        cJSON_GetArraySize(gof) != 2)
        goto done;
    double b = cJSON_GetArrayItem(of, 0)->valuedouble, e = cJSON_GetArrayItem(of, 1)->valuedouble;
    double gb = cJSON_GetArrayItem(gof, 0)->valuedouble, ge = cJSON_GetArrayItem(gof, 1)->valuedouble;
    if (!(b >= 0 && e >= b && e <= (double)dlen && gb >= 0 && ge == gb + 24 && ge <= (double)dlen)) goto done;
    size_t esz = strcmp(dt->valuestring, "F32") == 0 ? 4 : 2;
    double elems = 1;
    out->ndim = cJSON_GetArraySize(sh);
    for (int i = 0; i < out->ndim; i++) {
        double v = cJSON_GetArrayItem(sh, i)->valuedouble;
        if (!(v >= 0 && v < 1e12)) goto done;
        out->shape[i] = (int64_t)v;
        elems *= v;
    }
    if (elems * (double)esz != e - b) goto done;
    int64_t grid[3];
    memcpy(grid, data + (size_t)gb, sizeof grid);
    if (grid[0] < 1 || grid[1] < 1 || grid[2] < 1 || grid[0] > INT32_MAX || grid[1] > INT32_MAX || grid[2] > INT32_MAX)
        goto done;
    out->grid.t = (int32_t)grid[0], out->grid.h = (int32_t)grid[1], out->grid.w = (int32_t)grid[2];
    snprintf(out->dtype, sizeof out->dtype, "%s", dt->valuestring);
    out->data = data + (size_t)b;
    out->nbytes = (size_t)(e - b);
    rc = 0;
done:
    cJSON_Delete(h);
    return rc;
}

int srv_cache_get(srv_cache *c, const char *key, srv_entry *out, int *corrupt) {
    memset(out, 0, sizeof *out);
    *corrupt = 0;
    if (!srv_is_key(key)) return 0;
    char path[PATH_MAX];
    entry_path(c, key, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat st;
    uint8_t *file = NULL;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > ENTRY_MAX_BYTES) goto bad;
    file = malloc(st.st_size ? (size_t)st.st_size : 1);
    if (!file) {
        close(fd);
        return 0; /* no memory: a miss, the entry is fine */
    }
    if (read_all(fd, file, (size_t)st.st_size)) goto bad;
    if (entry_parse(file, (size_t)st.st_size, key, out)) goto bad;
    close(fd);
    out->file = file;
    out->file_len = (size_t)st.st_size;
    if (time(NULL) - st.st_mtime > 3600) utimensat(AT_FDCWD, path, NULL, 0); /* LRU: used now */
    return 1;
bad:
    close(fd);
    free(file);
    memset(out, 0, sizeof *out);
    unlink(path);
    *corrupt = 1;
    return 0;
}

int srv_cache_exists(srv_cache *c, const char *key, uint64_t *size) {
    if (!srv_is_key(key)) return 0;
    char path[PATH_MAX];
    entry_path(c, key, path, sizeof path);
    struct stat st;
    if (lstat(path, &st) || !S_ISREG(st.st_mode)) return 0;
    if (size) *size = (uint64_t)st.st_size;
    return 1;
}

int srv_cache_open_fd(srv_cache *c, const char *key) {
    if (!srv_is_key(key)) return -1;
    char path[PATH_MAX];
    entry_path(c, key, path, sizeof path);
    return open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
}

int srv_cache_put(srv_cache *c, const char *key, const char *dtype, int ndim, const int64_t *shape, const void *data,
                  size_t nbytes, qvl_grid grid, const char *fingerprint, uint64_t *evicted_bytes) {
    if (evicted_bytes) *evicted_bytes = 0;
    if (!srv_is_key(key)) return -1;
    int64_t g[3] = {grid.t, grid.h, grid.w};
    /* The checksum covers the data bytes as laid out: ec_cache, then grid_thw. */
    size_t dlen = nbytes + sizeof g;
    uint8_t *dbuf = malloc(dlen);
    if (!dbuf) return -1;
    memcpy(dbuf, data, nbytes);
    memcpy(dbuf + nbytes, g, sizeof g);
    char hex[33], created[32], ver[32];
    hash_hex(dbuf, dlen, hex);
    free(dbuf);
    snprintf(created, sizeof created, "%lld", (long long)time(NULL));
    snprintf(ver, sizeof ver, "%s", qvl_version());
    const char *meta[] = {"qvl_entry", "1", "key", key, "fingerprint", fingerprint ? fingerprint : "",
                          "qvl_version", ver, "created", created, "xxh3_128", hex};
    srv_tensor t[2];
    memset(t, 0, sizeof t);
    t[0].name = "ec_cache", t[0].dtype = dtype, t[0].ndim = ndim, t[0].data = data, t[0].nbytes = nbytes;
    for (int i = 0; i < ndim; i++) t[0].shape[i] = shape[i];
    t[1].name = "grid_thw", t[1].dtype = "I64", t[1].ndim = 2, t[1].shape[0] = 1, t[1].shape[1] = 3;
    t[1].data = g, t[1].nbytes = sizeof g;
    uint8_t *file;
    size_t flen;
    if (srv_st_build(t, 2, meta, 6, &file, &flen)) return -1;
    char tmp[PATH_MAX], dst[PATH_MAX], dir[PATH_MAX];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(tmp, sizeof tmp, "%s/tmp/%ld.%lx.%lx", c->root, (long)getpid(), (unsigned long)pthread_self(),
             (unsigned long)ts.tv_nsec ^ (unsigned long)(uintptr_t)&ts);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    int rc = -1;
    if (fd >= 0) {
        size_t off = 0;
        while (off < flen) {
            ssize_t w = write(fd, file + off, flen - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            off += (size_t)w;
        }
        int ok = off == flen;
        if (close(fd)) ok = 0;
        snprintf(dir, sizeof dir, "%s/objects/%.2s", c->root, key);
        entry_path(c, key, dst, sizeof dst);
        if (ok && (mkdir(dir, 0755) == 0 || errno == EEXIST) && rename(tmp, dst) == 0) rc = 0;
        else unlink(tmp);
    }
    free(file);
    if (rc) return -1;
    if (c->vllm_links) {
        snprintf(dir, sizeof dir, "%s/vllm-ec/%s", c->root, key);
        snprintf(tmp, sizeof tmp, "%s/encoder_cache.safetensors", dir);
        if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
            unlink(tmp);
            if (link(dst, tmp)) { /* a link is an optional view; a failure leaves the entry as it is */ }
        }
    }
    pthread_mutex_lock(&c->mu);
    c->approx_bytes += flen;
    int over = c->max_bytes && c->approx_bytes > c->max_bytes;
    pthread_mutex_unlock(&c->mu);
    if (over) {
        size_t n;
        uint64_t ev = 0;
        if (srv_cache_gc(c, 0, &ev, &n) == 0 && evicted_bytes) *evicted_bytes = ev;
    }
    return 0;
}

typedef struct scan_ent {
    char name[80]; /* "ab/<key>.safetensors" */
    uint64_t size;
    struct timespec mtime;
} scan_ent;

static int by_mtime(const void *a, const void *b) {
    const scan_ent *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Every entry file under objects/ (name, size, mtime): a malloc'd array (NULL when empty or on failure). */
static scan_ent *scan(const srv_cache *c, size_t *n_out) {
    *n_out = 0;
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s/objects", c->root);
    DIR *top = opendir(d);
    if (!top) return NULL;
    scan_ent *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *s;
    while ((s = readdir(top))) {
        if (strlen(s->d_name) != 2 || s->d_name[0] == '.') continue;
        char sd[PATH_MAX];
        snprintf(sd, sizeof sd, "%s/%s", d, s->d_name);
        DIR *sub = opendir(sd);
        if (!sub) continue;
        struct dirent *e;
        while ((e = readdir(sub))) {
            size_t l = strlen(e->d_name);
            if (l != 64 + 12 || strcmp(e->d_name + 64, ".safetensors")) continue;
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", sd, e->d_name);
            struct stat st;
            if (lstat(p, &st) || !S_ISREG(st.st_mode)) continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                scan_ent *q = realloc(v, nc * sizeof *v);
                if (!q) break;
                v = q;
                cap = nc;
            }
            snprintf(v[n].name, sizeof v[n].name, "%s/%s", s->d_name, e->d_name);
            v[n].size = (uint64_t)st.st_size;
            v[n].mtime = st.st_mtim;
            n++;
        }
        closedir(sub);
    }
    closedir(top);
    *n_out = n;
    return v;
}

void srv_cache_scan(srv_cache *c, uint64_t *bytes, size_t *entries) {
    size_t n;
    scan_ent *v = scan(c, &n);
    uint64_t b = 0;
    for (size_t i = 0; i < n; i++) b += v[i].size;
    free(v);
    *bytes = b;
    *entries = n;
}

int srv_cache_gc(srv_cache *c, uint64_t target, uint64_t *evicted_bytes, size_t *evicted_entries) {
    *evicted_bytes = 0;
    *evicted_entries = 0;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/gc/lock", c->root);
    int lf = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (lf < 0) return -1;
    if (flock(lf, LOCK_EX | LOCK_NB)) {
        close(lf);
        return -1; /* another collector runs */
    }
    if (!target) target = c->max_bytes / 10 * 9;
    size_t n;
    scan_ent *v = scan(c, &n);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += v[i].size;
    if (v && total > target) qsort(v, n, sizeof *v, by_mtime);
    for (size_t i = 0; i < n && total > target; i++) {
        snprintf(p, sizeof p, "%s/objects/%s", c->root, v[i].name);
        struct stat st;
        if (lstat(p, &st)) { /* gone already */
            total -= v[i].size;
            continue;
        }
        if (st.st_mtim.tv_sec != v[i].mtime.tv_sec || st.st_mtim.tv_nsec != v[i].mtime.tv_nsec) continue;
        if (unlink(p) == 0) {
            total -= v[i].size;
            *evicted_bytes += v[i].size;
            (*evicted_entries)++;
            char key[65];
            snprintf(key, sizeof key, "%.64s", v[i].name + 3);
            snprintf(p, sizeof p, "%s/vllm-ec/%s/encoder_cache.safetensors", c->root, key);
            if (unlink(p) == 0) {
                snprintf(p, sizeof p, "%s/vllm-ec/%s", c->root, key);
                rmdir(p);
            }
        }
    }
    free(v);
    /* Temporaries older than an hour: debris of killed writers. */
    snprintf(p, sizeof p, "%s/tmp", c->root);
    DIR *d = opendir(p);
    if (d) {
        struct dirent *e;
        time_t now = time(NULL);
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char t[PATH_MAX];
            snprintf(t, sizeof t, "%s/tmp/%s", c->root, e->d_name);
            struct stat st;
            if (lstat(t, &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime > 3600) unlink(t);
        }
        closedir(d);
    }
    pthread_mutex_lock(&c->mu);
    c->approx_bytes = total;
    pthread_mutex_unlock(&c->mu);
    flock(lf, LOCK_UN);
    close(lf);
    return 0;
}

void srv_cache_verify(srv_cache *c, size_t *ok, size_t *bad) {
    *ok = *bad = 0;
    size_t n;
    scan_ent *v = scan(c, &n);
    for (size_t i = 0; i < n; i++) {
        char key[65];
        snprintf(key, sizeof key, "%.64s", v[i].name + 3);
        srv_entry e;
        int corrupt;
        if (srv_cache_get(c, key, &e, &corrupt)) (*ok)++;
        else if (corrupt) (*bad)++;
        srv_entry_free(&e);
    }
    free(v);
}

int srv_cache_export_vllm(srv_cache *c, const char *dir, size_t *count) {
    *count = 0;
    size_t n;
    scan_ent *v = scan(c, &n);
    if (mkdir_p(dir)) {
        free(v);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char key[65], src[PATH_MAX], d[PATH_MAX], dst[PATH_MAX];
        snprintf(key, sizeof key, "%.64s", v[i].name + 3);
        snprintf(src, sizeof src, "%s/objects/%s", c->root, v[i].name);
        snprintf(d, sizeof d, "%s/%s", dir, key);
        snprintf(dst, sizeof dst, "%s/encoder_cache.safetensors", d);
        if (mkdir(d, 0755) && errno != EEXIST) {
            rc = -1;
            continue;
        }
        unlink(dst);
        if (link(src, dst) && symlink(src, dst)) {
            rc = -1;
            continue;
        }
        (*count)++;
    }
    free(v);
    return rc;
}
