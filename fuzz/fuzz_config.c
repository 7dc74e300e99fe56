/* fuzz_config.c — libFuzzer target for the JSON configuration parsers: the model's config.json
 * (config_parse) and the image and video preprocessor configs (preproc_config_parse), all on the same bytes.
 * Each must return a status with a message (never crash, leak or read outside the buffer), and what it accepts
 * must satisfy the invariants the rest of the library relies on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/preproc_config.h"
#include "io/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A status with its message; never out of memory (inputs this small allocate little): a text cJSON refuses must
 * never pass json_check, which would make it "out of memory". */
static void check_status(qvl_status s, const qvl_error *err) {
    if (s != QVL_OK && (err->status != s || err->message[0] == '\0')) abort();
    if (s == QVL_ERR_NOMEM) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* libFuzzer and replay.c both hand over an exact-size heap buffer, so ASan sees any read past `size`. */
    const char *text = (const char *)data;

    qvl_error err;
    err_clear(&err);
    tower_config c;
    qvl_status s = config_parse(text, size, "fuzz", &c, &err);
    check_status(s, &err);
    if (s == QVL_OK) {
        if (c.depth < 1 || c.hidden < 1 || c.heads < 1 || c.hidden != c.heads * c.head_dim || c.head_dim % 4 ||
            c.pos_side < 2 || c.pos_side * c.pos_side != c.num_pos ||
            c.row_len != c.in_channels * c.temporal_patch * c.patch * c.patch || c.n_deepstack < 0 ||
            c.n_deepstack > QVL_MAX_DEEPSTACK || memchr(c.model_type, '\0', sizeof c.model_type) == NULL)
            abort();
        for (int i = 0; i < c.n_deepstack; i++)
            if (c.deepstack_index[i] < 0 || c.deepstack_index[i] >= c.depth) abort();
    }

    for (int video = 0; video < 2; video++) {
        qvl_preprocess_params p;
        qvl_video_params v;
        qvl_preprocess_params_default(&p);
        qvl_video_params_default(&v);
        err_clear(&err);
        s = preproc_config_parse(text, size, "fuzz", video, &p, &v, &err);
        check_status(s, &err);
        if (s == QVL_OK && (p.patch < 1 || p.temporal_patch < 1 || p.merge < 1 || !(p.rescale_factor > 0) ||
                            v.min_frames < 1 || v.max_frames < 1 || !(v.fps > 0)))
            abort();
    }
    return 0;
}
