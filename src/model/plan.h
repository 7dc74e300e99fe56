/* plan.h — what plan.c shares with key.c: how an item's settings are resolved (the plan's, else the model
 * directory's json files, then the item's own) and how a directory of frames is listed. Private to the library. */
#ifndef QVL_MODEL_PLAN_H
#define QVL_MODEL_PLAN_H

#include <stddef.h>

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

#endif
