/* test_video_skip.c — decoding only what sampling needs (video.c, "decoding only what sampling needs"): for every
 * clip of tests/data/video/ and a range of samplings, the frames read while skipping are byte for byte those of a
 * sequential decode (the reference way, which test_video holds to PyAV), with and without a sink; the H.264 clips
 * that qualify are actually read skipping, with fewer frames decoded, and the others (HEVC, field pictures, an edit
 * list, every frame sampled) fall back to the sequential decode and say why. And the H.264 scanner on hand-made
 * bytes: each disqualifying SPS property, framing errors, the packet flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/h264_scan.h"
#include "qvl.h"
#include "testutil.h"

#if QVL_WITH_VIDEO
#include "core/error.h"
#include "core/stop.h"
#include "image/decode.h"
#include "image/image_params.h"
#include "image/video_frames.h"

typedef struct clip {
    const char *name;
    int skips; /* 1: an H.264 stream that qualifies: read skipping where sampling leaves at least VIDEO_SKIP_MIN (8)
                  frames out, and always when its header has no frame count (2: the packets count them then); 3:
                  one that qualifies but has errors its decoder conceals: read skipping only where sampling needs
                  none of them (else the skipping read stops at the first and reads it again in order) */
} clip;

static const clip clips[] = {
    {"video_testsrc_30.mp4", 1},       {"video_testsrc_30.webm", 0},     {"video_25fps.mkv", 0},
    {"video_3frames.mp4", 1},          {"video_alpha.mov", 0},           {"video_editlist.mp4", 0},
    {"video_2997.mp4", 0},             {"video_mpeg4.avi", 0},           {"video_mpeg2.ts", 0},
    {"video_h264_bframes.mp4", 1},     {"video_h264_opengop.mp4", 1},    {"video_h264_bframes.ts", 2},
    {"video_h264_bframes.mkv", 2},     {"video_h264_interlaced.mp4", 0}, {"video_hevc.mp4", 0},
    {"video_h264_slices_hrd.mp4", 1},  {"video_h264_10bit_cqm.mp4", 1},  {"video_h264_intrarefresh.mp4", 1},
    {"video_h264_baseline.mp4", 1},    {"video_h264_sps_change.mkv", 2}, {"video_h264_444_x264old.mp4", 3},
};

/* A sink that keeps a copy of every frame it is handed, by slot (and checks each slot comes once). */
typedef struct keep {
    uint8_t *rgb, *got;
    size_t frame_bytes, next, n;
    int begun;
    size_t fail_after; /* nonzero: the sink fails (QVL_ERR_NOMEM) when handed its fail_after-th frame */
} keep;

static qvl_status keep_begin(void *user, const qvl_video *v, qvl_error *err) {
    (void)err;
    keep *k = user;
    free(k->rgb);
    free(k->got);
    k->frame_bytes = (size_t)v->width * (size_t)v->height * 3;
    k->n = (size_t)v->n_frames;
    k->rgb = calloc(k->n, k->frame_bytes);
    k->got = calloc(k->n, 1);
    k->next = 0;
    k->begun++;
    return k->rgb && k->got ? QVL_OK : QVL_ERR_NOMEM;
}

static qvl_status keep_frame(void *user, size_t slot, const uint8_t *rgb, qvl_error *err) {
    keep *k = user;
    if (k->fail_after && k->next + 1 == k->fail_after) return err_fail(err, QVL_ERR_NOMEM, "the sink failed");
    CHECK(slot < k->n && !k->got[slot]);
    if (slot < k->n) {
        memcpy(k->rgb + slot * k->frame_bytes, rgb, k->frame_bytes);
        k->got[slot] = 1;
    }
    k->next++; /* the frames handed over */
    return QVL_OK;
}

static int g_ahead; /* video_read_info.ahead of the reads (0: the reader's choice) */

/* Read `bytes` with video_container_info: sequentially or not (on at most `decoders` decoders at once, 0: the
 * reader's choice), into out (no sink) or into a keeping sink. */
static qvl_status read_clip_stop(const uint8_t *bytes, size_t n, const char *label, const qvl_video_params *vp,
                                 int sequential, int decoders, keep *sink_keep, const stop_probe *stop,
                                 video_read_info *info, qvl_video *out) {
    video_src src = {bytes, -1, n};
    qvl_video_params full;
    qvl_error err;
    if (video_params_take(&full, vp, &err) != QVL_OK) return QVL_ERR_INVALID_ARG;
    memset(info, 0, sizeof *info);
    info->sequential = sequential;
    info->decoders = decoders;
    info->ahead = g_ahead;
    memset(out, 0, sizeof *out);
    const video_sink sink = {keep_begin, keep_frame, sink_keep};
    return video_container_info(&src, (int)dec_sniff(bytes, n), label, &full, NULL, stop, sink_keep ? &sink : NULL,
                                info, out, &err);
}

static qvl_status read_clip(const uint8_t *bytes, size_t n, const char *label, const qvl_video_params *vp,
                            int sequential, int decoders, keep *sink_keep, video_read_info *info, qvl_video *out) {
    return read_clip_stop(bytes, n, label, vp, sequential, decoders, sink_keep, NULL, info, out);
}

/* A stop probe that says stop at its `at`-th poll. */
typedef struct stop_at {
    int polls, at;
} stop_at;

static int stop_when(void *user) {
    stop_at *s = user;
    return ++s->polls >= s->at;
}

/* A read on several decoders stopped part way, by the caller (cancellation) or by the sink failing: it returns that
 * failure (never a hang, a leak or a race: the ASan and TSan builds), with every worker stopped. */
static void test_stopped(void) {
    char path[512];
    tu_source_path("tests/data/video/video_h264_bframes.mp4", path, sizeof path);
    size_t n = 0;
    uint8_t *bytes = tu_read_file(path, &n);
    CHECK(bytes != NULL);
    if (!bytes) return;
    qvl_video_params vp;
    qvl_video_params_init(&vp, sizeof vp);
    vp.fps = 7.5;
    int cancelled = 0, parallel = 0;
    for (int at = 1; at <= 200; at += 7) {
        stop_at st = {0, at};
        const stop_probe probe = {stop_when, &st};
        keep k = {0};
        qvl_video v;
        video_read_info info;
        const qvl_status s = read_clip_stop(bytes, n, "stopped", &vp, 0, 3, &k, &probe, &info, &v);
        CHECK(s == QVL_OK || s == QVL_ERR_CANCELLED);
        cancelled += s == QVL_ERR_CANCELLED;
        parallel += info.jobs >= 2;
        free(k.rgb), free(k.got);
        qvl_video_free(&v);
    }
    for (size_t fail = 1; fail <= 30; fail += 3) {
        keep k = {0};
        k.fail_after = fail;
        qvl_video v;
        video_read_info info;
        const qvl_status s = read_clip(bytes, n, "sink fails", &vp, 0, 3, &k, &info, &v);
        CHECK(s == QVL_ERR_NOMEM);
        CHECK(k.next == fail - 1); /* nothing after the failure */
        parallel += info.jobs >= 2;
        free(k.rgb), free(k.got);
        qvl_video_free(&v);
    }
    CHECK(cancelled >= 10 && parallel >= 10);
    printf("  stopped part way: %d cancelled reads, %d on several decoders\n", cancelled, parallel);
    free(bytes);
}

static int same_sampling(const qvl_video *a, const qvl_video *b) {
    return a->n_frames == b->n_frames && a->width == b->width && a->height == b->height &&
           a->total_frames == b->total_frames &&
           memcmp(a->indices, b->indices, (size_t)a->n_frames * sizeof *a->indices) == 0;
}

static int skipped_clips, fewer_decoded; /* cases read skipping, and those that decoded fewer frames */
static int parallel_cases;               /* cases read on several decoders at once */

static void one_case(const clip *c, const uint8_t *bytes, size_t n, const qvl_video_params *vp, const char *what) {
    char label[160];
    snprintf(label, sizeof label, "%s (%s)", c->name, what);
    qvl_video seq, fast, par;
    video_read_info si, fi, pi;
    qvl_status ss = read_clip(bytes, n, label, vp, 1, 0, NULL, &si, &seq);
    qvl_status fs = read_clip(bytes, n, label, vp, 0, 1, NULL, &fi, &fast); /* one decoder */
    qvl_status ps = read_clip(bytes, n, label, vp, 0, 3, NULL, &pi, &par);  /* up to three at once */
    CHECK(ss == fs && ss == ps);
    CHECK(si.skipping_why != NULL && si.jobs == 0 && fi.jobs == 0);
    if (ss != QVL_OK || fs != QVL_OK || ps != QVL_OK) {
        printf("  %s: status %d / %d / %d\n", label, (int)ss, (int)fs, (int)ps);
        qvl_video_free(&seq), qvl_video_free(&fast), qvl_video_free(&par);
        return;
    }
    CHECK(same_sampling(&seq, &fast) && same_sampling(&seq, &par));
    const size_t fb = (size_t)seq.width * (size_t)seq.height * 3;
    if (same_sampling(&seq, &fast))
        CHECK(tu_same_bytes(fast.rgb, seq.rgb, (size_t)seq.n_frames * fb, label));
    if (same_sampling(&seq, &par))
        CHECK(tu_same_bytes(par.rgb, seq.rgb, (size_t)seq.n_frames * fb, label));
    CHECK((pi.skipping_why == NULL) == (fi.skipping_why == NULL) || c->skips == 3);
    if (!pi.skipping_why) CHECK(pi.frames_decoded <= si.frames_decoded);
    if (pi.jobs >= 2 && !pi.skipping_why) parallel_cases++;
    const int64_t left_out = seq.indices[seq.n_frames - 1] + 1 - seq.n_frames;
    const int can_skip = c->skips == 2 || (c->skips && left_out >= 8);
    if (c->skips == 3) { /* either way, as the errors fall */
        if (!fi.skipping_why) CHECK(fi.frames_decoded <= si.frames_decoded);
        if (!fi.skipping_why) skipped_clips++, fewer_decoded += fi.frames_decoded < si.frames_decoded;
        else CHECK(strcmp(fi.skipping_why, "a decoding error") == 0 || !can_skip);
    } else if (can_skip) { /* never more decoding; less in most cases (not where every frame is a reference and sampled
                       frames are close, as in the Baseline clip at fps 7.5): test_clips checks each clip has some */
        CHECK(fi.skipping_why == NULL);
        CHECK(fi.frames_decoded <= si.frames_decoded);
        skipped_clips++;
        if (fi.frames_decoded < si.frames_decoded) fewer_decoded++;
    } else {
        CHECK(fi.skipping_why != NULL);
    }
    printf("  %-44s %3d of %3lld frames sampled; decoded %3lld sequentially, %3lld %s%s\n", label, (int)seq.n_frames,
           (long long)seq.total_frames, (long long)si.frames_decoded, (long long)fi.frames_decoded,
           fi.skipping_why ? "sequentially: " : "skipping", fi.skipping_why ? fi.skipping_why : "");
    if (pi.jobs >= 2)
        printf("  %-44s %d stretches on up to 3 decoders: %lld frames decoded\n", "", pi.jobs,
               (long long)pi.frames_decoded);
    /* through a sink: the frames as they come, one at a time */
    keep k = {0};
    qvl_video sunk;
    video_read_info ki;
    g_ahead = 1; /* on up to two decoders, neither more than a job past the first not finished */
    CHECK(read_clip(bytes, n, label, vp, 0, 2, &k, &ki, &sunk) == QVL_OK);
    g_ahead = 0;
    CHECK(sunk.rgb == NULL && k.begun >= 1 && k.next == (size_t)seq.n_frames && k.frame_bytes == fb);
    CHECK((ki.skipping_why == NULL) == (fi.skipping_why == NULL) || c->skips == 3);
    if (k.rgb && k.next == (size_t)seq.n_frames && k.frame_bytes == fb)
        CHECK(tu_same_bytes(k.rgb, seq.rgb, (size_t)seq.n_frames * fb, label));
    free(k.rgb);
    free(k.got);
    qvl_video_free(&sunk);
    qvl_video_free(&seq), qvl_video_free(&fast), qvl_video_free(&par);
}

static void test_clips(void) {
    for (size_t i = 0; i < sizeof clips / sizeof clips[0]; i++) {
        char rel[256], path[512];
        snprintf(rel, sizeof rel, "tests/data/video/%s", clips[i].name);
        tu_source_path(rel, path, sizeof path);
        size_t n = 0;
        uint8_t *bytes = tu_read_file(path, &n);
        CHECK(bytes != NULL);
        if (!bytes) continue;
        const int skipped_before = skipped_clips, fewer_before = fewer_decoded;
        qvl_video_params vp;
        qvl_video_params_init(&vp, sizeof vp);
        one_case(&clips[i], bytes, n, &vp, "fps 2");
        static const int counts[] = {1, 2, 4, 9, 31};
        for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
            char what[32];
            snprintf(what, sizeof what, "%d frames", counts[j]);
            qvl_video_params_init(&vp, sizeof vp);
            vp.num_frames = counts[j];
            one_case(&clips[i], bytes, n, &vp, what);
        }
        qvl_video_params_init(&vp, sizeof vp);
        vp.fps = 7.5; /* close samples: the reordering delay spans them */
        one_case(&clips[i], bytes, n, &vp, "fps 7.5");
        qvl_video_params_init(&vp, sizeof vp);
        vp.fps = 0.0; /* every frame */
        one_case(&clips[i], bytes, n, &vp, "every frame");
        qvl_video_params_init(&vp, sizeof vp);
        vp.num_frames = 300; /* more than there are: repeated indices */
        one_case(&clips[i], bytes, n, &vp, "300 frames");
        free(bytes);
        if (skipped_clips > skipped_before) CHECK(fewer_decoded > fewer_before); /* a clip read skipping saves some */
    }
    CHECK(skipped_clips >= 30);
    CHECK(parallel_cases >= 20);
    printf("  %d cases read skipping, %d of them on several decoders at once\n", skipped_clips, parallel_cases);
}
#endif

/* ---- the scanner on hand-made bytes ---- */

/* A bit writer for SPS bodies. */
typedef struct bw {
    uint8_t b[256];
    size_t at; /* bits */
} bw;

static void put(bw *w, uint32_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        if ((v >> i) & 1) w->b[w->at >> 3] |= (uint8_t)(0x80 >> (w->at & 7));
        w->at++;
    }
}

static void put_ue(bw *w, uint32_t v) {
    int len = 0;
    while ((v + 1) >> (len + 1)) len++;
    put(w, 0, len);
    put(w, v + 1, len + 1);
}

/* An SPS NAL unit (header byte 0x67) of profile 100 with the given properties, rbsp trailing bits, escaped. */
static size_t make_sps(uint8_t *out, int frame_mbs_only, int gaps, int vui, int restriction, int scaling) {
    bw w = {{0}, 0};
    put(&w, 100, 8), put(&w, 0, 8), put(&w, 31, 8), put_ue(&w, 0);
    put_ue(&w, 1), put_ue(&w, 0), put_ue(&w, 0), put(&w, 0, 1); /* 4:2:0, 8 bits */
    put(&w, (uint32_t)scaling, 1);
    if (scaling)
        for (int i = 0; i < 8; i++) {
            put(&w, i == 1 || i == 6, 1);
            if (i == 1) put_ue(&w, 2 * 3 - 1), put_ue(&w, 2 * 11); /* delta +3 (11), then -11: next_scale 0 ends it */
            if (i == 6)
                for (int j = 0; j < 64; j++) put_ue(&w, j % 2 ? 2 : 1); /* ±1: 64 deltas */
        }
    put_ue(&w, 0), put_ue(&w, 0), put_ue(&w, 0); /* log2_max_frame_num, poc type 0, lsb */
    put_ue(&w, 4), put(&w, (uint32_t)gaps, 1), put_ue(&w, 3), put_ue(&w, 2);
    put(&w, (uint32_t)frame_mbs_only, 1);
    if (!frame_mbs_only) put(&w, 0, 1);
    put(&w, 1, 1), put(&w, 0, 1); /* direct_8x8, no cropping */
    put(&w, (uint32_t)vui, 1);
    if (vui) {
        put(&w, 1, 1), put(&w, 255, 8), put(&w, 1, 16), put(&w, 1, 16); /* extended SAR */
        put(&w, 0, 1), put(&w, 1, 1), put(&w, 5, 3), put(&w, 0, 1), put(&w, 1, 1), put(&w, 0x010101, 24);
        put(&w, 0, 1), put(&w, 1, 1), put(&w, 1, 32), put(&w, 60, 32), put(&w, 0, 1); /* timing */
        put(&w, 1, 1), put_ue(&w, 0), put(&w, 0, 8), put_ue(&w, 1000), put_ue(&w, 2000), put(&w, 0, 1),
            put(&w, 0, 20); /* NAL HRD */
        put(&w, 0, 1), put(&w, 0, 1), put(&w, 0, 1); /* no VCL HRD, low_delay, pic_struct */
        put(&w, (uint32_t)restriction, 1);
        if (restriction) put(&w, 1, 1), put_ue(&w, 2), put_ue(&w, 1), put_ue(&w, 16), put_ue(&w, 16), put_ue(&w, 2),
            put_ue(&w, 4);
    }
    put(&w, 1, 1); /* rbsp_stop_one_bit */
    const size_t n = (w.at + 7) / 8;
    size_t m = 0, zeros = 0;
    out[m++] = 0x67;
    for (size_t i = 0; i < n; i++) {
        if (zeros >= 2 && w.b[i] <= 3) out[m++] = 3, zeros = 0;
        out[m++] = w.b[i];
        zeros = w.b[i] ? 0 : zeros + 1;
    }
    return m;
}

/* An avcC record holding one SPS. */
static size_t make_avcc(uint8_t *out, const uint8_t *sps, size_t n) {
    const uint8_t head[6] = {1, 100, 0, 31, 0xff, 0xe1};
    memcpy(out, head, 6);
    out[6] = (uint8_t)(n >> 8), out[7] = (uint8_t)n;
    memcpy(out + 8, sps, n);
    out[8 + n] = 0; /* no PPS */
    return 9 + n;
}

/* Setup units (parameter sets, x264's version SEI): those of the extradata and the first packet are kept; a later
 * repeat of one is no news, anything else is (H264_PKT_NEW_SETUP); a parameter set FFmpeg would not read from a
 * skipped packet (nal_ref_idc 0) makes the stream unusable. Annex B packets: `sps` (n bytes), then the units. */
static void test_setup_units(const uint8_t *sps, size_t n) {
    static const uint8_t pps[] = {0x68, 0xce, 0x38, 0x80};      /* nal_ref_idc 3 */
    static const uint8_t pps2[] = {0x68, 0xce, 0x3c, 0x80};     /* another PPS */
    static const uint8_t pps_disposable[] = {0x08, 0xce, 0x38, 0x80};
    static const uint8_t sei[] = "\x06\x05\x30xxxxxxxxxxxxxxxxx264 - core 150 - H.264/MPEG-4 AVC codec\x80";
    static const uint8_t sei2[] = "\x06\x05\x30xxxxxxxxxxxxxxxxx264 - core 164 - H.264/MPEG-4 AVC codec\x80";
    static const uint8_t other_sei[] = {0x06, 0x01, 0x01, 0x00, 0x80}; /* picture timing: no setup unit */
    static const uint8_t idr[] = {0x65, 0x88}, p_slice[] = {0x41, 0x9a};
    struct {
        const uint8_t *unit; size_t len;
    } const first[] = {{sps, n}, {pps, sizeof pps}, {sei, sizeof sei - 1}, {idr, sizeof idr}};
    uint8_t pk[600];
    size_t m = 0;
    for (size_t i = 0; i < 4; i++) {
        memcpy(pk + m, "\0\0\0\1", 4), m += 4;
        memcpy(pk + m, first[i].unit, first[i].len), m += first[i].len;
    }
    struct {
        const uint8_t *unit; size_t len;
        unsigned want; /* the flags of a packet of the unit and a P slice */
    } const later[] = {
        {sps, n, H264_PKT_REF},                        /* repeats */
        {pps, sizeof pps, H264_PKT_REF},
        {sei, sizeof sei - 1, H264_PKT_REF},
        {other_sei, sizeof other_sei, H264_PKT_REF},   /* not a setup unit */
        {pps2, sizeof pps2, H264_PKT_REF | H264_PKT_NEW_SETUP},
        {sei2, sizeof sei2 - 1, H264_PKT_REF | H264_PKT_NEW_SETUP},
        {sps, n - 1, H264_PKT_REF | H264_PKT_NEW_SETUP}, /* another SPS (cut short: only its bytes matter here) */
    };
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) {
        h264_scan s;
        h264_scan_init(&s, NULL, 0);
        CHECK(h264_scan_packet(&s, pk, m) == (H264_PKT_IDR | H264_PKT_REF)); /* the first packet: never news */
        uint8_t q[400];
        size_t k = 0;
        memcpy(q + k, "\0\0\0\1", 4), k += 4;
        memcpy(q + k, later[i].unit, later[i].len), k += later[i].len;
        memcpy(q + k, "\0\0\1", 3), k += 3;
        memcpy(q + k, p_slice, sizeof p_slice), k += sizeof p_slice;
        const unsigned f = h264_scan_packet(&s, q, k);
        CHECK(f == later[i].want);
        if (f != later[i].want) printf("  setup case %zu: flags %u, want %u\n", i, f, later[i].want);
    }
    /* a disposable parameter set */
    h264_scan s;
    h264_scan_init(&s, NULL, 0);
    h264_scan_packet(&s, pk, m);
    uint8_t q[32] = {0, 0, 0, 1};
    memcpy(q + 4, pps_disposable, sizeof pps_disposable);
    memcpy(q + 4 + sizeof pps_disposable, "\0\0\1\x41\x9a", 5);
    h264_scan_packet(&s, q, 9 + sizeof pps_disposable);
    CHECK(s.unusable && strcmp(s.unusable, "a parameter set with nal_ref_idc 0") == 0);
    /* setup units past H264_SETUP_BYTES in the first packet: every later one counts as news */
    h264_scan_init(&s, NULL, 0);
    static uint8_t big[H264_SETUP_BYTES + 64];
    size_t b = 0;
    while (b + 4 + sizeof pps + 16 < sizeof big) {
        memcpy(big + b, "\0\0\0\1", 4), b += 4;
        memcpy(big + b, pps, sizeof pps), b += sizeof pps;
        memset(big + b, 0x11, 8), b += 8; /* ids the scanner does not parse: only the bytes count */
    }
    memcpy(big + b, "\0\0\1\x65\x88", 5), b += 5;
    CHECK(h264_scan_packet(&s, big, b) == (H264_PKT_IDR | H264_PKT_REF) && s.setup_full);
    const uint8_t rep[] = {0, 0, 0, 1, 0x68, 0xce, 0x38, 0x80, 0, 0, 1, 0x41, 0x9a};
    CHECK(h264_scan_packet(&s, rep, sizeof rep) == (H264_PKT_REF | H264_PKT_NEW_SETUP));
}

static void test_scanner(void) {
    uint8_t sps[300], rec[320];
    h264_scan s;
    struct {
        int fmo, gaps, vui, restriction, scaling;
        const char *why; /* NULL: qualifies */
    } const cases[] = {
        {1, 0, 1, 1, 0, NULL},
        {1, 0, 1, 1, 1, NULL},
        {0, 0, 1, 1, 0, "field pictures (interlaced coding)"},
        {1, 1, 1, 1, 1, "frame number gaps allowed"},
        {1, 0, 1, 0, 0, "no reordering depth in the sequence parameter set"},
        {1, 0, 0, 0, 0, "no reordering depth in the sequence parameter set"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_t n = make_sps(sps, cases[i].fmo, cases[i].gaps, cases[i].vui, cases[i].restriction,
                                  cases[i].scaling);
        h264_scan_init(&s, rec, make_avcc(rec, sps, n));
        CHECK(s.sps_seen == 1 && s.nal_length_size == 4);
        CHECK(cases[i].why ? s.unusable && strcmp(s.unusable, cases[i].why) == 0 : s.unusable == NULL);
        if (s.unusable && (!cases[i].why || strcmp(s.unusable, cases[i].why)))
            printf("  sps case %zu: %s\n", i, s.unusable);
        /* the same SPS cut short: malformed, never read past */
        h264_scan_init(&s, rec, make_avcc(rec, sps, n / 2));
        CHECK(s.unusable != NULL);
    }
    /* packets, length-prefixed: an IDR slice (first_mb 0: the bit string "1"), a non-reference slice, a reference
       P slice, two pictures in one packet, a continuation slice only, a length past the end, a forbidden bit */
    const size_t n = make_sps(sps, 1, 0, 1, 1, 0);
    h264_scan_init(&s, rec, make_avcc(rec, sps, n));
    const uint8_t idr[] = {0, 0, 0, 2, 0x65, 0x88};
    const uint8_t nonref[] = {0, 0, 0, 2, 0x01, 0x9a};
    const uint8_t ref[] = {0, 0, 0, 2, 0x41, 0x9a, 0, 0, 0, 2, 0x41, 0x40}; /* two slices: first_mb 0, then 1 */
    CHECK(h264_scan_packet(&s, idr, sizeof idr) == (H264_PKT_IDR | H264_PKT_REF) && !s.unusable);
    CHECK(h264_scan_packet(&s, nonref, sizeof nonref) == 0 && !s.unusable);
    CHECK(h264_scan_packet(&s, ref, sizeof ref) == H264_PKT_REF && !s.unusable);
    const uint8_t two[] = {0, 0, 0, 2, 0x41, 0x9a, 0, 0, 0, 2, 0x01, 0x9a};
    h264_scan_packet(&s, two, sizeof two);
    CHECK(s.unusable != NULL);
    const uint8_t *bad[] = {(const uint8_t *)"\0\0\0\2\x41\x40", (const uint8_t *)"\0\0\0\7\x41\x9a",
                            (const uint8_t *)"\0\0\0\2\xc1\x9a"};
    for (int i = 0; i < 3; i++) {
        h264_scan_init(&s, rec, make_avcc(rec, sps, n));
        h264_scan_packet(&s, bad[i], 6);
        CHECK(s.unusable != NULL);
    }
    /* Annex B: in-band SPS, then slices after 3- and 4-byte start codes */
    h264_scan_init(&s, NULL, 0);
    uint8_t ab[400];
    size_t m = 0;
    memcpy(ab + m, "\0\0\0\1", 4), m += 4;
    memcpy(ab + m, sps, n), m += n;
    memcpy(ab + m, "\0\0\1\x65\x88", 5), m += 5;
    CHECK(h264_scan_packet(&s, ab, m) == (H264_PKT_IDR | H264_PKT_REF) && s.sps_seen == 1 && !s.unusable);
    CHECK(h264_scan_packet(&s, (const uint8_t *)"\0\0\1\x01\x9a\0", 6) == 0 && !s.unusable);
    h264_scan_packet(&s, (const uint8_t *)"\x01\x9a", 2); /* no start code */
    CHECK(s.unusable != NULL);
    test_setup_units(sps, n);
}

int main(void) {
    test_scanner();
#if QVL_WITH_VIDEO
    test_clips();
    test_stopped();
#else
    printf("test_video_skip: video files not tested, built without FFmpeg (QVL_VIDEO=OFF)\n");
#endif
    return tu_finish("test_video_skip");
}
