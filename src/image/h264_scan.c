/* h264_scan.c — the H.264 facts the video reader's skipping needs (h264_scan.h), from ITU-T H.264 (08/2021):
 * NAL unit header (7.3.1), slice header's first_mb_in_slice (7.3.3), sequence parameter set (7.3.2.1.1) with its
 * scaling lists (7.3.2.1.1.1), VUI (E.1.1) and HRD parameters (E.1.2); Annex B byte streams and the avcC
 * configuration record (ISO/IEC 14496-15 5.3.3.1) with its length-prefixed NAL units.
 *
 * Why these facts. Skipping a frame that no other frame references (nal_ref_idc 0) leaves every other frame's
 * pixels as they were, and restarting at an IDR picture gives the frames from it on exactly (8.2.5.1: an IDR
 * marks every reference unused). What may change is which frames the decoder outputs. FFmpeg's decoder (5.1,
 * h264_picture.c / h264_slice.c h264_select_output_frame) raises its reorder delay from the picture order counts
 * it sees unless the SPS states the depth (bitstream_restriction_flag), and drops a frame that arrives out of
 * order: a stream without that flag could lose a frame in a sequential decode that a skipping decode keeps,
 * shifting every later frame's ordinal. Field pictures put two packets in one frame. And with
 * gaps_in_frame_num_value_allowed_flag, frame_num gaps make the decoder insert reference frames whose number
 * depends on the frame before the gap, which may be a skipped one. So a stream qualifies only when every SPS
 * says frame_mbs_only_flag = 1, gaps_in_frame_num_value_allowed_flag = 0 and bitstream_restriction_flag = 1
 * (x264 and most encoders write so). */
#include "image/h264_scan.h"

#include <string.h>

enum { NAL_SLICE = 1, NAL_IDR = 5, NAL_SEI = 6, NAL_SPS = 7, NAL_PPS = 8, NAL_SPS_EXT = 13, SPS_MAX = 1024 };

/* The stream cannot be proven: the first reason found is the one kept. */
static void unusable(h264_scan *s, const char *why) {
    if (!s->unusable) s->unusable = why;
}

/* ---- an RBSP bit reader: reads past the end give zeros and set `bad` ---- */
typedef struct bits {
    const uint8_t *p;
    size_t n_bits, at;
    int bad;
} bits;

static unsigned bit(bits *b) {
    if (b->at >= b->n_bits) {
        b->bad = 1;
        return 0;
    }
    unsigned v = (b->p[b->at >> 3] >> (7 - (b->at & 7))) & 1u;
    b->at++;
    return v;
}

static uint32_t u(bits *b, int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) v = v << 1 | bit(b);
    return v;
}

/* ue(v); a code longer than 32 bits is malformed */
static uint32_t ue(bits *b) {
    int zeros = 0;
    while (!bit(b)) {
        if (b->bad || ++zeros > 31) {
            b->bad = 1;
            return 0;
        }
    }
    return (uint32_t)(((uint64_t)1 << zeros) - 1 + u(b, zeros));
}

static void skip_se(bits *b) { (void)ue(b); }

static void skip_scaling_list(bits *b, int size) {
    int last = 8, next = 8;
    for (int j = 0; j < size && !b->bad; j++) {
        if (next) {
            const uint32_t code = ue(b); /* delta_scale, se(v): -128..127, the codes 0..256 */
            if (code > 256) {
                b->bad = 1;
                return;
            }
            const int delta = code & 1 ? (int)(code + 1) / 2 : -(int)(code / 2);
            next = (last + delta + 256) % 256;
        }
        last = next ? next : last;
    }
}

static void skip_hrd(bits *b) {
    uint32_t cpb = ue(b);
    if (cpb > 31) {
        b->bad = 1;
        return;
    }
    u(b, 8);
    for (uint32_t i = 0; i <= cpb && !b->bad; i++) ue(b), ue(b), bit(b);
    u(b, 20);
}

/* The SPS's verdict: NULL when it qualifies, else why not. */
static const char *sps_verdict(const uint8_t *rbsp, size_t n) {
    bits b = {rbsp, n * 8, 0, 0};
    const uint32_t profile = u(&b, 8);
    u(&b, 16); /* constraint flags, level */
    ue(&b);    /* seq_parameter_set_id */
    static const uint8_t high[] = {100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135};
    if (memchr(high, (int)profile, sizeof high)) {
        const uint32_t chroma = ue(&b);
        if (chroma == 3) bit(&b);
        ue(&b), ue(&b), bit(&b); /* bit depths, qpprime_y_zero_transform_bypass_flag */
        if (bit(&b))             /* seq_scaling_matrix_present_flag */
            for (int i = 0; i < (chroma != 3 ? 8 : 12) && !b.bad; i++)
                if (bit(&b)) skip_scaling_list(&b, i < 6 ? 16 : 64);
    }
    ue(&b); /* log2_max_frame_num_minus4 */
    const uint32_t poc_type = ue(&b);
    if (poc_type == 0) {
        ue(&b);
    } else if (poc_type == 1) {
        bit(&b), skip_se(&b), skip_se(&b);
        const uint32_t cycle = ue(&b);
        if (cycle > 255) return "a malformed sequence parameter set";
        for (uint32_t i = 0; i < cycle && !b.bad; i++) skip_se(&b);
    }
    ue(&b); /* max_num_ref_frames */
    const unsigned gaps = bit(&b);
    ue(&b), ue(&b); /* picture size in macroblocks */
    const unsigned frame_mbs_only = bit(&b);
    if (!frame_mbs_only) bit(&b);
    bit(&b); /* direct_8x8_inference_flag */
    if (bit(&b)) ue(&b), ue(&b), ue(&b), ue(&b); /* frame cropping */
    unsigned restriction = 0;
    if (bit(&b)) { /* vui_parameters_present_flag */
        if (bit(&b) && u(&b, 8) == 255) u(&b, 32); /* aspect ratio, extended SAR */
        if (bit(&b)) bit(&b);                      /* overscan */
        if (bit(&b)) {                             /* video signal type */
            u(&b, 4);
            if (bit(&b)) u(&b, 24);
        }
        if (bit(&b)) ue(&b), ue(&b); /* chroma location */
        if (bit(&b)) u(&b, 32), u(&b, 32), bit(&b); /* timing */
        const unsigned nal_hrd = bit(&b);
        if (nal_hrd) skip_hrd(&b);
        const unsigned vcl_hrd = bit(&b);
        if (vcl_hrd) skip_hrd(&b);
        if (nal_hrd || vcl_hrd) bit(&b); /* low_delay_hrd_flag */
        bit(&b);                         /* pic_struct_present_flag */
        restriction = bit(&b);
        if (restriction) bit(&b), ue(&b), ue(&b), ue(&b), ue(&b), ue(&b), ue(&b);
    }
    if (b.bad) return "a malformed sequence parameter set";
    if (!frame_mbs_only) return "field pictures (interlaced coding)";
    if (gaps) return "frame number gaps allowed";
    if (!restriction) return "no reordering depth in the sequence parameter set";
    return NULL;
}

/* One SPS NAL unit (its header byte included): unescaped into an RBSP, judged. */
static void scan_sps(h264_scan *s, const uint8_t *nal, size_t n) {
    uint8_t rbsp[SPS_MAX];
    size_t m = 0, zeros = 0;
    for (size_t i = 1; i < n; i++) {
        if (zeros >= 2 && nal[i] == 3) { /* emulation_prevention_three_byte */
            zeros = 0;
            continue;
        }
        if (m == sizeof rbsp) {
            unusable(s, "a sequence parameter set larger than qvl reads");
            return;
        }
        rbsp[m++] = nal[i];
        zeros = nal[i] ? 0 : zeros + 1;
    }
    s->sps_seen++;
    const char *why = sps_verdict(rbsp, m);
    if (why) unusable(s, why);
}

/* The state of one packet's scan. */
typedef struct pkt_scan {
    unsigned flags;
    unsigned flags_setup; /* H264_PKT_NEW_SETUP or 0 */
    int setup_units;      /* setup units in the packet */
    int pictures; /* slices with first_mb_in_slice 0 */
    int slices;
} pkt_scan;

/* An SEI NAL unit with x264's version string ("x264 - core N", user data unregistered: plain text, so no emulation
 * prevention byte falls inside it). */
static int x264_version_sei(const uint8_t *nal, size_t n) {
    static const char tag[] = "x264 - core ";
    const size_t m = sizeof tag - 1;
    for (size_t i = 1; i + m <= n; i++)
        if (nal[i] == 'x' && memcmp(nal + i, tag, m) == 0) return 1;
    return 0;
}

/* A setup unit (h264_scan.h): kept while the extradata and the first packet are read, else checked for a repeat. */
static void scan_setup(h264_scan *s, pkt_scan *ps, const uint8_t *nal, size_t n) {
    ps->setup_units++;
    if (s->packets <= 1) { /* the extradata (0) or the first packet (1) */
        if (s->n_setup == H264_SETUP_UNITS || n > H264_SETUP_BYTES - s->setup_used) {
            s->setup_full = 1;
            return;
        }
        memcpy(s->setup + s->setup_used, nal, n);
        s->setup_len[s->n_setup++] = n;
        s->setup_used += n;
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i < s->n_setup; at += s->setup_len[i++])
        if (s->setup_len[i] == n && memcmp(s->setup + at, nal, n) == 0) return;
    ps->flags_setup = H264_PKT_NEW_SETUP;
}

static void scan_nal(h264_scan *s, pkt_scan *ps, const uint8_t *nal, size_t n) {
    if (n == 0) return;
    if (nal[0] & 0x80) {
        unusable(s, "a malformed NAL unit");
        return;
    }
    const unsigned ref = (nal[0] >> 5) & 3, type = nal[0] & 0x1f;
    if (type == NAL_SPS || type == NAL_PPS || type == NAL_SPS_EXT) {
        if (ref == 0) unusable(s, "a parameter set with nal_ref_idc 0");
        scan_setup(s, ps, nal, n);
    } else if (type == NAL_SEI && x264_version_sei(nal, n)) {
        scan_setup(s, ps, nal, n);
    }
    if (type == NAL_SPS) scan_sps(s, nal, n);
    if (type != NAL_SLICE && type != NAL_IDR) return;
    /* first_mb_in_slice is the header's first field; the emulation prevention bytes cannot occur in its first bits
       unless it is absurdly long, which then reads as nonzero: a picture's continuation, never its start. */
    bits b = {nal + 1, (n - 1) * 8, 0, 0};
    const uint32_t first_mb = ue(&b);
    const unsigned flags = (type == NAL_IDR ? H264_PKT_IDR : 0u) | (ref ? H264_PKT_REF : 0u);
    if (ps->slices == 0) ps->flags = flags;
    else if (flags != ps->flags) unusable(s, "slices of one picture that disagree");
    ps->slices++;
    if (!b.bad && first_mb == 0) ps->pictures++;
}

/* Every NAL unit of p[0..n), length-prefixed (len_size 1..4) or Annex B (0). 0 when the framing is broken. */
static int each_nal(h264_scan *s, pkt_scan *ps, const uint8_t *p, size_t n, int len_size) {
    if (len_size) {
        size_t at = 0;
        while (at < n) {
            if (n - at < (size_t)len_size) return 0;
            size_t len = 0;
            for (int i = 0; i < len_size; i++) len = len << 8 | p[at + (size_t)i];
            at += (size_t)len_size;
            if (len > n - at) return 0;
            scan_nal(s, ps, p + at, len);
            at += len;
        }
        return 1;
    }
    /* Annex B: NAL units after 00 00 01 start codes (a zero before one is trailing_zero / zero_byte) */
    size_t at = 0, start = 0;
    int open = 0;
    while (at + 3 <= n) {
        if (p[at] == 0 && p[at + 1] == 0 && p[at + 2] == 1) {
            if (open) {
                size_t end = at;
                while (end > start && p[end - 1] == 0) end--;
                scan_nal(s, ps, p + start, end - start);
            }
            at += 3;
            start = at;
            open = 1;
        } else {
            at++;
        }
    }
    if (!open) return 0;
    scan_nal(s, ps, p + start, n - start);
    return 1;
}

/* `count` NAL units of an avcC record from x[*at], each behind a 16-bit length; 0 (s unusable) when one runs past
 * the record's n bytes. */
static int avcc_units(h264_scan *s, pkt_scan *ps, const uint8_t *x, size_t n, size_t *at, unsigned count) {
    for (unsigned i = 0; i < count; i++) {
        if (n - *at < 2 || (size_t)(x[*at] << 8 | x[*at + 1]) > n - *at - 2) {
            unusable(s, "unreadable codec extradata");
            return 0;
        }
        const size_t len = (size_t)(x[*at] << 8 | x[*at + 1]);
        scan_nal(s, ps, x + *at + 2, len);
        *at += 2 + len;
    }
    return 1;
}

void h264_scan_init(h264_scan *s, const uint8_t *x, size_t n) {
    memset(s, 0, sizeof *s); /* packets 0: the extradata's setup units are kept */
    pkt_scan ps = {0};
    if (n == 0) return; /* parameter sets in band (Annex B) */
    if (x[0] != 1) {    /* Annex B parameter sets */
        if (!each_nal(s, &ps, x, n, 0)) unusable(s, "unreadable codec extradata");
        return;
    }
    /* avcC: version, profile, compatibility, level, 6 bits + lengthSizeMinusOne, 3 bits + numOfSPS, then each SPS
       as a 16-bit length and the NAL unit, numOfPPS (8 bits) and each PPS the same way; the rest is not needed */
    if (n < 6 || (x[4] & 3) == 2) { /* a length size of 3 bytes is not allowed */
        unusable(s, "unreadable codec extradata");
        return;
    }
    s->nal_length_size = (x[4] & 3) + 1;
    size_t at = 6;
    if (!avcc_units(s, &ps, x, n, &at, x[5] & 0x1fu)) return;
    if (at == n) return; /* no PPS count: a record cut short, as FFmpeg's decoder then has none from it either */
    const unsigned n_pps = x[at++];
    avcc_units(s, &ps, x, n, &at, n_pps);
}

unsigned h264_scan_packet(h264_scan *s, const uint8_t *p, size_t n) {
    pkt_scan ps = {0};
    s->packets++;
    if (!each_nal(s, &ps, p, n, s->nal_length_size)) {
        unusable(s, "a packet that is not NAL units");
        return 0;
    }
    if (ps.slices == 0) unusable(s, "a packet without a picture");
    else if (ps.pictures != 1) unusable(s, "a packet that is not one picture");
    return ps.flags | ps.flags_setup | (s->packets > 1 && s->setup_full && ps.setup_units ? H264_PKT_NEW_SETUP : 0u);
}
