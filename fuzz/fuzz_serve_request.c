/* fuzz_serve_request.c — libFuzzer target for `qvl serve`'s request parsing (tools/serve/serve_parse.c): the first
 * byte picks what the rest is fed to —
 *   0  a JSON body (srv_parse_json: items, data URLs, base64 payloads, options)
 *   1  a query string, split on '&' and '=' into option names and values (srv_opt_set)
 *   2  base64 (srv_b64_decode, then re-encoded: the round trip must give the input back)
 *   3  a Content-Type (srv_media_of)
 *   4  an item's first bytes, for admission (srv_header_dims, srv_estimate_patches: never above the cap)
 * Each must return a status, with a message naming the cause on failure, and never leak (ASan/LSan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] % 5;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    srv_err e;
    memset(&e, 0, sizeof e);
    if (mode == 0) {
        srv_limits lim;
        srv_limits_default(&lim);
        lim.max_items = 8;
        lim.max_item_bytes = 4096;
        srv_opts o;
        srv_opts_default(&o);
        srv_request_items r;
        if (srv_parse_json(s, n, &lim, o, &r, &e) == 0) {
            if (r.n < 1 || r.n > lim.max_items) abort();
            for (size_t i = 0; i < r.n; i++) {
                const srv_in_item *it = &r.items[i];
                if (!it->path == !it->data) abort();
                if (it->data && (it->size == 0 || it->size > lim.max_item_bytes || !it->media)) abort();
                if (it->data) {
                    volatile uint8_t b = it->data[it->size - 1];
                    (void)b;
                }
            }
            srv_request_items_free(&r);
        } else if (!e.message[0] || !e.type || e.http < 400 || r.items) {
            abort();
        }
    } else if (mode == 1) {
        char *q = malloc(n + 1);
        if (!q) return 0;
        memcpy(q, s, n);
        q[n] = 0;
        srv_opts o;
        srv_opts_default(&o);
        for (char *save = NULL, *kv = strtok_r(q, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
            char *eq = strchr(kv, '=');
            if (eq) *eq = 0;
            if (srv_opt_set(&o, kv, eq ? eq + 1 : NULL, &e) && (e.http != 400 || !e.message[0])) abort();
        }
        if (o.dtype > QVL_DTYPE_BF16 || o.layout > QVL_OUTPUT_SPLIT || (o.deepstack != 0 && o.deepstack != 1)) abort();
        free(q);
    } else if (mode == 2) {
        uint8_t *out;
        size_t len;
        if (srv_b64_decode(s, n, 1 << 20, &out, &len) == 0) {
            size_t el;
            char *back = srv_b64_encode(out, len, &el);
            if (!back) abort();
            /* canonical input re-encodes to itself; nettle accepts only canonical padding */
            if (el != n) abort();
            free(back);
            free(out);
        } else if (out) {
            abort();
        }
    } else if (mode == 3) {
        int m = srv_media_of(s, n);
        if (m != 0 && m != SRV_MEDIA_IMAGE && m != SRV_MEDIA_VIDEO) abort();
    } else {
        const uint8_t *d = data + 1;
        uint32_t w = 0, h = 0;
        if (srv_header_dims(d, n, &w, &h) == 0 && (!w || !h)) abort();
        qvl_preprocess_params pp;
        qvl_preprocess_params_init(&pp, sizeof pp);
        const size_t est = srv_estimate_patches(&pp, 4096, SRV_MEDIA_IMAGE, d, n, NULL);
        if (est < 1 || est > 4096) abort();
    }
    return 0;
}
