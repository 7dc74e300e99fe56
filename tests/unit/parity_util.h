/* parity_util.h — what the parity tests (test_parity, test_parity_amx) share: a fixture of tests/fixtures/tower
 * (written by tests/oracle/oracle.py) with its checkpoint re-created by qvl synth from the recipe in its metadata,
 * its pixel rows and grids; encoding those rows on a model while a tap collects every stage; and the bf16 gate of
 * each stage against transformers' own bf16 run (its error is stored in the fixture as `bf16_relerr.<stage>`).
 * Header only, static inline (a unit test is one file plus testutil.c). */
#ifndef QVL_PARITY_UTIL_H
#define QVL_PARITY_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "qvl.h"
#include "testutil.h"

/* The fixture files (*.safetensors) of directory `dir`, sorted by name, into names (at most cap); their count. */
static inline int pu_list_fixtures(const char *dir, char names[][256], int cap) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < cap) {
        size_t len = strlen(e->d_name);
        if (len > 12 && strcmp(e->d_name + len - 12, ".safetensors") == 0) snprintf(names[n++], 256, "%s", e->d_name);
    }
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    return n;
}

#define BF16_BLOCK_GATE 0.5  /* bf16 precision: block error / transformers-bf16 error at that block */
#define BF16_OUTPUT_GATE (1.0 / 3.0) /* bf16 precision, full-depth towers: merged and DeepStack error / tf-bf16's */

typedef struct stage_store {
    char names[64][32];
    float *data[64];
    size_t rows[64], cols[64];
    int n;
} stage_store;

static inline void pu_on_tap(void *user, const char *stage, const float *data, size_t rows, size_t cols) {
    stage_store *s = user;
    if (s->n >= 64) return;
    snprintf(s->names[s->n], sizeof s->names[0], "%s", stage);
    s->data[s->n] = malloc(rows * cols * sizeof(float));
    memcpy(s->data[s->n], data, rows * cols * sizeof(float));
    s->rows[s->n] = rows;
    s->cols[s->n] = cols;
    s->n++;
}

static inline void pu_stages_free(stage_store *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
    s->n = 0;
}

/* The stage called `name` in s, or -1. */
static inline int pu_stage_find(const stage_store *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) return i;
    return -1;
}

/* A copy of an f32 tensor's values (malloc'd), their count in *n. */
static inline float *pu_tensor_f32(const st_tensor *t, size_t *n) {
    size_t count = 1;
    for (int i = 0; i < t->ndim; i++) count *= (size_t)t->shape[i];
    float *out = malloc(count * sizeof(float) + 1);
    if (t->dtype == ST_F32) memcpy(out, t->data, count * sizeof(float));
    *n = count;
    return out;
}

static inline int pu_meta_int(const st_file *f, const char *key, int dflt) {
    const char *v = st_meta(f, key);
    return v ? atoi(v) : dflt;
}

typedef struct pu_fixture {
    st_file *fx;
    const char *name;    /* the file's name */
    const char *preset;  /* synth preset */
    const char *fp_want; /* the checkpoint's fingerprint when the fixture was made */
    char dir[256];       /* the re-created checkpoint (a temp dir, removed by pu_fixture_close) */
    int linspace;        /* pos_mode linspace */
    int full_depth;      /* the preset's own depth (not truncated by --depth) */
    qvl_grid grids[16];
    size_t n_grids, S;
    float *pixels;       /* [S, row_len] */
} pu_fixture;

static inline void pu_fixture_close(pu_fixture *f) {
    free(f->pixels);
    f->pixels = NULL;
    if (f->fx) st_close(f->fx);
    f->fx = NULL;
    if (f->dir[0]) CHECK(tu_rmtree(f->dir));
    f->dir[0] = 0;
}

/* Open the fixture at path, re-create its checkpoint into a temp dir and read its rows and grids (as CHECKs); 1 on
 * success, else 0 with the reason printed and nothing left to close. */
static inline int pu_fixture_open(const char *path, pu_fixture *f) {
    memset(f, 0, sizeof *f);
    qvl_error err;
    err_clear(&err);
    CHECK(st_load(path, SIZE_MAX, &f->fx, &err) == QVL_OK);
    if (!f->fx) {
        fprintf(stderr, "%s: %s\n", path, err.message);
        return 0;
    }
    f->name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    f->preset = st_meta(f->fx, "synth_preset");
    f->fp_want = st_meta(f->fx, "fingerprint");
    CHECK(f->preset != NULL && f->fp_want != NULL);
    if (!f->preset || !f->fp_want) {
        pu_fixture_close(f);
        return 0;
    }
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    sp.preset = f->preset;
    sp.seed = (uint64_t)pu_meta_int(f->fx, "synth_seed", 0);
    sp.depth = pu_meta_int(f->fx, "synth_depth", 0);
    f->full_depth = sp.depth == 0;
    const char *ds = st_meta(f->fx, "synth_deepstack");
    if (ds && strcmp(ds, "preset") != 0) {
        sp.n_deepstack = 0;
        for (char *p = (char *)ds; *p && strcmp(p, "none") != 0;) {
            sp.deepstack_index[sp.n_deepstack++] = (int)strtol(p, &p, 10);
            if (*p == ',') p++;
        }
    }
    const char *pm = st_meta(f->fx, "pos_mode");
    f->linspace = pm && strcmp(pm, "linspace") == 0;
    CHECK(tu_tmpdir(f->dir, sizeof f->dir) != NULL);
    CHECK(qvl_synth_write(&sp, f->dir, &err) == QVL_OK);

    const st_tensor *px = st_find(f->fx, "pixel_values"), *gt = st_find(f->fx, "grid_thw");
    CHECK(px && gt && px->dtype == ST_F32 && gt->dtype == ST_I64 && gt->ndim == 2 && gt->shape[1] == 3);
    if (!(px && gt && px->dtype == ST_F32 && gt->dtype == ST_I64)) {
        pu_fixture_close(f);
        return 0;
    }
    f->n_grids = (size_t)gt->shape[0];
    for (size_t i = 0; i < f->n_grids && i < 16; i++) {
        int64_t v[3];
        memcpy(v, (const unsigned char *)gt->data + 24 * i, 24);
        f->grids[i] = (qvl_grid){(int32_t)v[0], (int32_t)v[1], (int32_t)v[2]};
    }
    size_t n_px;
    f->pixels = pu_tensor_f32(px, &n_px);
    f->S = qvl_patch_rows(f->grids, f->n_grids);
    return 1;
}

/* The model's fingerprint equals the fixture's (so a drifted synth cannot pass silently), as a CHECK. */
static inline int pu_fingerprint_ok(qvl_model *m, const pu_fixture *f) {
    char hex[33] = "";
    qvl_error err;
    qvl_model_fingerprint(m, NULL, hex, &err);
    const int ok = strcmp(hex, f->fp_want) == 0;
    CHECK(ok);
    if (!ok) fprintf(stderr, "%s: synth fingerprint %s, fixture made from %s\n", f->name, hex, f->fp_want);
    return ok;
}

/* A context on m with the fixture's position mode (NULL on failure, a CHECK). */
static inline qvl_ctx *pu_ctx(qvl_model *m, const pu_fixture *f) {
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.pos_mode = f->linspace ? QVL_POS_LINSPACE : QVL_POS_CLOSED_FORM;
    qvl_ctx *ctx = NULL;
    qvl_error err;
    CHECK(qvl_ctx_create(m, &cp, &ctx, &err) == QVL_OK);
    return ctx;
}

/* Encode the fixture's rows on ctx into merged ([S/4, out_hidden]) with every stage tapped into st (a CHECK). */
static inline void pu_encode(qvl_ctx *ctx, const pu_fixture *f, stage_store *st, float *merged) {
    qvl_error err;
    if (!ctx) return;
    qvl_ctx_set_tap(ctx, pu_on_tap, st);
    CHECK(qvl_encode(ctx, f->pixels, f->S, f->grids, f->n_grids, merged, NULL, &err) == QVL_OK);
    qvl_ctx_set_tap(ctx, NULL, NULL);
}

/* The bf16 gate of a stage, as a fraction of transformers-bf16's error there: every block ≤ 1/2; the merged
 * output and the DeepStack features ≤ 1/3 on a full-depth tower, ≤ 1/2 on a truncated one (test_parity.c says
 * why); patch and pos no worse than it. */
static inline double pu_bf16_gate(const char *stage, int full_depth) {
    if (strncmp(stage, "blk", 3) == 0) return BF16_BLOCK_GATE;
    if (strcmp(stage, "merged") == 0 || strncmp(stage, "deepstack", 9) == 0)
        return full_depth ? BF16_OUTPUT_GATE : BF16_BLOCK_GATE;
    return 1.0;
}

/* One stage of a bf16 run against the float32 oracle: ‖ours − ref‖/‖ref‖, transformers-bf16's, the gate. */
typedef struct pu_bf16_stage {
    char name[32];
    double rel, tf, gate;
} pu_bf16_stage;

/* The stages of st that the fixture holds with a transformers-bf16 error, in tap order, into out (at most cap);
 * their count. A stage whose size differs from the fixture's fails a CHECK and is left out. */
static inline int pu_bf16_stages(const pu_fixture *f, const stage_store *st, pu_bf16_stage *out, int cap) {
    int n = 0;
    for (int i = 0; i < st->n && n < cap; i++) {
        const st_tensor *ref = st_find(f->fx, st->names[i]);
        char key[64];
        snprintf(key, sizeof key, "bf16_relerr.%s", st->names[i]);
        const char *b = st_meta(f->fx, key);
        if (!ref || !b) continue;
        size_t cnt;
        float *r = pu_tensor_f32(ref, &cnt);
        CHECK(cnt == st->rows[i] * st->cols[i]);
        if (cnt == st->rows[i] * st->cols[i]) {
            double maxabs;
            pu_bf16_stage *s = &out[n++];
            snprintf(s->name, sizeof s->name, "%s", st->names[i]);
            s->rel = tu_relerr(st->data[i], r, cnt, &maxabs);
            s->tf = atof(b);
            s->gate = pu_bf16_gate(st->names[i], f->full_depth);
        }
        free(r);
    }
    return n;
}

#endif
