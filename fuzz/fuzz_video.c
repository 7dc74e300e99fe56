/* fuzz_video.c — libFuzzer target for the video reader over bytes in memory: qvl_video_decode (qvl's own AVIO over
 * the buffer, the accepted containers and codecs only; 64K pixels a frame, at most 8 sampled frames) must return a
 * status with a message (never crash, leak, abort, hang, open a file or read outside the buffer); on success the
 * frames have a positive size within the limit, sorted indices within the source's frames, and every byte is
 * readable. A build without FFmpeg refuses containers and still reads stills and checks the dispatch. */
#include <stdint.h>
#include <stdlib.h>

#include "qvl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_video_params p;
    qvl_video_params_default(&p);
    p.max_pixels = 1u << 16;
    p.max_frames = 8;
    qvl_video v;
    qvl_error err;
    qvl_status s = qvl_video_decode(data, size, &p, &v, &err);
    if (s != err.status || (s != QVL_OK) != (err.message[0] != 0)) abort(); /* a message exactly on failure */
    if (s == QVL_OK) {
        if (v.width <= 0 || v.height <= 0 || (uint64_t)v.width * (uint64_t)v.height > p.max_pixels || !v.rgb ||
            !v.indices || v.n_frames <= 0 || v.n_frames > p.max_frames || v.total_frames <= 0)
            abort();
        for (int32_t i = 0; i < v.n_frames; i++)
            if (v.indices[i] < 0 || v.indices[i] >= v.total_frames || (i && v.indices[i] < v.indices[i - 1])) abort();
        volatile unsigned sum = 0;
        size_t n = (size_t)v.n_frames * (size_t)v.width * (size_t)v.height * 3;
        for (size_t i = 0; i < n; i += 61) sum += v.rgb[i];
        sum += v.rgb[n - 1];
        (void)sum;
    } else if (v.rgb || v.indices || v.n_frames || v.width || v.height) {
        abort();
    }
    qvl_video_free(&v);
    return 0;
}
