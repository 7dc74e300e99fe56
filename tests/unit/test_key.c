/* test_key.c — qvl_item_key: the same bytes as PATH and ENCODED give the same key; pixels in any stride the same
 * key; a change of any input to the embeddings (content, preprocessing, decoding, video sampling, pos_mode, weights)
 * gives another, and so does the output's dtype, layout or deepstack choice; a known key stays pinned, so the
 * serialisation cannot change without a new tag; bad items fail with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl.h"
#include "testutil.h"

static qvl_model *g_m, *g_m2;
static qvl_ctx *g_c, *g_c_lin;

static void key_of(qvl_ctx *c, const qvl_item *it, const qvl_plan_params *pp, char hex[QVL_KEY_HEX]) {
    qvl_error err;
    uint8_t d[QVL_KEY_BYTES];
    qvl_status s = qvl_item_key(c, it, pp, d, hex, &err);
    if (s != QVL_OK) printf("key failed: %s\n", err.message);
    CHECK(s == QVL_OK);
    CHECK(strlen(hex) == 64);
}

int main(void) {
    char tmp[1024], d1[1100], d2[1100], photo[1024];
    tu_tmpdir(tmp, sizeof tmp);
    snprintf(d1, sizeof d1, "%s/m1", tmp);
    snprintf(d2, sizeof d2, "%s/m2", tmp);
    g_m = tu_synth_load(d1, 1);
    g_m2 = tu_synth_load(d2, 2);
    if (!g_m || !g_m2) return tu_finish("test_key");
    qvl_error err;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = 1;
    CHECK(qvl_ctx_create(g_m, &cp, &g_c, &err) == QVL_OK);
    cp.pos_mode = QVL_POS_LINSPACE;
    CHECK(qvl_ctx_create(g_m, &cp, &g_c_lin, &err) == QVL_OK);
    cp.pos_mode = QVL_POS_CLOSED_FORM;
    qvl_ctx *c2 = NULL;
    CHECK(qvl_ctx_create(g_m2, &cp, &c2, &err) == QVL_OK);

    /* PATH and ENCODED of the same bytes */
    tu_source_path("tests/data/photos/rocket.jpg", photo, sizeof photo);
    size_t n = 0;
    unsigned char *bytes = tu_read_file(photo, &n);
    CHECK(bytes && n > 1000);
    char k_path[QVL_KEY_HEX], k_enc[QVL_KEY_HEX], k[QVL_KEY_HEX];
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_PATH, it.path = photo;
    key_of(g_c, &it, NULL, k_path);
    qvl_item e;
    qvl_item_default(&e);
    e.kind = QVL_ITEM_ENCODED, e.data = bytes, e.size = n;
    key_of(g_c, &e, NULL, k_enc);
    CHECK(strcmp(k_path, k_enc) == 0);
    /* a copy of the file under another name: the same key (the path is not part of it) */
    char copy[1100];
    snprintf(copy, sizeof copy, "%s/other-name.bin", tmp);
    FILE *f = fopen(copy, "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n);
    if (f) fclose(f);
    it.path = copy;
    key_of(g_c, &it, NULL, k);
    CHECK(strcmp(k, k_path) == 0);
    it.path = photo;
    /* pinned: the tuple "qvl-key-v1" of the tiny synthetic model (seed 1) and rocket.jpg */
    printf("key(rocket.jpg, tiny seed 1) = %s\n", k_path);
    CHECK(strcmp(k_path, "86ae8814e74cae5bb862f14fa7c17fe20d3aa1768944f6055ee5ee0e16dde048") == 0);
    /* the output's dtype, layout and DeepStack choice each change it (a cache entry holds that output); the batch
     * size does not */
    qvl_plan_params pp;
    for (int field = 0; field < 4; field++) {
        qvl_plan_params_default(&pp);
        switch (field) {
        case 0: pp.dtype = QVL_DTYPE_BF16; break;
        case 1: pp.dtype = QVL_DTYPE_F16; break;
        case 2: pp.layout = QVL_OUTPUT_SPLIT; break;
        case 3: pp.deepstack = !pp.deepstack; break;
        }
        key_of(g_c, &it, &pp, k);
        CHECK(strcmp(k, k_path) != 0);
    }
    qvl_plan_params_default(&pp);
    pp.max_batch_rows = 64;
    key_of(g_c, &it, &pp, k);
    CHECK(strcmp(k, k_path) == 0);
    pp.dtype = (qvl_dtype)7;
    uint8_t dd[QVL_KEY_BYTES];
    CHECK(qvl_item_key(g_c, &it, &pp, dd, k, &err) == QVL_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "dtype") != NULL);
    /* one byte of content */
    bytes[n / 2] ^= 1;
    key_of(g_c, &e, NULL, k);
    CHECK(strcmp(k, k_path) != 0);
    bytes[n / 2] ^= 1;
    /* weights, pos_mode, precision */
    key_of(c2, &it, NULL, k);
    CHECK(strcmp(k, k_path) != 0);
    {
        qvl_load_params lp;
        qvl_load_params_default(&lp);
        lp.precision = QVL_PRECISION_BF16;
        qvl_model *mb = NULL;
        qvl_ctx *cb = NULL;
        CHECK(qvl_model_load(d1, &lp, &mb, &err) == QVL_OK);
        qvl_ctx_params cpb;
        qvl_ctx_params_default(&cpb);
        cpb.n_threads = 1;
        CHECK(mb && qvl_ctx_create(mb, &cpb, &cb, &err) == QVL_OK);
        if (cb) {
            key_of(cb, &it, NULL, k);
            CHECK(strcmp(k, k_path) != 0);
        }
        qvl_ctx_free(cb);
        qvl_model_free(mb);
    }
    key_of(g_c_lin, &it, NULL, k);
    CHECK(strcmp(k, k_path) != 0);
    /* every preprocessing, decoding and video field, through the plan's defaults and through the item */
    qvl_preprocess_params base;
    qvl_preprocess_params_default(&base);
    CHECK(qvl_preprocess_params_load(d1, &base, NULL, &err) == QVL_OK);
    char k_cap[QVL_KEY_HEX] = "";
    for (int field = 0; field < 15; field++) {
        qvl_preprocess_params p = base;
        switch (field) {
        case 0: p.resize = QVL_RESIZE_PIL; break;
        case 1: p.min_pixels += 1; break;
        case 2: p.max_pixels -= 1; break;
        case 3: p.video_min_pixels += 1; break;
        case 4: p.video_max_pixels -= 1; break;
        case 5: p.size_h = 64; break;
        case 6: p.size_w = 64; break;
        case 7: p.image_mean[2] = 0.25f; break;
        case 8: p.image_std[0] = 0.25f; break;
        case 9: p.rescale_factor = 1.0 / 256; break;
        case 10: p.patch += 1; break;
        case 11: p.temporal_patch += 1; break;
        case 12: p.merge += 1; break;
        case 13: p.cap_pixels_per_frame = 1; break; /* transformers' per-frame cap, and its token count */
        case 14: p.cap_pixels_per_frame = 1, p.max_video_tokens = 256; break;
        }
        char kp[QVL_KEY_HEX], ki[QVL_KEY_HEX];
        qvl_plan_params_default(&pp);
        pp.preprocess = &p;
        key_of(g_c, &it, &pp, kp);
        CHECK(strcmp(kp, k_path) != 0);
        qvl_item it2 = it;
        it2.preprocess = &p;
        key_of(g_c, &it2, NULL, ki);
        CHECK(strcmp(ki, kp) == 0);
        if (field == 13) snprintf(k_cap, sizeof k_cap, "%s", kp);
        if (field == 14) CHECK(strcmp(kp, k_cap) != 0);
    }
    /* the cap's token count without the cap changes no output and no key (keys made before the cap existed stay) */
    {
        qvl_preprocess_params p = base;
        p.max_video_tokens = 256;
        qvl_plan_params_default(&pp);
        pp.preprocess = &p;
        key_of(g_c, &it, &pp, k);
        CHECK(strcmp(k, k_path) == 0);
    }
    /* the defaults spelt out are the defaults */
    qvl_plan_params_default(&pp);
    pp.preprocess = &base;
    key_of(g_c, &it, &pp, k);
    CHECK(strcmp(k, k_path) == 0);
    for (int field = 0; field < 7; field++) {
        qvl_video_params v;
        qvl_video_params_default(&v);
        CHECK(qvl_preprocess_params_load(d1, NULL, &v, &err) == QVL_OK);
        qvl_decode_params dp;
        qvl_decode_params_default(&dp);
        qvl_item it2 = it;
        switch (field) {
        case 0: v.fps = 1; break;
        case 1: v.num_frames = 8; break;
        case 2: v.min_frames = 2; break;
        case 3: v.max_frames = 16; break;
        case 4: v.default_fps = 30; break;
        case 5: dp.apply_exif = 0; break;
        case 6: dp.alpha = QVL_ALPHA_DROP; break;
        }
        if (field < 5) it2.video = &v;
        else it2.decode = &dp;
        key_of(g_c, &it2, NULL, k);
        CHECK(strcmp(k, k_path) != 0);
    }
    /* a decode limit only refuses: not part of the key */
    qvl_decode_params lim;
    qvl_decode_params_default(&lim);
    lim.max_pixels = 1u << 30;
    qvl_item it3 = it;
    it3.decode = &lim;
    key_of(g_c, &it3, NULL, k);
    CHECK(strcmp(k, k_path) == 0);

    /* PIXELS: the stride does not count, the content and channels do */
    enum { W = 40, H = 30 };
    static uint8_t px[H][W][3], padded[H][W * 3 + 8], rgba[H][W][4];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int ch = 0; ch < 3; ch++) {
                px[y][x][ch] = (uint8_t)(y * 7 + x * 3 + ch * 50);
                padded[y][x * 3 + ch] = px[y][x][ch];
                rgba[y][x][ch] = px[y][x][ch];
            }
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) rgba[y][x][3] = 255;
    qvl_item p1;
    qvl_item_default(&p1);
    p1.kind = QVL_ITEM_PIXELS;
    p1.image = (qvl_pixels){&px[0][0][0], W, H, 3, 0};
    char kpx[QVL_KEY_HEX];
    key_of(g_c, &p1, NULL, kpx);
    p1.image = (qvl_pixels){&padded[0][0], W, H, 3, sizeof padded[0]};
    key_of(g_c, &p1, NULL, k);
    CHECK(strcmp(k, kpx) == 0);
    p1.image = (qvl_pixels){&rgba[0][0][0], W, H, 4, 0};
    key_of(g_c, &p1, NULL, k);
    CHECK(strcmp(k, kpx) != 0);
    px[H - 1][W - 1][2] ^= 1;
    p1.image = (qvl_pixels){&px[0][0][0], W, H, 3, 0};
    key_of(g_c, &p1, NULL, k);
    CHECK(strcmp(k, kpx) != 0);
    px[H - 1][W - 1][2] ^= 1;
    p1.image = (qvl_pixels){&px[0][0][0], H, W, 3, 0}; /* the same bytes as another shape */
    key_of(g_c, &p1, NULL, k);
    CHECK(strcmp(k, kpx) != 0);

    /* FRAMES: fps and frame count count */
    qvl_pixels fr[2] = {{&px[0][0][0], W, H, 3, 0}, {&px[0][0][0], W, H, 3, 0}};
    qvl_item fi;
    qvl_item_default(&fi);
    fi.kind = QVL_ITEM_FRAMES, fi.frames = fr, fi.n_frames = 2, fi.fps = 2;
    char kf[QVL_KEY_HEX];
    key_of(g_c, &fi, NULL, kf);
    CHECK(strcmp(kf, kpx) != 0);
    fi.fps = 3;
    key_of(g_c, &fi, NULL, k);
    CHECK(strcmp(k, kf) != 0);
    fi.fps = 2, fi.n_frames = 1;
    key_of(g_c, &fi, NULL, k);
    CHECK(strcmp(k, kf) != 0);

    /* ROWS: rows and grid */
    qvl_model_info in;
    qvl_model_get_info(g_m, &in);
    qvl_grid g = {1, 4, 4};
    const size_t rl = (size_t)in.row_len, nr = qvl_patch_rows(&g, 1);
    float *rows = calloc(nr * rl, sizeof *rows);
    for (size_t i = 0; i < nr * rl; i++) rows[i] = (float)(i % 97) / 97.0f;
    qvl_item ri;
    qvl_item_default(&ri);
    ri.kind = QVL_ITEM_ROWS, ri.rows = rows, ri.grid = g;
    char kr[QVL_KEY_HEX];
    key_of(g_c, &ri, NULL, kr);
    const float keep = rows[nr * rl - 1];
    rows[nr * rl - 1] = keep + 1.0f;
    key_of(g_c, &ri, NULL, k);
    CHECK(strcmp(k, kr) != 0);
    rows[nr * rl - 1] = keep;
    ri.grid = (qvl_grid){2, 2, 4};
    key_of(g_c, &ri, NULL, k);
    CHECK(strcmp(k, kr) != 0);
    /* preprocessing does not enter a ROWS key */
    ri.grid = g;
    qvl_plan_params_default(&pp);
    qvl_preprocess_params pil = base;
    pil.resize = QVL_RESIZE_PIL;
    pp.preprocess = &pil;
    key_of(g_c, &ri, &pp, k);
    CHECK(strcmp(k, kr) == 0);

    /* failures name the cause */
    uint8_t d[QVL_KEY_BYTES];
    char hex[QVL_KEY_HEX];
    qvl_item bad = it;
    bad.path = "/nonexistent/qvl-test-key.jpg";
    CHECK(qvl_item_key(g_c, &bad, NULL, d, hex, &err) == QVL_ERR_IO);
    CHECK(strstr(err.message, "qvl-test-key.jpg") != NULL);
    CHECK(hex[0] == 0);
    ri.row_len = rl + 1;
    CHECK(qvl_item_key(g_c, &ri, NULL, d, hex, &err) == QVL_ERR_SHAPE);
    ri.row_len = 0, ri.grid = (qvl_grid){1, 3, 4};
    CHECK(qvl_item_key(g_c, &ri, NULL, d, hex, &err) == QVL_ERR_INVALID_ARG);
    CHECK(qvl_item_key(NULL, &it, NULL, d, hex, &err) == QVL_ERR_INVALID_ARG);
    qvl_item zero;
    memset(&zero, 0, sizeof zero);
    CHECK(qvl_item_key(g_c, &zero, NULL, d, hex, &err) == QVL_ERR_INVALID_ARG);

    free(rows);
    free(bytes);
    qvl_ctx_free(g_c);
    qvl_ctx_free(g_c_lin);
    qvl_ctx_free(c2);
    qvl_model_free(g_m);
    qvl_model_free(g_m2);
    tu_rmtree(tmp);
    return tu_finish("test_key");
}
