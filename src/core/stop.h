/* stop.h — a caller's cancellation probe for work outside the tower's blocks (decoding a file or a video): polled
 * at points where a long decode can stop cleanly (a JPEG's progress calls, each read of a PNG's data, each video
 * packet, each frame file); nonzero from fn(user) stops the work with QVL_ERR_CANCELLED. A plan makes one from its
 * ctx's cancel flag and its qvl_plan_params.cancel_fn; NULL (or fn NULL) never stops. */
#ifndef QVL_CORE_STOP_H
#define QVL_CORE_STOP_H

#include "core/error.h"

typedef struct stop_probe {
    int (*fn)(void *user);
    void *user;
} stop_probe;

static inline int stop_now(const stop_probe *s) { return s && s->fn && s->fn(s->user); }

/* Before an input is read: QVL_ERR_CANCELLED naming `label` when the probe says stop, else QVL_OK. */
static inline qvl_status stop_before(const stop_probe *s, const char *label, qvl_error *err) {
    return stop_now(s) ? err_fail(err, QVL_ERR_CANCELLED, "%s: not decoded: cancelled", label) : QVL_OK;
}

#endif
