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
/* qvl_video_grid without its argument checks (v->rgb may be NULL: only the sampling and sizes are read), with full
 * params. */
qvl_status video_grid_of(const qvl_video *v, const qvl_preprocess_params *p, qvl_grid *grid, qvl_error *err);

/* A video's rows made as its frames arrive, bit for bit those of qvl_preprocess_video over the same frames: each
 * sampled frame is resized (the same resize of the same frame) into its temporal patch's buffer as it comes, in any
 * order, and each temporal patch's rows are written once its frames are in (the last padded with the clip's last
 * frame). Holds the resized frames of the temporal patches not yet complete (one patch when the frames come in
 * order; a buffer of temporal_patch frames for each patch begun and not finished) and the resize workspace, never
 * the clip's source frames.
 *   video_rows_start  for v's sampling and sizes (v->rgb not read) and its grid (video_grid_of), into rows (the
 *                     grid's rows · row_len floats, the caller's), on `pool` (NULL: one of its own, p->n_threads);
 *                     p (full params) must outlive the rows' making; a second start drops the first's state
 *   video_rows_frame  slot `slot` of v's sampled frames (each slot once, in any order), v->width x v->height RGB
 *   video_rows_free   the buffers (also after a failure; a zeroed video_rows is free) */
/* Where a temporal patch's rows go when they are not the whole clip's rows (video_rows_set_place): a stream's
 * bounded ring. where(t) returns the rows of temporal patch t (grid h·w rows), or NULL when there is no room for
 * them yet: the patch is then kept, complete, as its resized frames, until video_rows_place finds room; placed(t)
 * says they are written. Both are called on the thread that hands the frames over. */
typedef struct rows_place {
    float *(*where)(void *user, long t);
    void (*placed)(void *user, long t);
    void *user;
} rows_place;

typedef struct video_rows {
    const qvl_preprocess_params *p;
    rows_place place; /* where.fn NULL: into `rows`, the whole clip's */
    thread_pool *pool, *own;
    float *rows;
    uint8_t *frames;  /* n_pend buffers of temporal_patch frames of th x tw x 3 */
    long *pend_t;     /* [n_pend] the temporal patch a buffer holds, -1 for none */
    int *pend_got;    /* [n_pend] how many of its frames are in */
    size_t n_pend;
    uint8_t *taken;   /* [n_frames] the slots handed over */
    void *ws;         /* the resize's */
    int32_t w, h, th, tw, n_frames;
    int resize;
    size_t frame_bytes, next; /* next: the slots handed over so far */
    float lut[3][256];
} video_rows;
qvl_status video_rows_start(video_rows *vr, const qvl_video *v, const qvl_grid *grid, const qvl_preprocess_params *p,
                            float *rows, thread_pool *pool, qvl_error *err);
qvl_status video_rows_frame(video_rows *vr, size_t slot, const uint8_t *rgb, qvl_error *err);
void video_rows_free(video_rows *vr);
/* After video_rows_start (rows NULL): each complete temporal patch goes where `place` says (rows_place). */
void video_rows_set_place(video_rows *vr, const rows_place *place);
/* The complete temporal patches kept for want of room (rows_place) written where there is room now, lowest
 * first; the number still kept. */
size_t video_rows_place(video_rows *vr);

/* qvl_image_decode with `label` naming the bytes in messages, and qvl_image_load (without its argument checks),
 * both stopped by `stop` (core/stop.h; NULL: never) before decoding and during a JPEG's or a PNG's decode. */
qvl_status image_decode_labeled(const void *data, size_t size, const qvl_decode_params *p, const stop_probe *stop,
                                const char *label, qvl_image *out, qvl_error *err);
qvl_status image_load_item(const char *path, const qvl_decode_params *p, const stop_probe *stop, qvl_image *out,
                           qvl_error *err);

#endif
