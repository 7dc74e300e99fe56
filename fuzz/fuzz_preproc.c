/* fuzz_preproc.c — libFuzzer target for the preprocessor configs (preproc_config_parse: preprocessor_config.json
 * and video_preprocessor_config.json), and for what the parsed values then drive: the image grid of a few image
 * sizes (smart resize under the parsed pixel budget, patch and merge sizes), the grids of a few clips under the
 * parsed clip budget (and per-frame cap), and the video frame sampling under the parsed fps and frame bounds. The
 * first byte picks the file kind (image or video), the rest is the JSON text.
 * Everything must return a status with a message (never crash, leak or read outside the buffer); what is accepted
 * must satisfy the invariants the preprocessor relies on: a grid of whole merge blocks, sampled indices inside
 * the video and in order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/preproc_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A status with its message; never out of memory (inputs this small allocate little): a text cJSON refuses must
 * never pass json_check, which would make it "out of memory". */
static void check_status(qvl_status s, const qvl_error *err) {
    if (s != QVL_OK && (err->status != s || err->message[0] == '\0')) abort();
    if (s == QVL_ERR_NOMEM) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int video = data[0] & 1;
    /* libFuzzer and replay.c both hand over an exact-size heap buffer, so ASan sees any read past `size`. */
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    qvl_preprocess_params p;
    qvl_video_params v;
    qvl_preprocess_params_default(&p);
    qvl_video_params_default(&v);
    qvl_error err;
    err_clear(&err);
    qvl_status s = preproc_config_parse(text, len, "fuzz", video, &p, &v, &err);
    check_status(s, &err);
    if (s != QVL_OK) return 0;
    if (p.patch < 1 || p.temporal_patch < 1 || p.merge < 1 || !(p.rescale_factor > 0) || v.min_frames < 1 ||
        v.max_frames < 1 || !(v.fps > 0) || p.min_pixels > p.max_pixels)
        abort();

    /* The grids of a few image sizes: each either refused with a message or made of whole merge blocks. The pixel
     * buffer is never read by the size query, only checked to be there. */
    static const int32_t sides[][2] = {{1, 1}, {28, 28}, {48, 64}, {1080, 1920}, {4000, 20}, {16384, 16384}};
    uint8_t px[3] = {0};
    for (size_t i = 0; i < sizeof sides / sizeof *sides; i++) {
        qvl_image img = {sides[i][1], sides[i][0], px};
        qvl_grid g;
        err_clear(&err);
        s = qvl_image_grid(&img, &p, &g, &err);
        check_status(s, &err);
        if (s == QVL_OK && (g.t != 1 || g.h < 1 || g.w < 1 || g.h % p.merge || g.w % p.merge)) abort();
    }

    /* The grids of a few clips (frame count and size) under the parsed clip budget, with its per-frame cap when the
     * file turns it on: refused with a message, or whole merge blocks and ceil(frames / temporal_patch) patches. */
    static const int32_t clips[][3] = {{2, 48, 64}, {5, 720, 1280}, {768, 1080, 1920}, {4096, 16, 16}};
    for (size_t i = 0; video && i < sizeof clips / sizeof *clips; i++) {
        qvl_video vid = {.width = clips[i][2], .height = clips[i][1], .n_frames = clips[i][0], .rgb = px};
        qvl_grid g;
        err_clear(&err);
        s = qvl_video_grid(&vid, &p, &g, &err);
        check_status(s, &err);
        if (s == QVL_OK && (g.t != (clips[i][0] + p.temporal_patch - 1) / p.temporal_patch || g.h < 1 || g.w < 1 ||
                            g.h % p.merge || g.w % p.merge))
            abort();
    }

    /* Frame sampling of a few videos: indices in [0, total), non-decreasing. */
    static const int64_t totals[] = {1, 7, 240, 100000};
    static const double fpss[] = {1, 24, 29.97, 1000};
    int64_t idx[1024];
    for (size_t i = 0; i < sizeof totals / sizeof *totals; i++) {
        size_t n = 0;
        err_clear(&err);
        s = qvl_video_sample_indices(totals[i], fpss[i], &v, idx, sizeof idx / sizeof *idx, &n, &err);
        check_status(s, &err);
        if (s != QVL_OK) continue;
        size_t k = n < sizeof idx / sizeof *idx ? n : sizeof idx / sizeof *idx;
        for (size_t j = 0; j < k; j++)
            if (idx[j] < 0 || idx[j] >= totals[i] || (j && idx[j] < idx[j - 1])) abort();
    }
    return 0;
}
