/* tables.h — per-input tables of the tower: the interpolated learned position embedding and the 2-D rotary
 * angles, both in merge-block-major token order and repeated over each item's temporal slices. */
#ifndef QVL_MODEL_TABLES_H
#define QVL_MODEL_TABLES_H

#include <stddef.h>

#include "core/pool.h"
#include "model/model.h"

/* Largest grid side (in patches) and head dimension the tables handle. */
#define MAX_GRID_SIDE 16384
#define MAX_HEAD_DIM 1024

/* Bytes of the `taps` scratch tables_pos needs. */
#define TABLES_TAPS_BYTES ((size_t)2 * MAX_GRID_SIDE * 16)

/* pos[S, H]: bilinear (align-corners) resampling of the G×G table onto each item's h×w grid. */
void tables_pos(const qvl_model *m, qvl_pos_mode mode, const qvl_grid *grids, size_t n_grids, float *pos,
                void *taps, thread_pool *pool);

/* cos/sin [S, head_dim/2]: column j < d/2 (d = head_dim/2) holds the row angle row·inv_freq[j], column
 * d/2 + k the column angle col·inv_freq[k]. inv_freq[k] = 1 / theta^(2k/d) in float32. */
void tables_rope(const tower_config *c, const qvl_grid *grids, size_t n_grids, float *cos_t, float *sin_t);

#endif
