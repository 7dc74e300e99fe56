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

qvl_status err_fail(qvl_error *err, qvl_status s, const char *fmt, ...) {
    if (!err || err->status != QVL_OK) return s;
    err->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return s;
}
