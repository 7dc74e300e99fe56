/* serve_http.c — `qvl serve`: the HTTP layer on libmicrohttpd (routes, auth, body limits, responses) and the
 * process around it (options, signals, drain).
 *
 * libmicrohttpd polls every connection with epoll on a few internal threads (--http-threads, at most
 * --max-connections connections; at the limit it stops accepting, and a new connection waits in the listen backlog
 * until one closes). No thread waits for an encode: once a request's body is in and
 * its items are admitted (srv_submit: keys, cache hits, single flight, the queue bounds), its connection is
 * suspended (MHD_suspend_connection) and a watch handed to the service (srv_watch_add); the service's notifier
 * thread resumes it when every item is done or the request's deadline passes, and the access handler, called
 * again, answers it. Answers point at the items' outputs where they lie (MHD_create_response_from_iovec: the
 * safetensors or .npy header in a small buffer, then the encoder's or the cache entry's bytes), the jobs held until
 * libmicrohttpd is done with the response. SIGTERM / SIGINT drain: the listening socket is shut down
 * (MHD_quiesce_daemon, shutdown) and readiness drops, requests already accepted are finished and answered (a drain that runs
 * out of time answers the rest 503), then the daemon stops, the cache writes queued are finished within what is left
 * of the drain's time (srv_finish_puts; the rest abandoned) and the process exits 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "cli.h"
#include "serve.h"
#include "serve_batch.h"

typedef struct conn_ctx conn_ctx;

typedef struct server {
    srv_state *st;
    const char *api_key;
    int paths;              /* path items are on (--allowed-media-path) */
    srv_root root;          /* --allowed-media-path */
    pthread_mutex_t mu;
    int active;             /* requests between their first callback and their completion */
    conn_ctx *requests;     /* those requests (under mu): a drain looks at the ones still receiving a body */
    int draining;           /* set (under mu) when a drain starts: requests begun later are refused */
    int closing;            /* set (under mu) when the drain's end begins: no request suspends from then on */
    int suspending;         /* (under mu) requests between their suspend and their watch's registration */
    pthread_cond_t cv;      /* broadcast when suspending drops to 0 */
} server;

/* How long a drain waits for a request whose body stopped coming (libmicrohttpd 0.9.75 does not notice a client that
 * sent part of a body and its FIN in one burst before the connection timeout, 60 s). */
#define DRAIN_STALLED_S 2.0

struct conn_ctx {
    conn_ctx *prev, *next;  /* server.requests */
    double last_rx;         /* (under mu) when its headers or the last piece of its body came */
    int body_in;            /* (under mu) its body is all in, or it was answered on its headers */
    srv_buf body;
    size_t body_limit;      /* the body's bytes at most: --max-body, or the item limit for a raw image / video */
    int too_big;
    int route;              /* RT_*, decided from the headers */
    double t0;
    int endpoint;
    /* an encode request between its admission and its answer (the connection suspended meanwhile) */
    server *sv;
    struct MHD_Connection *conn;
    int accepted;           /* begun before a drain: still served while draining */
    int waiting;            /* suspended for its items: the next call answers */
    int timed_out;          /* set by on_items_done before it resumes the connection */
    int vllm, npy;
    int can_stream;         /* one item of one plane: a streamed video is answered as its pieces are encoded */
    srv_request_items req;
    srv_job **jobs;         /* req.n, referenced until answered (or handed to the response) */
    srv_result *res;
    srv_watch watch;
};

#ifdef QVL_SERVE_TEST_HOOKS
void srv_test_hold(const char *name) {
    const char *v = getenv(name);
    const long ms = v ? strtol(v, NULL, 10) : 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    if (ms > 0)
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
}
#endif

/* ---- responses ---- */

static enum MHD_Result send_buf(struct MHD_Connection *c, int code, const char *type, void *buf, size_t len,
                                const srv_err *e) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(buf);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (code == 503) {
        char v[32];
        int s = e && e->retry_after_s > 0 ? e->retry_after_s : 1;
        snprintf(v, sizeof v, "%d", s);
        MHD_add_response_header(r, "Retry-After", v);
        snprintf(v, sizeof v, "%d", s * 1000);
        MHD_add_response_header(r, "retry-after-ms", v);
    } else if (code >= 400 && code < 500) {
        MHD_add_response_header(r, "x-should-retry", "false");
    }
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int code, const char *type, const char *text) {
    char *s = strdup(text);
    if (!s) return MHD_NO;
    return send_buf(c, code, type, s, strlen(s), NULL);
}

static enum MHD_Result send_err(server *sv, conn_ctx *cc, struct MHD_Connection *c, const srv_err *e) {
    srv_metrics_request(srv_metrics_of(sv->st), cc->endpoint, e->http, srv_now() - cc->t0);
    char *js = srv_err_json(e);
    if (!js) return MHD_NO;
    return send_buf(c, e->http, "application/json", js, strlen(js), e);
}

static enum MHD_Result send_ok(server *sv, conn_ctx *cc, struct MHD_Connection *c, const char *type, void *buf,
                               size_t len) {
    srv_metrics_request(srv_metrics_of(sv->st), cc->endpoint, 200, srv_now() - cc->t0);
    return send_buf(c, 200, type, buf, len, NULL);
}

/* ---- encode ---- */

typedef struct query_ctx {
    srv_opts *o;
    srv_err *e;
    int bad;
} query_ctx;

static enum MHD_Result on_query(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    query_ctx *q = cls;
    if (!q->bad && srv_opt_set(q->o, key, value, q->e)) q->bad = 1;
    return MHD_YES;
}

/* A path item, read into memory as ENCODED bytes beneath --allowed-media-path (srv_read_path: by its name under the
 * root first, then opened without following a link, a regular file within the item limit and what is left of the
 * request's, *budget). 0 or -1 with e set. */
static int read_path(server *sv, srv_in_item *it, size_t i, size_t *budget, srv_err *e) {
    if (!sv->paths) {
        srv_err_set(e, 400, (int)i, "item %zu: 'path' items are off (start the server with --allowed-media-path)", i);
        return -1;
    }
    const srv_limits *L = srv_limits_of(sv->st);
    return srv_read_path(&sv->root, it, i, L->max_item_bytes, L->max_body_bytes, budget, e);
}

/* The request's items from its body: JSON, or one raw image / video. */
static int parse_request(server *sv, struct MHD_Connection *c, conn_ctx *cc, srv_request_items *req, srv_err *e) {
    memset(req, 0, sizeof *req);
    srv_opts o;
    srv_opts_default(&o);
    query_ctx q = {&o, e, 0};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, on_query, &q);
    if (q.bad) return -1;
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    const srv_limits *L = srv_limits_of(sv->st);
    if (!ct) {
        srv_err_set(e, 415, -1, "no Content-Type: send application/json, image/* or video/*");
        return -1;
    }
    if (strncasecmp(ct, "application/json", 16) == 0) {
        if (srv_parse_json((const char *)cc->body.p, cc->body.len, L, o, req, e)) return -1;
        size_t budget = L->max_body_bytes; /* the path items' files of one request, read into memory, as a body */
        for (size_t i = 0; i < req->n; i++)
            if (req->items[i].path && read_path(sv, &req->items[i], i, &budget, e)) {
                srv_request_items_free(req);
                return -1;
            }
        return 0;
    }
    int m = srv_media_of(ct, strlen(ct));
    if (!m) {
        srv_err_set(e, 415, -1, "Content-Type '%.64s' is not application/json, image/* or video/*", ct);
        return -1;
    }
    if (!cc->body.len) {
        srv_err_set(e, 400, 0, "empty body");
        return -1;
    }
    if (cc->body.len > L->max_item_bytes) {
        srv_err_set(e, 413, 0, "%zu bytes, over the %zu-byte item limit (max_input_bytes)", cc->body.len,
                    L->max_item_bytes);
        return -1;
    }
    req->items = calloc(1, sizeof *req->items);
    if (!req->items) {
        srv_err_set(e, 500, -1, "out of memory");
        return -1;
    }
    req->n = 1;
    req->items[0].media = (srv_media)m;
    req->items[0].data = cc->body.p; /* the body moves into the item */
    req->items[0].size = cc->body.len;
    cc->body.p = NULL;
    cc->body.len = cc->body.cap = 0;
    req->opts = o;
    return 0;
}

/* The results of a request whose items are done; 0, or -1 with e set (the first failed item's status, and its message
 * after "item N: ", N its index in the request: a job's message names no item). */
static int results_of(server *sv, conn_ctx *cc, srv_err *e) {
    for (size_t i = 0; i < cc->req.n; i++) {
        srv_result_of(sv->st, cc->jobs[i], &cc->res[i]);
        if (cc->res[i].http != 200) {
            srv_err_set(e, cc->res[i].http, (int)i, "item %zu: %s", i, cc->res[i].message);
            if (cc->res[i].http == 503) e->retry_after_s = 1;
            return -1;
        }
    }
    return 0;
}

/* The notifier's callback (its thread, no lock held): the request's items are done or its deadline passed. */
static void on_items_done(void *user, int timed_out) {
    conn_ctx *cc = user;
    cc->timed_out = timed_out;
    MHD_resume_connection(cc->conn);
}

static int accepts(struct MHD_Connection *c, const char *type) {
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    return a && strstr(a, type) != NULL;
}

/* The safetensors answer: "embeddings" (CONCAT: [N, O·(1+L)]; SPLIT: [N, O] plus "deepstack" [L, N, O]), "grid_thw"
 * I32 [items, 3], "offsets" I64 [items + 1] (token offsets), __metadata__ with each item's key. */
static int build_safetensors(server *sv, const srv_request_items *req, const srv_result *res, uint8_t **out,
                             size_t *len, struct MHD_IoVec *iov, size_t *n_iov) {
    const size_t n = req->n;
    size_t planes = res[0].n_planes, cols = res[0].out_cols, esz = srv_dtype_size(req->opts.dtype), total = 0;
    int32_t *grid = calloc(n * 3, sizeof *grid);
    int64_t *off = calloc(n + 1, sizeof *off);
    const void **pieces = calloc(n * planes, sizeof *pieces);
    size_t *pbytes = calloc(n * planes, sizeof *pbytes);
    char **meta = calloc(2 * n + 16, sizeof *meta);
    char *keyname = calloc(n, 24);
    int rc = -1;
    if (!grid || !off || !pieces || !pbytes || !meta || !keyname) goto done;
    size_t nm = 0;
    for (size_t i = 0; i < n; i++) {
        grid[3 * i] = res[i].grid.t, grid[3 * i + 1] = res[i].grid.h, grid[3 * i + 2] = res[i].grid.w;
        off[i] = (int64_t)total;
        total += res[i].n_tokens;
        snprintf(keyname + 24 * i, 24, "item%zu.key", i);
        meta[2 * nm] = keyname + 24 * i, meta[2 * nm + 1] = (char *)res[i].key, nm++;
        for (size_t k = 0; k < planes; k++) { /* plane k of every item, items in order (none yet: streamed) */
            pieces[k * n + i] = res[i].out ? (const uint8_t *)res[i].out + k * res[i].n_tokens * cols * esz : NULL;
            pbytes[k * n + i] = res[i].n_tokens * cols * esz;
        }
    }
    off[n] = (int64_t)total;
    char ver[32], nds[16];
    snprintf(ver, sizeof ver, "%s", qvl_version());
    snprintf(nds, sizeof nds, "%d", req->opts.deepstack ? srv_n_deepstack(sv->st) : 0);
    const char *fixed[] = {"producer", "qvl serve", "qvl_version", ver, "fingerprint", srv_fingerprint(sv->st),
                           "preprocessing", srv_prep_json(sv->st), "precision", srv_precision(sv->st),
                           "dtype", srv_dtype_opt(req->opts.dtype),
                           "layout", req->opts.layout == QVL_OUTPUT_SPLIT ? "split" : "concat",
                           "n_deepstack", nds};
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed / 2; k++)
        meta[2 * nm] = (char *)fixed[2 * k], meta[2 * nm + 1] = (char *)fixed[2 * k + 1], nm++;
    /* The small index tensors first, so that every tensor starts naturally aligned for its element type (offsets
     * at the 64-byte data start, grid_thw after 8·(n+1) bytes, the embeddings after 12·n more). */
    srv_tensor t[4];
    memset(t, 0, sizeof t);
    size_t nt = 0;
    t[nt].name = "offsets", t[nt].dtype = "I64", t[nt].ndim = 1, t[nt].shape[0] = (int64_t)n + 1;
    t[nt].data = off, t[nt].nbytes = (n + 1) * sizeof *off;
    nt++;
    t[nt].name = "grid_thw", t[nt].dtype = "I32", t[nt].ndim = 2, t[nt].shape[0] = (int64_t)n, t[nt].shape[1] = 3;
    t[nt].data = grid, t[nt].nbytes = n * 3 * sizeof *grid;
    nt++;
    t[nt].name = "embeddings", t[nt].dtype = srv_dtype_st(req->opts.dtype), t[nt].ndim = 2;
    t[nt].shape[0] = (int64_t)total, t[nt].shape[1] = (int64_t)cols;
    t[nt].pieces = pieces, t[nt].piece_bytes = pbytes, t[nt].n_pieces = n;
    for (size_t i = 0; i < n; i++) t[nt].nbytes += pbytes[i];
    nt++;
    if (planes > 1) {
        t[nt].name = "deepstack", t[nt].dtype = srv_dtype_st(req->opts.dtype), t[nt].ndim = 3;
        t[nt].shape[0] = (int64_t)(planes - 1), t[nt].shape[1] = (int64_t)total, t[nt].shape[2] = (int64_t)cols;
        t[nt].pieces = pieces + n, t[nt].piece_bytes = pbytes + n, t[nt].n_pieces = n * (planes - 1);
        for (size_t i = n; i < n * planes; i++) t[nt].nbytes += pbytes[i];
        nt++;
    }
    if (!iov) {
        rc = srv_st_build(t, nt, (const char *const *)meta, nm, out, len);
        goto done;
    }
    /* The header with the two small tensors after it in one buffer; the embeddings from where they lie. */
    size_t hl, dl;
    if (srv_st_header(t, nt, (const char *const *)meta, nm, out, &hl, &dl)) goto done;
    size_t small = t[0].nbytes + t[1].nbytes;
    uint8_t *h = realloc(*out, hl + small);
    if (!h) {
        free(*out);
        *out = NULL;
        goto done;
    }
    memcpy(h + hl, t[0].data, t[0].nbytes);
    memcpy(h + hl + t[0].nbytes, t[1].data, t[1].nbytes);
    *out = h;
    *len = hl + small;
    size_t k = 0;
    iov[k].iov_base = h, iov[k].iov_len = hl + small, k++;
    for (size_t i = 0; i < n * planes; i++)
        if (pbytes[i]) iov[k].iov_base = pieces[i], iov[k].iov_len = pbytes[i], k++;
    *n_iov = k;
    rc = 0;
done:
    free(grid);
    free(off);
    free(pieces);
    free(pbytes);
    free(meta);
    free(keyname);
    return rc;
}

static const char *npy_descr(qvl_dtype d) { return d == QVL_DTYPE_F32 ? "<f4" : d == QVL_DTYPE_F16 ? "<f2" : NULL; }

/* What an answer built from the items' outputs holds until libmicrohttpd has sent it. */
typedef struct resp_hold {
    srv_state *st;
    srv_job **jobs;
    size_t n;
    srv_result *res;
    uint8_t *head;
} resp_hold;

static void hold_free(void *p) {
    resp_hold *h = p;
    srv_release(h->st, h->jobs, h->n);
    free(h->jobs);
    free(h->res);
    free(h->head);
    free(h);
}

static void conn_release(server *sv, conn_ctx *cc) {
    if (cc->jobs) srv_release(sv->st, cc->jobs, cc->req.n);
    free(cc->jobs);
    free(cc->res);
    cc->jobs = NULL;
    cc->res = NULL;
    srv_request_items_free(&cc->req);
    memset(&cc->req, 0, sizeof cc->req);
}

/* ---- a streamed answer: a video of several pieces, sent as its pieces are encoded ----
 * The header first (the shape is known from the first piece), then the output as srv_stream_read gives it; with
 * nothing to send yet the connection is suspended inside the reader (libmicrohttpd allows that there) and the
 * service's notifier resumes it when there is. The answer has its Content-Length: one that fails halfway stops
 * short of it, the connection closed. */
typedef struct stream_resp {
    server *sv;
    srv_job *job;           /* a reference, dropped when libmicrohttpd frees the response */
    struct MHD_Connection *conn;
    uint8_t *head;          /* the safetensors header with its two small tensors, or the .npy header */
    size_t head_len;
    srv_stream_waiter waiter;
} stream_resp;

static void stream_wake(void *user) {
    stream_resp *r = user;
    MHD_resume_connection(r->conn);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_resp *r = cls;
    server *sv = r->sv;
    if (pos < r->head_len) {
        const size_t n = r->head_len - (size_t)pos < max ? r->head_len - (size_t)pos : max;
        memcpy(buf, r->head + pos, n);
        return (ssize_t)n;
    }
    const size_t at = (size_t)pos - r->head_len;
    const long got = srv_stream_read(sv->st, r->job, at, buf, max);
    if (got > 0) return (ssize_t)got;
    if (got < 0) return got == -2 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    /* Nothing yet: suspended, then woken once there is (the suspend first: the resume can only follow it). Counted
     * as handle_encode's suspensions are, so that the drain's end waits for the registration. */
    pthread_mutex_lock(&sv->mu);
    const int closing = sv->closing;
    sv->suspending += !closing;
    pthread_mutex_unlock(&sv->mu);
    if (closing) return MHD_CONTENT_READER_END_WITH_ERROR;
    MHD_suspend_connection(r->conn);
    srv_test_hold("QVL_SERVE_TEST_STREAM_SUSPEND_MS");
    r->waiter.job = r->job, r->waiter.pos = at, r->waiter.wake = stream_wake, r->waiter.user = r;
    if (srv_stream_wait(sv->st, &r->waiter)) MHD_resume_connection(r->conn); /* ready meanwhile */
    pthread_mutex_lock(&sv->mu);
    if (--sv->suspending == 0) pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

static void stream_free(void *cls) {
    stream_resp *r = cls;
    srv_stream_forget(r->sv->st, &r->waiter);
    srv_release(r->sv->st, &r->job, 1);
    free(r->head);
    free(r);
}

static enum MHD_Result send_stream(server *sv, struct MHD_Connection *c, conn_ctx *cc) {
    const srv_request_items *req = &cc->req;
    const srv_result *res = cc->res;
    stream_resp *r = calloc(1, sizeof *r);
    struct MHD_IoVec iov[2];
    size_t n_iov = 0;
    int bad = !r || res[0].n_planes != 1; /* one plane: its tokens' rows in order */
    if (!bad && cc->npy) {
        const int64_t shape[2] = {(int64_t)res[0].n_tokens, (int64_t)res[0].out_cols};
        bad = srv_npy_header(npy_descr(req->opts.dtype), shape, 2, res[0].out_bytes, &r->head, &r->head_len);
    } else if (!bad) {
        bad = build_safetensors(sv, req, res, &r->head, &r->head_len, iov, &n_iov);
    }
    struct MHD_Response *rs = NULL;
    if (!bad) {
        r->sv = sv, r->job = cc->jobs[0], r->conn = c;
        rs = MHD_create_response_from_callback(r->head_len + res[0].out_bytes, 256 * 1024, stream_reader, r,
                                               stream_free);
    }
    if (!rs) {
        if (r) free(r->head);
        free(r);
        srv_err e;
        srv_err_set(&e, 500, -1, "out of memory");
        return send_err(sv, cc, c, &e);
    }
    free(cc->jobs); /* the response holds the job now (stream_free) */
    cc->jobs = NULL;
    srv_metrics_request(srv_metrics_of(sv->st), cc->endpoint, 200, srv_now() - cc->t0);
    MHD_add_response_header(rs, "Content-Type", cc->npy ? "application/x-npy" : "application/x-safetensors");
    MHD_add_response_header(rs, "X-Qvl-Key", res[0].key);
    MHD_add_response_header(rs, "X-Qvl-Cache", "miss");
    MHD_add_response_header(rs, "X-Qvl-Streamed", "true");
    char g[64];
    snprintf(g, sizeof g, "%d,%d,%d", res[0].grid.t, res[0].grid.h, res[0].grid.w);
    MHD_add_response_header(rs, "X-Qvl-Grid-Thw", g);
    const enum MHD_Result ret = MHD_queue_response(c, 200, rs);
    MHD_destroy_response(rs);
    return ret;
}

static enum MHD_Result suspend_for_items(server *sv, struct MHD_Connection *c, conn_ctx *cc);

/* The answer of a request whose items are done, or streamed (or whose deadline passed): called from the access
 * handler. */
static enum MHD_Result finish_encode(server *sv, struct MHD_Connection *c, conn_ctx *cc) {
    srv_err e;
    memset(&e, 0, sizeof e);
    e.item = -1;
    const srv_request_items *req = &cc->req;
    const srv_result *res = cc->res;
    enum MHD_Result ret;
    int stream = 0;
    if (!cc->timed_out && cc->watch.stream) { /* read as it comes; or it is being planned again whole: wait for it */
        stream = srv_stream_claim(sv->st, cc->jobs[0]);
        if (stream < 0) {
            cc->watch.stream = 0;
            return suspend_for_items(sv, c, cc);
        }
    }
    if (cc->timed_out) {
        const int drained = srv_draining(sv->st) && srv_now() < cc->watch.deadline;
        srv_err_set(&e, 503, -1, "%s", drained ? "the server is draining and ran out of time for this request"
                                               : "the request's deadline passed before its items were encoded");
        e.retry_after_s = 1;
        srv_metrics_rejected(srv_metrics_of(sv->st), drained ? SRV_REJECT_NOT_READY : SRV_REJECT_DEADLINE);
        ret = send_err(sv, cc, c, &e);
    } else if (results_of(sv, cc, &e)) {
        /* an item's 503 is its deadline, passed in a queue or when its batch was cancelled */
        if (e.http == 503) srv_metrics_rejected(srv_metrics_of(sv->st), SRV_REJECT_DEADLINE);
        ret = send_err(sv, cc, c, &e);
    } else if (stream) {
        ret = send_stream(sv, c, cc);
    } else if (cc->vllm) {
        uint8_t *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        int64_t shape[2] = {(int64_t)res[0].n_tokens, (int64_t)res[0].out_cols};
        /* The grid is int64 [3], not [1, 3]: vLLM's chat parser stacks the grids of a message's image_embeds parts
         * into [images, 3] (image_grid_thw is a batched field of Qwen2-VL/Qwen3-VL's field config; vLLM's own
         * test_parse_chat_messages_multiple_dict_image_embeds sends one [3] grid per part), so a [1, 3] grid
         * would reach the model as [1, 1, 3]. */
        int64_t g[3] = {res[0].grid.t, res[0].grid.h, res[0].grid.w}, gshape[1] = {3};
        char *sa = NULL, *sb = NULL, *js = NULL;
        if (!srv_npy_build(npy_descr(req->opts.dtype), shape, 2, res[0].out, res[0].out_bytes, &a, &al) &&
            !srv_npy_build("<i8", gshape, 1, g, sizeof g, &b, &bl) && (sa = srv_b64_encode(a, al, NULL)) &&
            (sb = srv_b64_encode(b, bl, NULL))) {
            cJSON *o = cJSON_CreateObject(), *ie = o ? cJSON_AddObjectToObject(o, "image_embeds") : NULL;
            if (ie) {
                cJSON_AddStringToObject(o, "type", "image_embeds");
                cJSON_AddStringToObject(ie, "image_embeds", sa);
                cJSON_AddStringToObject(ie, "image_grid_thw", sb);
                cJSON_AddStringToObject(o, "uuid", res[0].key);
                js = cJSON_PrintUnformatted(o);
            }
            cJSON_Delete(o);
        }
        free(a), free(b), free(sa), free(sb);
        if (js) ret = send_ok(sv, cc, c, "application/json", js, strlen(js));
        else srv_err_set(&e, 500, -1, "out of memory"), ret = send_err(sv, cc, c, &e);
    } else {
        /* header + the outputs where they lie: at most 1 + n · planes pieces */
        size_t cap_iov = 1 + req->n * (res[0].n_planes ? res[0].n_planes : 1), n_iov = 0, len = 0;
        struct MHD_IoVec *iov = calloc(cap_iov, sizeof *iov);
        resp_hold *h = calloc(1, sizeof *h);
        uint8_t *head = NULL;
        int r = -1;
        if (iov && h) {
            if (cc->npy) {
                int64_t shape[3];
                int nd = res[0].n_planes > 1 ? 3 : 2;
                if (nd == 3) shape[0] = (int64_t)res[0].n_planes, shape[1] = (int64_t)res[0].n_tokens,
                             shape[2] = (int64_t)res[0].out_cols;
                else shape[0] = (int64_t)res[0].n_tokens, shape[1] = (int64_t)res[0].out_cols;
                r = srv_npy_header(npy_descr(req->opts.dtype), shape, nd, res[0].out_bytes, &head, &len);
                if (!r) {
                    iov[0].iov_base = head, iov[0].iov_len = len;
                    iov[1].iov_base = res[0].out, iov[1].iov_len = res[0].out_bytes;
                    n_iov = res[0].out_bytes ? 2 : 1;
                }
            } else {
                r = build_safetensors(sv, req, res, &head, &len, iov, &n_iov);
            }
        }
        struct MHD_Response *rs = NULL;
        if (!r) {
            h->st = sv->st, h->jobs = cc->jobs, h->n = req->n, h->res = cc->res, h->head = head;
            rs = MHD_create_response_from_iovec(iov, (unsigned)n_iov, hold_free, h);
        }
        free(iov);
        if (!rs) {
            free(head);
            free(h);
            srv_err_set(&e, 500, -1, "out of memory");
            ret = send_err(sv, cc, c, &e);
        } else {
            cc->jobs = NULL; /* the response holds them now (hold_free) */
            cc->res = NULL;
            srv_metrics_request(srv_metrics_of(sv->st), cc->endpoint, 200, srv_now() - cc->t0);
            MHD_add_response_header(rs, "Content-Type", cc->npy ? "application/x-npy" : "application/x-safetensors");
            if (req->n == 1) MHD_add_response_header(rs, "X-Qvl-Key", res[0].key);
            size_t hits = 0;
            for (size_t i = 0; i < req->n; i++) hits += res[i].cached != 0;
            MHD_add_response_header(rs, "X-Qvl-Cache", hits == req->n ? "hit" : hits ? "partial" : "miss");
            char g[64];
            snprintf(g, sizeof g, "%d,%d,%d", res[0].grid.t, res[0].grid.h, res[0].grid.w);
            MHD_add_response_header(rs, "X-Qvl-Grid-Thw", g);
            ret = MHD_queue_response(c, 200, rs);
            MHD_destroy_response(rs);
        }
    }
    conn_release(sv, cc);
    return ret;
}

/* A request's first full call: parse, admit, then answer at once (every item a cache hit) or suspend the connection
 * until its items are done. */
static enum MHD_Result handle_encode(server *sv, struct MHD_Connection *c, conn_ctx *cc, int vllm) {
    srv_err e;
    memset(&e, 0, sizeof e);
    e.item = -1;
    srv_request_items *req = &cc->req;
    if (parse_request(sv, c, cc, req, &e)) return send_err(sv, cc, c, &e);
    int npy = !vllm && accepts(c, "application/x-npy");
    if (vllm || npy) {
        if (req->n != 1) srv_err_set(&e, 400, -1, "%s answers one item, the request has %zu",
                                     vllm ? "/v1/vllm/image_embeds" : "application/x-npy", req->n);
        else if (!npy_descr(req->opts.dtype)) srv_err_set(&e, 400, -1, "npy has no bf16: ask for dtype f32 or f16");
        else if (vllm && (req->items[0].media == SRV_MEDIA_VIDEO || !srv_is_image(req->items[0].data,
                                                                                  req->items[0].size)))
            /* by its bytes too, as the library tells a video from an image: a path item has no declared type, and a
             * declared one may be wrong */
            srv_err_set(&e, 415, 0, "/v1/vllm/image_embeds takes one image (JPEG, PNG, WebP, GIF or BMP): item 0 is %s",
                        req->items[0].media == SRV_MEDIA_VIDEO ? "a video" : "not one (a video, or no image format)");
        if (vllm) req->opts.layout = QVL_OUTPUT_CONCAT;
        if (e.http) {
            conn_release(sv, cc);
            return send_err(sv, cc, c, &e);
        }
    }
    cc->vllm = vllm, cc->npy = npy;
    cc->can_stream = !vllm && req->n == 1 && (req->opts.layout == QVL_OUTPUT_CONCAT || !req->opts.deepstack);
    cc->jobs = calloc(req->n, sizeof *cc->jobs);
    cc->res = calloc(req->n, sizeof *cc->res);
    if (!cc->jobs || !cc->res) {
        srv_err_set(&e, 500, -1, "out of memory");
        conn_release(sv, cc);
        return send_err(sv, cc, c, &e);
    }
    const srv_limits *L = srv_limits_of(sv->st);
    double deadline = srv_now() + (req->opts.timeout_ms ? req->opts.timeout_ms : L->timeout_ms) / 1000.0;
    if (srv_submit(sv->st, req->items, req->n, &req->opts, deadline, cc->accepted, cc->can_stream, cc->jobs, &e)) {
        free(cc->jobs); /* srv_submit dropped them */
        cc->jobs = NULL;
        conn_release(sv, cc);
        return send_err(sv, cc, c, &e);
    }
    if (srv_wait(sv->st, cc->jobs, req->n, 0) == 0) return finish_encode(sv, c, cc); /* all cache hits */
    cc->sv = sv;
    cc->conn = c;
    cc->watch.jobs = cc->jobs, cc->watch.n = req->n, cc->watch.deadline = deadline;
    cc->watch.fn = on_items_done, cc->watch.user = cc;
    cc->watch.stream = cc->can_stream;
    return suspend_for_items(sv, c, cc);
}

/* Suspend the connection until the watch fires: its items done (or streamed), or its deadline passed. */
static enum MHD_Result suspend_for_items(server *sv, struct MHD_Connection *c, conn_ctx *cc) {
    cc->waiting = 1;
    /* Suspended first, then watched: the resume can only follow the suspend. Counted meanwhile, so that the drain's
     * end (which stops the daemon: a connection suspended then aborts the process) waits for the watch; once that end
     * has begun, none is suspended and the request is answered as out of time. */
    pthread_mutex_lock(&sv->mu);
    const int closing = sv->closing;
    sv->suspending += !closing;
    pthread_mutex_unlock(&sv->mu);
    if (closing) {
        cc->waiting = 0;
        cc->timed_out = 1;
        return finish_encode(sv, c, cc);
    }
    MHD_suspend_connection(c);
    srv_test_hold("QVL_SERVE_TEST_SUSPEND_MS");
    if (srv_watch_add(sv->st, &cc->watch)) on_items_done(cc, 1);
    pthread_mutex_lock(&sv->mu);
    if (--sv->suspending == 0) pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    return MHD_YES;
}

/* ---- other routes ---- */

static enum MHD_Result handle_cache(server *sv, struct MHD_Connection *c, conn_ctx *cc, const char *key, int head) {
    srv_err e;
    memset(&e, 0, sizeof e);
    qvl_cache *cache = srv_cache_of(sv->st);
    if (!cache) {
        srv_err_set(&e, 404, -1, "the server runs without a cache (--cache DIR)");
        return send_err(sv, cc, c, &e);
    }
    if (!srv_is_key(key)) {
        srv_err_set(&e, 400, -1, "a key is 64 lowercase hex digits");
        return send_err(sv, cc, c, &e);
    }
    if (head) {
        uint64_t size = 0;
        if (!qvl_cache_exists(cache, key, &size)) {
            srv_metrics_request(srv_metrics_of(sv->st), cc->endpoint, 404, 0);
            return send_text(c, 404, "application/json", "");
        }
        srv_metrics_request(srv_metrics_of(sv->st), cc->endpoint, 200, 0);
        /* The file's descriptor, so that Content-Length is its size (a HEAD answer sends no body). */
        int fd = -1;
        qvl_cache_open_fd(cache, key, &fd, NULL, NULL);
        struct MHD_Response *r = fd >= 0 ? MHD_create_response_from_fd((size_t)size, fd)
                                         : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!r) {
            if (fd >= 0) close(fd);
            return MHD_NO;
        }
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)size);
        MHD_add_response_header(r, "X-Qvl-Entry-Bytes", v);
        MHD_add_response_header(r, "Content-Type", "application/x-safetensors");
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    qvl_cache_entry ent;
    qvl_error err;
    if (qvl_cache_get(cache, key, &ent, &err) != QVL_OK) { /* not a miss: out of memory, or an unreadable file */
        srv_err_set(&e, 500, -1, "reading the cache entry: %s", err.message);
        return send_err(sv, cc, c, &e);
    }
    if (ent.result != QVL_CACHE_HIT) {
        srv_err_set(&e, 404, -1,
                    ent.result == QVL_CACHE_CORRUPT ? "the entry was corrupt and is deleted" : "no such entry");
        return send_err(sv, cc, c, &e);
    }
    return send_ok(sv, cc, c, "application/x-safetensors", ent.file, ent.file_bytes);
}

static int auth_ok(server *sv, struct MHD_Connection *c) {
    if (!sv->api_key) return 1;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!a || strncmp(a, "Bearer ", 7)) return 0;
    a += 7;
    size_t n = strlen(sv->api_key), m = strlen(a);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned)(sv->api_key[i] ^ (i < m ? a[i] : 0)); /* constant time */
    return diff == 0;
}

static int endpoint_of(const char *url) {
    if (strcmp(url, "/v1/encode") == 0) return SRV_EP_ENCODE;
    if (strcmp(url, "/v1/vllm/image_embeds") == 0) return SRV_EP_VLLM;
    if (strncmp(url, "/v1/cache/", 10) == 0) return SRV_EP_CACHE;
    if (strncmp(url, "/health", 7) == 0) return SRV_EP_HEALTH;
    if (strcmp(url, "/info") == 0) return SRV_EP_INFO;
    if (strcmp(url, "/metrics") == 0) return SRV_EP_METRICS;
    return SRV_EP_OTHER;
}

/* What a request is, from its method and URL. */
enum { RT_LIVE = 1, RT_READY, RT_METRICS, RT_INFO, RT_ENCODE, RT_VLLM, RT_CACHE_GET, RT_CACHE_HEAD };

/* A request's route from its headers alone (its first call, before any of its body is read): the route, or 0 with e
 * set: 401 without the API key (health and metrics stay open), 404 no route, 405 the wrong method. */
static int route_of(server *sv, struct MHD_Connection *c, const char *url, const char *method, int ep, srv_err *e) {
    const int get = strcmp(method, "GET") == 0, head = strcmp(method, "HEAD") == 0, post = strcmp(method, "POST") == 0;
    if (ep == SRV_EP_HEALTH && (get || head)) {
        if (strcmp(url, "/health/live") == 0) return RT_LIVE;
        if (strcmp(url, "/health/ready") == 0 || strcmp(url, "/health") == 0) return RT_READY;
    }
    if (ep == SRV_EP_METRICS && get) return RT_METRICS;
    if (!auth_ok(sv, c)) {
        srv_err_set(e, 401, -1, "missing or wrong API key (Authorization: Bearer ...)");
        return 0;
    }
    if (ep == SRV_EP_INFO && get) return RT_INFO;
    if ((ep == SRV_EP_ENCODE || ep == SRV_EP_VLLM) && post) return ep == SRV_EP_VLLM ? RT_VLLM : RT_ENCODE;
    if (ep == SRV_EP_CACHE && (get || head)) return head ? RT_CACHE_HEAD : RT_CACHE_GET;
    if (ep == SRV_EP_OTHER || ep == SRV_EP_HEALTH) srv_err_set(e, 404, -1, "no route %.200s", url);
    else srv_err_set(e, 405, -1, "method %.16s not allowed on %.200s", method, url);
    return 0;
}

/* A request whose body is in: answered on its route. */
static enum MHD_Result route(server *sv, struct MHD_Connection *c, conn_ctx *cc, const char *url) {
    srv_err e;
    memset(&e, 0, sizeof e);
    e.item = -1;
    const int ep = cc->endpoint;
    if (cc->route == RT_LIVE) {
        srv_metrics_request(srv_metrics_of(sv->st), ep, 200, 0);
        return send_text(c, 200, "application/json", "{\"status\":\"live\"}");
    }
    if (cc->route == RT_READY) {
        if (srv_ready(sv->st)) {
            srv_metrics_request(srv_metrics_of(sv->st), ep, 200, 0);
            return send_text(c, 200, "application/json", "{\"status\":\"ready\"}");
        }
        srv_err_set(&e, 503, -1, "%s", srv_draining(sv->st) ? "draining" : "not ready (saturated or loading)");
        e.retry_after_s = 1;
        return send_err(sv, cc, c, &e);
    }
    if (cc->route == RT_METRICS) {
        srv_gauges g;
        srv_gauges_of(sv->st, &g);
        pthread_mutex_lock(&sv->mu);
        g.inflight = (size_t)sv->active;
        pthread_mutex_unlock(&sv->mu);
        srv_metrics_request(srv_metrics_of(sv->st), ep, 200, 0);
        srv_buf b = {0};
        srv_metrics_render(srv_metrics_of(sv->st), &g, &b);
        if (b.bad) {
            free(b.p);
            return MHD_NO;
        }
        return send_buf(c, 200, "text/plain; version=0.0.4", b.p, b.len, NULL);
    }
    if (!srv_loaded(sv->st)) { /* the rest need the model */
        srv_err_set(&e, 503, -1, "the server is not ready (loading the model)");
        e.retry_after_s = 1;
        return send_err(sv, cc, c, &e);
    }
    if (cc->route == RT_INFO) {
        char *js = srv_info_json(sv->st);
        if (!js) return MHD_NO;
        return send_ok(sv, cc, c, "application/json", js, strlen(js));
    }
    if (cc->route == RT_ENCODE || cc->route == RT_VLLM) {
        if (cc->too_big) {
            srv_err_set(&e, 413, -1, "the body is over the %zu-byte limit%s", cc->body_limit,
                        cc->body_limit < srv_limits_of(sv->st)->max_body_bytes ? " of one item (max_input_bytes)" : "");
            return send_err(sv, cc, c, &e);
        }
        return handle_encode(sv, c, cc, cc->route == RT_VLLM);
    }
    return handle_cache(sv, c, cc, url + 10, cc->route == RT_CACHE_HEAD);
}

/* The request's body is all in (or it is answered without one): a drain waits for it from now on, however long. */
static void body_in(server *sv, conn_ctx *cc) {
    pthread_mutex_lock(&sv->mu);
    cc->body_in = 1;
    pthread_mutex_unlock(&sv->mu);
}

/* Under mu: the requests a drain waits for. A request still receiving its body counts while the body keeps coming,
 * not once nothing came for DRAIN_STALLED_S (the daemon's stop then closes its connection). */
static int drain_waits_for(const server *sv, double now) {
    int n = 0;
    for (const conn_ctx *cc = sv->requests; cc; cc = cc->next) n += cc->body_in || now - cc->last_rx < DRAIN_STALLED_S;
    return n;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) { /* the first call: headers only, nothing of the body read (libmicrohttpd answers 100-continue only
                  if we go on) */
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        cc->t0 = srv_now();
        cc->endpoint = endpoint_of(url);
        *con_cls = cc;
        pthread_mutex_lock(&sv->mu); /* counted and judged at once: a request counted before the drain is served */
        sv->active++;
        cc->accepted = !sv->draining;
        cc->last_rx = cc->t0;
        cc->next = sv->requests;
        if (sv->requests) sv->requests->prev = cc;
        sv->requests = cc;
        pthread_mutex_unlock(&sv->mu);
        srv_err e;
        memset(&e, 0, sizeof e);
        e.item = -1;
        /* the key, the route and the method first: a client without the key cannot have a body buffered */
        if (!(cc->route = route_of(sv, c, url, method, cc->endpoint, &e))) {
            body_in(sv, cc);
            return send_err(sv, cc, c, &e);
        }
        const srv_limits *L = srv_limits_of(sv->st);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        unsigned long long cl_n = cl ? strtoull(cl, NULL, 10) : 0;
        /* a raw image or video body is one item: the item limit (max_input_bytes, at most --max-body) bounds it */
        const int raw = ct && (cc->route == RT_ENCODE || cc->route == RT_VLLM) && srv_media_of(ct, strlen(ct));
        cc->body_limit = raw ? L->max_item_bytes : L->max_body_bytes;
        if (cl && cl_n > cc->body_limit) {
            if (raw)
                srv_err_set(&e, 413, 0, "a body of %s bytes is over the %zu-byte item limit (max_input_bytes)", cl,
                            cc->body_limit);
            else
                srv_err_set(&e, 413, -1, "a body of %s bytes is over the %zu-byte limit", cl, cc->body_limit);
            body_in(sv, cc);
            return send_err(sv, cc, c, &e);
        }
        if (cl_n > 0 && (cc->route == RT_ENCODE || cc->route == RT_VLLM) && (cc->body.p = malloc((size_t)cl_n + 1)))
            cc->body.cap = (size_t)cl_n + 1; /* one copy in */
        return MHD_YES;
    }
    if (cc->waiting) { /* resumed: the items are done, or the deadline passed */
        cc->waiting = 0;
        return finish_encode(sv, c, cc);
    }
    if (*upload_size) {
        pthread_mutex_lock(&sv->mu);
        cc->last_rx = srv_now();
        pthread_mutex_unlock(&sv->mu);
        if (!cc->too_big && cc->body.len + *upload_size > cc->body_limit) {
            cc->too_big = 1; /* chunked bodies have no Content-Length: stop keeping it */
            free(cc->body.p);
            memset(&cc->body, 0, sizeof cc->body);
        }
        if (!cc->too_big) srv_buf_put(&cc->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    body_in(sv, cc);
    if (cc->body.bad) {
        srv_err e;
        srv_err_set(&e, 500, -1, "out of memory for the body");
        return send_err(sv, cc, c, &e);
    }
    return route(sv, c, cc, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    (void)toe;
    server *sv = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    pthread_mutex_lock(&sv->mu);
    sv->active--;
    if (cc->prev) cc->prev->next = cc->next;
    else sv->requests = cc->next;
    if (cc->next) cc->next->prev = cc->prev;
    pthread_mutex_unlock(&sv->mu);
    conn_release(sv, cc);
    free(cc->body.p);
    free(cc);
    *con_cls = NULL;
}

/* ---- qvl serve ---- */

static const char serve_help[] =
    "usage: qvl serve --model DIR [options]\n"
    "An HTTP encoder server: POST /v1/encode (raw image/* or video/* body, options in the query; or JSON\n"
    "{\"items\": [{\"data\": \"data:image/png;base64,...\"} | {\"path\": ...}], \"dtype\", \"layout\", \"deepstack\",\n"
    "\"timeout_ms\"}) answers safetensors (or one .npy with Accept: application/x-npy); POST /v1/vllm/image_embeds\n"
    "answers vLLM's image_embeds content part; GET /health/live, /health/ready, /info, /metrics; HEAD/GET\n"
    "/v1/cache/KEY. SIGTERM drains: accepted requests are answered, then it exits 0.\n"
    "  --model DIR              the checkpoint (required)\n"
    "  --host ADDR              IPv4 address to listen on (default 127.0.0.1)\n"
    "  --port N                 TCP port (default 8080; 0: any free one)\n"
    "  --port-file FILE         write the port listened on to FILE once listening (poll /health/ready)\n"
    "  --cache DIR              content-addressed embedding cache (shared with qvl encode --cache, qvl cache)\n"
    "  --cache-size SIZE        cache budget (default 10G; K/M/G/T suffixes)\n"
    "  --vllm-links             also link DIR/vllm-ec/KEY/encoder_cache.safetensors (vLLM's shared storage)\n"
    "  --api-key K              require 'Authorization: Bearer K' (health and metrics stay open)\n"
    "  --allowed-media-path D   serve JSON 'path' items under D only, files (no frame directories); off by default\n"
    "  --threads N              encoder threads (default: every CPU)\n"
    "  --workers N              decode/preprocess threads (default 2)\n"
    "  --isa auto|avx2|avx512|amx  kernel set\n"
    "  --precision P            f32 (default), bf16 (bf16 GEMM and attention operands, f32 accumulation) or auto\n"
    "                           (bf16 where it is faster here: the AMX tiles, or AVX512-BF16 measured at 1.25x the\n"
    "                           f32 FMA rate or more; as qvl info's 'auto:' line); in /info, every answer and the\n"
    "                           cache keys\n"
    "  --max-connections N      open connections (default 1024; more wait in the listen backlog); --connections N\n"
    "                           is the same\n"
    "  --http-threads N         threads polling the connections (epoll; default 4); encodes wait on none of them\n"
    "  --limit NAME=N           set one of the library's resource limits (repeatable; docs/SECURITY.md):\n"
    "                           max_image_pixels, max_canvas_pixels, max_input_bytes, max_png_chunk_bytes,\n"
    "                           max_jpeg_scans, max_video_frames, max_video_pixels, max_item_patches,\n"
    "                           max_call_patches, max_decode_work, max_video_decode_pixels; an item over one\n"
    "                           is refused (413) before it is decoded (the two decode budgets: as the decode\n"
    "                           reaches them)\n"
    "  --max-body BYTES  --max-items N  --max-pixels N  --max-item-patches N\n"
    "                           (--max-pixels is --limit max_image_pixels, --max-item-patches is --limit\n"
    "                           max_item_patches (default 65536); an item's bytes are at most max_input_bytes,\n"
    "                           default 48M or --max-body, and never above --max-body)\n"
    "  --max-batch-patches N  --max-batch-items N  --max-queue-patches N  --max-queue-items N  --max-wait-us N\n"
    "                           (--max-batch-items: 1..65536, default 256; the batcher allocates a slot for each\n"
    "                           when it starts, and 65536 items of 4 patch rows, the least, are already 262144 rows)\n"
    "  --max-cache-writes N  --max-cache-write-bytes SIZE\n"
    "                           results held in memory for the cache writer, queued or being written (default 64\n"
    "                           and 1G); a result past either is not cached (qvl_cache_puts_skipped_total)\n"
    "  --timeout-ms N           default request deadline (default 120000)\n"
    "  --drain-timeout-s N      longest a drain waits for accepted requests, then for the cache writes queued\n"
    "                           (default 300)\n"
    "\n"
    "Examples:\n"
    "  qvl serve --model Qwen3-VL-2B-Instruct --port 8080 --cache /var/cache/qvl\n"
    "  curl -H 'Content-Type: image/jpeg' --data-binary @photo.jpg http://127.0.0.1:8080/v1/encode -o out.safetensors\n"
    "  curl -H 'Content-Type: image/jpeg' --data-binary @photo.jpg http://127.0.0.1:8080/v1/vllm/image_embeds\n";

static volatile sig_atomic_t got_signal;

int cmd_serve(int argc, char **argv) {
    enum { O_HOST = 256, O_PORT, O_PORT_FILE, O_CACHE, O_CACHE_SIZE, O_VLLM_LINKS, O_API_KEY, O_ALLOWED, O_THREADS,
           O_WORKERS, O_ISA, O_PRECISION, O_CONN, O_MAX_BODY, O_MAX_ITEMS, O_MAX_PIXELS, O_MAX_ITEM_PATCHES, O_MAX_BATCH_PATCHES,
           O_MAX_BATCH_ITEMS, O_MAX_QUEUE_PATCHES, O_MAX_QUEUE_ITEMS, O_MAX_WAIT, O_TIMEOUT, O_DRAIN, O_LIMIT,
           O_HTTP_THREADS, O_MAX_CACHE_WRITES, O_MAX_CACHE_WRITE_BYTES, O_HELP };
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT}, {"port-file", required_argument, NULL, O_PORT_FILE},
        {"cache", required_argument, NULL, O_CACHE}, {"cache-size", required_argument, NULL, O_CACHE_SIZE},
        {"vllm-links", no_argument, NULL, O_VLLM_LINKS}, {"api-key", required_argument, NULL, O_API_KEY},
        {"allowed-media-path", required_argument, NULL, O_ALLOWED}, {"threads", required_argument, NULL, O_THREADS},
        {"workers", required_argument, NULL, O_WORKERS}, {"isa", required_argument, NULL, O_ISA},
        {"precision", required_argument, NULL, O_PRECISION},
        {"connections", required_argument, NULL, O_CONN}, {"max-connections", required_argument, NULL, O_CONN},
        {"http-threads", required_argument, NULL, O_HTTP_THREADS}, {"max-body", required_argument, NULL, O_MAX_BODY},
        {"max-items", required_argument, NULL, O_MAX_ITEMS}, {"max-pixels", required_argument, NULL, O_MAX_PIXELS},
        {"max-item-patches", required_argument, NULL, O_MAX_ITEM_PATCHES},
        {"max-batch-patches", required_argument, NULL, O_MAX_BATCH_PATCHES},
        {"max-batch-items", required_argument, NULL, O_MAX_BATCH_ITEMS},
        {"max-queue-patches", required_argument, NULL, O_MAX_QUEUE_PATCHES},
        {"max-queue-items", required_argument, NULL, O_MAX_QUEUE_ITEMS},
        {"max-wait-us", required_argument, NULL, O_MAX_WAIT}, {"timeout-ms", required_argument, NULL, O_TIMEOUT},
        {"drain-timeout-s", required_argument, NULL, O_DRAIN}, {"limit", required_argument, NULL, O_LIMIT},
        {"max-cache-writes", required_argument, NULL, O_MAX_CACHE_WRITES},
        {"max-cache-write-bytes", required_argument, NULL, O_MAX_CACHE_WRITE_BYTES},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}};
    srv_config cfg;
    memset(&cfg, 0, sizeof cfg);
    srv_limits_default(&cfg.lim);
    qvl_limits_default(&cfg.qlim);
    cfg.cache_size = (uint64_t)10 << 30;
    cfg.workers = 2;
    const char *host = "127.0.0.1", *port_file = NULL, *allowed = NULL, *api_key = NULL;
    long port = 8080, conns = 1024, drain_s = 300, http_threads = 4;
    int set_pixels = 0, set_patches = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":m:", opts, NULL)) != -1) {
        long v = 0;
        uint64_t u = 0;
        switch (c) {
        case 'm': cfg.model_dir = optarg; break;
        case O_HOST: host = optarg; break;
        case O_PORT: if (cli_parse_long(optarg, 0, 65535, &port)) return cli_usage("--port: 0..65535"); break;
        case O_PORT_FILE: port_file = optarg; break;
        case O_CACHE: cfg.cache_dir = optarg; break;
        case O_CACHE_SIZE:
            if (cli_parse_size(optarg, &cfg.cache_size)) return cli_usage("--cache-size: a size like 10G");
            break;
        case O_VLLM_LINKS: cfg.vllm_links = 1; break;
        case O_API_KEY: api_key = optarg; break;
        case O_ALLOWED: allowed = optarg; break;
        case O_THREADS:
            if (cli_parse_long(optarg, 0, QVL_MAX_THREADS, &v)) return cli_usage("--threads: 0..%d", QVL_MAX_THREADS);
            cfg.threads = (int)v;
            break;
        case O_WORKERS: if (cli_parse_long(optarg, 1, 256, &v)) return cli_usage("--workers: 1..256");
            cfg.workers = (int)v;
            break;
        case O_ISA: if (cli_parse_isa(optarg, &cfg.isa)) return cli_usage("--isa: auto, avx2, avx512 or amx"); break;
        case O_PRECISION:
            if (cli_parse_precision(optarg, &cfg.precision))
                return cli_usage("--precision: '%s' is not f32, bf16 or auto", optarg);
            break;
        case O_CONN:
            if (cli_parse_long(optarg, 1, 100000, &conns)) return cli_usage("--max-connections: 1..100000");
            break;
        case O_HTTP_THREADS:
            if (cli_parse_long(optarg, 1, 64, &http_threads)) return cli_usage("--http-threads: 1..64");
            break;
        case O_MAX_BODY: case O_MAX_ITEMS: case O_MAX_PIXELS: case O_MAX_ITEM_PATCHES: case O_MAX_BATCH_PATCHES:
        case O_MAX_BATCH_ITEMS: case O_MAX_QUEUE_PATCHES: case O_MAX_QUEUE_ITEMS: case O_MAX_CACHE_WRITES:
        case O_MAX_CACHE_WRITE_BYTES:
            if (cli_parse_size(optarg, &u) || u == 0 || u > ((uint64_t)1 << 40))
                return cli_usage("%s: a positive number", argv[optind - 1]);
            if (c == O_MAX_BATCH_ITEMS && u > SRV_MAX_BATCH_ITEMS)
                return cli_usage("--max-batch-items: 1..%d (the batcher holds a slot for each)", SRV_MAX_BATCH_ITEMS);
            if (c == O_MAX_BODY) cfg.lim.max_body_bytes = (size_t)u, cfg.lim.max_item_bytes = (size_t)u;
            else if (c == O_MAX_ITEMS) cfg.lim.max_items = (size_t)u;
            else if (c == O_MAX_PIXELS) cfg.lim.max_pixels = u, set_pixels = 1;
            else if (c == O_MAX_ITEM_PATCHES) cfg.lim.max_item_patches = (size_t)u, set_patches = 1;
            else if (c == O_MAX_BATCH_PATCHES) cfg.lim.max_batch_patches = (size_t)u;
            else if (c == O_MAX_BATCH_ITEMS) cfg.lim.max_batch_items = (size_t)u;
            else if (c == O_MAX_QUEUE_PATCHES) cfg.lim.max_queue_patches = (size_t)u;
            else if (c == O_MAX_CACHE_WRITES) cfg.lim.max_put_items = (size_t)u;
            else if (c == O_MAX_CACHE_WRITE_BYTES) cfg.lim.max_put_bytes = (size_t)u;
            else cfg.lim.max_queue_items = (size_t)u;
            break;
        case O_MAX_WAIT: if (cli_parse_long(optarg, 0, 10000000, &v)) return cli_usage("--max-wait-us: 0..10000000");
            cfg.lim.max_wait_us = (int)v;
            break;
        case O_TIMEOUT: if (cli_parse_long(optarg, 1, 3600000, &v)) return cli_usage("--timeout-ms: 1..3600000");
            cfg.lim.timeout_ms = (int)v;
            break;
        case O_DRAIN: if (cli_parse_long(optarg, 0, 86400, &drain_s)) return cli_usage("--drain-timeout-s: 0..86400");
            break;
        case O_LIMIT:
            if (cli_parse_limit(optarg, &cfg.qlim))
                return cli_usage("--limit: '%s' is not NAME=N with N >= 1 and NAME a qvl_limits field (see --help)",
                                 optarg);
            break;
        case O_HELP: fputs(serve_help, stdout); return 0;
        default: return cli_bad_option("serve", c, argv);
        }
    }
    if (optind < argc) return cli_usage("unexpected argument '%s' (see 'qvl serve --help')", argv[optind]);
    if (!cfg.model_dir) return cli_usage("qvl serve needs --model DIR");
    /* The server's options and the library's limits name the same bounds twice: --max-pixels / --limit
     * max_image_pixels, --max-item-patches / --limit max_item_patches, the item bytes (48 MiB, or --max-body) /
     * --limit max_input_bytes. The one given wins (both: the smaller), else the server's default; the two then agree,
     * so that what /info says is what is enforced. The batch budget fits one plan's patch limit. */
    qvl_limits *q = &cfg.qlim, qd;
    qvl_limits_default(&qd);
    if (set_pixels) q->max_image_pixels = q->max_image_pixels != qd.max_image_pixels && q->max_image_pixels <
                                          cfg.lim.max_pixels ? q->max_image_pixels : cfg.lim.max_pixels;
    else if (q->max_image_pixels == qd.max_image_pixels) q->max_image_pixels = cfg.lim.max_pixels;
    cfg.lim.max_pixels = q->max_image_pixels;
    if (set_patches) q->max_item_patches = q->max_item_patches != qd.max_item_patches && q->max_item_patches <
                                           cfg.lim.max_item_patches ? q->max_item_patches : cfg.lim.max_item_patches;
    else if (q->max_item_patches == qd.max_item_patches) q->max_item_patches = cfg.lim.max_item_patches;
    cfg.lim.max_item_patches = (size_t)q->max_item_patches;
    if (q->max_input_bytes == qd.max_input_bytes || q->max_input_bytes > cfg.lim.max_body_bytes)
        q->max_input_bytes = q->max_input_bytes == qd.max_input_bytes ? cfg.lim.max_item_bytes : cfg.lim.max_body_bytes;
    cfg.lim.max_item_bytes = (size_t)q->max_input_bytes;
    if (cfg.lim.max_batch_patches > q->max_call_patches) cfg.lim.max_batch_patches = (size_t)q->max_call_patches;
    server sv;
    memset(&sv, 0, sizeof sv);
    sv.api_key = api_key && *api_key ? api_key : NULL;
    if (allowed) {
        char why[PATH_MAX + 64];
        if (srv_root_open(&sv.root, allowed, why, sizeof why)) return cli_fail("--allowed-media-path %s", why);
        sv.paths = 1;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) return cli_usage("--host: an IPv4 address, not '%s'", host);
    /* Signals: blocked in every thread; this one waits for them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    char msg[1200];
    double t0 = srv_now();
    sv.st = srv_create(&cfg);
    if (!sv.st) {
        return cli_fail("out of memory");
    }
    pthread_mutex_init(&sv.mu, NULL);
    pthread_cond_init(&sv.cv, NULL);
    /* Listen first: /health/live answers and /health/ready says 503 while the weights load and warm up. */
    /* Every connection is a descriptor: let the process have as many as the connection limit needs. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)conns + 256) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (rlim_t)conns + 256 ? (rlim_t)conns + 256
                                                                                          : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* epoll on a small pool of polling threads; ALLOW_SUSPEND_RESUME brings the inter-thread channel (ITC) that
     * wakes a thread's loop when the notifier resumes one of its connections. */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, on_request, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)conns, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)http_threads,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, &sv, MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)128,
        MHD_OPTION_END);
    if (!d) {
        srv_stop(sv.st);
        return cli_fail("cannot listen on %s:%ld", host, port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned bound = di ? di->port : (unsigned)port;
    if (port_file) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (f) {
            fprintf(f, "%u\n", bound);
            if (fclose(f) == 0) rename(tmp, port_file);
        }
    }
    if (srv_load(sv.st, msg, sizeof msg)) {
        MHD_stop_daemon(d);
        srv_stop(sv.st);
        return cli_fail("%s", msg);
    }
    fprintf(stderr, "qvl serve: %s ready on http://%s:%u in %.0f ms\n", cfg.model_dir, host, bound,
            (srv_now() - t0) * 1000);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "qvl serve: signal %d: draining\n", sig);
    pthread_mutex_lock(&sv.mu);
    sv.draining = 1;
    pthread_mutex_unlock(&sv.mu);
    srv_drain(sv.st);
    /* No new connections (the listening socket, handed back to us, is shut down at once, so connects are refused
     * rather than left in its backlog; it is closed only once the daemon has stopped, as a polling thread may
     * still hold it in its epoll set for a moment); those accepted finish their requests. */
    MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET) shutdown(lfd, SHUT_RDWR);
    /* Until no request is in progress (suspended ones included; one still receiving its body while the body keeps
     * coming: drain_waits_for) and the connections are gone or have been idle a while (keep-alive clients that send
     * nothing more; a request already on its way gets half a second to arrive). Out of time: every waiting request
     * is answered 503, then those answers get a moment to go out. */
    const double drain_end = srv_now() + (double)drain_s;
    double until = drain_end, idle_since = 0;
    int flushed = 0;
    for (;;) {
        double now = srv_now();
        pthread_mutex_lock(&sv.mu);
        int active = drain_waits_for(&sv, now);
        pthread_mutex_unlock(&sv.mu);
        const union MHD_DaemonInfo *ci = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (active) idle_since = 0;
        else if (!idle_since) idle_since = now;
        if (!active && (!ci || ci->num_connections == 0 || now - idle_since >= 0.5)) break;
        if (now > until) {
            if (flushed || !active) break;
            srv_watch_flush(sv.st);
            srv_stream_flush(sv.st); /* streamed answers stop short */
            flushed = 1;
            until = now + 2;
        }
        usleep(10000);
    }
    /* The daemon must not stop with a connection suspended: libmicrohttpd 0.9.75 aborts (MHD_PANIC) on one. A request
     * may still be suspending (one begun before the drain whose body came in late, or any once the drain ran out of
     * time), so: none suspends from now on (handle_encode answers it 503), those between their suspend and their
     * watch are waited for, and every watch is fired (srv_watch_flush waits for the ones the notifier is firing), so
     * each suspended connection has been resumed before the stop. */
    pthread_mutex_lock(&sv.mu);
    sv.closing = 1;
    while (sv.suspending) pthread_cond_wait(&sv.cv, &sv.mu);
    pthread_mutex_unlock(&sv.mu);
    srv_watch_flush(sv.st);
    srv_stream_flush(sv.st);
    /* The connections that flush resumed answer now (503): a moment for those answers to go out, as for the ones the
     * drain answered, before the stop closes every connection. */
    for (const double out_by = srv_now() + 1.0; srv_now() < out_by; usleep(10000)) {
        pthread_mutex_lock(&sv.mu);
        const int waiting = drain_waits_for(&sv, srv_now());
        pthread_mutex_unlock(&sv.mu);
        if (!waiting) break;
    }
    MHD_stop_daemon(d);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    /* The results queued for their cache write are written within what is left of the drain's time (none once it
     * ran out); srv_stop abandons the rest, the write under way completing. */
    srv_finish_puts(sv.st, drain_end);
    srv_stop(sv.st);
    if (sv.paths) srv_root_close(&sv.root);
    pthread_cond_destroy(&sv.cv);
    pthread_mutex_destroy(&sv.mu);
    fprintf(stderr, "qvl serve: stopped\n");
    return 0;
}
