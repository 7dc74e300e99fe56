/* test_serve_races.c — `qvl serve` where its threads meet, each a regression, against the server built with test
 * hooks (qvl_serve_hooks, tests.cmake: srv_test_hold in serve.h holds a thread for seconds at a point where a window
 * is otherwise microseconds wide; under ThreadSanitizer in a build without another sanitizer):
 *   - the drain's end while a polling thread is between a request's suspend and its watch, or while the notifier
 *     holds a watch it has taken and not yet resumed: the daemon was stopped with that connection suspended and
 *     libmicrohttpd 0.9.75 aborted ("MHD_stop_daemon() called while we have suspended connections"); exit 0 now
 *   - a request for an item identical to one in a batch being cancelled (its only request's deadline passed) joined
 *     that job and was answered 503 "cancelled" well inside its own deadline; it is encoded anew now: 200
 *   - a cancelled item's 503 answered with its results (done before the notifier looked at its request) said
 *     "item 0: item 0: encode cancelled ..."; the item is named once now
 *   - an item being decoded when its only request's deadline passed was decoded to the end (seconds for a large
 *     progressive JPEG or a long video); the decode stops now
 *   - the drain's end while a streamed video's answer waits for its next piece, suspended in its reader (or held
 *     between that suspend and its wake's registration): the answer stops short, and the server exits 0
 *   - a streamed video whose last piece failed (its request's deadline passed) was done 200 and its output, the
 *     last piece's tokens never written, cached: the next request a hit with zeros; it fails now, nothing cached
 *   - a video joined by a request that takes it whole was read as a ring (its output not held) once the request
 *     that made it, which read it as it came, had gone: the joiner waited until its deadline; it is gathered now
 *   - a video sampled again after its first piece, planned again whole between its watch firing and its answer:
 *     the answer, made from a job no longer streamed nor done, was an error of status 0 (no reply); it waits now
 * Every wait is bounded. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qvl.h"
#include "serve_client.h"
#include "testutil.h"

static char g_tmp[512], g_model[600], g_hooks[1024], g_bin[1024];

/* The hooked server, with the hook `hook` holding its thread `ms` milliseconds (and `hook2` `ms2`, when not NULL), and
 * extra options. */
static pid_t start_hooked2(const char *hook, const char *ms, const char *hook2, const char *ms2, char *const extra[],
                           int n_extra) {
    setenv("QVL_BIN", g_hooks, 1); /* start_server runs QVL_BIN */
    setenv(hook, ms, 1);
    if (hook2) setenv(hook2, ms2, 1);
    const pid_t pid = start_server(g_tmp, g_model, extra, n_extra);
    unsetenv(hook);
    if (hook2) unsetenv(hook2);
    setenv("QVL_BIN", g_bin, 1);
    return pid;
}

static pid_t start_hooked(const char *hook, const char *ms, char *const extra[], int n_extra) {
    return start_hooked2(hook, ms, NULL, NULL, extra, n_extra);
}

/* ---- the drain's end and suspended connections ----
 * A drain out of time (--drain-timeout-s 0: the waiting requests are answered 503 at once, then 2 s more) ended
 * with srv_watch_flush and MHD_stop_daemon while a request could still be suspended without a watch: its polling
 * thread between MHD_suspend_connection and srv_watch_add (hold QVL_SERVE_TEST_SUSPEND_MS), or its watch taken off
 * the list by the notifier and not yet resumed (hold QVL_SERVE_TEST_FIRE_MS). The polling thread, back in its loop,
 * found the daemon stopping with a suspended connection: MHD_PANIC, abort (134). Now no request suspends once the
 * drain's end has begun, the end waits for those between suspend and watch and for the notifier's watches in hand,
 * and every watch is fired (the connection resumed) before the daemon stops: exit 0. The request is answered (503, or
 * 200 had it finished), not left to the stop to close its connection unanswered (status 0: the answer, made by the
 * resumed thread, raced the stop). */
static void drain_end_with(const char *hook, unsigned seed) {
    char *extra[] = {"--drain-timeout-s", "0"};
    const pid_t pid = start_hooked(hook, "3000", extra, 2);
    CHECK(pid > 0);
    if (pid <= 0) return;
    size_t n;
    uint8_t *bmp = make_bmp(64, 64, seed, &n); /* new to the cache: encoded, not a hit */
    const int fd = sock_connect();
    CHECK(bmp && fd >= 0 && sock_post(fd, "/v1/encode", "image/bmp", bmp, n) == 0);
    usleep(500000); /* its thread is held now: SIGTERM; the drain runs out of time 2 s later, within the hold */
    const double t0 = tu_now();
    const int rc = stop_server(pid);
    const double dt = tu_now() - t0;
    int complete = 0;
    const int st = fd >= 0 ? sock_status(fd, &complete) : -1;
    printf("drain's end, %s held: exit %d after %.1f s, the request answered %d\n", hook, rc, dt, st);
    CHECK(rc == 0 && dt < 30);
    CHECK(st == 200 || st == 503);
    free(bmp);
}

/* ---- the drain's end and a streamed answer ----
 * A video of several pieces whose answer is read as they come (--max-batch-patches 1, no output cached) waits for
 * its next piece suspended inside libmicrohttpd's reader; each block held QVL_SERVE_TEST_BLOCK_MS, so the stream
 * takes seconds. SIGTERM with --drain-timeout-s 0: the drain's end stops every streamed answer (srv_stream_flush)
 * and resumes its connection before the daemon stops, also one whose reader is held between its suspend and its
 * wake's registration (QVL_SERVE_TEST_STREAM_SUSPEND_MS): exit 0, the answer 200 and short of its length (or whole,
 * had it finished). */
static void drain_end_streaming(const char *hook2, const char *ms2) {
#if QVL_WITH_VIDEO
    char *extra[] = {"--drain-timeout-s", "0", "--max-batch-patches", "1", "--max-cache-write-bytes", "1"};
    const pid_t pid = start_hooked2("QVL_SERVE_TEST_BLOCK_MS", "150", hook2, ms2, extra, 6);
    CHECK(pid > 0);
    if (pid <= 0) return;
    char path[600];
    tu_source_path("tests/data/video/video_h264_bframes.mp4", path, sizeof path);
    size_t n;
    uint8_t *b = tu_read_file(path, &n);
    const int fd = sock_connect();
    CHECK(b && fd >= 0 && sock_post(fd, "/v1/encode", "video/mp4", b, n) == 0);
    usleep(1500000); /* its first pieces answered, the reader waiting for the next: SIGTERM */
    const double t0 = tu_now();
    const int rc = stop_server(pid);
    const double dt = tu_now() - t0;
    int complete = 0;
    const int st = fd >= 0 ? sock_status(fd, &complete) : -1;
    printf("drain's end, a streamed answer%s%s: exit %d after %.1f s, the answer %d, %s\n", hook2 ? ", held at " : "",
           hook2 ? hook2 : "", rc, dt, st, complete ? "whole" : "short");
    CHECK(rc == 0 && dt < 30);
    CHECK(st == 200);
    free(b);
#else
    (void)hook2, (void)ms2;
#endif
}

/* Empty the servers' shared cache directory (g_tmp/cache), so that what one case encodes is no hit for the next. */
static void clear_cache(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/cache'", g_tmp);
    CHECK(system(cmd) == 0);
}

#if QVL_WITH_VIDEO
/* The reference tokens of `file` (qvl encode on the test model) into *f / *r; 0 when they could not be made. */
static int video_ref(const char *file, st_file **f, ref_item *r) {
    char path[600], out[700], cmd[4096];
    tu_source_path(file, path, sizeof path);
    snprintf(out, sizeof out, "%s/vref.safetensors", g_tmp);
    snprintf(cmd, sizeof cmd, "'%s' encode -q --model '%s' -o '%s' '%s'", g_bin, g_model, out, path);
    qvl_error err;
    *f = NULL;
    if (system(cmd) != 0 || st_load(out, SIZE_MAX, f, &err) != QVL_OK) return 0;
    ref_of(*f, 0, r);
    return 1;
}

/* 1 when the answer is whole and its embeddings are the reference's. */
static int answer_is(const resp *a, const ref_item *r) {
    st_file *f = NULL;
    qvl_error err;
    if (a->status != 200 || !a->complete || st_parse(a->body, a->len, "response", &f, &err) != QVL_OK) return 0;
    const st_tensor *e = st_find(f, "embeddings");
    const int same = e && (size_t)e->shape[0] == r->tokens && same_concat(e->data, r);
    st_close(f);
    return same;
}
#endif

/* ---- a streamed video whose last piece fails ----
 * Each block held 100 ms, the request's deadline 2.7 s: the deadline passes while the video's pieces are encoded,
 * the piece then in the queue is dropped, and the answer stops short (or, in a slow run, the deadline passes before
 * the first piece: 503). Then the same video again, without a deadline: whole, and the reference's tokens, whether
 * it is a cache hit or not. Before, a dropped last piece left the stream a success: its job done 200 and its output
 * cached with the last piece's tokens zero, which the second request then got as a hit. */
static void stream_deadline(void) {
#if QVL_WITH_VIDEO
    st_file *vf = NULL;
    ref_item r;
    CHECK(video_ref("tests/data/video/video_h264_bframes.mp4", &vf, &r));
    char *extra[] = {"--max-batch-patches", "1"};
    const pid_t pid = vf ? start_hooked("QVL_SERVE_TEST_BLOCK_MS", "100", extra, 2) : -1;
    CHECK(pid > 0);
    char path[600];
    size_t n = 0;
    uint8_t *b = tu_read_file(tu_source_path("tests/data/video/video_h264_bframes.mp4", path, sizeof path), &n);
    for (int k = 0; pid > 0 && b && k < 3; k++) { /* the deadline at 2.7 s, 1.9 s, 1.1 s: one of them lands inside */
        resp a;
        memset(&a, 0, sizeof a);
        char url[64];
        snprintf(url, sizeof url, "/v1/encode?timeout_ms=%d", 2700 - 800 * k);
        CHECK(post(url, "video/mp4", b, n, &a) == 0);
        const int ok = answer_is(&a, &r);
        printf("a streamed video, deadline %d ms: %d, %s\n", 2700 - 800 * k, a.status,
               ok ? "whole" : a.status == 200 ? "short" : "refused");
        CHECK(ok || (a.status == 200 && !a.complete) || a.status == 503);
        resp_free(&a);
    }
    long q = -1; /* the streams cut short end (their queued pieces dropped): the queue empties */
    for (int tries = 0; pid > 0 && tries < 1000 && (q = metric_of("qvl_queue_items")) != 0; tries++) usleep(10000);
    CHECK(q == 0);
    resp c;
    memset(&c, 0, sizeof c);
    char hit[16] = "";
    CHECK(pid > 0 && b && post("/v1/encode?timeout_ms=120000", "video/mp4", b, n, &c) == 0);
    header(&c, "X-Qvl-Cache", hit, sizeof hit);
    printf("the same video again: %d, cache %s, %s\n", c.status, hit, answer_is(&c, &r) ? "the reference's tokens" : "WRONG");
    CHECK(answer_is(&c, &r));
    resp_free(&c);
    free(b);
    st_close(vf);
    if (pid > 0) CHECK(stop_server(pid) == 0);
    clear_cache();
#endif
}

/* ---- a video joined by a request that takes it whole ----
 * Request A (raw body: read as it comes) makes the video's job, its deadline 0.8 s; request B (JSON: the same video
 * by path and an image, answered whole) joins it at once, its deadline 60 s. The worker is held 2 s at its first
 * poll (QVL_SERVE_TEST_DECODE_MS), so A's deadline passes before the first piece: B is then the only waiter, and it
 * takes the output whole. Before, the job was made a ring (its maker read as it came, and one request waited) and
 * never gathered: B waited its 60 s and got 503. */
static void stream_joined_whole(void) {
#if QVL_WITH_VIDEO
    /* (the queue bound large enough for B's image beside A's video, counted by its whole-clip budget) */
    char *extra[] = {"--max-batch-patches", "1", "--workers", "1", "--max-queue-patches", "10000000",
                     "--max-cache-write-bytes", "1"}; /* and no output cached: a ring, were the maker still there */
    const pid_t pid = start_hooked("QVL_SERVE_TEST_DECODE_MS", "2000", extra, 8);
    CHECK(pid > 0);
    char path[600], png[600];
    tu_source_path("tests/data/video/video_h264_bframes.mp4", path, sizeof path);
    tu_source_path("tests/data/photos/chelsea.png", png, sizeof png);
    size_t n = 0;
    uint8_t *b = tu_read_file(path, &n);
    const int fa = pid > 0 ? sock_connect() : -1;
    CHECK(b && fa >= 0 && sock_post(fa, "/v1/encode?timeout_ms=800", "video/mp4", b, n) == 0);
    usleep(100000);
    char body[1400];
    const int bl = snprintf(body, sizeof body, "{\"items\": [{\"path\": \"%s\"}, {\"path\": \"%s\"}]}", path, png);
    resp rb;
    memset(&rb, 0, sizeof rb);
    const double t0 = tu_now();
    CHECK(pid > 0 && post("/v1/encode?timeout_ms=60000", "application/json", body, (size_t)bl, &rb) == 0);
    const double dt = tu_now() - t0;
    int complete = 0;
    const int sa = fa >= 0 ? sock_status(fa, &complete) : -1;
    printf("a video joined by a request answered whole: the maker %d, the joiner %d after %.1f s\n", sa, rb.status, dt);
    CHECK(sa == 503 && rb.status == 200 && rb.complete && dt < 30);
    resp_free(&rb);
    free(b);
    if (pid > 0) CHECK(stop_server(pid) == 0);
    clear_cache();
#endif
}

/* ---- a video planned again whole while its answer is being made ----
 * The edit list's clip counts more frames in its header than it holds: its stream is sampled again at its end, and
 * with no answer reading it yet the worker plans it again whole. The notifier held 1.5 s before it fires the
 * request's watch (QVL_SERVE_TEST_FIRE_MS) lets that happen between the first piece (which fires the watch) and
 * the answer. The answer then waits for the whole encode: 200, whole, the reference's tokens (once in a while the
 * answer begins first and stops short: then the same request again is read whole). Before, no reply (status 0). */
static void stream_replanned(void) {
#if QVL_WITH_VIDEO
    st_file *vf = NULL;
    ref_item r;
    CHECK(video_ref("tests/data/video/video_editlist.mp4", &vf, &r));
    char *extra[] = {"--max-batch-patches", "1", "--max-cache-write-bytes", "1"};
    const pid_t pid = vf ? start_hooked("QVL_SERVE_TEST_FIRE_MS", "1500", extra, 4) : -1;
    CHECK(pid > 0);
    char path[600];
    size_t n = 0;
    uint8_t *b = tu_read_file(tu_source_path("tests/data/video/video_editlist.mp4", path, sizeof path), &n);
    int whole = 0, statuses[2] = {-1, -1};
    for (int k = 0; pid > 0 && b && k < 2 && !whole; k++) {
        resp a;
        memset(&a, 0, sizeof a);
        CHECK(post("/v1/encode", "video/mp4", b, n, &a) == 0);
        statuses[k] = a.status;
        whole = answer_is(&a, &r);
        CHECK(a.status == 200);
        resp_free(&a);
    }
    printf("a video sampled again while its answer was made: %d then %d, %s\n", statuses[0], statuses[1],
           whole ? "whole" : "NOT whole");
    CHECK(whole);
    free(b);
    st_close(vf);
    if (pid > 0) CHECK(stop_server(pid) == 0);
    clear_cache();
#endif
}

/* ---- single flight and a cancelled batch ----
 * A batch is cancelled between blocks once none of its items has a request still waiting within its deadline
 * (batch_cancel). A request for the same item arriving after that decision and before the batch unwound found the job
 * in the flight table, joined it, and got its 503 "encode cancelled" within its own deadline. Each poll of the cancel
 * is followed by a block held QVL_SERVE_TEST_BLOCK_MS (800 ms): request A (deadline 400 ms) is polled live before the
 * first block, found gone at the second poll (the cancel decided, 0.8 s into the batch), and the batch unwinds 0.8 s
 * later; request B for the same image, its deadline 60 s, arrives 1.2 s in: 200 now, and A is 503 for its deadline. */
static void join_cancelled_batch(void) {
    const pid_t pid = start_hooked("QVL_SERVE_TEST_BLOCK_MS", "800", NULL, 0);
    CHECK(pid > 0);
    if (pid <= 0) return;
    size_t n;
    uint8_t *bmp = make_bmp(64, 64, 9100, &n);
    const int fa = sock_connect();
    CHECK(bmp && fa >= 0 && sock_post(fa, "/v1/encode?timeout_ms=400", "image/bmp", bmp, n) == 0);
    usleep(1200000);
    resp b;
    CHECK(post("/v1/encode?timeout_ms=60000", "image/bmp", bmp, n, &b) == 0);
    int complete = 0;
    const int sa = fa >= 0 ? sock_status(fa, &complete) : -1;
    printf("a request joining a cancelled batch: answered %d (%.*s), the request whose deadline passed %d\n", b.status,
           b.status == 200 ? 0 : (int)b.len, b.body ? (const char *)b.body : "", sa);
    CHECK(b.status == 200);
    CHECK(sa == 503);
    resp_free(&b);
    free(bmp);
    CHECK(stop_server(pid) == 0);
}

/* ---- an item's message ----
 * A request whose item failed is answered with that item's message after "item N: " (results_of); the library's own
 * message of an item in a batch began with its label, "item K: " (K its index in the batch), so a cancelled item read
 * "item 0: item 0: encode cancelled before block 1 of 4". To get there the batch must be cancelled (its request's
 * deadline passed) and done before the notifier looks at the request, which then has all its items done and is
 * answered with their results rather than as out of time: the notifier is held QVL_SERVE_TEST_FIRE_MS (2.5 s) firing
 * the watch of request D (deadline 1 ms) while request A (deadline 400 ms) is cancelled, each block held
 * QVL_SERVE_TEST_BLOCK_MS (600 ms): A's batch is found dead at its second poll, 0.6 s in, and done 0.6 s later. */
static void cancelled_message(void) {
    const pid_t pid = start_hooked2("QVL_SERVE_TEST_BLOCK_MS", "600", "QVL_SERVE_TEST_FIRE_MS", "2500", NULL, 0);
    CHECK(pid > 0);
    if (pid <= 0) return;
    size_t na, nd;
    uint8_t *a = make_bmp(64, 64, 9200, &na), *d = make_bmp(64, 64, 9201, &nd);
    const int fa = sock_connect();
    CHECK(a && fa >= 0 && sock_post(fa, "/v1/encode?timeout_ms=400", "image/bmp", a, na) == 0);
    usleep(100000);
    const int fd = sock_connect();
    CHECK(d && fd >= 0 && sock_post(fd, "/v1/encode?timeout_ms=1", "image/bmp", d, nd) == 0);
    resp r;
    memset(&r, 0, sizeof r);
    if (fa >= 0) sock_answer(fa, &r);
    int complete = 0;
    const int sd = fd >= 0 ? sock_status(fd, &complete) : -1;
    printf("a cancelled item answered %d: %.*s (the other request %d)\n", r.status, (int)r.len,
           r.body ? (const char *)r.body : "", sd);
    CHECK(r.status == 503 && sd == 503);
    CHECK(r.body && strstr((const char *)r.body, "\"item 0: encode cancelled before ") != NULL);
    CHECK(r.body && strstr((const char *)r.body, "item 0: item") == NULL);
    resp_free(&r);
    free(a);
    free(d);
    CHECK(stop_server(pid) == 0);
}

/* ---- cache writes off the batcher ----
 * A result's cache write (qvl_cache_put: write, hash, rename, and any collection it sets off; 0.26 s for a 64 MiB
 * entry on the development VM) ran on the batcher thread after its batch, so the next batch waited for it. Each write
 * is held QVL_SERVE_TEST_PUT_MS (4 s) now: request A is answered before its write, request B for another image,
 * sent at once with a 2.5 s deadline, was answered 503 when its deadline passed during A's write; now the writer
 * thread holds A's write and B is encoded meanwhile: 200 well within its deadline. With --max-cache-writes 1, B's
 * write is skipped (A's holds the one place) and counted; A asked again during its write is answered from its result
 * in memory (a join: no second encode, X-Qvl-Cache miss), and from the cache once the write has landed. */
static void put_off_batcher(void) {
    char *extra[] = {"--max-cache-writes", "1"};
    const pid_t pid = start_hooked("QVL_SERVE_TEST_PUT_MS", "4000", extra, 2);
    CHECK(pid > 0);
    if (pid <= 0) return;
    size_t na, nb;
    uint8_t *a = make_bmp(64, 64, 9300, &na), *b = make_bmp(64, 64, 9301, &nb);
    resp ra, rb;
    char key[80] = "", v[32];
    CHECK(post("/v1/encode", "image/bmp", a, na, &ra) == 0 && ra.status == 200 && header(&ra, "X-Qvl-Key", key, sizeof key));
    const double t0 = tu_now();
    CHECK(post("/v1/encode?timeout_ms=2500", "image/bmp", b, nb, &rb) == 0);
    const double dt = tu_now() - t0;
    printf("a request sent while another's cache write is held 4 s: answered %d after %.2f s\n", rb.status, dt);
    CHECK(rb.status == 200 && dt < 2.0);
    const long encoded = metric_of("qvl_items_encoded_total");
    resp r;
    CHECK(post("/v1/encode", "image/bmp", a, na, &r) == 0 && r.status == 200);
    CHECK(r.status == 200 && r.len == ra.len && !memcmp(r.body, ra.body, r.len)); /* the same answer */
    CHECK(header(&r, "X-Qvl-Cache", v, sizeof v) && !strcmp(v, "miss"));
    resp_free(&r);
    const long skipped = metric_of("qvl_cache_puts_skipped_total{reason=\"queue_full\"}");
    printf("during the write: items encoded %ld (then %ld), writes skipped %ld\n", metric_of("qvl_items_encoded_total"),
           encoded, skipped);
    CHECK(encoded == 2 && metric_of("qvl_items_encoded_total") == 2 && skipped == 1);
    char path[200];
    snprintf(path, sizeof path, "/v1/cache/%s", key);
    int landed = 0;
    for (int i = 0; i < 200 && !landed; i++) { /* 20 s at most */
        CHECK(http("HEAD", path, auth, NULL, 0, &r) == 0);
        landed = r.status == 200;
        resp_free(&r);
        if (!landed) usleep(100000);
    }
    CHECK(landed);
    CHECK(post("/v1/encode", "image/bmp", a, na, &r) == 0 && r.status == 200);
    CHECK(header(&r, "X-Qvl-Cache", v, sizeof v) && !strcmp(v, "hit"));
    resp_free(&r);
    resp_free(&ra);
    resp_free(&rb);
    free(a);
    free(b);
    CHECK(stop_server(pid) == 0);
}

/* An entry of the test's cache (tmp/cache) exists for key. */
static int cached(const char *key) {
    char root[600];
    snprintf(root, sizeof root, "%s/cache", g_tmp);
    qvl_cache *c = NULL;
    qvl_cache_params p;
    qvl_cache_params_default(&p);
    p.existing = 1;
    if (qvl_cache_open(root, &p, &c, NULL) != QVL_OK) return 0;
    const int e = qvl_cache_exists(c, key, NULL);
    qvl_cache_close(c);
    return e;
}

/* ---- a decode nobody waits for ----
 * A worker decoding an item whose requests have all gone (their deadlines passed) stops: the decode polls
 * (qvl_plan_params.cancel_fn) between a PNG's reads. The first poll of each decode is followed by a hold of
 * QVL_SERVE_TEST_DECODE_MS (800 ms): request A (deadline 300 ms) is live at its item's first poll and gone at the
 * next, in libpng's first read: A is answered 503 at its deadline and the decode is counted cancelled. The same PNG
 * with a 60 s deadline afterwards is decoded anew (the cancelled job left the flight table) and encoded: 200. */
static void decode_cancelled(void) {
    const pid_t pid = start_hooked("QVL_SERVE_TEST_DECODE_MS", "800", NULL, 0);
    CHECK(pid > 0);
    if (pid <= 0) return;
    char path[1024];
    size_t n = 0;
    uint8_t *png = tu_read_file(tu_source_path("tests/data/photos/chelsea.png", path, sizeof path), &n);
    CHECK(png != NULL);
    resp a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    CHECK(png && post("/v1/encode?timeout_ms=300", "image/png", png, n, &a) == 0);
    usleep(1000000); /* the decode's second poll, 0.8 s in */
    const long cancelled = metric_of("qvl_decodes_cancelled_total");
    CHECK(png && post("/v1/encode?timeout_ms=60000", "image/png", png, n, &b) == 0);
    const long after = metric_of("qvl_decodes_cancelled_total");
    printf("a decode nobody waits for: answered %d, decodes cancelled %ld; the same image again: %d, cancelled %ld\n",
           a.status, cancelled, b.status, after);
    CHECK(a.status == 503 && cancelled == 1);
    CHECK(b.status == 200 && after == 1);
    resp_free(&a);
    resp_free(&b);
    free(png);
    CHECK(stop_server(pid) == 0);
}

/* A drain finishes the cache writes queued within --drain-timeout-s, then abandons the rest (a write begun
 * completes): two results, each write held `hold_ms`, then SIGTERM; the first is written either way, the second
 * only when the drain has time for it. */
static void drain_puts(const char *hold_ms, const char *drain_s, unsigned seed, int second_written) {
    char *extra[] = {"--drain-timeout-s", (char *)drain_s};
    const pid_t pid = start_hooked("QVL_SERVE_TEST_PUT_MS", hold_ms, extra, 2);
    CHECK(pid > 0);
    if (pid <= 0) return;
    char keys[2][80] = {"", ""};
    for (int i = 0; i < 2; i++) {
        size_t n;
        uint8_t *img = make_bmp(64, 64, seed + (unsigned)i, &n);
        resp r;
        CHECK(post("/v1/encode", "image/bmp", img, n, &r) == 0 && r.status == 200 &&
              header(&r, "X-Qvl-Key", keys[i], sizeof keys[i]));
        resp_free(&r);
        free(img);
    }
    const double t0 = tu_now();
    const int rc = stop_server(pid);
    const double dt = tu_now() - t0;
    const int c0 = cached(keys[0]), c1 = cached(keys[1]);
    printf("drain with writes held %s ms, --drain-timeout-s %s: exit %d after %.1f s, entries written %d %d\n",
           hold_ms, drain_s, rc, dt, c0, c1);
    CHECK(rc == 0 && dt < 20);
    CHECK(c0 && c1 == second_written);
    if (!second_written) {
        char cmd[800];
        snprintf(cmd, sizeof cmd, "grep -q '1 cache write abandoned' '%s/server.log'", g_tmp);
        CHECK(system(cmd) == 0);
    }
}

int main(void) {
#if !QVL_WITH_MEDIA
    printf("test_serve_races: skipped (no image decoding in this build)\n");
    return TU_SKIP;
#endif
    const char *bin = getenv("QVL_BIN"), *hooks = getenv("QVL_SERVE_HOOKS_BIN");
    char cmd[4096];
    if (!bin || !hooks) return TU_SKIP;
    snprintf(g_bin, sizeof g_bin, "%s", bin);
    snprintf(g_hooks, sizeof g_hooks, "%s", hooks);
    snprintf(cmd, sizeof cmd, "'%s' serve --help >/dev/null 2>&1", g_hooks);
    if (system(cmd) != 0) {
        printf("test_serve_races: skipped (no server built with test hooks)\n");
        return TU_SKIP;
    }
    signal(SIGPIPE, SIG_IGN);
    tu_tmpdir(g_tmp, sizeof g_tmp);
    snprintf(g_model, sizeof g_model, "%s/m", g_tmp);
    qvl_model *m = tu_synth_load(g_model, 7);
    if (!m) return tu_finish("test_serve_races");
    qvl_model_info mi;
    qvl_model_get_info(m, &mi);
    n_ds = mi.n_deepstack;
    out_hidden = mi.out_hidden;
    qvl_model_free(m);
    CHECK(small_pixel_budget(g_model));
    snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", g_key);

    drain_end_with("QVL_SERVE_TEST_SUSPEND_MS", 9001);
    drain_end_with("QVL_SERVE_TEST_FIRE_MS", 9002);
    drain_end_streaming(NULL, NULL);
    drain_end_streaming("QVL_SERVE_TEST_STREAM_SUSPEND_MS", "3000");
    clear_cache();
    stream_deadline();
    stream_joined_whole();
    stream_replanned();
    join_cancelled_batch();
    cancelled_message();
    decode_cancelled();
    put_off_batcher();
    drain_puts("1500", "30", 9400, 1);
    drain_puts("3000", "1", 9410, 0);

    if (tu_failures) {
        snprintf(cmd, sizeof cmd, "tail -30 '%s/server.log' >&2", g_tmp);
        if (system(cmd)) {}
    }
    tu_rmtree(g_tmp);
    return tu_finish("test_serve_races");
}
