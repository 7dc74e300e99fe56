/* plan.h — what plan.c shares with key.c: how an item's settings are resolved (the plan's, else the model
 * directory's json files, then the item's own) and how a directory of frames is listed. Private to the library. */
#ifndef QVL_MODEL_PLAN_H
#define QVL_MODEL_PLAN_H

#include <stddef.h>

#include "image/image_params.h"
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
