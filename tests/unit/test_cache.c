/* test_cache.c — the embedding cache (qvl_cache_*, src/cache/cache.c): a put/get round trip with exact counters;
 * entries written by qvl 1.0.0's server code (tests/fixtures/cache) read back, and a put of the same matrix
 * writes the same bytes; a flipped byte detected, the entry deleted and counted; forked writers on the same and
 * on different keys; readers while another process collects; a writer killed with SIGKILL mid-write leaves whole
 * entries and temporary debris only; the size budget holds and evictions are counted exactly; threads sharing
 * one handle; a collector's lock; bad arguments named. Every loop is bounded. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "qvl.h"
#include "testutil.h"

static void key_of(int i, char key[65]) {
    uint64_t h = tu_splitmix64((uint64_t)i + 1);
    for (int k = 0; k < 64; k++) {
        key[k] = "0123456789abcdef"[(h >> (4 * (k % 16))) & 15];
        if (k % 16 == 15) h = tu_splitmix64(h);
    }
    key[64] = 0;
}

/* Entry i: [rows, 8] F32 filled from i (planes > 1: [planes, rows, 8]), grid (1, 2, 2·rows) so tokens = rows. */
static int put_planes(qvl_cache *c, int i, size_t planes, size_t rows) {
    char key[65];
    key_of(i, key);
    float *d = malloc(planes * rows * 8 * sizeof *d);
    if (!d) return -1;
    for (size_t k = 0; k < planes * rows * 8; k++) d[k] = (float)i + (float)k * 0.5f;
    qvl_grid g = {1, 2, 2 * (int32_t)rows};
    qvl_error err;
    qvl_status s = qvl_cache_put(c, key, QVL_DTYPE_F32, d, planes, rows, 8, g, "fp", &err);
    free(d);
    return s == QVL_OK ? 0 : -1;
}
static int put(qvl_cache *c, int i, size_t rows) { return put_planes(c, i, 1, rows); }

/* 1 hit with the right content, 0 miss, -1 corrupt or wrong content. */
static int check(qvl_cache *c, int i) {
    char key[65];
    key_of(i, key);
    qvl_cache_entry e;
    qvl_error err;
    if (qvl_cache_get(c, key, &e, &err) != QVL_OK) return -1;
    if (e.result != QVL_CACHE_HIT) return e.result == QVL_CACHE_CORRUPT ? -1 : 0;
    int ok = e.cols == 8 && e.grid.t == 1 && e.grid.h == 2 && e.grid.w == 2 * (int32_t)e.n_tokens &&
             !strcmp(e.dtype, "F32") && !strcmp(e.fingerprint, "fp") && e.nbytes == e.n_planes * e.n_tokens * 32 &&
             (e.n_planes > 1 ? e.ndim == 3 && e.shape[0] == (int64_t)e.n_planes : e.ndim == 2);
    const float *d = e.data;
    for (size_t k = 0; ok && k < e.n_planes * e.n_tokens * 8; k++) ok = d[k] == (float)i + (float)k * 0.5f;
    qvl_free(e.file);
    return ok ? 1 : -1;
}

static size_t count_dir(const char *dir) {
    DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void write_file(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (fwrite(b, 1, n, f) != n) fprintf(stderr, "short write %s\n", path);
    fclose(f);
}

static qvl_cache *open_cache(const char *root, uint64_t max_bytes, int links) {
    qvl_cache_params p;
    qvl_cache_params_default(&p);
    p.max_bytes = max_bytes;
    p.vllm_links = links;
    qvl_cache *c = NULL;
    qvl_error err;
    if (qvl_cache_open(root, &p, &c, &err) != QVL_OK) fprintf(stderr, "open %s: %s\n", root, err.message);
    return c;
}

/* The entries of qvl 1.0.0 (written by its server code through `qvl encode --cache`): hits, and a put of the same
 * matrix, grid and fingerprint writes the same bytes but for the creation time. */
static void old_entries(const char *tmp) {
    static const char *keys[] = {"aa88d1f380289f645d381c91782ea42fc1cd4ac5967d31f06cddffe2159bfa51",
                                 "f3a0c6617727c298858de8540c3fe97640d5f06887ae51e744702c49d6e6af4e"};
    static const int ndims[] = {2, 3};
    char root[600], root2[600], p[1200], src[1024];
    snprintf(root, sizeof root, "%s/old", tmp);
    snprintf(root2, sizeof root2, "%s/new", tmp);
    qvl_cache *c = open_cache(root, 0, 0), *c2 = open_cache(root2, 0, 0);
    CHECK(c && c2);
    if (!c || !c2) return;
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "tests/fixtures/cache/%s.safetensors", keys[k]);
        size_t n;
        uint8_t *old = tu_read_file(tu_source_path(p, src, sizeof src), &n);
        CHECK(old != NULL);
        if (!old) continue;
        snprintf(p, sizeof p, "%s/objects/%.2s", root, keys[k]);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/objects/%.2s/%s.safetensors", root, keys[k], keys[k]);
        write_file(p, old, n);
        qvl_cache_entry e;
        qvl_error err;
        CHECK(qvl_cache_get(c, keys[k], &e, &err) == QVL_OK && e.result == QVL_CACHE_HIT);
        if (e.result != QVL_CACHE_HIT) {
            free(old);
            continue;
        }
        CHECK(e.ndim == ndims[k] && e.cols == 96 && e.n_tokens == 64 && e.n_planes == (k ? 3u : 1u));
        CHECK(!strcmp(e.dtype, "F32") && !strcmp(e.qvl_version, "1.0.0") && e.created == 1796137800);
        CHECK(strlen(e.fingerprint) == 32 && strlen(e.xxh3_128) == 32 && e.file_bytes == n);
        CHECK(qvl_cache_put(c2, keys[k], QVL_DTYPE_F32, e.data, e.n_planes, e.n_tokens, e.cols, e.grid, e.fingerprint,
                            &err) == QVL_OK);
        snprintf(p, sizeof p, "%s/objects/%.2s/%s.safetensors", root2, keys[k], keys[k]);
        size_t n2;
        uint8_t *now = tu_read_file(p, &n2);
        CHECK(now != NULL && n2 >= 8);
        if (now && n2 >= 8) {
            uint64_t ho = 0, hn = 0;
            for (int i = 0; i < 8; i++) ho |= (uint64_t)old[i] << (8 * i), hn |= (uint64_t)now[i] << (8 * i);
            /* the data bytes, exactly; the header but for the version string and the creation time */
            CHECK(n - 8 - ho == n2 - 8 - hn && memcmp(old + 8 + ho, now + 8 + hn, n - 8 - ho) == 0);
            old[8 + ho - 1] = now[8 + hn - 1] = 0; /* a pad space: the headers as strings */
            const char *a = strstr((char *)old + 8, "\"qvl_version\":\"");
            const char *b = strstr((char *)now + 8, "\"qvl_version\":\"");
            const char *xa = strstr((char *)old + 8, ",\"xxh3_128\""), *xb = strstr((char *)now + 8, ",\"xxh3_128\"");
            CHECK(a && b && xa && xb && a - (char *)old == b - (char *)now);
            if (a && b && xa && xb) {
                CHECK(memcmp(old + 8, now + 8, (size_t)(a - (char *)old) - 8) == 0);
                size_t la = strcspn(xa, " "), lb = strcspn(xb, " ");
                CHECK(la == lb && memcmp(xa, xb, la) == 0);
            }
        }
        free(now);
        qvl_free(e.file);
        free(old);
    }
    size_t ok = 0, bad = 9;
    qvl_error err;
    CHECK(qvl_cache_verify(c, &ok, &bad, &err) == QVL_OK && ok == 2 && bad == 0);
    qvl_cache_close(c);
    qvl_cache_close(c2);
}

typedef struct thr_arg {
    qvl_cache *c;
    int id, bad;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    for (int i = 0; i < 30; i++) {
        a->bad += put(a->c, 7000 + (i % 10), 4 + (size_t)(i % 10)) != 0; /* shared keys */
        a->bad += put(a->c, 8000 + 100 * a->id + i, 2) != 0;           /* own keys */
        a->bad += check(a->c, 7000 + (i % 10)) < 0;
    }
    return NULL;
}

/* The evict hook of race_put: a put of entry 6000 (16 rows) renamed into place just as a collection removes the
 * entry it scanned there. */
static void put_in_window(const char *path, void *arg) {
    (void)path;
    if (put(arg, 6000, 16)) fprintf(stderr, "put in the collection's window failed\n");
}

/* A collection whose victim is replaced by a put after its checks: the new entry and its vLLM link stay. */
static void race_put(const char *tmp) {
    char root[600], p[1000];
    snprintf(root, sizeof root, "%s/race", tmp);
    qvl_cache *c = open_cache(root, 0, 1);
    CHECK(c != NULL);
    if (!c) return;
    CHECK(put(c, 6000, 8) == 0);
    cache_set_evict_hook(c, put_in_window, c);
    uint64_t evb = 1;
    size_t evn = 1;
    qvl_error err;
    CHECK(qvl_cache_gc(c, 1, &evb, &evn, &err) == QVL_OK);
    cache_set_evict_hook(c, NULL, NULL);
    CHECK(evn == 0 && evb == 0);
    CHECK(check(c, 6000) == 1); /* the entry the put renamed into place, 16 rows */
    char key[65];
    key_of(6000, key);
    struct stat es, ls;
    snprintf(p, sizeof p, "%s/objects/%.2s/%s.safetensors", root, key, key);
    CHECK(stat(p, &es) == 0);
    snprintf(p, sizeof p, "%s/vllm-ec/%s/encoder_cache.safetensors", root, key);
    CHECK(stat(p, &ls) == 0 && ls.st_ino == es.st_ino);
    qvl_cache_stats st;
    qvl_cache_get_stats(c, &st);
    CHECK(st.entries == 1 && st.evictions == 0);
    snprintf(p, sizeof p, "%s/tmp", root);
    CHECK(count_dir(p) == 0);
    qvl_cache_close(c);
}

/* The item's kind, recorded by qvl_cache_put_kind and read back; none from qvl_cache_put; another string refused. */
static void kinds(const char *tmp) {
    char root[600], k[65];
    snprintf(root, sizeof root, "%s/kinds", tmp);
    qvl_cache *c = open_cache(root, 0, 0);
    CHECK(c != NULL);
    if (!c) return;
    key_of(4, k);
    float m[8] = {0};
    qvl_grid g = {1, 2, 2};
    qvl_cache_entry e;
    qvl_error err;
    CHECK(qvl_cache_put_kind(c, k, "frames", QVL_DTYPE_F32, m, 1, 1, 8, g, "fp", &err) == QVL_OK);
    CHECK(qvl_cache_get(c, k, &e, &err) == QVL_OK && e.result == QVL_CACHE_HIT && !strcmp(e.kind, "frames"));
    qvl_free(e.file);
    CHECK(qvl_cache_put_kind(c, k, "audio", QVL_DTYPE_F32, m, 1, 1, 8, g, "fp", &err) == QVL_ERR_INVALID_ARG &&
          strstr(err.message, "audio"));
    CHECK(qvl_cache_put(c, k, QVL_DTYPE_F32, m, 1, 1, 8, g, "fp", &err) == QVL_OK);
    CHECK(qvl_cache_get(c, k, &e, &err) == QVL_OK && e.result == QVL_CACHE_HIT && e.kind[0] == 0);
    qvl_free(e.file);
    qvl_cache_close(c);
}

int main(void) {
    char tmp[512], root[600], path[900];
    tu_tmpdir(tmp, sizeof tmp);
    snprintf(root, sizeof root, "%s/c", tmp);
    qvl_cache *c = open_cache(root, 0, 1);
    CHECK(c != NULL);
    if (!c) return tu_finish("test_cache");
    qvl_cache_stats st;
    qvl_error err;

    /* round trip and the counters */
    CHECK(put(c, 1, 10) == 0);
    CHECK(put_planes(c, 3, 4, 5) == 0);
    CHECK(check(c, 1) == 1 && check(c, 3) == 1);
    CHECK(check(c, 2) == 0);
    qvl_cache_get_stats(c, &st);
    char key[65];
    key_of(1, key);
    snprintf(path, sizeof path, "%s/objects/%.2s/%s.safetensors", root, key, key);
    struct stat fs1, fs3;
    CHECK(stat(path, &fs1) == 0);
    char key3[65], path3[900];
    key_of(3, key3);
    snprintf(path3, sizeof path3, "%s/objects/%.2s/%s.safetensors", root, key3, key3);
    CHECK(stat(path3, &fs3) == 0);
    CHECK(st.hits == 2 && st.misses == 1 && st.corrupt == 0 && st.puts == 2 && st.put_errors == 0);
    CHECK(st.entries == 2 && st.bytes == (uint64_t)fs1.st_size + (uint64_t)fs3.st_size);
    CHECK(((uint64_t)fs1.st_size - 10 * 32 - 24) % 64 == 0); /* data at a multiple of 64 */
    uint64_t sz = 0;
    CHECK(qvl_cache_exists(c, key, &sz) && sz == (uint64_t)fs1.st_size);
    int fd = -1;
    CHECK(qvl_cache_open_fd(c, key, &fd, &sz, &err) == QVL_OK && fd >= 0 && sz == (uint64_t)fs1.st_size);
    if (fd >= 0) close(fd);
    char k2[65];
    key_of(2, k2);
    CHECK(!qvl_cache_exists(c, k2, NULL));
    CHECK(qvl_cache_open_fd(c, k2, &fd, NULL, &err) == QVL_ERR_IO && fd == -1 && strstr(err.message, k2));
    snprintf(path, sizeof path, "%s/vllm-ec/%s/encoder_cache.safetensors", root, key);
    struct stat ls;
    CHECK(stat(path, &ls) == 0 && ls.st_ino == fs1.st_ino); /* the vLLM view is a hard link */
    /* a replacing put keeps the tally: same key, other size */
    CHECK(put(c, 1, 12) == 0);
    qvl_cache_get_stats(c, &st);
    CHECK(stat(path, &fs1) == 0); /* the link was renewed */
    CHECK(st.entries == 2 && st.bytes == (uint64_t)fs1.st_size + (uint64_t)fs3.st_size);

    /* bad arguments, named */
    float one = 1;
    qvl_grid g1 = {1, 2, 2};
    CHECK(qvl_cache_put(c, "../../etc/passwd", QVL_DTYPE_F32, &one, 1, 1, 1, g1, NULL, &err) == QVL_ERR_INVALID_ARG &&
          strstr(err.message, "64 lowercase hex"));
    CHECK(qvl_cache_put(c, key, QVL_DTYPE_F32, &one, (size_t)1 << 30, (size_t)1 << 30, 1, g1, NULL, &err) ==
              QVL_ERR_LIMIT && strstr(err.message, "overflows"));
    CHECK(qvl_cache_put(c, key, (qvl_dtype)7, &one, 1, 1, 1, g1, NULL, &err) == QVL_ERR_INVALID_ARG);
    qvl_cache_entry e;
    CHECK(qvl_cache_get(c, "54F23d18728ae94acb9397c7189dc5d3cff8da07f60121dd5f1f42c4676c6c37", &e, &err) ==
          QVL_ERR_INVALID_ARG);
    CHECK(qvl_cache_get_sized(c, key, &e, 4, &err) == QVL_ERR_INVALID_ARG);
    qvl_cache *none = NULL;
    CHECK(qvl_cache_open("", NULL, &none, &err) == QVL_ERR_INVALID_ARG && !none);

    /* a flipped byte: detected, deleted, counted */
    snprintf(path, sizeof path, "%s/objects/%.2s/%s.safetensors", root, key, key);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, -20, SEEK_END);
        int ch = fgetc(f);
        fseek(f, -20, SEEK_END);
        fputc(ch ^ 1, f);
        fclose(f);
    }
    qvl_cache_stats before;
    qvl_cache_get_stats(c, &before);
    CHECK(qvl_cache_get(c, key, &e, &err) == QVL_OK && e.result == QVL_CACHE_CORRUPT && !e.file);
    struct stat sst;
    CHECK(stat(path, &sst) != 0); /* deleted */
    snprintf(path, sizeof path, "%s/vllm-ec/%s/encoder_cache.safetensors", root, key);
    CHECK(lstat(path, &sst) != 0); /* and its vLLM link, the same damaged inode, with it */
    snprintf(path, sizeof path, "%s/vllm-ec/%s", root, key);
    CHECK(lstat(path, &sst) != 0);
    CHECK(check(c, 1) == 0);
    qvl_cache_get_stats(c, &st);
    CHECK(st.corrupt == before.corrupt + 1 && st.misses == before.misses + 2 && st.hits == before.hits);
    CHECK(st.entries == 1 && st.bytes == (uint64_t)fs3.st_size);

    /* entries of the previous implementation */
    old_entries(tmp);
    race_put(tmp);
    kinds(tmp);

    /* threads sharing one handle */
    {
        pthread_t th[4];
        thr_arg a[4];
        for (int t = 0; t < 4; t++) {
            a[t].c = c, a[t].id = t, a[t].bad = 0;
            pthread_create(&th[t], NULL, thr_main, &a[t]);
        }
        int bad = 0;
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            bad += a[t].bad;
        }
        CHECK(bad == 0);
        qvl_cache_get_stats(c, &st);
        CHECK(st.entries == 1 + 10 + 4 * 30); /* key 3, the shared keys, each thread's own */
    }

    /* forked writers: 4 processes, each writing keys 100..119 (shared) and 200+20p..219+20p (its own) */
    for (int p = 0; p < 4; p++) {
        if (fork() == 0) {
            qvl_cache *cc = open_cache(root, 0, 0);
            int bad = !cc;
            for (int i = 0; cc && i < 20; i++) bad += put(cc, 100 + i, 16 + (size_t)i) != 0;
            for (int i = 0; cc && i < 20; i++) bad += put(cc, 200 + 20 * p + i, 8) != 0;
            qvl_cache_close(cc);
            _exit(bad ? 1 : 0);
        }
    }
    for (int p = 0; p < 4; p++) {
        int s;
        wait(&s);
        CHECK(WIFEXITED(s) && WEXITSTATUS(s) == 0);
    }
    int hits = 0;
    for (int i = 0; i < 20; i++) hits += check(c, 100 + i) == 1;
    for (int i = 0; i < 80; i++) hits += check(c, 200 + i) == 1;
    CHECK(hits == 100);
    snprintf(path, sizeof path, "%s/tmp", root);
    CHECK(count_dir(path) == 0); /* every temporary renamed */

    /* a collection rescans: the other processes' entries are in the tally after it */
    uint64_t evb = 1;
    size_t evn = 1;
    CHECK(qvl_cache_gc(c, (uint64_t)1 << 40, &evb, &evn, &err) == QVL_OK && evb == 0 && evn == 0);
    qvl_cache_get_stats(c, &st);
    CHECK(st.entries == 1 + 10 + 120 + 20 + 80);

    /* another collector holds the lock: named, nothing collected */
    {
        char lp[900];
        snprintf(lp, sizeof lp, "%s/gc/lock", root);
        int lf = open(lp, O_RDWR);
        CHECK(lf >= 0 && flock(lf, LOCK_EX) == 0);
        CHECK(qvl_cache_gc(c, 1, &evb, &evn, &err) == QVL_ERR_IO && strstr(err.message, "another collector") && !evn);
        if (lf >= 0) close(lf);
    }

    /* readers during GC: a reader process checks entries while this one collects down to nothing */
    pid_t rd = fork();
    if (rd == 0) {
        qvl_cache *cc = open_cache(root, 0, 0);
        int corrupt = !cc;
        for (int round = 0; cc && round < 20; round++)
            for (int i = 0; i < 80; i++) corrupt += check(cc, 200 + i) < 0;
        qvl_cache_close(cc);
        _exit(corrupt ? 1 : 0);
    }
    for (int round = 0; round < 10; round++) qvl_cache_gc(c, 4096 * (uint64_t)(10 - round), NULL, NULL, NULL);
    int s;
    waitpid(rd, &s, 0);
    CHECK(WIFEXITED(s) && WEXITSTATUS(s) == 0);

    /* kill -9 in the middle of writes: only whole entries in objects/, at most debris in tmp/ */
    pid_t wr = fork();
    if (wr == 0) {
        qvl_cache *cc = open_cache(root, 0, 0);
        for (int i = 0; cc && i < 100000; i++) put(cc, 1000 + i, 4096); /* 128 KiB entries until killed */
        _exit(0);
    }
    usleep(300000);
    kill(wr, SIGKILL);
    waitpid(wr, &s, 0);
    size_t ok = 0, bad = 0;
    CHECK(qvl_cache_verify(c, &ok, &bad, &err) == QVL_OK);
    printf("after SIGKILL: %zu whole entries, %zu corrupt, %zu temporaries left\n", ok, bad, count_dir(path));
    CHECK(bad == 0 && count_dir(path) <= 1);

    /* export: vLLM's layout of every entry */
    {
        char ex[700], p[1000];
        snprintf(ex, sizeof ex, "%s/export", tmp);
        size_t n = 0;
        CHECK(qvl_cache_export_vllm(c, ex, &n, &err) == QVL_OK && n == ok);
        CHECK(count_dir(ex) == ok);
        char k[65];
        key_of(1000, k);
        snprintf(p, sizeof p, "%s/%s/encoder_cache.safetensors", ex, k);
        CHECK(ok == 0 || stat(p, &sst) == 0);
    }
    qvl_cache_close(c);

    /* the size budget: 1 MiB, 40 entries of 32 KiB each; the tally and the directory agree */
    snprintf(root, sizeof root, "%s/b", tmp);
    c = open_cache(root, 1 << 20, 1);
    CHECK(c != NULL);
    uint64_t entry_bytes = 0;
    for (int i = 0; c && i < 40; i++) {
        CHECK(put(c, 5000 + i, 1024) == 0);
        qvl_cache_get_stats(c, &st);
        CHECK(st.bytes <= (1 << 20));
        if (!entry_bytes) entry_bytes = st.bytes;
        char d[700];
        snprintf(d, sizeof d, "%s/objects", root);
        size_t files = 0;
        DIR *top = opendir(d);
        struct dirent *de;
        while (top && (de = readdir(top))) {
            if (de->d_name[0] == '.') continue;
            char sd[1000];
            snprintf(sd, sizeof sd, "%s/%s", d, de->d_name);
            files += count_dir(sd);
        }
        if (top) closedir(top);
        CHECK(files == st.entries && st.bytes == st.entries * entry_bytes);
        CHECK(st.evictions == (uint64_t)(i + 1) - st.entries && st.evicted_bytes == st.evictions * entry_bytes);
    }
    CHECK(c && check(c, 5039) == 1); /* the newest stays */
    CHECK(c && check(c, 5000) == 0); /* the oldest went, and so did its vLLM link */
    char k0[65];
    key_of(5000, k0);
    snprintf(path, sizeof path, "%s/vllm-ec/%s", root, k0);
    CHECK(stat(path, &sst) != 0);
    qvl_cache_close(c);
    qvl_cache_close(NULL);
    tu_rmtree(tmp);
    return tu_finish("test_cache");
}
