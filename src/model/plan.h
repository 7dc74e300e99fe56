/* plan.h — what plan.c shares with key.c: how an item's settings are resolved (the plan's, else the model
 * directory's json files, then the item's own) and how a directory of frames is listed. Private to the library. */
#ifndef QVL_MODEL_PLAN_H
#define QVL_MODEL_PLAN_H

#include <stddef.h>

#include "image/image_params.h"
#include "model/tower.h"
#include "qvl.h"

typedef struct item_settings {
    qvl_preprocess_params pp;
    qvl_video_params vp;
    qvl_decode_params dp;
} item_settings;

/* The settings items without their own start from; `pp` is a full (already taken) qvl_plan_params. */
qvl_status plan_base_settings(const qvl_model *m, const qvl_plan_params *pp, item_settings *s, qvl_error *err);
/* *s = *base overlaid with the item's own preprocess / video / decode params (the item is a full struct). */
qvl_status plan_item_settings(const item_settings *base, const qvl_item *it, item_settings *s, qvl_error *err);
/* The regular files of `dir`, dot files skipped, sorted by name (as the frames of a PATH directory item);
 * at least one. Free with plan_free_names. */
qvl_status plan_list_frames(const char *dir, char ***names, size_t *n, qvl_error *err);
void plan_free_names(char **names, size_t n);

/* An output's shape: a plan's dtype, layout and DeepStack choice over its model (out_spec_of). */
typedef struct out_spec {
    qvl_dtype dtype;
    qvl_output_layout layout;
    int n_ds;         /* DeepStack features in it */
    size_t O;         /* out_hidden */
    size_t cols;      /* values a token has in a plane: CONCAT O·(1 + n_ds), SPLIT O */
    size_t planes;    /* CONCAT 1, SPLIT 1 + n_ds */
    size_t esize;     /* bytes a value */
} out_spec;
/* m NULL (a plan without a ctx): O 0. `p` is full (taken). */
void out_spec_of(const qvl_model *m, const qvl_plan_params *p, out_spec *o);
/* Floats in one of item i's rows (0 for i out of range). */
size_t plan_row_len(const qvl_plan *p, size_t i);
/* The sink of tokens [tok0, tok0 + n) of an output at `out` whose planes are plane_tokens tokens long, being the
 * encode's tokens from t0 on: CONCAT puts target k at column k·O of each row, SPLIT at plane k. */
void out_sink(const out_spec *o, void *out, size_t plane_tokens, size_t t0, size_t tok0, size_t n, tower_sink *k);
/* Tokens [tok0, tok0 + n) of every plane of that output must be finite (NaN weights, or activations past the float32
 * range, would otherwise come back as a success): the first value that is not, as QVL_ERR_NONFINITE naming the
 * feature, the token (counted from tok_base) and the column. */
qvl_status out_finite(const out_spec *o, const void *out, size_t plane_tokens, size_t tok0, size_t n, size_t tok_base,
                      qvl_error *err);

/* A plan whose videos are streamed instead of held (model/stream.c): for a video item, in place of making its rows,
 * plan_create_hooked calls these on its own thread. */
typedef struct plan_hook {
    /* The video's sampling is known: info is the item as planned (grid, tokens, out_bytes, frame table); vr is
     * started without rows: the hook sets where they go (video_rows_set_place). Called again if the stream is
     * sampled again (video_sink.begin). */
    qvl_status (*begin)(void *user, const qvl_item_info *info, video_rows *vr, qvl_error *err);
    /* Before each sampled frame goes to vr (last 0), and once after the last (last 1): room for vr's rows. */
    qvl_status (*frame)(void *user, video_rows *vr, int last, qvl_error *err);
    /* The decoding's stop probe, in place of the ctx's cancel flag and callback and the plan's cancel_fn. */
    int (*stopped)(void *user);
    void *user;
} plan_hook;

/* qvl_plan_create, videos through `hook` (NULL: qvl_plan_create): a video item planned well has no rows. */
qvl_status plan_create_hooked(qvl_ctx *ctx, const qvl_item *items, size_t n_items, const qvl_plan_params *params,
                              const plan_hook *hook, qvl_plan **out, qvl_error *err);

#endif
