/* cli.h — helpers shared by the qvl CLI's source files (every .c file under tools/). The CLI uses only the
 * public qvl.h. */
#ifndef QVL_TOOLS_CLI_H
#define QVL_TOOLS_CLI_H

#include <stdint.h>

#include "qvl.h"

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* Exit statuses: 1 for a failed operation, 2 for a usage error. */
enum { CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* Print one line "qvl: error: <message>" on stderr and return CLI_EXIT_FAIL / CLI_EXIT_USAGE. */
int cli_fail(const char *fmt, ...) CLI_PRINTF(1, 2);
int cli_usage(const char *fmt, ...) CLI_PRINTF(1, 2);
/* The usage error for getopt_long's '?' and ':' returns (opterr must be 0, optstring must start with ':'). */
int cli_bad_option(const char *cmd, int c, char **argv);

/* Strict integer parsing: the whole string, base 10, within [lo, hi]. 0 on success, -1 otherwise. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
int cli_parse_u64(const char *s, uint64_t *out);

/* A size: bytes, or with a K, M, G or T suffix (powers of 1024; "KiB", "MB", ... read the same). 0 on success,
 * -1 otherwise (no digits, another suffix, overflow). */
int cli_parse_size(const char *s, uint64_t *out);
/* `qvl cache` (tools/cli_cache.c). */
int cmd_cache(int argc, char **argv);

/* --limit NAME=N (`qvl encode`, `qvl serve`): N ≥ 1 into the qvl_limits field NAME (any of QVL_LIMIT_FIELDS).
 * 0 on success, -1 for an unknown name or a bad value. */
int cli_parse_limit(const char *s, qvl_limits *l);

/* --isa: "auto", "avx2", "avx512" or "amx" into *out. 0 on success, -1 otherwise. */
int cli_parse_isa(const char *s, qvl_isa *out);
/* --precision: "f32", "bf16" or "auto" into *out. 0 on success, -1 otherwise. */
int cli_parse_precision(const char *s, qvl_precision *out);

/* The output buffers of one encode: merged [n_tok, O] and, for each of the n_ds DeepStack features, ds[k]
 * (ds[k] untouched for k >= n_ds). 0 on success; -1 when the size overflows or memory runs out (what was
 * allocated stays in *merged / ds for the caller to free). */
int cli_alloc_outputs(size_t n_tok, size_t O, int n_ds, float **merged, float *ds[QVL_MAX_DEEPSTACK]);

/* `-o OUT` checked before any work: a usage error (returned, already printed) when OUT exists and is not a
 * regular file (a directory, FIFO, device; a symlink to one), is one of the inputs (the same file) or lies inside a
 * frame-directory input, or is a file of the model's checkpoint (the same file as one directly in MODEL_DIR or
 * MODEL_DIR/optiq). model_dir may be NULL. 0 when OUT may be written. */
int cli_check_output(const char *out, const char *model_dir, const char *const *inputs, int n_inputs);

/* Monotonic milliseconds. */
double cli_now_ms(void);

int cmd_encode(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* Options of `qvl encode` for image and video inputs (cli_media.c). */
typedef struct media_opts {
    const char *model_dir;
    const char *out_path;
    char *const *inputs;   /* image files, video files, or directories of frame images */
    int n_inputs;
    int preprocess_only;
    int quiet;
    const char *cache_dir; /* --cache DIR, or NULL */
    size_t max_batch_rows; /* --max-batch-rows N (0: the library's default) */
    qvl_load_params load;
    qvl_ctx_params ctx;
    qvl_preprocess_params pp;
    qvl_video_params vp;
    qvl_decode_params dp;
    /* which preprocessing settings the command line set (they override the model's json files) */
    int set_resize, set_min, set_max, set_size, set_fps, set_num_frames, set_max_frames, set_cap, set_max_vt,
        set_vmin, set_vmax;
} media_opts;

/* Exit status when some inputs failed and the others were written. */
enum { CLI_EXIT_PARTIAL = 3 };

int encode_media(media_opts *o);

#endif
