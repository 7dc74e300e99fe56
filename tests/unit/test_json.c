/* test_json.c — json_check, which tells why cJSON failed to parse a text without allocating: valid JSON (the
 * failure was an allocation), nested past cJSON's limit, or not JSON. It must never call valid what cJSON refuses,
 * or a malformed file would be reported as out of memory: every text here cJSON refuses must not be VALID, and
 * every text it accepts is checked against cJSON's own answer. json_parse_object refuses trailing bytes after the
 * object, a NUL among them. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/jsonutil.h"
#include "testutil.h"

static void agree(const char *text, json_check_result want) {
    const size_t n = strlen(text);
    cJSON *root = cJSON_ParseWithLength(text, n);
    const json_check_result got = json_check(text, n);
    CHECK(got == want);
    /* valid here implies cJSON parses it (with memory to spare) */
    if (got == JSON_CHECK_VALID) CHECK(root != NULL);
    if (!root) CHECK(got != JSON_CHECK_VALID || want == JSON_CHECK_VALID);
    cJSON_Delete(root);
}

static char *nest(int depth, char open, char close) {
    char *s = malloc((size_t)depth * 2 + 1);
    memset(s, open, (size_t)depth);
    memset(s + depth, close, (size_t)depth);
    s[depth * 2] = '\0';
    return s;
}

int main(void) {
    agree("{\"a\": [1, -2.5e+3, 0, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"], \"b\": {}}", JSON_CHECK_VALID);
    agree("  [ ]  trailing bytes are cJSON's caller's business", JSON_CHECK_VALID);
    agree("\"\\/\\b\\f\\r\\t\"", JSON_CHECK_VALID);
    agree("", JSON_CHECK_INVALID);
    agree("{\"a\": 1,, }", JSON_CHECK_INVALID);
    agree("{\"a\" 1}", JSON_CHECK_INVALID);
    agree("{1: 2}", JSON_CHECK_INVALID);
    agree("[1, 2", JSON_CHECK_INVALID);
    agree("\"unterminated", JSON_CHECK_INVALID);
    agree("\"bad escape \\x\"", JSON_CHECK_INVALID);
    agree("\"lone low surrogate \\udc00\"", JSON_CHECK_INVALID);
    agree("\"high surrogate alone \\ud800 x\"", JSON_CHECK_INVALID);
    agree("nul", JSON_CHECK_INVALID);
    agree("[-]", JSON_CHECK_INVALID);
    agree("[1.]", JSON_CHECK_INVALID);
    agree("[.5]", JSON_CHECK_INVALID);
    /* a number longer than the 63 characters cJSON 1.7.15 reads */
    agree("[1234567890123456789012345678901234567890123456789012345678901234567890]", JSON_CHECK_INVALID);
    char *ok = nest(CJSON_NESTING_LIMIT, '[', ']'), *deep = nest(CJSON_NESTING_LIMIT + 1, '[', ']');
    agree(ok, JSON_CHECK_VALID);
    agree(deep, JSON_CHECK_TOO_DEEP);
    free(ok);
    free(deep);

    /* json_parse_failure: the status and message for each */
    qvl_error err;
    err_clear(&err);
    const char *v = "{\"a\": 1}";
    CHECK(json_parse_failure(v, strlen(v), "x.json", &err) == QVL_ERR_NOMEM && strstr(err.message, "x.json") &&
          strstr(err.message, "out of memory"));
    deep = nest(2000, '[', ']');
    err_clear(&err);
    qvl_status ds = json_parse_failure(deep, strlen(deep), "d.json", &err);
    CHECK(ds == QVL_ERR_FORMAT &&
          strstr(err.message, "nested deeper than 1000"));
    free(deep);
    err_clear(&err);
    CHECK(json_parse_failure("{,}", 3, "bad.json", &err) == QVL_OK);

    /* json_parse_object: what follows the value is checked to the end of the text, past a NUL byte too */
    cJSON *root = NULL;
    err_clear(&err);
    CHECK(json_parse_object("{}\0junk", 7, "nul.json", &root, &err) == QVL_ERR_FORMAT && root == NULL &&
          strstr(err.message, "nul.json") && strstr(err.message, "trailing bytes") && strstr(err.message, "byte 2 of 7"));
    CHECK(json_parse_object("{}\0", 3, "nul.json", &root, &err) == QVL_ERR_FORMAT && root == NULL);
    CHECK(json_parse_object("{\"a\": 1} \n\t", 11, "ok.json", &root, &err) == QVL_OK && root != NULL);
    cJSON_Delete(root);
    return tu_finish("test_json");
}
