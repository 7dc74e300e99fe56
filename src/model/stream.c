/* stream.c — one item encoded as a stream (qvl_encode_stream): a video decoded and preprocessed on a thread of the
 * call (the reader, through plan_create_hooked) into a ring of two pieces of whole temporal patches, while the
 * calling thread encodes each piece as soon as its rows are complete, tells it, and hands its ring space back.
 * qvl_preprocess_stream is the same stream without the encode: each piece's rows are told as they are.
 *
 * The reader places a complete temporal patch t in ring slot t mod C (C: two pieces, or one where the video is one
 * piece) when t < released + C, `released` being the patches the encoder is done with (a multiple of the piece), so
 * that a piece's rows are contiguous in the ring. A patch without room stays in video_rows, as its resized frames,
 * and the reader waits for room before the next frame only while the encoder can go on without it (the next piece
 * is all placed): frames come in order from one decoder, and with several decoders each stretch in order, so a
 * patch the encoder needs is never held behind a wait. */
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "core/error.h"
#include "core/limits.h"
#include "core/params.h"
#include "model/model.h"
#include "model/plan.h"
#include "model/tower.h"

enum { STREAM_ROWS = 4096, STREAM_POLL_MS = 20 };

typedef struct stream {
    qvl_ctx *ctx;
    qvl_plan_params pp;      /* taken */
    const qvl_item *item;
    char label[256];         /* names the item, as a plan names it */
    qvl_stream_fn fn;        /* qvl_encode_stream's; NULL: rows told (qvl_preprocess_stream) */
    qvl_rows_fn rows_fn;
    void *user;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* any change below */
    atomic_int stop;         /* the encoder is done or gave up: the reader stops */
    /* set by the reader (under mu) */
    int begun, done;
    int resampled;           /* 1: sampled again otherwise; 2: a read done anew gave other rows for a patch placed */
    qvl_plan *plan;          /* the reader's plan of the item, once done */
    qvl_status read_status;  /* plan_create_hooked's own (not the item's) */
    qvl_error read_err;
    /* the item as begun: copied, so that a second begin (sampled again) changes nothing the encoder reads */
    qvl_item_info info;
    int64_t *indices;
    double *timestamps;
    size_t per_t, row_len;
    size_t mm;               /* rows a merged token */
    int32_t piece, n_t;      /* temporal patches in a piece; in the item */
    long cap_t;              /* ring slots (temporal patches) */
    float *ring;
    float *spare;            /* one patch's rows: where rows the ring has already go when handed over again */
    long *slot_t;            /* [cap_t] the patch a slot holds, -1 none */
    uint64_t *hash_t;        /* [n_t] each placed patch's rows, hashed: rows handed over again must be the same */
    void *out;               /* one piece's output */
    out_spec o;              /* its shape */
    long released;           /* patches [0, released) encoded and handed back */
} stream;

/* Wait on cv (mu held) for a change, or STREAM_POLL_MS (the monotonic clock: cv is made on it). */
static void poll_wait(stream *st) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += STREAM_POLL_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&st->cv, &st->mu, &ts);
}

/* ---- the reader's side (plan_hook), on the reader thread ------------------------------------------------------ */

/* Where patch t's rows go: its ring slot when there is room; the spare when the ring has them already (frames handed
 * over again after a read that is done again with the same sampling); NULL when there is no room yet. */
static float *ring_where(void *user, long t) {
    stream *st = user;
    pthread_mutex_lock(&st->mu);
    const int have = t < st->released || st->slot_t[t % st->cap_t] == t, room = t < st->released + st->cap_t;
    pthread_mutex_unlock(&st->mu);
    return have ? st->spare : room ? st->ring + (size_t)(t % st->cap_t) * st->per_t * st->row_len : NULL;
}

/* Patch t's rows are written: into the ring (the encoder may take them), or into the spare, being rows the ring had
 * already, handed over again by a read done anew; those must be the rows placed before (a skipping read's frames
 * are the sequential read's, or the read is not used: video.c), else the stream is taken as sampled again. */
static void ring_placed(void *user, long t) {
    stream *st = user;
    pthread_mutex_lock(&st->mu);
    const int again = t < st->released || st->slot_t[t % st->cap_t] == t;
    pthread_mutex_unlock(&st->mu);
    const size_t bytes = st->per_t * st->row_len * sizeof(float);
    const uint64_t h = XXH3_64bits(again ? st->spare : st->ring + (size_t)(t % st->cap_t) * st->per_t * st->row_len,
                                   bytes);
    pthread_mutex_lock(&st->mu);
    if (!again) st->hash_t[t] = h, st->slot_t[t % st->cap_t] = t;
    else if (h != st->hash_t[t]) st->resampled = 2;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

static int stream_stopped(void *user) {
    stream *st = user;
    return atomic_load(&st->stop) || (st->ctx && ctx_cancel_flag(st->ctx));
}

/* The sampling of a second begin is the first's (a read done again after a skipping read gave up): the frames
 * handed over so far were the same frames. */
static int same_sampling(const stream *st, const qvl_item_info *a) {
    const qvl_item_info *b = &st->info;
    return a->grid.t == b->grid.t && a->grid.h == b->grid.h && a->grid.w == b->grid.w && a->n_frames == b->n_frames &&
           a->total_frames == b->total_frames && a->source_fps == b->source_fps && a->src_width == b->src_width &&
           a->src_height == b->src_height && a->n_timestamps == b->n_timestamps &&
           memcmp(a->frame_indices, st->indices, (size_t)a->n_frames * sizeof *st->indices) == 0 &&
           memcmp(a->timestamps, st->timestamps, a->n_timestamps * sizeof *st->timestamps) == 0;
}

static qvl_status hook_begin(void *user, const qvl_item_info *info, video_rows *vr, qvl_error *err) {
    stream *st = user;
    const rows_place place = {ring_where, ring_placed, st};
    if (st->begun) { /* st->info is the reader's own until the begin is published: read without the lock */
        if (same_sampling(st, info)) { /* the same frames again: the ring keeps what it has, the rest comes */
            video_rows_set_place(vr, &place);
            return QVL_OK;
        }
        /* sampled otherwise (the stream ended before its header's count): what the encoder has is not this
         * sampling's; the call reads it again whole, or fails if parts were told */
        pthread_mutex_lock(&st->mu);
        st->resampled = 1;
        pthread_mutex_unlock(&st->mu);
        return err_fail(err, QVL_ERR_CANCELLED, "%s: sampled again", st->label);
    }
    const qvl_preprocess_params *p = vr->p;
    const size_t cap = st->pp.max_batch_rows;
    st->per_t = (size_t)info->grid.h * (size_t)info->grid.w;
    st->row_len = (size_t)3 * p->temporal_patch * p->patch * p->patch;
    st->n_t = info->grid.t;
    if (!st->fn) st->mm = (size_t)p->merge * (size_t)p->merge; /* no model: the preprocessing's merge */
    const size_t fit = cap / st->per_t;
    st->piece = fit < 1 ? 1 : fit > (size_t)st->n_t ? st->n_t : (int32_t)fit;
    st->cap_t = st->piece < st->n_t ? 2L * st->piece : st->piece;
    size_t ring_bytes, out_bytes;
    const size_t piece_tok = (size_t)st->piece * st->per_t / st->mm;
    if (size_mul_overflow((size_t)st->cap_t * st->per_t, st->row_len * sizeof(float), &ring_bytes) ||
        size_mul_overflow(piece_tok, st->o.cols * st->o.planes * st->o.esize, &out_bytes))
        return err_fail(err, QVL_ERR_LIMIT, "%s: a piece of %d temporal patches overflows", st->label, st->piece);
    st->ring = malloc(ring_bytes);
    st->spare = malloc(st->per_t * st->row_len * sizeof(float));
    st->slot_t = malloc((size_t)st->cap_t * sizeof *st->slot_t);
    st->hash_t = malloc((size_t)st->n_t * sizeof *st->hash_t);
    st->out = st->fn ? malloc(out_bytes) : NULL;
    st->indices = malloc((info->n_frames > 0 ? (size_t)info->n_frames : 1) * sizeof *st->indices);
    st->timestamps = malloc((info->n_timestamps ? info->n_timestamps : 1) * sizeof *st->timestamps);
    if (!st->ring || !st->spare || !st->slot_t || !st->hash_t || (st->fn && !st->out) || !st->indices ||
        !st->timestamps)
        return err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes for a stream's rows and output",
                        ring_bytes + (st->fn ? out_bytes : 0));
    for (long i = 0; i < st->cap_t; i++) st->slot_t[i] = -1;
    if (info->n_frames > 0) memcpy(st->indices, info->frame_indices, (size_t)info->n_frames * sizeof *st->indices);
    if (info->n_timestamps) memcpy(st->timestamps, info->timestamps, info->n_timestamps * sizeof *st->timestamps);
    video_rows_set_place(vr, &place);
    pthread_mutex_lock(&st->mu);
    st->info = *info;
    st->info.frame_indices = st->indices;
    st->info.timestamps = st->timestamps;
    st->info.message = "";
    st->begun = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return QVL_OK;
}

/* Whether the next piece's rows are all placed (mu held): the encoder can go on without the reader. */
static int next_piece_ready(const stream *st) {
    const long t0 = st->released, t1 = t0 + st->piece < st->n_t ? t0 + st->piece : st->n_t;
    for (long t = t0; t < t1; t++)
        if (st->slot_t[t % st->cap_t] != t) return 0;
    return 1;
}

static int piece_or_resampled(const stream *st) { return st->resampled || next_piece_ready(st); }

static qvl_status hook_frame(void *user, video_rows *vr, int last, qvl_error *err) {
    stream *st = user;
    for (;;) {
        const size_t kept = video_rows_place(vr);
        if (!kept) return QVL_OK;
        pthread_mutex_lock(&st->mu);
        /* wait for room while the encoder can make it; at the end every patch is in, and the encoder always can */
        const int wait = !atomic_load(&st->stop) && (last || next_piece_ready(st));
        if (wait) {
            poll_wait(st);
        }
        const int stop = atomic_load(&st->stop);
        pthread_mutex_unlock(&st->mu);
        if (stop) return err_fail(err, QVL_ERR_CANCELLED, "not decoded: the stream stopped");
        if (!wait) return QVL_OK;
    }
}

static void *reader_main(void *arg) {
    stream *st = arg;
    const plan_hook hook = {hook_begin, hook_frame, stream_stopped, st};
    qvl_plan *plan = NULL;
    qvl_error e;
    err_clear(&e);
    const qvl_status s = plan_create_hooked(st->ctx, st->item, 1, &st->pp, &hook, &plan, &e);
    pthread_mutex_lock(&st->mu);
    st->plan = plan;
    st->read_status = s;
    st->read_err = e;
    st->done = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* ---- the encoder's side, on the calling thread ---------------------------------------------------------------- */

/* The caller's stop: the ctx's cancel flag or cancel_fn, the params' cancel_fn. */
static int caller_stopped(stream *st) {
    return (st->ctx && ctx_cancelled(st->ctx)) || (st->pp.cancel_fn && st->pp.cancel_fn(st->pp.cancel_user));
}

/* Wait (mu held) until cond(st) or the reader is done, polling the caller's stop at once and every STREAM_POLL_MS;
 * 1 when the caller stopped. */
static int wait_for(stream *st, int (*cond)(const stream *)) {
    for (;;) { /* the caller's stop first, every time: a piece whose rows are ready already is not encoded after it */
        pthread_mutex_unlock(&st->mu);
        const int stopped = caller_stopped(st);
        pthread_mutex_lock(&st->mu);
        if (stopped) return 1;
        if (cond(st) || st->done) return 0;
        poll_wait(st);
    }
}

static int is_begun(const stream *st) { return st->begun; }

/* Tell a piece: its rows (qvl_preprocess_stream), or its rows encoded, checked finite and told. Nonzero: the
 * callback asked to stop. */
static qvl_status tell_piece(stream *st, int32_t t0, int32_t tn, size_t told, int *stop, qvl_error *err) {
    const size_t rows = (size_t)tn * st->per_t, n_tok = rows / st->mm;
    const float *piece_rows = st->ring + (size_t)(t0 % st->cap_t) * st->per_t * st->row_len;
    if (!st->fn) {
        const qvl_rows_chunk c = {(size_t)t0 * st->per_t, rows, told, n_tok, t0, tn, piece_rows, st->row_len};
        *stop = st->rows_fn(st->user, &st->info, &c);
        return QVL_OK;
    }
    const size_t row_bytes = st->o.cols * st->o.esize; /* a token's in one plane */
    const qvl_grid g = {tn, st->info.grid.h, st->info.grid.w};
    tower_sink k; /* the piece's own output: planes of n_tok tokens */
    out_sink(&st->o, st->out, n_tok, 0, 0, n_tok, &k);
    TRY(tower_encode(st->ctx, NULL, &piece_rows, rows, &g, 1, &k, 1, err));
    TRY(out_finite(&st->o, st->out, n_tok, 0, n_tok, told, err));
    const qvl_chunk c = {told, n_tok, t0, tn, st->out, n_tok * row_bytes, n_tok * row_bytes * st->o.planes};
    *stop = st->fn(st->user, &st->info, &c);
    return QVL_OK;
}

/* The pieces of a begun video, each as soon as its rows are placed; *told: tokens told; *ended: the reader was done
 * before the next piece's rows were in (QVL_OK returned: the reader's status says why). */
static qvl_status encode_pieces(stream *st, size_t *told, int *ended, qvl_error *err) {
    for (int32_t t0 = 0; t0 < st->n_t; t0 += st->piece) {
        const int32_t tn = st->n_t - t0 < st->piece ? st->n_t - t0 : st->piece;
        pthread_mutex_lock(&st->mu);
        const int stopped = wait_for(st, piece_or_resampled);
        const int ready = next_piece_ready(st), resampled = st->resampled;
        pthread_mutex_unlock(&st->mu);
        if (stopped) return err_fail(err, QVL_ERR_CANCELLED, "cancelled after %zu of its %zu tokens", *told,
                                     st->info.n_tokens);
        if (!ready || resampled) {
            *ended = 1;
            return QVL_OK;
        }
        int stop = 0;
        TRY(tell_piece(st, t0, tn, *told, &stop, err));
        *told += (size_t)tn * st->per_t / st->mm;
        pthread_mutex_lock(&st->mu);
        st->released = t0 + tn;
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&st->mu);
        if (stop && t0 + tn < st->n_t)
            return err_fail(err, QVL_ERR_CANCELLED, "stopped by the chunk callback after %zu of its %zu tokens", *told,
                            st->info.n_tokens);
        if (!stop && caller_stopped(st) && t0 + tn < st->n_t)
            return err_fail(err, QVL_ERR_CANCELLED, "cancelled after %zu of its %zu tokens", *told, st->info.n_tokens);
    }
    return QVL_OK;
}

/* An item not streamed (an image, rows, a video sampled again before anything was told): its plan encoded whole,
 * each final part told from the one buffer. */
typedef struct whole_tell {
    stream *st;
    qvl_plan *plan;
    const void *out;
    size_t es;
} whole_tell;

static int tell_whole(void *user, size_t item, size_t tok0, size_t n) {
    const whole_tell *w = user;
    qvl_item_info info; /* as planned, with its times (the encode's of the group told) */
    qvl_plan_item(w->plan, item, &info);
    info.status = QVL_OK, info.message = "";
    const size_t row = info.out_cols * w->es, plane = info.n_tokens * row;
    const size_t per_t = (size_t)info.grid.h * info.grid.w / w->st->mm;
    const qvl_chunk c = {tok0, n, (int32_t)(tok0 / per_t), (int32_t)(n / per_t), (const unsigned char *)w->out + tok0 * row,
                         plane, n * row * info.n_planes};
    return w->st->fn(w->st->user, &info, &c);
}

static qvl_status encode_whole(stream *st, qvl_plan *plan, qvl_error *err) {
    qvl_item_info info;
    qvl_plan_item(plan, 0, &info);
    if (info.status != QVL_OK) return err_fail(err, info.status, "%s", info.message);
    if (!st->fn) { /* its rows, as one part */
        const size_t row_len = plan_row_len(plan, 0);
        const qvl_rows_chunk c = {0, info.n_rows, 0, info.n_tokens, 0, info.grid.t, qvl_plan_rows(plan, 0), row_len};
        st->rows_fn(st->user, &info, &c);
        return QVL_OK;
    }
    void *out = malloc(info.out_bytes ? info.out_bytes : 1);
    if (!out) return err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %zu bytes for its output", st->label,
                              info.out_bytes);
    const whole_tell w = {st, plan, out, st->o.esize};
    void *const outs[1] = {out};
    const qvl_status s = qvl_plan_encode_chunks(st->ctx, plan, outs, tell_whole, (void *)&w, err);
    free(out);
    return s;
}

static void stream_free(stream *st) {
    qvl_plan_free(st->plan);
    free(st->ring);
    free(st->spare);
    free(st->slot_t);
    free(st->hash_t);
    free(st->out);
    free(st->indices);
    free(st->timestamps);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
}

/* After the reader is done: the call's status from what each side found. `s` is the encoder's, `e` its message,
 * `ended` whether the reader was done before the encoder had every piece, `told` the tokens told. */
static qvl_status stream_end(stream *st, qvl_status s, const qvl_error *e, int ended, size_t told, qvl_error *err) {
    if (st->read_status != QVL_OK) return err_fail(err, st->read_status, "%s", st->read_err.message);
    if (s != QVL_OK) return err_fail(err, s, "%s: %s", st->label, e->message); /* the encoder's (the reader stopped) */
    if (st->resampled && told == 0) { /* read again, without the hook: the plan holds the rows of the new sampling */
        qvl_plan_free(st->plan), st->plan = NULL;
        TRY(plan_create_hooked(st->ctx, st->item, 1, &st->pp, NULL, &st->plan, err));
        return encode_whole(st, st->plan, err);
    }
    const char *whole = st->fn ? "encode it whole (qvl_plan_encode)" : "plan it whole (qvl_plan_create)";
    if (st->resampled == 1)
        return err_fail(err, QVL_ERR_RESAMPLED, "%s: the stream ended before the frame count of its header after %zu of "
                        "its %zu tokens were told, and is sampled again over the frames it has: %s", st->label, told,
                        st->info.n_tokens, whole);
    if (st->resampled)
        return err_fail(err, QVL_ERR_RESAMPLED, "%s: read again after %zu of its %zu tokens were told, the stream gave "
                        "other frames: %s", st->label, told, st->info.n_tokens, whole);
    if (!st->begun) return encode_whole(st, st->plan, err); /* an item not streamed, or one that failed first */
    qvl_item_info info;
    qvl_plan_item(st->plan, 0, &info);
    if (info.status != QVL_OK) return err_fail(err, info.status, "%s", info.message); /* the reader's failure */
    if (ended) /* the reader read to the end well, and a piece's rows never came: a bug */
        return err_fail(err, QVL_ERR_INTERNAL, "%s: the stream's reader ended with %zu of its %zu tokens told",
                        st->label, told, st->info.n_tokens);
    return QVL_OK;
}

/* Both streams: `encode` (qvl_encode_stream: fn, a ctx required) or not (qvl_preprocess_stream: rows_fn, the ctx
 * optional); `name` the call's. */
static qvl_status stream_run(qvl_ctx *ctx, const qvl_item *item, const qvl_plan_params *params, int encode,
                             qvl_stream_fn fn, qvl_rows_fn rows_fn, void *user, const char *name, qvl_error *err) {
    err_clear(err);
    const char *null = encode && !ctx ? "ctx" : !item ? "item" : (encode ? !fn : !rows_fn) ? "fn" : NULL;
    if (null) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: %s is NULL", name, null);
    if (item->struct_size < offsetof(qvl_item, kind) + sizeof(qvl_item_kind))
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: item->struct_size is %zu: initialise it with qvl_item_default()",
                        name, item->struct_size);
    stream st;
    memset(&st, 0, sizeof st);
    qvl_plan_params_default(&st.pp);
    TRY(params_take(&st.pp, sizeof st.pp, params, "qvl_plan_params", err));
    if (!st.pp.max_batch_rows) st.pp.max_batch_rows = STREAM_ROWS;
    const qvl_model *m = ctx ? ctx_model(ctx) : NULL;
    out_spec_of(m, &st.pp, &st.o);
    if (m) st.mm = (size_t)m->cfg.merge * (size_t)m->cfg.merge; /* the preprocessing's too: a plan refuses another */
    qvl_item it; /* for its label only; the plan reads the caller's */
    qvl_item_default(&it);
    TRY(params_take(&it, sizeof it, item, "qvl_item", err));
    if (it.label && *it.label) snprintf(st.label, sizeof st.label, "%s", it.label);
    else if (it.kind == QVL_ITEM_PATH && it.path && *it.path) snprintf(st.label, sizeof st.label, "%s", it.path);
    else snprintf(st.label, sizeof st.label, "item 0");
    st.ctx = ctx, st.item = item, st.fn = fn, st.rows_fn = rows_fn, st.user = user;
    atomic_init(&st.stop, 0);
    pthread_mutex_init(&st.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t reader;
    if (pthread_create(&reader, NULL, reader_main, &st) != 0) {
        stream_free(&st);
        return err_fail(err, QVL_ERR_NOMEM, "%s: cannot start the reader thread", name);
    }
    pthread_mutex_lock(&st.mu);
    const int stopped = wait_for(&st, is_begun);
    const int begun = st.begun;
    pthread_mutex_unlock(&st.mu);
    qvl_status s = QVL_OK;
    size_t told = 0;
    int ended = 0;
    qvl_error e;
    err_clear(&e);
    if (stopped) s = err_fail(&e, QVL_ERR_CANCELLED, "not %s: cancelled", fn ? "encoded" : "preprocessed");
    else if (begun) s = encode_pieces(&st, &told, &ended, &e);
    if (s != QVL_OK || ended) { /* given up: the reader stops where it is (else it reads on to the stream's end) */
        atomic_store(&st.stop, 1);
        pthread_mutex_lock(&st.mu);
        pthread_cond_broadcast(&st.cv);
        pthread_mutex_unlock(&st.mu);
    }
    pthread_join(reader, NULL);
    s = stream_end(&st, s, &e, ended, told, err);
    stream_free(&st);
    return s;
}

qvl_status qvl_encode_stream(qvl_ctx *ctx, const qvl_item *item, const qvl_plan_params *params, qvl_stream_fn fn,
                             void *user, qvl_error *err) {
    return stream_run(ctx, item, params, 1, fn, NULL, user, "qvl_encode_stream", err);
}

qvl_status qvl_preprocess_stream(qvl_ctx *ctx, const qvl_item *item, const qvl_plan_params *params, qvl_rows_fn fn,
                                 void *user, qvl_error *err) {
    return stream_run(ctx, item, params, 0, NULL, fn, user, "qvl_preprocess_stream", err);
}
