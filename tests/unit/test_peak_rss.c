/* test_peak_rss.c — the peak-RSS bound of docs/SECURITY.md ("Peak memory"), checked on the largest image the
 * default limits decode: a 13377x13377 BMP (178944129 pixels, the largest square within max_image_pixels =
 * 178956970; 537 MB on disk), written here, planned and encoded on the tiny synthetic model in a child process
 * whose peak RSS (wait4's ru_maxrss) must stay within
 *
 *   base + max(decode, preprocess, encode) + 32 MiB
 *     base        the child's peak RSS once the model is loaded and the ctx created (binary, libraries, weights)
 *     decode      F + 14·P + 64 MiB      F file bytes, P decoded pixels (14 bytes a pixel: the worst decoder)
 *     preprocess  3·P + W + 3·T + R      W resize workspace, T resized pixels, R = rows bytes
 *     encode      R + scratch + out      qvl_plan_scratch_bytes, qvl_plan_out_bytes
 *
 * and within the BMP row of the per-format table, base + F + 3·P + 32 MiB.
 * The image budget is lowered to 2^20 resized pixels (4096 patch rows) so that the tiny tower's attention stays
 * cheap; decode, the term that grows with the limit, runs at full size. The child's RSS must also reach F + 3·P
 * (the file and the decoded image were really held). And the base must not grow when the model is fingerprinted
 * (check_fingerprint_rss). Skipped under AddressSanitizer, whose shadow memory and
 * quarantine are not the library's. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "image/resize.h"
#include "qvl.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

enum { SIDE = 13377 };
#define MIB ((uint64_t)1 << 20)

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v), put16(p + 2, v >> 16); }

/* A 24-bit bottom-up BMP of w x h with a cheap gradient; returns the file size, 0 on failure. */
static uint64_t write_bmp(const char *path, int w, int h) {
    const uint32_t stride = ((uint32_t)w * 3 + 3) & ~3u;
    const uint64_t size = 54 + (uint64_t)stride * (uint64_t)h;
    uint8_t hdr[54] = {'B', 'M'};
    put32(hdr + 2, (uint32_t)size);
    put32(hdr + 10, 54);
    put32(hdr + 14, 40);
    put32(hdr + 18, (uint32_t)w);
    put32(hdr + 22, (uint32_t)h);
    put16(hdr + 26, 1);
    put16(hdr + 28, 24);
    put32(hdr + 34, (uint32_t)(stride * (uint64_t)h));
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    uint8_t *row = calloc(stride, 1);
    int ok = row && fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr;
    for (int y = 0; ok && y < h; y++) {
        for (int x = 0; x < w; x++) {
            row[3 * x] = (uint8_t)(x >> 5), row[3 * x + 1] = (uint8_t)(y >> 5), row[3 * x + 2] = (uint8_t)(x ^ y);
        }
        ok = fwrite(row, 1, stride, f) == stride;
    }
    free(row);
    if (fclose(f) != 0) ok = 0;
    return ok ? size : 0;
}

/* What the child reports: its RSS with the model loaded, and the plan's sizes. */
typedef struct report {
    int status;
    long base_kib;
    int32_t src_w, src_h, res_w, res_h;
    uint64_t rows_bytes, scratch, out_bytes;
    double plan_s, encode_s;
    char message[1024];
} report;

/* Runs body(arg, fd) in a child process that writes a report of `size` bytes to fd and _exits; the parent reads it
 * into rep (zeroed first) and waits, the child's resource usage into *ru. 1 when the whole report came back from a
 * child that exited 0. */
static int run_child(void (*body)(const void *arg, int fd), const void *arg, void *rep, size_t size,
                     struct rusage *ru) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        body(arg, fds[1]);
    }
    close(fds[1]);
    memset(rep, 0, size);
    ssize_t got = read(fds[0], rep, size);
    close(fds[0]);
    int wst = 0;
    CHECK(wait4(pid, &wst, 0, ru) == pid);
    const int ok = got == (ssize_t)size && WIFEXITED(wst) && WEXITSTATUS(wst) == 0;
    CHECK(ok);
    return ok;
}

typedef struct paths {
    const char *model, *image;
} paths;

static void child(const void *arg, int fd) {
    const char *model = ((const paths *)arg)->model, *image = ((const paths *)arg)->image;
    report r;
    memset(&r, 0, sizeof r);
    qvl_error err;
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    qvl_plan *plan = NULL;
    void *out = NULL;
    r.status = qvl_model_load(model, NULL, &m, &err);
    if (r.status == QVL_OK) r.status = qvl_ctx_create(m, NULL, &ctx, &err);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r.base_kib = ru.ru_maxrss;
    qvl_preprocess_params pp;
    qvl_preprocess_params_default(&pp);
    pp.max_pixels = 1u << 20;
    qvl_plan_params pl;
    qvl_plan_params_default(&pl);
    pl.preprocess = &pp;
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_PATH;
    it.path = image;
    double t0 = tu_now();
    if (r.status == QVL_OK) r.status = qvl_plan_create(ctx, &it, 1, &pl, &plan, &err);
    r.plan_s = tu_now() - t0;
    qvl_item_info info;
    memset(&info, 0, sizeof info);
    if (r.status == QVL_OK) {
        qvl_plan_item(plan, 0, &info);
        r.status = info.status;
        snprintf(err.message, sizeof err.message, "%.1000s", info.message);
    }
    if (r.status == QVL_OK) {
        r.src_w = info.src_width, r.src_h = info.src_height, r.res_w = info.resized_width, r.res_h = info.resized_height;
        r.rows_bytes = qvl_plan_held_bytes(plan);
        r.scratch = qvl_plan_scratch_bytes(plan);
        r.out_bytes = qvl_plan_out_bytes(plan);
        out = malloc(info.out_bytes);
        t0 = tu_now();
        r.status = out ? qvl_plan_encode(ctx, plan, &out, &err) : QVL_ERR_NOMEM;
        r.encode_s = tu_now() - t0;
    }
    if (r.status != QVL_OK) memcpy(r.message, err.message, sizeof r.message);
    free(out);
    qvl_plan_free(plan);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    ssize_t n = write(fd, &r, sizeof r);
    _exit(n == (ssize_t)sizeof r ? 0 : 1);
}

/* Fingerprinting a loaded model (every front end does: qvl encode's metadata, qvl serve, the cache key) reads
 * every tensor of the checkpoint; that must not leave the checkpoint's bytes resident beside the packed panels (it
 * did, when it read them through a mapping: the 27B tower's processes peaked at 1.78 GiB instead of 0.97; the load
 * now reads each tensor once with pread into one reused buffer). In a child: the peak RSS with the model
 * loaded, then after qvl_model_fingerprint; the growth must stay far below the weights' bytes (what it was). Not
 * under qemu-user, which takes MADV_DONTNEED as a no-op (and where loading the model costs a minute). */
#ifndef QVL_TEST_UNDER_EMULATOR
#define QVL_TEST_UNDER_EMULATOR 0
#endif
typedef struct fp_report {
    int status;
    long loaded_kib, hashed_kib;
    uint64_t weight_bytes;
    char hex[33];
} fp_report;

static void fp_child(const void *model, int fd) {
    fp_report r;
    memset(&r, 0, sizeof r);
    qvl_error err;
    qvl_model *m = NULL;
    struct rusage ru;
    r.status = qvl_model_load(model, NULL, &m, &err);
    if (r.status == QVL_OK) {
        qvl_model_info in;
        qvl_model_get_info(m, &in);
        r.weight_bytes = in.weight_bytes;
        getrusage(RUSAGE_SELF, &ru);
        r.loaded_kib = ru.ru_maxrss;
        r.status = qvl_model_fingerprint(m, NULL, r.hex, &err);
        getrusage(RUSAGE_SELF, &ru);
        r.hashed_kib = ru.ru_maxrss;
    }
    qvl_model_free(m);
    ssize_t n = write(fd, &r, sizeof r);
    _exit(n == (ssize_t)sizeof r ? 0 : 1);
}

static void check_fingerprint_rss(const char *dir) {
    if (QVL_TEST_UNDER_EMULATOR) {
        printf("  fingerprint RSS: not checked under the emulator\n");
        return;
    }
    char model[4200];
    snprintf(model, sizeof model, "%s/fp", dir);
    qvl_synth_params sp; /* Qwen3-VL-2B widths, one block: 80 MiB of bf16 weights, the largest tensor 32 MiB */
    qvl_synth_params_default(&sp);
    sp.preset = "qwen3-vl-2b";
    sp.depth = 1;
    sp.n_deepstack = 0;
    qvl_error err;
    CHECK(qvl_synth_write(&sp, model, &err) == QVL_OK);
    fp_report r;
    struct rusage ru;
    run_child(fp_child, model, &r, sizeof r, &ru);
    CHECK(r.status == QVL_OK && strlen(r.hex) == 32);
    const uint64_t grew = r.hashed_kib > r.loaded_kib ? (uint64_t)(r.hashed_kib - r.loaded_kib) << 10 : 0;
    printf("  fingerprint: weights %.0f MiB, peak RSS %.0f MiB loaded, %.0f MiB after hashing (+%.1f MiB)\n",
           (double)r.weight_bytes / MIB, r.loaded_kib / 1024.0, r.hashed_kib / 1024.0, (double)grew / MIB);
    CHECK(r.weight_bytes >= 64 * MIB); /* large enough that keeping its pages would show */
    CHECK(grew <= 12 * MIB);           /* 4 MiB hashed between drops, and the hasher */
    CHECK(tu_rmtree(model));
}

int main(void) {
    if (UNDER_ASAN) {
        printf("test_peak_rss: skipped under AddressSanitizer (its shadow memory and quarantine count in the RSS)\n");
        return TU_SKIP;
    }
    char dir[4096], model[4200], image[4200];
    CHECK(tu_tmpdir(dir, sizeof dir) != NULL);
    check_fingerprint_rss(dir);
    snprintf(model, sizeof model, "%s/tiny", dir);
    snprintf(image, sizeof image, "%s/largest.bmp", dir);
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    qvl_error err;
    CHECK(qvl_synth_write(&sp, model, &err) == QVL_OK);
    double t0 = tu_now();
    const uint64_t F = write_bmp(image, SIDE, SIDE);
    CHECK(F > 0);
    printf("  wrote a %dx%d BMP, %" PRIu64 " bytes, in %.1f s\n", SIDE, SIDE, F, tu_now() - t0);
    const paths in = {model, image};
    report r;
    struct rusage ru;
    run_child(child, &in, &r, sizeof r, &ru);
    if (r.status != QVL_OK) printf("  child failed: %s: %s\n", qvl_status_name((qvl_status)r.status), r.message);
    CHECK(r.status == QVL_OK && r.src_w == SIDE && r.src_h == SIDE);
    if (r.status == QVL_OK) {
        const uint64_t P = (uint64_t)SIDE * SIDE, T = (uint64_t)r.res_w * (uint64_t)r.res_h;
        const uint64_t W = resize_workspace_size(SIDE, SIDE, r.res_w, r.res_h, 3), R = r.rows_bytes;
        const uint64_t decode = F + 14 * P + 64 * MIB, pre = 3 * P + W + 3 * T + R, enc = R + r.scratch + r.out_bytes;
        uint64_t stage = decode > pre ? decode : pre;
        stage = stage > enc ? stage : enc;
        const uint64_t base = (uint64_t)r.base_kib << 10, bound = base + stage + 32 * MIB;
        const uint64_t peak = (uint64_t)ru.ru_maxrss << 10;
        printf("  resized to %dx%d, planned in %.1f s, encoded in %.1f s\n", r.res_w, r.res_h, r.plan_s, r.encode_s);
        printf("  base %.0f MiB; decode %.0f, preprocess %.0f, encode %.0f MiB; bound %.0f MiB; measured peak %.0f MiB\n",
               (double)base / MIB, (double)decode / MIB, (double)pre / MIB, (double)enc / MIB, (double)bound / MIB,
               (double)peak / MIB);
        CHECK(peak <= bound);
        /* and the BMP decoder's own term (3 bytes a pixel, docs/SECURITY.md's table) */
        CHECK(peak <= base + F + 3 * P + 32 * MIB);
        CHECK(peak >= F + 3 * P); /* the file and the decoded image were held at once */
    }
    CHECK(tu_rmtree(dir));
    return tu_finish("test_peak_rss");
}
