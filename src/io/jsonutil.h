/* jsonutil.h — small helpers for the JSON readers' error messages. */
#ifndef QVL_IO_JSONUTIL_H
#define QVL_IO_JSONUTIL_H

#include <stddef.h>

struct cJSON;

/* A short description of a JSON value for "expected ..., got ..." messages: the number (%.17g), the string in
 * quotes (cut to 40 bytes), or the type (true, false, null, a list of N, an object; "missing" for NULL). Written to buf, returned. */
const char *json_describe(const struct cJSON *v, char *buf, size_t n);

#endif
