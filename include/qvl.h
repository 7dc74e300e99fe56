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
 * threads. A qvl_ctx holds one worker's scratch memory and its own thread pool (n_threads threads, the calling
 * thread included, started by qvl_ctx_create and joined by qvl_ctx_free; idle workers sleep after a few
 * microseconds); use one ctx per concurrent caller. Contexts share no threads or state, so several can encode
 * at once from different threads. Results never depend on the thread count.
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

/* Export: every function below is exported from libqvl.so; everything else in the library is hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define QVL_API __attribute__((visibility("default")))
#else
#define QVL_API
#endif

#define QVL_VERSION_MAJOR 1
#define QVL_VERSION_MINOR 0
#define QVL_VERSION_PATCH 0
/* MAJOR·10000 + MINOR·100 + PATCH of this header; compare with qvl_version_number() to catch a mismatch. */
#define QVL_VERSION_NUMBER (QVL_VERSION_MAJOR * 10000 + QVL_VERSION_MINOR * 100 + QVL_VERSION_PATCH)

/* The library's version at run time: "1.0.0", and its QVL_VERSION_NUMBER. */
QVL_API const char *qvl_version(void);
QVL_API int qvl_version_number(void);

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
QVL_API const char *qvl_status_name(qvl_status s);

/* Caller-owned error detail. */
typedef struct qvl_error {
    qvl_status status;
    char message[1024];
} qvl_error;

/* Storage dtypes of weights. */
typedef enum qvl_dtype { QVL_DTYPE_F32 = 0, QVL_DTYPE_F16 = 1, QVL_DTYPE_BF16 = 2 } qvl_dtype;
QVL_API const char *qvl_dtype_name(qvl_dtype d);

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
    int isa;                          /* kernel set in use: 1 portable, 2 AVX2, 3 AVX-512 (qvl_isa_name) */
} qvl_model_info;

/* CPU kernel sets. AUTO: the widest this CPU runs (AVX-512, else AVX2+FMA, else portable C). AVX2 and AVX512 force
 * that set (benchmarks, tests, or a machine where the narrower one runs faster); they give the same GEMM bits,
 * and the whole tower agrees between them to float32 rounding (attention sums in a different order). */
typedef enum qvl_isa { QVL_ISA_AUTO = 0, QVL_ISA_AVX2 = 2, QVL_ISA_AVX512 = 3 } qvl_isa;

/* The name of a kernel set: "auto", "portable", "avx2", "avx512" (portable is what AUTO picks without AVX2). */
QVL_API const char *qvl_isa_name(int isa);

typedef struct qvl_load_params {
    qvl_isa isa; /* kernels the model's contexts run; weights are packed for them at load. A set this CPU lacks:
                    QVL_ERR_UNSUPPORTED. Default (zeroed struct, or NULL params): QVL_ISA_AUTO */
} qvl_load_params;

/* Load the vision tower from a model directory as users have it on disk: config.json (vision_config or a
 * vision-only config) and weights from optiq/optiq_vision.safetensors, model.safetensors.index.json or
 * model.safetensors, under any known prefix. `params` may be NULL. On success *out owns the mapping. */
QVL_API qvl_status qvl_model_load(const char *dir, const qvl_load_params *params, qvl_model **out, qvl_error *err);
QVL_API void qvl_model_free(qvl_model *m);
QVL_API void qvl_model_get_info(const qvl_model *m, qvl_model_info *info);

/* Content fingerprint of the tower's weights: XXH3-128 over canonical names, dtypes, shapes and bytes in canonical
 * order (conv weight in HF layout), the same for every layout, prefix and sharding of the same weights. Computed on
 * first call and cached; thread-safe. `hex` receives 32 lowercase hex digits and a NUL. */
QVL_API qvl_status qvl_model_fingerprint(qvl_model *m, uint8_t digest[16], char hex[33], qvl_error *err);

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

#define QVL_MAX_THREADS 1024

typedef struct qvl_ctx_params {
    int n_threads;         /* threads of the context's pool, the caller included; 0: one per CPU this process may
                              use (its affinity mask); at most QVL_MAX_THREADS */
    qvl_pos_mode pos_mode; /* default QVL_POS_CLOSED_FORM */
} qvl_ctx_params;

QVL_API void qvl_ctx_params_default(qvl_ctx_params *p);

/* Create an encoder context over a loaded model, with its thread pool. The model must outlive the context.
 * `params` may be NULL. When the system refuses some threads, the context runs on those it got. */
QVL_API qvl_status qvl_ctx_create(const qvl_model *m, const qvl_ctx_params *params, qvl_ctx **out, qvl_error *err);
QVL_API void qvl_ctx_free(qvl_ctx *ctx);
/* Threads of the context's pool, the caller included: what it got (0 for NULL). */
QVL_API int qvl_ctx_threads(const qvl_ctx *ctx);

/* Patch rows (S) and merged tokens (S/4) of a list of grids; 0 if a grid is invalid or the count overflows. */
QVL_API size_t qvl_patch_rows(const qvl_grid *grids, size_t n_grids);
QVL_API size_t qvl_merged_tokens(const qvl_grid *grids, size_t n_grids);

/* Reserve scratch for inputs of up to `max_rows` patch rows. `max_segment` (the largest attention segment) is
 * accepted and ignored: attention memory does not grow with it. qvl_encode reserves on demand; calling this first
 * keeps allocation out of the encode path entirely. */
QVL_API qvl_status qvl_ctx_reserve(qvl_ctx *ctx, size_t max_rows, size_t max_segment, qvl_error *err);
/* Bytes of scratch the context holds now (what qvl_ctx_reserve or the largest encode so far allocated): every
 * activation buffer of the forward pass, for the largest input seen. 0 for NULL or before the first reserve. */
QVL_API size_t qvl_ctx_scratch_size(const qvl_ctx *ctx);

/* Encode preprocessed patch rows.
 *   pixels     [S, row_len] float32, merge-block-major rows, (c, t, y, x) columns, S = qvl_patch_rows(grids)
 *   grids      one per image/video, in the order their rows appear
 *   merged     out: [S/4, out_hidden] float32 (caller-owned)
 *   deepstack  out: NULL, or an array of n_deepstack pointers each to [S/4, out_hidden] float32 (any may be NULL)
 * Attention never crosses an item or a temporal slice of a video. */
QVL_API qvl_status qvl_encode(qvl_ctx *ctx, const float *pixels, size_t n_rows, const qvl_grid *grids, size_t n_grids,
                      float *merged, float *const *deepstack, qvl_error *err);

/* Where the time of the last qvl_encode / qvl_run_blocks went, and the work it did. */
typedef struct qvl_profile {
    double total_ms;
    double patch_ms;       /* patch-embedding GEMM */
    double pos_rope_ms;    /* position interpolation, rotary tables, rotary applied to q and k */
    double gemm_ms;        /* the blocks' qkv, proj, fc1 (+ GELU), fc2 GEMMs */
    double attention_ms;   /* fused attention */
    double norm_ms;        /* the blocks' LayerNorms and other elementwise work */
    double merger_ms;      /* final and DeepStack mergers */
    double gemm_flops;     /* 2·M·N·K summed over every GEMM, patch embed and mergers included */
    double attention_flops;/* 4·n²·head_dim per segment and head */
} qvl_profile;

QVL_API void qvl_ctx_get_profile(const qvl_ctx *ctx, qvl_profile *out);

/* Stage taps for parity bisection. When set, every encode calls `fn` for each stage in order with float32 data:
 *   "patch" [S,H], "pos" [S,H], "blk0".."blk{depth-1}" [S,H], "deepstack{k}" [S/4,O], "merged" [S/4,O].
 * `data` is valid only during the call. Pass fn = NULL to clear. */
typedef void (*qvl_tap_fn)(void *user, const char *stage, const float *data, size_t rows, size_t cols);
QVL_API void qvl_ctx_set_tap(qvl_ctx *ctx, qvl_tap_fn fn, void *user);

/* Block-chain debug entry: run blocks [0, depth) on a caller-given hidden state [S, H] (for example the
 * reference's post-position-embedding state), with the rotary tables and segments of `grids`. If through_merger,
 * also run the final merger and write [S/4, O] to `out`; otherwise write the post-block state [S, H]. DeepStack
 * features are reported through the tap, if one is set. */
QVL_API qvl_status qvl_run_blocks(qvl_ctx *ctx, const float *hidden, size_t n_rows, const qvl_grid *grids, size_t n_grids,
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

QVL_API void qvl_synth_params_default(qvl_synth_params *p);
/* NULL-terminated list of preset names. */
QVL_API const char *const *qvl_synth_presets(void);
/* Write a deterministic synthetic checkpoint (config.json, preprocessor_config.json, weights) into `dir`
 * (created if missing). The same params always give byte-identical files. */
QVL_API qvl_status qvl_synth_write(const qvl_synth_params *p, const char *dir, qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Files: reading pixel rows and writing float32 outputs (used by the qvl CLI; src/io/files.c)
 * ------------------------------------------------------------------------------------------------------------- */

/* Free memory returned by the qvl_read_* functions. NULL is a no-op. */
QVL_API void qvl_free(void *p);

/* Read preprocessed pixel rows from `path`, chosen by content:
 *   .npy          float32 (or f64 / f16, converted), C order, [S, row_len]; no grids (*n_grids = 0)
 *   .safetensors  tensor "pixel_values" [S, row_len] (F32, F16, BF16 or F64, converted to float32) and, if present,
 *                 "grid_thw" [n, 3] (I64 or I32, each value in 1..INT32_MAX)
 * On success *rows is a malloc'd [*n_rows, *row_len] float32 array and *grids (when `grids` is not NULL) a malloc'd
 * array of *n_grids grids or NULL when there are none; free both with qvl_free. `grids` and `n_grids` may be NULL to
 * ignore grid_thw. On failure the outputs are NULL/0 and nothing leaks. Grids are not checked against the rows. */
QVL_API qvl_status qvl_read_rows(const char *path, float **rows, size_t *n_rows, size_t *row_len, qvl_grid **grids,
                         size_t *n_grids, qvl_error *err);

/* Write a [rows, cols] float32 row-major array as a .npy file (version 1.0, '<f4'). */
QVL_API qvl_status qvl_write_npy(const char *path, const float *data, size_t rows, size_t cols, qvl_error *err);

/* One float32 output tensor for qvl_write_safetensors. */
typedef struct qvl_out_tensor {
    const char *name;  /* unique, not "grid_thw" when grids are written */
    const float *data; /* [rows, cols] row-major */
    size_t rows, cols;
} qvl_out_tensor;

/* Write a safetensors file holding the n float32 tensors in the given order, then, when n_grids > 0, "grid_thw"
 * int64 [n_grids, 3]; `meta_kv` holds n_meta key/value string pairs (key0, value0, ...) for "__metadata__" (may be
 * NULL when n_meta is 0). Written to "<path>.tmp" and renamed into place; identical inputs give identical bytes. */
QVL_API qvl_status qvl_write_safetensors(const char *path, const qvl_out_tensor *t, size_t n, const qvl_grid *grids,
                                 size_t n_grids, const char *const *meta_kv, size_t n_meta, qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Images and video in: decode, smart-resize, exact resize, normalize, patchify
 *
 * The rows these functions produce equal, value for value, what transformers' Qwen3-VL processors produce: the
 * default ("fast", torchvision) image processor or the PIL one (qvl_resize_mode), and Qwen3VLVideoProcessor.
 * ------------------------------------------------------------------------------------------------------------- */

/* A decoded RGB image: rgb[(y·width + x)·3 + c], 8 bits per channel. Owned by the struct: free with qvl_image_free. */
typedef struct qvl_image {
    int32_t width, height;
    uint8_t *rgb;
} qvl_image;

typedef struct qvl_decode_params {
    uint64_t max_pixels; /* the header's width·height above this is refused before decoding (decompression bombs);
                            default 178956970, the limit at which PIL raises DecompressionBombError */
    int apply_exif;      /* 1 (default): apply the EXIF orientation, as transformers' load_image does */
} qvl_decode_params;

QVL_API void qvl_decode_params_default(qvl_decode_params *p);

/* Decode JPEG (baseline, progressive, gray, CMYK/YCCK), PNG (8/16-bit, gray, palette, alpha), WebP (lossy, lossless,
 * alpha), GIF (first frame) or BMP (uncompressed) from memory, and convert to RGB exactly as transformers'
 * load_image + convert_to_rgb do with Pillow: EXIF orientation applied, PIL's convert("RGB") rules (alpha dropped,
 * not composited; CMYK, 16-bit and palette by Pillow's formulas), and a tRNS / GIF colour key that survives
 * convert("RGB") whitened, as the processors' convert_to_rgb does. `p` may be NULL. On failure *out is zeroed. */
QVL_API qvl_status qvl_image_decode(const void *data, size_t size, const qvl_decode_params *p, qvl_image *out,
                            qvl_error *err);
QVL_API qvl_status qvl_image_load(const char *path, const qvl_decode_params *p, qvl_image *out, qvl_error *err);
QVL_API void qvl_image_free(qvl_image *img);

/* Frame sampling of a video (Qwen3VLVideoProcessor.sample_frames). */
typedef struct qvl_video_params {
    double fps;            /* frames to sample per second of video (default 2); ignored when num_frames > 0 */
    int32_t num_frames;    /* exact number of frames to sample (0: from fps) */
    int32_t min_frames;    /* default 4 */
    int32_t max_frames;    /* default 768 */
    double default_fps;    /* source frame rate assumed when the container has none (default 24) */
    uint64_t max_pixels;   /* per-frame decompression limit (as qvl_decode_params.max_pixels) */
} qvl_video_params;

QVL_API void qvl_video_params_default(qvl_video_params *p);

/* Source frame indices to sample from a video of `total` frames at `video_fps`: numpy
 * linspace(0, total − 1, n) rounded half to even, n from fps or num_frames and clamped as the reference does.
 * Writes up to `cap` indices and their count to *n. */
QVL_API qvl_status qvl_video_sample_indices(int64_t total, double video_fps, const qvl_video_params *p, int64_t *indices,
                                    size_t cap, size_t *n, qvl_error *err);

/* Sampled frames of a video, all of one size: rgb[((f·height + y)·width + x)·3 + c]. Free with qvl_video_free. */
typedef struct qvl_video {
    int32_t width, height;
    int32_t n_frames;      /* frames held (sampled) */
    uint8_t *rgb;
    int64_t *indices;      /* [n_frames] source frame index of each */
    int64_t total_frames;  /* frames in the source */
    double fps;            /* source frame rate */
} qvl_video;

/* Decode a video file through FFmpeg's libraries, keeping only the sampled frames (converted to RGB24; frames with
 * alpha are blended over white as transformers' video processor does). */
QVL_API qvl_status qvl_video_load(const char *path, const qvl_video_params *p, qvl_video *out, qvl_error *err);
/* A video given as frame images (in order), sampled like a file at p->default_fps frames per second. */
QVL_API qvl_status qvl_video_from_images(const char *const *paths, size_t n, const qvl_video_params *p, qvl_video *out,
                                 qvl_error *err);
QVL_API void qvl_video_free(qvl_video *v);

typedef enum qvl_resize_mode {
    QVL_RESIZE_TORCHVISION = 0, /* transformers' default (fast) processor on CPU: torch's uint8 antialiased bicubic */
    QVL_RESIZE_PIL = 1,         /* transformers' PIL processor and mlx-vlm: PIL Image.resize(BICUBIC), Pillow >= 13 */
    QVL_RESIZE_PIL_LEGACY = 2   /* the same with Pillow 9.4 .. 12.1 (always horizontal pass first) */
} qvl_resize_mode;

typedef struct qvl_preprocess_params {
    qvl_resize_mode resize;
    uint64_t min_pixels, max_pixels;             /* image budget (preprocessor_config.json size) */
    uint64_t video_min_pixels, video_max_pixels; /* whole-clip budget (video_preprocessor_config.json size) */
    int32_t size_h, size_w;                      /* exact target size in pixels (multiples of patch·merge); 0: off */
    float image_mean[3], image_std[3];
    double rescale_factor;
    int32_t patch, temporal_patch, merge;
    int n_threads;                               /* 0: all cores; threads started and joined per call */
} qvl_preprocess_params;

/* Qwen3-VL's published values (min 65536 / max 16777216 pixels for images, 4096 / 25165824 for video, patch 16,
 * temporal 2, merge 2, mean = std = 0.5, rescale 1/255), torchvision resize. */
QVL_API void qvl_preprocess_params_default(qvl_preprocess_params *p);

/* Read preprocessor_config.json and video_preprocessor_config.json from a model directory where present (either
 * output may be NULL); absent files or keys keep the values already in *p / *v. */
QVL_API qvl_status qvl_preprocess_params_load(const char *model_dir, qvl_preprocess_params *p, qvl_video_params *v,
                                      qvl_error *err);

/* transformers' smart_resize: sides rounded half-to-even to multiples of `factor`, then scaled into
 * [min_pixels, max_pixels]; refuses an aspect ratio above 200 and sides below `factor`. */
QVL_API qvl_status qvl_smart_resize(int32_t height, int32_t width, int32_t factor, uint64_t min_pixels, uint64_t max_pixels,
                            int32_t *out_height, int32_t *out_width, qvl_error *err);

/* Resize an RGB image with one of the exact kernels (the resize step of the processors, for tests and tools). */
QVL_API qvl_status qvl_image_resize(const qvl_image *src, int32_t height, int32_t width, qvl_resize_mode mode,
                            int n_threads, qvl_image *out, qvl_error *err);

/* The grid an image or video will have (the size query: rows = t·h·w of row_len = 3·Tp·P² floats). */
QVL_API qvl_status qvl_image_grid(const qvl_image *img, const qvl_preprocess_params *p, qvl_grid *grid, qvl_error *err);
QVL_API qvl_status qvl_video_grid(const qvl_video *v, const qvl_preprocess_params *p, qvl_grid *grid, qvl_error *err);

/* Resize, normalize and patchify into caller-owned rows [t·h·w, row_len] (merge-block-major rows, (c, t, y, x)
 * columns); an image fills both temporal slots; a video with an odd frame count repeats its last frame. */
QVL_API qvl_status qvl_preprocess_image(const qvl_image *img, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                qvl_error *err);
QVL_API qvl_status qvl_preprocess_video(const qvl_video *v, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif /* QVL_H */
