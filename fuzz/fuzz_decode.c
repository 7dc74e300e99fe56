/* fuzz_decode.c — libFuzzer target for the image decoders: qvl_image_decode on arbitrary bytes (limit 4M pixels)
 * must return a status (never crash, leak, abort or read outside the buffer); on success the image has a positive
 * size within the limit and every pixel byte is readable. */
#include <stdint.h>
#include <stdlib.h>

#include "qvl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_decode_params p;
    qvl_decode_params_default(&p);
    p.max_pixels = 4u << 20;
    qvl_image img;
    qvl_error err;
    if (qvl_image_decode(data, size, &p, &img, &err) == QVL_OK) {
        if (img.width <= 0 || img.height <= 0 || (uint64_t)img.width * (uint64_t)img.height > p.max_pixels || !img.rgb)
            abort();
        volatile unsigned sum = 0;
        size_t n = (size_t)img.width * (size_t)img.height * 3;
        for (size_t i = 0; i < n; i += 61) sum += img.rgb[i];
        sum += img.rgb[n - 1];
        (void)sum;
    } else if (img.rgb || img.width || img.height) {
        abort();
    }
    qvl_image_free(&img);
    return 0;
}
