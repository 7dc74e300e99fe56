/* error.h — the one internal idiom for reporting and propagating failures. */
#ifndef QVL_CORE_ERROR_H
#define QVL_CORE_ERROR_H

#include "qvl.h"

#if defined(__GNUC__)
#define ATTR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ATTR_PRINTF(a, b)
#endif

/* Record `s` and a formatted message in `err` (which may be NULL) and return `s`. The first error wins: a later
 * call on an error that already holds a failure (a non-OK status with a message) leaves it untouched, so the
 * innermost cause is kept. The message is never left empty: a format that gives "" records the status name and
 * ERR_NO_DETAIL, a safety net that tests treat as a bug in the caller. */
#define ERR_NO_DETAIL "(no detail)"
qvl_status err_fail(qvl_error *err, qvl_status s, const char *fmt, ...) ATTR_PRINTF(3, 4);

/* Reset `err` to QVL_OK with an empty message. */
void err_clear(qvl_error *err);

/* Propagate a non-OK status from an expression. */
#define TRY(expr)                                                                                                 \
    do {                                                                                                              \
        qvl_status try_s_ = (expr);                                                                               \
        if (try_s_ != QVL_OK) return try_s_;                                                                  \
    } while (0)

/* Overflow-checked size arithmetic: return 0 on success, 1 on overflow (result unspecified then). */
static inline int size_mul_overflow(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline int size_add_overflow(size_t a, size_t b, size_t *out) { return __builtin_add_overflow(a, b, out); }

#endif
