/* preproc_config.h — the parser behind qvl_preprocess_params_load, on JSON text in memory (fuzz target, tests). */
#ifndef QVL_IMAGE_PREPROC_CONFIG_H
#define QVL_IMAGE_PREPROC_CONFIG_H

#include <stddef.h>

#include "qvl.h"

/* Apply `len` bytes of JSON text (need not be NUL-terminated; `path` names it in errors) to the structs, as
 * qvl_preprocess_params_load applies preprocessor_config.json (video = 0: needs p) or
 * video_preprocessor_config.json (video = 1: p and v may each be NULL). Keys absent from the text keep the values
 * already in the structs; every present value is type- and range-checked. */
qvl_status preproc_config_parse(const char *text, size_t len, const char *path, int video, qvl_preprocess_params *p,
                                qvl_video_params *v, qvl_error *err);

#endif
