/* model.h — the loaded vision tower: configuration, bound weights, identity. Private to the library. */
#ifndef QVL_MODEL_MODEL_H
#define QVL_MODEL_MODEL_H

#include <stdint.h>

#include "backend/backend.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "qvl.h"

/* A weight matrix [rows = out, cols = in] in its stored dtype, bound tensor m->bound[bound]. A Linear's is read
 * only as panels (data NULL); the position table's data is owned_pos once the load has read it. */
typedef struct wmat {
    const void *data;
    size_t bound;
    qvl_dtype dtype;
    int rows, cols;
} wmat;

/* A Linear layer: weight in stored dtype, the same weight packed into GEMM panels (by the load), bias widened to
 * f32. */
typedef struct linear {
    wmat w;
    be_weight packed; /* panels in the model's `panels` block, packed by the model's backend */
    const float *b;     /* [w.rows] */
} linear;

typedef struct layernorm {
    const float *w, *b; /* [dim] f32 */
    int dim;
} layernorm;

typedef struct block_w {
    layernorm norm1, norm2;
    linear qkv;  /* [3H, H] */
    linear proj; /* [H, H] */
    linear fc1;  /* [I, H] */
    linear fc2;  /* [H, I] */
} block_w;

typedef struct merger_w {
    layernorm norm; /* [H] for the final merger (pre-shuffle), [4H] for DeepStack (post-shuffle) */
    linear fc1;     /* [4H, 4H] */
    linear fc2;     /* [O, 4H] */
} merger_w;

/* One bound tower tensor: canonical name, dtype, canonical (HF) shape, bytes, and where the load reads them. */
typedef struct bound_tensor {
    char name[96];
    qvl_dtype dtype;
    int ndim;
    int64_t shape[5];
    const st_file *file;  /* during the load: the stored tensor src of file (NULL after it) */
    const st_tensor *src;
    const void *data;     /* or, where bind made the bytes itself (the MLX conv weight permuted), these */
    uint64_t nbytes;
} bound_tensor;

struct qvl_model {
    tower_config cfg;
    qvl_model_info info;
    st_file **files;     /* the checkpoint's open files, owned during the load; closed at its end */
    int n_files;
    linear patch;       /* [H, row_len], columns in (c, t, y, x) order */
    wmat pos;           /* [num_pos, H] */
    block_w *blocks;    /* [depth] */
    merger_w merger;
    merger_w deepstack[QVL_MAX_DEEPSTACK];
    bound_tensor *bound; /* canonical order */
    size_t n_bound;
    void *owned_patch;   /* the patch weight permuted from MLX layout, when it had to be (during the load) */
    void *owned_pos;     /* the position table, copied from the checkpoint in its stored dtype */
    float *small;        /* every f32-widened vector (biases, norms), one allocation of n_small floats */
    size_t n_small;
    float *small_be;     /* the same in the backend's memory, where its operations read them (model_vec); small
                          * itself where that is the host's */
    void *panels;        /* every Linear's packed weight panels, one allocation of the backend's memory */
    const backend *be;   /* kernel set + precision the panels are packed for and the contexts run */
    int describe_only;   /* loaded with qvl_load_params.describe_only: no panels, no contexts */
    /* The model directory's preprocessing json files as the load read them, over the library's defaults: what
     * plans and keys start from for items and params that give none; pre_status / pre_err: why they could not be
     * read (reported by those plans and keys, not by the load). */
    qvl_preprocess_params pre;
    qvl_video_params pre_video;
    qvl_status pre_status;
    qvl_error pre_err;
    uint8_t fp[16];      /* the fingerprint, computed by the load */
};

/* qvl_model_load on backend entry `on` (one of backend_table's, test-only ones included: the tests load a model
 * on "amx-emulated", which no request selects), the load params' isa and precision then unused; `on` NULL: the
 * entry backend_select picks for them, which is qvl_model_load. */
qvl_status model_load_on(const char *dir, const qvl_load_params *params, const backend *on, qvl_model **out,
                         qvl_error *err);

/* Where the backend's operations read vector v of m->small (a bias or a LayerNorm's affine; NULL stays NULL). */
static inline const float *model_vec(const qvl_model *m, const float *v) {
    return v ? m->small_be + (v - m->small) : NULL;
}

struct checkpoint;

/* Bind every tower tensor of m->cfg from the checkpoint's table into `m`, and take its source and prefix into
 * m->info (bind.c); the vectors (widened to f32) and an MLX conv weight (permuted) are read here, the rest by the
 * load. The files must stay open until the load has read them: the caller hands them to m, and the load closes
 * them. */
qvl_status model_bind(qvl_model *m, const struct checkpoint *ck, qvl_error *err);

#endif
