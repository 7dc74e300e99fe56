/* fuzz_npy.c — libFuzzer target for the .npy reader (npy_parse_f32, behind `qvl encode --pixels ROWS.npy`): arbitrary
 * bytes must give a status with a message, or a [rows, cols] float32 array that is fully allocated (ASan checks
 * the last element) and whose size the reader computed without overflow. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_error err;
    err_clear(&err);
    float *x = NULL;
    size_t rows = 0, cols = 0;
    qvl_status s = npy_parse_f32(data, size, "fuzz", NULL, &x, &rows, &cols, &err);
    if (s != QVL_OK) {
        if (x != NULL || err.status != s || err.message[0] == '\0') abort();
        return 0;
    }
    size_t n;
    if (__builtin_mul_overflow(rows, cols, &n) || x == NULL) abort();
    /* Every element decodes from at least 2 bytes of the input, so the array cannot outgrow it. */
    if (n > size / 2) abort();
    if (n) {
        volatile float f = x[0];
        f = x[n - 1];
        (void)f;
    }
    free(x);
    return 0;
}
