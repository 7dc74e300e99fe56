/* fuzz_rows.c — libFuzzer target for the pixel-rows reader behind qvl_read_rows_limited (`qvl encode --pixels`):
 * rows_parse, the same sniffing (.npy or safetensors), checks and limits on a buffer. The first byte picks the
 * limits: 0 the defaults; otherwise max_item_patches = 1 + (b & 7), max_call_patches = 1 + (b >> 3) and
 * max_input_bytes = 64 · b, so the limits' edges are reached by small inputs. The rest is the file. Any input must
 * give a status with a message and no outputs, or rows within the limits and within the input (each element
 * decodes from at least 2 bytes), grids each within max_item_patches, summing within max_call_patches, every value
 * at least 1; ASan checks the last element of each array. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/files.h"
#include "qvl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const unsigned b = data[0];
    qvl_limits lim;
    qvl_limits_default(&lim);
    if (b) {
        lim.max_item_patches = 1 + (b & 7);
        lim.max_call_patches = 1 + (b >> 3);
        lim.max_input_bytes = 64 * (uint64_t)b;
    }
    const uint8_t *file = data + 1;
    const size_t len = size - 1;
    qvl_error err;
    float *rows = (float *)&err; /* must be reset on every path */
    qvl_grid *grids = (qvl_grid *)&err;
    size_t nr = 7, rl = 7, ng = 7;
    qvl_status s = rows_parse(file, len, "fuzz", &lim, &rows, &nr, &rl, &grids, &ng, &err);
    if (s != QVL_OK) {
        if (rows || grids || nr || rl || ng || err.status != s || err.message[0] == '\0') abort();
        return 0;
    }
    size_t n;
    if (len > lim.max_input_bytes || nr > lim.max_call_patches || !rows) abort();
    if (__builtin_mul_overflow(nr, rl, &n) || n > len / 2) abort();
    if (n) {
        volatile float f = rows[0];
        f = rows[n - 1];
        (void)f;
    }
    if ((ng == 0) != (grids == NULL)) abort();
    uint64_t total = 0;
    for (size_t i = 0; i < ng; i++) {
        const qvl_grid *g = &grids[i];
        if (g->t < 1 || g->h < 1 || g->w < 1) abort();
        uint64_t p = (uint64_t)g->t * (uint64_t)g->h;
        if (__builtin_mul_overflow(p, (uint64_t)g->w, &p) || p > lim.max_item_patches) abort();
        total += p;
        if (total > lim.max_call_patches) abort();
    }
    free(rows);
    free(grids);
    return 0;
}
