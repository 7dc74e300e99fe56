/* limits.h — the resource limits (qvl_limits, qvl.h "Resource limits"): defaults, taking a caller's versioned
 * struct, combining two sets, and the one message format for a limit that is exceeded. */
#ifndef QVL_CORE_LIMITS_H
#define QVL_CORE_LIMITS_H

#include <stdint.h>

#include "core/error.h"
#include "qvl.h"

#define LIMIT_DEF_IMAGE_PIXELS 178956970u /* 2 · PIL.Image.MAX_IMAGE_PIXELS: DecompressionBombError above it */
#define LIMIT_DEF_CANVAS_PIXELS 178956970u
#define LIMIT_DEF_INPUT_BYTES ((uint64_t)1 << 31)
#define LIMIT_DEF_PNG_CHUNK_BYTES ((uint64_t)8 << 20)
#define LIMIT_DEF_JPEG_SCANS 500u
#define LIMIT_DEF_VIDEO_FRAMES 4096u
#define LIMIT_DEF_VIDEO_PIXELS ((uint64_t)1 << 30)
#define LIMIT_DEF_ITEM_PATCHES ((uint64_t)1 << 18)
#define LIMIT_DEF_CALL_PATCHES ((uint64_t)1 << 20)
#define LIMIT_DEF_DECODE_WORK ((uint64_t)1 << 31)
#define LIMIT_DEF_VIDEO_DECODE_PIXELS ((uint64_t)1 << 38)

void limits_defaults(qvl_limits *l);
/* *full = the defaults overlaid with the caller's *p (NULL: defaults alone); every field must be ≥ 1. `what`
 * names the struct's place in messages ("qvl_plan_params.limits"). */
qvl_status limits_take(qvl_limits *full, const qvl_limits *p, const char *what, qvl_error *err);
/* Each field of *a becomes the smaller of a's and b's. */
void limits_min(qvl_limits *a, const qvl_limits *b);

/* QVL_ERR_LIMIT with the formatted cause, then "(limit NAME = LIMIT; raise qvl_limits.NAME, or --limit NAME=N
 * on the qvl command line)". `name` is the field of qvl_limits (or another params field, written in full, when
 * it contains a '.'). */
qvl_status limit_fail(qvl_error *err, const char *name, uint64_t limit, const char *fmt, ...) ATTR_PRINTF(4, 5);

/* "NaN", "+inf" or "-inf" for a value that is not finite. */
const char *nonfinite_name(float v);
/* Index of the first value of x[0..n) (any alignment) that is not finite (NaN, ±inf), or n when all are. */
size_t first_nonfinite_f32(const void *x, size_t n);
/* The same over 16-bit floats (bf16 when `bf16`, else IEEE half): an all-ones exponent. */
size_t first_nonfinite_16(const void *x, size_t n, int bf16);

#endif
