/* test_serve_edges.c — `qvl serve`'s refusals and edges over loopback, each a regression (the client and the server
 * process: serve_client.c; a synthetic tiny checkpoint; the media root a directory of the test's own):
 *   - a `path` item naming a directory of frames is refused with 400 (the library would have read its entries, links
 *     out of the root among them, by name)
 *   - a path outside the root is 400 by its name alone, whether it exists or not (no existence oracle)
 *   - a path item's file swapped for a link to a file outside the root once its request is admitted: the answer
 *     and the cache entry are the key and the embeddings of the file under the root; a link in the name is 400
 *   - no API key, no route, a wrong method, a raw image over the item limit: answered on the headers, before any of
 *     the body is read (no 100 Continue)
 *   - /v1/vllm/image_embeds refuses a video found from its bytes (415), whatever type it was sent as
 *   - --max-batch-items above its bound is a usage error (it was taken, and the server never encoded)
 *   - --max-queue-items bounds the items a request adds to the queue: cache hits and repeats are not refused
 *   - a request answered 503 for its deadline counts in qvl_rejected_requests_total{reason="deadline"}
 *   - X-Qvl-Cache is hit, partial or miss as all, some or none of a request's items came from the cache
 *   - SIGTERM with a client whose body stopped midway (FIN sent): exit within seconds (it was 61), while a body still
 *     coming is waited for and answered
 * Every loop is bounded in count and time. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "qvl.h"
#include "serve_client.h"
#include "testutil.h"

static char g_tmp[512], g_media[700];

/* POST /v1/encode{query} of {"items": [{"path": p}]}. */
static int post_path(const char *query, const char *p, resp *r) {
    char body[2048], url[256];
    int n = snprintf(body, sizeof body, "{\"items\": [{\"path\": \"%s\"}]}", p);
    snprintf(url, sizeof url, "/v1/encode%s", query ? query : "");
    return post(url, "application/json", body, (size_t)n, r);
}

/* A GIF of a w x w logical screen holding one 1x1 frame of colour `seed`: under 40 bytes, which the decoder turns
 * into a w x w canvas that preprocessing then resizes down to the model's 256² budget (slow for a large w). */
static uint8_t *make_big_gif(int w, unsigned seed, size_t *len) {
    static const uint8_t frame[] = {0x2c, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 0x01, 0, 0x3b};
    uint8_t *g = malloc(6 + 7 + 6 + sizeof frame);
    if (!g) return NULL;
    memcpy(g, "GIF89a", 6);
    const uint8_t screen[] = {(uint8_t)w, (uint8_t)(w >> 8), (uint8_t)w, (uint8_t)(w >> 8), 0x80, 0, 0};
    memcpy(g + 6, screen, 7);
    const uint8_t colours[] = {(uint8_t)seed, (uint8_t)(seed >> 8), (uint8_t)(seed * 7), 0, 0, 0};
    memcpy(g + 13, colours, 6);
    memcpy(g + 19, frame, sizeof frame);
    *len = 19 + sizeof frame;
    return g;
}

/* A directory of frames as a path item: 400 naming the directory (before, the library read it as one video). */
static void frames_directory(void) {
    char dir[800];
    snprintf(dir, sizeof dir, "%s/frames", g_media);
    resp r;
    CHECK(post_path(NULL, dir, &r) == 0 && err_is(&r, 400, "invalid_request") && body_names(&r, "directory"));
    resp_free(&r);
}

/* A path outside the root is refused by its name, whether or not it exists: 400 both ways (an existence oracle
 * before, which resolved the path first and answered 422 "No such file" for a missing one). Inside, a missing file
 * is still 422. */
static void outside_names(void) {
    char p[900];
    const char *outside[] = {"/nowhere/x.png", "/m/config.json", "/media/../nowhere.png",
                             "/media/frames/../../m/config.json", "/media/./..//m/config.json"};
    for (size_t i = 0; i < sizeof outside / sizeof *outside; i++) {
        snprintf(p, sizeof p, "%s%s", g_tmp, outside[i]);
        resp r;
        CHECK(post_path(NULL, p, &r) == 0 && err_is(&r, 400, "invalid_request") &&
              body_names(&r, "not under the allowed media path"));
        resp_free(&r);
    }
    snprintf(p, sizeof p, "%s/nowhere.png", g_media);
    resp r;
    CHECK(post_path(NULL, p, &r) == 0 && err_is(&r, 422, "undecodable_item") && body_names(&r, "No such file"));
    resp_free(&r);
}

/* /v1/vllm/image_embeds takes images only, told by their bytes: an MP4 sent as image/png, as a data URL of type
 * image/png or as a path item is 415 (it was encoded as a video, grid t > 1, when only a declared video type was
 * refused); a PNG is still answered. */
static void vllm_images_only(void) {
    char src[600], p[800], body[8192];
    size_t n, bl;
    uint8_t *mp4 = tu_read_file(tu_source_path("tests/data/video/video_3frames.mp4", src, sizeof src), &n);
    CHECK(mp4 != NULL);
    if (!mp4) return;
    snprintf(p, sizeof p, "%s/clip.mp4", g_media);
    CHECK(tu_write_file(p, mp4, n));
    resp r;
    CHECK(post("/v1/vllm/image_embeds", "image/png", mp4, n, &r) == 0 && err_is(&r, 415, "unsupported_media_type"));
    resp_free(&r);
    char *b64 = b64_of(mp4, n, &bl);
    int k = snprintf(body, sizeof body, "{\"items\": [{\"data\": \"data:image/png;base64,%s\"}]}", b64 ? b64 : "");
    CHECK(post("/v1/vllm/image_embeds", "application/json", body, (size_t)k, &r) == 0 &&
          err_is(&r, 415, "unsupported_media_type"));
    resp_free(&r);
    k = snprintf(body, sizeof body, "{\"items\": [{\"path\": \"%s\"}]}", p);
    CHECK(post("/v1/vllm/image_embeds", "application/json", body, (size_t)k, &r) == 0 &&
          err_is(&r, 415, "unsupported_media_type") && body_names(&r, "takes one image"));
    resp_free(&r);
    free(b64);
    free(mp4);
    uint8_t *png = tu_read_file(tu_source_path("tests/data/video/frames/video_frame_0.png", src, sizeof src), &n);
    CHECK(png && post("/v1/vllm/image_embeds", "image/png", png, n, &r) == 0 && r.status == 200 &&
          body_names(&r, "\"image_embeds\""));
    resp_free(&r);
    free(png);
}

/* ---- the queue's item bound counts what a request adds to the queue ----
 * With --max-queue-items 1: two new items in one request are 413 (they could never be queued), but two items both in
 * the cache are answered (hits add nothing to the queue), and so is one new item given twice (it is queued once).
 * Before, the request's raw item count was held against the bound before the cache was looked at: 413 for both. */
static int cached(const char *key) {
    char url[128];
    snprintf(url, sizeof url, "/v1/cache/%s", key);
    for (int w = 0; w < 500; w++, usleep(10000)) { /* written once the answer is out: 5 s at most */
        resp r;
        const int there = http("HEAD", url, auth, NULL, 0, &r) == 0 && r.status == 200;
        resp_free(&r);
        if (there) return 1;
    }
    return 0;
}

static void queue_counts_added(void) {
    uint8_t *img[3];
    size_t len[3], bl;
    for (int i = 0; i < 3; i++) img[i] = make_bmp(64, 64, (unsigned)(700 + i), &len[i]);
    resp r;
    char *body = json_items(img, len, 2, &bl);
    CHECK(body && post("/v1/encode", "application/json", body, bl, &r) == 0 && err_is(&r, 413, "too_large"));
    resp_free(&r);
    for (int i = 0; i < 2; i++) {
        char key[80] = "";
        CHECK(post("/v1/encode", "image/bmp", img[i], len[i], &r) == 0 && r.status == 200 &&
              header(&r, "X-Qvl-Key", key, sizeof key) && cached(key));
        resp_free(&r);
    }
    char hv[16];
    CHECK(post("/v1/encode", "application/json", body, bl, &r) == 0 && r.status == 200 &&
          header(&r, "X-Qvl-Cache", hv, sizeof hv) && !strcmp(hv, "hit"));
    if (r.status != 200) fprintf(stderr, "  two cache hits: %d %.200s\n", r.status, r.body ? (char *)r.body : "");
    resp_free(&r);
    free(body);
    uint8_t *twice[2] = {img[2], img[2]};
    size_t tl[2] = {len[2], len[2]};
    body = json_items(twice, tl, 2, &bl);
    CHECK(body && post("/v1/encode", "application/json", body, bl, &r) == 0 && r.status == 200);
    resp_free(&r);
    free(body);
    for (int i = 0; i < 3; i++) free(img[i]);
}

/* ---- metrics and headers ---- */

/* A request answered 503 for its deadline counts once in qvl_rejected_requests_total{reason="deadline"} (it never
 * counted: not when the wait ran out, nor when a worker dropped the item, and the batcher counted jobs, not requests,
 * only while someone still waited). A GIF of a 2000² screen takes far longer than 1 ms to preprocess. */
static void deadline_counted(void) {
    const char *name = "qvl_rejected_requests_total{reason=\"deadline\"}";
    const long before = metric_of(name);
    for (int i = 0; i < 2; i++) {
        size_t gl, bl;
        uint8_t *gif = make_big_gif(2000, (unsigned)(40 + i), &gl);
        resp r;
        if (i == 0) {
            CHECK(gif && post("/v1/encode?timeout_ms=1", "image/gif", gif, gl, &r) == 0 &&
                  err_is(&r, 503, "unavailable"));
        } else {
            char body[512], *b64 = gif ? b64_of(gif, gl, &bl) : NULL;
            int n = snprintf(body, sizeof body,
                             "{\"timeout_ms\": 1, \"items\": [{\"data\": \"data:image/gif;base64,%s\"}]}", b64 ? b64 : "");
            CHECK(post("/v1/encode", "application/json", body, (size_t)n, &r) == 0 && err_is(&r, 503, "unavailable"));
            free(b64);
        }
        resp_free(&r);
        free(gif);
    }
    const long after = metric_of(name);
    printf("deadline: rejected{reason=\"deadline\"} %ld -> %ld over two requests past their deadline\n", before,
           after);
    CHECK(before >= 0 && after == before + 2);
}

/* X-Qvl-Cache speaks for every item of the request: hit when all came from the cache, miss when none, partial for
 * some (it said res[0]'s: "hit" for a first item cached and a second encoded). */
static void cache_header(void) {
    uint8_t *img[4];
    size_t len[4], bl;
    for (int i = 0; i < 4; i++) img[i] = make_bmp(64, 64, (unsigned)(800 + i), &len[i]);
    resp r;
    char key[80] = "", hv[16];
    CHECK(post("/v1/encode", "image/bmp", img[0], len[0], &r) == 0 && r.status == 200 &&
          header(&r, "X-Qvl-Key", key, sizeof key));
    resp_free(&r);
    CHECK(cached(key));
    static const char *want[] = {"partial", "hit"};
    for (int round = 0; round < 2; round++) { /* [cached, new], then both cached */
        char *body = json_items(img, len, 2, &bl);
        CHECK(body && post("/v1/encode", "application/json", body, bl, &r) == 0 && r.status == 200 &&
              header(&r, "X-Qvl-Cache", hv, sizeof hv));
        printf("X-Qvl-Cache of two items, %s: %s\n", round ? "both cached" : "the first cached", hv);
        CHECK(!strcmp(hv, want[round]));
        resp_free(&r);
        free(body);
        if (!round) {
            CHECK(post("/v1/encode", "image/bmp", img[1], len[1], &r) == 0 && r.status == 200 &&
                  header(&r, "X-Qvl-Key", key, sizeof key));
            resp_free(&r);
            CHECK(cached(key));
        }
    }
    char *body = json_items(img + 2, len + 2, 2, &bl);
    CHECK(body && post("/v1/encode", "application/json", body, bl, &r) == 0 && r.status == 200 &&
          header(&r, "X-Qvl-Cache", hv, sizeof hv) && !strcmp(hv, "miss"));
    resp_free(&r);
    free(body);
    for (int i = 0; i < 4; i++) free(img[i]);
}

/* ---- the drain and a body that stopped coming ----
 * A client that sent headers, part of its body and its FIN in one burst is never noticed as gone by libmicrohttpd
 * (0.9.75) before its 60 s connection timeout (nothing else wakes the polling thread that holds it), and the drain
 * waited for it: the server exited a minute after SIGTERM with nothing to do. Now a drain waits for a request still
 * receiving its body only while the body keeps coming: the server exits within seconds. And a client whose body is
 * still coming at SIGTERM is waited for and answered 200. */

/* SIGTERM to pid and its exit status once it exits (30 s at most, then SIGKILL: -1), the seconds it took in *dt. */
static int drain_exit(pid_t pid, double *dt) {
    const double t0 = tu_now();
    kill(pid, SIGTERM);
    int ws = 0, exited = 0;
    while (!exited && tu_now() - t0 < 30) {
        exited = waitpid(pid, &ws, WNOHANG) == pid;
        if (!exited) usleep(20000);
    }
    *dt = tu_now() - t0;
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &ws, 0);
        return -1;
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static void drain_stalled_body(pid_t pid) {
    int fd = connect_to_server(30);
    CHECK(fd >= 0);
    uint8_t burst[4096];
    int k = snprintf((char *)burst, sizeof burst, "POST /v1/encode HTTP/1.1\r\nHost: 127.0.0.1\r\n%s"
                     "Content-Type: image/bmp\r\nContent-Length: 10000\r\n\r\n", auth);
    memset(burst + k, 0x42, 3000);
    /* corked: the bytes and the FIN leave in one segment, so the server's one read finds them together */
    const int one = 1;
    CHECK(fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one) == 0);
    CHECK(fd >= 0 && send(fd, burst, (size_t)k + 3000, MSG_NOSIGNAL) == k + 3000 && shutdown(fd, SHUT_WR) == 0);
    usleep(300000);
    double dt;
    const int rc = drain_exit(pid, &dt);
    printf("drain with a body stopped midway (FIN sent): exit %d after %.1f s\n", rc, dt);
    CHECK(rc == 0 && dt < 10);
    if (fd >= 0) close(fd);
}

static void drain_slow_body(pid_t pid) {
    size_t n;
    uint8_t *bmp = make_bmp(64, 64, 4242, &n);
    int fd = connect_to_server(30);
    CHECK(bmp && fd >= 0);
    if (!bmp || fd < 0) {
        if (fd >= 0) close(fd);
        free(bmp);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return;
    }
    char h[512];
    int k = snprintf(h, sizeof h, "POST /v1/encode HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Type: image/bmp\r\nContent-Length: %zu\r\n\r\n", auth, n);
    CHECK(send(fd, h, (size_t)k, MSG_NOSIGNAL) == k && send(fd, bmp, n / 2, MSG_NOSIGNAL) == (ssize_t)(n / 2));
    usleep(300000);
    kill(pid, SIGTERM);
    usleep(500000); /* the rest of the body, half a second into the drain */
    CHECK(send(fd, bmp + n / 2, n - n / 2, MSG_NOSIGNAL) == (ssize_t)(n - n / 2));
    resp r;
    const int st = sock_answer(fd, &r);
    resp_free(&r);
    double dt;
    const int rc = drain_exit(pid, &dt);
    printf("drain with a body still coming: answered %d, exit %d\n", st, rc);
    CHECK(st == 200 && rc == 0);
    free(bmp);
}

/* ---- refused on the headers ----
 * The first line the server sends for a request's headers alone (Expect: 100-continue, no byte of the body sent),
 * in line; 0, or -1 when nothing came within 10 s. */
static int first_line(const char *method, const char *url, const char *extra, size_t content_length, char *line,
                      size_t cap) {
    int fd = connect_to_server(10);
    if (fd < 0) return -1;
    char h[1024];
    int k = snprintf(h, sizeof h, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: %zu\r\n"
                                  "Expect: 100-continue\r\n\r\n", method, url, extra, content_length);
    ssize_t n = send(fd, h, (size_t)k, MSG_NOSIGNAL) == k ? recv(fd, line, cap - 1, 0) : -1;
    close(fd);
    if (n <= 0) return -1;
    line[n] = 0;
    line[strcspn(line, "\r\n")] = 0;
    return 0;
}

/* Refusals that need no body come before it is read: no 100 Continue, so a client without the API key (or with a
 * wrong route or method, or a raw item over the item limit) cannot have the server buffer a body. Before, the key
 * was checked once the whole body (up to --max-body) was in. A body the server takes still gets its 100. */
static void refused_on_headers(void) {
    char line[256], hv[512];
    CHECK(first_line("POST", "/v1/encode", "Content-Type: image/png\r\n", 900000, line, sizeof line) == 0 &&
          !strncmp(line, "HTTP/1.1 401", 12));
    printf("no API key, a 900000-byte body announced: '%s'\n", line);
    snprintf(hv, sizeof hv, "%sContent-Type: image/png\r\n", auth);
    CHECK(first_line("POST", "/nope", hv, 900000, line, sizeof line) == 0 && !strncmp(line, "HTTP/1.1 404", 12));
    CHECK(first_line("PUT", "/v1/encode", hv, 900000, line, sizeof line) == 0 && !strncmp(line, "HTTP/1.1 405", 12));
    CHECK(first_line("POST", "/v1/encode", hv, 900000, line, sizeof line) == 0 &&
          !strncmp(line, "HTTP/1.1 100", 12));
}

/* On a server whose item limit (--limit max_input_bytes=100000) is below its body limit (1M): a raw image body
 * announced over the item limit is 413 on its headers (it was read whole first); a JSON body of that size is not. */
static void raw_over_item_limit(void) {
    char line[256], hv[512];
    snprintf(hv, sizeof hv, "%sContent-Type: image/png\r\n", auth);
    CHECK(first_line("POST", "/v1/encode", hv, 200000, line, sizeof line) == 0 && !strncmp(line, "HTTP/1.1 413", 12));
    printf("a raw 200000-byte body over the 100000-byte item limit: '%s'\n", line);
    CHECK(first_line("POST", "/v1/vllm/image_embeds", hv, 200000, line, sizeof line) == 0 &&
          !strncmp(line, "HTTP/1.1 413", 12));
    snprintf(hv, sizeof hv, "%sContent-Type: application/json\r\n", auth);
    CHECK(first_line("POST", "/v1/encode", hv, 200000, line, sizeof line) == 0 && !strncmp(line, "HTTP/1.1 100", 12));
    /* the same limit on a raw body sent whole */
    size_t n = 150000;
    uint8_t *z = calloc(1, n);
    resp r;
    CHECK(z && post("/v1/encode", "image/png", z, n, &r) == 0 && err_is(&r, 413, "too_large") &&
          body_names(&r, "item limit"));
    resp_free(&r);
    free(z);
}

/* ---- a path item's file swapped once its request is admitted ----
 * media/p.bmp is a hard link to one of N_SWAP images under the root when a request {"items": [<two fresh GIFs of a
 * 2000² screen>, {"path": "media/p.bmp"}], "layout": "split"} is sent; once /metrics shows its items queued (keys
 * computed), p.bmp is replaced (rename) by a symbolic link to an image outside the root, while the one worker still
 * resizes the GIFs. The answer must be the key and the embeddings of the image under the root, bit for bit as `qvl
 * encode` gives them, and that image sent as bytes afterwards a cache hit with the same embeddings. When the server
 * checked the name and reopened it on the worker, the answer had the inside image's key and the outside image's
 * embeddings, and the cache kept them under that key. A link named by the request itself is refused (400). */
enum { N_SWAP = 6, N_FILL = 2 };

/* The split answer's item `i` against reference item `ref`: the same token count and rows, plane by plane. */
static int same_split_item(const st_file *f, int i, const ref_item *ref) {
    const st_tensor *e = st_find(f, "embeddings"), *d = st_find(f, "deepstack"), *o = st_find(f, "offsets");
    if (!e || !o || (n_ds && !d) || o->shape[0] <= i + 1 || e->shape[1] != out_hidden || out_hidden < 1) return 0;
    const int64_t *off = o->data;
    const size_t O = (size_t)out_hidden, N = (size_t)e->shape[0], t0 = (size_t)off[i];
    const size_t nt = (size_t)(off[i + 1] - off[i]);
    if (nt != ref->tokens || memcmp((const float *)e->data + t0 * O, ref->merged, nt * O * 4)) return 0;
    for (int q = 0; q < n_ds; q++)
        if (!ref->ds[q] || memcmp((const float *)d->data + ((size_t)q * N + t0) * O, ref->ds[q], nt * O * 4)) return 0;
    return 1;
}

static void swapped_file(const char *bin, const char *model) {
    char target[800], tmp[800], outside[800], x[N_SWAP][800];
    snprintf(target, sizeof target, "%s/p.bmp", g_media);
    snprintf(tmp, sizeof tmp, "%s/.p-next", g_media);
    snprintf(outside, sizeof outside, "%s/outside.bmp", g_tmp);
    uint8_t *img[N_SWAP + 1];
    size_t len[N_SWAP + 1];
    char cmd[8192], ref_path[700];
    snprintf(ref_path, sizeof ref_path, "%s/swap-ref.safetensors", g_tmp);
    int k = snprintf(cmd, sizeof cmd, "'%s' encode -q --model '%s' -o '%s'", bin, model, ref_path);
    for (int i = 0; i <= N_SWAP; i++) { /* the last one is the outside image */
        img[i] = make_bmp(64, 64, (unsigned)(300 + i), &len[i]);
        if (i < N_SWAP) snprintf(x[i], sizeof x[i], "%s/x%d.bmp", g_media, i);
        const char *to = i < N_SWAP ? x[i] : outside;
        CHECK(img[i] && tu_write_file(to, img[i], len[i]));
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " '%s'", to);
    }
    CHECK(system(cmd) == 0);
    st_file *ref = NULL;
    qvl_error err;
    CHECK(st_load(ref_path, SIZE_MAX, &ref, &err) == QVL_OK);
    if (!ref) return;
    ref_item ri[N_SWAP + 1];
    for (int i = 0; i <= N_SWAP; i++) ref_of(ref, i, &ri[i]);
    /* a link named in the request: not followed, even to a file under the root */
    resp r;
    CHECK(symlink(x[0], target) == 0);
    CHECK(post_path(NULL, target, &r) == 0 && err_is(&r, 400, "invalid_request") && body_names(&r, "symbolic link"));
    resp_free(&r);
    int ok = 0, bad = 0, in_time = 0;
    for (int i = 0; i < N_SWAP; i++) {
        unlink(tmp);
        CHECK(link(x[i], tmp) == 0 && rename(tmp, target) == 0);
        char body[4096];
        int n = snprintf(body, sizeof body, "{\"layout\": \"split\", \"items\": [");
        for (int q = 0; q < N_FILL; q++) {
            size_t gl, bl;
            uint8_t *gif = make_big_gif(2000 + q, (unsigned)(900 + N_FILL * i + q), &gl);
            char *b64 = gif ? b64_of(gif, gl, &bl) : NULL;
            n += snprintf(body + n, sizeof body - (size_t)n, "{\"data\": \"data:image/gif;base64,%s\"}, ",
                          b64 ? b64 : "");
            free(gif), free(b64);
        }
        n += snprintf(body + n, sizeof body - (size_t)n, "{\"path\": \"%s\"}]}", target);
        int fd = sock_connect();
        CHECK(fd >= 0 && sock_post(fd, "/v1/encode", "application/json", body, (size_t)n) == 0);
        long q = 0;
        for (int w = 0; fd >= 0 && w < 5000 && (q = metric_of("qvl_queue_items")) <= 0; w++) usleep(200);
        unlink(tmp);
        CHECK(symlink(outside, tmp) == 0 && rename(tmp, target) == 0);
        in_time += q > 0 && metric_of("qvl_queue_items") > 0; /* the worker had items left after the swap */
        memset(&r, 0, sizeof r);
        const int st = fd >= 0 ? sock_answer(fd, &r) : 0, complete = r.complete;
        st_file *f = NULL;
        const char *key = NULL;
        int j = -1;
        char kn[32];
        snprintf(kn, sizeof kn, "item%d.key", N_FILL);
        if (st == 200 && complete && st_parse(r.body, r.len, "answer", &f, &err) == QVL_OK && (key = st_meta(f, kn)))
            for (int c = 0; c <= N_SWAP; c++)
                if (ri[c].key && !strcmp(key, ri[c].key)) j = c;
        if (j == i && same_split_item(f, N_FILL, &ri[i])) {
            ok++;
        } else {
            bad++;
            const char *what = j == N_SWAP ? "the outside image's"
                               : j != i    ? "not the inside image's"
                               : same_split_item(f, N_FILL, &ri[N_SWAP])
                                   ? "the inside image's, with the outside image's embeddings"
                                   : "the inside image's, with other embeddings";
            fprintf(stderr, "  swap %d: status %d, key %s: %s\n", i, st, key ? key : "-", what);
        }
        st_close(f);
        resp_free(&r);
    }
    printf("swapped file: %d answered right, %d wrong; %d of %d swapped while items were queued\n", ok, bad, in_time,
           N_SWAP);
    CHECK(bad == 0 && ok == N_SWAP);
    /* the cache holds each inside image's own embeddings under its key (written once the answer has gone out:
     * waited for, 5 s at most) */
    for (int i = 0; i < N_SWAP; i++) {
        char hv[16], url[128];
        st_file *f = NULL;
        snprintf(url, sizeof url, "/v1/cache/%s", ri[i].key ? ri[i].key : "");
        for (int w = 0; w < 500; w++, usleep(10000)) {
            const int there = http("HEAD", url, auth, NULL, 0, &r) == 0 && r.status == 200;
            resp_free(&r);
            if (there) break;
        }
        CHECK(post("/v1/encode?layout=split", "image/bmp", img[i], len[i], &r) == 0 && r.status == 200 &&
              header(&r, "X-Qvl-Cache", hv, sizeof hv) && !strcmp(hv, "hit") &&
              st_parse(r.body, r.len, "answer", &f, &err) == QVL_OK && same_split_item(f, 0, &ri[i]));
        st_close(f);
        resp_free(&r);
    }
    unlink(target);
    for (int i = 0; i <= N_SWAP; i++) free(img[i]);
    st_close(ref);
}

int main(void) {
#if !QVL_WITH_MEDIA
    printf("test_serve_edges: skipped (no image decoding in this build)\n");
    return TU_SKIP;
#endif
    const char *bin = getenv("QVL_BIN");
    char cmd[4096];
    if (!bin) return TU_SKIP;
    snprintf(cmd, sizeof cmd, "'%s' serve --help >/dev/null 2>&1", bin);
    if (system(cmd) != 0) {
        printf("test_serve_edges: skipped (qvl built without the server)\n");
        return TU_SKIP;
    }
    signal(SIGPIPE, SIG_IGN);
    char model[600];
    tu_tmpdir(g_tmp, sizeof g_tmp);
    snprintf(model, sizeof model, "%s/m", g_tmp);
    qvl_model *m = tu_synth_load(model, 7);
    if (!m) return tu_finish("test_serve_edges");
    qvl_model_info mi;
    qvl_model_get_info(m, &mi);
    n_ds = mi.n_deepstack;
    out_hidden = mi.out_hidden;
    qvl_model_free(m);
    /* The media root: two frames of one size in frames/. */
    snprintf(g_media, sizeof g_media, "%s/media", g_tmp);
    CHECK(mkdir(g_media, 0755) == 0);
    CHECK(mkdir(tu_path(g_media, "frames"), 0755) == 0);
    /* encodes quick, a large image slow only to resize */
    CHECK(small_pixel_budget(model));
    for (int i = 0; i < 2; i++) {
        char src[600], name[64];
        snprintf(name, sizeof name, "tests/data/video/frames/video_frame_%d.png", i);
        size_t n;
        uint8_t *b = tu_read_file(tu_source_path(name, src, sizeof src), &n);
        snprintf(name, sizeof name, "frames/%d.png", i);
        CHECK(b && tu_write_file(tu_path(g_media, name), b, n));
        free(b);
    }

    char *extra[] = {"--max-body", "1M", "--allowed-media-path", g_media};
    pid_t pid = start_server(g_tmp, model, extra, 4);
    CHECK(pid > 0);
    if (pid <= 0) {
        snprintf(cmd, sizeof cmd, "cat '%s/server.log' >&2", g_tmp);
        if (system(cmd)) {}
        tu_rmtree(g_tmp);
        return tu_finish("test_serve_edges");
    }
    snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", g_key);
    frames_directory();
    outside_names();
    refused_on_headers();
    vllm_images_only();
    deadline_counted();
    cache_header();
    CHECK(stop_server(pid) == 0);

    char *ex2[] = {"--max-body", "1M", "--limit", "max_input_bytes=100000"};
    pid = start_server(g_tmp, model, ex2, 4);
    CHECK(pid > 0);
    if (pid > 0) {
        raw_over_item_limit();
        CHECK(stop_server(pid) == 0);
    }

    /* One worker, so that a request's first item holds its second back. */
    char *ex1[] = {"--max-body", "8M", "--allowed-media-path", g_media, "--workers", "1"};
    pid = start_server(g_tmp, model, ex1, 6);
    CHECK(pid > 0);
    if (pid > 0) {
        swapped_file(bin, model);
        CHECK(stop_server(pid) == 0);
    }

    char *ex4[] = {"--max-queue-items", "1", "--workers", "1"};
    pid = start_server(g_tmp, model, ex4, 4);
    CHECK(pid > 0);
    if (pid > 0) {
        queue_counts_added();
        CHECK(stop_server(pid) == 0);
    }

    pid = start_server(g_tmp, model, NULL, 0);
    CHECK(pid > 0);
    if (pid > 0) drain_stalled_body(pid);
    pid = start_server(g_tmp, model, NULL, 0);
    CHECK(pid > 0);
    if (pid > 0) drain_slow_body(pid);

    /* --max-batch-items: 1T was taken, the batcher's slots failed to allocate and it stopped at once, yet the server
     * said ready and every encode waited for its deadline; now a usage error (exit 2) above 65536, and 65536 is
     * served. `timeout`: a server that starts anyway is stopped, and fails the check. */
    {
        const char *bad[] = {"1T", "65537", "0"};
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            snprintf(cmd, sizeof cmd, "timeout -s KILL 20 '%s' serve --model '%s' --port 0 --max-batch-items %s "
                     "2>/dev/null", bin, model, bad[i]);
            const int st = system(cmd);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        }
        char *ex3[] = {"--max-batch-items", "65536"};
        pid = start_server(g_tmp, model, ex3, 2);
        CHECK(pid > 0);
        size_t n;
        uint8_t *bmp = make_bmp(64, 64, 77, &n);
        resp r;
        CHECK(pid > 0 && post("/v1/encode?timeout_ms=20000", "image/bmp", bmp, n, &r) == 0 && r.status == 200);
        resp_free(&r);
        free(bmp);
        if (pid > 0) CHECK(stop_server(pid) == 0);
    }

    if (tu_failures) {
        snprintf(cmd, sizeof cmd, "tail -20 '%s/server.log' >&2", g_tmp);
        if (system(cmd)) {}
    }
    tu_rmtree(g_tmp);
    return tu_finish("test_serve_edges");
}
