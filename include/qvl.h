/* qvl.h — the Qwen3-VL / Qwen3.5 vision encoder, in C.
 *
 * One public header. Everything the library offers is declared here; every other header in the tree is private.
 *
 * Usage
 *   qvl_error err;
 *   qvl_model *m;
 *   if (qvl_model_load("/path/to/Qwen3-VL-8B", NULL, &m, &err) != QVL_OK) { puts(err.message); ... }
 *   qvl_ctx *ctx;
 *   qvl_ctx_create(m, NULL, &ctx, &err);
 *   qvl_grid g = {1, 28, 28};                        // t, h, w in patches (h, w even)
 *   size_t n_tok = qvl_merged_tokens(&g, 1);          // t*h*w/4
 *   float *out = malloc(n_tok * info.out_hidden * sizeof(float));
 *   qvl_encode(ctx, pixels, 784, &g, 1, out, NULL, &err);
 *   qvl_ctx_free(ctx); qvl_model_free(m);
 *
 * Lifetimes. A qvl_model holds the weights (mmapped, read-only after load) and may be shared by any number of
 * threads. A qvl_ctx holds one worker's scratch memory and threads; use one ctx per concurrent caller.
 *
 * Errors. Every fallible call returns a qvl_status and, when `err` is not NULL, fills it with the status and a
 * one-line message naming the cause (file, tensor, expected and actual values). The library never exits or
 * aborts on bad input. All *_free functions accept NULL.
 *
 * Ownership. Outputs are caller-owned buffers, sized with the query functions below. The library keeps no
 * pointer to caller memory after a call returns.
 *
 * Numerics. Weights stay in their stored dtype (bf16, f16 or f32) and are widened in registers; activations and
 * accumulation are float32. Parity with Hugging Face transformers is measured in docs/PARITY.md.
 */
#ifndef QVL_H
#define QVL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_VERSION_MAJOR 0
#define QVL_VERSION_MINOR 1
#define QVL_VERSION_PATCH 0

/* Status codes. Numeric values are stable. */
typedef enum qvl_status {
    QVL_OK = 0,
    QVL_ERR_INVALID_ARG = 1, /* a caller-supplied argument is wrong (NULL, size, grid) */
    QVL_ERR_IO = 2,          /* a file could not be opened, read, mapped or written */
    QVL_ERR_FORMAT = 3,      /* a file is malformed (safetensors header, JSON, npy) */
    QVL_ERR_SHAPE = 4,       /* a tensor is missing or has the wrong shape or dtype */
    QVL_ERR_UNSUPPORTED = 5, /* a valid input this build does not handle (quantized tower, unknown family) */
    QVL_ERR_LIMIT = 6,       /* a size exceeds a limit or overflows */
    QVL_ERR_NOMEM = 7,       /* an allocation failed */
    QVL_ERR_BACKEND = 8,     /* a compute backend failed */
    QVL_ERR_INTERNAL = 9     /* a bug in qvl: please report */
} qvl_status;

/* Short stable name of a status ("ok", "invalid argument", ...). Never NULL. */
const char *qvl_status_name(qvl_status s);

/* Caller-owned error detail. */
typedef struct qvl_error {
    qvl_status status;
    char message[1024];
} qvl_error;

/* Storage dtypes of weights. */
typedef enum qvl_dtype { QVL_DTYPE_F32 = 0, QVL_DTYPE_F16 = 1, QVL_DTYPE_BF16 = 2 } qvl_dtype;
const char *qvl_dtype_name(qvl_dtype d);

/* ---------------------------------------------------------------------------------------------------------------
 * Model: discovery, weights, identity
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct qvl_model qvl_model;

#define QVL_MAX_DEEPSTACK 8

typedef enum qvl_weight_source {
    QVL_SOURCE_SIDECAR = 0, /* optiq/optiq_vision.safetensors */
    QVL_SOURCE_SHARDED = 1, /* model.safetensors.index.json */
    QVL_SOURCE_SINGLE = 2   /* model.safetensors */
} qvl_weight_source;

typedef struct qvl_model_info {
    char model_type[32];   /* config's model_type: qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe */
    int depth;             /* number of blocks */
    int hidden;            /* H */
    int heads;             /* nh */
    int head_dim;          /* H / nh */
    int intermediate;      /* block MLP width */
    int out_hidden;        /* merger output width O */
    int patch;             /* P (16) */
    int temporal_patch;    /* Tp (2) */
    int merge;             /* spatial merge m (2) */
    int in_channels;       /* 3 */
    int num_pos;           /* learned position table rows (G*G) */
    int row_len;           /* in_channels * Tp * P * P: the length of one pixel row (1536) */
    int n_deepstack;       /* DeepStack mergers (0 for Qwen3.5) */
    int deepstack_index[QVL_MAX_DEEPSTACK]; /* 0-based block index feeding each DeepStack merger */
    qvl_dtype weight_dtype;           /* dtype of the large matrices as stored */
    qvl_weight_source source;         /* where the weights were found */
    char prefix[40];                  /* tensor name prefix found: "model.visual.", "vision_tower.", ... */
    int conv_layout_mlx;              /* 1 if patch_embed was stored (out, kT, kH, kW, in) */
    int n_files;                      /* safetensors files mapped */
    size_t n_tensors;                 /* tower tensors bound */
    uint64_t n_params;                /* tower parameters */
    uint64_t weight_bytes;            /* bytes of tower weights as stored */
} qvl_model_info;

typedef struct qvl_load_params {
    int reserved; /* must be 0 */
} qvl_load_params;

/* Load the vision tower from a model directory as users have it on disk: config.json (vision_config or a
 * vision-only config) and weights from optiq/optiq_vision.safetensors, model.safetensors.index.json or
 * model.safetensors, under any known prefix. `params` may be NULL. On success *out owns the mapping. */
qvl_status qvl_model_load(const char *dir, const qvl_load_params *params, qvl_model **out, qvl_error *err);
void qvl_model_free(qvl_model *m);
void qvl_model_get_info(const qvl_model *m, qvl_model_info *info);

/* Content fingerprint of the tower's weights: XXH3-128 over canonical names, dtypes, shapes and bytes in canonical
 * order (conv weight in HF layout), the same for every layout, prefix and sharding of the same weights. Computed on
 * first call and cached; thread-safe. `hex` receives 32 lowercase hex digits and a NUL. */
qvl_status qvl_model_fingerprint(qvl_model *m, uint8_t digest[16], char hex[33], qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Encoding
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct qvl_ctx qvl_ctx;

/* One image (t = 1) or video (t = temporal patches) in patch units; h and w are multiples of the merge size. */
typedef struct qvl_grid {
    int32_t t, h, w;
} qvl_grid;

/* Position-embedding interpolation arithmetic (see docs/PARITY.md). */
typedef enum qvl_pos_mode {
    QVL_POS_CLOSED_FORM = 0, /* transformers >= 5.x vision_utils: src = i*(G-1)/(n-1), fp32 weights and sum */
    QVL_POS_LINSPACE = 1     /* transformers 4.57/5.0 fast_pos_embed_interpolate: torch.linspace coordinates */
} qvl_pos_mode;

typedef struct qvl_ctx_params {
    int n_threads;         /* 0: all cores */
    qvl_pos_mode pos_mode; /* default QVL_POS_CLOSED_FORM */
} qvl_ctx_params;

void qvl_ctx_params_default(qvl_ctx_params *p);

/* Create an encoder context over a loaded model. The model must outlive the context. `params` may be NULL. */
qvl_status qvl_ctx_create(const qvl_model *m, const qvl_ctx_params *params, qvl_ctx **out, qvl_error *err);
void qvl_ctx_free(qvl_ctx *ctx);

/* Patch rows (S) and merged tokens (S/4) of a list of grids; 0 if a grid is invalid or the count overflows. */
size_t qvl_patch_rows(const qvl_grid *grids, size_t n_grids);
size_t qvl_merged_tokens(const qvl_grid *grids, size_t n_grids);

/* Reserve scratch for inputs of up to `max_rows` patch rows whose largest attention segment is `max_segment` rows.
 * qvl_encode reserves on demand; calling this first keeps allocation out of the encode path entirely. */
qvl_status qvl_ctx_reserve(qvl_ctx *ctx, size_t max_rows, size_t max_segment, qvl_error *err);

/* Encode preprocessed patch rows.
 *   pixels     [S, row_len] float32, merge-block-major rows, (c, t, y, x) columns, S = qvl_patch_rows(grids)
 *   grids      one per image/video, in the order their rows appear
 *   merged     out: [S/4, out_hidden] float32 (caller-owned)
 *   deepstack  out: NULL, or an array of n_deepstack pointers each to [S/4, out_hidden] float32 (any may be NULL)
 * Attention never crosses an item or a temporal slice of a video. */
qvl_status qvl_encode(qvl_ctx *ctx, const float *pixels, size_t n_rows, const qvl_grid *grids, size_t n_grids,
                      float *merged, float *const *deepstack, qvl_error *err);

/* Stage taps for parity bisection. When set, every encode calls `fn` for each stage in order with float32 data:
 *   "patch" [S,H], "pos" [S,H], "blk0".."blk{depth-1}" [S,H], "deepstack{k}" [S/4,O], "merged" [S/4,O].
 * `data` is valid only during the call. Pass fn = NULL to clear. */
typedef void (*qvl_tap_fn)(void *user, const char *stage, const float *data, size_t rows, size_t cols);
void qvl_ctx_set_tap(qvl_ctx *ctx, qvl_tap_fn fn, void *user);

/* Block-chain debug entry: run blocks [0, depth) on a caller-given hidden state [S, H] (for example the
 * reference's post-position-embedding state), with the rotary tables and segments of `grids`. If through_merger,
 * also run the final merger and write [S/4, O] to `out`; otherwise write the post-block state [S, H]. DeepStack
 * features are reported through the tap, if one is set. */
qvl_status qvl_run_blocks(qvl_ctx *ctx, const float *hidden, size_t n_rows, const qvl_grid *grids, size_t n_grids,
                          int through_merger, float *out, qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Synthetic checkpoints (tests, demos, benchmarks)
 * ------------------------------------------------------------------------------------------------------------- */

typedef enum qvl_synth_layout {
    QVL_LAYOUT_HF = 0,      /* model.safetensors, model.visual.*, HF conv layout */
    QVL_LAYOUT_MLX = 1,     /* model.safetensors, vision_tower.*, MLX conv layout */
    QVL_LAYOUT_SIDECAR = 2, /* optiq/optiq_vision.safetensors, vision_tower.*, MLX conv layout */
    QVL_LAYOUT_SHARDED = 3, /* model.safetensors.index.json over several shards, model.visual.*, with text tensors */
    QVL_LAYOUT_NESTED = 4   /* model.safetensors, model.language_model.visual.*, HF conv layout */
} qvl_synth_layout;

typedef struct qvl_synth_params {
    const char *preset;   /* "tiny", "qwen3-vl-2b", "qwen3-vl-8b", "qwen3.5-27b", ... (qvl_synth_presets) */
    uint64_t seed;
    qvl_synth_layout layout;
    qvl_dtype dtype;      /* default QVL_DTYPE_BF16 */
    int depth;            /* 0: the preset's */
    int n_deepstack;      /* -1: the preset's; otherwise the count of entries in deepstack_index */
    int deepstack_index[QVL_MAX_DEEPSTACK];
} qvl_synth_params;

void qvl_synth_params_default(qvl_synth_params *p);
/* NULL-terminated list of preset names. */
const char *const *qvl_synth_presets(void);
/* Write a deterministic synthetic checkpoint (config.json, preprocessor_config.json, weights) into `dir`
 * (created if missing). The same params always give byte-identical files. */
qvl_status qvl_synth_write(const qvl_synth_params *p, const char *dir, qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Files: reading pixel rows and writing float32 outputs (used by the qvl CLI; src/io/files.c)
 * ------------------------------------------------------------------------------------------------------------- */

/* Free memory returned by the qvl_read_* functions. NULL is a no-op. */
void qvl_free(void *p);

/* Read preprocessed pixel rows from `path`, chosen by content:
 *   .npy          float32 (or f64 / f16, converted), C order, [S, row_len]; no grids (*n_grids = 0)
 *   .safetensors  tensor "pixel_values" [S, row_len] (F32, F16, BF16 or F64, converted to float32) and, if present,
 *                 "grid_thw" [n, 3] (I64 or I32, each value in 1..INT32_MAX)
 * On success *rows is a malloc'd [*n_rows, *row_len] float32 array and *grids (when `grids` is not NULL) a malloc'd
 * array of *n_grids grids or NULL when there are none; free both with qvl_free. `grids` and `n_grids` may be NULL to
 * ignore grid_thw. On failure the outputs are NULL/0 and nothing leaks. Grids are not checked against the rows. */
qvl_status qvl_read_rows(const char *path, float **rows, size_t *n_rows, size_t *row_len, qvl_grid **grids,
                         size_t *n_grids, qvl_error *err);

/* Write a [rows, cols] float32 row-major array as a .npy file (version 1.0, '<f4'). */
qvl_status qvl_write_npy(const char *path, const float *data, size_t rows, size_t cols, qvl_error *err);

/* One float32 output tensor for qvl_write_safetensors. */
typedef struct qvl_out_tensor {
    const char *name;  /* unique, not "grid_thw" when grids are written */
    const float *data; /* [rows, cols] row-major */
    size_t rows, cols;
} qvl_out_tensor;

/* Write a safetensors file holding the n float32 tensors in the given order, then, when n_grids > 0, "grid_thw"
 * int64 [n_grids, 3]; `meta_kv` holds n_meta key/value string pairs (key0, value0, ...) for "__metadata__" (may be
 * NULL when n_meta is 0). Written to "<path>.tmp" and renamed into place; identical inputs give identical bytes. */
qvl_status qvl_write_safetensors(const char *path, const qvl_out_tensor *t, size_t n, const qvl_grid *grids,
                                 size_t n_grids, const char *const *meta_kv, size_t n_meta, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif /* QVL_H */
