/* openblas_sgemm.c — peer reference: OpenBLAS cblas_sgemm on the vision tower's GEMM shapes.
 *
 * Times C[M,N] = A[M,K] · B[N,K]^T (RowMajor, NoTrans × Trans: activations times a PyTorch-layout weight, the
 * form every linear layer of the tower takes) in f32 for M = 784 (one 448² image) and M = 3136 (one 896² image)
 * over the Qwen3.5-27B tower's N×K shapes, and prints the median GFLOP/s of --repeat runs after one warm-up.
 * The thread count is OpenBLAS's own: OPENBLAS_NUM_THREADS (bench/run_peers.sh sets it).
 *
 * Standalone on purpose (it is not part of the project's CMake build, which must not depend on OpenBLAS):
 *     gcc -O2 -o openblas_sgemm bench/openblas_sgemm.c -lopenblas
 *     OPENBLAS_NUM_THREADS=2 ./openblas_sgemm [--repeat N] [--m 784,3136]
 * Debian's libopenblas-dev provides the library and <cblas.h>. Some machines here export OPENBLAS_CORETYPE /
 * OPENBLAS_L2_SIZE to steer older OpenBLAS builds; to benchmark fairly run with both unset (`env -u ...`) — the
 * first line printed names the kernel OpenBLAS picked (openblas_get_corename()) so the choice is on record. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Not declared by every cblas.h; OpenBLAS exports them. */
extern char *openblas_get_corename(void);
extern char *openblas_get_config(void);
extern int openblas_get_num_threads(void);

typedef struct gemm_shape {
    const char *what; /* which layer of the tower uses it */
    int n, k;
} gemm_shape;

/* N×K of the tower's linear layers (hidden 1152, FFN 4304, merger 4608 -> 5120, patch row 1536). The merger
 * runs on M/4 rows in the real tower; here every shape is timed at the same M so the table is a plain
 * shape-by-shape rate. */
static const gemm_shape shapes[] = {
    {"qkv", 3456, 1152},     {"attn_out", 1152, 1152},  {"mlp_fc1", 4304, 1152}, {"mlp_fc2", 1152, 4304},
    {"merger_fc1", 4608, 4608}, {"merger_fc2", 5120, 4608}, {"patch_embed", 1152, 1536},
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Deterministic values in [-1, 1) (xorshift64), so runs are repeatable and no denormals appear. */
static void fill(float *p, size_t n, unsigned long long seed) {
    unsigned long long s = seed;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((s >> 40) & 0xffff) / 32767.5f - 1.0f;
    }
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    char buf[256], *save = NULL;
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > 1 << 20 || n == max) return -1;
        out[n++] = (int)v;
    }
    return n;
}

int main(int argc, char **argv) {
    int ms[8] = {784, 3136}, n_m = 2, repeat = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            repeat = atoi(argv[++i]);
            if (repeat < 1 || repeat > 1000) { fprintf(stderr, "openblas_sgemm: --repeat must be 1..1000\n"); return 2; }
        } else if (!strcmp(argv[i], "--m") && i + 1 < argc) {
            if ((n_m = parse_list(argv[++i], ms, 8)) < 1) { fprintf(stderr, "openblas_sgemm: bad --m list\n"); return 2; }
        } else {
            fprintf(stderr, "usage: %s [--repeat N] [--m M1,M2,...]\n", argv[0]);
            return 2;
        }
    }
    printf("openblas: core=%s threads=%d config=%s\n", openblas_get_corename(), openblas_get_num_threads(),
           openblas_get_config());
    printf("%-12s %6s %6s %6s %10s %9s\n", "shape", "M", "N", "K", "median ms", "GFLOP/s");
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    double *times = malloc((size_t)repeat * sizeof *times);
    if (!times) return 1;
    for (int mi = 0; mi < n_m; mi++) {
        for (int si = 0; si < n_shapes; si++) {
            const int M = ms[mi], N = shapes[si].n, K = shapes[si].k;
            float *a = malloc((size_t)M * K * sizeof(float)), *b = malloc((size_t)N * K * sizeof(float));
            float *c = malloc((size_t)M * N * sizeof(float));
            if (!a || !b || !c) { fprintf(stderr, "openblas_sgemm: out of memory\n"); return 1; }
            fill(a, (size_t)M * K, 0x9E3779B97F4A7C15ull);
            fill(b, (size_t)N * K, 0x243F6A8885A308D3ull);
            for (int r = -1; r < repeat; r++) {
                double t0 = now_s();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
                double t = now_s() - t0;
                if (r >= 0) times[r] = t;
            }
            qsort(times, (size_t)repeat, sizeof *times, cmp_double);
            double med = times[repeat / 2];
            printf("%-12s %6d %6d %6d %10.2f %9.1f\n", shapes[si].what, M, N, K, med * 1e3,
                   2.0 * M * N * K / med * 1e-9);
            fflush(stdout);
            free(a), free(b), free(c);
        }
    }
    free(times);
    return 0;
}
