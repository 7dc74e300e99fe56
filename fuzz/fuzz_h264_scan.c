/* fuzz_h264_scan.c — libFuzzer target for the H.264 scanner the video reader's skipping trusts (image/h264_scan.c:
 * avcC or Annex B extradata, SPS with scaling lists, VUI and HRD, NAL units length-prefixed or after start codes).
 * Input: a 2-byte big-endian extradata length, the extradata, then packets each behind a 2-byte length. Any bytes
 * must give flags within H264_PKT_IDR | H264_PKT_REF | H264_PKT_NEW_SETUP (that one never on the first packet), a
 * known NAL length size, setup units kept within their buffer and, once a stream is found unusable, a reason that
 * stays (never a crash or a read outside the buffers: ASan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/h264_scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A copy of n bytes in a buffer of exactly that size, so that ASan sees a read past its end. */
static uint8_t *exact(const uint8_t *p, size_t n) {
    uint8_t *c = malloc(n ? n : 1);
    if (c && n) memcpy(c, p, n);
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t at = 2, n = (size_t)data[0] << 8 | data[1];
    if (n > size - at) n = size - at;
    uint8_t *x = exact(data + at, n);
    if (!x) return 0;
    h264_scan s;
    h264_scan_init(&s, x, n);
    free(x);
    at += n;
    if (s.nal_length_size != 0 && s.nal_length_size != 1 && s.nal_length_size != 2 && s.nal_length_size != 4) abort();
    while (at + 2 <= size) {
        size_t m = (size_t)data[at] << 8 | data[at + 1];
        at += 2;
        if (m > size - at) m = size - at;
        uint8_t *p = exact(data + at, m);
        if (!p) return 0;
        const char *before = s.unusable;
        const unsigned f = h264_scan_packet(&s, p, m);
        free(p);
        at += m;
        if (f & ~(unsigned)(H264_PKT_IDR | H264_PKT_REF | H264_PKT_NEW_SETUP)) abort();
        if (s.packets == 1 && (f & H264_PKT_NEW_SETUP)) abort();
        if (s.setup_used > H264_SETUP_BYTES || s.n_setup > H264_SETUP_UNITS) abort();
        if (before && s.unusable != before) abort(); /* the first reason stays */
        if (s.unusable && !s.unusable[0]) abort();
    }
    return 0;
}
