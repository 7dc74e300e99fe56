/* error.c — status names and error detail. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *qvl_status_name(qvl_status s) {
    switch (s) {
    case QVL_OK: return "ok";
    case QVL_ERR_INVALID_ARG: return "invalid argument";
    case QVL_ERR_IO: return "i/o error";
    case QVL_ERR_FORMAT: return "format error";
    case QVL_ERR_SHAPE: return "shape error";
    case QVL_ERR_UNSUPPORTED: return "unsupported";
    case QVL_ERR_LIMIT: return "limit exceeded";
    case QVL_ERR_NOMEM: return "out of memory";
    case QVL_ERR_BACKEND: return "backend error";
    case QVL_ERR_INTERNAL: return "internal error";
    case QVL_ERR_CANCELLED: return "cancelled";
    case QVL_ERR_NONFINITE: return "non-finite value";
    case QVL_ERR_RESAMPLED: return "sampled again";
    }
    return "unknown status";
}

const char *qvl_dtype_name(qvl_dtype d) {
    switch (d) {
    case QVL_DTYPE_F32: return "F32";
    case QVL_DTYPE_F16: return "F16";
    case QVL_DTYPE_BF16: return "BF16";
    }
    return "?";
}

void err_clear(qvl_error *err) {
    if (!err) return;
    err->status = QVL_OK;
    err->message[0] = '\0';
}

/* A failure already recorded: a known non-OK status with a message. An err that holds a status but no message
 * (a caller's uninitialised struct, or a status assigned by hand) is not one, so it does not hide this cause. */
static int holds_failure(const qvl_error *err) {
    return err->status > QVL_OK && err->status <= QVL_ERR_RESAMPLED && err->message[0] != '\0' &&
           memchr(err->message, '\0', sizeof err->message) != NULL;
}

qvl_status err_fail(qvl_error *err, qvl_status s, const char *fmt, ...) {
    if (!err || holds_failure(err)) return s;
    err->status = s;
    err->message[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    /* The message is never empty; every caller names the cause, so this text means a caller did not. */
    if (err->message[0] == '\0') snprintf(err->message, sizeof err->message, "%s " ERR_NO_DETAIL, qvl_status_name(s));
    return s;
}
