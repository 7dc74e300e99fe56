/* serve_batch.h — the encoder service behind the HTTP layer: admission, single flight, decode/preprocess workers,
 * the continuous batcher on one encoder context. */
#ifndef QVL_SERVE_BATCH_H
#define QVL_SERVE_BATCH_H

#include "serve.h"

typedef struct srv_job srv_job;
typedef struct srv_state srv_state;

/* One item's result as the HTTP layer reads it once the item is done. */
typedef struct srv_result {
    int http;            /* 200, or the item's error status */
    const char *message; /* "" when ok */
    const char *key;     /* 64 hex */
    qvl_grid grid;
    size_t n_tokens, out_cols, n_planes, out_bytes;
    const void *out;     /* out_bytes in the request's dtype and layout */
    int cached;          /* answered from the cache */
    int streamed;        /* a video of several pieces: read its output with srv_stream_read as it comes (out may be
                            NULL), or wait for it whole (done, without a watch's `stream`) */
} srv_result;

typedef struct srv_config {
    const char *model_dir;
    const char *cache_dir;     /* NULL: no cache */
    uint64_t cache_size;
    int vllm_links;
    int threads;               /* encoder ctx threads (0: all) */
    int workers;               /* decode/preprocess threads */
    qvl_isa isa;
    qvl_precision precision;   /* f32 (0, the default), bf16 or auto (qvl_load_params.precision) */
    srv_limits lim;
    qvl_limits qlim;           /* the library's limits: the ctx's ceiling and every plan's (srv_load) */
} srv_config;

/* The service's state, not ready yet (its HTTP side can answer health and metrics while the model loads). */
srv_state *srv_create(const srv_config *cfg);
/* Load the model, make the encoder ctx, warm up, start the workers and the batcher; then it is ready. 0, or -1
 * with msg (the caller then srv_stop()s it). */
int srv_load(srv_state *s, char *msg, size_t cap);
/* 1 once srv_load has succeeded (the model, ctx and settings may be read). */
int srv_loaded(srv_state *s);
/* Stop accepting (draining), let every accepted item finish, then join the threads and free everything. */
void srv_drain(srv_state *s);
/* Wait until every result queued for its cache write has been written, or the deadline (monotonic seconds) passes;
 * srv_stop then abandons the writes left (not cached; a write under way completes). */
void srv_finish_puts(srv_state *s, double deadline);
void srv_stop(srv_state *s);

/* Accept a request's items, each of them bytes (path items are read into memory first, srv_read_path: one still
 * naming a path is refused with 500): each item gets its key, is looked up in the cache, joins an identical item
 * queued or running, or is queued for decoding. While draining only requests `accepted` (begun before the drain) are
 * admitted. On success jobs[i] holds a reference to each item. -1 with e set
 * (503 draining / not ready / queue full, 413, 415, 500). `modality` per item comes from the parsed request.
 * `stream`: the request answers its one item as its tokens come (srv_stream_read), so that a video of several
 * pieces made for it alone keeps no more than two pieces' outputs unread (not cached then where the cache would
 * take its output whole, and joined by no later request). */
int srv_submit(srv_state *s, srv_in_item *items, size_t n, const srv_opts *opts, double deadline, int accepted,
               int stream, srv_job **jobs, srv_err *e);
/* Wait until every job is done or the deadline (monotonic seconds) passes: 0 done, -1 timed out. */
int srv_wait(srv_state *s, srv_job **jobs, size_t n, double deadline);
/* Job j's result, read under the service's lock (a streamed job changes while it is read). */
void srv_result_of(srv_state *s, const srv_job *j, srv_result *r);
/* Waiting without a thread: once added, the notifier calls fn(user, timed_out) exactly once, from its own thread and
 * with no lock held, when every job is done (timed_out = 0) or the deadline passes (1). The watch must stay valid
 * until then; it is not touched after fn returns. -1 when the service is not running (fn is not called). */
typedef struct srv_watch {
    srv_job **jobs;
    size_t n;
    double deadline; /* monotonic seconds */
    void (*fn)(void *user, int timed_out);
    void *user;
    int stream;              /* a job streamed counts as done once its first piece is encoded (srv_result.streamed) */
    int timed_out;           /* (the service's) */
    struct srv_watch *next;  /* (the service's) */
} srv_watch;
int srv_watch_add(srv_state *s, srv_watch *w);
/* Fire every watch now, as timed out (a drain that ran out of time), once the notifier has fired those it had taken
 * off the list: when it returns, every watch added before has had its fn called. */
void srv_watch_flush(srv_state *s);
/* Drop the references. */
void srv_release(srv_state *s, srv_job **jobs, size_t n);

/* ---- a streamed answer: the output of a video of several pieces, read as its pieces are encoded ----
 * Up to max of job j's output bytes from byte `pos` into buf (one plane: the token rows in order): > 0 bytes copied;
 * 0 when none is ready yet; -1 when the job failed (or the drain's end gave the answer up): the answer stops short;
 * -2 at its end. Reads go forward: bytes before pos may be freed. */
/* Before the first read, once the job's watch (with `stream`) has fired: 1 when j is read as it comes from now on
 * (it is not planned again whole, which a video sampled again after its first pieces otherwise is); 0 when it is
 * done and not streamed (answer it whole); -1 when it is neither (planned again whole: wait for it, without
 * `stream`). */
int srv_stream_claim(srv_state *s, srv_job *j);
long srv_stream_read(srv_state *s, srv_job *j, size_t pos, void *buf, size_t max);
/* A reader waiting for more of a job's output (each answer its own: several may read one gathered job). */
typedef struct srv_stream_waiter {
    srv_job *job;
    size_t pos;                  /* where it reads next */
    void (*wake)(void *user);
    void *user;
    struct srv_stream_waiter *next; /* (the service's) */
    int listed;                  /* (the service's) */
} srv_stream_waiter;
/* After a read of 0: w->wake(w->user) is called once, from another thread, when bytes at w->pos are ready, the job
 * ends or fails, or srv_stream_flush runs. 1, with nothing registered, when that is so already. */
int srv_stream_wait(srv_state *s, srv_stream_waiter *w);
/* The answer is gone: no wake from now on. */
void srv_stream_forget(srv_state *s, srv_stream_waiter *w);
/* The drain's end: every streamed answer stops (its reads -1 from now on) and its waiting reader is woken; when it
 * returns, every registered wake has been called. */
void srv_stream_flush(srv_state *s);

/* State for /health, /info and /metrics. */
int srv_ready(srv_state *s);
int srv_draining(srv_state *s);
void srv_gauges_of(srv_state *s, srv_gauges *g);
srv_metrics *srv_metrics_of(srv_state *s);
qvl_cache *srv_cache_of(srv_state *s);
/* /info as JSON (malloc'd). */
char *srv_info_json(srv_state *s);
/* The resolved preprocessing as canonical JSON (owned by s). */
const char *srv_prep_json(srv_state *s);
const char *srv_fingerprint(srv_state *s);
const srv_limits *srv_limits_of(srv_state *s);
int srv_n_deepstack(srv_state *s);
/* The arithmetic the loaded model runs ("f32" or "bf16": --precision auto resolved), for /info and answers. */
const char *srv_precision(srv_state *s);
int srv_out_hidden(srv_state *s);

/* Monotonic seconds. */
double srv_now(void);

#endif
