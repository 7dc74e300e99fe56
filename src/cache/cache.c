/* cache.c — the content-addressed embedding cache on disk (qvl_cache_*, layout and rules in qvl.h), shared by
 * processes without a server in between: readers take no lock and verify every entry; writers write a temporary
 * and rename it into place; a collector holds root/gc/lock and re-checks each victim's mtime and inode, then moves
 * it into tmp/ and deletes it there only if it is still the file it checked (remove_entry).
 * A handle's counters live under its mutex; the directory is scanned at open and by each collection only. */
#include "cache/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "core/error.h"

/* Every path here is the root (at most PATH_MAX / 2 - 129 bytes, checked at open) plus at most ~180 bytes, in
 * PATH_MAX buffers: they cannot truncate, which GCC cannot see through snprintf's "%s". */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#define TOUCH_AFTER_S 3600 /* a hit older than this refreshes its mtime (LRU) */
#define TMP_STALE_S 3600   /* a collector removes temporaries older than this: debris of killed writers */
/* The largest dimension of an entry's matrix (tokens, columns, planes), read or written: each product of three is
 * then checked for overflow in size_t, and the entry size against CACHE_ENTRY_MAX_BYTES. */
#define DIM_MAX ((uint64_t)1 << 40)

struct qvl_cache {
    char root[PATH_MAX / 2];
    uint64_t max_bytes;
    int vllm_links;
    pthread_mutex_t mu;
    uint64_t tmp_seq; /* under mu: unique temporary names within the process */
    qvl_cache_stats st; /* under mu */
    void (*evict_hook)(const char *path, void *arg); /* tests only (cache_set_evict_hook) */
    void *evict_hook_arg;
};

int cache_is_key(const char *s) {
    if (!s) return 0;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return s[64] == 0;
}

static qvl_status check_key(const char *key, qvl_error *err) {
    if (cache_is_key(key)) return QVL_OK;
    return err_fail(err, QVL_ERR_INVALID_ARG, "cache key '%.80s' is not 64 lowercase hex digits (qvl_item_key)",
                    key ? key : "(null)");
}

static void entry_path(const qvl_cache *c, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/objects/%.2s/%s.safetensors", c->root, key, key);
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

static void hash_hex(XXH128_hash_t h, char hex[33]) {
    snprintf(hex, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}

static size_t dtype_size(const char *dt) {
    if (!strcmp(dt, "F32")) return 4;
    if (!strcmp(dt, "F16") || !strcmp(dt, "BF16")) return 2;
    return 0;
}

/* A JSON number that is a whole value in [0, max]. */
static int json_u64(const cJSON *j, uint64_t max, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= (double)max && v <= 9007199254740992.0)) return 0;
    uint64_t u = (uint64_t)v;
    if ((double)u != v) return 0;
    *out = u;
    return 1;
}

static int json_pair(const cJSON *a, uint64_t max, uint64_t *b, uint64_t *e) {
    return cJSON_IsArray(a) && cJSON_GetArraySize(a) == 2 && json_u64(cJSON_GetArrayItem(a, 0), max, b) &&
           json_u64(cJSON_GetArrayItem(a, 1), max, e) && *b <= *e;
}

static void copy_meta(const cJSON *meta, const char *name, char *dst, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, name);
    if (cJSON_IsString(v) && strlen(v->valuestring) < cap) snprintf(dst, cap, "%s", v->valuestring);
}

qvl_status cache_entry_parse(const uint8_t *file, size_t len, const char *key, qvl_cache_entry *e, qvl_error *err) {
    memset(e, 0, sizeof *e);
    if (len < 8) return err_fail(err, QVL_ERR_FORMAT, "entry of %zu bytes: shorter than its header length", len);
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)file[k] << (8 * k);
    if (hl > len - 8 || hl > CACHE_HEADER_MAX_BYTES)
        return err_fail(err, QVL_ERR_FORMAT, "entry header length %" PRIu64 " exceeds the file (%zu bytes) or %" PRIu64,
                        hl, len, CACHE_HEADER_MAX_BYTES);
    cJSON *h = cJSON_ParseWithLength((const char *)file + 8, (size_t)hl);
    if (!h) return err_fail(err, QVL_ERR_FORMAT, "entry header is not JSON");
    qvl_status s = QVL_ERR_FORMAT;
    const uint8_t *data = file + 8 + hl;
    const size_t dlen = len - 8 - (size_t)hl;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(meta, "key");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(meta, "xxh3_128");
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(h, "ec_cache");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(h, "grid_thw");
    if (!cJSON_IsObject(h) || !cJSON_IsString(k) || (key && strcmp(k->valuestring, key)) || !cJSON_IsString(x) ||
        !cJSON_IsObject(ec) || !cJSON_IsObject(g)) {
        err_fail(err, QVL_ERR_FORMAT, "entry header lacks the key, checksum, ec_cache or grid_thw%s",
                 key && cJSON_IsString(k) && strcmp(k->valuestring, key) ? " (or names another key)" : "");
        goto done;
    }
    char hex[33];
    hash_hex(XXH3_128bits(data, dlen), hex);
    if (strcmp(hex, x->valuestring)) {
        err_fail(err, QVL_ERR_FORMAT, "entry checksum mismatch: xxh3_128 of the data is %s, the header says %.40s",
                 hex, x->valuestring);
        goto done;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(ec, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(ec, "shape");
    uint64_t b, end, gb, ge;
    size_t esz = cJSON_IsString(dt) ? dtype_size(dt->valuestring) : 0;
    if (!esz || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) < 2 || cJSON_GetArraySize(sh) > 3 ||
        !json_pair(cJSON_GetObjectItemCaseSensitive(ec, "data_offsets"), dlen, &b, &end) ||
        !json_pair(cJSON_GetObjectItemCaseSensitive(g, "data_offsets"), dlen, &gb, &ge) || ge - gb != 24) {
        err_fail(err, QVL_ERR_FORMAT, "entry tensors: ec_cache needs dtype F32/F16/BF16, a 2-D or 3-D shape and "
                                      "offsets in the data; grid_thw 24 bytes in it");
        goto done;
    }
    e->ndim = cJSON_GetArraySize(sh);
    size_t elems = 1;
    for (int i = 0; i < e->ndim; i++) {
        uint64_t v;
        if (!json_u64(cJSON_GetArrayItem(sh, i), DIM_MAX, &v) ||
            size_mul_overflow(elems, (size_t)v, &elems)) {
            err_fail(err, QVL_ERR_FORMAT, "entry shape: dimension %d is not a whole number of at most 2^40", i);
            goto done;
        }
        e->shape[i] = (int64_t)v;
    }
    size_t want;
    if (size_mul_overflow(elems, esz, &want) || want != end - b) {
        err_fail(err, QVL_ERR_FORMAT, "entry ec_cache: its shape and dtype are not its %" PRIu64 " bytes", end - b);
        goto done;
    }
    int64_t grid[3];
    memcpy(grid, data + gb, sizeof grid);
    for (int i = 0; i < 3; i++)
        if (grid[i] < 1 || grid[i] > INT32_MAX) {
            err_fail(err, QVL_ERR_FORMAT, "entry grid_thw[%d] = %" PRId64 " is not in 1..2^31-1", i, grid[i]);
            goto done;
        }
    e->grid.t = (int32_t)grid[0], e->grid.h = (int32_t)grid[1], e->grid.w = (int32_t)grid[2];
    snprintf(e->dtype, sizeof e->dtype, "%s", dt->valuestring);
    e->data = data + b;
    e->nbytes = (size_t)(end - b);
    /* the one shape rule (qvl_cache_put): one plane is [tokens, cols], more are [planes, tokens, cols] */
    const int three = e->ndim == 3;
    e->n_planes = three ? (size_t)e->shape[0] : 1;
    e->n_tokens = (size_t)e->shape[three];
    e->cols = (size_t)e->shape[three + 1];
    copy_meta(meta, "fingerprint", e->fingerprint, sizeof e->fingerprint);
    copy_meta(meta, "qvl_version", e->qvl_version, sizeof e->qvl_version);
    copy_meta(meta, "xxh3_128", e->xxh3_128, sizeof e->xxh3_128);
    copy_meta(meta, "kind", e->kind, sizeof e->kind); /* absent from entries written without one */
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(meta, "created");
    if (cJSON_IsString(cr)) e->created = strtoll(cr->valuestring, NULL, 10);
    e->result = QVL_CACHE_HIT;
    s = QVL_OK;
done:
    cJSON_Delete(h);
    return s;
}

/* ---- scanning ---- */

typedef struct scan_ent {
    char name[80]; /* "ab/<key>.safetensors" */
    uint64_t size;
    struct timespec mtime;
    dev_t dev; /* the file scanned: a collection removes that one only */
    ino_t ino;
} scan_ent;

static int by_mtime(const void *a, const void *b) {
    const scan_ent *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Every entry file under objects/ (name, size, mtime) into *out (malloc'd; NULL when none). NOMEM on failure. */
static qvl_status scan(const qvl_cache *c, scan_ent **out, size_t *n_out, qvl_error *err) {
    *out = NULL;
    *n_out = 0;
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s/objects", c->root);
    DIR *top = opendir(d);
    if (!top) return err_fail(err, QVL_ERR_IO, "cannot read cache directory %s: %s", d, strerror(errno));
    scan_ent *v = NULL;
    size_t n = 0, cap = 0;
    qvl_status s = QVL_OK;
    struct dirent *sd;
    while (s == QVL_OK && (sd = readdir(top))) {
        if (strlen(sd->d_name) != 2 || sd->d_name[0] == '.') continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%s", d, sd->d_name);
        DIR *dd = opendir(sub);
        if (!dd) continue;
        struct dirent *e;
        while ((e = readdir(dd))) {
            if (strlen(e->d_name) != 64 + 12 || strcmp(e->d_name + 64, ".safetensors")) continue;
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", sub, e->d_name);
            struct stat st;
            if (lstat(p, &st) || !S_ISREG(st.st_mode)) continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                scan_ent *q = nc > SIZE_MAX / sizeof *v ? NULL : realloc(v, nc * sizeof *v);
                if (!q) {
                    s = err_fail(err, QVL_ERR_NOMEM, "out of memory scanning %s (%zu entries)", d, n);
                    break;
                }
                v = q;
                cap = nc;
            }
            snprintf(v[n].name, sizeof v[n].name, "%s/%s", sd->d_name, e->d_name);
            v[n].size = (uint64_t)st.st_size;
            v[n].mtime = st.st_mtim;
            v[n].dev = st.st_dev;
            v[n].ino = st.st_ino;
            n++;
        }
        closedir(dd);
    }
    closedir(top);
    if (s != QVL_OK) {
        free(v);
        return s;
    }
    *out = v;
    *n_out = n;
    return QVL_OK;
}

/* ---- open / close / stats ---- */

void qvl_cache_params_init(qvl_cache_params *p, size_t struct_size) {
    if (!p || struct_size < sizeof(size_t)) return;
    qvl_cache_params d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    size_t n = struct_size < sizeof d ? struct_size : sizeof d;
    memset(p, 0, struct_size);
    memcpy(p, &d, n);
    p->struct_size = struct_size;
}

qvl_status qvl_cache_open(const char *root, const qvl_cache_params *params, qvl_cache **out, qvl_error *err) {
    err_clear(err);
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_open: out is NULL");
    *out = NULL;
    if (!root || !*root) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_open: no cache root");
    qvl_cache_params p;
    qvl_cache_params_init(&p, sizeof p);
    if (params) {
        if (params->struct_size < sizeof(size_t) || params->struct_size > 4096)
            return err_fail(err, QVL_ERR_INVALID_ARG,
                            "qvl_cache_params.struct_size %zu is wrong (qvl_cache_params_init)", params->struct_size);
        memcpy(&p, params, params->struct_size < sizeof p ? params->struct_size : sizeof p);
    }
    qvl_cache *c = calloc(1, sizeof *c);
    if (!c) return err_fail(err, QVL_ERR_NOMEM, "out of memory for a cache handle");
    if (strlen(root) >= sizeof c->root - 128) {
        free(c);
        return err_fail(err, QVL_ERR_LIMIT, "cache root '%.64s...' is too long (%zu bytes, at most %zu)", root,
                        strlen(root), sizeof c->root - 129);
    }
    c->max_bytes = p.max_bytes;
    c->vllm_links = p.vllm_links != 0;
    static const char *const subs[] = {"objects", "tmp", "gc", "vllm-ec"};
    char d[PATH_MAX];
    if (p.existing) { /* nothing created: a directory without objects/ is not a cache */
        struct stat st;
        snprintf(d, sizeof d, "%s/objects", root);
        const int found = stat(d, &st) == 0;
        if (!found || !S_ISDIR(st.st_mode)) {
            const char *why = found ? "not a directory" : strerror(errno);
            free(c);
            return err_fail(err, QVL_ERR_IO, "%s is not a qvl cache (%s: %s)", root, d, why);
        }
    }
    for (int i = 0; i < 4 && !p.existing; i++) {
        snprintf(d, sizeof d, "%s/%s", root, subs[i]);
        if (mkdir_p(d)) {
            int e = errno;
            free(c);
            return err_fail(err, QVL_ERR_IO, "cannot create cache directory %s: %s", d, strerror(e));
        }
    }
    /* The root resolved (absolute, without links): the handle then works whatever the working directory becomes,
     * and the symbolic links export_vllm falls back to (across file systems) name their entries from anywhere. */
    char *abs = realpath(root, NULL);
    if (!abs || strlen(abs) >= sizeof c->root - 128) {
        int e = errno;
        free(c);
        qvl_status s = abs ? err_fail(err, QVL_ERR_LIMIT, "cache root %.64s... resolves to %zu bytes (at most %zu)",
                                      root, strlen(abs), sizeof c->root - 129)
                           : err_fail(err, QVL_ERR_IO, "cannot resolve cache root %s: %s", root, strerror(e));
        free(abs);
        return s;
    }
    snprintf(c->root, sizeof c->root, "%s", abs);
    free(abs);
    snprintf(d, sizeof d, "%s/CACHEDIR.TAG", c->root);
    int fd = p.existing ? -1 : open(d, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
        static const char tag[] = "Signature: 8a477f597d28d172789f06886806bc55\n# qvl embedding cache\n";
        if (write(fd, tag, sizeof tag - 1) < 0) { /* only a marker for backup tools */ }
        close(fd);
    }
    scan_ent *v;
    size_t n;
    qvl_status s = scan(c, &v, &n, err);
    if (s != QVL_OK) {
        free(c);
        return s;
    }
    for (size_t i = 0; i < n; i++) c->st.bytes += v[i].size;
    c->st.entries = n;
    free(v);
    if (pthread_mutex_init(&c->mu, NULL)) {
        free(c);
        return err_fail(err, QVL_ERR_INTERNAL, "pthread_mutex_init failed");
    }
    *out = c;
    return QVL_OK;
}

void qvl_cache_close(qvl_cache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void qvl_cache_get_stats_sized(qvl_cache *c, qvl_cache_stats *out, size_t size) {
    if (!out) return;
    qvl_cache_stats s;
    memset(&s, 0, sizeof s);
    if (c) {
        pthread_mutex_lock(&c->mu);
        s = c->st;
        pthread_mutex_unlock(&c->mu);
    }
    memcpy(out, &s, size < sizeof s ? size : sizeof s);
}

/* ---- reads ---- */

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

/* A deleted entry's bytes leave the handle's tally (never below zero: other processes' entries are not in it). */
static void tally_removed(qvl_cache *c, uint64_t size) {
    c->st.bytes = c->st.bytes > size ? c->st.bytes - size : 0;
    if (c->st.entries) c->st.entries--;
}

/* Remove key's entry file at `path` only if it is still the file (dev, ino) the caller checked: it is renamed into
 * tmp/ first (after that no put can replace what is removed), checked there, and unlinked; a file a put renamed
 * into place since the caller's check is put back (linked, so that a still newer one is not replaced). The entry's
 * vLLM link goes with it when it is a link to that same file (else vLLM would go on loading what was removed, and
 * no collection, which walks objects/, would ever remove it). 1 when the entry was removed. */
static int remove_entry(qvl_cache *c, const char *path, const char *key, dev_t dev, ino_t ino) {
    char moved[PATH_MAX], dir[PATH_MAX];
    pthread_mutex_lock(&c->mu);
    uint64_t seq = ++c->tmp_seq;
    pthread_mutex_unlock(&c->mu);
    snprintf(moved, sizeof moved, "%s/tmp/evict.%ld.%" PRIx64 ".%lx", c->root, (long)getpid(), seq,
             (unsigned long)pthread_self());
    int r = rename(path, moved);
    if (r && errno == ENOENT) { /* tmp/ removed since open (a cleaned-out root): made again */
        snprintf(dir, sizeof dir, "%s/tmp", c->root);
        if (mkdir_p(dir) == 0) r = rename(path, moved);
    }
    if (r) return 0;
    struct stat now;
    if (lstat(moved, &now) || now.st_dev != dev || now.st_ino != ino) {
        if (link(moved, path) && errno != EEXIST) rename(moved, path); /* no hard links here: renamed back */
        else unlink(moved);
        return 0;
    }
    unlink(moved);
    char l[PATH_MAX + 64];
    snprintf(l, sizeof l, "%s/vllm-ec/%.64s/encoder_cache.safetensors", c->root, key);
    if (lstat(l, &now) == 0 && now.st_dev == dev && now.st_ino == ino && unlink(l) == 0) {
        snprintf(l, sizeof l, "%s/vllm-ec/%.64s", c->root, key);
        rmdir(l);
    }
    return 1;
}

/* Look up and verify; `count`: whether the lookup counters (hits, misses) move and a hit refreshes its mtime. */
static qvl_status lookup(qvl_cache *c, const char *key, qvl_cache_entry *e, int count, qvl_error *err) {
    memset(e, 0, sizeof *e);
    char path[PATH_MAX];
    entry_path(c, key, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (count) {
            pthread_mutex_lock(&c->mu);
            c->st.misses++;
            pthread_mutex_unlock(&c->mu);
        }
        return QVL_OK; /* a miss */
    }
    struct stat st;
    memset(&st, 0, sizeof st);
    uint8_t *file = NULL;
    int bad = fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > CACHE_ENTRY_MAX_BYTES;
    if (!bad) {
        file = malloc(st.st_size ? (size_t)st.st_size : 1);
        if (!file) {
            close(fd);
            return err_fail(err, QVL_ERR_NOMEM, "out of memory for cache entry %s (%lld bytes)", path,
                            (long long)st.st_size);
        }
        qvl_error perr;
        bad = read_all(fd, file, (size_t)st.st_size) ||
              cache_entry_parse(file, (size_t)st.st_size, key, e, &perr) != QVL_OK;
    }
    close(fd);
    if (bad) {
        free(file);
        memset(e, 0, sizeof *e);
        e->result = QVL_CACHE_CORRUPT;
        /* Only the file that was read: a put may have renamed a good entry into place since (its inode differs),
         * and that one stays. The entry's vLLM link (a hard link to the same inode) goes with it. */
        const int gone = st.st_ino && remove_entry(c, path, key, st.st_dev, st.st_ino);
        pthread_mutex_lock(&c->mu);
        c->st.corrupt++;
        if (count) c->st.misses++;
        if (gone) tally_removed(c, (uint64_t)st.st_size);
        pthread_mutex_unlock(&c->mu);
        return QVL_OK;
    }
    e->file = file;
    e->file_bytes = (size_t)st.st_size;
    if (count) {
        pthread_mutex_lock(&c->mu);
        c->st.hits++;
        pthread_mutex_unlock(&c->mu);
        if (time(NULL) - st.st_mtime > TOUCH_AFTER_S) utimensat(AT_FDCWD, path, NULL, 0); /* LRU: used now */
    }
    return QVL_OK;
}

qvl_status qvl_cache_get_sized(qvl_cache *c, const char *key, qvl_cache_entry *entry, size_t size, qvl_error *err) {
    err_clear(err);
    const size_t need = offsetof(qvl_cache_entry, file) + sizeof(void *);
    if (!c || !entry || size < need)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_get: NULL cache or entry, or an entry size %zu < %zu",
                        size, need);
    memset(entry, 0, size < sizeof *entry ? size : sizeof *entry);
    TRY(check_key(key, err));
    qvl_cache_entry e;
    TRY(lookup(c, key, &e, 1, err));
    memcpy(entry, &e, size < sizeof e ? size : sizeof e);
    return QVL_OK;
}

int qvl_cache_exists(qvl_cache *c, const char *key, uint64_t *size) {
    if (!c || !cache_is_key(key)) return 0;
    char path[PATH_MAX];
    entry_path(c, key, path, sizeof path);
    struct stat st;
    if (lstat(path, &st) || !S_ISREG(st.st_mode)) return 0;
    if (size) *size = (uint64_t)st.st_size;
    return 1;
}

qvl_status qvl_cache_open_fd(qvl_cache *c, const char *key, int *fd, uint64_t *size, qvl_error *err) {
    err_clear(err);
    if (fd) *fd = -1;
    if (!c || !fd) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_open_fd: NULL cache or fd");
    TRY(check_key(key, err));
    char path[PATH_MAX];
    entry_path(c, key, path, sizeof path);
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (f < 0 || fstat(f, &st) || !S_ISREG(st.st_mode)) {
        int e = f < 0 ? errno : EINVAL;
        if (f >= 0) close(f);
        return err_fail(err, QVL_ERR_IO, "cannot open cache entry %s: %s", path, strerror(e));
    }
    *fd = f;
    if (size) *size = (uint64_t)st.st_size;
    return QVL_OK;
}

/* ---- writes ---- */

static int write_all(int fd, const struct iovec *iov0, int n) {
    struct iovec iov[3];
    memcpy(iov, iov0, (size_t)n * sizeof *iov);
    int i = 0;
    while (i < n) {
        ssize_t w = writev(fd, iov + i, n - i);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        size_t left = (size_t)w;
        while (i < n && left >= iov[i].iov_len) left -= iov[i++].iov_len;
        if (i < n) iov[i].iov_base = (char *)iov[i].iov_base + left, iov[i].iov_len -= left;
    }
    return 0;
}

/* The header JSON, laid out as every writer of this format has (cJSON's compact printing, in this order). */
static char *entry_header(const char *key, const char *dt, int ndim, const int64_t *shape, size_t nbytes,
                          const char *fingerprint, const char *hex, const char *kind) {
    char created[32];
    snprintf(created, sizeof created, "%lld", (long long)time(NULL));
    /* "kind" last, and only when known: an entry without one is laid out as qvl 1.0 wrote it */
    const char *meta[] = {"qvl_entry", "1", "key", key, "fingerprint", fingerprint, "qvl_version", qvl_version(),
                          "created", created, "xxh3_128", hex, "kind", kind};
    cJSON *h = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(h, "__metadata__");
    for (size_t i = 0; m && i < (kind ? 7u : 6u); i++) cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]);
    const char *names[2] = {"ec_cache", "grid_thw"}, *dts[2] = {dt, "I64"};
    const int64_t gshape[2] = {1, 3};
    const size_t offs[3] = {0, nbytes, nbytes + 24};
    for (int t = 0; h && t < 2; t++) {
        cJSON *o = cJSON_AddObjectToObject(h, names[t]);
        if (!o) break;
        cJSON_AddStringToObject(o, "dtype", dts[t]);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int k = 0; sh && k < (t ? 2 : ndim); k++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)(t ? gshape[k] : shape[k])));
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        if (of) {
            cJSON_AddItemToArray(of, cJSON_CreateNumber((double)offs[t]));
            cJSON_AddItemToArray(of, cJSON_CreateNumber((double)offs[t + 1]));
        }
    }
    char *js = h ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(h);
    return js;
}

static qvl_status put_file(qvl_cache *c, const char *key, const char *dt, int ndim, const int64_t *shape,
                           const void *data, size_t nbytes, qvl_grid grid, const char *fingerprint, const char *kind,
                           uint64_t *flen_out, qvl_error *err) {
    const int64_t g[3] = {grid.t, grid.h, grid.w};
    XXH3_state_t *xs = XXH3_createState();
    if (!xs) return err_fail(err, QVL_ERR_NOMEM, "out of memory for a hash state");
    XXH3_128bits_reset(xs);
    XXH3_128bits_update(xs, data, nbytes); /* the checksum covers the data bytes as laid out: ec_cache, grid_thw */
    XXH3_128bits_update(xs, g, sizeof g);
    char hex[33];
    hash_hex(XXH3_128bits_digest(xs), hex);
    XXH3_freeState(xs);
    char *js = entry_header(key, dt, ndim, shape, nbytes, fingerprint, hex, kind);
    if (!js) return err_fail(err, QVL_ERR_NOMEM, "out of memory for a cache entry header");
    const size_t jl = strlen(js);
    const size_t hl = (8 + jl + 63) / 64 * 64 - 8; /* the data starts at a multiple of 64 */
    uint8_t *hb = malloc(8 + hl);
    if (!hb) {
        free(js);
        return err_fail(err, QVL_ERR_NOMEM, "out of memory for a cache entry header");
    }
    for (int k = 0; k < 8; k++) hb[k] = (uint8_t)((uint64_t)hl >> (8 * k));
    memcpy(hb + 8, js, jl);
    memset(hb + 8 + jl, ' ', hl - jl);
    free(js);
    struct iovec iov[3] = {{hb, 8 + hl}, {(void *)data, nbytes}, {(void *)g, sizeof g}};
    char tmp[PATH_MAX], dst[PATH_MAX], dir[PATH_MAX];
    pthread_mutex_lock(&c->mu);
    uint64_t seq = ++c->tmp_seq;
    pthread_mutex_unlock(&c->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(tmp, sizeof tmp, "%s/tmp/%ld.%" PRIx64 ".%lx.%lx", c->root, (long)getpid(), seq,
             (unsigned long)pthread_self(), (unsigned long)ts.tv_nsec);
    qvl_status s = QVL_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 && errno == ENOENT) { /* tmp/ removed since open (a cleaned-out root): made again */
        snprintf(dir, sizeof dir, "%s/tmp", c->root);
        if (mkdir_p(dir) == 0) fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    }
    if (fd < 0) {
        s = err_fail(err, QVL_ERR_IO, "cannot create cache temporary %s: %s", tmp, strerror(errno));
    } else {
        int bad = write_all(fd, iov, 3);
        int e = errno;
        if (close(fd) && !bad) bad = 1, e = errno;
        snprintf(dir, sizeof dir, "%s/objects/%.2s", c->root, key);
        entry_path(c, key, dst, sizeof dst);
        if (bad) {
            s = err_fail(err, QVL_ERR_IO, "cannot write cache temporary %s: %s", tmp, strerror(e));
        } else if (mkdir(dir, 0755) && errno != EEXIST) {
            s = err_fail(err, QVL_ERR_IO, "cannot create cache directory %s: %s", dir, strerror(errno));
        } else {
            /* Under the mutex: this handle's puts of one key replace in turn, so the tally stays exact. */
            pthread_mutex_lock(&c->mu);
            struct stat old;
            const int replaces = lstat(dst, &old) == 0 && S_ISREG(old.st_mode);
            if (rename(tmp, dst)) {
                s = err_fail(err, QVL_ERR_IO, "cannot rename %s to %s: %s", tmp, dst, strerror(errno));
            } else {
                const uint64_t flen = 8 + hl + nbytes + sizeof g;
                if (replaces) tally_removed(c, (uint64_t)old.st_size);
                c->st.bytes += flen;
                c->st.entries++;
                *flen_out = flen;
            }
            pthread_mutex_unlock(&c->mu);
        }
        if (s != QVL_OK) unlink(tmp);
    }
    free(hb);
    if (s == QVL_OK && c->vllm_links) {
        snprintf(dir, sizeof dir, "%s/vllm-ec/%s", c->root, key);
        snprintf(tmp, sizeof tmp, "%s/encoder_cache.safetensors", dir);
        if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
            unlink(tmp);
            if (link(dst, tmp)) { /* a link is an optional view; a failure leaves the entry as it is */ }
        }
    }
    return s;
}

qvl_status qvl_cache_put(qvl_cache *c, const char *key, qvl_dtype dtype, const void *data, size_t n_planes,
                         size_t n_tokens, size_t cols, qvl_grid grid, const char *fingerprint, qvl_error *err) {
    return qvl_cache_put_kind(c, key, NULL, dtype, data, n_planes, n_tokens, cols, grid, fingerprint, err);
}

qvl_status qvl_cache_put_kind(qvl_cache *c, const char *key, const char *kind, qvl_dtype dtype, const void *data,
                              size_t n_planes, size_t n_tokens, size_t cols, qvl_grid grid, const char *fingerprint,
                              qvl_error *err) {
    err_clear(err);
    if (!c) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_put: NULL cache");
    TRY(check_key(key, err));
    if (kind && strcmp(kind, "image") && strcmp(kind, "video") && strcmp(kind, "frames") && strcmp(kind, "rows"))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_put_kind: kind '%.16s' is not image, video, frames or rows",
                        kind);
    const char *dt = dtype == QVL_DTYPE_F32    ? "F32"
                     : dtype == QVL_DTYPE_F16  ? "F16"
                     : dtype == QVL_DTYPE_BF16 ? "BF16"
                                               : NULL;
    if (!dt) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_put: dtype %d is not F32, F16 or BF16", (int)dtype);
    if (!fingerprint) fingerprint = "";
    if (strlen(fingerprint) > 64)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_put: fingerprint of %zu chars (at most 64)",
                        strlen(fingerprint));
    if (grid.t < 1 || grid.h < 1 || grid.w < 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_put: grid %dx%dx%d is not positive", grid.t, grid.h,
                        grid.w);
    size_t nbytes;
    if (n_planes < 1 || (uint64_t)n_tokens > DIM_MAX || (uint64_t)cols > DIM_MAX || (uint64_t)n_planes > DIM_MAX ||
        size_mul_overflow(n_planes, n_tokens, &nbytes) || size_mul_overflow(nbytes, cols, &nbytes) ||
        size_mul_overflow(nbytes, dtype == QVL_DTYPE_F32 ? 4 : 2, &nbytes) ||
        nbytes > CACHE_ENTRY_MAX_BYTES - CACHE_HEADER_MAX_BYTES)
        return err_fail(err, QVL_ERR_LIMIT,
                        "qvl_cache_put: a [%zu, %zu, %zu] %s matrix overflows or exceeds an entry's %" PRIu64 " bytes",
                        n_planes, n_tokens, cols, dt, CACHE_ENTRY_MAX_BYTES);
    if (!data && nbytes) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_put: NULL data");
    /* The one shape rule of every entry: one plane is [tokens, O], more are [planes, tokens, O]. */
    int64_t shape[3] = {(int64_t)n_planes, (int64_t)n_tokens, (int64_t)cols};
    const int ndim = n_planes > 1 ? 3 : 2;
    uint64_t flen = 0;
    qvl_status s = put_file(c, key, dt, ndim, ndim == 3 ? shape : shape + 1, data, nbytes, grid, fingerprint, kind,
                            &flen, err);
    pthread_mutex_lock(&c->mu);
    if (s == QVL_OK) c->st.puts++;
    else c->st.put_errors++;
    int over = s == QVL_OK && c->max_bytes && c->st.bytes > c->max_bytes;
    pthread_mutex_unlock(&c->mu);
    if (over) qvl_cache_gc(c, 0, NULL, NULL, NULL); /* another collector running: it collects instead */
    return s;
}

/* ---- collection, verification, export ---- */

void cache_set_evict_hook(qvl_cache *c, void (*hook)(const char *path, void *arg), void *arg) {
    c->evict_hook = hook;
    c->evict_hook_arg = arg;
}

qvl_status qvl_cache_gc(qvl_cache *c, uint64_t target, uint64_t *evicted_bytes, size_t *evicted_entries,
                        qvl_error *err) {
    err_clear(err);
    if (evicted_bytes) *evicted_bytes = 0;
    if (evicted_entries) *evicted_entries = 0;
    if (!c) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_gc: NULL cache");
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/gc/lock", c->root);
    int lf = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (lf < 0 && errno == ENOENT) { /* gc/ not there (a handle opened `existing`, or a cleaned-out root) */
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/gc", c->root);
        if (mkdir_p(dir) == 0) lf = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    }
    if (lf < 0) return err_fail(err, QVL_ERR_IO, "cannot open %s: %s", p, strerror(errno));
    if (flock(lf, LOCK_EX | LOCK_NB)) {
        close(lf);
        return err_fail(err, QVL_ERR_IO, "another collector holds %s", p);
    }
    if (!target) target = c->max_bytes ? c->max_bytes / 10 * 9 : UINT64_MAX;
    scan_ent *v;
    size_t n;
    qvl_status s = scan(c, &v, &n, err);
    if (s != QVL_OK) {
        flock(lf, LOCK_UN);
        close(lf);
        return s;
    }
    uint64_t total = 0, ev_bytes = 0;
    size_t ev_n = 0, left = n;
    for (size_t i = 0; i < n; i++) total += v[i].size;
    if (v && total > target) qsort(v, n, sizeof *v, by_mtime);
    for (size_t i = 0; i < n && total > target; i++) {
        snprintf(p, sizeof p, "%s/objects/%s", c->root, v[i].name);
        struct stat st;
        if (lstat(p, &st)) { /* gone already */
            total -= v[i].size;
            left--;
            continue;
        }
        /* touched (read) or replaced (a put's rename: another inode, its mtime maybe within the same clock tick)
         * since the scan: in use, kept */
        if (st.st_mtim.tv_sec != v[i].mtime.tv_sec || st.st_mtim.tv_nsec != v[i].mtime.tv_nsec ||
            st.st_dev != v[i].dev || st.st_ino != v[i].ino)
            continue;
        if (c->evict_hook) c->evict_hook(p, c->evict_hook_arg);
        char key[65];
        snprintf(key, sizeof key, "%.64s", v[i].name + 3);
        /* by rename and a check of the inode, not unlink(name): a put may rename its entry into place after the
         * checks above, and that one stays */
        if (remove_entry(c, p, key, v[i].dev, v[i].ino)) {
            total -= v[i].size;
            left--;
            ev_bytes += v[i].size;
            ev_n++;
        }
    }
    free(v);
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
            if (lstat(t, &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime > TMP_STALE_S) unlink(t);
        }
        closedir(d);
    }
    pthread_mutex_lock(&c->mu);
    c->st.bytes = total;
    c->st.entries = left;
    c->st.evictions += ev_n;
    c->st.evicted_bytes += ev_bytes;
    pthread_mutex_unlock(&c->mu);
    flock(lf, LOCK_UN);
    close(lf);
    if (evicted_bytes) *evicted_bytes = ev_bytes;
    if (evicted_entries) *evicted_entries = ev_n;
    return QVL_OK;
}

qvl_status qvl_cache_verify(qvl_cache *c, size_t *ok, size_t *corrupt, qvl_error *err) {
    err_clear(err);
    if (ok) *ok = 0;
    if (corrupt) *corrupt = 0;
    if (!c) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_verify: NULL cache");
    scan_ent *v;
    size_t n;
    TRY(scan(c, &v, &n, err));
    qvl_status s = QVL_OK;
    for (size_t i = 0; i < n && s == QVL_OK; i++) {
        char key[65];
        snprintf(key, sizeof key, "%.64s", v[i].name + 3);
        qvl_cache_entry e;
        s = lookup(c, key, &e, 0, err); /* no LRU refresh, no lookup counts: a check, not a use */
        if (e.result == QVL_CACHE_HIT && ok) (*ok)++;
        if (e.result == QVL_CACHE_CORRUPT && corrupt) (*corrupt)++;
        free(e.file);
    }
    free(v);
    return s;
}

qvl_status qvl_cache_export_vllm(qvl_cache *c, const char *dir, size_t *count, qvl_error *err) {
    err_clear(err);
    if (count) *count = 0;
    if (!c || !dir) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_cache_export_vllm: NULL cache or directory");
    if (mkdir_p(dir)) return err_fail(err, QVL_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    scan_ent *v;
    size_t n;
    TRY(scan(c, &v, &n, err));
    qvl_status s = QVL_OK;
    for (size_t i = 0; i < n; i++) {
        char key[65], src[PATH_MAX], d[PATH_MAX], dst[PATH_MAX + 32];
        snprintf(key, sizeof key, "%.64s", v[i].name + 3);
        snprintf(src, sizeof src, "%s/objects/%s", c->root, v[i].name);
        if (snprintf(d, sizeof d, "%s/%s", dir, key) >= (int)sizeof d) {
            s = err_fail(err, QVL_ERR_LIMIT, "export directory %.64s... is too long", dir);
            break;
        }
        snprintf(dst, sizeof dst, "%s/encoder_cache.safetensors", d);
        if (mkdir(d, 0755) && errno != EEXIST) {
            if (s == QVL_OK) s = err_fail(err, QVL_ERR_IO, "cannot create %s: %s", d, strerror(errno));
            continue;
        }
        unlink(dst);
        if (link(src, dst) && symlink(src, dst)) {
            if (s == QVL_OK) s = err_fail(err, QVL_ERR_IO, "cannot link %s to %s: %s", dst, src, strerror(errno));
            continue;
        }
        if (count) (*count)++;
    }
    free(v);
    return s;
}
