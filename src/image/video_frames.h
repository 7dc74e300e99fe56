/* video_frames.h — shared by the video readers (video.c, video_frames.c): the sampled-frame buffer of a qvl_video. */
#ifndef QVL_IMAGE_VIDEO_FRAMES_H
#define QVL_IMAGE_VIDEO_FRAMES_H

#include <stdint.h>

#include "qvl.h"

/* libswscale's SIMD output loops may store up to a vector past the end of a packed row (seen: 8 bytes at width 62,
 * RGB24); frame buffers are packed rows, so only a buffer's last row can overrun, into this slack after it. */
enum { VIDEO_SWS_SLACK = 64 };

/* Sample indices for `total` source frames at `fps` (p's sampling) into out->indices, and allocate out->rgb for the
 * sampled frames of w x h (and VIDEO_SWS_SLACK bytes after them); sets width, height, n_frames, total_frames and fps. Sampling no frame is an error;
 * `what` (a path) names the video in messages. On failure out may hold partial allocations (qvl_video_free). */
qvl_status video_sample_into(qvl_video *out, int32_t w, int32_t h, int64_t total, double fps,
                             const qvl_video_params *p, const char *what, qvl_error *err);

#endif
