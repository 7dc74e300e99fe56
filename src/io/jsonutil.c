/* jsonutil.c — see jsonutil.h. */
#include "io/jsonutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>

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
