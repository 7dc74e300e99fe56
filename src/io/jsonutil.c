/* jsonutil.c — see jsonutil.h. */
#include "io/jsonutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>

#include "core/error.h"

const char *json_describe(const cJSON *v, char *buf, size_t n) {
    if (!buf || n == 0) return "";
    if (!v) snprintf(buf, n, "missing");
    else if (cJSON_IsNumber(v)) snprintf(buf, n, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v) && v->valuestring) snprintf(buf, n, "the string \"%.40s\"", v->valuestring);
    else if (cJSON_IsTrue(v)) snprintf(buf, n, "true");
    else if (cJSON_IsFalse(v)) snprintf(buf, n, "false");
    else if (cJSON_IsNull(v)) snprintf(buf, n, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, n, "a list of %d", cJSON_GetArraySize(v));
    else if (cJSON_IsObject(v)) snprintf(buf, n, "an object");
    else snprintf(buf, n, "an invalid value");
    return buf;
}

/* The deepest nesting of [ and { outside strings in text[0..n), and where it first passes `limit`. */
static size_t json_depth(const char *t, size_t n, size_t limit, size_t *at) {
    size_t depth = 0, deepest = 0;
    int in_str = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = t[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') in_str = 1;
        else if (c == '[' || c == '{') {
            if (++depth > deepest) deepest = depth;
            if (depth > limit && !*at) *at = i;
        } else if ((c == ']' || c == '}') && depth) {
            depth--;
        }
    }
    return deepest;
}

qvl_status json_parse_object(const char *text, size_t len, const char *path, cJSON **root, qvl_error *err) {
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*root) {
        size_t at = 0;
        if (json_depth(text, len, CJSON_NESTING_LIMIT, &at) > CJSON_NESTING_LIMIT)
            return err_fail(err, QVL_ERR_FORMAT, "%s: JSON nested more than %d levels deep (at byte %zu of %zu), "
                            "deeper than the parser accepts", path, CJSON_NESTING_LIMIT, at, len);
        size_t pos = end && end >= text && end <= text + len ? (size_t)(end - text) : 0, line = 1, col = 1;
        for (size_t i = 0; i < pos; i++) {
            if (text[i] == '\n') line++, col = 1;
            else col++;
        }
        if (len == 0) return err_fail(err, QVL_ERR_FORMAT, "%s: invalid JSON: the file is empty", path);
        return err_fail(err, QVL_ERR_FORMAT, "%s: invalid JSON: syntax error at byte %zu of %zu (line %zu, column %zu)",
                        path, pos, len, line, col);
    }
    /* as serde and Python's json do: nothing but whitespace after the value */
    for (const char *p = end ? end : text + len; p < text + len && *p; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(*root);
            *root = NULL;
            return err_fail(err, QVL_ERR_FORMAT, "%s: invalid JSON: trailing bytes after the value (at byte %zu of %zu)",
                            path, (size_t)(p - text), len);
        }
    }
    if (!cJSON_IsObject(*root)) {
        char got[64];
        json_describe(*root, got, sizeof got);
        cJSON_Delete(*root);
        *root = NULL;
        return err_fail(err, QVL_ERR_FORMAT, "%s: valid JSON, but not a JSON object: the top-level value is %s", path,
                        got);
    }
    return QVL_OK;
}
