/* test_preprocess.c — images to pixel rows, bit for bit against transformers' Qwen3-VL image processors.
 *
 * tests/fixtures/preprocess.safetensors (tests/oracle/preprocess_oracle.py) holds, per corpus image, the grid,
 * xxh64 digests of both processors' rows and of both resized uint8 images, and each path's first row. Synthetic
 * inputs are regenerated here from their recipe; files are decoded with qvl_image_load, alpha dropped
 * (QVL_ALPHA_DROP), because the oracle feeds the processors load_image's RGB; either way the input's RGB bytes
 * must have the xxh64 the oracle recorded for what its processors saw (a refused case: its recorded size). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "qvl.h"
#include "testutil.h"

/* The oracle's synth_image. */
static int synth_image(const char *recipe, qvl_image *img) {
    char kind[16];
    int w, h, seed;
    if (sscanf(recipe, "%15[a-z],%d,%d,%d", kind, &w, &h, &seed) != 4) return 0;
    uint8_t *p = malloc((size_t)w * h * 3);
    uint64_t base = (uint64_t)seed * 0x9E3779B97F4A7C15ull;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                size_t i = ((size_t)y * w + x) * 3 + c;
                if (strcmp(kind, "noise") == 0) p[i] = (uint8_t)(tu_splitmix64(base + i) >> 56);
                else p[i] = (uint8_t)(c == 0 ? x * 255 / (w > 1 ? w - 1 : 1)
                                      : c == 1 ? y * 255 / (h > 1 ? h - 1 : 1) : (7 * (x + y)) % 256);
            }
    *img = (qvl_image){w, h, p};
    return 1;
}

static int digest_matches(const st_file *fx, const char *name, const char *what, const void *data, size_t n) {
    char key[300];
    snprintf(key, sizeof key, "%s.%s.xxh64", name, what);
    const char *want = st_meta(fx, key);
    if (!want) return 0;
    unsigned long long got = (unsigned long long)XXH64(data, n, 0);
    return strtoull(want, NULL, 10) == got;
}

/* First differing row element against the stored row0, for the report. */
static void report_row0(const st_file *fx, const char *name, const char *path, const float *row, size_t len) {
    char key[300];
    snprintf(key, sizeof key, "%s.%s.row0", name, path);
    const st_tensor *t = st_find(fx, key);
    if (!t || t->nbytes != len * 4) return;
    for (size_t i = 0; i < len; i++) {
        float ref; /* fixture data is not necessarily 4-byte aligned */
        memcpy(&ref, (const unsigned char *)t->data + 4 * i, 4);
        if (memcmp(&ref, &row[i], 4) != 0) {
            printf("    %s row 0 first differs at column %zu: ours %.9g, reference %.9g\n", path, i, row[i], ref);
            return;
        }
    }
    printf("    %s row 0 identical; the difference is further down\n", path);
}

static void run_case(const st_file *fx, const char *name) {
    qvl_image img = {0};
    qvl_error err;
    err_clear(&err);
    char key[300];
    snprintf(key, sizeof key, "%s.recipe", name);
    const char *recipe = st_meta(fx, key);
    if (recipe) {
        CHECK(synth_image(recipe, &img));
    } else {
        char path[1024];
        if (!QVL_WITH_MEDIA && !strstr(name, ".bmp")) {
            printf("%s: skipped, built without image decoders (QVL_MEDIA=OFF)\n", name);
            return;
        }
        tu_source_path(name + 5 /* "file:" */, path, sizeof path);
        /* the oracle's input is load_image's RGB (alpha dropped); compositing is test_decode's subject */
        qvl_decode_params dp;
        qvl_decode_params_default(&dp);
        dp.alpha = QVL_ALPHA_DROP;
        CHECK(qvl_image_load(path, &dp, &img, &err) == QVL_OK);
        if (!img.rgb) {
            printf("%s: %s\n", name, err.message);
            return;
        }
    }
    /* The input is what the oracle's processors saw: its decoded (or regenerated) RGB bytes have the xxh64 the
     * oracle recorded, for files and synthetic images alike. A case the processors refuse has no digest; its
     * recorded size must match instead. */
    snprintf(key, sizeof key, "%s.error", name);
    const int refused = st_meta(fx, key) != NULL;
    snprintf(key, sizeof key, "%s.input.xxh64", name);
    const int has_digest = st_meta(fx, key) != NULL;
    if (refused) {
        snprintf(key, sizeof key, "%s.size", name);
        const st_tensor *sz = st_find(fx, key);
        int64_t hw[2] = {0};
        if (sz && sz->nbytes == 16) memcpy(hw, sz->data, 16);
        CHECK(hw[0] == img.height && hw[1] == img.width);
    } else {
        const int same = digest_matches(fx, name, "input", img.rgb, (size_t)img.width * img.height * 3);
        CHECK(has_digest);
        CHECK(same);
        if (!same) printf("%s: decoded input %dx%d differs from the oracle's (xxh64 %s)\n", name, img.width,
                          img.height, has_digest ? "differs" : "missing");
    }

    qvl_preprocess_params p;
    qvl_preprocess_params_default(&p);
    qvl_grid grid;
    if (refused) {
        qvl_status s = qvl_image_grid(&img, &p, &grid, &err);
        printf("%-40s %dx%d refused: %s\n", name, img.width, img.height, err.message);
        CHECK(s == QVL_ERR_INVALID_ARG);
        qvl_image_free(&img);
        return;
    }
    snprintf(key, sizeof key, "%s.grid", name);
    const st_tensor *g = st_find(fx, key);
    CHECK(g && g->nbytes == 24);
    CHECK(qvl_image_grid(&img, &p, &grid, &err) == QVL_OK);
    int64_t want[3] = {0};
    if (g) memcpy(want, g->data, 24);
    CHECK(grid.t == want[0] && grid.h == want[1] && grid.w == want[2]);
    size_t n_rows = (size_t)grid.t * grid.h * grid.w, row_len = 1536;
    float *rows = malloc(n_rows * row_len * sizeof(float));
    static const struct { qvl_resize_mode mode; const char *rows, *resized; } paths[] = {
        {QVL_RESIZE_TORCHVISION, "rows_fast", "resized_tv"}, {QVL_RESIZE_PIL, "rows_pil", "resized_pil"}};
    int ok_all = 1;
    for (int k = 0; k < 2; k++) {
        p.resize = paths[k].mode;
        qvl_image rs = {0};
        CHECK(qvl_image_resize(&img, grid.h * 16, grid.w * 16, paths[k].mode, 0, &rs, &err) == QVL_OK);
        int ok_resized = rs.rgb && digest_matches(fx, name, paths[k].resized, rs.rgb, (size_t)rs.width * rs.height * 3);
        qvl_image_free(&rs);
        qvl_grid g2;
        CHECK(qvl_preprocess_image(&img, &p, rows, &g2, &err) == QVL_OK);
        int ok_rows = digest_matches(fx, name, paths[k].rows, rows, n_rows * row_len * sizeof(float));
        CHECK(ok_resized);
        CHECK(ok_rows);
        if (!ok_rows) report_row0(fx, name, paths[k].rows, rows, row_len);
        ok_all &= ok_resized && ok_rows;
    }
    printf("%-40s %4dx%-4d -> grid %dx%dx%d (%zu tokens): resized and rows %s on both paths\n", name, img.width,
           img.height, grid.t, grid.h, grid.w, n_rows / 4, ok_all ? "bit-exact" : "DIFFER");
    free(rows);
    qvl_image_free(&img);
}

/* Videos given as frame arrays: tests/fixtures/video.safetensors (tests/oracle/video_oracle.py) holds
 * Qwen3VLVideoProcessor's rows as uint8 codes into a per-channel table of normalized values; so does
 * tests/fixtures/video_cap.safetensors (tests/oracle/video_cap_oracle.py) with transformers' per-frame cap on
 * (cap_pixels_per_frame=True; each case's size then holds max_video_tokens too). */
static void run_video_cases(const char *fixture) {
    char path[1024];
    tu_source_path(fixture, path, sizeof path);
    st_file *fx = NULL;
    qvl_error err;
    err_clear(&err);
    CHECK(st_load(path, SIZE_MAX, &fx, &err) == QVL_OK);
    if (!fx) return;
    const st_tensor *lut = st_find(fx, "pre.lut");
    CHECK(lut && lut->nbytes == 3 * 256 * 4);
    int n = 0;
    for (size_t i = 0; lut && i < fx->n_tensors; i++) {
        const char *name = fx->tensors[i].name;
        size_t len = strlen(name);
        if (strncmp(name, "pre.", 4) != 0 || len < 7 || strcmp(name + len - 6, ".codes") != 0) continue;
        char base[128], key[160];
        snprintf(base, sizeof base, "%.*s", (int)(len - 6), name);
        const st_tensor *codes = &fx->tensors[i], *frames, *grid, *size;
        snprintf(key, sizeof key, "%s.frames", base);
        frames = st_find(fx, key);
        snprintf(key, sizeof key, "%s.grid", base);
        grid = st_find(fx, key);
        snprintf(key, sizeof key, "%s.size", base);
        size = st_find(fx, key);
        CHECK(frames && grid && size && frames->ndim == 4);
        if (!(frames && grid && size)) continue;
        int64_t g[3], sz[3] = {0, 0, 0};
        memcpy(g, grid->data, 24);
        CHECK(size->nbytes == 16 || size->nbytes == 24);
        memcpy(sz, size->data, size->nbytes <= 24 ? size->nbytes : 24);
        qvl_video v = {.width = (int32_t)frames->shape[2], .height = (int32_t)frames->shape[1],
                       .n_frames = (int32_t)frames->shape[0], .rgb = (uint8_t *)frames->data};
        qvl_preprocess_params p;
        qvl_preprocess_params_default(&p);
        p.video_min_pixels = (uint64_t)sz[0];
        p.video_max_pixels = (uint64_t)sz[1];
        if (size->nbytes == 24) p.cap_pixels_per_frame = 1, p.max_video_tokens = (int32_t)sz[2];
        qvl_grid got;
        CHECK(qvl_video_grid(&v, &p, &got, &err) == QVL_OK);
        CHECK(got.t == g[0] && got.h == g[1] && got.w == g[2]);
        size_t rows = (size_t)codes->shape[0], cols = (size_t)codes->shape[1];
        CHECK(rows == qvl_patch_rows(&got, 1) && cols == 1536);
        float *ours = malloc(rows * cols * sizeof(float)), *ref = malloc(rows * cols * sizeof(float));
        float tab[3 * 256]; /* fixture data is not necessarily 4-byte aligned */
        memcpy(tab, lut->data, sizeof tab);
        const uint8_t *cd = codes->data;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) ref[r * cols + c] = tab[(c / 512) * 256 + cd[r * cols + c]];
        CHECK(qvl_preprocess_video(&v, &p, ours, &got, &err) == QVL_OK);
        size_t diff = 0;
        for (size_t k = 0; k < rows * cols; k++) diff += memcmp(&ours[k], &ref[k], 4) != 0;
        printf("%-40s %d frames %dx%d -> grid %dx%dx%d: %zu of %zu values differ\n", base, v.n_frames, v.width,
               v.height, got.t, got.h, got.w, diff, rows * cols);
        CHECK(diff == 0);
        free(ours);
        free(ref);
        n++;
    }
    CHECK(n >= 3);
    st_close(fx);
}

/* transformers' per-frame cap on 2472 (frames, size, budget, max_video_tokens) cases: the size
 * Qwen3VLVideoProcessor.resize chose with cap_pixels_per_frame=True (tests/oracle/video_cap_oracle.py), or the
 * error where it raised, against qvl_video_grid's; and the cap off gives the uncapped size. */
static void run_cap_sizes(void) {
    char path[1024];
    tu_source_path("tests/fixtures/video_cap.safetensors", path, sizeof path);
    st_file *fx = NULL;
    qvl_error err;
    CHECK(st_load(path, SIZE_MAX, &fx, &err) == QVL_OK);
    if (!fx) return;
    const st_tensor *par = st_find(fx, "cap.params"), *sz = st_find(fx, "cap.size");
    CHECK(par && sz && par->ndim == 2 && par->shape[1] == 6 && sz->shape[0] == par->shape[0]);
    size_t bad = 0, n = par ? (size_t)par->shape[0] : 0, changed = 0;
    static uint8_t dummy[3];
    for (size_t i = 0; sz && i < n; i++) {
        int64_t q[6], want[2];
        memcpy(q, (const uint8_t *)par->data + i * 48, 48);
        memcpy(want, (const uint8_t *)sz->data + i * 16, 16);
        qvl_video v = {.width = (int32_t)q[2], .height = (int32_t)q[1], .n_frames = (int32_t)q[0], .rgb = dummy};
        qvl_preprocess_params p;
        qvl_preprocess_params_default(&p);
        p.video_min_pixels = (uint64_t)q[3];
        p.video_max_pixels = (uint64_t)q[4];
        p.max_video_tokens = (int32_t)q[5];
        qvl_grid off, on;
        const qvl_status s_off = qvl_video_grid(&v, &p, &off, &err);
        p.cap_pixels_per_frame = 1;
        const qvl_status s = qvl_video_grid(&v, &p, &on, &err);
        const int ok = want[0] < 0 ? s == QVL_ERR_INVALID_ARG
                                   : s == QVL_OK && on.h * 16 == want[0] && on.w * 16 == want[1] &&
                                         on.t == (int32_t)((q[0] + 1) / 2);
        if (!ok && bad++ < 5)
            printf("  cap case %zu: %lld frames %lldx%lld, size (%lld, %lld), %lld tokens: want %lldx%lld, got %s "
                   "%dx%d\n", i, (long long)q[0], (long long)q[1], (long long)q[2], (long long)q[3], (long long)q[4],
                   (long long)q[5], (long long)want[0], (long long)want[1], qvl_status_name(s), on.h * 16, on.w * 16);
        if (s == QVL_OK && s_off == QVL_OK) changed += off.h != on.h || off.w != on.w;
    }
    /* from a model's video_preprocessor_config.json, as transformers' processor takes its attributes */
    char dir[1024];
    tu_tmpdir(dir, sizeof dir);
    const char *json = "{\"cap_pixels_per_frame\": true, \"max_video_tokens\": 256, \"size\": {\"shortest_edge\": "
                       "4096, \"longest_edge\": 25165824}}";
    CHECK(tu_write_file(tu_path(dir, "video_preprocessor_config.json"), json, strlen(json)));
    qvl_preprocess_params lp;
    qvl_preprocess_params_default(&lp);
    CHECK(lp.cap_pixels_per_frame == 0 && lp.max_video_tokens == 768);
    CHECK(qvl_preprocess_params_load(dir, &lp, NULL, &err) == QVL_OK);
    CHECK(lp.cap_pixels_per_frame == 1 && lp.max_video_tokens == 256);
    json = "{\"cap_pixels_per_frame\": null}";
    CHECK(tu_write_file(tu_path(dir, "video_preprocessor_config.json"), json, strlen(json)));
    CHECK(qvl_preprocess_params_load(dir, &lp, NULL, &err) == QVL_OK && lp.cap_pixels_per_frame == 1); /* kept */
    tu_rmtree(dir);
    printf("per-frame cap: %zu cases, %zu differ from transformers, %zu resized otherwise than without the cap\n", n,
           bad, changed);
    CHECK(n >= 2400 && bad == 0 && changed > 100);
    st_close(fx);
}

/* smart_resize at its edges, against transformers 5.23's (models/qwen2_vl/image_processing_qwen2_vl.py) values for
 * the same arguments: sides below factor (scaled up, not refused), aspect ratio exactly 200, min_pixels above
 * max_pixels, factors other than 32, min_pixels 0 where no side rounds to 0. Then the arguments it raises on
 * (max_pixels 0: ZeroDivisionError) or returns a 0 side for (min_pixels 0 and a side of at most factor/2), which
 * qvl refuses as bad arguments naming the parameter: before, the first gave factor x factor and the second
 * QVL_ERR_LIMIT, as if the image were too large. */
static void test_smart_resize_edges(void) {
    static const struct {
        int32_t h, w, factor;
        uint64_t min_px, max_px;
        int32_t want_h, want_w;
    } ok[] = {
        {10, 20, 32, 65536, 16777216, 192, 384},       {1, 1, 32, 65536, 16777216, 256, 256},
        {5, 7, 28, 3136, 12845056, 56, 84},            {15, 400, 32, 65536, 16777216, 64, 1344},
        {1, 200, 32, 65536, 16777216, 32, 3648},       {3, 600, 32, 65536, 16777216, 32, 3648},
        {20000, 30000, 32, 65536, 16777216, 3328, 4992}, {33, 33, 1, 0, 1u << 30, 33, 33},
        {100, 100, 32, 1u << 20, 4096, 64, 64},        {400, 400, 32, 0, 1u << 24, 384, 384},
        {17, 17, 32, 0, 1u << 24, 32, 32},             {31, 9, 16, 1, 1u << 24, 32, 16},
    };
    qvl_error err;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int32_t h = 0, w = 0;
        qvl_status s = qvl_smart_resize(ok[i].h, ok[i].w, ok[i].factor, ok[i].min_px, ok[i].max_px, &h, &w, &err);
        if (s != QVL_OK || h != ok[i].want_h || w != ok[i].want_w)
            fprintf(stderr, "  smart_resize(%d, %d, %d, %llu, %llu): %s %dx%d, want %dx%d\n", ok[i].h, ok[i].w,
                    ok[i].factor, (unsigned long long)ok[i].min_px, (unsigned long long)ok[i].max_px,
                    qvl_status_name(s), h, w, ok[i].want_h, ok[i].want_w);
        CHECK(s == QVL_OK && h == ok[i].want_h && w == ok[i].want_w);
    }
    int32_t h, w;
    CHECK(qvl_smart_resize(8, 400, 32, 0, 1u << 24, &h, &w, &err) == QVL_ERR_INVALID_ARG); /* reference: (0, 384) */
    CHECK(strstr(err.message, "min_pixels 0") && strstr(err.message, "384x0"));
    printf("smart_resize 8x400, min_pixels 0: %s\n", err.message);
    CHECK(qvl_smart_resize(16, 16, 32, 0, 1u << 24, &h, &w, &err) == QVL_ERR_INVALID_ARG); /* reference: (0, 0) */
    CHECK(qvl_smart_resize(100, 100, 32, 65536, 0, &h, &w, &err) == QVL_ERR_INVALID_ARG); /* ZeroDivisionError */
    CHECK(strstr(err.message, "max_pixels is 0") != NULL);
    /* through the grid query, as a plan asks it */
    static uint8_t rgb[400 * 8 * 3];
    qvl_image img = {400, 8, rgb};
    qvl_preprocess_params p;
    qvl_preprocess_params_default(&p);
    p.min_pixels = 0;
    qvl_grid g;
    CHECK(qvl_image_grid(&img, &p, &g, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "min_pixels 0"));
}

/* The grid query checks the image or frames it is asked about in both ways of choosing the target: a side below 1
 * is a bad argument, with an exact size too (before, size_h x size_w gave a grid for a 0x-7 image, and
 * preprocessing it then failed with QVL_ERR_LIMIT in the resize), and a resize the resize cannot do is refused
 * with the grid, before a plan allocates the rows. */
static void test_grid_source(void) {
    static uint8_t rgb[64 * 3];
    static float rows[4 * 1536];
    qvl_preprocess_params exact, smart;
    qvl_preprocess_params_default(&exact);
    exact.size_h = exact.size_w = 32;
    qvl_preprocess_params_default(&smart);
    qvl_error err;
    qvl_grid g;
    static const int32_t bad[][2] = {{0, -7}, {0, 2}, {2, 0}, {-2, 2}, {INT32_MIN, 5}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char size[32];
        snprintf(size, sizeof size, "%dx%d", bad[i][0], bad[i][1]);
        for (int e = 0; e < 2; e++) {
            const qvl_preprocess_params *p = e ? &exact : &smart;
            qvl_image img = {bad[i][0], bad[i][1], rgb};
            CHECK(qvl_image_grid(&img, p, &g, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, size));
            CHECK(qvl_preprocess_image(&img, p, rows, &g, &err) == QVL_ERR_INVALID_ARG);
            qvl_video v = {bad[i][0], bad[i][1], 2, rgb, NULL, 2, 1.0};
            CHECK(qvl_video_grid(&v, p, &g, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, size));
            CHECK(qvl_preprocess_video(&v, p, rows, &g, &err) == QVL_ERR_INVALID_ARG);
            if (i == 0 && e) printf("grid of a %s image, exact size: %s\n", size, err.message);
        }
    }
    /* a side the resize does not take (2^20 + 1) */
    const int32_t wide = (1 << 20) + 1;
    uint8_t *line = calloc((size_t)wide * 3, 1);
    CHECK(line != NULL);
    qvl_image img = {wide, 1, line};
    CHECK(line && qvl_image_grid(&img, &exact, &g, &err) == QVL_ERR_LIMIT && strstr(err.message, "1048577x1 -> 32x32"));
    free(line);
}

int main(void) {
    char path[1024];
    tu_source_path("tests/fixtures/preprocess.safetensors", path, sizeof path);
    st_file *fx = NULL;
    qvl_error err;
    err_clear(&err);
    CHECK(st_load(path, SIZE_MAX, &fx, &err) == QVL_OK);
    if (!fx) return tu_finish("test_preprocess");
    const char *cases = st_meta(fx, "cases");
    CHECK(cases != NULL);
    char *list = strdup(cases ? cases : "");
    int n = 0;
    for (char *save = NULL, *name = strtok_r(list, ";", &save); name; name = strtok_r(NULL, ";", &save), n++)
        run_case(fx, name);
    CHECK(n >= 10);
    free(list);

    /* smart_resize worked examples from the preprocessing reference (Qwen3-VL json limits). */
    static const int ex[][4] = {{480, 640, 480, 640},    {1000, 1000, 992, 992},   {1080, 1920, 1088, 1920},
                                {720, 1280, 704, 1280},  {336, 336, 320, 320},     {100, 100, 256, 256},
                                {32, 32, 256, 256},      {200, 300, 224, 320},     {3024, 4032, 3008, 4032},
                                {4000, 6000, 3328, 4992}};
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        int32_t h, w;
        CHECK(qvl_smart_resize(ex[i][0], ex[i][1], 32, 65536, 16777216, &h, &w, &err) == QVL_OK);
        CHECK(h == ex[i][2] && w == ex[i][3]);
    }
    run_video_cases("tests/fixtures/video.safetensors");
    run_video_cases("tests/fixtures/video_cap.safetensors");
    run_cap_sizes();

    int32_t h, w;
    CHECK(qvl_smart_resize(1, 201, 32, 65536, 16777216, &h, &w, &err) == QVL_ERR_INVALID_ARG);
    CHECK(qvl_smart_resize(0, 10, 32, 65536, 16777216, &h, &w, &err) == QVL_ERR_INVALID_ARG);
    test_smart_resize_edges();
    test_grid_source();
    st_close(fx);
    return tu_finish("test_preprocess");
}
