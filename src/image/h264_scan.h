/* h264_scan.h — what the video reader must know of an H.264 stream's packets before it may skip decoding some of
 * them (video.c, "decoding only what sampling needs"): which packets start an IDR picture, which carry a reference
 * picture, and whether every sequence parameter set rules out the two things that would make the decoder's output
 * depend on the frames it skipped (field pictures; an unstated reordering depth). Reads NAL unit headers, the first
 * slice header field and the SPS; decodes nothing. Untrusted bytes: every read is bounded by the buffer it is in. */
#ifndef QVL_IMAGE_H264_SCAN_H
#define QVL_IMAGE_H264_SCAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct h264_scan {
    int nal_length_size; /* packets as length-prefixed NAL units (MP4/Matroska "avcC"): 1, 2 or 4; 0: Annex B */
    int sps_seen;        /* sequence parameter sets read (extradata and packets) */
    const char *unusable; /* why skipping cannot be proven exact for this stream (NULL while it can) */
} h264_scan;

/* Flags of one packet. */
enum {
    H264_PKT_IDR = 1, /* its picture is an IDR picture */
    H264_PKT_REF = 2, /* its picture is a reference picture (nal_ref_idc != 0): it must be decoded */
};

/* Start scanning a stream from its codec extradata (avcC, Annex B parameter sets, or none). Sets s->unusable when
 * it cannot be read or one of its SPS disqualifies the stream. */
void h264_scan_init(h264_scan *s, const uint8_t *extradata, size_t n);

/* One packet: H264_PKT_* flags. A packet that is not exactly one frame picture (no slice, two pictures, a malformed
 * NAL unit), or that holds an SPS that disqualifies the stream, sets s->unusable. */
unsigned h264_scan_packet(h264_scan *s, const uint8_t *p, size_t n);

#endif
