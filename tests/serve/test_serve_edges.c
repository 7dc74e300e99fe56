/* test_serve_edges.c — `qvl serve`'s refusals and edges over loopback, each a regression (the client and the server
 * process: serve_client.c; a synthetic tiny checkpoint; the media root a directory of the test's own):
 *   - a `path` item naming a directory of frames is refused with 400 (the library would have read its entries, links
 *     out of the root among them, by name)
 *   - a path outside the root is 400 by its name alone, whether it exists or not (no existence oracle)
 * Every loop is bounded in count and time. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    CHECK(tu_synth(model, "tiny", 7, QVL_LAYOUT_HF));
    /* The media root: two frames of one size in frames/. */
    snprintf(g_media, sizeof g_media, "%s/media", g_tmp);
    CHECK(mkdir(g_media, 0755) == 0);
    CHECK(mkdir(tu_path(g_media, "frames"), 0755) == 0);
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
    CHECK(stop_server(pid) == 0);

    if (tu_failures) {
        snprintf(cmd, sizeof cmd, "tail -20 '%s/server.log' >&2", g_tmp);
        if (system(cmd)) {}
    }
    tu_rmtree(g_tmp);
    return tu_finish("test_serve_edges");
}
