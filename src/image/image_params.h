/* image_params.h — defaults of the image/video params structs, and taking a caller's (versioned) struct into a
 * full local copy (core/params.h). Every public function of src/image/ that takes params goes through these. */
#ifndef QVL_IMAGE_PARAMS_H
#define QVL_IMAGE_PARAMS_H

#include "core/pool.h"
#include "core/stop.h"
#include "qvl.h"

void decode_defaults(qvl_decode_params *p);
void preprocess_defaults(qvl_preprocess_params *p);
void video_defaults(qvl_video_params *p);
/* *full = the defaults overlaid with the caller's *p (NULL: defaults alone). */
qvl_status decode_params_take(qvl_decode_params *full, const qvl_decode_params *p, qvl_error *err);
qvl_status preprocess_params_take(qvl_preprocess_params *full, const qvl_preprocess_params *p, qvl_error *err);
qvl_status video_params_take(qvl_video_params *full, const qvl_video_params *p, qvl_error *err);

/* The patch geometry every item is held to (patch 1..1024, merge and temporal_patch 1..16), before any division by
 * it; `label` (may be NULL) starts the message. Items of preprocessed rows (plan.c) pass through nothing else. */
qvl_status preprocess_geometry_check(const qvl_preprocess_params *p, const char *label, qvl_error *err);
/* qvl_preprocess_image / _video on a caller's pool (a context's), with full (already taken) params. */
qvl_status preprocess_image_pool(const qvl_image *img, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                 thread_pool *pool, qvl_error *err);
qvl_status preprocess_video_pool(const qvl_video *v, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                 thread_pool *pool, qvl_error *err);
/* qvl_image_decode with `label` naming the bytes in messages, and qvl_image_load (without its argument checks),
 * both stopped by `stop` (core/stop.h; NULL: never) before decoding and during a JPEG's or a PNG's decode. */
qvl_status image_decode_labeled(const void *data, size_t size, const qvl_decode_params *p, const stop_probe *stop,
                                const char *label, qvl_image *out, qvl_error *err);
qvl_status image_load_item(const char *path, const qvl_decode_params *p, const stop_probe *stop, qvl_image *out,
                           qvl_error *err);

#endif
