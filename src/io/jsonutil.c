/* jsonutil.c — see jsonutil.h. */
#include "io/jsonutil.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

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

/* ---- json_check: the grammar cJSON_ParseWithLength accepts, without allocating ----------------------------- */

typedef struct jscan {
    const unsigned char *p, *end;
    int depth, deep;
    const unsigned char *begin; /* the text's first byte */
    size_t deep_at;             /* with deep: the offset of the bracket that nests past the limit */
} jscan;

static void js_ws(jscan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static int js_hex4(jscan *s, unsigned *v) {
    if (s->end - s->p < 4) return 0;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s->p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
        if (d > 15) return 0;
        *v = *v << 4 | d;
    }
    s->p += 4;
    return 1;
}

/* A string, at its opening quote. cJSON refuses a lone or reversed UTF-16 surrogate in a \u escape; so does this. */
static int js_string(jscan *s) {
    s->p++;
    while (s->p < s->end && *s->p != '"') {
        unsigned char c = *s->p++;
        if (c < 0x20) return 0;
        if (c != '\\') continue;
        if (s->p >= s->end) return 0;
        c = *s->p++;
        if (c == 'u') {
            unsigned u, l;
            if (!js_hex4(s, &u) || (u >= 0xDC00 && u <= 0xDFFF)) return 0;
            if (u >= 0xD800 && u <= 0xDBFF &&
                (s->end - s->p < 2 || s->p[0] != '\\' || s->p[1] != 'u' || (s->p += 2, !js_hex4(s, &l)) ||
                 l < 0xDC00 || l > 0xDFFF))
                return 0;
        } else if (!strchr("\"\\/bfnrt", c) || c == '\0') {
            return 0;
        }
    }
    if (s->p >= s->end) return 0;
    s->p++;
    return 1;
}

/* A number as RFC 8259 writes it, and at most 63 characters (cJSON 1.7.15 reads a number into a 64-byte buffer
 * and fails on a longer one). */
static int js_number(jscan *s) {
    const unsigned char *b = s->p;
    if (s->p < s->end && *s->p == '-') s->p++;
    if (s->p >= s->end || !isdigit(*s->p)) return 0;
    if (*s->p == '0') s->p++;
    else while (s->p < s->end && isdigit(*s->p)) s->p++;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (s->p >= s->end || !isdigit(*s->p)) return 0;
        while (s->p < s->end && isdigit(*s->p)) s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        if (s->p >= s->end || !isdigit(*s->p)) return 0;
        while (s->p < s->end && isdigit(*s->p)) s->p++;
    }
    return s->p - b <= 63;
}

static int js_word(jscan *s, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0) return 0;
    s->p += n;
    return 1;
}

static int js_value(jscan *s) {
    js_ws(s);
    if (s->p >= s->end) return 0;
    const unsigned char c = *s->p;
    if (c == '"') return js_string(s);
    if (c == 'n') return js_word(s, "null");
    if (c == 't') return js_word(s, "true");
    if (c == 'f') return js_word(s, "false");
    if (c != '[' && c != '{') return js_number(s);
    if (s->depth >= CJSON_NESTING_LIMIT) {
        s->deep = 1;
        s->deep_at = (size_t)(s->p - s->begin);
        return 0;
    }
    s->depth++;
    s->p++;
    const unsigned char close = c == '[' ? ']' : '}';
    js_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 1;
    }
    for (;;) {
        if (c == '{') {
            js_ws(s);
            if (s->p >= s->end || *s->p != '"' || !js_string(s)) return 0;
            js_ws(s);
            if (s->p >= s->end || *s->p++ != ':') return 0;
        }
        if (!js_value(s)) return 0;
        js_ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p++ != close) return 0;
        s->depth--;
        return 1;
    }
}

/* json_check, and where the text nests too deep (*deep_at, with JSON_CHECK_TOO_DEEP). */
static json_check_result json_check_at(const char *text, size_t len, size_t *deep_at) {
    jscan s = {(const unsigned char *)text, (const unsigned char *)text + len, 0, 0, (const unsigned char *)text, 0};
    if (js_value(&s)) return JSON_CHECK_VALID;
    *deep_at = s.deep_at;
    return s.deep ? JSON_CHECK_TOO_DEEP : JSON_CHECK_INVALID;
}

json_check_result json_check(const char *text, size_t len) {
    size_t at;
    return json_check_at(text, len, &at);
}

qvl_status json_parse_failure(const char *text, size_t len, const char *label, qvl_error *err) {
    switch (json_check(text, len)) {
    case JSON_CHECK_VALID:
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory parsing %zu bytes of JSON", label, len);
    case JSON_CHECK_TOO_DEEP:
        return err_fail(err, QVL_ERR_FORMAT, "%s: JSON nested deeper than %d arrays and objects", label,
                        CJSON_NESTING_LIMIT);
    default:
        return QVL_OK;
    }
}

qvl_status json_parse_object(const char *text, size_t len, const char *path, cJSON **root, qvl_error *err) {
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*root) {
        size_t deep_at = 0;
        const json_check_result why = json_check_at(text, len, &deep_at);
        if (why == JSON_CHECK_VALID)
            return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory parsing %zu bytes of JSON", path, len);
        if (why == JSON_CHECK_TOO_DEEP)
            return err_fail(err, QVL_ERR_FORMAT, "%s: JSON nested more than %d levels deep (at byte %zu of %zu), "
                            "deeper than the parser accepts", path, CJSON_NESTING_LIMIT,
                            deep_at, len);
        size_t pos = end && end >= text && end <= text + len ? (size_t)(end - text) : 0, line = 1, col = 1;
        for (size_t i = 0; i < pos; i++) {
            if (text[i] == '\n') line++, col = 1;
            else col++;
        }
        if (len == 0) return err_fail(err, QVL_ERR_FORMAT, "%s: invalid JSON: the file is empty", path);
        return err_fail(err, QVL_ERR_FORMAT, "%s: invalid JSON: syntax error at byte %zu of %zu (line %zu, column %zu)",
                        path, pos, len, line, col);
    }
    /* as serde and Python's json do: nothing but whitespace after the value, to the end of the text (a NUL byte
     * there is trailing bytes too: the files are read with their size, not as C strings) */
    for (const char *p = end ? end : text + len; p < text + len; p++) {
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
