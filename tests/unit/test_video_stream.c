/* test_video_stream.c — a plan makes a video's rows as its frames arrive (video_sink, video_rows): bit for bit the
 * rows of the whole-clip path (qvl_video_load, then qvl_preprocess_video, which tests/unit/test_preprocess.c holds to
 * transformers), for every clip of tests/data/video/ and a frame directory, under both resize paths, with an odd
 * sampled count (the last temporal patch padded), repeated indices, and a stream whose header counts more frames
 * than it has (sampled again). And what it holds: max_video_pixels, which bounds the source frames that
 * qvl_video_load returns, no longer refuses a plan's video, which holds one source frame. And its encode: a video
 * above max_batch_rows is encoded in pieces of whole temporal patches, bit for bit the whole clip's embeddings, in
 * both precisions, both layouts and every output dtype, between other items. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "image/image_params.h"
#include "qvl.h"
#include "testutil.h"

#if QVL_WITH_VIDEO
static const char *const clips[] = {"video_testsrc_30.mp4", "video_testsrc_30.webm", "video_25fps.mkv",
                                    "video_3frames.mp4",    "video_alpha.mov",       "video_editlist.mp4",
                                    "video_2997.mp4",       "video_mpeg4.avi",       "video_mpeg2.ts"};
#endif

/* The whole-clip rows of `path` under vp / pp (malloc'd; NULL when it fails, with *st set). */
static float *whole_clip(const char *path, int dir, const qvl_video_params *vp, const qvl_preprocess_params *pp,
                         qvl_grid *grid, qvl_status *st) {
    qvl_video v;
    qvl_error err;
    if (dir) {
        const char *names[5];
        for (int i = 0; i < 5; i++) {
            char f[32];
            snprintf(f, sizeof f, "video_frame_%d.png", i);
            names[i] = tu_path(path, f);
        }
        *st = qvl_video_from_images(names, 5, vp, &v, &err);
    } else {
        *st = qvl_video_load(path, vp, &v, &err);
    }
    if (*st != QVL_OK) return NULL;
    float *rows = NULL;
    *st = qvl_video_grid(&v, pp, grid, &err);
    if (*st == QVL_OK) {
        const size_t n = (size_t)grid->t * grid->h * grid->w * 3 * pp->temporal_patch * pp->patch * pp->patch;
        rows = malloc(n * sizeof *rows);
        *st = rows ? qvl_preprocess_video(&v, pp, rows, grid, &err) : QVL_ERR_NOMEM;
    }
    qvl_video_free(&v);
    if (*st != QVL_OK) free(rows), rows = NULL;
    return rows;
}

/* One case: the plan's rows of a PATH item against the whole clip's. */
static void same_rows(const char *path, int dir, const qvl_video_params *vp, const qvl_preprocess_params *pp,
                      const char *what) {
    qvl_grid want;
    qvl_status ws;
    float *rows = whole_clip(path, dir, vp, pp, &want, &ws);
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_PATH;
    it.path = path;
    it.video = vp;
    it.preprocess = pp;
    qvl_plan *plan = NULL;
    qvl_error err;
    CHECK(qvl_plan_create(NULL, &it, 1, NULL, &plan, &err) == QVL_OK);
    if (!plan) {
        free(rows);
        return;
    }
    qvl_item_info info;
    qvl_plan_item(plan, 0, &info);
    CHECK(info.status == ws);
    if (ws == QVL_OK && info.status == QVL_OK) {
        CHECK(info.grid.t == want.t && info.grid.h == want.h && info.grid.w == want.w);
        const size_t n = (size_t)want.t * want.h * want.w * 3 * pp->temporal_patch * pp->patch * pp->patch;
        const int same = info.n_rows == (size_t)want.t * want.h * want.w &&
                         memcmp(qvl_plan_rows(plan, 0), rows, n * sizeof *rows) == 0;
        CHECK(same);
        if (!same) printf("  %s: rows differ\n", what);
    } else if (info.status != ws) {
        printf("  %s: whole clip %s, plan %s (%s)\n", what, qvl_status_name(ws), qvl_status_name(info.status),
               info.message);
    }
    qvl_plan_free(plan);
    free(rows);
}

static void test_same_rows(void) {
    char dir[1024], path[1100];
    qvl_video_params vp;
    qvl_preprocess_params pp;
    static const qvl_resize_mode modes[] = {QVL_RESIZE_TORCHVISION, QVL_RESIZE_PIL};
    static const int32_t counts[] = {0, 5, 90}; /* the default sampling, an odd count, more than the frames (repeats) */
    int cases = 0;
    char tmp[1024];
    tu_tmpdir(tmp, sizeof tmp);
    for (size_t m = 0; m < 2; m++)
        for (size_t c = 0; c < 3; c++) {
            qvl_video_params_default(&vp);
            vp.num_frames = counts[c];
            qvl_preprocess_params_default(&pp);
            pp.resize = modes[m];
            /* a small budget, so that every clip is resized (the 16 x 16 one up, the others down) */
            pp.video_min_pixels = 4096;
            pp.video_max_pixels = 32 * 32 * 8;
#if QVL_WITH_VIDEO
            for (size_t i = 0; i < sizeof clips / sizeof *clips; i++) {
                char what[200];
                snprintf(what, sizeof what, "%s, resize %d, num_frames %d", clips[i], (int)modes[m], (int)counts[c]);
                snprintf(path, sizeof path, "%s", tu_path(tu_source_path("tests/data/video", dir, sizeof dir), clips[i]));
                same_rows(path, 0, &vp, &pp, what);
                cases++;
            }
#endif
            /* a frame directory (its five frames; the directory of the corpus also holds a frame of another size) */
            snprintf(path, sizeof path, "%s", tu_path(tmp, "frames"));
            tu_rmtree(path); /* a previous run's */
            CHECK(mkdir(path, 0700) == 0);
            for (int f = 0; f < 5; f++) {
                char name[32];
                snprintf(name, sizeof name, "video_frame_%d.png", f);
                size_t n;
                void *bytes = tu_read_file(tu_path(tu_source_path("tests/data/video/frames", dir, sizeof dir), name), &n);
                CHECK(bytes && tu_write_file(tu_path(path, name), bytes, n));
                free(bytes);
            }
            same_rows(path, 1, &vp, &pp, "frame directory");
            cases++;
            tu_rmtree(path);
        }
    printf("streamed rows equal the whole clip's: %d cases\n", cases);
}

/* video_rows takes a clip's frames in any order, as a reader decoding several stretches at once hands them over
 * (each stretch in order, the stretches interleaved): the same rows as qvl_preprocess_video, for frames in order,
 * reversed, and in 2 and 3 interleaved stretches, odd and even frame counts, both resize paths. */
static void test_any_order(void) {
#if QVL_WITH_VIDEO
    char dir[1024];
    static const int32_t counts[] = {7, 12, 31};
    int cases = 0;
    for (int m = 0; m < 2; m++)
        for (size_t c = 0; c < 3; c++) {
            qvl_video_params vp;
            qvl_video_params_default(&vp);
            vp.num_frames = counts[c];
            qvl_preprocess_params pp, full;
            qvl_preprocess_params_default(&pp);
            pp.resize = m ? QVL_RESIZE_PIL : QVL_RESIZE_TORCHVISION;
            pp.video_min_pixels = 4096;
            pp.video_max_pixels = 32 * 32 * 8;
            qvl_error err;
            CHECK(preprocess_params_take(&full, &pp, &err) == QVL_OK);
            qvl_video v;
            CHECK(qvl_video_load(tu_path(tu_source_path("tests/data/video", dir, sizeof dir), "video_testsrc_30.mp4"),
                                 &vp, &v, &err) == QVL_OK);
            qvl_grid grid;
            CHECK(qvl_video_grid(&v, &full, &grid, &err) == QVL_OK);
            const size_t n_vals =
                qvl_patch_rows(&grid, 1) * 3 * (size_t)(full.temporal_patch * full.patch * full.patch);
            float *want = malloc(n_vals * sizeof *want), *got = malloc(n_vals * sizeof *got);
            CHECK(want && got && qvl_preprocess_video(&v, &full, want, &grid, &err) == QVL_OK);
            const size_t fb = (size_t)v.width * (size_t)v.height * 3, n = (size_t)v.n_frames;
            for (int order = 0; order < 4 && want && got; order++) { /* in order, reversed, 2 and 3 stretches */
                video_rows vr = {0};
                memset(got, 0xff, n_vals * sizeof *got);
                CHECK(video_rows_start(&vr, &v, &grid, &full, got, NULL, &err) == QVL_OK);
                const size_t k = order < 2 ? 1 : (size_t)order, len = (n + k - 1) / k; /* stretches, their length */
                for (size_t i = 0; i < n; i++) {
                    size_t slot = order == 1 ? n - 1 - i : (i % k) * len + i / k; /* round robin over stretches */
                    if (order >= 2 && slot >= n) continue;                    /* the last stretch is shorter */
                    CHECK(video_rows_frame(&vr, slot, v.rgb + slot * fb, &err) == QVL_OK);
                }
                for (size_t i = 0; order >= 2 && i < k * len; i++) { /* what the round robin left out */
                    const size_t slot = (i % k) * len + i / k;
                    if (slot < n && !vr.taken[slot])
                        CHECK(video_rows_frame(&vr, slot, v.rgb + slot * fb, &err) == QVL_OK);
                }
                CHECK(vr.next == n);
                CHECK(video_rows_frame(&vr, 0, v.rgb, &err) == QVL_ERR_INTERNAL); /* a slot given twice */
                char what[96];
                snprintf(what, sizeof what, "%zu frames, resize %d, order %d", n, m, order);
                CHECK(tu_same_bytes((const uint8_t *)got, (const uint8_t *)want, n_vals * sizeof *got, what));
                video_rows_free(&vr);
                cases++;
            }
            free(want), free(got);
            qvl_video_free(&v);
        }
    printf("rows from frames in any order equal the whole clip's: %d cases\n", cases);
#endif
}

/* max_video_pixels bounds the frames qvl_video_load holds; a plan holds one source frame and takes the video. */
static void test_held(void) {
#if QVL_WITH_VIDEO
    char dir[1024], path[1100];
    snprintf(path, sizeof path, "%s", tu_path(tu_source_path("tests/data/video", dir, sizeof dir), "video_testsrc_30.mp4"));
    qvl_limits lim;
    qvl_limits_default(&lim);
    lim.max_video_pixels = 64 * 48 * 2; /* two of its 64 x 48 frames; sampling picks 4 */
    qvl_video_params vp;
    qvl_video_params_default(&vp);
    vp.limits = &lim;
    qvl_video v;
    qvl_error err;
    CHECK(qvl_video_load(path, &vp, &v, &err) == QVL_ERR_LIMIT && strstr(err.message, "max_video_pixels"));
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.limits = &lim;
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_PATH;
    it.path = path;
    qvl_plan *plan = NULL;
    CHECK(qvl_plan_create(NULL, &it, 1, &pp, &plan, &err) == QVL_OK);
    if (plan) {
        qvl_item_info info;
        qvl_plan_item(plan, 0, &info);
        CHECK(info.status == QVL_OK && info.n_frames == 4 && info.n_rows > 0);
        if (info.status != QVL_OK) printf("  plan: %s\n", info.message);
    }
    qvl_plan_free(plan);
    /* the sampled count is still bounded: max_video_frames */
    lim.max_video_frames = 3;
    CHECK(qvl_plan_create(NULL, &it, 1, &pp, &plan, &err) == QVL_OK);
    if (plan) {
        qvl_item_info info;
        qvl_plan_item(plan, 0, &info);
        CHECK(info.status == QVL_ERR_LIMIT && strstr(info.message, "max_video_frames"));
    }
    qvl_plan_free(plan);
#endif
}

/* What qvl_plan_encode_chunks told: each chunk checked, when told, against the one-pass output (`ref`): every plane's
 * rows of the chunk already final; chunks of an item in order and back to back. */
typedef struct chunks {
    void *const *out, *const *ref;
    size_t planes, tok_bytes[3], n_tok[3], next[3], calls[3];
    int bad, stop_after; /* stop_after: return nonzero at that call (counted from 1; 0: never) */
    int n_calls;
} chunks;

static int on_chunk(void *user, size_t item, size_t tok0, size_t n) {
    chunks *c = user;
    c->n_calls++;
    if (item >= 3 || tok0 != c->next[item] || n == 0 || tok0 + n > c->n_tok[item]) {
        c->bad++;
        return 1;
    }
    c->next[item] = tok0 + n;
    c->calls[item]++;
    const size_t tb = c->tok_bytes[item]; /* bytes of one token in one plane */
    for (size_t q = 0; q < c->planes; q++) {
        const size_t off = (q * c->n_tok[item] + tok0) * tb;
        if (memcmp((const char *)c->out[item] + off, (const char *)c->ref[item] + off, n * tb) != 0) c->bad++;
    }
    return c->stop_after && c->n_calls == c->stop_after;
}

/* Encode [image, video of 7 frames (4 temporal patches), image] with every item in one pass and with the video in
 * pieces (max_batch_rows below its rows), and compare the outputs byte for byte; the pieces through
 * qvl_plan_encode_chunks, each told as it is done (a chunk per image, one per piece), and told final; and a stop
 * from the callback after the video's first piece. */
static void pieces_case(qvl_ctx *ctx, qvl_output_layout layout, qvl_dtype dt, const char *what) {
    static uint8_t frames_px[7][64 * 96 * 3], img_px[2][48 * 64 * 3];
    uint32_t st = 7;
    for (size_t f = 0; f < 7; f++)
        for (size_t i = 0; i < sizeof frames_px[0]; i++) frames_px[f][i] = (uint8_t)(tu_frand(&st) * 127 + 128);
    for (size_t f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof img_px[0]; i++) img_px[f][i] = (uint8_t)(tu_frand(&st) * 127 + 128);
    qvl_pixels frames[7];
    for (size_t f = 0; f < 7; f++) frames[f] = (qvl_pixels){frames_px[f], 96, 64, 3, 0};
    qvl_item it[3];
    for (int i = 0; i < 3; i++) qvl_item_default(&it[i]);
    it[0].kind = QVL_ITEM_PIXELS, it[0].image = (qvl_pixels){img_px[0], 64, 48, 3, 0};
    it[1].kind = QVL_ITEM_FRAMES, it[1].frames = frames, it[1].n_frames = 7, it[1].fps = 2;
    it[2].kind = QVL_ITEM_PIXELS, it[2].image = (qvl_pixels){img_px[1], 64, 48, 3, 0};
    void *out[2][3] = {{NULL}};
    size_t bytes[3] = {0}, vrows = 0;
    int ok = 1;
    /* 0: one pass for all; then the video in pieces of 1 and of 2 temporal patches (its rows are 4 x 24) */
    static const size_t caps[3] = {100000, 30, 50};
    for (int c = 0; c < 3; c++) {
        qvl_plan_params pp;
        qvl_plan_params_default(&pp);
        pp.layout = layout, pp.dtype = dt, pp.max_batch_rows = caps[c];
        qvl_plan *plan = NULL;
        qvl_error err;
        CHECK(qvl_plan_create(ctx, it, 3, &pp, &plan, &err) == QVL_OK);
        if (!plan) return;
        for (size_t i = 0; i < 3; i++) {
            qvl_item_info info;
            qvl_plan_item(plan, i, &info);
            CHECK(info.status == QVL_OK);
            if (i == 1) vrows = info.n_rows;
            bytes[i] = info.out_bytes;
            if (c == 0) out[0][i] = calloc(1, bytes[i] ? bytes[i] : 1);
            else out[1][i] = calloc(1, bytes[i] ? bytes[i] : 1);
        }
        chunks ck = {.out = out[1], .ref = out[0], .planes = layout == QVL_OUTPUT_SPLIT ? 3 : 1};
        for (size_t i = 0; i < 3; i++) {
            qvl_item_info info;
            qvl_plan_item(plan, i, &info);
            ck.n_tok[i] = info.n_tokens;
            ck.tok_bytes[i] = info.out_bytes / info.n_tokens / ck.planes;
        }
        const qvl_status s = c ? qvl_plan_encode_chunks(ctx, plan, (void *const *)out[1], on_chunk, &ck, &err)
                               : qvl_plan_encode(ctx, plan, (void *const *)out[0], &err);
        CHECK(s == QVL_OK);
        if (s != QVL_OK) printf("  %s, max_batch_rows %zu: %s\n", what, caps[c], err.message);
        if (c) { /* every token told once, final when told; the video in its pieces (1 or 2 temporal patches) */
            CHECK(ck.bad == 0);
            for (size_t i = 0; i < 3; i++) CHECK(ck.next[i] == ck.n_tok[i]);
            CHECK(ck.calls[0] == 1 && ck.calls[2] == 1 && ck.calls[1] == (caps[c] == 30 ? 4u : 2u));
        }
        if (c == 1) { /* stopped after the video's first piece: it is cut short, the image after it not encoded */
            chunks sc = ck;
            memset(sc.next, 0, sizeof sc.next), memset(sc.calls, 0, sizeof sc.calls);
            sc.n_calls = 0, sc.stop_after = 2;
            CHECK(qvl_plan_encode_chunks(ctx, plan, (void *const *)out[1], on_chunk, &sc, &err) == QVL_ERR_CANCELLED);
            CHECK(strstr(err.message, "stopped by the chunk callback after 6 of its 24 tokens") != NULL);
            qvl_item_info i0, i1, i2;
            qvl_plan_item(plan, 0, &i0), qvl_plan_item(plan, 1, &i1), qvl_plan_item(plan, 2, &i2);
            CHECK(i0.status == QVL_OK && i1.status == QVL_ERR_CANCELLED && i2.status == QVL_ERR_CANCELLED);
            CHECK(strstr(i2.message, "the chunk callback asked to stop") != NULL);
            CHECK(sc.n_calls == 2 && sc.bad == 0);
        }
        qvl_plan_free(plan);
        if (c) {
            for (size_t i = 0; i < 3; i++) {
                const int same = memcmp(out[0][i], out[1][i], bytes[i]) == 0;
                CHECK(same);
                if (!same) printf("  %s, max_batch_rows %zu: item %zu differs from the one-pass encode\n", what,
                                  caps[c], i), ok = 0;
                free(out[1][i]), out[1][i] = NULL;
            }
        }
    }
    CHECK(vrows == 96);
    for (size_t i = 0; i < 3; i++) free(out[0][i]);
    if (ok) printf("video encoded in pieces = in one pass: %s\n", what);
}

static void test_pieces(void) {
    char dir[1024];
    tu_tmpdir(dir, sizeof dir);
    tu_synth(dir, "tiny", 3, QVL_LAYOUT_HF);
    for (int prec = 0; prec < 2; prec++) {
        qvl_load_params lp;
        qvl_load_params_default(&lp);
        lp.precision = prec ? QVL_PRECISION_BF16 : QVL_PRECISION_F32;
        qvl_model *m = NULL;
        qvl_error err;
        if (qvl_model_load(dir, &lp, &m, &err) != QVL_OK) { /* bf16 needs a bf16 kernel set: refused on others */
            printf("precision %s: not run (%s)\n", prec ? "bf16" : "f32", err.message);
            CHECK(prec == 1);
            continue;
        }
        qvl_ctx *ctx = NULL;
        CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
        if (ctx) {
            pieces_case(ctx, QVL_OUTPUT_CONCAT, QVL_DTYPE_F32, prec ? "bf16, concat f32" : "f32, concat f32");
            pieces_case(ctx, QVL_OUTPUT_SPLIT, QVL_DTYPE_BF16, prec ? "bf16, split bf16" : "f32, split bf16");
            pieces_case(ctx, QVL_OUTPUT_CONCAT, QVL_DTYPE_F16, prec ? "bf16, concat f16" : "f32, concat f16");
        }
        qvl_ctx_free(ctx);
        qvl_model_free(m);
    }
    tu_rmtree(dir);
}

/* ---- qvl_encode_stream: a video decoded while it encodes, told part by part ------------------------------------ */

/* What qvl_encode_stream told, gathered into one buffer of the item's layout, and checked as told: parts in order and
 * back to back, the item's info the same at every call. */
typedef struct told {
    unsigned char *buf;
    qvl_item_info first; /* its pointers are valid during the call only: */
    double ts[64];       /* the first timestamps */
    size_t next, tok_bytes;
    int calls, bad, stop_at, cancel_at;
    qvl_ctx *ctx; /* cancel_at: qvl_ctx_cancel(ctx) at that call */
} told;

static int on_told(void *user, const qvl_item_info *info, const qvl_chunk *c) {
    told *t = user;
    if (t->calls++ == 0) {
        t->first = *info;
        t->tok_bytes = info->n_tokens ? info->out_bytes / info->n_tokens / info->n_planes : 0;
        t->buf = calloc(1, info->out_bytes ? info->out_bytes : 1);
        for (size_t i = 0; i < info->n_timestamps && i < 64; i++) t->ts[i] = info->timestamps[i];
    }
    if (!t->buf || info->n_tokens != t->first.n_tokens || info->out_bytes != t->first.out_bytes || c->tok0 != t->next ||
        c->n_tokens == 0 || c->tok0 + c->n_tokens > info->n_tokens ||
        c->bytes != c->n_tokens * t->tok_bytes * info->n_planes || info->status != QVL_OK ||
        (size_t)c->t0 * info->grid.h * info->grid.w / 4 != c->tok0 ||
        (size_t)c->t * info->grid.h * info->grid.w / 4 != c->n_tokens) {
        t->bad++;
        return 1;
    }
    for (size_t q = 0; q < info->n_planes; q++)
        memcpy(t->buf + (q * info->n_tokens + c->tok0) * t->tok_bytes,
               (const unsigned char *)c->data + q * c->plane_stride, c->n_tokens * t->tok_bytes);
    t->next += c->n_tokens;
    if (t->ctx && t->calls == t->cancel_at) qvl_ctx_cancel(t->ctx);
    return t->stop_at && t->calls == t->stop_at;
}

/* Item `it` streamed (pieces of max_batch_rows `cap`) against its plan encoded whole: the same status, and for an
 * item that encodes, every token told once, in order, the same bytes. Returns the parts told (-1 on a failure). */
static int stream_case(qvl_ctx *ctx, const qvl_item *it, qvl_output_layout layout, qvl_dtype dt, size_t cap,
                       const char *what) {
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.layout = layout, pp.dtype = dt;
    qvl_plan *plan = NULL;
    qvl_error err, serr;
    CHECK(qvl_plan_create(ctx, it, 1, &pp, &plan, &err) == QVL_OK);
    if (!plan) return -1;
    qvl_item_info info;
    qvl_plan_item(plan, 0, &info);
    void *want = info.status == QVL_OK ? calloc(1, info.out_bytes) : NULL;
    qvl_status ws = info.status;
    if (want) ws = qvl_plan_encode(ctx, plan, &want, &err);
    pp.max_batch_rows = cap;
    told t = {0};
    const qvl_status s = qvl_encode_stream(ctx, it, &pp, on_told, &t, &serr);
    int parts = t.calls;
    if (ws == QVL_OK && s == QVL_ERR_RESAMPLED && t.calls > 0 && t.bad == 0 &&
        strstr(serr.message, "the stream ended before the frame count of its header after") != NULL) {
        parts = -2; /* sampled again after parts were told: the caller knows which clips may */
    } else if (s != ws) {
        CHECK(s == ws);
        printf("  %s: whole %s (%s), stream %s (%s)\n", what, qvl_status_name(ws), ws ? err.message : "",
               qvl_status_name(s), serr.message);
        parts = -1;
    } else if (s == QVL_OK) {
        const int same = t.bad == 0 && t.next == info.n_tokens && t.first.grid.t == info.grid.t &&
                         t.first.n_frames == info.n_frames &&
                         info.n_timestamps <= 64 && (!info.n_timestamps || memcmp(t.ts, info.timestamps, info.n_timestamps * sizeof(double)) == 0) &&
                         memcmp(t.buf, want, info.out_bytes) == 0;
        CHECK(same);
        if (!same) printf("  %s: the stream's output differs from the whole encode (bad %d)\n", what, t.bad), parts = -1;
    } else {
        CHECK(strcmp(serr.message, info.status != QVL_OK ? info.message : err.message) == 0);
        if (strcmp(serr.message, info.status != QVL_OK ? info.message : err.message) != 0)
            printf("  %s: messages differ:\n    %s\n    %s\n", what, serr.message, info.message);
        parts = -1;
    }
    free(t.buf);
    free(want);
    qvl_plan_free(plan);
    return parts;
}

#if QVL_WITH_VIDEO
/* Every clip of the corpus. */
static const char *const all[] = {"video_testsrc_30.mp4", "video_testsrc_30.webm", "video_25fps.mkv",
                                  "video_3frames.mp4", "video_alpha.mov", "video_editlist.mp4", "video_2997.mp4",
                                  "video_mpeg4.avi", "video_mpeg2.ts", "video_hevc.mp4",
                                  "video_h264_baseline.mp4", "video_h264_bframes.mkv", "video_h264_bframes.mp4",
                                  "video_h264_bframes.ts", "video_h264_interlaced.mp4",
                                  "video_h264_intrarefresh.mp4", "video_h264_opengop.mp4",
                                  "video_h264_slices_hrd.mp4", "video_h264_sps_change.mkv",
                                  "video_h264_10bit_cqm.mp4", "video_h264_444_x264old.mp4"};
#endif

static int always_stop(void *user) {
    (void)user;
    return 1;
}

static void test_stream(void) {
    char dir[1024];
    tu_tmpdir(dir, sizeof dir);
    tu_synth(dir, "tiny", 3, QVL_LAYOUT_HF);
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    qvl_error err;
    CHECK(qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    CHECK(m && qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    if (!ctx) {
        qvl_model_free(m);
        return;
    }
    qvl_preprocess_params pre;
    qvl_preprocess_params_default(&pre);
    pre.video_min_pixels = 4096, pre.video_max_pixels = 64 * 64 * 8; /* 4 x 4 patches a frame, 16 rows a patch */
    int cases = 0, parts = 0;
#if QVL_WITH_VIDEO
    /* every clip of the corpus, in pieces of 1 temporal patch (a ring of 2) and of 3 */
    char vdir[1024];
    tu_source_path("tests/data/video", vdir, sizeof vdir);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        for (int v = 0; v < 2; v++) {
            char path[1100], what[200];
            snprintf(path, sizeof path, "%s", tu_path(vdir, all[i]));
            qvl_item it;
            qvl_item_default(&it);
            it.kind = QVL_ITEM_PATH, it.path = path, it.preprocess = &pre;
            snprintf(what, sizeof what, "%s, %s", all[i], v ? "split bf16, 3 patches a piece" : "concat f32, 1 patch");
            const int n = stream_case(ctx, &it, v ? QVL_OUTPUT_SPLIT : QVL_OUTPUT_CONCAT,
                                      v ? QVL_DTYPE_BF16 : QVL_DTYPE_F32, v ? 48 : 16, what);
            /* the edit list's clip counts 60 frames in its header, 45 decode: in pieces of one temporal patch its
             * first parts are told before the stream's end shows it (then the call fails, saying so); in pieces of
             * three, before any part is told (then it is read again and encoded whole: the same tokens) */
            const int edit = strcmp(all[i], "video_editlist.mp4") == 0;
            CHECK(edit && !v ? n == -2 : n > 0);
            cases++, parts += n > 0 ? n : 0;
        }
    /* bytes of a video (ENCODED), and bytes that are no video: the plan's failure, word for word */
    {
        size_t n;
        void *bytes = tu_read_file(tu_path(vdir, "video_h264_bframes.mp4"), &n);
        qvl_item it;
        qvl_item_default(&it);
        it.kind = QVL_ITEM_ENCODED, it.data = bytes, it.size = n, it.preprocess = &pre;
        CHECK(stream_case(ctx, &it, QVL_OUTPUT_CONCAT, QVL_DTYPE_F16, 16, "encoded bytes") > 1);
        it.size = n / 3; /* cut short */
        stream_case(ctx, &it, QVL_OUTPUT_CONCAT, QVL_DTYPE_F32, 16, "encoded bytes cut short");
        it.data = "not a video at all", it.size = 18, it.label = "junk";
        CHECK(stream_case(ctx, &it, QVL_OUTPUT_CONCAT, QVL_DTYPE_F32, 16, "junk") == -1);
        free(bytes);
        cases += 3;
    }
#endif
    /* frames in memory: 41 frames, 21 temporal patches (the last padded), pieces of 1, 2 and 5 patches */
    static uint8_t px[41][64 * 96 * 3];
    uint32_t rs = 11;
    for (size_t f = 0; f < 41; f++)
        for (size_t i = 0; i < sizeof px[0]; i++) px[f][i] = (uint8_t)(tu_frand(&rs) * 127 + 128);
    qvl_pixels frames[41];
    for (size_t f = 0; f < 41; f++) frames[f] = (qvl_pixels){px[f], 96, 64, 3, 0};
    qvl_item fr;
    qvl_item_default(&fr);
    fr.kind = QVL_ITEM_FRAMES, fr.frames = frames, fr.n_frames = 41, fr.fps = 2;
    static const size_t caps[] = {24, 48, 120, 0};
    for (size_t c = 0; c < 4; c++) {
        const int n = stream_case(ctx, &fr, QVL_OUTPUT_CONCAT, QVL_DTYPE_F32, caps[c], "frames");
        CHECK(n == (c == 0 ? 21 : c == 1 ? 11 : c == 2 ? 5 : 1));
        cases++, parts += n > 0 ? n : 0;
    }
    /* an image: one part */
    qvl_item im;
    qvl_item_default(&im);
    im.kind = QVL_ITEM_PIXELS, im.image = frames[0];
    CHECK(stream_case(ctx, &im, QVL_OUTPUT_SPLIT, QVL_DTYPE_F32, 16, "image") == 1);
    cases++;
    /* stopped by the callback at the 3rd part; cancelled through the ctx at the 2nd; by the params' cancel_fn */
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.max_batch_rows = 24;
    told t = {0};
    t.stop_at = 3;
    CHECK(qvl_encode_stream(ctx, &fr, &pp, on_told, &t, &err) == QVL_ERR_CANCELLED);
    CHECK(strstr(err.message, "item 0: stopped by the chunk callback after 18 of its 126 tokens") != NULL);
    CHECK(t.calls == 3 && t.bad == 0);
    free(t.buf);
    memset(&t, 0, sizeof t);
    t.ctx = ctx, t.cancel_at = 2;
    CHECK(qvl_encode_stream(ctx, &fr, &pp, on_told, &t, &err) == QVL_ERR_CANCELLED);
    CHECK(strstr(err.message, "cancelled after 12 of its 126 tokens") != NULL);
    CHECK(t.calls == 2 && t.bad == 0);
    qvl_ctx_uncancel(ctx);
    free(t.buf);
    memset(&t, 0, sizeof t);
    pp.cancel_fn = always_stop, pp.cancel_user = NULL;
    CHECK(qvl_encode_stream(ctx, &fr, &pp, on_told, &t, &err) == QVL_ERR_CANCELLED);
    CHECK(t.calls == 0);
    printf("streamed encodes equal the whole encode: %d cases, %d parts\n", cases, parts);
    /* bad arguments */
    CHECK(qvl_encode_stream(NULL, &fr, NULL, on_told, &t, &err) == QVL_ERR_INVALID_ARG);
    CHECK(qvl_encode_stream(ctx, &fr, NULL, NULL, &t, &err) == QVL_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "qvl_encode_stream: fn is NULL") != NULL);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    tu_rmtree(dir);
}

/* What qvl_preprocess_stream told, gathered, checked as told: parts in order, back to back, whole patches. */
typedef struct rows_told {
    float *buf;
    qvl_item_info first;
    size_t next, row_len;
    int calls, bad, stop_at;
} rows_told;

static int on_rows(void *user, const qvl_item_info *info, const qvl_rows_chunk *c) {
    rows_told *t = user;
    if (t->calls++ == 0) {
        t->first = *info;
        t->row_len = c->row_len;
        t->buf = calloc(info->n_rows ? info->n_rows * c->row_len : 1, sizeof(float));
    }
    const size_t per_t = (size_t)info->grid.h * info->grid.w;
    if (!t->buf || info->n_rows != t->first.n_rows || c->row0 != t->next || c->n_rows == 0 || c->row_len != t->row_len ||
        c->row0 + c->n_rows > info->n_rows || (size_t)c->t0 * per_t != c->row0 || (size_t)c->t * per_t != c->n_rows ||
        c->tok0 != c->row0 / 4 || c->n_tokens != c->n_rows / 4 || info->status != QVL_OK) {
        t->bad++;
        return 1;
    }
    memcpy(t->buf + c->row0 * c->row_len, c->rows, c->n_rows * c->row_len * sizeof(float));
    t->next += c->n_rows;
    return t->stop_at && t->calls == t->stop_at;
}

/* Item `it`'s rows streamed (pieces of max_batch_rows `cap`, on ctx or none) against its plan's: the same status and,
 * for an item that plans, every row told once, in order, the same bits. The parts told (-1 on a failure, -2 when
 * sampled again after parts were told). */
static int rows_case(qvl_ctx *ctx, const qvl_item *it, size_t cap, const char *what) {
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    qvl_plan *plan = NULL;
    qvl_error err, serr;
    CHECK(qvl_plan_create(ctx, it, 1, &pp, &plan, &err) == QVL_OK);
    if (!plan) return -1;
    qvl_item_info info;
    qvl_plan_item(plan, 0, &info);
    pp.max_batch_rows = cap;
    rows_told t = {0};
    const qvl_status s = qvl_preprocess_stream(ctx, it, &pp, on_rows, &t, &serr);
    int parts = t.calls;
    if (info.status == QVL_OK && s == QVL_ERR_RESAMPLED && t.calls > 0 && t.bad == 0 &&
        strstr(serr.message, "is sampled again over the frames it has: plan it whole (qvl_plan_create)") != NULL) {
        parts = -2;
    } else if (s != info.status) {
        CHECK(s == info.status);
        printf("  %s: whole %s (%s), stream %s (%s)\n", what, qvl_status_name(info.status), info.message,
               qvl_status_name(s), serr.message);
        parts = -1;
    } else if (s == QVL_OK) {
        const int same = t.bad == 0 && t.next == info.n_rows && t.first.grid.t == info.grid.t &&
                         t.first.n_frames == info.n_frames &&
                         memcmp(t.buf, qvl_plan_rows(plan, 0), info.n_rows * t.row_len * sizeof(float)) == 0;
        CHECK(same);
        if (!same) printf("  %s: the streamed rows differ from the plan's (bad %d)\n", what, t.bad), parts = -1;
    } else {
        CHECK(strcmp(serr.message, info.message) == 0);
        if (strcmp(serr.message, info.message) != 0) printf("  %s: messages differ:\n    %s\n    %s\n", what, serr.message, info.message);
        parts = -1;
    }
    free(t.buf);
    qvl_plan_free(plan);
    return parts;
}

/* qvl_preprocess_stream: the rows of every clip of the corpus in pieces (without a ctx), frames in memory, an image,
 * on a ctx; stops; bad arguments. */
static void test_rows_stream(void) {
    qvl_preprocess_params pre;
    qvl_preprocess_params_default(&pre);
    pre.video_min_pixels = 4096, pre.video_max_pixels = 64 * 64 * 8;
    int cases = 0, parts = 0;
#if QVL_WITH_VIDEO
    char vdir[1024];
    tu_source_path("tests/data/video", vdir, sizeof vdir);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        char path[1100];
        snprintf(path, sizeof path, "%s", tu_path(vdir, all[i]));
        qvl_item it;
        qvl_item_default(&it);
        it.kind = QVL_ITEM_PATH, it.path = path, it.preprocess = &pre;
        const int n = rows_case(NULL, &it, 16, all[i]);
        CHECK(strcmp(all[i], "video_editlist.mp4") == 0 ? n == -2 : n > 0);
        cases++, parts += n > 0 ? n : 0;
    }
    {
        qvl_item it;
        qvl_item_default(&it);
        it.kind = QVL_ITEM_ENCODED, it.data = "not a video at all", it.size = 18, it.label = "junk";
        CHECK(rows_case(NULL, &it, 16, "junk") == -1);
        cases++;
    }
#endif
    static uint8_t px[9][32 * 64 * 3];
    uint32_t rs = 5;
    for (size_t f = 0; f < 9; f++)
        for (size_t i = 0; i < sizeof px[0]; i++) px[f][i] = (uint8_t)(tu_frand(&rs) * 255);
    qvl_pixels frames[9];
    for (size_t f = 0; f < 9; f++) frames[f] = (qvl_pixels){px[f], 64, 32, 3, 0};
    qvl_item fr;
    qvl_item_default(&fr);
    fr.kind = QVL_ITEM_FRAMES, fr.frames = frames, fr.n_frames = 9, fr.fps = 2, fr.preprocess = &pre;
    CHECK(rows_case(NULL, &fr, 1, "frames, 1 patch a piece") == 5);
    CHECK(rows_case(NULL, &fr, 0, "frames, one piece") == 1);
    qvl_item im;
    qvl_item_default(&im);
    im.kind = QVL_ITEM_PIXELS, im.image = frames[0];
    CHECK(rows_case(NULL, &im, 1, "image") == 1);
    cases += 3;
    /* on a ctx (its model's geometry and limits) */
    char dir[1024];
    tu_tmpdir(dir, sizeof dir);
    tu_synth(dir, "tiny", 3, QVL_LAYOUT_HF);
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    qvl_error err;
    CHECK(qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    CHECK(m && qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    if (ctx) {
        const int n = rows_case(ctx, &fr, 16, "frames on a ctx"); /* 8 rows a temporal patch: 2 a piece */
        CHECK(n == 3);
        if (n != 3) printf("  frames on a ctx: %d parts\n", n);
        cases++;
    }
    /* stopped at the 2nd part; by cancel_fn; bad arguments */
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.max_batch_rows = 8;
    rows_told t = {0};
    t.stop_at = 2;
    CHECK(qvl_preprocess_stream(NULL, &fr, &pp, on_rows, &t, &err) == QVL_ERR_CANCELLED);
    CHECK(strstr(err.message, "stopped by the chunk callback after") != NULL);
    CHECK(t.calls == 2 && t.bad == 0);
    free(t.buf);
    memset(&t, 0, sizeof t);
    pp.cancel_fn = always_stop;
    CHECK(qvl_preprocess_stream(NULL, &fr, &pp, on_rows, &t, &err) == QVL_ERR_CANCELLED);
    CHECK(t.calls == 0);
    CHECK(qvl_preprocess_stream(NULL, NULL, NULL, on_rows, &t, &err) == QVL_ERR_INVALID_ARG);
    CHECK(qvl_preprocess_stream(NULL, &fr, NULL, NULL, &t, &err) == QVL_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "qvl_preprocess_stream: fn is NULL") != NULL);
    printf("streamed rows equal the plan's: %d cases, %d parts\n", cases, parts);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    tu_rmtree(dir);
}

int main(void) {
    test_same_rows();
    test_any_order();
    test_held();
    test_pieces();
    test_stream();
    test_rows_stream();
    return tu_finish("test_video_stream");
}
