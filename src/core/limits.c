/* limits.c — see limits.h. */
#include "core/limits.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/params.h"

void limits_defaults(qvl_limits *l) {
    memset(l, 0, sizeof *l);
    l->struct_size = sizeof *l;
    l->max_image_pixels = LIMIT_DEF_IMAGE_PIXELS;
    l->max_canvas_pixels = LIMIT_DEF_CANVAS_PIXELS;
    l->max_input_bytes = LIMIT_DEF_INPUT_BYTES;
    l->max_png_chunk_bytes = LIMIT_DEF_PNG_CHUNK_BYTES;
    l->max_jpeg_scans = LIMIT_DEF_JPEG_SCANS;
    l->max_video_frames = LIMIT_DEF_VIDEO_FRAMES;
    l->max_video_pixels = LIMIT_DEF_VIDEO_PIXELS;
    l->max_item_patches = LIMIT_DEF_ITEM_PATCHES;
    l->max_call_patches = LIMIT_DEF_CALL_PATCHES;
    l->max_decode_work = LIMIT_DEF_DECODE_WORK;
    l->max_video_decode_pixels = LIMIT_DEF_VIDEO_DECODE_PIXELS;
}

void qvl_limits_init(qvl_limits *p, size_t struct_size) {
    qvl_limits d;
    limits_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

qvl_status limits_take(qvl_limits *full, const qvl_limits *p, const char *what, qvl_error *err) {
    limits_defaults(full);
    TRY(params_take(full, sizeof *full, p, "qvl_limits", err));
#define ZERO_FAILS(f, bits)                                                                                          \
    if (full->f == 0) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: %s is 0; every limit must be at least 1", what, #f);
    QVL_LIMIT_FIELDS(ZERO_FAILS)
#undef ZERO_FAILS
    return QVL_OK;
}

void limits_min(qvl_limits *a, const qvl_limits *b) {
#define MIN_INTO(f, bits) a->f = b->f < a->f ? b->f : a->f;
    QVL_LIMIT_FIELDS(MIN_INTO)
#undef MIN_INTO
}

qvl_status limit_fail(qvl_error *err, const char *name, uint64_t limit, const char *fmt, ...) {
    char cause[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cause, sizeof cause, fmt, ap);
    va_end(ap);
    if (strchr(name, '.'))
        return err_fail(err, QVL_ERR_LIMIT, "%s (limit %s = %llu; raise it to accept this input)", cause, name,
                        (unsigned long long)limit);
    return err_fail(err, QVL_ERR_LIMIT,
                    "%s (limit %s = %llu; raise qvl_limits.%s, or pass --limit %s=N to qvl)", cause, name,
                    (unsigned long long)limit, name, name);
}

const char *nonfinite_name(float v) { return isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf"; }

size_t first_nonfinite_f32(const void *data, size_t n) {
    const unsigned char *x = data;
    /* blocks of 64: the common all-finite case runs as a branch-free OR of exponent tests */
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint32_t bad = 0;
        for (size_t j = 0; j < 64; j++) {
            uint32_t u;
            memcpy(&u, x + 4 * (i + j), 4);
            bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (bad) break;
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return n;
}

static inline uint16_t ld16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, 2); /* stored weights need not be 2-byte aligned */
    return v;
}

size_t first_nonfinite_16(const void *data, size_t n, int bf16) {
    const unsigned char *x = data;
    const uint16_t e = bf16 ? 0x7f80u : 0x7c00u;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        unsigned bad = 0;
        for (size_t j = 0; j < 64; j++) bad |= (unsigned)((ld16(x + 2 * (i + j)) & e) == e);
        if (bad) break;
    }
    for (; i < n; i++)
        if ((ld16(x + 2 * i) & e) == e) return i;
    return n;
}
