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
 * Every wait is bounded. */
#include <signal.h>
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
