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
 * is not an object (what it is); a failed allocation is QVL_ERR_NOMEM (json_check tells it apart). *root is NULL on
 * failure. */
qvl_status json_parse_object(const char *text, size_t len, const char *path, struct cJSON **root, qvl_error *err);

/* Why cJSON_ParseWithLength failed on `len` bytes of text, found again without allocating: the text is one JSON
 * value by the grammar cJSON accepts (RFC 8259, strings without a lone UTF-16 surrogate, numbers of at most 63
 * characters; anything may follow the value), so the failure was an allocation (JSON_CHECK_VALID); it nests more
 * than CJSON_NESTING_LIMIT arrays and objects (JSON_CHECK_TOO_DEEP); or it is not JSON (JSON_CHECK_INVALID). Call
 * it only after a failed parse: it may be stricter than cJSON, never more lenient. */
typedef enum json_check_result { JSON_CHECK_INVALID = 0, JSON_CHECK_VALID = 1, JSON_CHECK_TOO_DEEP = 2 } json_check_result;
json_check_result json_check(const char *text, size_t len);
/* After cJSON_ParseWithLength(text, len) returned NULL: QVL_ERR_NOMEM (an allocation failed) or QVL_ERR_FORMAT
 * (nested too deep), with a message naming `label`, as json_check finds; QVL_OK when the text is not JSON, which
 * the caller reports in its own words. */
qvl_status json_parse_failure(const char *text, size_t len, const char *label, qvl_error *err);

#endif
