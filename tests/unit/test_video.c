/* test_video.c — frame sampling and video decoding against transformers and PyAV.
 *
 * tests/fixtures/video.safetensors (tests/oracle/video_oracle.py) holds 255 sampling cases from
 * Qwen3VLVideoProcessor.sample_frames and, for each clip of tests/data/video/, the frame count, rate, sampled
 * indices and PyAV's rgb24 frames (alpha blended over white as transformers does). Both must match exactly. Also:
 * repeated indices, the pixel limit, bad files (status and a message naming the file), frames from images.
 * Prompt timing: for each clip under several fps / num_frames / temporal_patch settings, the frame indices, the
 * source rate and the per-temporal-patch seconds that Qwen3VLProcessor computed (and the "<t seconds>" strings it
 * printed) against qvl_video_load + qvl_video_timestamps, bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "testutil.h"

static const st_tensor *need(const st_file *f, const char *name, st_dtype dt) {
    const st_tensor *t = st_find(f, name);
    if (!t || t->dtype != dt) {
        fprintf(stderr, "  fixture lacks %s\n", name);
        return NULL;
    }
    return t;
}

static double get_f64(const st_tensor *t, size_t i) {
    double v;
    memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
    return v;
}

static int64_t get_i64(const st_tensor *t, size_t i) {
    int64_t v;
    memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
    return v;
}

static void test_sampling(const st_file *f) {
    const st_tensor *par = need(f, "sample.params", ST_F64), *off = need(f, "sample.offsets", ST_I64),
                    *idx = need(f, "sample.indices", ST_I64);
    CHECK(par && off && idx);
    if (!par || !off || !idx) return;
    size_t n_cases = (size_t)par->shape[0], bad = 0;
    CHECK(par->shape[1] == 6 && (size_t)off->shape[0] == n_cases + 1);
    int64_t *got = malloc(1024 * sizeof *got);
    for (size_t c = 0; c < n_cases; c++) {
        qvl_video_params p;
        qvl_video_params_default(&p);
        int64_t total = (int64_t)get_f64(par, 6 * c);
        double vfps = get_f64(par, 6 * c + 1);
        p.fps = get_f64(par, 6 * c + 2);
        p.num_frames = (int32_t)get_f64(par, 6 * c + 3);
        p.min_frames = (int32_t)get_f64(par, 6 * c + 4);
        p.max_frames = (int32_t)get_f64(par, 6 * c + 5);
        size_t want_n = (size_t)(get_i64(off, c + 1) - get_i64(off, c)), n = 0;
        qvl_error err;
        err_clear(&err);
        qvl_status s = qvl_video_sample_indices(total, vfps, &p, got, 1024, &n, &err);
        int ok = s == QVL_OK && n == want_n && n <= 1024;
        for (size_t i = 0; ok && i < n; i++) ok = got[i] == get_i64(idx, (size_t)get_i64(off, c) + i);
        if (!ok && bad++ < 5)
            fprintf(stderr, "  case %zu (total %lld, video fps %g, fps %g, num %d, min %d, max %d): %zu indices, want %zu%s%s\n",
                    c, (long long)total, vfps, p.fps, (int)p.num_frames, (int)p.min_frames, (int)p.max_frames, n, want_n,
                    s ? ": " : "", s ? err.message : "");
    }
    CHECK(bad == 0);
    printf("sampling: %zu cases, %zu differ\n", n_cases, bad);

    /* The count query (cap 0), a short buffer, and refusals. */
    qvl_video_params p;
    qvl_video_params_default(&p);
    size_t n = 99;
    CHECK(qvl_video_sample_indices(300, 30.0, &p, NULL, 0, &n, NULL) == QVL_OK && n == 20);
    CHECK(qvl_video_sample_indices(300, 30.0, &p, got, 3, &n, NULL) == QVL_OK && n == 20);
    CHECK(got[0] == 0 && got[1] == 16 && got[2] == 31); /* preprocessing reference §8.1 example */
    qvl_error err;
    CHECK(qvl_video_sample_indices(0, 30.0, &p, got, 8, &n, &err) == QVL_ERR_INVALID_ARG && n == 0);
    /* NULL params are the defaults (2 fps, at least 4 frames): 30 frames at 30 fps sample 4. */
    CHECK(qvl_video_sample_indices(30, 30.0, NULL, got, 8, &n, &err) == QVL_OK && n == 4 && err.status == QVL_OK);
    CHECK(qvl_video_sample_indices(30, 30.0, &p, NULL, 8, &n, &err) == QVL_ERR_INVALID_ARG);
    p.num_frames = -1;
    CHECK(qvl_video_sample_indices(30, 30.0, &p, got, 8, &n, &err) == QVL_ERR_INVALID_ARG);
    qvl_video_params_default(&p);
    p.max_frames = -1;
    CHECK(qvl_video_sample_indices(30, 30.0, &p, got, 8, &n, &err) == QVL_ERR_INVALID_ARG);
    qvl_video_params_default(&p);
    p.default_fps = 0.0;
    CHECK(qvl_video_sample_indices(30, 0.0, &p, got, 8, &n, &err) == QVL_ERR_INVALID_ARG);
    CHECK(qvl_video_sample_indices(30, 30.0, &p, got, 8, &n, &err) == QVL_OK && n == 4);
    free(got);
}

/* Load one clip with default parameters and compare everything with the oracle's PyAV decode. */
static void test_clip(const st_file *f, const char *file, const char *key) {
    char rel[256], path[1024], name[128];
    snprintf(rel, sizeof rel, "tests/data/video/%s", file);
    tu_source_path(rel, path, sizeof path);
    snprintf(name, sizeof name, "dec.%s.info", key);
    const st_tensor *info = need(f, name, ST_F64);
    snprintf(name, sizeof name, "dec.%s.indices", key);
    const st_tensor *idx = need(f, name, ST_I64);
    snprintf(name, sizeof name, "dec.%s.rgb", key);
    const st_tensor *rgb = need(f, name, ST_U8);
    CHECK(info && idx && rgb);
    if (!info || !idx || !rgb) return;
    qvl_video v;
    qvl_error err;
    err_clear(&err);
    qvl_status s = qvl_video_load(path, NULL, &v, &err);
    CHECK(s == QVL_OK);
    if (s != QVL_OK) {
        fprintf(stderr, "  %s: %s\n", file, err.message);
        return;
    }
    CHECK(v.total_frames == (int64_t)get_f64(info, 0));
    CHECK(v.fps == get_f64(info, 1));
    CHECK(v.n_frames == idx->shape[0] && v.height == rgb->shape[1] && v.width == rgb->shape[2]);
    int same_idx = v.n_frames == idx->shape[0];
    for (int32_t i = 0; same_idx && i < v.n_frames; i++) same_idx = v.indices[i] == get_i64(idx, (size_t)i);
    CHECK(same_idx);
    size_t n = (size_t)v.n_frames * (size_t)v.width * (size_t)v.height * 3, diff = 0;
    int maxd = 0;
    if (n == rgb->nbytes) {
        const uint8_t *want = rgb->data;
        for (size_t i = 0; i < n; i++) {
            int d = abs((int)v.rgb[i] - (int)want[i]);
            diff += d != 0;
            if (d > maxd) maxd = d;
        }
    }
    CHECK(n == rgb->nbytes && diff == 0);
    printf("%s: %dx%d, %lld frames at %g fps, %d sampled, %zu of %zu bytes differ from PyAV (max %d)\n", file,
           (int)v.width, (int)v.height, (long long)v.total_frames, v.fps, (int)v.n_frames, diff, n, maxd);
    qvl_video_free(&v);
    CHECK(v.rgb == NULL && v.indices == NULL && v.n_frames == 0);
}

/* More frames than the clip has: indices repeat and the repeated frames are copies. */
/* Line `i` of the newline-separated names in `t` into buf; 0 when there is no such line. */
static int nth_name(const st_tensor *t, size_t i, char *buf, size_t cap) {
    const char *p = (const char *)t->data, *end = p + t->nbytes;
    for (; i > 0 && p < end; p++)
        if (*p == '\n') i--;
    if (i > 0 || p >= end) return 0;
    size_t len = 0;
    while (p + len < end && p[len] != '\n') len++;
    if (len + 1 > cap) return 0;
    memcpy(buf, p, len);
    buf[len] = 0;
    return 1;
}

static void test_timing(const st_file *f) {
    const st_tensor *clips = need(f, "tim.clips", ST_U8), *par = need(f, "tim.params", ST_F64);
    const st_tensor *off = need(f, "tim.offsets", ST_I64), *idx = need(f, "tim.indices", ST_I64);
    const st_tensor *toff = need(f, "tim.ts_offsets", ST_I64), *ts = need(f, "tim.ts", ST_F64);
    const st_tensor *poff = need(f, "tim.prompt_offsets", ST_I64), *prompt = need(f, "tim.prompt", ST_U8);
    CHECK(clips && par && off && idx && toff && ts && poff && prompt);
    if (!clips || !par || !off || !idx || !toff || !ts || !poff || !prompt) return;
    size_t n_cases = (size_t)par->shape[0];
    CHECK(par->ndim == 2 && par->shape[1] == 5 && n_cases >= 40);
    CHECK((size_t)off->shape[0] == n_cases + 1 && (size_t)toff->shape[0] == n_cases + 1 &&
          (size_t)poff->shape[0] == n_cases + 1);
    size_t bad = 0, odd = 0, fractional = 0;
    for (size_t c = 0; c < n_cases; c++) {
        char file[256], path[1024], label[512];
        CHECK(nth_name(clips, (size_t)get_f64(par, c * 5), file, sizeof file));
        double req_fps = get_f64(par, c * 5 + 1), nf = get_f64(par, c * 5 + 2);
        int32_t tp = (int32_t)get_f64(par, c * 5 + 3);
        double src_fps = get_f64(par, c * 5 + 4);
        snprintf(label, sizeof label, "%s fps %g num_frames %g temporal_patch %d", file, req_fps, nf, (int)tp);
        snprintf(path, sizeof path, "tests/data/video/%s", file);
        char full[1024];
        tu_source_path(path, full, sizeof full);
        qvl_video_params p;
        qvl_video_params_default(&p);
        p.fps = req_fps;
        p.num_frames = (int32_t)nf;
        qvl_video v = {0};
        qvl_error err;
        if (qvl_video_load(full, &p, &v, &err) != QVL_OK) {
            fprintf(stderr, "  %s: %s\n", label, err.message);
            bad++;
            continue;
        }
        int64_t i0 = get_i64(off, c), i1 = get_i64(off, c + 1);
        int ok = v.fps == src_fps && v.n_frames == i1 - i0;
        for (int64_t i = 0; ok && i < i1 - i0; i++) ok = v.indices[i] == get_i64(idx, (size_t)(i0 + i));
        if (!ok) fprintf(stderr, "  %s: sampled frames or fps %.17g differ from the processor's\n", label, v.fps);
        odd += (v.n_frames % tp) != 0;
        fractional += src_fps != (double)(int64_t)src_fps;

        size_t t0 = (size_t)get_i64(toff, c), want_n = (size_t)get_i64(toff, c + 1) - t0, n = 0;
        double got[64];
        CHECK(want_n <= 64);
        /* the size query first, then the values */
        ok = ok && qvl_video_timestamps(&v, tp, NULL, 0, &n, &err) == QVL_OK && n == want_n && err.status == QVL_OK;
        ok = ok && qvl_video_timestamps(&v, tp, got, 64, &n, &err) == QVL_OK && n == want_n && err.message[0] == 0;
        char text[1024] = "";
        size_t len = 0;
        for (size_t k = 0; ok && k < want_n; k++) {
            double want = get_f64(ts, t0 + k);
            if (memcmp(&got[k], &want, sizeof want) != 0) {
                fprintf(stderr, "  %s: timestamp %zu is %.17g, the processor's %.17g\n", label, k, got[k], want);
                ok = 0;
            }
            len += (size_t)snprintf(text + len, sizeof text - len, "<%.1f seconds>", got[k]);
        }
        size_t p0 = (size_t)get_i64(poff, c), plen = (size_t)get_i64(poff, c + 1) - p0;
        if (ok && (plen != len || memcmp(text, (const uint8_t *)prompt->data + p0, plen) != 0)) {
            fprintf(stderr, "  %s: prompt %s differs from the processor's %.*s\n", label, text, (int)plen,
                    (const char *)prompt->data + p0);
            ok = 0;
        }
        bad += !ok;
        qvl_video_free(&v);
    }
    printf("timing: %zu cases (%zu with a frame count not a multiple of the temporal patch, %zu at a non-integer "
           "rate), %zu differ\n", n_cases, odd, fractional, bad);
    CHECK(bad == 0 && odd > 0 && fractional > 0);
}

/* Argument errors and the contract's edges, on a hand-made video. */
static void test_timestamps_args(void) {
    int64_t ind[5] = {0, 15, 30, 44, 59};
    qvl_video v = {.width = 1, .height = 1, .n_frames = 5, .indices = ind, .total_frames = 60, .fps = 30.0};
    double ts[4] = {-1, -1, -1, -1};
    size_t n = 99;
    qvl_error err;
    /* cap below the count: only cap values written, the full count reported */
    CHECK(qvl_video_timestamps(&v, 2, ts, 1, &n, &err) == QVL_OK && n == 3 && err.status == QVL_OK);
    CHECK(ts[0] == 0.25 && ts[1] == -1);
    /* an exact binary tie: Python's f"{0.25:.1f}" is "0.2" (round half to even), and so is printf's */
    char buf[32];
    snprintf(buf, sizeof buf, "%.1f %.1f %.1f", 0.25, 0.75, 1.25);
    CHECK(strcmp(buf, "0.2 0.8 1.2") == 0);
    /* temporal_patch 1: one per frame, idx / fps exactly */
    double one[5];
    CHECK(qvl_video_timestamps(&v, 1, one, 5, &n, NULL) == QVL_OK && n == 5 && one[1] == 15.0 / 30.0);
    /* temporal_patch larger than the video: one value, the first and last (repeated) index */
    CHECK(qvl_video_timestamps(&v, 8, ts, 4, &n, NULL) == QVL_OK && n == 1 && ts[0] == (0.0 / 30 + 59.0 / 30) / 2);

    CHECK(qvl_video_timestamps(NULL, 2, ts, 4, &n, &err) == QVL_ERR_INVALID_ARG && n == 0);
    CHECK(strstr(err.message, "v is NULL") != NULL);
    CHECK(qvl_video_timestamps(&v, 2, ts, 4, NULL, &err) == QVL_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "n is NULL") != NULL);
    CHECK(qvl_video_timestamps(&v, 2, NULL, 4, &n, &err) == QVL_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "ts is NULL") != NULL);
    CHECK(qvl_video_timestamps(&v, 0, ts, 4, &n, &err) == QVL_ERR_INVALID_ARG && n == 0);
    CHECK(strstr(err.message, "temporal_patch 0") != NULL);
    CHECK(qvl_video_timestamps(&v, -3, ts, 4, &n, &err) == QVL_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "temporal_patch -3") != NULL);
    const double bad_fps[3] = {0.0, -24.0, INFINITY};
    for (int i = 0; i < 3; i++) {
        qvl_video w = v;
        w.fps = bad_fps[i];
        CHECK(qvl_video_timestamps(&w, 2, ts, 4, &n, &err) == QVL_ERR_INVALID_ARG && n == 0);
        CHECK(strstr(err.message, "fps") != NULL && err.status == QVL_ERR_INVALID_ARG);
    }
    qvl_video w = v;
    w.fps = NAN;
    CHECK(qvl_video_timestamps(&w, 2, ts, 4, &n, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "fps"));
    w = v;
    w.n_frames = 0;
    CHECK(qvl_video_timestamps(&w, 2, ts, 4, &n, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "n_frames"));
    w.n_frames = -1;
    CHECK(qvl_video_timestamps(&w, 2, ts, 4, &n, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "n_frames"));
    w = v;
    w.indices = NULL;
    CHECK(qvl_video_timestamps(&w, 2, ts, 4, &n, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "indices"));
    /* success after a failure clears err */
    CHECK(qvl_video_timestamps(&v, 2, ts, 4, &n, &err) == QVL_OK && err.status == QVL_OK && err.message[0] == 0);
    CHECK(n == 3 && ts[0] == 0.25 && ts[2] == 59.0 / 30.0);
}

static void test_repeats(const st_file *f) {
    char path[1024];
    tu_source_path("tests/data/video/video_3frames.mp4", path, sizeof path);
    const st_tensor *rgb = need(f, "dec.3frames_mp4.rgb", ST_U8);
    qvl_video_params p;
    qvl_video_params_default(&p);
    p.num_frames = 6;
    qvl_video v;
    qvl_error err;
    CHECK(qvl_video_load(path, &p, &v, &err) == QVL_OK);
    CHECK(v.n_frames == 6);
    static const int64_t want[6] = {0, 0, 1, 1, 2, 2}; /* linspace(0, 2, 6) = 0 .4 .8 1.2 1.6 2 */
    size_t fs = (size_t)v.width * (size_t)v.height * 3;
    for (int i = 0; i < 6 && v.n_frames == 6 && rgb; i++) {
        CHECK(v.indices[i] == want[i]);
        CHECK(memcmp(v.rgb + (size_t)i * fs, (const uint8_t *)rgb->data + (size_t)want[i] * fs, fs) == 0);
    }
    qvl_video_free(&v);
}

/* A failing load returns `want`, names the file and leaves *out zeroed. */
static void expect_fail(const char *rel, const qvl_video_params *p, qvl_status want) {
    char path[1024];
    tu_source_path(rel, path, sizeof path);
    qvl_video v;
    memset(&v, 0xAB, sizeof v);
    qvl_error err;
    err_clear(&err);
    qvl_status s = qvl_video_load(path, p, &v, &err);
    CHECK(s == want);
    CHECK(err.status == want);
    CHECK(strstr(err.message, path) != NULL);
    CHECK(v.rgb == NULL && v.indices == NULL && v.n_frames == 0);
    printf("%s: %s (%s)\n", rel, qvl_status_name(s), err.message);
    qvl_video_free(&v);
}

static void test_bad(void) {
    expect_fail("tests/data/bad/video_not_video.mp4", NULL, QVL_ERR_FORMAT);
    expect_fail("tests/data/bad/video_truncated.mp4", NULL, QVL_ERR_FORMAT);
    expect_fail("tests/data/bad/video_truncated_mdat.mp4", NULL, QVL_ERR_FORMAT);
    expect_fail("tests/data/bad/video_does_not_exist.mp4", NULL, QVL_ERR_IO);
    qvl_video_params p;
    qvl_video_params_default(&p);
    p.max_pixels = 64 * 48 - 1;
    expect_fail("tests/data/video/video_testsrc_30.mp4", &p, QVL_ERR_LIMIT);
    p.max_pixels = 64 * 48;
    qvl_video v;
    char path[1024];
    tu_source_path("tests/data/video/video_testsrc_30.mp4", path, sizeof path);
    CHECK(qvl_video_load(path, &p, &v, NULL) == QVL_OK);
    qvl_video_free(&v);
    tu_source_path("tests/data/video/frames/video_frame_2.png", path, sizeof path); /* a still: one frame */
    CHECK(qvl_video_load(path, NULL, &v, NULL) == QVL_OK && v.n_frames == 1 && v.total_frames == 1);
    CHECK(v.n_frames == 1 && v.rgb[0] == 80 && v.rgb[1] == 14 && v.rgb[2] == 2);
    qvl_video_free(&v);
    CHECK(qvl_video_load(NULL, &p, &v, NULL) == QVL_ERR_INVALID_ARG);
    CHECK(qvl_video_load(path, &p, NULL, NULL) == QVL_ERR_INVALID_ARG);
    qvl_video_free(NULL);
}

/* Frame images: sampled like a file at default_fps; the size of every frame must match the first. */
static void test_images(void) {
    char buf[6][1024];
    const char *paths[6];
    for (int i = 0; i < 5; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/video/frames/video_frame_%d.png", i);
        paths[i] = tu_source_path(rel, buf[i], sizeof buf[i]);
    }
    paths[5] = tu_source_path("tests/data/video/frames/video_frame_12x16.png", buf[5], sizeof buf[5]);
    qvl_video v;
    qvl_error err;
    err_clear(&err);
    /* 5 frames at 24 fps, 2 fps wanted: int(5 / 24 · 2) = 0 → min_frames 4 → linspace(0, 4, 4) = 0 1.33 2.67 4 */
    qvl_status s = qvl_video_from_images(paths, 5, NULL, &v, &err);
    CHECK(s == QVL_OK);
    if (s != QVL_OK) fprintf(stderr, "  from_images: %s\n", err.message);
    if (s == QVL_OK) {
        static const int64_t want[4] = {0, 1, 3, 4};
        CHECK(v.n_frames == 4 && v.width == 16 && v.height == 12 && v.total_frames == 5 && v.fps == 24.0);
        int ok = v.n_frames == 4 && v.width == 16 && v.height == 12;
        for (int k = 0; ok && k < 4; k++) {
            ok = v.indices[k] == want[k];
            int64_t fr = want[k];
            for (int y = 0; ok && y < 12; y++)
                for (int x = 0; ok && x < 16; x++) {
                    const uint8_t *px = v.rgb + (((size_t)k * 12 + (size_t)y) * 16 + (size_t)x) * 3;
                    ok = px[0] == ((x * 16 + fr * 40) & 255) && px[1] == ((y * 20 + fr * 7) & 255) &&
                         px[2] == ((x * y + fr) & 255);
                }
        }
        CHECK(ok);
        qvl_video_free(&v);
    }
    qvl_video_params p;
    qvl_video_params_default(&p);
    p.num_frames = 2; /* the mismatching frame is not sampled, and still refused */
    const char *mixed[4] = {paths[0], paths[1], paths[5], paths[2]};
    err_clear(&err);
    CHECK(qvl_video_from_images(mixed, 4, &p, &v, &err) == QVL_ERR_INVALID_ARG);
    CHECK(strstr(err.message, paths[5]) != NULL && v.rgb == NULL);
    printf("mismatched frames: %s\n", err.message);
    const char *missing[2] = {paths[0], "/nonexistent/video_frame.png"};
    CHECK(qvl_video_from_images(missing, 2, &p, &v, NULL) == QVL_ERR_IO && v.rgb == NULL);
    CHECK(qvl_video_from_images(paths, 0, &p, &v, NULL) == QVL_ERR_INVALID_ARG);
}

int main(void) {
    char path[1024];
    tu_source_path("tests/fixtures/video.safetensors", path, sizeof path);
    st_file *f = NULL;
    qvl_error err;
    CHECK(st_load(path, SIZE_MAX, &f, &err) == QVL_OK);
    if (!QVL_WITH_VIDEO) printf("test_video: video files not tested, built without FFmpeg (QVL_VIDEO=OFF)\n");
    if (f) {
        printf("oracle: transformers %s, av %s\n", st_meta(f, "transformers") ? st_meta(f, "transformers") : "?",
               st_meta(f, "av") ? st_meta(f, "av") : "?");
        test_sampling(f);
        if (QVL_WITH_VIDEO) {
            test_clip(f, "video_testsrc_30.mp4", "testsrc_30_mp4");
            test_clip(f, "video_testsrc_30.webm", "testsrc_30_webm");
            test_clip(f, "video_25fps.mkv", "25fps_mkv");
            test_clip(f, "video_3frames.mp4", "3frames_mp4");
            test_clip(f, "video_alpha.mov", "alpha_mov");
            test_clip(f, "video_editlist.mp4", "editlist_mp4"); /* header: 60 frames; the edit list leaves 45 */
            test_clip(f, "video_2997.mp4", "2997_mp4");         /* 30000/1001 fps */
            test_timing(f);
            test_repeats(f);
        }
        st_close(f);
    }
    if (QVL_WITH_VIDEO) test_bad();
    if (QVL_WITH_MEDIA) test_images();
    else printf("test_video: PNG frame images not tested, built without image decoders (QVL_MEDIA=OFF)\n");
    test_timestamps_args();
    return tu_finish("test_video");
}
