/* image_params.h — defaults of the image/video params structs, and taking a caller's (versioned) struct into a
 * full local copy (core/params.h). Every public function of src/image/ that takes params goes through these. */
#ifndef QVL_IMAGE_PARAMS_H
#define QVL_IMAGE_PARAMS_H

#include "qvl.h"

void decode_defaults(qvl_decode_params *p);
void preprocess_defaults(qvl_preprocess_params *p);
void video_defaults(qvl_video_params *p);
/* *full = the defaults overlaid with the caller's *p (NULL: defaults alone). */
qvl_status decode_params_take(qvl_decode_params *full, const qvl_decode_params *p, qvl_error *err);
qvl_status preprocess_params_take(qvl_preprocess_params *full, const qvl_preprocess_params *p, qvl_error *err);
qvl_status video_params_take(qvl_video_params *full, const qvl_video_params *p, qvl_error *err);

#endif
