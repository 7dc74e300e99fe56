/* test_remote: the forward pass on backends whose memory is not the host's (backend/remote.c: addresses a read or
 * write from the host would fault on) gives the bits of the CPU entry each wraps — so the tower reaches the
 * backend's memory only through its operations, as a GPU backend needs. Pairs: portable / remote (f32),
 * portable-bf16 / remote-bf16 (bf16 without operand hand-overs), amx-emulated / remote-amx (bf16 with every
 * hand-over: LayerNorm and MLP operands, qkv with the rotary embedding in its epilogue, the attention into proj's
 * operand; BF16X2 mergers). Cases: qvl_encode of an image and a video together (merged, DeepStack), every tap,
 * the tower's sinks in bf16 and f16 and a float32 sink with a row stride, items' rows where they are, a smaller
 * encode on a context a larger one laid out, the same grids twice (tables kept), and qvl_run_blocks. A host address
 * handed to a remote entry's operation fails the load or encode (the entry's status: QVL_ERR_BACKEND). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/remote.h"
#include "model/model.h"
#include "model/tower.h"
#include "testutil.h"

/* Every tap's name, shape and bytes folded into one FNV-1a digest, and the count. */
typedef struct taps {
    uint64_t h;
    int n;
} taps;

static void fold(uint64_t *h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 1099511628211ull;
}

static void on_tap(void *user, const char *stage, const float *data, size_t rows, size_t cols) {
    taps *t = user;
    fold(&t->h, stage, strlen(stage) + 1);
    fold(&t->h, &rows, sizeof rows);
    fold(&t->h, &cols, sizeof cols);
    fold(&t->h, data, rows * cols * sizeof *data);
    t->n++;
}

/* What one entry computes for the cases above, all in one buffer. */
typedef struct result {
    unsigned char *bytes;
    size_t n, cap;
    taps t;
} result;

static void put(result *r, const void *p, size_t n) {
    if (r->n + n > r->cap) {
        r->cap = (r->n + n) * 2;
        r->bytes = realloc(r->bytes, r->cap);
    }
    memcpy(r->bytes + r->n, p, n);
    r->n += n;
}

static float *rows_of(size_t n, uint32_t seed) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = tu_frand(&seed);
    return p;
}

static void run_entry(const char *dir, const backend *be, result *r) {
    memset(r, 0, sizeof *r);
    r->t.h = 1469598103934665603ull;
    qvl_model *m = NULL;
    qvl_error err;
    CHECK(model_load_on(dir, NULL, be, &m, &err) == QVL_OK);
    if (!m) {
        printf("  load on %s: %s\n", be->name, err.message);
        return;
    }
    const tower_config *k = &m->cfg;
    const size_t RL = (size_t)k->row_len, O = (size_t)k->out_hidden, H = (size_t)k->hidden;
    const int nd = k->n_deepstack;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = 2;
    qvl_ctx *c = NULL;
    CHECK(qvl_ctx_create(m, &cp, &c, &err) == QVL_OK);
    if (!c) {
        qvl_model_free(m);
        return;
    }
    qvl_ctx_set_tap(c, on_tap, &r->t);

    /* an image and a two-slice video in one encode: merged and DeepStack outputs, every tap */
    const qvl_grid g2[2] = {{1, 4, 6}, {4, 4, 4}};
    const size_t S = qvl_patch_rows(g2, 2), T = S / 4;
    float *px = rows_of(S * RL, 7);
    float *merged = calloc(T * O, sizeof(float)), *ds[QVL_MAX_DEEPSTACK] = {0};
    for (int d = 0; d < nd; d++) ds[d] = calloc(T * O, sizeof(float));
    CHECK(qvl_encode(c, px, S, g2, 2, merged, ds, &err) == QVL_OK);
    put(r, merged, T * O * sizeof(float));
    for (int d = 0; d < nd; d++) put(r, ds[d], T * O * sizeof(float));
    /* the same grids again: the tables as built last time; the DeepStack features not asked for (the taps get them
     * through the context's own buffer) */
    CHECK(qvl_encode(c, px, S, g2, 2, merged, NULL, &err) == QVL_OK);
    put(r, merged, T * O * sizeof(float));
    qvl_ctx_set_tap(c, NULL, NULL);

    /* the tower's own sinks, two of them (tokens [0, 6) and [6, T)): items' rows where they are; bf16, f16, and
     * float32 rows with a stride */
    const float *item_rows[2] = {px, px + (size_t)24 * RL};
    static const qvl_dtype dts[] = {QVL_DTYPE_BF16, QVL_DTYPE_F16, QVL_DTYPE_F32};
    for (size_t i = 0; i < 3; i++) {
        const size_t ld = dts[i] == QVL_DTYPE_F32 ? O + 5 : O, es = dts[i] == QVL_DTYPE_F32 ? 4 : 2;
        unsigned char *out = calloc((size_t)(1 + nd) * T * ld, es);
        tower_sink sinks[2] = {{.t0 = 0, .n = 6, .ld = ld, .dtype = dts[i]},
                               {.t0 = 6, .n = T - 6, .ld = ld, .dtype = dts[i]}};
        for (int d = 0; d <= nd; d++)
            for (int q = 0; q < 2; q++) sinks[q].dst[d] = out + ((size_t)d * T + sinks[q].t0) * ld * es;
        CHECK(tower_encode(c, NULL, item_rows, S, g2, 2, sinks, 2, &err) == QVL_OK);
        put(r, out, (size_t)(1 + nd) * T * ld * es);
        free(out);
    }

    /* a smaller encode on the context the larger one laid out */
    const qvl_grid g1 = {1, 2, 4};
    CHECK(qvl_encode(c, px, 8, &g1, 1, merged, NULL, &err) == QVL_OK);
    put(r, merged, 2 * O * sizeof(float));

    /* the blocks alone, and through the merger */
    float *hid = rows_of(S * H, 9), *blk = calloc(S * H, sizeof(float));
    CHECK(qvl_run_blocks(c, hid, S, g2, 2, 0, blk, &err) == QVL_OK);
    put(r, blk, S * H * sizeof(float));
    CHECK(qvl_run_blocks(c, hid, S, g2, 2, 1, merged, &err) == QVL_OK);
    put(r, merged, T * O * sizeof(float));
    CHECK(qvl_ctx_scratch_size(c) > 0);

    free(hid), free(blk), free(px), free(merged);
    for (int d = 0; d < nd; d++) free(ds[d]);
    qvl_ctx_free(c);
    qvl_model_free(m);
}

static void pair(const char *dir, const char *host_name, const char *remote_name) {
    const backend *h = backend_find(host_name), *rm = backend_find(remote_name);
    CHECK(h && rm && h->host_memory && !rm->host_memory);
    if (!h || !rm) return;
    /* its memory is where no host address is (in a 64-bit address space) */
    void *p = rm->alloc(rm, 64);
    CHECK(p != NULL);
#if UINTPTR_MAX > 0xffffffffu
    CHECK((uintptr_t)p >= (uintptr_t)1 << 52);
#endif
    rm->release(rm, p);
    result a, b;
    run_entry(dir, h, &a);
    run_entry(dir, rm, &b);
    char what[128];
    snprintf(what, sizeof what, "%s against %s (%s)", remote_name, host_name, dir);
    CHECK(a.n > 0 && a.n == b.n && tu_same_bytes(b.bytes, a.bytes, a.n, what));
    CHECK(a.t.n > 0 && a.t.n == b.t.n && a.t.h == b.t.h);
    printf("  %-12s = %-14s %zu bytes of outputs, %d taps: %s\n", remote_name, host_name, a.n, a.t.n,
           a.n == b.n && memcmp(a.bytes, b.bytes, a.n) == 0 && a.t.h == b.t.h ? "the same bits" : "DIFFERENT");
    free(a.bytes), free(b.bytes);
}

int main(void) {
    char root[512], dir[600], dir32[600];
    if (!tu_tmpdir(root, sizeof root)) return 1;
    snprintf(dir, sizeof dir, "%s/tiny", root);
    snprintf(dir32, sizeof dir32, "%s/tiny-hd32", root);
    CHECK(tu_synth(dir, "tiny", 1, QVL_LAYOUT_HF));
    /* the same weights with two heads of 32: the head dims the AMX set's rotary epilogue and tile attention take */
    CHECK(tu_synth(dir32, "tiny", 1, QVL_LAYOUT_HF));
    size_t n;
    char *cfg = tu_read_file(tu_path(dir32, "config.json"), &n), *at = cfg ? strstr(cfg, "\"num_heads\": 4") : NULL;
    CHECK(at != NULL);
    if (at) {
        at[strlen("\"num_heads\": ")] = '2';
        CHECK(tu_write_file(tu_path(dir32, "config.json"), cfg, n));
    }
    free(cfg);
    const char *dirs[2] = {dir, dir32};
    for (int i = 0; i < 2; i++) {
        pair(dirs[i], "portable", "remote");
        pair(dirs[i], "portable-bf16", "remote-bf16");
        pair(dirs[i], "amx-emulated", "remote-amx");
    }
    /* every operation was handed the backend's own memory */
    CHECK(backend_remote_strays() == 0);
    tu_rmtree(root);
    return tu_finish("test_remote");
}
