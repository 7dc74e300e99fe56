/* test_serve_cache.c — the server's on-disk cache (tools/serve/serve_cache.c) shared by processes, and the parsing
 * helpers it and the server use: a put/get round trip; a flipped byte detected (entry deleted, a miss); forked
 * writers on the same and on different keys; readers while another process collects; a writer killed with SIGKILL
 * in the middle of its writes leaves whole entries and temporary debris only; the size budget holds; base64, size
 * strings and options. Every loop is bounded. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "serve.h"
#include "testutil.h"

static void key_of(int i, char key[65]) {
    uint64_t h = tu_splitmix64((uint64_t)i + 1);
    for (int k = 0; k < 64; k++) {
        key[k] = "0123456789abcdef"[(h >> (4 * (k % 16))) & 15];
        if (k % 16 == 15) h = tu_splitmix64(h);
    }
    key[64] = 0;
}

/* Entry i: [rows, 8] F32 filled from i, grid (1, 2, 2·rows) so tokens = rows. */
static int put(srv_cache *c, int i, size_t rows) {
    char key[65];
    key_of(i, key);
    float *d = malloc(rows * 8 * sizeof *d);
    for (size_t k = 0; k < rows * 8; k++) d[k] = (float)i + (float)k * 0.5f;
    int64_t shape[2] = {(int64_t)rows, 8};
    qvl_grid g = {1, 2, 2 * (int32_t)rows};
    uint64_t ev;
    int r = srv_cache_put(c, key, "F32", 2, shape, d, rows * 8 * sizeof *d, g, "fp", &ev);
    free(d);
    return r;
}

/* 1 hit with the right content, 0 miss, -1 corrupt or wrong content. */
static int check(srv_cache *c, int i) {
    char key[65];
    key_of(i, key);
    srv_entry e;
    int corrupt = 0;
    if (!srv_cache_get(c, key, &e, &corrupt)) return corrupt ? -1 : 0;
    int ok = e.ndim == 2 && e.shape[1] == 8 && e.grid.t == 1 && e.grid.h == 2 && e.grid.w == 2 * e.shape[0];
    const float *d = (const float *)e.data;
    for (int64_t k = 0; ok && k < e.shape[0] * 8; k++) ok = d[k] == (float)i + (float)k * 0.5f;
    srv_entry_free(&e);
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

int main(void) {
    char tmp[512], root[600], msg[256];
    tu_tmpdir(tmp, sizeof tmp);
    snprintf(root, sizeof root, "%s/c", tmp);
    srv_cache *c = srv_cache_open(root, 0, msg, sizeof msg);
    CHECK(c != NULL);
    if (!c) return tu_finish("test_serve_cache");

    /* round trip, then a flipped byte */
    CHECK(put(c, 1, 10) == 0);
    CHECK(check(c, 1) == 1);
    CHECK(check(c, 2) == 0);
    char key[65], path[900];
    key_of(1, key);
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
    CHECK(check(c, 1) == -1);
    struct stat st;
    CHECK(stat(path, &st) != 0); /* deleted */
    CHECK(check(c, 1) == 0);

    /* forked writers: 4 processes, each writing keys 100..119 (shared) and 200+20p..219+20p (its own) */
    for (int p = 0; p < 4; p++) {
        if (fork() == 0) {
            srv_cache *cc = srv_cache_open(root, 0, msg, sizeof msg);
            int bad = 0;
            for (int i = 0; i < 20; i++) bad += put(cc, 100 + i, 16 + (size_t)i) != 0;
            for (int i = 0; i < 20; i++) bad += put(cc, 200 + 20 * p + i, 8) != 0;
            srv_cache_close(cc);
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

    /* readers during GC: a reader process checks entries while this one collects down to nothing */
    pid_t rd = fork();
    if (rd == 0) {
        srv_cache *cc = srv_cache_open(root, 0, msg, sizeof msg);
        int corrupt = 0;
        for (int round = 0; round < 20; round++)
            for (int i = 0; i < 80; i++) corrupt += check(cc, 200 + i) < 0;
        srv_cache_close(cc);
        _exit(corrupt ? 1 : 0);
    }
    for (int round = 0; round < 10; round++) {
        uint64_t ev;
        size_t n;
        srv_cache_gc(c, 4096 * (uint64_t)(10 - round), &ev, &n);
    }
    int s;
    waitpid(rd, &s, 0);
    CHECK(WIFEXITED(s) && WEXITSTATUS(s) == 0);

    /* kill -9 in the middle of writes: only whole entries in objects/, at most debris in tmp/ */
    pid_t wr = fork();
    if (wr == 0) {
        srv_cache *cc = srv_cache_open(root, 0, msg, sizeof msg);
        for (int i = 0; i < 100000; i++) put(cc, 1000 + i, 4096); /* 128 KiB entries until killed */
        _exit(0);
    }
    usleep(300000);
    kill(wr, SIGKILL);
    waitpid(wr, &s, 0);
    size_t ok = 0, bad = 0;
    srv_cache_verify(c, &ok, &bad);
    printf("after SIGKILL: %zu whole entries, %zu corrupt, %zu temporaries left\n", ok, bad, count_dir(path));
    CHECK(bad == 0);

    /* the size budget: 1 MiB, 40 entries of 32 KiB each */
    srv_cache_close(c);
    snprintf(root, sizeof root, "%s/b", tmp);
    c = srv_cache_open(root, 1 << 20, msg, sizeof msg);
    CHECK(c != NULL);
    for (int i = 0; c && i < 40; i++) {
        CHECK(put(c, 5000 + i, 1024) == 0);
        uint64_t b;
        size_t n;
        srv_cache_scan(c, &b, &n);
        CHECK(b <= (1 << 20));
    }
    CHECK(c && check(c, 5039) == 1); /* the newest stays */
    CHECK(c && check(c, 5000) == 0); /* the oldest went */
    srv_cache_close(c);

    /* helpers */
    uint64_t v;
    CHECK(srv_parse_size("10G", &v) == 0 && v == (uint64_t)10 << 30);
    CHECK(srv_parse_size("512KiB", &v) == 0 && v == 512 << 10);
    CHECK(srv_parse_size("7", &v) == 0 && v == 7);
    CHECK(srv_parse_size("1X", &v) != 0 && srv_parse_size("", &v) != 0 && srv_parse_size("-1", &v) != 0);
    uint8_t *out;
    size_t len;
    CHECK(srv_b64_decode("aGVsbG8=", 8, 100, &out, &len) == 0 && len == 5 && !memcmp(out, "hello", 5));
    free(out);
    CHECK(srv_b64_decode("aGVsbG8", 7, 100, &out, &len) == -1 && !out);
    CHECK(srv_b64_decode("aGVs bG8=", 9, 100, &out, &len) == -1);
    CHECK(srv_b64_decode("aGVsbG8=", 8, 4, &out, &len) == -2);
    char *b = srv_b64_encode("hello", 5, &len);
    CHECK(b && !strcmp(b, "aGVsbG8=") && len == 8);
    free(b);
    CHECK(srv_is_key("54f23d18728ae94acb9397c7189dc5d3cff8da07f60121dd5f1f42c4676c6c37"));
    CHECK(!srv_is_key("54F23d18728ae94acb9397c7189dc5d3cff8da07f60121dd5f1f42c4676c6c37"));
    CHECK(!srv_is_key("54f2") && !srv_is_key("../../etc/passwd"));
    CHECK(srv_media_of("image/png", 9) == SRV_MEDIA_IMAGE && srv_media_of("Video/MP4; x=1", 14) == SRV_MEDIA_VIDEO);
    CHECK(srv_media_of("image/", 6) == 0 && srv_media_of("text/plain", 10) == 0);
    tu_rmtree(tmp);
    return tu_finish("test_serve_cache");
}
