/* test_serve_helpers.c — the parsing helpers of `qvl serve` (tools/serve/serve_parse.c): base64 both ways, cache
 * keys (the path component of GET /v1/cache/KEY), media types; and admission's estimate of an item's patches from
 * its header (tools/serve/serve_admit.c) against the grid the decoder and preprocessing give, for every test image;
 * path items' names normalised and placed under the allowed root, and their files read beneath it following no link,
 * with every refusal (tools/serve/serve_path.c).
 * The cache itself is libqvl's (tests/unit/test_cache.c); size strings are `qvl cache`'s (tests/cli_cache.sh). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve.h"
#include "serve_batch.h"
#include "testutil.h"

/* The estimate is the decoded grid's patches for every image the decoder reads (as bytes and as a path); bytes
 * without a header it knows, a truncated header, a zero side and a video get the bound; nothing exceeds the cap. */
static void admission_estimates(void) {
    qvl_preprocess_params pp;
    qvl_preprocess_params_init(&pp, sizeof pp);
    const size_t P2 = (size_t)pp.patch * (size_t)pp.patch, cap = 1u << 20;
    const size_t img_bound = (size_t)(pp.max_pixels / P2 + 1), vid_bound = (size_t)(pp.video_max_pixels / P2 + 1);
    const size_t unknown = img_bound > vid_bound ? img_bound : vid_bound;
    char dir[4096], path[4400];
    tu_source_path("tests/data/images", dir, sizeof dir);
    DIR *dd = opendir(dir);
    CHECK(dd != NULL);
    int n_img = 0;
    for (struct dirent *e; dd && (e = readdir(dd));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        qvl_image img;
        qvl_error err;
        qvl_grid g;
        if (qvl_image_load(path, NULL, &img, &err) != QVL_OK) {
            CHECK(err.status == QVL_ERR_UNSUPPORTED); /* a build without media decoders */
            continue;
        }
        CHECK(qvl_image_grid(&img, &pp, &g, &err) == QVL_OK);
        qvl_image_free(&img);
        size_t n;
        uint8_t *d = tu_read_file(path, &n);
        CHECK(d != NULL);
        const size_t want = (size_t)g.t * (size_t)g.h * (size_t)g.w;
        const size_t by_bytes = srv_estimate_patches(&pp, cap, SRV_MEDIA_IMAGE, d, n, NULL);
        const size_t by_path = srv_estimate_patches(&pp, cap, SRV_MEDIA_IMAGE, NULL, 0, path);
        if (by_bytes != want || by_path != want)
            printf("%s: grid %dx%dx%d (%zu patches), estimated %zu from the bytes, %zu from the path\n", e->d_name,
                   (int)g.t, (int)g.h, (int)g.w, want, by_bytes, by_path);
        CHECK(by_bytes == want && by_path == want);
        CHECK(srv_estimate_patches(&pp, 7, SRV_MEDIA_IMAGE, d, n, NULL) == (want < 7 ? want : 7)); /* the cap */
        CHECK(srv_is_image(d, n)); /* what the vLLM endpoint takes */
        free(d);
        n_img++;
    }
    if (dd) closedir(dd);
    printf("test_serve_helpers: %d test images estimated exactly\n", n_img);
    /* hand-made headers */
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                                  0, 0, 0x02, 0x80, 0, 0, 0x01, 0xe0, 8, 2, 0, 0, 0};
    uint32_t w = 0, h = 0;
    CHECK(srv_header_dims(png, sizeof png, &w, &h) == 0 && w == 640 && h == 480);
    CHECK(srv_estimate_patches(&pp, cap, SRV_MEDIA_IMAGE, png, sizeof png, NULL) == 40 * 30);
    CHECK(srv_header_dims(png, 23, &w, &h) == -1); /* IHDR cut short */
    CHECK(srv_estimate_patches(&pp, cap, SRV_MEDIA_IMAGE, png, 23, NULL) == (unknown < cap ? unknown : cap));
    uint8_t zero[sizeof png];
    memcpy(zero, png, sizeof png);
    zero[18] = zero[19] = 0; /* width 0 */
    CHECK(srv_header_dims(zero, sizeof zero, &w, &h) == -1);
    CHECK(srv_estimate_patches(&pp, cap, SRV_MEDIA_VIDEO, png, sizeof png, NULL) == (vid_bound < cap ? vid_bound : cap));
    CHECK(srv_estimate_patches(&pp, 100, SRV_MEDIA_IMAGE, (const uint8_t *)"hello", 5, NULL) == 100);
    CHECK(srv_estimate_patches(&pp, cap, SRV_MEDIA_IMAGE, NULL, 0, "/nonexistent/qvl") == (unknown < cap ? unknown : cap));
    /* JPEG: SOF0 after an APP0 segment; a segment length running past the bytes; a restart marker run */
    static const uint8_t jpg[] = {0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0, 0xff, 0xc0, 0, 11, 8, 0x01, 0x00, 0x02, 0x00, 3,
                                  0, 0, 0, 0, 0, 0};
    CHECK(srv_header_dims(jpg, sizeof jpg, &w, &h) == 0 && w == 512 && h == 256);
    static const uint8_t jpg_long[] = {0xff, 0xd8, 0xff, 0xe1, 0xff, 0xff, 0, 0, 0, 0, 0, 0};
    CHECK(srv_header_dims(jpg_long, sizeof jpg_long, &w, &h) == -1);
    static const uint8_t bmp_neg[26] = {'B', 'M', [18] = 0x10, [22] = 0xf0, 0xff, 0xff, 0xff}; /* height -16: top-down */
    CHECK(srv_header_dims(bmp_neg, sizeof bmp_neg, &w, &h) == 0 && w == 16 && h == 16);
}

/* Path names normalised by name alone (serve_path.c): absolute against the working directory, "//", "." and ".."
 * resolved ("/.." is "/"), too long refused; under the root by either spelling of it, and nothing that only shares
 * a prefix with it. */
static void path_names(void) {
    static const char *cases[][3] = {
        {"/w", "a.png", "/w/a.png"},          {"/w/x", "../a.png", "/w/a.png"},
        {"/w", "/m//a/./b.png", "/m/a/b.png"}, {"/w", "/m/a/../../../../b", "/b"},
        {"/", "..", "/"},                      {"/w", "/m/a/..", "/m"},
        {"/w", "./", "/w"},                    {"/w", "/m/.../b", "/m/.../b"},
        {"/w", "/m/a/../b/", "/m/b"},          {"/w/", "x/.", "/w/x"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int rc = srv_path_normalize(cases[i][0], cases[i][1], out, sizeof out);
        if (rc || strcmp(out, cases[i][2]))
            printf("normalise %s in %s: %d '%s', want '%s'\n", cases[i][1], cases[i][0], rc, out, cases[i][2]);
        CHECK(rc == 0 && !strcmp(out, cases[i][2]));
    }
    CHECK(srv_path_normalize("/w", "", out, sizeof out) == -1);
    CHECK(srv_path_normalize("/w", "/0123456789/0123456789/0123456789/0123456789/0123456789/0123456789", out,
                             sizeof out) == -1);
    CHECK(srv_path_normalize("/w", "/0123456789/0123456789/../../0123456789/0123456789", out, sizeof out) == 0 &&
          !strcmp(out, "/0123456789/0123456789"));
    srv_root r;
    memset(&r, 0, sizeof r);
    snprintf(r.real, sizeof r.real, "/data/media");
    snprintf(r.given, sizeof r.given, "/srv/media");
    const char *rel;
    CHECK((rel = srv_path_below(&r, "/data/media/a/b.png")) && !strcmp(rel, "a/b.png"));
    CHECK((rel = srv_path_below(&r, "/srv/media/b.png")) && !strcmp(rel, "b.png"));
    CHECK((rel = srv_path_below(&r, "/data/media")) && !strcmp(rel, ""));
    CHECK(!srv_path_below(&r, "/data/mediax/b.png") && !srv_path_below(&r, "/data") && !srv_path_below(&r, "/etc"));
    snprintf(r.real, sizeof r.real, "/");
    CHECK((rel = srv_path_below(&r, "/etc/passwd")) && !strcmp(rel, "etc/passwd"));
}

/* Path items read beneath the root (serve_path.c): the bytes of a regular file, and every refusal with its status,
 * a FIFO among them refused without blocking the open. */
static void path_reads(void) {
    char tmp[512], root[600], msg[PATH_MAX + 64];
    tu_tmpdir(tmp, sizeof tmp);
    snprintf(root, sizeof root, "%s/root", tmp);
    CHECK(mkdir(root, 0755) == 0 && mkdir(tu_path(root, "sub"), 0755) == 0);
    CHECK(tu_write_file(tu_path(root, "sub/a.bin"), "0123456789", 10) && tu_write_file(tu_path(root, "e"), "", 0));
    CHECK(tu_write_file(tu_path(tmp, "outside"), "secret", 6));
    CHECK(symlink(tu_path(tmp, "outside"), tu_path(root, "out")) == 0 && symlink("sub", tu_path(root, "dirlink")) == 0);
    CHECK(mkfifo(tu_path(root, "fifo"), 0644) == 0);
    srv_root r;
    CHECK(srv_root_open(&r, root, msg, sizeof msg) == 0);
    CHECK(srv_root_open(&(srv_root){0}, tu_path(tmp, "nowhere"), msg, sizeof msg) == -1 && strstr(msg, "nowhere"));
    static const struct {
        const char *name;
        int http;
        const char *says;
    } cases[] = {
        {"sub/a.bin", 200, ""},          {"sub/../sub/./a.bin", 200, ""},  {"out", 400, "symbolic link"},
        {"dirlink/a.bin", 400, "symbolic link"}, {"sub", 400, "directory of frames"}, {"", 400, "directory"},
        {"fifo", 422, "not a regular file"},     {"e", 422, "empty"},            {"nope", 422, "No such file"},
        {"sub/a.bin/x", 422, "Not a directory"}, {"../outside", 400, "not under"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", root, cases[i].name);
        srv_in_item it = {0};
        it.path = strdup(p);
        srv_err e;
        memset(&e, 0, sizeof e);
        size_t budget = 100;
        const int rc = srv_read_path(&r, &it, i, 1000, 100, &budget, &e);
        const int http = rc == 0 ? 200 : e.http;
        if (http != cases[i].http || (rc && !strstr(e.message, cases[i].says)))
            printf("read %s: %d '%s', want %d '%s'\n", cases[i].name, http, rc ? e.message : "", cases[i].http,
                   cases[i].says);
        CHECK(http == cases[i].http && (rc == 0 || strstr(e.message, cases[i].says)));
        if (rc == 0) CHECK(!it.path && it.size == 10 && !memcmp(it.data, "0123456789", 10) && budget == 90);
        else CHECK(budget == 100 && !it.data && it.path);
        free(it.data);
        free(it.path);
    }
    /* the limits, from the size before any byte is read: the item's, then what is left of the request's */
    srv_in_item it = {0};
    srv_err e;
    size_t budget = 100;
    it.path = strdup(tu_path(root, "sub/a.bin"));
    CHECK(srv_read_path(&r, &it, 0, 9, 100, &budget, &e) == -1 && e.http == 413 && strstr(e.message, "item limit"));
    budget = 9;
    CHECK(srv_read_path(&r, &it, 0, 1000, 100, &budget, &e) == -1 && e.http == 413 && strstr(e.message, "max_body"));
    free(it.path);
    srv_root_close(&r);
    tu_rmtree(tmp);
}

/* Images by their first bytes (the vLLM endpoint's rule): every test video is not one, nor text, nor a prefix of
 * a magic number; every test image is (admission_estimates). */
static void image_or_not(void) {
    static const char *videos[] = {"video_25fps.mkv", "video_2997.mp4", "video_3frames.mp4", "video_alpha.mov",
                                   "video_editlist.mp4", "video_mpeg2.ts", "video_mpeg4.avi", "video_testsrc_30.webm"};
    for (size_t i = 0; i < sizeof videos / sizeof *videos; i++) {
        char rel[128], path[4400];
        snprintf(rel, sizeof rel, "tests/data/video/%s", videos[i]);
        size_t n;
        uint8_t *d = tu_read_file(tu_source_path(rel, path, sizeof path), &n);
        CHECK(d && n > 16 && !srv_is_image(d, n));
        free(d);
    }
    CHECK(!srv_is_image((const uint8_t *)"hello world", 11) && !srv_is_image(NULL, 0));
    CHECK(!srv_is_image((const uint8_t *)"\xff\xd8", 2) && !srv_is_image((const uint8_t *)"\x89PNG\r\n", 6));
    CHECK(!srv_is_image((const uint8_t *)"RIFF\0\0\0\0AVI LIST", 16));
    CHECK(srv_is_image((const uint8_t *)"BM", 2) && srv_is_image((const uint8_t *)"RIFF\0\0\0\0WEBPVP8 ", 16));
}

/* A service whose batcher cannot have its slots fails to load, naming them (it loaded, said ready and never
 * encoded: the batcher's allocation failed on its own thread, which then stopped). Not under ASan, whose allocator
 * aborts on a request that size rather than fail it. */
static void batcher_slots(void) {
#if !defined(__SANITIZE_ADDRESS__)
    char tmp[512], model[600];
    tu_tmpdir(tmp, sizeof tmp);
    snprintf(model, sizeof model, "%s/m", tmp);
    CHECK(tu_synth(model, "tiny", 7, QVL_LAYOUT_HF));
    srv_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.model_dir = model;
    cfg.threads = 1;
    cfg.workers = 1;
    srv_limits_default(&cfg.lim);
    qvl_limits_default(&cfg.qlim);
    cfg.lim.max_batch_items = SIZE_MAX / 2;
    srv_state *st = srv_create(&cfg);
    char msg[1200] = "";
    CHECK(st && srv_load(st, msg, sizeof msg) == -1 && strstr(msg, "batcher") && !srv_ready(st));
    printf("a batcher of %zu slots: %s\n", cfg.lim.max_batch_items, msg);
    srv_stop(st);
    tu_rmtree(tmp);
#endif
}

int main(void) {
    uint8_t *out;
    size_t len;
    CHECK(srv_b64_decode("aGVsbG8=", 8, 100, &out, &len) == 0 && len == 5 && !memcmp(out, "hello", 5));
    free(out);
    CHECK(srv_b64_decode("aGVsbG8", 7, 100, &out, &len) == -1 && !out);
    CHECK(srv_b64_decode("aGVs bG8=", 9, 100, &out, &len) == -1);
    CHECK(srv_b64_decode("aGVsbG8=", 8, 4, &out, &len) == -2);
    /* padding only at the end, at most two: nettle alone accepts "A===" (found by fuzz_serve_request) */
    CHECK(srv_b64_decode("A===", 4, 100, &out, &len) == -1 && !out);
    CHECK(srv_b64_decode("QQ=A", 4, 100, &out, &len) == -1 && !out);
    CHECK(srv_b64_decode("Q=Q=", 4, 100, &out, &len) == -1 && !out);
    CHECK(srv_b64_decode("====", 4, 100, &out, &len) == -1 && !out);
    CHECK(srv_b64_decode("QQ==", 4, 100, &out, &len) == 0 && len == 1 && out[0] == 'A');
    free(out);
    CHECK(srv_b64_decode("", 0, 100, &out, &len) == 0 && len == 0);
    free(out);
    char *b = srv_b64_encode("hello", 5, &len);
    CHECK(b && !strcmp(b, "aGVsbG8=") && len == 8);
    free(b);
    CHECK(srv_is_key("54f23d18728ae94acb9397c7189dc5d3cff8da07f60121dd5f1f42c4676c6c37"));
    CHECK(!srv_is_key("54F23d18728ae94acb9397c7189dc5d3cff8da07f60121dd5f1f42c4676c6c37"));
    CHECK(!srv_is_key("54f2") && !srv_is_key("../../etc/passwd"));
    CHECK(srv_media_of("image/png", 9) == SRV_MEDIA_IMAGE && srv_media_of("Video/MP4; x=1", 14) == SRV_MEDIA_VIDEO);
    CHECK(srv_media_of("image/", 6) == 0 && srv_media_of("text/plain", 10) == 0);
    admission_estimates();
    path_names();
    path_reads();
    image_or_not();
    batcher_slots();
    return tu_finish("test_serve_helpers");
}
