/* serve_parse.c — request parsing for `qvl serve`: options (query string or JSON fields), JSON bodies, data URLs,
 * base64 (nettle's decoder). Pure functions over bytes: no HTTP, no model, no files; fuzzed by fuzz_serve_request. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <nettle/base64.h>

#include "serve.h"

void srv_err_set(srv_err *e, int http, int item, const char *fmt, ...) {
    if (!e) return;
    e->http = http;
    e->type = srv_err_type(http);
    e->item = item;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

const char *srv_err_type(int http) {
    switch (http) {
    case 400: return "invalid_request";
    case 401: return "unauthorized";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 406: return "not_acceptable";
    case 413: return "too_large";
    case 415: return "unsupported_media_type";
    case 422: return "undecodable_item";
    case 503: return "unavailable";
    default: return "internal";
    }
}

int srv_http_of_status(qvl_status s) {
    switch (s) {
    case QVL_OK: return 200;
    case QVL_ERR_LIMIT: return 413;
    case QVL_ERR_UNSUPPORTED: return 415;
    case QVL_ERR_CANCELLED: return 503;
    case QVL_ERR_RESAMPLED: return 503; /* sent again, it is read whole */
    case QVL_ERR_NOMEM: case QVL_ERR_BACKEND: case QVL_ERR_INTERNAL: return 500;
    default: return 422; /* format, io, shape, invalid argument: the item could not be decoded */
    }
}

void srv_limits_default(srv_limits *l) {
    memset(l, 0, sizeof *l);
    l->max_body_bytes = 64u << 20;
    l->max_items = 64;
    l->max_item_bytes = 48u << 20;
    l->max_pixels = 178956970u; /* PIL's decompression-bomb limit, the library's default */
    l->max_item_patches = 65536;
    l->max_batch_patches = 8192;
    l->max_batch_items = 256;
    l->max_queue_patches = 8 * 8192;
    l->max_queue_items = 1024;
    l->max_wait_us = 0;
    l->min_batch_patches = 1024;
    l->timeout_ms = 120000;
    l->max_put_items = 64;
    l->max_put_bytes = (size_t)1 << 30;
}

void srv_opts_default(srv_opts *o) {
    o->dtype = QVL_DTYPE_F32;
    o->layout = QVL_OUTPUT_CONCAT;
    o->deepstack = 1;
    o->timeout_ms = 0;
}

int srv_opt_set(srv_opts *o, const char *name, const char *v, srv_err *e) {
    if (!v) v = "";
    if (strcmp(name, "dtype") == 0) {
        if (strcmp(v, "f32") == 0 || strcmp(v, "float32") == 0) o->dtype = QVL_DTYPE_F32;
        else if (strcmp(v, "bf16") == 0 || strcmp(v, "bfloat16") == 0) o->dtype = QVL_DTYPE_BF16;
        else if (strcmp(v, "f16") == 0 || strcmp(v, "float16") == 0) o->dtype = QVL_DTYPE_F16;
        else goto bad;
    } else if (strcmp(name, "layout") == 0) {
        if (strcmp(v, "concat") == 0) o->layout = QVL_OUTPUT_CONCAT;
        else if (strcmp(v, "split") == 0) o->layout = QVL_OUTPUT_SPLIT;
        else goto bad;
    } else if (strcmp(name, "deepstack") == 0) {
        if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0) o->deepstack = 1;
        else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0) o->deepstack = 0;
        else goto bad;
    } else if (strcmp(name, "timeout_ms") == 0) {
        char *end;
        long t = strtol(v, &end, 10);
        if (!*v || *end || t < 1 || t > 3600000) goto bad;
        o->timeout_ms = (int)t;
    } else {
        srv_err_set(e, 400, -1, "unknown option '%.64s'", name);
        return -1;
    }
    return 0;
bad:
    srv_err_set(e, 400, -1, "bad value '%.64s' for option '%s'", v, name);
    return -1;
}

static int prefix_ci(const char *s, size_t len, const char *p) {
    size_t n = strlen(p);
    if (len < n) return 0;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)s[i]) != p[i]) return 0;
    return 1;
}

int srv_media_of(const char *type, size_t len) {
    if (!type) return 0;
    size_t n = 0;
    while (n < len && type[n] && type[n] != ';') n++;
    while (n && (type[n - 1] == ' ' || type[n - 1] == '\t')) n--;
    int m = prefix_ci(type, n, "image/") ? SRV_MEDIA_IMAGE : prefix_ci(type, n, "video/") ? SRV_MEDIA_VIDEO : 0;
    if (m && n == 6) return 0; /* "image/" or "video/" with no subtype */
    for (size_t i = 0; m && i < n; i++) /* a media type is a token: no spaces, controls or quotes */
        if ((unsigned char)type[i] <= ' ' || type[i] == '"' || (unsigned char)type[i] >= 0x7f) return 0;
    return m;
}

void srv_request_items_free(srv_request_items *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->items[i].data);
        free(r->items[i].path);
    }
    free(r->items);
    r->items = NULL;
    r->n = 0;
}

int srv_b64_decode(const char *s, size_t n, size_t limit, uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (n % 4) return -1; /* standard base64 is padded to whole quanta */
    for (size_t i = 0; i < n; i++) { /* nettle skips whitespace (any of it); a payload here is the alphabet only */
        const char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/' ||
              c == '='))
            return -1;
    }
    /* '=' only as the last one or two characters: nettle also takes "A===" (a lone 6-bit group, no byte) */
    size_t pad = 0;
    while (pad < n && s[n - 1 - pad] == '=') pad++;
    if (pad > 2 || memchr(s, '=', n - pad)) return -1;
    size_t cap = BASE64_DECODE_LENGTH(n);
    if (n / 4 * 3 > limit + 2) return -2;
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf) return -2;
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    size_t got = cap;
    if (!base64_decode_update(&ctx, &got, buf, n, s) || !base64_decode_final(&ctx)) {
        free(buf);
        return -1;
    }
    if (got > limit) {
        free(buf);
        return -2;
    }
    *out = buf;
    *out_len = got;
    return 0;
}

char *srv_b64_encode(const void *data, size_t n, size_t *out_len) {
    if (n > (SIZE_MAX - 8) / 4 * 3 - 3) return NULL;
    size_t len = BASE64_ENCODE_RAW_LENGTH(n);
    char *s = malloc(len + 1);
    if (!s) return NULL;
    base64_encode_raw(s, n, data);
    s[len] = 0;
    if (out_len) *out_len = len;
    return s;
}

int srv_is_key(const char *s) {
    if (!s) return 0;
    size_t i = 0;
    for (; s[i]; i++)
        if (i >= 64 || !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return i == 64;
}

/* "data:<type>;base64,<payload>" into an item. */
static int parse_data_url(const char *s, size_t i, const srv_limits *lim, srv_in_item *it, srv_err *e) {
    if (strncmp(s, "data:", 5) != 0) {
        srv_err_set(e, 400, (int)i, "item %zu: 'data' must be a data URL (data:<type>;base64,...)", i);
        return -1;
    }
    const char *comma = strchr(s, ',');
    if (!comma) {
        srv_err_set(e, 400, (int)i, "item %zu: data URL without ','", i);
        return -1;
    }
    const char *type = s + 5;
    size_t hl = (size_t)(comma - type);
    if (hl < 7 || strncmp(comma - 7, ";base64", 7) != 0) {
        srv_err_set(e, 400, (int)i, "item %zu: data URL is not base64", i);
        return -1;
    }
    int m = srv_media_of(type, hl - 7);
    if (!m) {
        srv_err_set(e, 415, (int)i, "item %zu: media type '%.*s' is not image/* or video/*", i,
                    (int)(hl - 7 > 64 ? 64 : hl - 7), type);
        return -1;
    }
    int r = srv_b64_decode(comma + 1, strlen(comma + 1), lim->max_item_bytes, &it->data, &it->size);
    if (r == -2) {
        srv_err_set(e, 413, (int)i, "item %zu: over the %zu-byte item limit", i, lim->max_item_bytes);
        return -1;
    }
    if (r) {
        srv_err_set(e, 400, (int)i, "item %zu: malformed base64", i);
        return -1;
    }
    if (!it->size) {
        free(it->data);
        it->data = NULL;
        srv_err_set(e, 422, (int)i, "item %zu: empty payload", i);
        return -1;
    }
    it->media = (srv_media)m;
    return 0;
}

int srv_parse_json(const char *body, size_t len, const srv_limits *lim, srv_opts defaults, srv_request_items *out,
                   srv_err *e) {
    memset(out, 0, sizeof *out);
    out->opts = defaults;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        srv_err_set(e, 400, -1, "body is not a JSON object");
        return -1;
    }
    int rc = -1;
    const cJSON *items = NULL;
    for (const cJSON *f = root->child; f; f = f->next) {
        if (!f->string) continue;
        if (strcmp(f->string, "items") == 0) {
            items = f;
            continue;
        }
        char val[32];
        if (cJSON_IsString(f)) snprintf(val, sizeof val, "%s", f->valuestring);
        else if (cJSON_IsBool(f)) snprintf(val, sizeof val, "%s", cJSON_IsTrue(f) ? "true" : "false");
        else if (cJSON_IsNumber(f) && f->valuedouble >= -1e9 && f->valuedouble <= 1e9 &&
                 f->valuedouble == (double)(long)f->valuedouble)
            snprintf(val, sizeof val, "%ld", (long)f->valuedouble);
        else {
            srv_err_set(e, 400, -1, "field '%.64s' has the wrong type", f->string);
            goto done;
        }
        if (srv_opt_set(&out->opts, f->string, val, e)) goto done;
    }
    if (!cJSON_IsArray(items)) {
        srv_err_set(e, 400, -1, "'items' must be an array");
        goto done;
    }
    size_t n = (size_t)cJSON_GetArraySize(items);
    if (n == 0) {
        srv_err_set(e, 400, -1, "'items' is empty");
        goto done;
    }
    if (n > lim->max_items) {
        srv_err_set(e, 413, -1, "%zu items, over the limit of %zu", n, lim->max_items);
        goto done;
    }
    out->items = calloc(n, sizeof *out->items);
    if (!out->items) {
        srv_err_set(e, 500, -1, "out of memory");
        goto done;
    }
    size_t i = 0;
    for (const cJSON *it = items->child; it; it = it->next, i++) {
        out->n = i + 1;
        if (!cJSON_IsObject(it)) {
            srv_err_set(e, 400, (int)i, "item %zu is not an object", i);
            goto done;
        }
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(it, "data");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(it, "path");
        for (const cJSON *f = it->child; f; f = f->next)
            if (!f->string || (strcmp(f->string, "data") && strcmp(f->string, "path"))) {
                srv_err_set(e, 400, (int)i, "item %zu: unknown field '%.64s'", i, f->string ? f->string : "");
                goto done;
            }
        if ((d != NULL) == (p != NULL)) {
            srv_err_set(e, 400, (int)i, "item %zu needs exactly one of 'data' and 'path'", i);
            goto done;
        }
        if (d) {
            if (!cJSON_IsString(d)) {
                srv_err_set(e, 400, (int)i, "item %zu: 'data' must be a string", i);
                goto done;
            }
            if (parse_data_url(d->valuestring, i, lim, &out->items[i], e)) goto done;
        } else {
            if (!cJSON_IsString(p) || !*p->valuestring || strlen(p->valuestring) > 4000) {
                srv_err_set(e, 400, (int)i, "item %zu: 'path' must be a non-empty string", i);
                goto done;
            }
            out->items[i].path = strdup(p->valuestring);
            if (!out->items[i].path) {
                srv_err_set(e, 500, (int)i, "out of memory");
                goto done;
            }
        }
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) srv_request_items_free(out);
    return rc;
}
