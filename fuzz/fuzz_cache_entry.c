/* fuzz_cache_entry.c — libFuzzer target for the embedding cache's entry reader (cache_entry_parse, behind every
 * qvl_cache_get / qvl_cache_verify: an entry file's safetensors header is untrusted input). Arbitrary bytes must
 * give QVL_ERR_FORMAT with a message, or an entry whose matrix and grid lie inside the input, whose byte count the
 * reader computed from its shape and dtype without overflow, and whose grid is positive. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "core/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_error err;
    err_clear(&err);
    qvl_cache_entry e;
    qvl_status s = cache_entry_parse(data, size, NULL, &e, &err);
    if (s != QVL_OK) {
        if (s != QVL_ERR_FORMAT || err.status != s || err.message[0] == '\0') abort();
        return 0;
    }
    const uint8_t *p = e.data;
    if (e.result != QVL_CACHE_HIT || p < data || e.nbytes > size || p + e.nbytes > data + size) abort();
    if (e.ndim < 2 || e.ndim > 3 || e.grid.t < 1 || e.grid.h < 1 || e.grid.w < 1) abort();
    const size_t esz = strcmp(e.dtype, "F32") == 0 ? 4 : 2;
    size_t n = esz, m = esz;
    for (int i = 0; i < e.ndim; i++) {
        if (e.shape[i] < 0 || __builtin_mul_overflow(n, (size_t)e.shape[i], &n)) abort();
    }
    /* the planes/tokens/cols view is the same matrix: one plane is [tokens, cols] */
    if (__builtin_mul_overflow(m, e.n_planes, &m) || __builtin_mul_overflow(m, e.n_tokens, &m) ||
        __builtin_mul_overflow(m, e.cols, &m) || n != e.nbytes || m != e.nbytes || (e.ndim == 2 && e.n_planes != 1))
        abort();
    if (e.nbytes) {
        volatile uint8_t b = p[0];
        b = p[e.nbytes - 1];
        (void)b;
    }
    return 0;
}
