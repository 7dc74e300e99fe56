/* tower.h — the forward pass as the plan (plan.c) drives it: several items in one pass, each item's outputs to
 * its own destinations in the requested dtype and layout. Private to the library. */
#ifndef QVL_MODEL_TOWER_H
#define QVL_MODEL_TOWER_H

#include "core/pool.h"
#include "qvl.h"

/* Where the merged tokens [t0, t0 + n) of one encode go: dst[0] the final merger's output, dst[1 + d] DeepStack
 * feature d's (NULL: not wanted); row r of a target at dst + r·ld elements of `dtype`. */
typedef struct tower_sink {
    size_t t0, n;
    void *dst[1 + QVL_MAX_DEEPSTACK];
    size_t ld;
    qvl_dtype dtype;
} tower_sink;

/* Encode n_grids items: rows from `pixels` ([n_rows, row_len], contiguous) or, when pixels is NULL, item i's
 * rows at item_rows[i]. Sinks cover the merged tokens. Allocates only if the ctx's scratch is too small. */
qvl_status tower_encode(qvl_ctx *c, const float *pixels, const float *const *item_rows, size_t n_rows,
                        const qvl_grid *grids, size_t n_grids, const tower_sink *sinks, size_t n_sinks,
                        qvl_error *err);
/* Scratch bytes for `rows` patch rows (with the staging buffer that bf16/f16 sinks need when `stage`); 0 on
 * overflow. Reserve it (growing only). */
/* The one check of a grid (t ≥ 1; h, w positive multiples of the merge size, at most MAX_GRID_SIDE; a merge size
 * below 1 is refused too); `label` names it in the message. */
qvl_status tower_check_grid(int merge, const qvl_grid *g, const char *label, qvl_error *err);
size_t tower_scratch_bytes(const qvl_ctx *c, size_t rows, int stage);
qvl_status tower_reserve(qvl_ctx *c, size_t rows, int stage, qvl_error *err);
thread_pool *ctx_pool(qvl_ctx *c);
/* Whether the context's cancel flag is raised, or its cancel_fn says so (which raises the flag): qvl_ctx_cancel. */
int ctx_cancelled(qvl_ctx *c);
/* The cancel flag alone (never the cancel_fn, which is the caller's to be called on its own thread). */
int ctx_cancel_flag(qvl_ctx *c);
/* The context's resource limits (qvl_ctx_params.limits, taken at create). */
const qvl_limits *ctx_limits(const qvl_ctx *c);
/* Grids against limits: each t·h·w ≤ max_item_patches, their sum ≤ max_call_patches (qvl_limits_check_grids). */
qvl_status limits_check_grids(const qvl_limits *l, const qvl_grid *grids, size_t n_grids, qvl_error *err);
/* QVL_ERR_NONFINITE naming `label`, the row and the column of the first NaN or infinity in rows [n_rows, cols]. */
qvl_status rows_finite(const float *rows, size_t n_rows, size_t cols, const char *label, qvl_error *err);
const qvl_model *ctx_model(const qvl_ctx *c);
/* The context's settings as created (read-only after qvl_ctx_create; any thread may read them). */
const qvl_ctx_params *ctx_params(const qvl_ctx *c);

#endif
