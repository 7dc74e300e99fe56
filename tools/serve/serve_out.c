/* serve_out.c — response bodies of `qvl serve`, built in memory: safetensors (header padded so the data starts
 * on a 64-byte boundary), .npy version 1.0 (likewise), error JSON. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve.h"

void srv_buf_put(srv_buf *b, const void *p, size_t n) {
    if (b->bad) return;
    if (n > SIZE_MAX - b->len - 1) {
        b->bad = 1;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->bad = 1;
                return;
            }
            cap *= 2;
        }
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->bad = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->bad = 1;
        return;
    }
    if ((size_t)k < sizeof tmp) {
        srv_buf_put(b, tmp, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->bad = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    srv_buf_put(b, big, (size_t)k);
    free(big);
}

const char *srv_dtype_st(qvl_dtype d) { return d == QVL_DTYPE_BF16 ? "BF16" : d == QVL_DTYPE_F16 ? "F16" : "F32"; }
const char *srv_dtype_opt(qvl_dtype d) { return d == QVL_DTYPE_BF16 ? "bf16" : d == QVL_DTYPE_F16 ? "f16" : "f32"; }
size_t srv_dtype_size(qvl_dtype d) { return d == QVL_DTYPE_F32 ? 4 : 2; }

int srv_st_header(const srv_tensor *t, size_t n, const char *const *meta_kv, size_t n_meta, uint8_t **out,
                  size_t *out_len, size_t *data_len) {
    *out = NULL;
    *out_len = 0;
    cJSON *h = cJSON_CreateObject();
    if (!h) return -1;
    if (n_meta) {
        cJSON *m = cJSON_AddObjectToObject(h, "__metadata__");
        for (size_t i = 0; m && i < n_meta; i++) cJSON_AddStringToObject(m, meta_kv[2 * i], meta_kv[2 * i + 1]);
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(h, t[i].name);
        if (!o) break;
        cJSON_AddStringToObject(o, "dtype", t[i].dtype);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int k = 0; sh && k < t[i].ndim; k++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[k]));
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        if (of) {
            cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
            cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + t[i].nbytes)));
        }
        off += t[i].nbytes;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!js) return -1;
    size_t jl = strlen(js);
    size_t hl = (8 + jl + 63) / 64 * 64 - 8; /* data starts at a multiple of 64 */
    uint8_t *b = malloc(8 + hl);
    if (!b) {
        free(js);
        return -1;
    }
    for (int k = 0; k < 8; k++) b[k] = (uint8_t)((uint64_t)hl >> (8 * k));
    memcpy(b + 8, js, jl);
    memset(b + 8 + jl, ' ', hl - jl);
    free(js);
    *out = b;
    *out_len = 8 + hl;
    *data_len = off;
    return 0;
}

int srv_st_build(const srv_tensor *t, size_t n, const char *const *meta_kv, size_t n_meta, uint8_t **out,
                 size_t *out_len) {
    uint8_t *h;
    size_t hl, off;
    if (srv_st_header(t, n, meta_kv, n_meta, &h, &hl, &off)) return -1;
    uint8_t *b = realloc(h, hl + off ? hl + off : 1);
    if (!b) {
        free(h);
        return -1;
    }
    uint8_t *p = b + hl;
    for (size_t i = 0; i < n; i++) {
        if (t[i].data) {
            memcpy(p, t[i].data, t[i].nbytes);
            p += t[i].nbytes;
        } else {
            for (size_t k = 0; k < t[i].n_pieces; k++) {
                memcpy(p, t[i].pieces[k], t[i].piece_bytes[k]);
                p += t[i].piece_bytes[k];
            }
        }
    }
    *out = b;
    *out_len = hl + off;
    return 0;
}

int srv_npy_build(const char *descr, const int64_t *shape, int ndim, const void *data, size_t nbytes, uint8_t **out,
                  size_t *out_len) {
    uint8_t *h;
    size_t hl;
    if (srv_npy_header(descr, shape, ndim, nbytes, &h, &hl)) return -1;
    uint8_t *b = realloc(h, hl + nbytes);
    if (!b) {
        free(h);
        return -1;
    }
    memcpy(b + hl, data, nbytes);
    *out = b;
    *out_len = hl + nbytes;
    return 0;
}

int srv_npy_header(const char *descr, const int64_t *shape, int ndim, size_t nbytes, uint8_t **out, size_t *out_len) {
    (void)nbytes;
    char dict[256];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < ndim && k > 0 && (size_t)k < sizeof dict; i++)
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%lld%s", (long long)shape[i],
                      ndim == 1 ? "," : i + 1 < ndim ? ", " : ""); /* numpy's spelling: (3,) and (2, 3) */
    if (k > 0 && (size_t)k < sizeof dict) k += snprintf(dict + k, sizeof dict - (size_t)k, "), }");
    if (k <= 0 || (size_t)k >= sizeof dict - 1) return -1;
    size_t hl = (10 + (size_t)k + 1 + 63) / 64 * 64 - 10; /* magic(6) ver(2) len(2); dict + pad + '\n' */
    size_t total = 10 + hl;
    uint8_t *b = malloc(total);
    if (!b) return -1;
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)(hl & 0xff);
    b[9] = (uint8_t)(hl >> 8);
    memcpy(b + 10, dict, (size_t)k);
    memset(b + 10 + k, ' ', hl - (size_t)k - 1);
    b[10 + hl - 1] = '\n';
    *out = b;
    *out_len = total;
    return 0;
}

char *srv_err_json(const srv_err *e) {
    cJSON *r = cJSON_CreateObject();
    cJSON *o = r ? cJSON_AddObjectToObject(r, "error") : NULL;
    if (o) {
        cJSON_AddStringToObject(o, "type", e->type ? e->type : srv_err_type(e->http));
        cJSON_AddStringToObject(o, "message", e->message);
        if (e->item >= 0) cJSON_AddNumberToObject(o, "item", e->item);
        else cJSON_AddNullToObject(o, "item");
    }
    char *s = r ? cJSON_PrintUnformatted(r) : NULL;
    cJSON_Delete(r);
    return s;
}
