/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/pool.h"
#include "qvl.h"

int tu_failures = 0;
int tu_checks = 0;

void tu_report(const char *file, int line, const char *what) { fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what); }

static thread_pool *tu_pools[17];

thread_pool *tu_pool(int n) {
    if (n <= 1 || n > 16) return NULL;
    if (!tu_pools[n] && pool_create(&tu_pools[n], n, NULL) != QVL_OK) return NULL;
    return tu_pools[n];
}

double tu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tu_finish(const char *name) {
    for (int i = 0; i < 17; i++) {
        pool_destroy(tu_pools[i]);
        tu_pools[i] = NULL;
    }
    printf("%s: %d passed, %d failed\n", name, tu_checks - tu_failures, tu_failures);
    return tu_failures ? 1 : 0;
}

const char *tu_source_path(const char *rel, char *buf, size_t n) {
    const char *root = getenv("QVL_SOURCE_DIR");
    snprintf(buf, n, "%s/%s", root ? root : ".", rel);
    return buf;
}

const char *tu_tmpdir(char *buf, size_t n) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/qvl-test-XXXXXX", t ? t : "/tmp");
    return mkdtemp(buf);
}

double tu_relerr(const float *a, const float *b, size_t n, double *maxabs) {
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
        if (fabs(d) > mx || d != d) mx = d != d ? INFINITY : fabs(d);
    }
    if (maxabs) *maxabs = mx;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int tu_same_bytes(const unsigned char *got, const unsigned char *want, size_t n, const char *what) {
    size_t bad = 0, first = 0;
    int maxd = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)got[i] - (int)want[i]);
        if (d) {
            if (!bad) first = i;
            bad++;
            if (d > maxd) maxd = d;
        }
    }
    if (bad)
        fprintf(stderr, "  %s: %zu of %zu bytes differ, max |diff| %d, first at byte %zu (got %d want %d)\n", what,
                bad, n, maxd, first, got[first], want[first]);
    return bad == 0;
}

int tu_rmtree(const char *dir) {
    char cmd[4200];
    if (snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir) >= (int)sizeof cmd) return 0;
    return system(cmd) == 0;
}

const char *tu_path(const char *dir, const char *name) {
    static char buf[16][4096 + 256];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

void *tu_read_file(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0, k;
    unsigned char *b = malloc(cap);
    while (b && (k = fread(b + len, 1, cap - 1 - len, f)) > 0) { /* one byte kept for the NUL */
        len += k;
        if (len == cap - 1) {
            unsigned char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    if (b && ferror(f)) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[len] = 0, *n = len;
    return b;
}

int tu_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

int tu_dotfiles(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

int tu_synth(const char *dir, const char *preset, uint64_t seed, qvl_synth_layout layout) {
    qvl_synth_params p;
    qvl_synth_params_default(&p);
    p.preset = preset;
    p.seed = seed;
    p.layout = layout;
    qvl_error err;
    qvl_status s = qvl_synth_write(&p, dir, &err);
    CHECK(s == QVL_OK);
    if (s != QVL_OK) fprintf(stderr, "tu_synth %s: %s\n", dir, err.message);
    return s == QVL_OK;
}

qvl_model *tu_synth_load(const char *dir, uint64_t seed) {
    tu_synth(dir, "tiny", seed, QVL_LAYOUT_HF);
    qvl_model *m = NULL;
    qvl_error err;
    qvl_status s = qvl_model_load(dir, NULL, &m, &err);
    CHECK(s == QVL_OK);
    if (s != QVL_OK) fprintf(stderr, "tu_synth_load %s: %s\n", dir, err.message);
    return m;
}

float tu_frand(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 16777216.0f * 2.0f - 1.0f;
}

uint64_t tu_splitmix64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Layout: [one page holding the mapping's length][data pages, the buffer at their end][PROT_NONE guard]. The
 * buffer starts in the first data page (or is the guard itself for 0 bytes), so the mapping starts one page
 * before the page holding p. */
void *tu_guarded_alloc(size_t bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t data = (bytes + page - 1) / page * page, len = page + data + page;
    unsigned char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    if (mprotect(base + page + data, page, PROT_NONE) != 0) {
        munmap(base, len);
        return NULL;
    }
    memcpy(base, &len, sizeof len);
    return base + page + data - bytes;
}

void tu_guarded_free(void *p) {
    if (!p) return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *base = (unsigned char *)((uintptr_t)p / page * page) - page;
    size_t len;
    memcpy(&len, base, sizeof len);
    munmap(base, len);
}
