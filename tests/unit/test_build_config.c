/* test_build_config.c — what this build was configured with (QVL_WITH_MEDIA, QVL_WITH_VIDEO, QVL_WITH_X86) is what
 * it does: without decoders a JPEG/PNG/WebP/GIF is refused with QVL_ERR_UNSUPPORTED naming the input and the
 * format while BMP still decodes; without FFmpeg a video file is refused naming its path while frame images still
 * make a video; without the x86 kernels the CPU level is portable and a forced SIMD set is refused. The builds with
 * a feature check that it works. */
#include <stdio.h>
#include <string.h>

#include "core/cpu.h"
#include "core/error.h"
#include "cpu/gemm.h"
#include "qvl.h"
#include "testutil.h"

static int has(const char *msg, const char *part) {
    if (strstr(msg, part)) return 1;
    fprintf(stderr, "  message '%s' lacks '%s'\n", msg, part);
    return 0;
}

static void test_images(void) {
    char bmp[1024], png[1024];
    tu_source_path("tests/data/images/bmp_24.bmp", bmp, sizeof bmp);
    tu_source_path("tests/data/photos/chelsea.png", png, sizeof png);
    qvl_image img;
    qvl_error err;
    CHECK(qvl_image_load(bmp, NULL, &img, &err) == QVL_OK && img.width > 0 && img.rgb != NULL);
    qvl_image_free(&img);
    qvl_status s = qvl_image_load(png, NULL, &img, &err);
    if (QVL_WITH_MEDIA) {
        CHECK(s == QVL_OK && img.width > 0);
        qvl_image_free(&img);
        return;
    }
    CHECK(s == QVL_ERR_UNSUPPORTED && err.status == s && img.rgb == NULL);
    CHECK(has(err.message, png) && has(err.message, "a PNG image") && has(err.message, "QVL_MEDIA=OFF"));
    printf("png: %s\n", err.message);
    static const struct { const char *bytes; size_t n; const char *fmt; } magic[] = {
        {"\xFF\xD8\xFF\xE0 jpeg", 9, "a JPEG image"},
        {"RIFF\x10\0\0\0WEBPVP8 ", 16, "a WebP image"},
        {"GIF89a\x01\0\x01\0", 10, "a GIF image"},
    };
    for (size_t i = 0; i < sizeof magic / sizeof magic[0]; i++) {
        CHECK(qvl_image_decode(magic[i].bytes, magic[i].n, NULL, &img, &err) == QVL_ERR_UNSUPPORTED);
        CHECK(has(err.message, "<memory>") && has(err.message, magic[i].fmt) && has(err.message, "QVL_MEDIA=OFF"));
    }
    CHECK(qvl_image_decode("nope", 4, NULL, &img, &err) == QVL_ERR_FORMAT); /* not an image at all: as before */
}

static void test_video(void) {
    char mp4[1024], bmp[1024];
    tu_source_path("tests/data/video/video_3frames.mp4", mp4, sizeof mp4);
    tu_source_path("tests/data/images/bmp_24.bmp", bmp, sizeof bmp);
    qvl_video v;
    qvl_error err;
    qvl_status s = qvl_video_load(mp4, NULL, &v, &err);
    if (QVL_WITH_VIDEO) {
        CHECK(s == QVL_OK && v.n_frames > 0);
    } else {
        CHECK(s == QVL_ERR_UNSUPPORTED && err.status == s && v.rgb == NULL && v.n_frames == 0);
        CHECK(has(err.message, mp4) && has(err.message, "without video support") &&
              has(err.message, "QVL_VIDEO=OFF"));
        printf("video: %s\n", err.message);
        CHECK(qvl_video_load(NULL, NULL, &v, &err) == QVL_ERR_INVALID_ARG);
    }
    qvl_video_free(&v);
    /* Frame images need no FFmpeg (and BMP no decoder library): every build makes a video of them. */
    const char *frames[3] = {bmp, bmp, bmp};
    qvl_video_params p;
    qvl_video_params_default(&p);
    p.num_frames = 2;
    s = qvl_video_from_images(frames, 3, &p, &v, &err);
    if (s != QVL_OK) fprintf(stderr, "  from_images: %s\n", err.message);
    CHECK(s == QVL_OK && v.n_frames == 2 && v.total_frames == 3 && v.width > 0);
    qvl_video_free(&v);
}

static void test_isa(void) {
    printf("cpu level %d, x86 kernels %s\n", cpu_level(), QVL_WITH_X86 ? "built" : "not built");
    if (QVL_WITH_X86) return;
    CHECK(cpu_level() == 1 && !cpu_has_avx2() && !cpu_has_avx512());
    CHECK(gemm_auto_isa() == GEMM_ISA_SCALAR);
    char dir[512];
    CHECK(tu_tmpdir(dir, sizeof dir) != NULL);
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    sp.preset = "tiny";
    sp.depth = 1;
    qvl_error err;
    CHECK(qvl_synth_write(&sp, dir, &err) == QVL_OK);
    static const qvl_isa sets[] = {QVL_ISA_AVX2, QVL_ISA_AVX512};
    for (int i = 0; i < 2; i++) {
        qvl_load_params lp;
        qvl_load_params_default(&lp);
        lp.isa = sets[i];
        qvl_model *m = NULL;
        CHECK(qvl_model_load(dir, &lp, &m, &err) == QVL_ERR_UNSUPPORTED && m == NULL);
        qvl_model_free(m);
    }
    qvl_model *m = NULL;
    CHECK(qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    qvl_model_info in;
    if (m) {
        qvl_model_get_info(m, &in);
        CHECK(in.isa == (int)GEMM_ISA_SCALAR); /* 1: portable */
        printf("auto resolves to %s\n", qvl_isa_name(in.isa));
    }
    qvl_model_free(m);
    CHECK(tu_rmtree(dir));
}

int main(void) {
    printf("QVL_WITH_MEDIA=%d QVL_WITH_VIDEO=%d QVL_WITH_X86=%d\n", QVL_WITH_MEDIA, QVL_WITH_VIDEO, QVL_WITH_X86);
    test_images();
    test_video();
    test_isa();
    return tu_finish("test_build_config");
}
