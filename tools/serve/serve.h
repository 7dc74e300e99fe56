/* serve.h — `qvl serve`, an HTTP encoder server on top of libqvl's public API (qvl.h).
 * Not part of the library: a program of its own files, one concern each:
 *   serve_parse.c    request parsing: options, JSON bodies, data URLs, base64 (no HTTP, no model: fuzzed)
 *   serve_path.c     path items: beneath --allowed-media-path, no link followed, read into memory once
 *   serve_out.c      response bodies: safetensors and .npy in memory, the vLLM content part, error JSON
 *   serve_batch.c    admission, the decode/preprocess workers, the continuous batcher, single flight
 *   serve_metrics.c  counters and histograms, Prometheus text
 *   serve_http.c     libmicrohttpd (epoll, suspended connections): routes, auth, limits, drain on SIGTERM; `qvl serve` */
#ifndef QVL_SERVE_H
#define QVL_SERVE_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

/* ---- errors: {"error": {"type", "message", "item"}} with an HTTP status ---- */
typedef struct srv_err {
    int http;           /* 400, 401, 413, 415, 422, 503, 500 */
    const char *type;   /* "invalid_request", "unauthorized", "too_large", "unsupported_media_type",
                           "undecodable_item", "unavailable", "internal" */
    int item;           /* the item's index, or -1 */
    int retry_after_s;  /* 503: the Retry-After seconds */
    char message[512];
} srv_err;
void srv_err_set(srv_err *e, int http, int item, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The type string of an HTTP status. */
const char *srv_err_type(int http);
/* The HTTP status of a library failure of one item (422 undecodable, 413 over a limit, 415 unsupported, ...). */
int srv_http_of_status(qvl_status s);

/* ---- admission limits ----
 * The server's own, from its options, checked in one place each: the body and item sizes and counts while parsing
 * (serve_http.c, serve_parse.c), the queue bounds in srv_submit. What one item may cost once its bytes are in is the
 * library's business: srv_config.qlim (qvl_limits, `--limit NAME=N`) is set on the encoder ctx and on every plan
 * (plan_params in serve_batch.c), so an image or video whose header-derived size, frame count or patch grid is over
 * a limit fails with QVL_ERR_LIMIT (413, the library's message naming the limit) before it is decoded or its rows
 * allocated. max_pixels, max_item_patches and max_item_bytes here are the same numbers as qlim's max_image_pixels,
 * max_item_patches and max_input_bytes (cmd_serve makes each pair the smaller of the two). */
typedef struct srv_limits {
    size_t max_body_bytes;     /* request body (413 before it is read) */
    size_t max_items;          /* items of one request */
    size_t max_item_bytes;     /* one decoded item's bytes (base64 payload decoded, or a path's file; = qlim's
                                  max_input_bytes) */
    uint64_t max_pixels;       /* an image's (or a video frame's) width·height (= qlim.max_image_pixels) */
    size_t max_item_patches;   /* patch rows of one item (= qlim.max_item_patches) */
    size_t max_queue_patches;  /* patches admitted and not yet encoded (503 above it): decoded items by their rows,
                                  undecoded ones by their header's estimate (srv_estimate_patches) */
    size_t max_queue_items;    /* items accepted and not yet encoded (503 above it) */
    size_t max_batch_patches;  /* the batcher's patch budget */
    size_t max_batch_items;    /* and item cap (1..SRV_MAX_BATCH_ITEMS) */
    int max_wait_us;           /* idle wait for more items when the batch is small */
    size_t min_batch_patches;  /* "small" */
    int timeout_ms;            /* default request deadline */
    size_t max_put_items;      /* results held for their cache write, queued or being written (--max-cache-writes) */
    size_t max_put_bytes;      /* and their output bytes (--max-cache-write-bytes); a result past either is not cached */
} srv_limits;
void srv_limits_default(srv_limits *l);
/* --max-batch-items at most (the batcher's slots are allocated when it starts). */
#define SRV_MAX_BATCH_ITEMS 65536

/* An image's width and height from its first n bytes, without decoding it (PNG IHDR, GIF logical screen grown to
 * its first frame, BMP info header, JPEG SOFn, WebP VP8 / VP8L / VP8X): 0, or -1 when they are not found there (or
 * are zero). Only an estimate for admission: the decoder checks the real header. */
int srv_header_dims(const uint8_t *d, size_t n, uint32_t *w, uint32_t *h);
/* 1 when the n bytes at d start as one of the images the library decodes (JPEG, PNG, WebP, GIF, BMP: the magic
 * numbers by which it tells an ENCODED item's image from a video, qvl.h), 0 for anything else: a video, or bytes
 * that are no image at all. */
int srv_is_image(const uint8_t *d, size_t n);
/* An item's patch rows before it is decoded (the queue bound counts admitted items by it): for an image (media
 * SRV_MEDIA_IMAGE, its bytes data/size, or its file's first 64 KiB when path is set), its header's size through the
 * resize rule of p (smart_resize onto the patch·merge grid within [min_pixels, max_pixels]) — the grid decoding
 * gives; for a video, or bytes without an image header found in their first 64 KiB, a conservative bound: the
 * whole-clip budget (video_max_pixels; with the per-frame cap, which can exceed it, none) in patches. Never above
 * max_item_patches. */
size_t srv_estimate_patches(const qvl_preprocess_params *p, size_t max_item_patches, int media, const uint8_t *data,
                            size_t size, const char *path);

/* ---- request options and items (parsed, not yet decoded) ---- */
typedef struct srv_opts {
    qvl_dtype dtype;            /* F32 default */
    qvl_output_layout layout;   /* CONCAT default */
    int deepstack;              /* 1 default */
    int timeout_ms;             /* 0: the server's */
} srv_opts;
void srv_opts_default(srv_opts *o);
/* Set one option by name ("dtype" f32|bf16|f16, "layout" concat|split, "deepstack" true|false|1|0,
 * "timeout_ms" 1..3600000). Unknown names are refused. 0, or -1 with e set to 400. */
int srv_opt_set(srv_opts *o, const char *name, const char *value, srv_err *e);

typedef enum srv_media { SRV_MEDIA_IMAGE = 1, SRV_MEDIA_VIDEO = 2 } srv_media;
/* The modality of a Content-Type / data-URL media type: image/... or video/..., 0 for anything else (415). Parameters
 * after ';' are ignored, case-insensitively. */
int srv_media_of(const char *type, size_t len);

typedef struct srv_in_item {
    srv_media media;
    uint8_t *data;   /* decoded bytes (malloc'd), or NULL for a path */
    size_t size;
    char *path;      /* malloc'd, or NULL */
} srv_in_item;

typedef struct srv_request_items {
    srv_in_item *items;
    size_t n;
    srv_opts opts;
} srv_request_items;
void srv_request_items_free(srv_request_items *r);

/* Parse a JSON body {"items": [{"data": "data:<type>;base64,<b64>"} | {"path": "..."}], "dtype", "layout",
 * "deepstack", "timeout_ms"} within `lim` (item count, decoded sizes). Paths are taken as given: the caller checks
 * them against --allowed-media-path. 0, or -1 with e set (400 malformed, 413 too large, 415 media type). */
int srv_parse_json(const char *body, size_t len, const srv_limits *lim, srv_opts defaults, srv_request_items *out,
                   srv_err *e);
/* Decode standard base64 (the alphabet and '=' only: whitespace refused; padded to whole quanta) of at most
 * `limit` decoded bytes into a malloc'd buffer. 0, -1 malformed, -2 over the limit. */
int srv_b64_decode(const char *s, size_t n, size_t limit, uint8_t **out, size_t *out_len);
/* Base64 of n bytes into a malloc'd NUL-terminated string (NULL: no memory or overflow). */
char *srv_b64_encode(const void *data, size_t n, size_t *out_len);
/* 1 if s is 64 lowercase hex digits. */
int srv_is_key(const char *s);

/* ---- path items (serve_path.c): JSON {"path": ...}, on only with --allowed-media-path ---- */
typedef struct srv_root {
    int fd;                /* the root directory (O_PATH | O_DIRECTORY), -1 when path items are off */
    char real[PATH_MAX];   /* its realpath */
    char given[PATH_MAX];  /* its name as given, made absolute and normalised: a path may name the root either way */
    char cwd[PATH_MAX];    /* the server's working directory, which relative paths are taken against */
} srv_root;
/* Open the allowed root `dir` (it must exist and be a directory): 0, or -1 with msg naming the cause. */
int srv_root_open(srv_root *r, const char *dir, char *msg, size_t cap);
void srv_root_close(srv_root *r);
/* `path` made absolute (against cwd when relative) with "", "." and ".." components resolved by name alone, never
 * by looking at the filesystem ("/.." is "/"), into out: 0, or -1 when it does not fit cap (or path is empty). */
int srv_path_normalize(const char *cwd, const char *path, char *out, size_t cap);
/* The part of a normalised path below the root (either spelling; "" for the root itself), or NULL when it is not
 * under the root. */
const char *srv_path_below(const srv_root *r, const char *norm);
/* Turn path item i into ENCODED bytes: refused (400) unless its normalised name is under the root, by that name
 * alone; then opened beneath the root's descriptor following no symbolic link (400 when the name goes through one,
 * 422 when it cannot be opened), refused when a directory (400: no frames directories over HTTP), not a regular
 * file or empty (422), over max_item_bytes or over *budget (413, sizes from fstat before any byte is read), and read
 * whole into it->data / it->size (it->path freed and NULL). *budget, the bytes left of the request's body limit
 * (max_body_bytes) for its path items, goes down by the size. 0, or -1 with e set. */
int srv_read_path(const srv_root *r, srv_in_item *it, size_t i, size_t max_item_bytes, size_t max_body_bytes,
                  size_t *budget, srv_err *e);

/* ---- response bodies ---- */
typedef struct srv_buf {
    uint8_t *p;
    size_t len, cap;
    int bad; /* no memory */
} srv_buf;
void srv_buf_put(srv_buf *b, const void *p, size_t n);
void srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct srv_tensor {
    const char *name;
    const char *dtype;   /* "F32", "BF16", "F16", "I32", "I64" */
    int ndim;
    int64_t shape[3];
    const void *data;    /* NULL: `pieces` */
    size_t nbytes;
    const void *const *pieces; /* optional: n_pieces buffers concatenated */
    const size_t *piece_bytes;
    size_t n_pieces;
} srv_tensor;
/* A safetensors file in memory: header padded so the data starts on a 64-byte boundary; meta = n_meta key/value
 * pairs. The malloc'd body in *out / *out_len; 0 or -1 (no memory). */
int srv_st_build(const srv_tensor *t, size_t n, const char *const *meta_kv, size_t n_meta, uint8_t **out,
                 size_t *out_len);
/* Only the header of srv_st_build's file (its 8-byte length, the JSON, the padding): *out_len bytes, to be followed
 * by the tensors' bytes in order (*data_len of them), e.g. sent from where they lie. 0 or -1. */
int srv_st_header(const srv_tensor *t, size_t n, const char *const *meta_kv, size_t n_meta, uint8_t **out,
                  size_t *out_len, size_t *data_len);
/* A .npy (version 1.0) of `descr` ("<f4", "<f2", "<i8", "<i4") and shape, data starting on a 64-byte boundary. */
int srv_npy_build(const char *descr, const int64_t *shape, int ndim, const void *data, size_t nbytes, uint8_t **out,
                  size_t *out_len);
/* Only its header (to be followed by the nbytes of data). */
int srv_npy_header(const char *descr, const int64_t *shape, int ndim, size_t nbytes, uint8_t **out, size_t *out_len);
/* The error JSON body (malloc'd string). */
char *srv_err_json(const srv_err *e);
const char *srv_dtype_st(qvl_dtype d);   /* "F32", "F16", "BF16" */
const char *srv_dtype_opt(qvl_dtype d);  /* "f32", "f16", "bf16" */
size_t srv_dtype_size(qvl_dtype d);

/* ---- metrics ---- */
typedef struct srv_hist {
    const double *bounds;
    int n;
    uint64_t counts[32]; /* cumulative at render time; per-bucket here; [n] is +Inf */
    double sum;
    uint64_t count;
} srv_hist;
enum { SRV_EP_ENCODE, SRV_EP_VLLM, SRV_EP_CACHE, SRV_EP_HEALTH, SRV_EP_INFO, SRV_EP_METRICS, SRV_EP_OTHER, SRV_EP_N };
enum { SRV_CODE_200, SRV_CODE_400, SRV_CODE_401, SRV_CODE_404, SRV_CODE_405, SRV_CODE_406, SRV_CODE_413,
       SRV_CODE_415, SRV_CODE_422, SRV_CODE_503, SRV_CODE_500, SRV_CODE_N };
typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[SRV_EP_N][SRV_CODE_N];
    srv_hist latency, queue_wait, encode, batch_items, batch_patches;
    uint64_t items_encoded, patches_encoded, tokens_out, batches;
    uint64_t items_streamed; /* videos encoded a piece at a time (of items_encoded) */
    uint64_t single_flight_joins;
    uint64_t rejected_queue_full, rejected_not_ready, rejected_deadline;
    uint64_t puts_skipped_full, puts_skipped_large, puts_abandoned; /* results not cached: the writer's queue full, one
                                                                      output over its byte bound, a drain's end */
    uint64_t decodes_cancelled; /* items whose decode stopped when nobody waited for them any more */
    double start_time;
} srv_metrics;
void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, int endpoint, int http, double seconds);
/* One request refused with 503, for qvl_rejected_requests_total{reason}: counted once per request where its answer
 * is decided (srv_submit; the HTTP layer for a deadline, whether it passed in a queue or while waiting). */
enum { SRV_REJECT_QUEUE_FULL, SRV_REJECT_NOT_READY, SRV_REJECT_DEADLINE };
void srv_metrics_rejected(srv_metrics *m, int reason);
void srv_hist_add(srv_metrics *m, srv_hist *h, double v);
/* Prometheus text 0.0.4 (gauges passed in). */
typedef struct srv_gauges {
    size_t queue_items, queue_patches, inflight;
    size_t put_items, put_bytes; /* results held for their cache write */
    qvl_cache_stats cache; /* the cache's counters (zero without one) */
    const char *fingerprint, *family, *isa;
    int ready, draining;
} srv_gauges;
void srv_metrics_render(srv_metrics *m, const srv_gauges *g, srv_buf *out);

int cmd_serve(int argc, char **argv);

/* ---- test hooks ----
 * Only in the server that tests.cmake builds for tests/serve/test_serve_races.c (QVL_SERVE_TEST_HOOKS), never in the
 * qvl binary: srv_test_hold(NAME) sleeps for the milliseconds in environment variable NAME (none when it is unset),
 * at a point where two threads meet, so that a test lands for certain in a window otherwise microseconds wide. */
#ifdef QVL_SERVE_TEST_HOOKS
void srv_test_hold(const char *name);
#else
static inline void srv_test_hold(const char *name) { (void)name; }
#endif

#endif
