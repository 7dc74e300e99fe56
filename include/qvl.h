/* qvl.h — the Qwen3-VL / Qwen3.5 vision encoder, in C. The one public header: everything libqvl offers is
 * declared here, and this comment is its manual.
 *
 * Quick start (a complete program: README.md "Using libqvl from C")
 *   qvl_error err;
 *   qvl_model *m;  qvl_ctx *ctx;  qvl_plan *plan;
 *   qvl_model_load("/path/to/Qwen3-VL-8B", NULL, &m, &err);          // weights read, validated, packed
 *   qvl_ctx_create(m, NULL, &ctx, &err);                              // scratch + thread pool
 *   qvl_item it;  qvl_item_default(&it);
 *   it.kind = QVL_ITEM_PATH;  it.path = "photo.jpg";
 *   qvl_plan_create(ctx, &it, 1, NULL, &plan, &err);                  // decode + preprocess, sizes known
 *   qvl_item_info info;  qvl_plan_item(plan, 0, &info);                // grid, tokens, out_bytes, status
 *   void *out = malloc(info.out_bytes);
 *   qvl_plan_encode(ctx, plan, &out, &err);                           // [tokens, out_hidden·(1+n_deepstack)]
 *   qvl_plan_free(plan); qvl_ctx_free(ctx); qvl_model_free(m);
 *
 * Objects and threads
 *   qvl_model  the weights (packed at load, read-only after it). Any number of threads may use one model at once.
 *   qvl_ctx    one worker: scratch memory and its own thread pool (n_threads threads, the calling thread
 *              included, started by qvl_ctx_create and joined by qvl_ctx_free). Calls on one ctx must not overlap;
 *              use one ctx per concurrent caller. Contexts share nothing, so several encode at once.
 *   qvl_plan   the decoded and preprocessed items of one request, with their sizes. Made and encoded on one ctx.
 *   Every other function is reentrant: it touches only its arguments. Results never depend on the thread count.
 *   The only process-wide state is read-only after first use (CPU feature detection). qvl_ctx_cancel may be
 *   called from any thread at any time.
 *
 * Errors
 *   Every fallible call returns a qvl_status and takes a `qvl_error *err` last (NULL to ignore). Every public
 *   function that takes an err clears it on entry (status QVL_OK, empty message); on failure it sets err->status
 *   to the returned status and err->message to one line that is never empty and names the cause: the file,
 *   tensor, field or argument, and the expected and actual values. On success err stays cleared. The library
 *   never exits, aborts or prints on bad input. All *_free functions accept NULL.
 *
 * Ownership
 *   Outputs go to caller-owned buffers, sized by a query first (qvl_plan_item().out_bytes, qvl_patch_rows, ...).
 *   Inputs are borrowed for the duration of the call only, except where a struct says it borrows for longer
 *   (a ROWS item's rows, until its plan is freed). The few functions that return memory say how to free it.
 *
 * ABI: params structs
 *   Every params struct (qvl_*_params, qvl_item) starts with `size_t struct_size` and is initialised by its
 *   *_default() function only, which sets struct_size = sizeof the struct as the caller compiled it and every
 *   field to its default. Fields are only ever appended in later versions; the library reads the first
 *   struct_size bytes and takes defaults for fields the caller's header did not have, so old binaries keep
 *   working against a newer libqvl.so.1. A struct_size of 0 (a zeroed, not defaulted struct) is refused with
 *   QVL_ERR_INVALID_ARG. Passing NULL for a params pointer means all defaults. Enumerator values and the status
 *   codes are stable. Within one major version (the SONAME libqvl.so.1) nothing is removed or changed.
 *
 * Limits
 *   Every resource an input can make qvl spend is bounded by a qvl_limits field (see "Resource limits" below,
 *   docs/SECURITY.md), checked from headers and grids before the memory is allocated; an item that breaks a limit
 *   fails alone with QVL_ERR_LIMIT and a message naming the limit, the value and how to raise it.
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
    QVL_ERR_INTERNAL = 9,    /* a bug in qvl: please report */
    QVL_ERR_CANCELLED = 10,  /* the context's cancel flag was raised (qvl_ctx_cancel) */
    QVL_ERR_NONFINITE = 11,  /* a NaN or infinity in input rows, in the weights, or in the tower's output */
    QVL_ERR_RESAMPLED = 12   /* a streamed video was sampled again after parts of it were told: read it whole */
} qvl_status;

/* Short stable name of a status ("ok", "invalid argument", ...). Never NULL. */
QVL_API const char *qvl_status_name(qvl_status s);

/* Caller-owned error detail (see "Errors" above). */
typedef struct qvl_error {
    qvl_status status;
    char message[1024];
} qvl_error;

/* Storage dtypes of weights. */
typedef enum qvl_dtype { QVL_DTYPE_F32 = 0, QVL_DTYPE_F16 = 1, QVL_DTYPE_BF16 = 2 } qvl_dtype;
QVL_API const char *qvl_dtype_name(qvl_dtype d);


/* ---------------------------------------------------------------------------------------------------------------
 * Resource limits (docs/SECURITY.md)
 *
 * What one input or one call may cost, each checked before the memory it bounds is allocated, with the cost derived
 * from headers (image and canvas sizes, frame counts) and grids. A limit that is exceeded fails the item (or the
 * call) with QVL_ERR_LIMIT and a message naming the field, the value found, the limit and how to raise it (the
 * field of qvl_limits; `qvl encode --limit NAME=N`). Limits are given to
 *   qvl_ctx_params.limits   the context's ceiling: qvl_encode, qvl_run_blocks and every plan made on it;
 *   qvl_plan_params.limits  a plan's own, lowered further (each field the smaller of the two: a request cannot
 *                           raise what the server's context allows); a plan made without a ctx (preprocessing
 *                           only) has these alone;
 *   qvl_decode_params.limits / qvl_video_params.limits  the standalone decode and video calls (in a plan, the
 *                           smaller of these and the plan's).
 * NULL means the defaults below. Every field must be at least 1.
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct qvl_limits {
    size_t struct_size;           /* set by qvl_limits_default */
    uint64_t max_image_pixels;    /* width·height of a decoded image, from its header (default 178956970, the
                                     count at which PIL raises DecompressionBombError); also bounded by
                                     qvl_decode_params.max_pixels */
    uint64_t max_canvas_pixels;   /* the canvas of a GIF (logical screen, grown to hold the first frame) or an
                                     animated WebP, before it is allocated (default 178956970) */
    uint64_t max_input_bytes;     /* bytes of one image file (also one read as a one-frame video), and of one
                                     buffer in memory: an ENCODED item, image or video, and the data of
                                     qvl_image_decode / qvl_video_decode (default 2 GiB). Not a video file read
                                     from a path, which FFmpeg reads in pieces, never whole */
    uint64_t max_png_chunk_bytes; /* a PNG chunk before the image data, and a text/ICC chunk's inflated size
                                     (default 8 MiB) */
    uint32_t max_jpeg_scans;      /* scans of a progressive JPEG (default 500) */
    uint32_t max_video_frames;    /* frames sampled for one video or FRAMES item (default 4096) */
    uint64_t max_video_pixels;    /* frames · width · height of the source frames qvl_video_load / _decode /
                                     _from_images return, before they are decoded (default 2^30: 3 GiB of RGB).
                                     Not a plan's video: a plan resizes each sampled frame into the item's rows
                                     as it is decoded and holds one source frame at a time */
    uint64_t max_item_patches;    /* patch rows t·h·w of one item, before its rows are allocated (default 262144 =
                                     4 times the default image budget of 65536 patches; a plan without a ctx
                                     counts a longer row than 1536 values as several: qvl_plan_create) */
    uint64_t max_call_patches;    /* patch rows of one qvl_encode / qvl_run_blocks call, and of all the items of
                                     one plan together (default 1048576) */
    uint64_t max_decode_work;     /* pixels decoded for one image, each pass counted: a progressive JPEG's scans ·
                                     width · height, checked as each scan begins (default 2^31, about 1.3 s of
                                     decoding on a 2-core VM; every JPEG of up to 10 scans within the default
                                     max_image_pixels passes: 10 is what encoders write; raising max_image_pixels
                                     past 2^31 / 10 needs this raised too). Appended: a caller built before it
                                     passes a smaller struct_size and gets the default */
    uint64_t max_video_decode_pixels; /* pixels one video's decoding produces: width · height of every frame decoded,
                                     sampled or not (a video is decoded from its start to its last sampled frame;
                                     a stream without a frame count in its header once more to count them),
                                     checked from the container's frame count and size before decoding and frame
                                     by frame while decoding (default 2^38: an hour of 1080p at 30 fps). Appended,
                                     as max_decode_work */
} qvl_limits;

/* Every qvl_limits field in order, as X(name, bits) with bits 32 or 64 (the field's width): for tools that list,
 * parse or print the limits without a hand-written list. */
#define QVL_LIMIT_FIELDS(X)                                                                                          \
    X(max_image_pixels, 64)                                                                                          \
    X(max_canvas_pixels, 64)                                                                                         \
    X(max_input_bytes, 64)                                                                                           \
    X(max_png_chunk_bytes, 64)                                                                                       \
    X(max_jpeg_scans, 32)                                                                                            \
    X(max_video_frames, 32)                                                                                          \
    X(max_video_pixels, 64)                                                                                          \
    X(max_item_patches, 64)                                                                                          \
    X(max_call_patches, 64)                                                                                          \
    X(max_decode_work, 64)                                                                                           \
    X(max_video_decode_pixels, 64)

/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_limits_init(qvl_limits *p, size_t struct_size);
static inline void qvl_limits_default(qvl_limits *p) { qvl_limits_init(p, sizeof *p); }

/* Check grids against `limits` (NULL: the defaults) without allocating anything: each grid's t·h·w against
 * max_item_patches, their sum against max_call_patches, and t, h, w ≥ 1. A server can run this on a request's grids
 * before it reads the request's rows. */
struct qvl_grid;
QVL_API qvl_status qvl_limits_check_grids(const qvl_limits *limits, const struct qvl_grid *grids,
                                          size_t n_grids, qvl_error *err);

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
    int n_files;                      /* safetensors files read (closed by the end of the load) */
    size_t n_tensors;                 /* tower tensors bound */
    uint64_t n_params;                /* tower parameters */
    uint64_t weight_bytes;            /* bytes of tower weights as stored */
    int isa;                          /* kernel set in use: 1 portable, 2 AVX2, 3 AVX-512 (qvl_isa_name) */
    int precision;                    /* arithmetic in use: QVL_PRECISION_F32 or QVL_PRECISION_BF16 */
    char backend[24];                 /* the compute backend the contexts run: "avx512", "avx512bf16", ... */
    char bf16_backend[24];            /* the bf16 backend this CPU would run for precision bf16, "" if none */
    char amx[96];                     /* AMX-BF16 on this CPU and process: "usable (...)", "absent", or why not.
                                         On an AMX CPU under Linux, finding out (here, or loading with precision
                                         bf16 / auto or isa AMX; never an f32 load) requests the process's
                                         tile-data permission once (arch_prctl), as oneDNN does on first use: the
                                         process's signal frames then grow by the 8 KiB tile state */
    char auto_precision[96];          /* what precision auto (with isa auto) runs on this CPU and why: "bf16 on
                                         amx", "bf16 on avx512bf16 (VDPBF16PS measured at 2.00x the f32 FMA
                                         rate)", "f32 (VDPBF16PS measured at 0.50x ...)", "f32 (no AMX or ...)" */
} qvl_model_info;

/* CPU kernel sets. AUTO: the widest this CPU runs (AVX-512, else AVX2+FMA, else portable C; for bf16 precision AMX
 * tiles, else AVX512-BF16). AVX2 and AVX512 force that set (benchmarks, tests, or a machine where the narrower one
 * runs faster); they give the same GEMM bits, and the whole tower agrees between them to float32 rounding
 * (attention sums in a different order). With bf16 precision AVX512 forces the AVX512-BF16 kernels even where AMX
 * exists. AMX forces the AMX-BF16 tile kernels (bf16 or auto precision only; f32 is refused, as is a CPU or OS
 * without usable AMX, with the reason). */
typedef enum qvl_isa { QVL_ISA_AUTO = 0, QVL_ISA_AVX2 = 2, QVL_ISA_AVX512 = 3, QVL_ISA_AMX = 4 } qvl_isa;

/* The name of a kernel set: "auto", "portable", "avx2", "avx512", "amx" (portable is what AUTO picks without
 * AVX2). */
QVL_API const char *qvl_isa_name(int isa);

/* Arithmetic of the tower's GEMMs and attention. F32: today's path (float32 throughout), bit-identical to earlier
 * versions. BF16: the operands of every block GEMM (qkv, proj, fc1, fc2) and of attention (Q·Kᵀ and P·V, P rounded
 * to bf16) rounded to bf16 (nearest even), products accumulated in f32; the residual stream, LayerNorm statistics,
 * softmax, GELU, rotary and position embedding stay f32, and so do the patch embedding and the mergers' linears
 * (on AMX: two bf16 terms of the activation, bf16-stored weights).
 * bf16 checkpoint weights are used as stored, f16/f32 ones rounded to bf16 once at load (only the bf16 copy is
 * kept). Runs on the AMX-BF16 tile kernels where AMX is usable (TDPBF16PS's summation order), else on the
 * AVX512-BF16 kernels (VDPBF16PS's order; the two differ at f32 rounding level); elsewhere (isa AUTO) on the
 * portable bf16 kernels (the AVX512-BF16 set's bits, much slower); with a forced isa and no bf16 kernels for it:
 * QVL_ERR_UNSUPPORTED. AUTO: BF16 on the AMX tiles where they are usable, on AVX512-BF16 where its VDPBF16PS is
 * measured (once per process, about 3 ms, at the first load that asks) at 1.25x the f32 FMA's FLOP rate or more
 * (AMD Zen 4/5: 2x), else F32 — as on Intel Xeons whose AMX the OS does not enable or a hypervisor hides, where
 * VDPBF16PS runs at half the f32 FMA rate (the AVX512-BF16 set would be slower than F32); qvl_model_info's
 * auto_precision says which and why. fc2 of the blocks up to
 * the first DeepStack tap stays precise too (f32, or two bf16 terms on AMX). At full depth the bf16 tower is about
 * 0.25-0.28 of transformers' own bf16 run's error away from the fp32 reference (docs/PARITY.md). */
typedef enum qvl_precision { QVL_PRECISION_F32 = 0, QVL_PRECISION_BF16 = 1, QVL_PRECISION_AUTO = 2 } qvl_precision;

/* "f32", "bf16", "auto" ("unknown" otherwise). */
QVL_API const char *qvl_precision_name(int precision);

typedef struct qvl_load_params {
    size_t struct_size; /* set by qvl_load_params_default */
    qvl_isa isa;        /* kernels the model's contexts run; weights are packed for them at load. A set this CPU
                           lacks: QVL_ERR_UNSUPPORTED. Default QVL_ISA_AUTO */
    int n_threads;      /* threads that pack the weights during the load (joined before it returns); 0 (default):
                           one per CPU this process may use */
    qvl_precision precision; /* arithmetic of the model's contexts (qvl_precision); default QVL_PRECISION_F32 */
    int reserved0;      /* ignored: where 1.0's struct had its tail padding, which struct_size cannot tell from a
                           field (a caller built against 1.0 passes 24 whatever it left there) */
    int describe_only;  /* 1: read, check and fingerprint the weights without packing them, for qvl_model_get_info
                           and qvl_model_fingerprint only (qvl info: a fraction of the load's time and memory);
                           qvl_ctx_create then fails with QVL_ERR_INVALID_ARG. 0 (default) or 1 */
    int reserved1;      /* must be 0: fills the struct to a multiple of 8 bytes, so no later field lands in padding */
} qvl_load_params;

/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_load_params_init(qvl_load_params *p, size_t struct_size);
static inline void qvl_load_params_default(qvl_load_params *p) { qvl_load_params_init(p, sizeof *p); }

/* Load the vision tower from a model directory as users have it on disk: config.json (vision_config or a
 * vision-only config) and weights from optiq/optiq_vision.safetensors, model.safetensors.index.json or
 * model.safetensors, under any known prefix. `params` may be NULL. The files are mapped and read once: every weight
 * is checked to be finite as it is packed (a NaN or an infinity fails the load with QVL_ERR_NONFINITE naming the
 * tensor and element; the scan reads 20+ GB/s on one core: about 50 ms of the qwen3.5-27b tower's 0.92 GB) and
 * hashed for the fingerprint, and the files are closed before the load returns: the model holds no mapping or
 * descriptor of them, so they may then be rewritten, truncated or removed without effect on it. The directory's
 * preprocessor_config.json and video_preprocessor_config.json are read by the load too, for plans and keys that
 * give no preprocessing of their own; a bad one fails those plans and keys with its message, not the load. */
QVL_API qvl_status qvl_model_load(const char *dir, const qvl_load_params *params, qvl_model **out, qvl_error *err);
QVL_API void qvl_model_free(qvl_model *m);
/* Output structs (qvl_model_info, qvl_profile, qvl_item_info) are filled through *_sized functions that write at
 * most `size` bytes (the caller's sizeof), so that fields appended later never overrun an older caller's struct;
 * the inline wrappers pass sizeof for you. */
QVL_API void qvl_model_get_info_sized(const qvl_model *m, qvl_model_info *info, size_t size);
static inline void qvl_model_get_info(const qvl_model *m, qvl_model_info *info) {
    qvl_model_get_info_sized(m, info, sizeof *info);
}

/* Content fingerprint of the tower's weights: XXH3-128 over canonical names, dtypes, shapes and bytes in canonical
 * order (conv weight in HF layout), the same for every layout, prefix and sharding of the same weights. Computed by
 * the load from the bytes it packs, each tensor hashed while it is resident (a few % of the load's time), so it
 * always names the weights the model runs; this call only copies it (thread-safe). `hex` receives 32 lowercase hex
 * digits and a NUL. */
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
    size_t struct_size;    /* set by qvl_ctx_params_default */
    int n_threads;         /* threads of the context's pool, the caller included; 0: one per CPU this process may
                              use (its affinity mask); at most QVL_MAX_THREADS */
    qvl_pos_mode pos_mode; /* default QVL_POS_CLOSED_FORM */
    const qvl_limits *limits; /* the context's resource limits (copied at create; NULL: the defaults) */
} qvl_ctx_params;

/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_ctx_params_init(qvl_ctx_params *p, size_t struct_size);
static inline void qvl_ctx_params_default(qvl_ctx_params *p) { qvl_ctx_params_init(p, sizeof *p); }

/* Create an encoder context over a loaded model, with its thread pool. The model must outlive the context.
 * `params` may be NULL. When the system refuses some threads, the context runs on those it got. */
QVL_API qvl_status qvl_ctx_create(const qvl_model *m, const qvl_ctx_params *params, qvl_ctx **out, qvl_error *err);
QVL_API void qvl_ctx_free(qvl_ctx *ctx);
/* Threads of the context's pool, the caller included: what it got (0 for NULL). */
QVL_API int qvl_ctx_threads(const qvl_ctx *ctx);

/* Patch rows (S) and merged tokens (S/4) of a list of grids; 0 if a grid is invalid or the count overflows. S/4
 * holds for every model qvl loads: qvl_model_load refuses a spatial_merge_size other than 2 (2×2 merging). */
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

QVL_API void qvl_ctx_get_profile_sized(const qvl_ctx *ctx, qvl_profile *out, size_t size);
static inline void qvl_ctx_get_profile(const qvl_ctx *ctx, qvl_profile *out) {
    qvl_ctx_get_profile_sized(ctx, out, sizeof *out);
}

/* Stage taps for parity bisection. When set, every encode calls `fn` for each stage in order with float32 data:
 *   "patch" [S,H], "pos" [S,H], "blk0".."blk{depth-1}" [S,H], "deepstack{k}" [S/4,O], "merged" [S/4,O].
 * `data` is valid only during the call. Pass fn = NULL to clear. */
typedef void (*qvl_tap_fn)(void *user, const char *stage, const float *data, size_t rows, size_t cols);
QVL_API void qvl_ctx_set_tap(qvl_ctx *ctx, qvl_tap_fn fn, void *user);

/* Cancellation. qvl_ctx_cancel raises the context's cancel flag; it may be called from any thread (a deadline
 * timer, a signal-free watchdog, a server whose client went away). The encode checks the flag before each block
 * and each merger, and returns QVL_ERR_CANCELLED, leaving the outputs unspecified; a plan's remaining items are
 * marked cancelled. qvl_plan_create on the context polls it too while it decodes (qvl_plan_params.cancel_fn). The flag stays raised until qvl_ctx_uncancel, so a cancel that races the start of an encode
 * is not lost. Optionally `fn(user)` is polled at the same points: nonzero cancels (deadlines without a timer
 * thread). Pass fn = NULL to clear it. */
QVL_API void qvl_ctx_cancel(qvl_ctx *ctx);
QVL_API void qvl_ctx_uncancel(qvl_ctx *ctx);
typedef int (*qvl_cancel_fn)(void *user);
QVL_API void qvl_ctx_set_cancel_fn(qvl_ctx *ctx, qvl_cancel_fn fn, void *user);

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
    size_t struct_size;   /* set by qvl_synth_params_default */
    const char *preset;   /* "tiny", "qwen3-vl-2b", "qwen3-vl-8b", "qwen3.5-27b", ... (qvl_synth_presets) */
    uint64_t seed;
    qvl_synth_layout layout;
    qvl_dtype dtype;      /* default QVL_DTYPE_BF16 */
    int depth;            /* 0: the preset's */
    int n_deepstack;      /* -1: the preset's; otherwise the count of entries in deepstack_index */
    int deepstack_index[QVL_MAX_DEEPSTACK];
} qvl_synth_params;

/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_synth_params_init(qvl_synth_params *p, size_t struct_size);
static inline void qvl_synth_params_default(qvl_synth_params *p) { qvl_synth_params_init(p, sizeof *p); }
/* NULL-terminated list of preset names. */
QVL_API const char *const *qvl_synth_presets(void);
/* Write a deterministic synthetic checkpoint (config.json, preprocessor_config.json, weights) into `dir`
 * (created if missing). The same params always give byte-identical files. */
QVL_API qvl_status qvl_synth_write(const qvl_synth_params *p, const char *dir, qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Files: reading pixel rows and writing float32 outputs (used by the qvl CLI; src/io/files.c)
 * ------------------------------------------------------------------------------------------------------------- */

/* Free memory returned by the qvl_read_* functions and qvl_cache_get (an entry's file). NULL is a no-op. */
QVL_API void qvl_free(void *p);

/* Read preprocessed pixel rows from `path`, chosen by content:
 *   .npy          float32 (or f64 / f16, converted), C order, [S, row_len]; no grids (*n_grids = 0)
 *   .safetensors  tensor "pixel_values" [S, row_len] (F32, F16, BF16 or F64, converted to float32) and, if present,
 *                 "grid_thw" [n, 3] (I64 or I32, each value in 1..INT32_MAX); without "pixel_values", the
 *                 "item{i}.pixel_values" [S_i, row_len] that `qvl encode --preprocess-only` writes, one after the
 *                 other in the order of i (all of one row length; S = their sum)
 * On success *rows is a malloc'd [*n_rows, *row_len] float32 array and *grids (when `grids` is not NULL) a malloc'd
 * array of *n_grids grids or NULL when there are none; free both with qvl_free. `grids` and `n_grids` may be NULL to
 * ignore grid_thw. On failure the outputs are NULL/0 and nothing leaks. Grids are not checked against the rows.
 * The file is untrusted input, read under the default qvl_limits (as qvl_read_rows_limited with NULL). */
QVL_API qvl_status qvl_read_rows(const char *path, float **rows, size_t *n_rows, size_t *row_len, qvl_grid **grids,
                         size_t *n_grids, qvl_error *err);
/* qvl_read_rows under `limits` (NULL: the defaults), each checked before what it bounds is read or allocated: the
 * file's size against max_input_bytes (before a byte is read), the rows the header claims (.npy shape[0],
 * pixel_values' first dimension) against max_call_patches (before the rows are allocated, and before a truncated
 * file is found short), and, when grids are asked for, each grid_thw entry's t·h·w against max_item_patches and
 * their sum against max_call_patches. A limit exceeded gives QVL_ERR_LIMIT with a message naming the limit, the
 * value and how to raise it. A .npy header dict longer than 65535 bytes is refused (QVL_ERR_FORMAT). */
QVL_API qvl_status qvl_read_rows_limited(const char *path, const qvl_limits *limits, float **rows, size_t *n_rows,
                                         size_t *row_len, qvl_grid **grids, size_t *n_grids, qvl_error *err);

/* A safetensors file written piece by piece, so that a producer holds only what it is writing: tensors in order,
 * each declared (name, dtype, shape) and then given its bytes in any number of pieces; metadata at any time. The
 * bytes go to a new temporary file beside `path` (created exclusively: nothing planted there is followed), which
 * finish renames over `path`; a path that exists and is not a regular file (directory, FIFO, device) is refused.
 * Errors are sticky: after one, every call returns it, and finish removes the temporary (so does abort), leaving
 * `path` as it was. header_reserve: bytes reserved for the header (0: 64 KiB); a header that outgrows it costs one
 * extra copy of the data at finish. dtype names as safetensors spells them: "F32", "BF16", "F16", "I32", "I64", ...
 * Not thread-safe: one writer, one thread at a time. */
typedef struct qvl_st_writer qvl_st_writer;
QVL_API qvl_status qvl_st_writer_open(const char *path, size_t header_reserve, qvl_st_writer **out, qvl_error *err);
QVL_API qvl_status qvl_st_writer_meta(qvl_st_writer *w, const char *key, const char *value, qvl_error *err);
QVL_API qvl_status qvl_st_writer_tensor(qvl_st_writer *w, const char *name, const char *dtype, const int64_t *shape,
                                        int ndim, qvl_error *err);
QVL_API qvl_status qvl_st_writer_data(qvl_st_writer *w, const void *data, size_t n, qvl_error *err);
/* Tensors filled side by side (the planes of an output that comes in parts): n tensors of one dtype and shape,
 * declared at once, in this order in the file; qvl_st_writer_data_to appends n bytes to tensor k of the group (0: the
 * first named here), each tensor's data in order. Every tensor of the group must be full before the next tensor,
 * group or finish (else that fails, naming the tensor short of data); qvl_st_writer_data fails while a group is
 * open. */
QVL_API qvl_status qvl_st_writer_group(qvl_st_writer *w, size_t n, const char *const *names, const char *dtype,
                                       const int64_t *shape, int ndim, qvl_error *err);
QVL_API qvl_status qvl_st_writer_data_to(qvl_st_writer *w, size_t k, const void *data, size_t n, qvl_error *err);
/* Take back the open group, or the tensor qvl_st_writer_tensor declared whose data is not complete, with the data
 * given for it (an item that failed after part of its output was written): as if never declared. Else nothing. */
QVL_API qvl_status qvl_st_writer_drop(qvl_st_writer *w, qvl_error *err);
/* Write the header, rename into place and free the writer (also on failure). */
QVL_API qvl_status qvl_st_writer_finish(qvl_st_writer *w, qvl_error *err);
/* Remove the temporary and free the writer; NULL is a no-op. */
QVL_API void qvl_st_writer_abort(qvl_st_writer *w);

/* Write a [rows, cols] float32 row-major array as a .npy file (version 1.0, '<f4'), like qvl_write_safetensors
 * through a temporary renamed into place. */
QVL_API qvl_status qvl_write_npy(const char *path, const float *data, size_t rows, size_t cols, qvl_error *err);

/* One float32 output tensor for qvl_write_safetensors. */
typedef struct qvl_out_tensor {
    const char *name;  /* unique, not "grid_thw" when grids are written */
    const float *data; /* [rows, cols] row-major */
    size_t rows, cols;
} qvl_out_tensor;

/* Write a safetensors file holding the n float32 tensors in the given order, then, when n_grids > 0, "grid_thw"
 * int64 [n_grids, 3]; `meta_kv` holds n_meta key/value string pairs (key0, value0, ...) for "__metadata__" (may be
 * NULL when n_meta is 0). Written to a unique temporary beside `path` and renamed into place (a destination that
 * exists and is not a regular file is refused); identical inputs give identical bytes. */
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

/* What decoding does with an alpha channel (RGBA, LA, palette or colour-key transparency). */
typedef enum qvl_alpha_mode {
    QVL_ALPHA_WHITE = 0, /* composite onto white (default): transformers' convert_to_rgb of the opened (EXIF-
                            transposed) PIL image, what its image processors do with the PIL images users hand them:
                            an image with an A band or info["transparency"] goes to RGBA and Image.alpha_composite
                            over opaque white, bit for bit (palette and GIF keys by index, gray/RGB tRNS by value).
                            qwen-vl-utils' to_rgb gives the same bytes for RGBA images (a paste over white) and
                            drops the alpha of the other modes */
    QVL_ALPHA_DROP = 1   /* drop it, keeping the colour channels as stored: transformers' load_image (convert("RGB"))
                            then convert_to_rgb, which whitens only a tRNS / GIF colour key surviving convert("RGB") */
} qvl_alpha_mode;

typedef struct qvl_decode_params {
    size_t struct_size;  /* set by qvl_decode_params_default */
    uint64_t max_pixels; /* the header's width·height above this is refused before decoding (decompression bombs);
                            default 178956970, the limit at which PIL raises DecompressionBombError */
    int apply_exif;      /* 1 (default): apply the EXIF orientation, as transformers' load_image does */
    qvl_alpha_mode alpha; /* default QVL_ALPHA_WHITE; another value is refused with QVL_ERR_INVALID_ARG */
    const qvl_limits *limits; /* canvas, chunk, scan and input-size limits (NULL: the defaults); the image limit
                                 is the smaller of max_pixels and limits->max_image_pixels */
} qvl_decode_params;

/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_decode_params_init(qvl_decode_params *p, size_t struct_size);
static inline void qvl_decode_params_default(qvl_decode_params *p) { qvl_decode_params_init(p, sizeof *p); }

/* Decode JPEG (baseline, progressive, gray, CMYK/YCCK), PNG (8/16-bit, gray, palette, alpha), WebP (lossy, lossless,
 * alpha), GIF (first frame) or BMP (uncompressed) from memory, and convert to RGB exactly as transformers does with
 * Pillow 13: EXIF orientation applied (ImageOps.exif_transpose), Pillow's formulas for CMYK, 16-bit and palette
 * images, and transparency as p->alpha says: by default (QVL_ALPHA_WHITE) composited onto white, equal to
 * convert_to_rgb(exif_transpose(Image.open(f)), return_numpy=True); with QVL_ALPHA_DROP equal to
 * convert_to_rgb(load_image(f), return_numpy=True) (alpha dropped, a surviving colour key whitened). `p` may be
 * NULL (defaults). On failure *out is zeroed. */
QVL_API qvl_status qvl_image_decode(const void *data, size_t size, const qvl_decode_params *p, qvl_image *out,
                            qvl_error *err);
QVL_API qvl_status qvl_image_load(const char *path, const qvl_decode_params *p, qvl_image *out, qvl_error *err);
QVL_API void qvl_image_free(qvl_image *img);

/* Frame sampling of a video (Qwen3VLVideoProcessor.sample_frames). */
typedef struct qvl_video_params {
    size_t struct_size;    /* set by qvl_video_params_default */
    double fps;            /* frames to sample per second of video (default 2); ignored when num_frames > 0 */
    int32_t num_frames;    /* exact number of frames to sample (0: from fps) */
    int32_t min_frames;    /* default 4 */
    int32_t max_frames;    /* default 768 */
    double default_fps;    /* source frame rate assumed when the container has none (default 24) */
    uint64_t max_pixels;   /* per-frame decompression limit (as qvl_decode_params.max_pixels) */
    const qvl_limits *limits; /* frame-count and video-pixel limits, and the frame images' decode limits (NULL:
                                 the defaults) */
} qvl_video_params;

/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_video_params_init(qvl_video_params *p, size_t struct_size);
static inline void qvl_video_params_default(qvl_video_params *p) { qvl_video_params_init(p, sizeof *p); }

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
 * alpha are blended over white as transformers' video processor does).
 *
 * What is read is chosen by the first bytes, never by the name:
 *   - a video container: MP4/QuickTime (mp4, m4v, mov, 3gp), Matroska/WebM, AVI or MPEG-TS, with a video stream in
 *     h264, hevc, vp8, vp9, av1, mpeg4, mpeg1/2video, h263, mjpeg, prores, dnxhd, ffv1, png, qtrle or rawvideo;
 *   - an image (JPEG, PNG, WebP, GIF, BMP): one frame, decoded by qvl's image decoders (as qvl_video_from_images
 *     of that one file: only the first frame of an animated GIF or WebP);
 *   - anything else is refused before FFmpeg sees it: QVL_ERR_UNSUPPORTED naming the format where FFmpeg would
 *     recognise it (an HLS playlist, an ffconcat script, SDP, ...), else QVL_ERR_FORMAT saying that it is empty or
 *     what its first bytes are. An accepted container with another codec is QVL_ERR_UNSUPPORTED.
 * The path is opened once, without blocking and only as a regular file (else QVL_ERR_IO), and FFmpeg reads that
 * descriptor through qvl's own I/O: it never opens a path or URL, so nothing an input names (playlist entries,
 * data references) is ever opened.
 * FFmpeg's log never reaches stderr: the first video call installs a process-wide av_log callback (FFmpeg has no
 * other way to divert it) that keeps the messages of the qvl call running on that thread and drops all others,
 * and a failure's message ends with FFmpeg's last error, "(FFmpeg: [mov,mp4,...] moov atom not found)". A
 * program that uses FFmpeg itself and wants its log may set its own av_log callback after its first qvl video
 * call; qvl's messages then go to it too. Without video support (QVL_VIDEO=OFF) a container is QVL_ERR_UNSUPPORTED. */
QVL_API qvl_status qvl_video_load(const char *path, const qvl_video_params *p, qvl_video *out, qvl_error *err);
/* qvl_video_load of a file's bytes in memory (a request body): the same formats, checks and frames, bit for bit,
 * and `size` is held to p->limits' max_input_bytes before a byte is read (a video file, read in pieces, is not).
 * Only `data`[size] is read (borrowed for the call); messages name it "<memory>". */
QVL_API qvl_status qvl_video_decode(const void *data, size_t size, const qvl_video_params *p, qvl_video *out,
                                    qvl_error *err);
/* Seconds of each temporal patch of a sampled video, as transformers' Qwen3VLProcessor computes them for the
 * prompt: the sampled indices padded to a multiple of temporal_patch by repeating the last, each divided by
 * v->fps, then the mean of the first and last of each group of temporal_patch. Writes up to `cap` values and the
 * count (ceil(n_frames / temporal_patch)) to *n. */
QVL_API qvl_status qvl_video_timestamps(const qvl_video *v, int32_t temporal_patch, double *ts, size_t cap,
                                        size_t *n, qvl_error *err);
/* A video given as frame images (in order), sampled like a file at p->default_fps frames per second. Each is decoded
 * as qvl_image_load does with the default decode params (EXIF orientation applied, alpha over white) under
 * p->max_pixels and p->limits; a PATH item naming a directory decodes them with the item's decode params instead,
 * as it would the same file given as an image. */
QVL_API qvl_status qvl_video_from_images(const char *const *paths, size_t n, const qvl_video_params *p, qvl_video *out,
                                 qvl_error *err);
QVL_API void qvl_video_free(qvl_video *v);

typedef enum qvl_resize_mode {
    QVL_RESIZE_TORCHVISION = 0, /* transformers' default (fast) processor on CPU: torch's uint8 antialiased bicubic */
    QVL_RESIZE_PIL = 1,         /* transformers' PIL processor and mlx-vlm: PIL Image.resize(BICUBIC), Pillow >= 13 */
    QVL_RESIZE_PIL_LEGACY = 2   /* the same with Pillow 9.4 .. 12.1 (always horizontal pass first) */
} qvl_resize_mode;

typedef struct qvl_preprocess_params {
    size_t struct_size;                          /* set by qvl_preprocess_params_default */
    qvl_resize_mode resize;
    uint64_t min_pixels, max_pixels;             /* image budget (preprocessor_config.json size) */
    uint64_t video_min_pixels, video_max_pixels; /* whole-clip budget (video_preprocessor_config.json size) */
    int32_t size_h, size_w;                      /* exact target size in pixels (multiples of patch·merge); 0: off */
    float image_mean[3], image_std[3];
    double rescale_factor;
    int32_t patch, temporal_patch, merge;
    int n_threads;                               /* the standalone qvl_preprocess_* calls only: threads started and
                                                    joined per call (0: one per CPU); a plan uses its ctx's pool */
    /* Appended (a caller built before them gets the defaults). transformers' per-frame pixel cap
     * (Qwen3VLVideoProcessor's cap_pixels_per_frame, the qwen-vl-utils behaviour; video_preprocessor_config.json
     * keys cap_pixels_per_frame and max_video_tokens): 0 (the default, as transformers 5.23's) spends the whole clip
     * budget video_max_pixels on however many frames were sampled; 1 gives a clip of n frames the budget
     * n · max(min(max_video_tokens · (patch · merge)², video_max_pixels / n), ⌊1.05 · video_min_pixels⌋) instead
     * (integer division; its product within 2^64, else QVL_ERR_LIMIT), so that few frames cost few tokens. */
    int cap_pixels_per_frame;
    int32_t max_video_tokens;                    /* merged tokens per frame under the cap (default 768, qwen-vl-utils'
                                                    VIDEO_MAX_TOKEN_NUM); 1..1048576 */
} qvl_preprocess_params;

/* Qwen3-VL's published values (min 65536 / max 16777216 pixels for images, 4096 / 25165824 for video, patch 16,
 * temporal 2, merge 2, mean = std = 0.5, rescale 1/255), torchvision resize. */
/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_preprocess_params_init(qvl_preprocess_params *p, size_t struct_size);
static inline void qvl_preprocess_params_default(qvl_preprocess_params *p) { qvl_preprocess_params_init(p, sizeof *p); }

/* Read preprocessor_config.json and video_preprocessor_config.json from a model directory where present (either
 * output may be NULL); absent files or keys keep the values already in *p / *v. */
QVL_API qvl_status qvl_preprocess_params_load(const char *model_dir, qvl_preprocess_params *p, qvl_video_params *v,
                                      qvl_error *err);

/* transformers' smart_resize (models/qwen2_vl, what the Qwen3-VL image processors call), value for value: each side
 * rounded half to even to a multiple of `factor`; if their product is above max_pixels, both sides divided by
 * β = sqrt(h·w / max_pixels) and floored to multiples of factor (at least factor); else if it is below min_pixels,
 * both multiplied by β = sqrt(min_pixels / (h·w)) and rounded up to multiples of factor. Sides below factor are
 * accepted (the min_pixels branch scales them up), and the result may fall outside [min_pixels, max_pixels] (the
 * flooring, the rounding up, the factor floor). QVL_ERR_INVALID_ARG: height, width or factor below 1; an aspect
 * ratio above 200 and max_pixels 0 (the reference raises on both); min_pixels 0 where a side rounds to 0 (one of at
 * most factor/2: the reference returns the 0, which no resize takes). A target side above 10^9: QVL_ERR_LIMIT. */
QVL_API qvl_status qvl_smart_resize(int32_t height, int32_t width, int32_t factor, uint64_t min_pixels, uint64_t max_pixels,
                            int32_t *out_height, int32_t *out_width, qvl_error *err);

/* Resize an RGB image with one of the exact kernels (the resize step of the processors, for tests and tools). */
QVL_API qvl_status qvl_image_resize(const qvl_image *src, int32_t height, int32_t width, qvl_resize_mode mode,
                            int n_threads, qvl_image *out, qvl_error *err);

/* The grid an image or video will have (the size query: rows = t·h·w of row_len = 3·Tp·P² floats), by smart_resize
 * or the exact size_h x size_w. Refused as qvl_preprocess_* would refuse it: an image or frames with a side below 1
 * (QVL_ERR_INVALID_ARG, whichever way the target is chosen), a resize with a side above 2^20 (QVL_ERR_LIMIT). */
QVL_API qvl_status qvl_image_grid(const qvl_image *img, const qvl_preprocess_params *p, qvl_grid *grid, qvl_error *err);
QVL_API qvl_status qvl_video_grid(const qvl_video *v, const qvl_preprocess_params *p, qvl_grid *grid, qvl_error *err);

/* Resize, normalize and patchify into caller-owned rows [t·h·w, row_len] (merge-block-major rows, (c, t, y, x)
 * columns); an image fills both temporal slots; a video with an odd frame count repeats its last frame. */
QVL_API qvl_status qvl_preprocess_image(const qvl_image *img, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                qvl_error *err);
QVL_API qvl_status qvl_preprocess_video(const qvl_video *v, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Items, plans, encode into caller buffers: the API for servers, bindings and engines
 *
 *   qvl_plan_create   decode + preprocess a list of items on the ctx's pool; per item: status, grid, tokens,
 *                     output bytes (and video timing); in total: the scratch the encode needs. Nothing encoded.
 *   qvl_ctx_reserve_plan  (optional) allocate that scratch now, so that the encode allocates nothing.
 *   qvl_plan_encode   encode every item that planned well into one caller buffer per item.
 * One bad item fails alone with its own status and message; the others are planned and encoded as usual.
 * ------------------------------------------------------------------------------------------------------------- */

/* Raw 8-bit pixels in memory, borrowed: rows of `width` pixels of `channels` bytes (3: RGB, 4: RGBA), `stride`
 * bytes apart (0: width·channels), e.g. a numpy HxWx3 / HxWx4 uint8 array. Contiguous RGB is read in place. */
typedef struct qvl_pixels {
    const uint8_t *data;
    int32_t width, height;
    int32_t channels; /* 3 or 4; RGBA's alpha is handled as qvl_item.decode.alpha says */
    size_t stride;
} qvl_pixels;

typedef enum qvl_item_kind {
    QVL_ITEM_PATH = 0,    /* `path`: an image file, a video file, or a directory of frame images (one video) */
    QVL_ITEM_ENCODED = 1, /* `data`, `size`: the bytes of an image or video file, told apart by their first bytes
                             as for PATH (images: qvl_image_decode; videos: qvl_video_decode) */
    QVL_ITEM_PIXELS = 2,  /* `image`: one decoded image */
    QVL_ITEM_FRAMES = 3,  /* `frames[n_frames]` of one size at `fps`: a video already sampled (every frame is used) */
    QVL_ITEM_ROWS = 4     /* `rows` [t·h·w, row_len] float32 and `grid`: preprocessed patch rows (merge-block-major) */
} qvl_item_kind;

/* One input. Initialise with qvl_item_default, then set `kind` and its fields. */
typedef struct qvl_item {
    size_t struct_size; /* set by qvl_item_default */
    qvl_item_kind kind;
    const char *label;  /* names the item in messages (default: the path, else "item N") */
    const char *path;                 /* PATH */
    const void *data;                 /* ENCODED */
    size_t size;
    qvl_pixels image;                 /* PIXELS */
    const qvl_pixels *frames;         /* FRAMES */
    size_t n_frames;
    double fps;                       /* FRAMES: their frame rate (timestamps); 0: video.default_fps */
    const float *rows;                /* ROWS (borrowed until the plan is freed) */
    qvl_grid grid;
    size_t row_len;                   /* ROWS: floats per row the caller has (0: trust it is the model's); another
                                         length than the model's row_len fails the item */
    /* Preprocessing of this item (NULL: the plan's defaults, i.e. the model directory's
     * preprocessor_config.json / video_preprocessor_config.json over Qwen3-VL's published values). */
    const qvl_preprocess_params *preprocess;
    const qvl_video_params *video;
    const qvl_decode_params *decode;
} qvl_item;

/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_item_init(qvl_item *p, size_t struct_size);
static inline void qvl_item_default(qvl_item *p) { qvl_item_init(p, sizeof *p); }

/* Output layout of one item's embeddings. */
typedef enum qvl_output_layout {
    QVL_OUTPUT_CONCAT = 0, /* [tokens, out_hidden·(1 + n_deepstack)]: the merger output, then each DeepStack
                              feature on the last axis, as vLLM and SGLang take precomputed Qwen3-VL embeddings */
    QVL_OUTPUT_SPLIT = 1   /* [(1 + n_deepstack), tokens, out_hidden]: the merger output, then each DeepStack
                              feature, each a contiguous [tokens, out_hidden] plane */
} qvl_output_layout;

typedef struct qvl_plan_params {
    size_t struct_size;         /* set by qvl_plan_params_default */
    qvl_dtype dtype;            /* of the outputs: F32 (default), BF16 or F16 (rounded to nearest even) */
    qvl_output_layout layout;   /* default QVL_OUTPUT_CONCAT */
    int deepstack;              /* 1 (default): outputs include the DeepStack features; 0: the merger output alone */
    size_t max_batch_rows;      /* items are encoded together (one forward pass over several attention segments,
                                   the same bits as one by one) in groups of at most this many patch rows; an item
                                   above it runs alone, a video in pieces of whole temporal patches (again the
                                   same bits: attention stays within a temporal patch), so that the encode's
                                   scratch is set by this, not by the video's length. 0: 16384 */
    /* Defaults for items that give none. NULL: what the model directory's json files said when the model was
       loaded (a file that could not be read or parsed fails the plan, with the load's message). */
    const qvl_preprocess_params *preprocess;
    const qvl_video_params *video;
    const qvl_decode_params *decode;
    const qvl_limits *limits;   /* this plan's limits, each the smaller of these and the ctx's (NULL: the ctx's;
                                   without a ctx, these as they are, NULL the defaults) */
    /* Cancellation of the decoding qvl_plan_create does (NULL: none): polled, with the ctx's cancel flag where the
       plan has a ctx, before each item and during its decode (a JPEG's progress, a PNG's reads, each packet of a
       video, each frame file); nonzero fails the item being decoded and every later one with QVL_ERR_CANCELLED,
       the plan itself is still made. Called on the thread that calls qvl_plan_create, during that call only. */
    qvl_cancel_fn cancel_fn;
    void *cancel_user;
} qvl_plan_params;

/* Defaults, with struct_size = `struct_size` (the caller's sizeof; bindings call this one). */
QVL_API void qvl_plan_params_init(qvl_plan_params *p, size_t struct_size);
static inline void qvl_plan_params_default(qvl_plan_params *p) { qvl_plan_params_init(p, sizeof *p); }

typedef struct qvl_plan qvl_plan;

/* What the plan knows of one item. */
typedef struct qvl_item_info {
    qvl_status status;        /* QVL_OK, or why this item failed (planning, then encoding) */
    const char *message;      /* "" when ok; else one line naming the item and the cause. Owned by the plan */
    const char *kind;         /* "image", "video", "frames", "rows" (a PATH item: what it turned out to be) */
    qvl_grid grid;            /* t, h, w in patches */
    size_t n_rows;            /* patch rows t·h·w */
    size_t n_tokens;          /* merged tokens t·h·w / merge² */
    size_t out_cols;          /* CONCAT: out_hidden·(1 + n_ds); SPLIT: out_hidden */
    size_t n_planes;          /* CONCAT: 1; SPLIT: 1 + n_ds */
    size_t out_bytes;         /* bytes of this item's output buffer: n_tokens · out_cols · n_planes · dtype size */
    int32_t src_width, src_height; /* the decoded image or frames, before resizing */
    int32_t resized_width, resized_height;
    /* Videos (kind "video" or "frames"); 0 / NULL otherwise, and n_frames 0 with frame_indices NULL for a video
     * that failed before its frame table was made (a failed item may still give its source's size, frames, fps). */
    int32_t n_frames;             /* frames sampled */
    int64_t total_frames;         /* frames in the source */
    double source_fps;            /* the source's frame rate */
    const int64_t *frame_indices; /* [n_frames] source frame index of each sampled frame. Owned by the plan */
    size_t n_timestamps;          /* = grid.t */
    const double *timestamps;     /* [grid.t] seconds of each temporal patch, as Qwen3VLProcessor puts them in the
                                     prompt ("<%.1f seconds>"): the mean time of its first and last frame.
                                     Owned by the plan */
    double decode_ms, preprocess_ms, encode_ms;
} qvl_item_info;

/* Decode and preprocess `items` on ctx's pool (the ctx's model decides patch size, merge and output widths).
 * ctx may be NULL for preprocessing alone (qvl_plan_rows): then the preprocessing params decide the patch
 * geometry, the defaults are Qwen3-VL's published values (no model directory to read), threads are started for
 * the call, outputs are 0 bytes and the plan cannot be encoded; a row longer than Qwen3-VL's 1536 values
 * (3·2·16·16) counts against max_item_patches and max_call_patches as one patch row per 1536 values or part of
 * them, so that the limits bound the rows' memory whatever geometry the params choose.
 * Returns QVL_OK when the plan was made, even if some or all items failed: each item's own status and message
 * are in qvl_plan_item (qvl_plan_ok_count says how many succeeded); an error status only for bad arguments or
 * memory, with no plan. Items: an array of n_items structs, each initialised by qvl_item_default (the array's
 * stride is items[0].struct_size). ROWS items' rows are borrowed until the plan is freed; everything else an item
 * points to is read during this call only. `params` may be NULL. */
QVL_API qvl_status qvl_plan_create(qvl_ctx *ctx, const qvl_item *items, size_t n_items, const qvl_plan_params *params,
                                   qvl_plan **out, qvl_error *err);
QVL_API void qvl_plan_free(qvl_plan *plan);
QVL_API size_t qvl_plan_count(const qvl_plan *plan);
/* Item i's info (zeroed, with QVL_ERR_INVALID_ARG, for i out of range). Pointers in it live as long as the plan. */
QVL_API void qvl_plan_item_sized(const qvl_plan *plan, size_t i, qvl_item_info *info, size_t size);
static inline void qvl_plan_item(const qvl_plan *plan, size_t i, qvl_item_info *info) {
    qvl_plan_item_sized(plan, i, info, sizeof *info);
}
/* Items that planned well, and the sum of their out_bytes. */
QVL_API size_t qvl_plan_ok_count(const qvl_plan *plan);
QVL_API size_t qvl_plan_out_bytes(const qvl_plan *plan);
/* Bytes of ctx scratch qvl_plan_encode needs for this plan, and bytes the plan itself holds (the pixel rows). */
QVL_API size_t qvl_plan_scratch_bytes(const qvl_plan *plan);
QVL_API size_t qvl_plan_held_bytes(const qvl_plan *plan);
/* The pixel rows of item i ([n_rows, row_len] float32, owned by the plan), or NULL if it failed. */
QVL_API const float *qvl_plan_rows(const qvl_plan *plan, size_t i);

/* Reserve the ctx scratch for `plan` (and anything smaller): after it, qvl_plan_encode of this or any plan whose
 * qvl_plan_scratch_bytes is no larger allocates nothing. On a ctx whose max_call_patches is below the plan's
 * largest group, the scratch of that many rows (no group there is larger). */
QVL_API qvl_status qvl_ctx_reserve_plan(qvl_ctx *ctx, const qvl_plan *plan, qvl_error *err);

/* Encode every item that planned well: outputs[i] (ignored, may be NULL, for failed items) receives item i's
 * qvl_item_info.out_bytes in the plan's dtype and layout. Items are encoded in groups of up to max_batch_rows
 * rows; an item's bits do not depend on its group. Returns QVL_OK when every item that planned well was encoded
 * (items that failed in qvl_plan_create are skipped and keep their status); otherwise the status of the first item
 * that failed here (err names it), with each item's own status in qvl_plan_item. Encoding failures
 * (cancellation and memory) mark the items of the failing group; an item whose output holds a NaN or an infinity
 * (scanned after its group: about 0.2 ms per 10^6 output values) fails alone with QVL_ERR_NONFINITE. The plan can be encoded
 * again (for example on another ctx over the same model): there, an item over that ctx's max_item_patches or
 * max_call_patches fails alone with QVL_ERR_LIMIT, and groups are kept within its max_call_patches. */
QVL_API qvl_status qvl_plan_encode(qvl_ctx *ctx, qvl_plan *plan, void *const *outputs, qvl_error *err);

/* Told by qvl_plan_encode_chunks as an item's output becomes final: item `item`'s tokens [tok0, tok0 + n_tokens)
 * are written to outputs[item] (every plane of the layout) and checked finite, and nothing will write them again.
 * An item encoded whole is one call (tok0 0, all its tokens), after its group; a video above max_batch_rows, which
 * is encoded in pieces of whole temporal patches, one call per piece, in order, as each piece is done: a caller can
 * consume (write out, send, hand to a model) a long video's first tokens while the rest encodes. Called on the
 * thread that called qvl_plan_encode_chunks, never while the tower runs, and never for tokens that failed (a
 * video's later piece can still fail, cancelled or out of memory: the tokens told stay as told, the item fails).
 * Return 0 to go on; nonzero to stop: no further item or piece is encoded or told, an item cut short fails with
 * QVL_ERR_CANCELLED ("stopped by the chunk callback after N of its M tokens"), items not reached fail with
 * QVL_ERR_CANCELLED, and items already told keep QVL_OK. */
typedef int (*qvl_chunk_fn)(void *user, size_t item, size_t tok0, size_t n_tokens);
/* qvl_plan_encode, telling fn (may be NULL: qvl_plan_encode itself) of each finished chunk of output. */
QVL_API qvl_status qvl_plan_encode_chunks(qvl_ctx *ctx, qvl_plan *plan, void *const *outputs, qvl_chunk_fn fn,
                                          void *user, qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Streaming one item: decode, preprocess and encode overlapped, its output handed over in parts
 * ------------------------------------------------------------------------------------------------------------- */

/* A part of a streamed item's output (qvl_encode_stream): the item's tokens [tok0, tok0 + n_tokens), which are its
 * temporal patches [t0, t0 + t). `data` holds n_planes planes (qvl_item_info.n_planes: CONCAT 1, SPLIT
 * 1 + n_deepstack) of n_tokens rows of out_cols values of the dtype, `plane_stride` bytes from one plane to the
 * next, each row contiguous; valid during the call only. */
typedef struct qvl_chunk {
    size_t tok0, n_tokens;
    int32_t t0, t;
    const void *data;
    size_t plane_stride;
    size_t bytes;             /* n_planes · n_tokens · out_cols · dtype size */
} qvl_chunk;

/* Told each part as it is final, in order. `info` is the item's as planned (kind, grid, n_tokens and out_bytes of the
 * whole item, sizes, the video's frame table and timestamps), valid during the call; its decode / preprocess /
 * encode times are 0 for a streamed video (they overlap: the call's wall time is what it took), an item encoded
 * whole's own otherwise. Return 0 to go on, nonzero to stop (ignored at the last part). */
typedef int (*qvl_stream_fn)(void *user, const qvl_item_info *info, const qvl_chunk *chunk);

/* Encode one item, handing its output to fn part by part, with neither its rows nor its output held whole.
 * A video (PATH or ENCODED video, FRAMES) is decoded on a thread of this call while this thread encodes: its
 * temporal patches' rows gather in a ring of two pieces (a piece: as many whole temporal patches as fit
 * params->max_batch_rows, at least one; 0 here: 4096 rows), each piece is encoded as soon as its rows are complete
 * (the tower attends within a temporal patch: the same bits as the whole clip's encode), checked finite, told, and
 * its ring space handed back to the decoder, which waits for room when it is ahead. What the call holds is then set
 * by the piece (two pieces' rows, one piece's output, the encode scratch of one piece, the decoder's frames), not
 * by the video's length. Any other item is planned and encoded as qvl_plan_encode_chunks does it (a ROWS item
 * above max_batch_rows in pieces), from one output buffer of the whole item.
 * Returns QVL_OK when every token was told; otherwise the item's status, with the message naming it: its planning
 * failure (as qvl_plan_create gives it), an encode failure, QVL_ERR_NONFINITE for a part that is not finite (parts
 * before it stay told), QVL_ERR_CANCELLED when fn asked to stop before the last part ("stopped by the chunk callback
 * after N of its M tokens"), the ctx was cancelled (qvl_ctx_cancel, its cancel_fn) or params->cancel_fn said so
 * (both polled on this thread: between parts, and every 20 ms while it waits for rows). A video whose stream ends
 * before the frame count of its header is sampled again over the frames it has, as qvl_plan_create does: when that
 * is found before the first part is told the item is read again and encoded whole (the same tokens as
 * qvl_plan_encode), after it QVL_ERR_RESAMPLED saying so (the parts told are not the item's: a caller that wrote
 * them takes them back and reads the item whole, with a plan); so is a read done again (a skipping read given up,
 * video.c) whose frames differ from those of the parts told, which a plan never sees (it keeps only the last
 * read's rows). No other failure is QVL_ERR_RESAMPLED. Limits are the ctx's lowered by
 * params->limits, as for a plan of this one item. Uses the ctx (its scratch and pool) for the call: one call at a
 * time per ctx. */
QVL_API qvl_status qvl_encode_stream(qvl_ctx *ctx, const qvl_item *item, const qvl_plan_params *params,
                                     qvl_stream_fn fn, void *user, qvl_error *err);

/* A part of a streamed item's pixel rows (qvl_preprocess_stream): its rows [row0, row0 + n_rows), which are its
 * temporal patches [t0, t0 + t) and become its tokens [tok0, tok0 + n_tokens); n_rows rows of row_len floats,
 * contiguous, valid during the call only. Encoded as a ROWS item of grid (t, info->grid.h, info->grid.w), a part
 * gives exactly those tokens of the whole item's encode. */
typedef struct qvl_rows_chunk {
    size_t row0, n_rows;
    size_t tok0, n_tokens;
    int32_t t0, t;
    const float *rows;
    size_t row_len;
} qvl_rows_chunk;

/* Told each part's rows as they are complete, in order; `info` as in qvl_stream_fn (outputs 0 bytes without a ctx).
 * The call may block: the decoder goes on into the other piece of the ring meanwhile, then waits. Return 0 to go
 * on, nonzero to stop (ignored at the last part). */
typedef int (*qvl_rows_fn)(void *user, const qvl_item_info *info, const qvl_rows_chunk *chunk);

/* qvl_encode_stream without the encode: one item decoded and preprocessed, its rows handed to fn part by part
 * (a video's pieces of whole temporal patches within params->max_batch_rows, 0: 4096 rows, from a ring of two
 * pieces; any other item, and a video sampled again before its first part, as one part of every row) with its rows
 * never held whole. ctx may be NULL, as for qvl_plan_create (the preprocessing params then decide the geometry
 * and params->limits lowers the library's defaults); with a ctx it uses the ctx's pool and limits, one call at a
 * time. Returns and fails as qvl_encode_stream does, its messages saying "plan it whole" where that one's say
 * "encode it whole". */
QVL_API qvl_status qvl_preprocess_stream(qvl_ctx *ctx, const qvl_item *item, const qvl_plan_params *params,
                                         qvl_rows_fn fn, void *user, qvl_error *err);

/* Content-addressed cache key of one item: 32 bytes (64 lowercase hex digits, the `uuid` a server hands to vLLM),
 * equal exactly when the item's output is the same by construction. SHA-256 over a length-prefixed canonical tuple
 * ("qvl-key-v1", spelt out in src/model/key.c) of: the weights' fingerprint (qvl_model_fingerprint), the
 * context's compute precision ("f32" or "bf16") and pos_mode, the output dtype, layout and deepstack choice of
 * `params`, how the content was given, the item's resolved decode / preprocess / video params (the item's own, else `params`'
 * defaults, else the model directory's json files as loaded, exactly as qvl_plan_create resolves them), and the SHA-256 of
 * its content: the bytes of a PATH file (never the path: the same bytes as PATH or ENCODED give the same key),
 * each frame file of a PATH directory in name order, the pixels and their size and channels for PIXELS (the
 * stride does not count), the frames and fps for FRAMES, the rows and grid for ROWS. Not part of it: limits that
 * only refuse inputs, max_batch_rows, the thread count and the kernel set. Nothing is decoded: a PATH item's file
 * is read once and hashed, so a cache can be looked up before planning. A key is the same in every process, build
 * and platform of one library version; a change of the serialisation changes its tag. Reads only ctx's model and
 * settings, never its scratch: may be called from any thread, while ctx encodes too. Fails, as planning the item
 * would, on a NULL or unreadable input; `digest` and `hex` may each be NULL. */
#define QVL_KEY_BYTES 32
#define QVL_KEY_HEX 65 /* 64 hex digits and a NUL */
QVL_API qvl_status qvl_item_key(const qvl_ctx *ctx, const qvl_item *item, const qvl_plan_params *params,
                                uint8_t digest[QVL_KEY_BYTES], char hex[QVL_KEY_HEX], qvl_error *err);

/* ---------------------------------------------------------------------------------------------------------------
 * Embedding cache: content-addressed entries on disk, shared by processes (src/cache/cache.c). The one
 * implementation behind `qvl serve --cache`, `qvl cache`, `qvl encode --cache` and the Python binding.
 *   root/objects/ab/<key>.safetensors  one entry per key (ab: its first two hex digits): "ec_cache", the item's
 *                                      output matrix (first, at the 64-byte data start: the tensor vLLM's
 *                                      shared-storage encoder-cache connector loads), then "grid_thw" I64 [1, 3]
 *                                      (not 8-byte aligned when the matrix's bytes are not a multiple of 8);
 *                                      __metadata__: qvl_entry "1", key, fingerprint, qvl_version, created (Unix
 *                                      seconds), xxh3_128 (XXH3-128 of every data byte, 32 hex digits, high half
 *                                      first), and kind (image, video, frames, rows) where the writer gave it
 *   root/tmp/                          temporaries, written whole then renamed into objects/ (atomic: a writer
 *                                      killed mid-write leaves only a temporary, never a torn entry)
 *   root/gc/lock                       flock()ed by a collector; root/vllm-ec/<key>/encoder_cache.safetensors:
 *                                      optional hard links in vLLM's shared_storage_path layout
 * Reads take no lock: every read verifies the checksum, and an entry that fails it (or does not parse: its header
 * is untrusted input) is deleted and counts as corrupt and a miss. A hit older than an hour has its mtime
 * refreshed; eviction (qvl_cache_gc, or a put over the budget) is least recently used by mtime, down to 90 % of
 * the budget, and keeps an entry touched or replaced by a put since its scan (also while it removes it: a victim
 * is moved into tmp/ and checked there). Keys are qvl_item_key's 64 lowercase hex digits (another string is
 * QVL_ERR_INVALID_ARG). A handle is thread-safe; processes share a root through the file system only. */
typedef struct qvl_cache qvl_cache;
typedef struct qvl_cache_params {
    size_t struct_size;
    uint64_t max_bytes; /* size budget of the entries' bytes; a put over it collects. 0 (default): unbounded */
    int vllm_links;     /* nonzero: put also links root/vllm-ec/<key>/encoder_cache.safetensors. Default 0 */
    int reserved0;      /* ignored: 1.0's tail padding here, so that a field appended later is one struct_size sees */
    int existing;       /* nonzero: open only an existing cache (root/objects/ a directory) and create nothing there,
                           for read-only queries; another directory is QVL_ERR_IO saying it is not a cache. Default 0 */
    int reserved1;      /* ignored (padding) */
} qvl_cache_params;
QVL_API void qvl_cache_params_init(qvl_cache_params *p, size_t struct_size);
static inline void qvl_cache_params_default(qvl_cache_params *p) { qvl_cache_params_init(p, sizeof *p); }
/* Open a cache root, creating its directories and CACHEDIR.TAG (unless params->existing); scans objects/ once for the
 * bytes and entries. The
 * root is resolved (realpath) here: the handle's paths, and export_vllm's symbolic links, are absolute. */
QVL_API qvl_status qvl_cache_open(const char *root, const qvl_cache_params *params, qvl_cache **out, qvl_error *err);
/* NULL is a no-op. */
QVL_API void qvl_cache_close(qvl_cache *c);

/* A lookup's result (qvl_cache_entry.result). */
enum { QVL_CACHE_MISS = 0, QVL_CACHE_HIT = 1, QVL_CACHE_CORRUPT = 2 /* a miss: the entry failed and is deleted */ };
typedef struct qvl_cache_entry {
    int result;          /* QVL_CACHE_HIT, _MISS or _CORRUPT; the rest is set on a hit only (else zero) */
    void *file;          /* the whole entry file, malloc'd, owned by the caller: qvl_free(file) */
    size_t file_bytes;
    const void *data;    /* the ec_cache matrix, inside file (little-endian; "BF16" as bit patterns) */
    size_t nbytes;
    char dtype[8];       /* "F32", "F16" or "BF16" */
    int ndim;            /* 2: [tokens, cols] (one plane); 3: [planes, tokens, cols] */
    int64_t shape[3];
    size_t n_planes, n_tokens, cols; /* the shape by the rule of qvl_cache_put */
    qvl_grid grid;
    int64_t created;
    char fingerprint[65], qvl_version[32], xxh3_128[33];
    char kind[8];        /* "image", "video", "frames" or "rows" as qvl_cache_put_kind recorded it; "" when the entry
                            has none (written by qvl_cache_put, or by qvl 1.0): a video of 2 frames has grid t 1 */
} qvl_cache_entry;
/* Look `key` up and verify it (an output struct: *_sized, as above). OK with entry->result MISS (no such entry,
 * or unreadable), CORRUPT, or HIT with the file in entry->file for the caller (zero-copy: data points into it).
 * Errors: a bad key, or a size short of `file` (INVALID_ARG); no memory for the file (NOMEM, the entry is left). */
QVL_API qvl_status qvl_cache_get_sized(qvl_cache *c, const char *key, qvl_cache_entry *entry, size_t size,
                                       qvl_error *err);
static inline qvl_status qvl_cache_get(qvl_cache *c, const char *key, qvl_cache_entry *entry, qvl_error *err) {
    return qvl_cache_get_sized(c, key, entry, sizeof *entry, err);
}
/* Store an output matrix under `key` (replacing an entry already there). Its shape, by the one rule every
 * writer follows: one plane is [n_tokens, cols], more are [n_planes, n_tokens, cols]; data holds
 * n_planes * n_tokens * cols values of dtype (F32, F16 or BF16), little-endian. fingerprint (at most 64 chars;
 * NULL: "") names the weights. Written to root/tmp and renamed into place; runs a collection when the handle's
 * budget is exceeded (a collection another process holds is skipped). */
QVL_API qvl_status qvl_cache_put(qvl_cache *c, const char *key, qvl_dtype dtype, const void *data, size_t n_planes,
                                 size_t n_tokens, size_t cols, qvl_grid grid, const char *fingerprint, qvl_error *err);
/* qvl_cache_put that also records what the matrix is the embeddings of: `kind` "image", "video", "frames" or "rows"
 * (qvl_item_info.kind; another string is QVL_ERR_INVALID_ARG), or NULL for none. It is "kind" in the entry's
 * __metadata__ (after xxh3_128), and qvl_cache_entry.kind on a hit. */
QVL_API qvl_status qvl_cache_put_kind(qvl_cache *c, const char *key, const char *kind, qvl_dtype dtype,
                                      const void *data, size_t n_planes, size_t n_tokens, size_t cols, qvl_grid grid,
                                      const char *fingerprint, qvl_error *err);
/* 1 when an entry file exists for key (not verified), with its size in *size (may be NULL); else 0. */
QVL_API int qvl_cache_exists(qvl_cache *c, const char *key, uint64_t *size);
/* Open key's entry file read-only (not verified: for serving its bytes as they are) into *fd, the caller's to
 * close, and its size into *size (may be NULL). No entry: QVL_ERR_IO naming the file, *fd = -1. */
QVL_API qvl_status qvl_cache_open_fd(qvl_cache *c, const char *key, int *fd, uint64_t *size, qvl_error *err);
/* Evict least recently used entries down to target bytes (0: 90 % of the budget; with no budget, nothing),
 * removing their vllm-ec links, and temporaries over an hour old. Another collector holding root/gc/lock:
 * QVL_ERR_IO saying so. The outputs may be NULL. */
QVL_API qvl_status qvl_cache_gc(qvl_cache *c, uint64_t target, uint64_t *evicted_bytes, size_t *evicted_entries,
                                qvl_error *err);
/* Read and verify every entry; corrupt ones are deleted. The outputs may be NULL. */
QVL_API qvl_status qvl_cache_verify(qvl_cache *c, size_t *ok, size_t *corrupt, qvl_error *err);
/* Link every entry as dir/<key>/encoder_cache.safetensors (hard links, else symbolic ones to the entry's absolute
 * path, e.g. across file systems): vLLM's shared-storage encoder-cache layout. *count: the entries linked; a
 * failure is QVL_ERR_IO naming the first that failed. */
QVL_API qvl_status qvl_cache_export_vllm(qvl_cache *c, const char *dir, size_t *count, qvl_error *err);
/* The handle's counters, kept in memory: lookups (a corrupt entry counts in misses too), evictions, and the
 * entries' bytes and count, scanned at open and by each collection and updated by this handle's puts, corrupt
 * reads and evictions in between (another process's writes show after the next collection). */
typedef struct qvl_cache_stats {
    uint64_t hits, misses, corrupt, puts, put_errors;
    uint64_t bytes, entries;
    uint64_t evictions, evicted_bytes;
} qvl_cache_stats;
QVL_API void qvl_cache_get_stats_sized(qvl_cache *c, qvl_cache_stats *out, size_t size);
static inline void qvl_cache_get_stats(qvl_cache *c, qvl_cache_stats *out) {
    qvl_cache_get_stats_sized(c, out, sizeof *out);
}

#ifdef __cplusplus
}
#endif
#endif /* QVL_H */
