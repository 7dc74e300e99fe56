/* jsonutil.h — small helpers for the JSON readers' error messages. */
#ifndef QVL_IO_JSONUTIL_H
#define QVL_IO_JSONUTIL_H

#include <stddef.h>

#include "qvl.h"

struct cJSON;

/* A short description of a JSON value for "expected ..., got ..." messages: the number (%.17g), the string in
 * quotes (cut to 40 bytes), or the type (true, false, null, a list of N, an object; "missing" for NULL). Written to buf, returned. */
const char *json_describe(const struct cJSON *v, char *buf, size_t n);

/* Parse text[0..len) as one JSON object into *root (cJSON_Delete it), with distinct QVL_ERR_FORMAT messages naming
 * `path` for each way it can fail: invalid JSON (the byte, line and column of the syntax error), JSON nested deeper
 * than the parser's limit (CJSON_NESTING_LIMIT, 1000 levels), trailing bytes after the value, and valid JSON that
 * is not an object (what it is). *root is NULL on failure. */
qvl_status json_parse_object(const char *text, size_t len, const char *path, struct cJSON **root, qvl_error *err);

#endif
