/* fuzz_safetensors.c — libFuzzer target for the safetensors reader: st_parse on arbitrary bytes must return a
 * status (never crash, leak or read outside the buffer), and on success every tensor must lie inside the buffer
 * and be found by name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_error err;
    err_clear(&err);
    st_file *f = NULL;
    qvl_status s = st_parse(data, size, "fuzz", &f, &err);
    if (s != QVL_OK) {
        if (f != NULL || err.status != s || err.message[0] == '\0') abort();
        /* Out of memory only when an allocation failed, which inputs this small never cause: a header cJSON
         * refuses must never pass json_check, which would make it "out of memory". */
        if (s == QVL_ERR_NOMEM && size < (1u << 20)) abort();
        return 0;
    }
    const uint8_t *end = data + size;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        const uint8_t *p = t->data;
        if (p < data || p > end || t->nbytes > (uint64_t)(end - p)) abort();
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS || st_dtype_size(t->dtype) == 0) abort();
        if (st_find(f, t->name) != t) abort();
        if (i > 0 && strcmp(f->tensors[i - 1].name, t->name) >= 0) abort();
        if (t->nbytes) { /* touch the first and last byte so ASan checks the span */
            volatile uint8_t x = p[0];
            x = p[t->nbytes - 1];
            (void)x;
        }
    }
    for (size_t i = 0; i < f->n_meta; i++)
        if (st_meta(f, f->meta_keys[i]) != f->meta_vals[i]) abort();
    (void)st_find(f, "model.visual.patch_embed.proj.weight");
    (void)st_find(f, "");
    (void)st_meta(f, "format");
    st_close(f);
    return 0;
}
