/* serve_batch.c — admission, single flight, decode/preprocess workers and the continuous batcher of `qvl serve`.
 *
 * An item's life: srv_submit computes its key (qvl_item_key, on the HTTP thread), answers it from the cache, or
 * joins an identical item already queued or running (single flight), or queues it for a worker. A worker decodes
 * and preprocesses it with qvl_plan_create(NULL, ...) (preprocessing only, off the encoder's path) and queues its
 * pixel rows for the encoder. The batcher, when the encoder is free, takes queued items FIFO (skipping items of
 * another output spec, which start the next batch) while their patch rows fit the batch budget and the item cap;
 * an item larger than the budget runs alone; it waits a little for more only when the encoder was idle and the
 * batch is small. The batch is one plan of ROWS items on the encoder ctx (qvl_plan_encode: one forward pass over
 * several attention segments, the same bits as one by one). A batch whose every item has expired or lost all its
 * waiters is cancelled between blocks (qvl_ctx_set_cancel_fn).
 *
 * Cache writes: a result is handed to the writer thread (a bounded FIFO of jobs: --max-cache-writes entries,
 * --max-cache-write-bytes of outputs, those being written included), never written by the batcher, whose next batch
 * would wait for it (a put writes, hashes and renames the entry, and may run a collection: 0.26 s for 64 MiB). The
 * queue holds a reference to each job, so its output stays in memory until written, and the job stays in the
 * flight table meanwhile: a request for the same item arriving after the answer and before the entry has landed
 * joins it and is answered from that output (not encoded again). A result that does not fit the queue is not
 * cached (qvl_cache_puts_skipped_total, reason queue_full or too_large). A drain finishes the queued writes within
 * its budget (srv_finish_puts); srv_stop abandons those left (reason drain), the write under way completing.
 *
 * Videos are read as streams (qvl_preprocess_stream), their rows a piece of whole temporal patches at a time
 * within the batch budget. A video of one piece is queued whole, as an image is. A video of several is
 * encoded piece by piece: the worker queues each piece as a job of its own (its rows borrowed from the stream's
 * ring, the worker waiting until the batcher is done with them), so that other items' batches come between its
 * pieces and its rows are never held whole; each piece's output goes to the video's job, where an answer reads it as
 * it comes (srv_stream_read). The video's output is held whole (gathered) where it is to be cached or answered
 * whole; a video made for one request that answers as it comes (srv_submit's `stream`) and that the cache would
 * not take keeps only its pieces not yet read (a ring: the worker waits while two are unread), and from its first
 * piece on no request joins it.
 *
 * One mutex guards the queues, the flight table and every job's state; one condition variable wakes the waiters
 * when any job finishes (or a piece is encoded or read). A job holds one reference per waiting request plus one for
 * the pipeline until done. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "serve_batch.h"

enum { J_PREP_QUEUED, J_PREPPING, J_ENC_QUEUED, J_ENCODING, J_STREAMING, J_DONE };
enum { SRV_RING_UNREAD = 2 }; /* a ring video's pieces encoded and not yet read, at most */
enum { SRV_WHOLE_KEYS = 16 };  /* videos remembered as to be read whole (sampled again after their answer began) */

/* A piece's output, kept until read (a ring video). */
typedef struct srv_chunk {
    struct srv_chunk *next;
    void *data;
    size_t bytes;
} srv_chunk;
#define FLIGHT_BUCKETS 1024

struct srv_job {
    char key[QVL_KEY_HEX];
    srv_media media;
    uint8_t *data;        /* the item's image or video bytes (ENCODED: decoded from memory; a path item's file was
                             read by the HTTP layer, so nothing is opened by name here) */
    size_t size;
    srv_opts spec;
    int state;
    int refs;
    double deadline;      /* the latest of its waiters' */
    double t_queued;      /* entered the encoder queue */
    qvl_plan *pre;        /* the preprocessing plan (rows) */
    const float *rows;
    qvl_grid grid;
    char kind[8];         /* "image" or "video" as its plan found it (recorded in its cache entry); "" if unknown */
    size_t n_rows, n_tokens, out_cols, n_planes, out_bytes;
    size_t est_patches;   /* admitted, not yet in the encoder queue: its patches as estimated from the header */
    void *out;
    void *entry_file;     /* a cache hit's file (out points into it; qvl_free) */
    int cached;
    int http;
    char message[512];
    srv_job *next;        /* queue link */
    srv_job *flight_next; /* flight-table chain */
    srv_job *put_next;    /* the cache writer's queue */
    int putting;          /* queued for its cache write or being written: stays in the flight table until written */
    /* videos read as streams */
    srv_job *parent;      /* a piece: its video (the piece's rows are borrowed from the video's stream) */
    size_t tok0;          /* a piece: its first token in the video */
    float *rows_own;      /* a video of one piece: its rows, copied out of the stream */
    int can_stream;       /* made for a request that answers as the tokens come (srv_submit's stream) */
    int streamed;         /* a video of several pieces (J_STREAMING from its first piece encoded until done) */
    int ring;             /* its output not held: each piece's kept until read */
    int answering;        /* an answer reads it as it comes (srv_stream_claim) */
    size_t tok_done;      /* its tokens encoded */
    srv_chunk *chunks, *chunks_tail; /* ring: pieces encoded and not read, in order */
    size_t n_chunks, chunk_pos; /* and the byte offset of the first */
};

struct srv_state {
    srv_config cfg;
    qvl_model *model;
    qvl_ctx *ctx;
    qvl_model_info info;
    char fingerprint[33];
    qvl_preprocess_params pp;
    qvl_video_params vp;
    qvl_decode_params dp;
    char *prep_json;
    qvl_cache *cache;
    srv_metrics metrics;

    pthread_mutex_t mu;
    pthread_cond_t prep_cv, enc_cv, done_cv;
    srv_job *prep_head, *prep_tail;
    srv_job *enc_head, *enc_tail;
    srv_job *flight[FLIGHT_BUCKETS];
    size_t prep_items, enc_items, enc_patches, inflight_jobs;
    size_t prep_patches;  /* est_patches of the items queued for or in decoding */
    srv_watch *watches;   /* requests waiting for their jobs (the HTTP side's suspended connections) */
    srv_stream_waiter *wakes; /* streamed answers waiting for more (srv_stream_wait) */
    char whole[SRV_WHOLE_KEYS][QVL_KEY_HEX]; /* keys of videos sampled again after their streamed answer began: read
                                                whole next */
    unsigned whole_next;
    int streams_stopped;  /* srv_stream_flush: every streamed answer stops */
    unsigned long done_seq; /* bumped by every job_done and srv_watch_add: the notifier's missed-wakeup guard */
    int firing;           /* the notifier holds watches taken off the list and not yet fired (a flush waits) */
    pthread_t notifier;
    int notifier_started;
    double ewma_patches_per_s;
    int ready, draining, stop;
    pthread_t *workers;
    int n_workers;
    pthread_t batcher;
    int batcher_started;
    srv_job **batch_jobs; /* the batcher's max_batch_items slots, allocated by srv_load before it starts */

    /* the cache writer: jobs whose outputs wait for their cache write (a reference each), FIFO */
    pthread_cond_t put_cv;    /* a job queued, a write done, stop */
    srv_job *put_head, *put_tail;
    size_t put_items, put_bytes; /* queued and being written: bounded by lim.max_put_items / max_put_bytes */
    pthread_t writer;
    int writer_started;
};

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait on cv (mu held) for at most `sec` seconds (the condition variables run on CLOCK_REALTIME). */
static void cond_wait_s(pthread_cond_t *cv, pthread_mutex_t *mu, double sec) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + sec;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(cv, mu, &ts);
}
/* A counter of s->metrics bumped: under the metrics' own mutex, which srv_metrics_render's snapshot takes (the
 * callers here may hold s->mu too: the order is always s->mu, then metrics.mu, as srv_hist_add's). */
#define MET(s, stmt)                                \
    do {                                            \
        pthread_mutex_lock(&(s)->metrics.mu);       \
        stmt;                                       \
        pthread_mutex_unlock(&(s)->metrics.mu);     \
    } while (0)

static unsigned bucket_of(const char *key) {
    unsigned h = 0;
    for (int i = 0; i < 8; i++) h = h * 16 + (unsigned)(key[i] <= '9' ? key[i] - '0' : key[i] - 'a' + 10);
    return h % FLIGHT_BUCKETS;
}

static int same_spec(const srv_opts *a, const srv_opts *b) {
    return a->dtype == b->dtype && a->layout == b->layout && a->deepstack == b->deepstack;
}

/* A ring video's pieces not read, freed. */
static void chunks_free(srv_job *j) {
    for (srv_chunk *c = j->chunks, *next; c; c = next) {
        next = c->next;
        free(c->data);
        free(c);
    }
    j->chunks = j->chunks_tail = NULL;
    j->n_chunks = j->chunk_pos = 0;
}

static void job_free(srv_job *j) {
    if (!j) return;
    free(j->data);
    qvl_plan_free(j->pre);
    free(j->rows_own);
    chunks_free(j);
    if (j->entry_file) qvl_free(j->entry_file);
    else free(j->out);
    free(j);
}

/* Under mu. */
static void job_unref(srv_state *s, srv_job *j) {
    (void)s;
    if (--j->refs == 0) job_free(j);
}

static void flight_remove(srv_state *s, srv_job *j) {
    srv_job **p = &s->flight[bucket_of(j->key)];
    while (*p && *p != j) p = &(*p)->flight_next;
    if (*p) *p = j->flight_next;
    j->flight_next = NULL;
}

/* Under mu: the job is finished (ok or failed); wake the waiters; drop the pipeline's reference unless the caller
 * still needs the job (keep = 1). A job queued for its cache write stays in the flight table (put_done takes it out). */
static void job_done(srv_state *s, srv_job *j, int http, const char *msg, int keep) {
    j->state = J_DONE;
    j->http = http;
    snprintf(j->message, sizeof j->message, "%s", msg ? msg : "");
    if (!j->putting) flight_remove(s, j);
    s->inflight_jobs--;
    s->done_seq++;
    pthread_cond_broadcast(&s->done_cv);
    if (!keep) job_unref(s, j);
}

/* The library's message of an item without the label it begins with ("item: "): the HTTP layer names the item by its
 * index in the request (results_of: "item N: "), which is not its index in a batch. */
static const char *unlabeled(const char *msg) {
    static const char label[] = "item: ";
    return strncmp(msg, label, sizeof label - 1) == 0 ? msg + sizeof label - 1 : msg;
}

/* The plan params of an output spec, over the server's resolved preprocessing and limits (the preprocessing plans
 * have no ctx: without pl->limits they would get the library's defaults, not the server's). */
static void plan_params(const srv_state *s, const srv_opts *spec, qvl_plan_params *pl) {
    qvl_plan_params_default(pl);
    pl->dtype = spec->dtype;
    pl->layout = spec->layout;
    pl->deepstack = spec->deepstack;
    pl->preprocess = &s->pp;
    pl->video = &s->vp;
    pl->decode = &s->dp;
    pl->limits = &s->cfg.qlim;
}

/* ---- workers: decode + preprocess ---- */

/* Polled while an item decodes (qvl_plan_params.cancel_fn): stop once nobody waits for it (every request for it
 * gone or past its deadline), as batch_cancel does between blocks; the job leaves the flight table at once, so that
 * a request for the same item arriving meanwhile queues it anew. The lock is taken at most every 10 ms. */
typedef struct prep_probe {
    srv_state *s;
    srv_job *j;
    double next;
    int polls;
} prep_probe;

static int prep_cancel(void *user) {
    prep_probe *p = user;
    const double now = srv_now();
    if (now < p->next) return 0;
    p->next = now + 0.01;
    pthread_mutex_lock(&p->s->mu);
    const int live = p->j->refs > 1 && now <= p->j->deadline;
    if (!live) flight_remove(p->s, p->j);
    pthread_mutex_unlock(&p->s->mu);
    if (++p->polls == 1) srv_test_hold("QVL_SERVE_TEST_DECODE_MS"); /* a slow decode, after its first poll */
    return !live;
}

/* The bytes of a job's output, from its tokens and shape. */
static size_t out_bytes_of(const srv_job *j) {
    return j->n_tokens * j->out_cols * j->n_planes * srv_dtype_size(j->spec.dtype);
}

/* A job's grid and output shape from its item's info (the preprocessing plan knows no model: it reports 0 output
 * bytes, so the encoded matrix's shape is the server's to work out). */
static void job_shape(const srv_state *s, srv_job *j, const qvl_item_info *info) {
    j->grid = info->grid;
    snprintf(j->kind, sizeof j->kind, "%s", info->kind ? info->kind : "");
    j->n_rows = info->n_rows;
    const size_t O = (size_t)s->info.out_hidden, L = j->spec.deepstack ? (size_t)s->info.n_deepstack : 0;
    j->n_tokens = info->n_rows / 4;
    j->n_planes = j->spec.layout == QVL_OUTPUT_SPLIT ? 1 + L : 1;
    j->out_cols = j->spec.layout == QVL_OUTPUT_SPLIT ? O : O * (1 + L);
    j->out_bytes = out_bytes_of(j);
}

/* Under mu: a job whose rows are all in (j->rows) joins the encoder's queue. */
static void enc_enqueue(srv_state *s, srv_job *j) {
    free(j->data); /* the rows are all the encoder needs */
    j->data = NULL;
    j->state = J_ENC_QUEUED;
    j->t_queued = srv_now();
    j->next = NULL;
    if (s->enc_tail) s->enc_tail->next = j;
    else s->enc_head = j;
    s->enc_tail = j;
    s->enc_items++;
    s->enc_patches += j->n_rows;
    pthread_cond_signal(&s->enc_cv);
}

static void prep_one(srv_state *s, srv_job *j) {
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_ENCODED;
    it.data = j->data;
    it.size = j->size;
    it.label = "item"; /* dropped from its messages (unlabeled) */
    qvl_plan_params pl;
    plan_params(s, &j->spec, &pl);
    prep_probe probe = {s, j, 0.0, 0};
    pl.cancel_fn = prep_cancel;
    pl.cancel_user = &probe;
    qvl_plan *plan = NULL;
    qvl_error err;
    qvl_item_info info;
    memset(&info, 0, sizeof info);
    int http = 200, cancelled = 0;
    char msg[512] = "";
    if (qvl_plan_create(NULL, &it, 1, &pl, &plan, &err) != QVL_OK) {
        http = srv_http_of_status(err.status);
        snprintf(msg, sizeof msg, "%s", unlabeled(err.message));
    } else {
        qvl_plan_item(plan, 0, &info);
        if (info.status != QVL_OK) {
            http = srv_http_of_status(info.status);
            snprintf(msg, sizeof msg, "%s", unlabeled(info.message));
            cancelled = info.status == QVL_ERR_CANCELLED;
        } /* over a limit (pixels, frames, patches: cfg.qlim) the plan failed the item before decoding it */
    }
    if (cancelled) MET(s, s->metrics.decodes_cancelled++);
    else if (http == 503) http = 500;
    pthread_mutex_lock(&s->mu);
    s->prep_items--;
    s->prep_patches -= j->est_patches;
    j->est_patches = 0;
    if (http != 200) {
        qvl_plan_free(plan);
        job_done(s, j, http, msg, 0);
    } else {
        j->pre = plan;
        j->rows = qvl_plan_rows(plan, 0);
        job_shape(s, j, &info);
        enc_enqueue(s, j);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- a video read as a stream ---- */

static int put_enqueue(srv_state *s, srv_job *j);

/* Under mu: whether a request still waits for j (a piece: for its video) within its deadline. */
static int job_live(const srv_job *j, double now) {
    const srv_job *v = j->parent ? j->parent : j;
    return v->refs > 1 && now <= v->deadline;
}

typedef struct stream_prep {
    srv_state *s;
    srv_job *j;
    int pieces;     /* queued */
    char msg[512];  /* a failure of the server's own (memory) */
} stream_prep;

/* The video's first piece of several (mu held): its shape, and where its output goes. A ring when the request that
 * made it answers as the tokens come, it alone waits for it, and the cache would not take its output (no cache, or
 * an output over --max-cache-write-bytes); then it leaves the flight table, as no later request could read it from
 * its start. Otherwise its output is gathered whole. -1: no memory for that. */
static int stream_begin(srv_state *s, srv_job *j, const qvl_item_info *info) {
    job_shape(s, j, info);
    j->streamed = 1;
    j->http = 200; /* so far */
    j->ring = j->can_stream && j->refs == 2 && j->n_planes == 1 &&
              (!s->cache || j->out_bytes > s->cfg.lim.max_put_bytes);
    if (j->ring) flight_remove(s, j);
    else if (!(j->out = malloc(j->out_bytes ? j->out_bytes : 1))) return -1;
    if (j->ring && s->cache) MET(s, s->metrics.puts_skipped_large++); /* over --max-cache-write-bytes */
    /* its queue count: the rows to come, in place of the estimate from its header */
    s->prep_patches = s->prep_patches - j->est_patches + j->n_rows;
    j->est_patches = j->n_rows;
    return 0;
}

/* qvl_preprocess_stream's callback, on the worker: one piece's rows. A video of one piece: its rows copied, queued
 * whole when the stream returns. Several: the piece queued as a job of its own, and waited for until the batcher is
 * done with its rows (they are the stream's). Nonzero stops the stream: a piece failed, nobody waits any more, or the
 * server stops. */
static int on_piece(void *user, const qvl_item_info *info, const qvl_rows_chunk *c) {
    stream_prep *sp = user;
    srv_state *s = sp->s;
    srv_job *j = sp->j;
    if (c->row0 == 0 && c->n_rows == info->n_rows) {
        const size_t bytes = c->n_rows * c->row_len * sizeof(float); /* the plan's rows: their size was checked */
        if (!(j->rows_own = malloc(bytes ? bytes : 1))) {
            snprintf(sp->msg, sizeof sp->msg, "out of memory for %zu bytes of rows", bytes);
            return 1;
        }
        memcpy(j->rows_own, c->rows, bytes);
        pthread_mutex_lock(&s->mu);
        job_shape(s, j, info);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    pthread_mutex_lock(&s->mu);
    if (!j->streamed && stream_begin(s, j, info)) {
        pthread_mutex_unlock(&s->mu);
        snprintf(sp->msg, sizeof sp->msg, "out of memory for %zu output bytes", j->out_bytes);
        return 1;
    }
    /* a ring: no more than SRV_RING_UNREAD pieces encoded and not read (a slow reader holds the stream back) */
    for (;;) {
        if (s->stop || !job_live(j, srv_now()) || j->http != 200) {
            pthread_mutex_unlock(&s->mu);
            return 1;
        }
        if (!j->ring || j->n_chunks < SRV_RING_UNREAD) break;
        cond_wait_s(&s->done_cv, &s->mu, 0.05);
    }
    srv_job *p = calloc(1, sizeof *p);
    if (!p) {
        pthread_mutex_unlock(&s->mu);
        snprintf(sp->msg, sizeof sp->msg, "out of memory");
        return 1;
    }
    p->parent = j;
    p->refs = 1;
    p->spec = j->spec;
    p->rows = c->rows;
    p->grid = (qvl_grid){c->t, info->grid.h, info->grid.w};
    p->n_rows = c->n_rows;
    p->n_tokens = c->n_tokens;
    p->tok0 = c->tok0;
    p->n_planes = j->n_planes, p->out_cols = j->out_cols;
    p->out_bytes = out_bytes_of(p);
    s->prep_patches -= p->n_rows; /* from the video's rows to come to the encoder's queue */
    j->est_patches -= p->n_rows;
    enc_enqueue(s, p);
    sp->pieces++;
    while (p->state != J_DONE) cond_wait_s(&s->done_cv, &s->mu, 0.5); /* the batcher encodes or drops every piece */
    const int ok = p->http == 200;
    pthread_mutex_unlock(&s->mu);
    job_free(p); /* its rows were borrowed, its output went to the video */
    return !ok;
}

/* A video (or bytes that are no image): read as a stream, its pieces encoded as they come. */
static void prep_stream(srv_state *s, srv_job *j) {
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_ENCODED;
    it.data = j->data;
    it.size = j->size;
    it.label = "item";
    qvl_plan_params pl;
    plan_params(s, &j->spec, &pl);
    pl.max_batch_rows = s->cfg.lim.max_batch_patches; /* pieces within the batch budget */
    prep_probe probe = {s, j, 0.0, 0};
    pl.cancel_fn = prep_cancel;
    pl.cancel_user = &probe;
    stream_prep sp = {s, j, 0, ""};
    qvl_error err;
    const qvl_status st = qvl_preprocess_stream(NULL, &it, &pl, on_piece, &sp, &err);
    pthread_mutex_lock(&s->mu);
    /* Sampled again after pieces were encoded (a container whose header counts more frames than it holds: the
     * frames it has are sampled anew, as a plan does): no answer has read it yet, so it is planned and encoded
     * whole instead, as before it was streamed (an answer that has begun stops short: its tokens were others). */
    if (st == QVL_ERR_RESAMPLED && j->streamed && j->http == 200 && j->answering) /* a retry is read whole */
        snprintf(s->whole[s->whole_next++ % SRV_WHOLE_KEYS], QVL_KEY_HEX, "%s", j->key);
    if (st == QVL_ERR_RESAMPLED && j->streamed && j->http == 200 && !j->answering && !s->stop) {
        j->streamed = 0, j->ring = 0, j->http = 0, j->tok_done = 0;
        j->state = J_PREPPING;
        free(j->out), j->out = NULL;
        chunks_free(j);
        s->prep_patches += j->n_rows - j->est_patches; /* counted again as it is read again */
        j->est_patches = j->n_rows;
        pthread_mutex_unlock(&s->mu);
        prep_one(s, j);
        return;
    }
    s->prep_items--;
    s->prep_patches -= j->est_patches;
    j->est_patches = 0;
    /* every token encoded: a piece that failed last stops no stream (its stop is ignored at the last part) */
    const int whole = st == QVL_OK && (j->rows_own || (j->http == 200 && j->tok_done == j->n_tokens));
    if (whole && j->rows_own) { /* one piece: as any item */
        j->rows = j->rows_own;
        enc_enqueue(s, j);
    } else if (whole) {
        MET(s, (s->metrics.items_encoded++, s->metrics.items_streamed++));
        if (s->cache && !j->ring) put_enqueue(s, j);
        job_done(s, j, 200, "", 0);
    } else {
        const int piece_failed = j->http && j->http != 200;
        int http = piece_failed ? j->http : sp.msg[0] ? 500 : st == QVL_OK ? 500 : srv_http_of_status(err.status);
        const char *msg = piece_failed ? j->message : sp.msg[0] ? sp.msg
                        : st == QVL_OK ? "its stream ended before its last piece was encoded" : unlabeled(err.message);
        char m[512];
        snprintf(m, sizeof m, "%s", msg);
        if (!piece_failed && st == QVL_ERR_CANCELLED) /* nobody waits any more, or the server stops */
            MET(s, s->metrics.decodes_cancelled++);
        if (!piece_failed && st == QVL_ERR_RESAMPLED && j->streamed && j->answering) { /* sampled again: see above */
            http = 503;
            snprintf(m, sizeof m, "its container counts more frames than it holds, and it was sampled again over the "
                     "frames it has after its answer began: sent again, it is encoded whole");
        }
        job_done(s, j, http, m, 0);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *worker_main(void *arg) {
    srv_state *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->prep_head && !s->stop) pthread_cond_wait(&s->prep_cv, &s->mu);
        if (!s->prep_head) break;
        srv_job *j = s->prep_head;
        s->prep_head = j->next;
        if (!s->prep_head) s->prep_tail = NULL;
        j->next = NULL;
        if (j->refs == 1 || srv_now() > j->deadline) { /* nobody waits any more */
            s->prep_items--;
            s->prep_patches -= j->est_patches;
            j->est_patches = 0;
            job_done(s, j, 503, "the request's deadline passed in the queue", 0);
            continue;
        }
        j->state = J_PREPPING;
        int whole = srv_is_image(j->data, j->size);
        for (int i = 0; i < SRV_WHOLE_KEYS && !whole; i++) whole = strcmp(s->whole[i], j->key) == 0;
        pthread_mutex_unlock(&s->mu);
        if (whole) prep_one(s, j);
        else prep_stream(s, j); /* a video, or bytes that fail as the plan fails them */
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the cache writer ---- */

/* Under mu: queue a finished job's output for its cache write, taking a reference, when it fits the writer's bounds;
 * otherwise it is not cached (counted by reason). 1 when queued. */
static int put_enqueue(srv_state *s, srv_job *j) {
    const srv_limits *L = &s->cfg.lim;
    const int why = s->stop ? 3 : j->out_bytes > L->max_put_bytes ? 2
                  : s->put_items >= L->max_put_items || j->out_bytes > L->max_put_bytes - s->put_bytes ? 1 : 0;
    if (why) {
        MET(s, why == 1 ? s->metrics.puts_skipped_full++ : why == 2 ? s->metrics.puts_skipped_large++
                                                                     : s->metrics.puts_abandoned++);
        return 0;
    }
    j->refs++;
    j->putting = 1;
    j->put_next = NULL;
    if (s->put_tail) s->put_tail->put_next = j;
    else s->put_head = j;
    s->put_tail = j;
    s->put_items++;
    s->put_bytes += j->out_bytes;
    pthread_cond_broadcast(&s->put_cv);
    return 1;
}

/* Under mu: a job's write is done (or abandoned): out of the flight table and the bounds, its reference dropped. */
static void put_done(srv_state *s, srv_job *j) {
    j->putting = 0;
    flight_remove(s, j);
    s->put_items--;
    s->put_bytes -= j->out_bytes;
    pthread_cond_broadcast(&s->put_cv); /* srv_finish_puts */
    job_unref(s, j);
}

static void *writer_main(void *arg) {
    srv_state *s = arg;
    size_t abandoned = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->put_head && !s->stop) pthread_cond_wait(&s->put_cv, &s->mu);
        srv_job *j = s->put_head;
        if (!j) break;
        s->put_head = j->put_next;
        if (!s->put_head) s->put_tail = NULL;
        j->put_next = NULL;
        if (s->stop) { /* srv_finish_puts gave up on them: not cached */
            MET(s, s->metrics.puts_abandoned++);
            abandoned++;
            put_done(s, j);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        srv_test_hold("QVL_SERVE_TEST_PUT_MS"); /* a slow write */
        /* the job is immutable once done; a failed write counts in the cache's put_errors (/metrics) */
        qvl_cache_put_kind(s->cache, j->key, j->kind[0] ? j->kind : NULL, j->spec.dtype, j->out, j->n_planes,
                           j->n_tokens, j->out_cols, j->grid, s->fingerprint, NULL);
        pthread_mutex_lock(&s->mu);
        put_done(s, j);
    }
    pthread_mutex_unlock(&s->mu);
    if (abandoned) fprintf(stderr, "qvl serve: %zu cache write%s abandoned\n", abandoned, abandoned == 1 ? "" : "s");
    return NULL;
}

void srv_finish_puts(srv_state *s, double deadline) {
    pthread_mutex_lock(&s->mu);
    for (;;) {
        const double left = deadline - srv_now();
        if (!s->put_items || left <= 0) break;
        cond_wait_s(&s->put_cv, &s->mu, left < 0.5 ? left : 0.5);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- the batcher ---- */

typedef struct batch {
    srv_state *s;
    srv_job **jobs;
    size_t n;
} batch;

/* Polled by the encode before each block: cancel when no job of the batch has a live waiter. The jobs of a batch
 * cancelled leave the flight table at once, under the lock a join takes: a request for one of its items arriving
 * before the batch has unwound queues that item anew rather than joining a job about to fail with 503 "cancelled". */
static int batch_cancel(void *user) {
    batch *b = user;
    double now = srv_now();
    int live = 0;
    pthread_mutex_lock(&b->s->mu);
    for (size_t i = 0; i < b->n && !live; i++) live = job_live(b->jobs[i], now);
    for (size_t i = 0; i < b->n && !live; i++) /* job_done's then finds none */
        if (!b->jobs[i]->parent) flight_remove(b->s, b->jobs[i]);
    pthread_mutex_unlock(&b->s->mu);
    srv_test_hold("QVL_SERVE_TEST_BLOCK_MS"); /* the block (or the unwinding) that follows, slow */
    return !live;
}

/* Under mu: a piece is encoded (http 200, its output in *out, taken) or failed: its output to its video, where an
 * answer reads it (a ring: kept until read; else copied into the video's whole output), or its failure to the video;
 * the worker waiting for it woken. */
static void piece_done(srv_state *s, srv_job *p, int http, const char *msg, void **out) {
    srv_job *v = p->parent;
    if (http == 200 && v->http == 200) {
        const size_t row = v->out_cols * srv_dtype_size(v->spec.dtype);
        srv_chunk *c = v->ring ? malloc(sizeof *c) : NULL;
        if (v->ring && !c) {
            v->http = 500;
            snprintf(v->message, sizeof v->message, "out of memory");
        } else if (c) {
            c->data = *out, c->bytes = p->out_bytes, c->next = NULL;
            *out = NULL;
            if (v->chunks_tail) v->chunks_tail->next = c;
            else v->chunks = c;
            v->chunks_tail = c;
            v->n_chunks++;
        } else {
            for (size_t q = 0; q < v->n_planes; q++)
                memcpy((unsigned char *)v->out + (q * v->n_tokens + p->tok0) * row,
                       (const unsigned char *)*out + q * p->n_tokens * row, p->n_tokens * row);
        }
        if (v->http == 200) {
            v->tok_done += p->n_tokens;
            if (v->state != J_DONE) v->state = J_STREAMING;
            MET(s, (s->metrics.patches_encoded += p->n_rows, s->metrics.tokens_out += p->n_tokens));
        }
    } else if (http != 200 && v->http == 200) {
        v->http = http;
        snprintf(v->message, sizeof v->message, "%s", msg);
    }
    p->state = J_DONE;
    p->http = http;
    s->done_seq++; /* watches and streamed answers may be ready now */
    pthread_cond_broadcast(&s->done_cv);
}

static void encode_batch(srv_state *s, srv_job **jobs, size_t n, size_t rows) {
    const srv_opts spec = jobs[0]->spec;
    qvl_item *items = calloc(n, sizeof *items);
    void **outs = calloc(n, sizeof *outs);
    int http_all = 200;
    char msg[512] = "";
    qvl_plan *plan = NULL;
    qvl_error err;
    if (!items || !outs) {
        http_all = 500;
        snprintf(msg, sizeof msg, "out of memory");
    }
    for (size_t i = 0; http_all == 200 && i < n; i++) {
        qvl_item_default(&items[i]);
        items[i].kind = QVL_ITEM_ROWS;
        items[i].label = "item"; /* not "item <index in the batch>": dropped from its messages (unlabeled) */
        items[i].rows = jobs[i]->rows;
        items[i].grid = jobs[i]->grid;
        outs[i] = malloc(jobs[i]->out_bytes ? jobs[i]->out_bytes : 1);
        if (!outs[i]) {
            http_all = 500;
            snprintf(msg, sizeof msg, "out of memory for %zu output bytes", jobs[i]->out_bytes);
        }
    }
    qvl_plan_params pl;
    plan_params(s, &spec, &pl);
    /* one pass for the batch; a lone item above the budget in passes within it where it is a video (the plan
     * encodes a video in pieces of whole temporal patches: the same bits, scratch set by the budget) */
    pl.max_batch_rows = rows > s->cfg.lim.max_batch_patches ? s->cfg.lim.max_batch_patches : rows;
    if (http_all == 200 && qvl_plan_create(s->ctx, items, n, &pl, &plan, &err) != QVL_OK) {
        http_all = 500;
        snprintf(msg, sizeof msg, "%s", err.message);
    }
    double t0 = srv_now();
    if (http_all == 200) {
        batch b = {s, jobs, n};
        qvl_ctx_uncancel(s->ctx);
        qvl_ctx_set_cancel_fn(s->ctx, batch_cancel, &b);
        qvl_plan_encode(s->ctx, plan, outs, &err);
        qvl_ctx_set_cancel_fn(s->ctx, NULL, NULL);
    }
    double dt = srv_now() - t0;
    pthread_mutex_lock(&s->mu);
    MET(s, s->metrics.batches++);
    pthread_mutex_unlock(&s->mu);
    srv_hist_add(&s->metrics, &s->metrics.encode, dt);
    srv_hist_add(&s->metrics, &s->metrics.batch_items, (double)n);
    srv_hist_add(&s->metrics, &s->metrics.batch_patches, (double)rows);
    pthread_mutex_lock(&s->mu);
    if (dt > 0) {
        double r = (double)rows / dt;
        s->ewma_patches_per_s = s->ewma_patches_per_s > 0 ? 0.8 * s->ewma_patches_per_s + 0.2 * r : r;
    }
    for (size_t i = 0; i < n; i++) {
        srv_job *j = jobs[i];
        int http = http_all;
        const char *m = msg;
        qvl_item_info info;
        if (http == 200) {
            qvl_plan_item(plan, i, &info);
            if (info.status != QVL_OK) {
                http = info.status == QVL_ERR_CANCELLED ? 503 : srv_http_of_status(info.status);
                m = unlabeled(info.message); /* a 503 is counted per request, by the HTTP layer */
            }
        }
        if (j->parent) { /* a piece of a streamed video */
            piece_done(s, j, http, m, &outs[i]);
            continue;
        }
        if (http == 200) {
            j->out = outs[i];
            outs[i] = NULL;
            MET(s, (s->metrics.items_encoded++, s->metrics.patches_encoded += j->n_rows,
                    s->metrics.tokens_out += j->n_tokens));
            if (s->cache) put_enqueue(s, j); /* written by the writer thread: the next batch does not wait for it */
        }
        qvl_plan_free(j->pre); /* the rows are no longer needed */
        j->pre = NULL;
        free(j->rows_own);
        j->rows_own = NULL;
        j->rows = NULL;
        job_done(s, j, http, m, 0);
    }
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; outs && i < n; i++) free(outs[i]);
    free(outs);
    free(items);
    qvl_plan_free(plan);
}

static void *batcher_main(void *arg) {
    srv_state *s = arg;
    const srv_limits *L = &s->cfg.lim;
    srv_job **jobs = s->batch_jobs;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->enc_head && !(s->stop && !s->prep_head && !s->prep_items)) pthread_cond_wait(&s->enc_cv, &s->mu);
        if (!s->enc_head) break;
        /* The encoder was idle: when the batch would be small and more items are being preprocessed, wait for
         * them, up to max_wait_us in all. */
        if (L->max_wait_us > 0 && s->enc_patches < L->min_batch_patches && s->prep_items > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            long ns = ts.tv_nsec + (long)(L->max_wait_us % 1000000) * 1000;
            ts.tv_sec += L->max_wait_us / 1000000 + ns / 1000000000;
            ts.tv_nsec = ns % 1000000000;
            while (s->enc_patches < L->min_batch_patches && s->prep_items > 0 && !s->stop)
                if (pthread_cond_timedwait(&s->enc_cv, &s->mu, &ts) == ETIMEDOUT) break;
        }
        size_t n = 0, rows = 0;
        double now = srv_now();
        srv_opts spec = s->enc_head->spec;
        for (srv_job **p = &s->enc_head, *prev = NULL; *p && n < L->max_batch_items;) {
            srv_job *j = *p;
            int expired = !job_live(j, now);
            int take = expired || (same_spec(&j->spec, &spec) &&
                                   (n == 0 || rows + j->n_rows <= L->max_batch_patches));
            if (!take) {
                if (same_spec(&j->spec, &spec)) break; /* FIFO within a spec: nothing jumps the queue */
                prev = j;
                p = &j->next;
                continue;
            }
            *p = j->next;
            if (s->enc_tail == j) s->enc_tail = prev;
            j->next = NULL;
            s->enc_items--;
            s->enc_patches -= j->n_rows;
            if (expired) { /* counted per request by the HTTP layer, as the worker's drop is */
                if (j->parent) piece_done(s, j, 503, "the request's deadline passed in the queue", NULL);
                else job_done(s, j, 503, "the request's deadline passed in the queue", 0);
                continue;
            }
            srv_hist_add(&s->metrics, &s->metrics.queue_wait, now - j->t_queued);
            j->state = J_ENCODING;
            jobs[n++] = j;
            rows += j->n_rows;
            if (rows >= L->max_batch_patches) break; /* also: an oversized item runs alone */
        }
        if (!n) continue;
        pthread_mutex_unlock(&s->mu);
        encode_batch(s, jobs, n, rows);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- admission ---- */

static size_t estimate_patches(const srv_state *s, const srv_job *j) {
    return srv_estimate_patches(&s->pp, s->cfg.lim.max_item_patches, j->media, j->data, j->size, NULL);
}

static int retry_after(const srv_state *s) {
    double r = s->ewma_patches_per_s > 0 ? (double)(s->prep_patches + s->enc_patches) / s->ewma_patches_per_s : 1;
    int v = (int)ceil(r);
    return v < 1 ? 1 : v > 60 ? 60 : v;
}

int srv_submit(srv_state *s, srv_in_item *items, size_t n, const srv_opts *opts, double deadline, int accepted,
               int stream, srv_job **jobs, srv_err *e) {
    for (size_t i = 0; i < n; i++) jobs[i] = NULL;
    pthread_mutex_lock(&s->mu);
    int refuse = s->draining && !accepted ? 1 : !s->ready || s->stop ? 2 : 0;
    if (refuse) {
        MET(s, s->metrics.rejected_not_ready++);
        srv_err_set(e, 503, -1, "%s", refuse == 1 ? "the server is draining" : "the server is not ready");
        e->retry_after_s = retry_after(s);
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    pthread_mutex_unlock(&s->mu);
    qvl_plan_params pl;
    plan_params(s, opts, &pl);
    for (size_t i = 0; i < n; i++) {
        srv_job *j = calloc(1, sizeof *j);
        if (!j) {
            srv_err_set(e, 500, (int)i, "out of memory");
            goto fail;
        }
        jobs[i] = j;
        j->refs = 1;
        j->state = J_DONE;
        j->spec = *opts;
        j->deadline = deadline;
        j->media = items[i].media;
        if (items[i].path) { /* the HTTP layer reads path items into memory first (srv_read_path) */
            srv_err_set(e, 500, (int)i, "item %zu: a path item was not read", i);
            goto fail;
        }
        j->data = items[i].data; /* an image or a video: ENCODED, decoded from memory */
        j->size = items[i].size;
        items[i].data = NULL;
        qvl_item it;
        qvl_item_default(&it);
        it.kind = QVL_ITEM_ENCODED;
        it.data = j->data;
        it.size = j->size;
        qvl_error err;
        j->est_patches = estimate_patches(s, j);
        if (qvl_item_key(s->ctx, &it, &pl, NULL, j->key, &err) != QVL_OK) {
            srv_err_set(e, srv_http_of_status(err.status), (int)i, "item %zu: %s", i, err.message);
            goto fail;
        }
        if (s->cache) {
            qvl_cache_entry ent; /* counted in the cache's own hits / misses / corrupt (/metrics) */
            int hit = qvl_cache_get(s->cache, j->key, &ent, NULL) == QVL_OK && ent.result == QVL_CACHE_HIT;
            if (hit && strcmp(ent.dtype, srv_dtype_st(opts->dtype)) == 0) {
                j->entry_file = ent.file;
                j->out = (void *)ent.data;
                j->out_bytes = ent.nbytes;
                j->grid = ent.grid;
                j->n_planes = ent.n_planes, j->n_tokens = ent.n_tokens, j->out_cols = ent.cols;
                j->cached = 1;
                j->http = 200;
                continue;
            }
            if (hit) qvl_free(ent.file);
        }
    }
    /* Misses: join an identical item in flight, or queue for a worker. The queue bounds count what is admitted and
     * not yet encoded: items waiting for or in decoding by their header-estimated patches, items decoded by their
     * rows. A request is refused (503) when the items it would add overflow them, unless the queue is empty (a
     * request larger than the whole bound then runs alone, as an item larger than the batch budget does); one that
     * would add more items than the queue holds could never be queued (413). Cache hits, joins and an item repeated
     * in the request add nothing, so they count in neither and are answered even while the queue is full. */
    pthread_mutex_lock(&s->mu);
    size_t add_items = 0, add_patches = 0;
    for (size_t i = 0; i < n; i++) {
        srv_job *j = jobs[i];
        if (j->cached) continue;
        int dup = 0;
        for (size_t k = 0; k < i && !dup; k++) dup = !jobs[k]->cached && strcmp(jobs[k]->key, j->key) == 0;
        srv_job *f = s->flight[bucket_of(j->key)];
        while (f && strcmp(f->key, j->key)) f = f->flight_next;
        if (dup || f) continue;
        add_items++;
        add_patches += j->est_patches;
    }
    if (add_items > s->cfg.lim.max_queue_items) { /* no use retrying */
        srv_err_set(e, 413, -1, "%zu items to queue, more than the queue holds (%zu)", add_items,
                    s->cfg.lim.max_queue_items);
        pthread_mutex_unlock(&s->mu);
        goto fail;
    }
    const size_t q_items = s->prep_items + s->enc_items, q_patches = s->prep_patches + s->enc_patches;
    if (add_items && q_items && (q_items + add_items > s->cfg.lim.max_queue_items ||
                                 q_patches + add_patches > s->cfg.lim.max_queue_patches)) {
        MET(s, s->metrics.rejected_queue_full++);
        srv_err_set(e, 503, -1, "the queue is full (%zu items, %zu patches queued; this request adds %zu, ~%zu)",
                    q_items, q_patches, add_items, add_patches);
        e->retry_after_s = retry_after(s);
        pthread_mutex_unlock(&s->mu);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        srv_job *j = jobs[i];
        if (j->cached) continue;
        unsigned b = bucket_of(j->key);
        srv_job *f = s->flight[b];
        while (f && strcmp(f->key, j->key)) f = f->flight_next;
        if (f) {
            f->refs++;
            if (!(stream && n == 1)) f->can_stream = 0; /* a waiter that takes the output whole: never a ring */
            if (deadline > f->deadline) f->deadline = deadline;
            MET(s, s->metrics.single_flight_joins++);
            job_free(j);
            jobs[i] = f;
            continue;
        }
        j->refs = 2; /* the request and the pipeline */
        j->can_stream = stream && n == 1;
        j->state = J_PREP_QUEUED;
        j->flight_next = s->flight[b];
        s->flight[b] = j;
        s->inflight_jobs++;
        if (s->prep_tail) s->prep_tail->next = j;
        else s->prep_head = j;
        s->prep_tail = j;
        s->prep_items++;
        s->prep_patches += j->est_patches;
        pthread_cond_signal(&s->prep_cv);
    }
    s->done_seq++;
    pthread_mutex_unlock(&s->mu);
    return 0;
fail:
    for (size_t i = 0; i < n; i++) {
        job_free(jobs[i]);
        jobs[i] = NULL;
    }
    return -1;
}

int srv_wait(srv_state *s, srv_job **jobs, size_t n, double deadline) {
    pthread_mutex_lock(&s->mu);
    for (;;) {
        size_t done = 0;
        for (size_t i = 0; i < n; i++) done += jobs[i]->state == J_DONE;
        if (done == n) break;
        double left = deadline - srv_now();
        if (left <= 0) {
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
        cond_wait_s(&s->done_cv, &s->mu, left < 0.5 ? left : 0.5);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_result_of(srv_state *s, const srv_job *j, srv_result *r) {
    pthread_mutex_lock(&s->mu);
    r->http = j->http;
    r->message = j->message;
    r->key = j->key;
    r->grid = j->grid;
    r->n_tokens = j->n_tokens;
    r->out_cols = j->out_cols;
    r->n_planes = j->n_planes;
    r->out_bytes = j->out_bytes;
    r->out = j->out;
    r->cached = j->cached;
    r->streamed = j->streamed;
    pthread_mutex_unlock(&s->mu);
}

void srv_release(srv_state *s, srv_job **jobs, size_t n) {
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++)
        if (jobs[i]) job_unref(s, jobs[i]);
    pthread_mutex_unlock(&s->mu);
}

/* ---- streamed answers ---- */

/* Under mu: the bytes of a streamed video's output encoded so far (one plane: its token rows in order). */
static size_t stream_end_bytes(const srv_job *j) {
    return j->tok_done * j->out_cols * srv_dtype_size(j->spec.dtype);
}

/* Under mu: whether a reader at pos has something to do: bytes there, the job's end or failure, the flush. */
static int stream_ready(const srv_state *s, const srv_job *j, size_t pos) {
    return s->streams_stopped || j->state == J_DONE || j->http != 200 || pos < stream_end_bytes(j);
}

/* Under mu: a job a watch waits for is ready: done, or (`stream`) streamed with its first piece encoded. */
static int job_ready(const srv_job *j, int stream) {
    return j->state == J_DONE || (stream && j->streamed && j->state == J_STREAMING);
}

int srv_stream_claim(srv_state *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    const int r = j->streamed && (j->state == J_STREAMING || j->state == J_DONE) ? 1 : j->state == J_DONE ? 0 : -1;
    if (r == 1) j->answering = 1;
    pthread_mutex_unlock(&s->mu);
    return r;
}

long srv_stream_read(srv_state *s, srv_job *j, size_t pos, void *buf, size_t max) {
    pthread_mutex_lock(&s->mu);
    const size_t end = j->state == J_DONE && j->http == 200 ? j->out_bytes : stream_end_bytes(j);
    const unsigned char *src = NULL;
    long r;
    if (s->streams_stopped || j->http != 200) {
        r = -1;
    } else if (pos >= j->out_bytes) {
        r = -2;
    } else if (pos >= end) {
        r = 0;
    } else if (j->ring) { /* the pieces read past are freed: the worker may go on */
        while (j->chunks && pos >= j->chunk_pos + j->chunks->bytes) {
            srv_chunk *c = j->chunks;
            j->chunks = c->next;
            if (!j->chunks) j->chunks_tail = NULL;
            j->chunk_pos += c->bytes;
            j->n_chunks--;
            free(c->data);
            free(c);
            pthread_cond_broadcast(&s->done_cv);
        }
        const size_t n = j->chunks && pos >= j->chunk_pos ? j->chunk_pos + j->chunks->bytes - pos : 0;
        src = n ? (const unsigned char *)j->chunks->data + (pos - j->chunk_pos) : NULL;
        r = (long)(n < max ? n : max);
        if (!n) r = -1; /* read out of order: cannot be */
    } else {
        src = (const unsigned char *)j->out + pos;
        r = (long)(end - pos < max ? end - pos : max);
    }
    pthread_mutex_unlock(&s->mu);
    if (r > 0) memcpy(buf, src, (size_t)r); /* only this reader frees what it reads from */
    return r;
}

/* Under mu: take w off s->wakes. */
static void waiter_unlist(srv_state *s, srv_stream_waiter *w) {
    for (srv_stream_waiter **p = &s->wakes; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->next = NULL;
    w->listed = 0;
}

int srv_stream_wait(srv_state *s, srv_stream_waiter *w) {
    pthread_mutex_lock(&s->mu);
    const int ready = stream_ready(s, w->job, w->pos);
    if (ready && w->listed) waiter_unlist(s, w);
    if (!ready && !w->listed) { /* (listed already: a wake still to come, now for this pos) */
        w->next = s->wakes;
        s->wakes = w;
        w->listed = 1;
        s->done_seq++;
        pthread_cond_broadcast(&s->done_cv); /* the notifier looks at it */
    }
    pthread_mutex_unlock(&s->mu);
    return ready;
}

void srv_stream_forget(srv_state *s, srv_stream_waiter *w) {
    pthread_mutex_lock(&s->mu);
    while (s->firing) pthread_cond_wait(&s->done_cv, &s->mu); /* not freed while the notifier holds it */
    if (w->listed) waiter_unlist(s, w);
    pthread_mutex_unlock(&s->mu);
}

void srv_stream_flush(srv_state *s) {
    pthread_mutex_lock(&s->mu);
    s->streams_stopped = 1;
    while (s->firing) pthread_cond_wait(&s->done_cv, &s->mu);
    for (;;) { /* one at a time: none is added meanwhile (each is ready now) */
        srv_stream_waiter *w = s->wakes;
        if (!w) break;
        waiter_unlist(s, w);
        void (*fn)(void *) = w->wake;
        void *user = w->user;
        pthread_mutex_unlock(&s->mu);
        fn(user);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- watches: requests that wait without a thread ----
 * The notifier thread fires each watch once, outside mu: when all its jobs are done, or when its deadline passes
 * (timed_out = 1). job_done and srv_watch_add bump done_seq and broadcast done_cv, so a change made while the
 * notifier was firing callbacks is seen by the scan before it waits again. */

int srv_watch_add(srv_state *s, srv_watch *w) {
    pthread_mutex_lock(&s->mu);
    if (!s->notifier_started || s->stop) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    w->next = s->watches;
    s->watches = w;
    s->done_seq++;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void fire_watches(srv_watch *f) {
    while (f) {
        srv_watch *next = f->next; /* f may be freed by its callback */
        f->next = NULL;
        f->fn(f->user, f->timed_out);
        f = next;
    }
}

void srv_watch_flush(srv_state *s) {
    pthread_mutex_lock(&s->mu);
    while (s->firing) pthread_cond_wait(&s->done_cv, &s->mu);
    srv_watch *f = s->watches;
    s->watches = NULL;
    for (srv_watch *w = f; w; w = w->next) w->timed_out = 1;
    pthread_mutex_unlock(&s->mu);
    fire_watches(f);
}

static void *notifier_main(void *arg) {
    srv_state *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        unsigned long seq = s->done_seq;
        double now = srv_now(), next = now + 1.0;
        srv_watch *fire = NULL;
        for (srv_watch **p = &s->watches; *p;) {
            srv_watch *w = *p;
            size_t done = 0;
            for (size_t i = 0; i < w->n; i++) done += job_ready(w->jobs[i], w->stream);
            if (done == w->n || now >= w->deadline) {
                w->timed_out = done != w->n;
                *p = w->next;
                w->next = fire;
                fire = w;
                continue;
            }
            if (w->deadline < next) next = w->deadline;
            p = &w->next;
        }
        /* streamed answers waiting for more that have it (a batch at a time) */
        enum { WAKES = 64 };
        void (*wfn[WAKES])(void *);
        void *wuser[WAKES];
        size_t nw = 0;
        for (srv_stream_waiter **p = &s->wakes; *p && nw < WAKES;) {
            srv_stream_waiter *w = *p;
            if (!stream_ready(s, w->job, w->pos)) {
                p = &w->next;
                continue;
            }
            *p = w->next;
            w->next = NULL;
            w->listed = 0;
            wfn[nw] = w->wake, wuser[nw] = w->user, nw++;
        }
        if (fire || nw) {
            s->firing = 1;
            pthread_mutex_unlock(&s->mu);
            srv_test_hold("QVL_SERVE_TEST_FIRE_MS");
            fire_watches(fire);
            for (size_t i = 0; i < nw; i++) wfn[i](wuser[i]);
            pthread_mutex_lock(&s->mu);
            s->firing = 0;
            pthread_cond_broadcast(&s->done_cv); /* a flush waiting for them */
            continue;
        }
        if (seq != s->done_seq) continue;
        cond_wait_s(&s->done_cv, &s->mu, next - now);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- start, warm-up, info ---- */

static char *prep_json(const srv_state *s) {
    static const char *resize_names[] = {"torchvision", "pil", "pil-legacy"};
    const qvl_preprocess_params *p = &s->pp;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "resize", resize_names[p->resize <= 2 ? p->resize : 0]);
    cJSON_AddNumberToObject(o, "min_pixels", (double)p->min_pixels);
    cJSON_AddNumberToObject(o, "max_pixels", (double)p->max_pixels);
    cJSON_AddNumberToObject(o, "video_min_pixels", (double)p->video_min_pixels);
    cJSON_AddNumberToObject(o, "video_max_pixels", (double)p->video_max_pixels);
    cJSON_AddBoolToObject(o, "cap_pixels_per_frame", p->cap_pixels_per_frame != 0);
    cJSON_AddNumberToObject(o, "max_video_tokens", p->max_video_tokens);
    cJSON_AddNumberToObject(o, "size_h", p->size_h);
    cJSON_AddNumberToObject(o, "size_w", p->size_w);
    cJSON_AddItemToObject(o, "image_mean", cJSON_CreateFloatArray(p->image_mean, 3));
    cJSON_AddItemToObject(o, "image_std", cJSON_CreateFloatArray(p->image_std, 3));
    cJSON_AddNumberToObject(o, "rescale_factor", p->rescale_factor);
    cJSON_AddNumberToObject(o, "patch", p->patch);
    cJSON_AddNumberToObject(o, "temporal_patch", p->temporal_patch);
    cJSON_AddNumberToObject(o, "merge", p->merge);
    cJSON_AddStringToObject(o, "alpha", s->dp.alpha == QVL_ALPHA_DROP ? "drop" : "white");
    cJSON_AddBoolToObject(o, "exif", s->dp.apply_exif);
    cJSON_AddNumberToObject(o, "video_fps", s->vp.fps);
    cJSON_AddNumberToObject(o, "video_num_frames", s->vp.num_frames);
    cJSON_AddNumberToObject(o, "video_min_frames", s->vp.min_frames);
    cJSON_AddNumberToObject(o, "video_max_frames", s->vp.max_frames);
    cJSON_AddNumberToObject(o, "video_default_fps", s->vp.default_fps);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return js;
}

/* One small image through the whole path (preprocess, encode), so the first request pays no first-touch costs. */
static int warm_up(srv_state *s, char *msg, size_t cap) {
    enum { W = 64, H = 64 };
    uint8_t *rgb = malloc((size_t)W * H * 3);
    if (!rgb) return -1;
    for (size_t i = 0; i < (size_t)W * H * 3; i++) rgb[i] = (uint8_t)(i * 7);
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_PIXELS;
    it.image.data = rgb;
    it.image.width = W;
    it.image.height = H;
    it.image.channels = 3;
    srv_opts o;
    srv_opts_default(&o);
    qvl_plan_params pl;
    plan_params(s, &o, &pl);
    qvl_plan *plan = NULL;
    qvl_error err;
    int rc = -1;
    if (qvl_plan_create(s->ctx, &it, 1, &pl, &plan, &err) == QVL_OK) {
        qvl_item_info info;
        qvl_plan_item(plan, 0, &info);
        if (info.status == QVL_ERR_LIMIT) { /* limits lowered below the warm-up image: serve without warming up */
            fprintf(stderr, "qvl serve: no warm-up: %s\n", info.message);
            qvl_plan_free(plan);
            free(rgb);
            return 0;
        }
        void *out = info.status == QVL_OK ? malloc(info.out_bytes) : NULL;
        if (out && qvl_plan_encode(s->ctx, plan, &out, &err) == QVL_OK) rc = 0;
        else snprintf(msg, cap, "warm-up failed: %s", info.status ? info.message : err.message);
        free(out);
    } else {
        snprintf(msg, cap, "warm-up failed: %s", err.message);
    }
    qvl_plan_free(plan);
    free(rgb);
    return rc;
}

srv_state *srv_create(const srv_config *cfg) {
    srv_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cfg = *cfg;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->prep_cv, NULL);
    pthread_cond_init(&s->enc_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    pthread_cond_init(&s->put_cv, NULL);
    srv_metrics_init(&s->metrics);
    return s;
}

int srv_load(srv_state *s, char *msg, size_t cap) {
    const srv_config *cfg = &s->cfg;
    qvl_error err;
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    lp.isa = cfg->isa;
    lp.precision = cfg->precision;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = cfg->threads;
    cp.limits = &cfg->qlim; /* the ceiling of every plan on the ctx (copied) */
    qvl_preprocess_params_default(&s->pp);
    qvl_video_params_default(&s->vp);
    qvl_decode_params_default(&s->dp);
    if (qvl_model_load(cfg->model_dir, &lp, &s->model, &err) != QVL_OK ||
        qvl_ctx_create(s->model, &cp, &s->ctx, &err) != QVL_OK ||
        qvl_model_fingerprint(s->model, NULL, s->fingerprint, &err) != QVL_OK ||
        qvl_preprocess_params_load(cfg->model_dir, &s->pp, &s->vp, &err) != QVL_OK) {
        snprintf(msg, cap, "%s", err.message);
        return -1;
    }
    qvl_model_get_info(s->model, &s->info);
    s->pp.n_threads = 1; /* each worker preprocesses one item on its own thread */
    s->dp.max_pixels = cfg->lim.max_pixels;
    s->vp.max_pixels = cfg->lim.max_pixels;
    s->prep_json = prep_json(s);
    if (cfg->cache_dir) {
        qvl_cache_params cpar;
        qvl_cache_params_default(&cpar);
        cpar.max_bytes = cfg->cache_size;
        cpar.vllm_links = cfg->vllm_links;
        qvl_error cerr;
        if (qvl_cache_open(cfg->cache_dir, &cpar, &s->cache, &cerr) != QVL_OK) {
            snprintf(msg, cap, "%s", cerr.message);
            return -1;
        }
    }
    if (warm_up(s, msg, cap)) return -1;
    /* the batcher's slots before any thread starts: a server that could not batch must not say it is ready */
    const size_t slots = cfg->lim.max_batch_items ? cfg->lim.max_batch_items : 1;
    if (slots > SIZE_MAX / sizeof *s->batch_jobs || !(s->batch_jobs = calloc(slots, sizeof *s->batch_jobs))) {
        snprintf(msg, cap, "out of memory for the batcher's %zu item slots (--max-batch-items)", slots);
        return -1;
    }
    s->n_workers = cfg->workers > 0 ? cfg->workers : 2;
    s->workers = calloc((size_t)s->n_workers, sizeof *s->workers);
    int started = 0;
    for (int i = 0; s->workers && i < s->n_workers; i++) {
        if (pthread_create(&s->workers[i], NULL, worker_main, s)) break;
        started++;
    }
    s->n_workers = started;
    if (s->cache) {
        if (pthread_create(&s->writer, NULL, writer_main, s)) {
            snprintf(msg, cap, "cannot start threads");
            return -1;
        }
        s->writer_started = 1;
    }
    if (!started || pthread_create(&s->batcher, NULL, batcher_main, s)) {
        snprintf(msg, cap, "cannot start threads");
        return -1;
    }
    s->batcher_started = 1;
    if (pthread_create(&s->notifier, NULL, notifier_main, s)) {
        snprintf(msg, cap, "cannot start threads");
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    s->notifier_started = 1;
    s->ready = 1;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int srv_loaded(srv_state *s) {
    pthread_mutex_lock(&s->mu);
    int r = s->ready;
    pthread_mutex_unlock(&s->mu);
    return r;
}

void srv_drain(srv_state *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
}

void srv_stop(srv_state *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    s->stop = 1;
    pthread_cond_broadcast(&s->prep_cv);
    pthread_cond_broadcast(&s->enc_cv);
    pthread_cond_broadcast(&s->done_cv);
    pthread_cond_broadcast(&s->put_cv);
    const int notifier = s->notifier_started;
    pthread_mutex_unlock(&s->mu);
    if (notifier) pthread_join(s->notifier, NULL); /* watches left are dropped: the HTTP side flushed them */
    for (int i = 0; i < s->n_workers; i++) pthread_join(s->workers[i], NULL);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->enc_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->batcher_started) pthread_join(s->batcher, NULL);
    if (s->writer_started) pthread_join(s->writer, NULL); /* after the batcher: no job is queued for it from now on */
    free(s->batch_jobs);
    free(s->workers);
    qvl_cache_close(s->cache);
    free(s->prep_json);
    qvl_ctx_free(s->ctx);
    qvl_model_free(s->model);
    srv_metrics_destroy(&s->metrics);
    pthread_cond_destroy(&s->prep_cv);
    pthread_cond_destroy(&s->enc_cv);
    pthread_cond_destroy(&s->done_cv);
    pthread_cond_destroy(&s->put_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int srv_ready(srv_state *s) {
    pthread_mutex_lock(&s->mu);
    int r = s->ready && !s->draining && s->prep_patches + s->enc_patches <= s->cfg.lim.max_queue_patches * 9 / 10 &&
            s->prep_items + s->enc_items < s->cfg.lim.max_queue_items; /* saturated: full, or nearly by patches */
    pthread_mutex_unlock(&s->mu);
    return r;
}

int srv_draining(srv_state *s) {
    pthread_mutex_lock(&s->mu);
    int r = s->draining;
    pthread_mutex_unlock(&s->mu);
    return r;
}

void srv_gauges_of(srv_state *s, srv_gauges *g) {
    memset(g, 0, sizeof *g);
    pthread_mutex_lock(&s->mu);
    g->queue_items = s->prep_items + s->enc_items;
    g->queue_patches = s->prep_patches + s->enc_patches; /* decoded rows, and the estimates of the rest */
    g->inflight = s->inflight_jobs;
    g->put_items = s->put_items;
    g->put_bytes = s->put_bytes;
    g->ready = s->ready && !s->draining;
    g->draining = s->draining;
    const int loaded = s->ready; /* set (under mu) only after every field below was */
    pthread_mutex_unlock(&s->mu);
    g->fingerprint = loaded ? s->fingerprint : "";
    g->family = loaded ? s->info.model_type : "";
    g->isa = loaded ? qvl_isa_name(s->info.isa) : "";
    if (loaded && s->cache) qvl_cache_get_stats(s->cache, &g->cache); /* counters in memory: no directory scan */
}

srv_metrics *srv_metrics_of(srv_state *s) { return &s->metrics; }
qvl_cache *srv_cache_of(srv_state *s) { return s->cache; }
const char *srv_prep_json(srv_state *s) { return s->prep_json ? s->prep_json : "{}"; }
const char *srv_fingerprint(srv_state *s) { return s->fingerprint; }
const srv_limits *srv_limits_of(srv_state *s) { return &s->cfg.lim; }
int srv_n_deepstack(srv_state *s) { return s->info.n_deepstack; }
int srv_out_hidden(srv_state *s) { return s->info.out_hidden; }

const char *srv_precision(srv_state *s) { return qvl_precision_name(s->info.precision); }

char *srv_info_json(srv_state *s) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const qvl_model_info *m = &s->info;
    cJSON_AddStringToObject(o, "qvl_version", qvl_version());
    cJSON_AddStringToObject(o, "model_type", m->model_type);
    cJSON_AddStringToObject(o, "fingerprint", s->fingerprint);
    cJSON_AddNumberToObject(o, "depth", m->depth);
    cJSON_AddNumberToObject(o, "hidden", m->hidden);
    cJSON_AddNumberToObject(o, "heads", m->heads);
    cJSON_AddNumberToObject(o, "out_hidden", m->out_hidden);
    cJSON_AddNumberToObject(o, "n_deepstack", m->n_deepstack);
    cJSON_AddNumberToObject(o, "patch", m->patch);
    cJSON_AddNumberToObject(o, "temporal_patch", m->temporal_patch);
    cJSON_AddNumberToObject(o, "merge", m->merge);
    cJSON_AddNumberToObject(o, "row_len", m->row_len);
    cJSON_AddStringToObject(o, "weight_dtype", qvl_dtype_name(m->weight_dtype));
    cJSON_AddStringToObject(o, "kernels", qvl_isa_name(m->isa));
    cJSON_AddStringToObject(o, "precision", srv_precision(s));
    cJSON_AddNumberToObject(o, "threads", qvl_ctx_threads(s->ctx));
    cJSON_AddNumberToObject(o, "workers", s->n_workers);
    cJSON *pp = cJSON_Parse(srv_prep_json(s));
    if (pp) cJSON_AddItemToObject(o, "preprocessing", pp);
    const srv_limits *L = &s->cfg.lim;
    cJSON *l = cJSON_AddObjectToObject(o, "limits");
    if (l) {
        cJSON_AddNumberToObject(l, "max_body_bytes", (double)L->max_body_bytes);
        cJSON_AddNumberToObject(l, "max_items", (double)L->max_items);
        cJSON_AddNumberToObject(l, "max_item_bytes", (double)L->max_item_bytes);
        cJSON_AddNumberToObject(l, "max_pixels", (double)L->max_pixels);
        cJSON_AddNumberToObject(l, "max_item_patches", (double)L->max_item_patches);
        cJSON_AddNumberToObject(l, "max_queue_patches", (double)L->max_queue_patches);
        cJSON_AddNumberToObject(l, "max_queue_items", (double)L->max_queue_items);
        cJSON_AddNumberToObject(l, "max_batch_patches", (double)L->max_batch_patches);
        cJSON_AddNumberToObject(l, "max_batch_items", (double)L->max_batch_items);
        cJSON_AddNumberToObject(l, "max_wait_us", L->max_wait_us);
        cJSON_AddNumberToObject(l, "max_cache_writes", (double)L->max_put_items);
        cJSON_AddNumberToObject(l, "max_cache_write_bytes", (double)L->max_put_bytes);
        cJSON_AddNumberToObject(l, "timeout_ms", L->timeout_ms);
        const qvl_limits *q = &s->cfg.qlim; /* the library's (--limit NAME=N) */
        cJSON *ql = cJSON_AddObjectToObject(l, "library");
        if (ql) {
#define LIMIT_JSON(name, bits) cJSON_AddNumberToObject(ql, #name, (double)q->name);
            QVL_LIMIT_FIELDS(LIMIT_JSON)
#undef LIMIT_JSON
        }
    }
    cJSON_AddBoolToObject(o, "cache", s->cache != NULL);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return js;
}
