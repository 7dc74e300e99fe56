/* test_decode.c — qvl_image_load/decode against transformers' load path (Pillow 13), byte for byte.
 *
 * tests/fixtures/decode.safetensors (tests/oracle/decode_oracle.py) holds, for every file of tests/data/images/,
 * the RGB array convert_to_rgb(load_image(path)) returns (alpha dropped: QVL_ALPHA_DROP), for every one of them
 * with transparency also convert_to_rgb(exif_transpose(Image.open(path))) (composited onto white: the default),
 * and for the photos of tests/data/photos/ their shape and xxh64. Also: the files of tests/data/bad/ are refused
 * with the right status and a message naming the file, the pixel limit is applied from the header, apply_exif = 0
 * keeps the stored orientation, an unknown alpha mode is refused, qvl_image_free is safe on NULL and twice, and
 * decoding from memory names "<memory>". Runs under ASan/UBSan/LSan in CI. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "qvl.h"
#include "testutil.h"

/* Does img equal the reference t: U8 [h, w, 3] bytes, or U64 [4] h, w, 3, xxh64 (photos, large corpus files)? */
static int same_as(const st_tensor *t, const qvl_image *img, const char *name, const char *mode) {
    char what[600];
    snprintf(what, sizeof what, "%s (%s)", name, mode);
    if (t->dtype == ST_U64) {
        CHECK(t->ndim == 1 && t->shape[0] == 4);
        uint64_t want[4];
        memcpy(want, t->data, sizeof want);
        int ok = (uint64_t)img->height == want[0] && (uint64_t)img->width == want[1];
        uint64_t h = ok ? XXH64(img->rgb, (size_t)img->width * (size_t)img->height * 3, 0) : 0;
        if (!ok || h != want[3])
            fprintf(stderr, "  %s: got %dx%d xxh64 %016llx, want %llux%llu %016llx\n", what, img->width,
                    img->height, (unsigned long long)h, (unsigned long long)want[1], (unsigned long long)want[0],
                    (unsigned long long)want[3]);
        return ok && h == want[3];
    }
    CHECK(t->dtype == ST_U8 && t->ndim == 3 && t->shape[2] == 3);
    if (t->shape[0] != img->height || t->shape[1] != img->width) {
        fprintf(stderr, "  %s: got %dx%d, want %lldx%lld\n", what, img->width, img->height, (long long)t->shape[1],
                (long long)t->shape[0]);
        return 0;
    }
    return tu_same_bytes(img->rgb, t->data, (size_t)t->nbytes, what);
}

static int load_as(const char *path, const qvl_decode_params *p, qvl_image *img, const char *name) {
    qvl_error err;
    err_clear(&err);
    qvl_status s = qvl_image_load(path, p, img, &err);
    if (s != QVL_OK) fprintf(stderr, "  %s: %s\n", name, err.message);
    CHECK(s == QVL_OK && err.status == QVL_OK);
    return s == QVL_OK;
}

/* images/<name> is the drop reference (load_image first), white/<name> the composited one where the file has
 * transparency (else the white result is the drop one). Default params (NULL and qvl_decode_params_default) must
 * give the white one, QVL_ALPHA_DROP the drop one. */
static void test_corpus(const st_file *f) {
    char path[4096], rel[1024], wname[1024];
    size_t n_images = 0, n_photos = 0, n_white = 0, n_white_differs = 0;
    qvl_decode_params def, drop;
    qvl_decode_params_default(&def);
    CHECK(def.alpha == QVL_ALPHA_WHITE);
    qvl_decode_params_default(&drop);
    drop.alpha = QVL_ALPHA_DROP;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        int photo = strncmp(t->name, "photos/", 7) == 0;
        if (!photo && strncmp(t->name, "images/", 7) != 0) continue;
        snprintf(rel, sizeof rel, "tests/data/%s", t->name);
        tu_source_path(rel, path, sizeof path);
        qvl_image img;
        if (photo) {
            n_photos++;
            if (!load_as(path, NULL, &img, t->name)) continue;
            CHECK(same_as(t, &img, t->name, "default"));
            qvl_image_free(&img);
            continue;
        }
        n_images++;
        snprintf(wname, sizeof wname, "white/%s", t->name + 7);
        const st_tensor *w = st_find(f, wname);
        if (w) {
            n_white++;
            n_white_differs += w->nbytes != t->nbytes || memcmp(w->data, t->data, (size_t)t->nbytes) != 0;
        }
        const st_tensor *want_white = w ? w : t;
        if (load_as(path, &drop, &img, t->name)) {
            CHECK(same_as(t, &img, t->name, "QVL_ALPHA_DROP"));
            qvl_image_free(&img);
        }
        if (load_as(path, NULL, &img, t->name)) {
            CHECK(same_as(want_white, &img, t->name, "NULL params: white"));
            qvl_image_free(&img);
        }
        if (load_as(path, &def, &img, t->name)) {
            CHECK(same_as(want_white, &img, t->name, "default params: white"));
            qvl_image_free(&img);
        }
    }
    printf("decoded %zu corpus images (%zu with transparency, %zu of them differing between the alpha modes) and "
           "%zu photos\n", n_images, n_white, n_white_differs, n_photos);
    CHECK(n_images >= 50);
    CHECK(n_white >= 25);
    CHECK(n_white_differs >= 15);
}

typedef struct bad_case {
    const char *name;
    qvl_status want;
} bad_case;

static void test_bad(void) {
    static const bad_case cases[] = {
        {"truncated.jpg", QVL_ERR_FORMAT},       {"truncated_header.jpg", QVL_ERR_FORMAT},
        {"truncated_progressive.jpg", QVL_ERR_FORMAT},
        {"huge.jpg", QVL_ERR_LIMIT},             {"bad_crc.png", QVL_ERR_FORMAT},
        {"bad_crc_ihdr.png", QVL_ERR_FORMAT},
        {"truncated_idat.png", QVL_ERR_FORMAT},  {"zero_width.png", QVL_ERR_FORMAT},
        {"huge.png", QVL_ERR_LIMIT},             {"empty.png", QVL_ERR_FORMAT},
        {"text.txt", QVL_ERR_FORMAT},            {"truncated.webp", QVL_ERR_FORMAT},
        {"truncated.gif", QVL_ERR_FORMAT},       {"huge.gif", QVL_ERR_LIMIT},
        {"truncated.bmp", QVL_ERR_FORMAT},       {"zero_width.bmp", QVL_ERR_FORMAT},
    };
    char path[4096], rel[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(rel, sizeof rel, "tests/data/bad/%s", cases[i].name);
        tu_source_path(rel, path, sizeof path);
        qvl_image img;
        memset(&img, 0x5a, sizeof img);
        qvl_error err;
        err_clear(&err);
        qvl_status s = qvl_image_load(path, NULL, &img, &err);
        int ok = s == cases[i].want && err.status == s && strstr(err.message, cases[i].name) != NULL &&
                 img.rgb == NULL && img.width == 0 && img.height == 0;
        if (!ok)
            fprintf(stderr, "  bad/%s: status %s (want %s): %s\n", cases[i].name, qvl_status_name(s),
                    qvl_status_name(cases[i].want), err.message);
        CHECK(ok);
        qvl_image_free(&img);
    }
    /* a missing file is an I/O error */
    qvl_image img;
    qvl_error err;
    err_clear(&err);
    CHECK(qvl_image_load("/nonexistent/dir/x.png", NULL, &img, &err) == QVL_ERR_IO);
    CHECK(strstr(err.message, "/nonexistent/dir/x.png") != NULL);
    /* from memory: "<memory>" is the label */
    err_clear(&err);
    CHECK(qvl_image_decode("GIF89a", 6, NULL, &img, &err) == QVL_ERR_FORMAT);
    CHECK(strstr(err.message, "<memory>") != NULL);
    err_clear(&err);
    CHECK(qvl_image_decode(NULL, 0, NULL, &img, &err) == QVL_ERR_FORMAT);
    CHECK(img.rgb == NULL);
}

/* Every truncation of a few small files must fail cleanly or decode (never crash, never leak). */
static void test_truncations(void) {
    static const char *names[] = {"jpeg_odd_420.jpg", "png_p2_interlaced.png", "webp_lossless.webp",
                                  "gif_offset_trans.gif", "bmp_1.bmp", "jpeg_progressive.jpg"};
    char path[4096], rel[256];
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        snprintf(rel, sizeof rel, "tests/data/images/%s", names[k]);
        tu_source_path(rel, path, sizeof path);
        FILE *fp = fopen(path, "rb");
        CHECK(fp != NULL);
        if (!fp) continue;
        uint8_t buf[65536];
        size_t n = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        size_t failed = 0;
        for (size_t cut = 0; cut < n; cut += 1 + cut / 64) {
            uint8_t *copy = malloc(cut ? cut : 1);
            memcpy(copy, buf, cut);
            qvl_image img;
            qvl_error err;
            err_clear(&err);
            qvl_status s = qvl_image_decode(copy, cut, NULL, &img, &err);
            if (s != QVL_OK) {
                failed++;
                CHECK(s == QVL_ERR_FORMAT && img.rgb == NULL);
                if (s != QVL_ERR_FORMAT) fprintf(stderr, "  %s cut at %zu: %s\n", names[k], cut, err.message);
            }
            qvl_image_free(&img);
            free(copy);
        }
        CHECK(failed > 0);
    }
}

static void test_limits_and_options(void) {
    char path[4096];
    tu_source_path("tests/data/images/jpeg_exif_6.jpg", path, sizeof path);
    qvl_decode_params p;
    qvl_decode_params_default(&p);
    CHECK(p.max_pixels == 178956970u && p.apply_exif == 1);
    qvl_image img;
    qvl_error err;
    /* 40x24 stored, rotated to 24x40 */
    err_clear(&err);
    CHECK(qvl_image_load(path, &p, &img, &err) == QVL_OK && img.width == 24 && img.height == 40);
    qvl_image_free(&img);
    p.apply_exif = 0;
    CHECK(qvl_image_load(path, &p, &img, &err) == QVL_OK && img.width == 40 && img.height == 24);
    qvl_image_free(&img);
    /* exactly at the limit passes, one below refuses, for every format */
    static const char *names[] = {"jpeg_exif_6.jpg", "png_rgb.png", "webp_lossy.webp", "gif_single.gif",
                                  "bmp_24.bmp", "gif_offset_grow.gif"};
    static const uint64_t pixels[] = {40 * 24, 48 * 40, 56 * 40, 40 * 30, 27 * 21, 25 * 15};
    char rel[256];
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        snprintf(rel, sizeof rel, "tests/data/images/%s", names[k]);
        tu_source_path(rel, path, sizeof path);
        qvl_decode_params_default(&p);
        p.max_pixels = pixels[k];
        err_clear(&err);
        qvl_status s = qvl_image_load(path, &p, &img, &err);
        CHECK(s == QVL_OK);
        if (s != QVL_OK) fprintf(stderr, "  %s at its size: %s\n", names[k], err.message);
        qvl_image_free(&img);
        p.max_pixels = pixels[k] - 1;
        err_clear(&err);
        s = qvl_image_load(path, &p, &img, &err);
        CHECK(s == QVL_ERR_LIMIT && img.rgb == NULL && strstr(err.message, names[k]) != NULL);
        if (s != QVL_ERR_LIMIT) fprintf(stderr, "  %s below its size: %s\n", names[k], qvl_status_name(s));
    }
    /* an alpha mode that does not exist is refused, naming the field */
    qvl_decode_params_default(&p);
    p.alpha = (qvl_alpha_mode)7;
    err_clear(&err);
    CHECK(qvl_image_load(path, &p, &img, &err) == QVL_ERR_INVALID_ARG && img.rgb == NULL);
    CHECK(strstr(err.message, "qvl_decode_params.alpha") != NULL && strstr(err.message, "7") != NULL);
    /* free: NULL, zeroed, twice */
    qvl_image_free(NULL);
    memset(&img, 0, sizeof img);
    qvl_image_free(&img);
    qvl_image_free(&img);
    qvl_decode_params_default(NULL);
    CHECK(qvl_image_decode("x", 1, NULL, NULL, NULL) == QVL_ERR_INVALID_ARG);
    CHECK(qvl_image_load(NULL, NULL, &img, NULL) == QVL_ERR_INVALID_ARG);
}

int main(void) {
    if (!QVL_WITH_MEDIA) {
        printf("test_decode: skipped, built without image decoders (QVL_MEDIA=OFF; test_build_config covers BMP)\n");
        return TU_SKIP;
    }
    char path[4096];
    tu_source_path("tests/fixtures/decode.safetensors", path, sizeof path);
    st_file *f = NULL;
    qvl_error err;
    err_clear(&err);
    qvl_status s = st_load(path, SIZE_MAX, &f, &err);
    CHECK(s == QVL_OK);
    if (s != QVL_OK) {
        fprintf(stderr, "%s\n", err.message);
        return tu_finish("test_decode");
    }
    const char *v = st_meta(f, "oracle");
    if (v) printf("oracle: %s\n", v);
    test_corpus(f);
    st_close(f);
    test_bad();
    test_truncations();
    test_limits_and_options();
    return tu_finish("test_decode");
}
