/* h264_scan.h — what the video reader must know of an H.264 stream's packets before it may skip decoding some of
 * them (video.c, "decoding only what sampling needs"): which packets start an IDR picture, which carry a reference
 * picture, and whether every sequence parameter set rules out the two things that would make the decoder's output
 * depend on the frames it skipped (field pictures; an unstated reordering depth). Reads NAL unit headers, the first
 * slice header field and the SPS; decodes nothing. Untrusted bytes: every read is bounded by the buffer it is in. */
#ifndef QVL_IMAGE_H264_SCAN_H
#define QVL_IMAGE_H264_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* The decoder state a packet can set for later ones, beyond its own picture: parameter sets (SPS, SPS extension,
 * PPS) and the x264 version SEI (FFmpeg's decoder works around bugs of old x264 builds by it). FFmpeg keeps both
 * across a flush. A decoder that starts at a later IDR picture without the packets before it has the same state
 * when it is given the stream's first packet to parse and every such unit after the first packet only repeats
 * one that the codec extradata or the first packet holds: those units are kept here (up to H264_SETUP_BYTES) and
 * a packet with any other one is flagged H264_PKT_NEW_SETUP. */
enum { H264_SETUP_BYTES = 8192, H264_SETUP_UNITS = 64 };

typedef struct h264_scan {
    int nal_length_size; /* packets as length-prefixed NAL units (MP4/Matroska "avcC"): 1, 2 or 4; 0: Annex B */
    int sps_seen;        /* sequence parameter sets read (extradata and packets) */
    const char *unusable; /* why skipping cannot be proven exact for this stream (NULL while it can) */
    size_t packets;      /* packets scanned */
    uint8_t setup[H264_SETUP_BYTES]; /* the setup units of the extradata and the first packet, back to back */
    size_t setup_len[H264_SETUP_UNITS], n_setup, setup_used;
    int setup_full;      /* some did not fit: every later setup unit counts as new */
} h264_scan;

/* Flags of one packet. */
enum {
    H264_PKT_IDR = 1, /* its picture is an IDR picture */
    H264_PKT_REF = 2, /* its picture is a reference picture (nal_ref_idc != 0): it must be decoded */
    H264_PKT_NEW_SETUP = 4, /* after the first packet: a setup unit that is no repeat of an earlier one (above) */
};

/* Start scanning a stream from its codec extradata (avcC, Annex B parameter sets, or none). Sets s->unusable when
 * it cannot be read or one of its SPS disqualifies the stream. */
void h264_scan_init(h264_scan *s, const uint8_t *extradata, size_t n);

/* One packet: H264_PKT_* flags. A packet that is not exactly one frame picture (no slice, two pictures, a malformed
 * NAL unit), or that holds an SPS that disqualifies the stream or a parameter set with nal_ref_idc 0 (which FFmpeg
 * does not read from a packet it skips), sets s->unusable. */
unsigned h264_scan_packet(h264_scan *s, const uint8_t *p, size_t n);

#endif
