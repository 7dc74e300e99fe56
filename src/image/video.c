/* video.c — sampled RGB frames of a video container through FFmpeg's libraries (QVL_VIDEO=ON), from a file or from
 * memory, through qvl's own I/O and only for the accepted containers and codecs (see "input" below). The entry
 * points, the dispatch by magic bytes, frame images and the frame buffer: video_frames.c.
 *
 * Frame rate and frame count are read the way transformers' PyAV reader reads them (video_utils.read_video_pyav):
 * the stream's average frame rate (avg_frame_rate; r_frame_rate, then p->default_fps, where the container has
 * none) and the stream header's frame count (nb_frames). Where the header has no count (Matroska/WebM, raw
 * streams) the frames are counted by decoding the stream once; PyAV would report 0 frames there and fail. That
 * count stops with QVL_ERR_LIMIT as soon as what sampling picks from the frames counted so far breaks
 * max_video_frames or max_video_pixels (video_count_check: the pick never shrinks as the count grows), so a video
 * over the limits is refused after the frames that prove it, not decoded to its end first.
 * Decoding keeps only the sampled frames (a repeated index is copied), stopping after the last one, as
 * read_video_pyav does. It is sequential from the start, as there, except for H.264 streams that can be proven to
 * give the same frames when the decoder skips what no sampled frame needs ("decoding only what sampling needs",
 * below; for those the packets count the frames of a stream whose header has no count), whose closed GOPs are
 * decoded on several decoders at once where the sampled frames span two or more ("several stretches at once"). If
 * the stream ends before the last sampled index (a header count that overstates, e.g. an edit list), the indices
 * are taken again over the frames actually decoded.
 *
 * Pixel conversion: swscale at the frame's own size, source matrix and range from the frame's tags
 * (colorspace, color_range; yuvj formats are full range; untagged is BT.601), output full-range RGB24, flags
 * SWS_BILINEAR — exactly what PyAV's frame.to_ndarray(format="rgb24") asks swscale for (reformatter.py:
 * interpolation defaults to BILINEAR, source colorspace/range from the frame). At the same size the filter only
 * shapes chroma upsampling; for even-height 4:2:0 input swscale uses its table-driven yuv2rgb converter.
 *
 * Alpha: a pixel format with an alpha channel is converted to RGBA and blended over white with the float32
 * sequence of transformers' video_utils.convert_to_rgb, alpha = a / 255, (1 − alpha)·255 + alpha·c, then rounded
 * half to even into uint8 (the reference keeps the float result and resizes it in float). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/cpu.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "core/error.h"
#include "core/limits.h"
#include "image/decode.h"
#include "image/h264_scan.h"
#include "image/image_params.h"
#include "image/video_frames.h"

#define VIDEO_SWS_FLAGS SWS_BILINEAR

/* ---- input: only qvl's own I/O, only the accepted containers and codecs ------------------------------------
 *
 * FFmpeg never opens anything: every byte it reads comes through an AVIOContext over the caller's buffer or over
 * the descriptor qvl_video_load opened itself (video_src), with AVFMT_FLAG_CUSTOM_IO. Nested opens (HLS segments,
 * concat entries, QuickTime data references, image2 sequences) go through AVFormatContext.io_open, which refuses
 * every one; protocol_whitelist is empty, so no protocol would be reached even past it.
 *
 * Containers: the demuxer is the one dec_sniff's magic bytes chose (mov for ISO/QuickTime, matroska for
 * Matroska/WebM, avi, mpegts), never FFmpeg's own probe over all demuxers; format_whitelist repeats that list as a
 * second check. Those four read a single self-contained file (mov's external data references, "enable_drefs",
 * stay off; io_open would refuse them anyway). MPEG-TS is accepted because cameras, recorders and broadcast
 * captures write it and its demuxer follows no references; MPEG program streams (.mpg/.vob), Ogg, FLV, raw
 * elementary streams and the rest of FFmpeg's demuxers are not: they are rarer as inputs and each one is more
 * parser reachable by untrusted bytes.
 *
 * Codecs: the video stream's codec must be one of VIDEO_CODECS (what cameras, phones, browsers, screen recorders
 * and editors write), else QVL_ERR_UNSUPPORTED naming it. The format context's codec_whitelist holds the default
 * decoders of those codecs, so avformat_find_stream_info does not run any other decoder either (an audio stream
 * is then left unanalysed, which the video does not need). */
static const enum AVCodecID VIDEO_CODECS[] = {
    AV_CODEC_ID_H264, AV_CODEC_ID_HEVC, AV_CODEC_ID_VP8, AV_CODEC_ID_VP9, AV_CODEC_ID_AV1,
    AV_CODEC_ID_MPEG4, AV_CODEC_ID_MPEG1VIDEO, AV_CODEC_ID_MPEG2VIDEO, AV_CODEC_ID_H263, AV_CODEC_ID_MJPEG,
    AV_CODEC_ID_PRORES, AV_CODEC_ID_DNXHD, AV_CODEC_ID_FFV1, AV_CODEC_ID_PNG, AV_CODEC_ID_QTRLE,
    AV_CODEC_ID_RAWVIDEO,
};
#define VIDEO_FORMAT_WHITELIST "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,mpegts"
enum { VIDEO_AVIO_BUFFER = 32768 };
/* The fewest frames a skipping read must save before it scans a stream whose header counts its frames; the most
 * packets it tables (2^22: 38 hours at 30 fps, a 143 MiB table), past which the stream is decoded in order. */
enum { VIDEO_SKIP_MIN = 8, VIDEO_SKIP_MAX_PACKETS = 1 << 22 };

/* ---- FFmpeg's log, into the failing call's message ----------------------------------------------------------
 *
 * libav* report the detail of a failure (which box is missing, what the decoder found) only through av_log, and
 * av_log_set_callback is the one way to divert it from stderr. That callback is process-wide, one for every
 * thread, so it is the one process-wide hook qvl installs: once (pthread_once), at the first video call. It keeps
 * a message only while a qvl video call is active on the calling thread (a thread-local pointer to that call's
 * vlog, set and restored by the call) and drops every other one: nothing of FFmpeg's ever reaches stderr, the
 * messages of FFmpeg's own decoder threads included. When a video call fails, the last error (else warning) it
 * logged is appended to qvl_error's message. */
typedef struct vlog {
    char line[256];       /* the message being assembled (FFmpeg may log one line in several calls) */
    size_t len;
    int level;            /* the most severe level of its pieces */
    char error[256];      /* the last complete message at AV_LOG_ERROR or worse */
    char warning[256];    /* the last at AV_LOG_WARNING */
} vlog;

static _Thread_local vlog *tl_vlog;
static pthread_once_t vlog_once = PTHREAD_ONCE_INIT;

static void vlog_commit(vlog *l) {
    while (l->len && (l->line[l->len - 1] == '\n' || l->line[l->len - 1] == ' ')) l->len--;
    l->line[l->len] = 0;
    if (l->len) {
        char *dst = l->level <= AV_LOG_ERROR ? l->error : l->warning;
        memcpy(dst, l->line, l->len + 1);
    }
    l->len = 0;
    l->level = AV_LOG_QUIET;
}

static void vlog_callback(void *avcl, int level, const char *fmt, va_list vl) {
    vlog *l = tl_vlog;
    if (!l || level > AV_LOG_WARNING) return;
    const int fresh = l->len == 0;
    if (fresh && avcl) { /* "[mov] ", "[h264] ": the context's name, as FFmpeg's own log prefixes it */
        const AVClass *c = *(const AVClass *const *)avcl;
        const char *name = c && c->item_name ? c->item_name(avcl) : NULL;
        if (name) l->len = (size_t)snprintf(l->line, sizeof l->line, "[%s] ", name);
        if (l->len >= sizeof l->line) l->len = sizeof l->line - 1;
    }
    if (fresh || level < l->level) l->level = level;
    int k = vsnprintf(l->line + l->len, sizeof l->line - l->len, fmt, vl);
    if (k < 0) return;
    l->len = l->len + (size_t)k >= sizeof l->line ? sizeof l->line - 1 : l->len + (size_t)k;
    if (l->len == sizeof l->line - 1 || (l->len && l->line[l->len - 1] == '\n')) vlog_commit(l);
}

static void vlog_install(void) { av_log_set_callback(vlog_callback); }

/* Start keeping FFmpeg's messages in `l` on this thread (installing the callback on first use); returns the log
 * to restore (tl_vlog = it) when the call ends. */
static vlog *vlog_enter(vlog *l) {
    pthread_once(&vlog_once, vlog_install);
    memset(l, 0, sizeof *l);
    vlog *outer = tl_vlog;
    tl_vlog = l;
    return outer;
}

/* Append FFmpeg's last message to a failure's message (once; when it fits). */
static void vlog_append(vlog *l, qvl_error *err) {
    if (l->len) vlog_commit(l);
    const char *m = l->error[0] ? l->error : l->warning;
    if (!err || err->status == QVL_OK || !m[0] || strstr(err->message, m)) return;
    size_t at = strlen(err->message);
    if (at + 1 < sizeof err->message)
        snprintf(err->message + at, sizeof err->message - at, " (FFmpeg: %s)", m);
}

/* One open video stream and its decoder. */
typedef struct vdec {
    const char *path;      /* the label: a path, "<memory>", a plan item's label */
    const video_src *src;
    int64_t pos;           /* the AVIO's read offset in src */
    const AVInputFormat *ifmt;
    AVIOContext *pb;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *frame;
    struct SwsContext *sws;
    uint8_t *rgba;         /* [h·w·4] scratch for frames with alpha */
    uint64_t max_pixels;   /* the frame-size limit, and the name of the setting it comes from (limit_fail) */
    const char *max_pixels_name;
    int stream;
    int32_t width, height; /* every frame must have this size */
    int read_errno;        /* set when a read of src failed: the failure is an I/O error, whatever FFmpeg makes of it */
    const stop_probe *stop; /* the caller's cancellation, polled before each packet */
    uint64_t max_decode_pixels, decoded_pixels; /* max_video_decode_pixels, and the pixels decoded so far (every
                                                   pass: kept when the stream is opened again) */
    video_read_info *info; /* NULL, or the caller's: how the frames were read */
    int threads;           /* the decoder's thread count when it is opened (0: FFmpeg's choice) */
    int explode;           /* a skipping read's decoder: an error in the stream fails the decode (AV_EF_EXPLODE)
                              instead of being concealed from frames decoded before (which it did not decode) */
} vdec;

static int avio_read_cb(void *opaque, uint8_t *buf, int n) {
    vdec *d = opaque;
    if (n <= 0) return 0;
    long got = video_src_read(d->src, buf, (size_t)n, (uint64_t)d->pos);
    if (got < 0) {
        d->read_errno = errno ? errno : EIO;
        return AVERROR(d->read_errno);
    }
    if (got == 0) return AVERROR_EOF;
    d->pos += got;
    return (int)got;
}

static int64_t avio_seek_cb(void *opaque, int64_t off, int whence) {
    vdec *d = opaque;
    const int64_t size = (int64_t)d->src->size;
    if (whence & AVSEEK_SIZE) return size;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = d->pos; break;
    case SEEK_END: base = size; break;
    default: return AVERROR(EINVAL);
    }
    if ((off < 0 && off < -base) || (off > 0 && off > size - base)) return AVERROR(EINVAL);
    d->pos = base + off;
    return d->pos;
}

/* AVFormatContext.io_open: every nested open a demuxer attempts is refused (and said so in the log). */
static int refuse_open(AVFormatContext *s, AVIOContext **pb, const char *url, int flags, AVDictionary **options) {
    (void)flags, (void)options;
    *pb = NULL;
    av_log(s, AV_LOG_ERROR, "refused to open \"%s\": qvl gives FFmpeg no file or URL but the input's own bytes\n",
           url ? url : "");
    return AVERROR(EPERM);
}

static void vdec_close(vdec *d) {
    sws_freeContext(d->sws);
    av_frame_free(&d->frame);
    av_packet_free(&d->pkt);
    avcodec_free_context(&d->dec);
    avformat_close_input(&d->fmt); /* with AVFMT_FLAG_CUSTOM_IO it leaves pb alone */
    if (d->pb) av_freep(&d->pb->buffer);
    avio_context_free(&d->pb);
    free(d->rgba);
    const char *path = d->path, *max_pixels_name = d->max_pixels_name;
    const video_src *src = d->src;
    const stop_probe *stop = d->stop;
    video_read_info *info = d->info;
    const int threads = d->threads, explode = d->explode;
    const AVInputFormat *ifmt = d->ifmt;
    const uint64_t max_pixels = d->max_pixels, max_decode = d->max_decode_pixels, decoded = d->decoded_pixels;
    memset(d, 0, sizeof *d);
    d->path = path;
    d->src = src;
    d->stop = stop;
    d->info = info;
    d->threads = threads;
    d->explode = explode;
    d->max_decode_pixels = max_decode;
    d->decoded_pixels = decoded;
    d->ifmt = ifmt;
    d->max_pixels = max_pixels;
    d->max_pixels_name = max_pixels_name;
}

/* A failure of FFmpeg call `what` with its code `ret`, as status `s`, unless the cause lies below the container: a
 * failed read of the source is QVL_ERR_IO, a failed allocation QVL_ERR_NOMEM. */
static qvl_status av_fail(qvl_error *err, qvl_status s, const vdec *d, const char *what, int ret) {
    if (d->read_errno)
        return err_fail(err, QVL_ERR_IO, "%s: read error: %s (in FFmpeg's %s)", d->path, strerror(d->read_errno),
                        what);
    if (ret == AVERROR(ENOMEM)) s = QVL_ERR_NOMEM;
    char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(ret, buf, sizeof buf);
    return err_fail(err, s, "%s: %s (%s)", d->path, what, buf);
}

static int codec_accepted(enum AVCodecID id) {
    for (size_t i = 0; i < sizeof VIDEO_CODECS / sizeof VIDEO_CODECS[0]; i++)
        if (VIDEO_CODECS[i] == id) return 1;
    return 0;
}

/* The default decoders of VIDEO_CODECS, comma-separated (codec_whitelist). */
static void decoder_names(char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof VIDEO_CODECS / sizeof VIDEO_CODECS[0]; i++) {
        const AVCodec *c = avcodec_find_decoder(VIDEO_CODECS[i]);
        if (!c) continue;
        int k = snprintf(buf + at, cap - at, "%s%s", at ? "," : "", c->name);
        if (k < 0 || (size_t)k >= cap - at) break;
        at += (size_t)k;
    }
}

/* A fresh decoder context for the stream (any earlier one freed: a context whose open failed is not opened again),
 * opened with `threads` (0: FFmpeg's choice; the output does not depend on it). FFmpeg's code: on a failure other
 * than the open's EAGAIN (threads refused), err says what failed. */
static int open_decoder_once(vdec *d, const AVCodec *codec, const AVCodecParameters *par, int threads,
                             qvl_error *err) {
    avcodec_free_context(&d->dec);
    d->dec = avcodec_alloc_context3(codec);
    if (!d->dec) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", d->path), AVERROR(ENOMEM);
    int ret = avcodec_parameters_to_context(d->dec, par);
    if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d, "bad codec parameters", ret), ret;
    d->dec->thread_count = threads;
    if (d->explode) d->dec->err_recognition |= AV_EF_EXPLODE;
    ret = avcodec_open2(d->dec, codec, NULL);
    if (ret < 0 && ret != AVERROR(EAGAIN)) av_fail(err, QVL_ERR_UNSUPPORTED, d, "cannot open the video decoder", ret);
    return ret;
}

/* d->dec opened with `threads` frame threads, else (the system refused the threads) with one, which decodes the same
 * frames; a status, with err set on failure. */
static qvl_status open_decoder(vdec *d, const AVCodec *codec, const AVCodecParameters *par, int threads,
                               qvl_error *err) {
    int ret = open_decoder_once(d, codec, par, threads, err);
    if (ret == AVERROR(EAGAIN)) ret = open_decoder_once(d, codec, par, 1, err);
    if (ret == AVERROR(EAGAIN))
        return err_fail(err, QVL_ERR_NOMEM, "%s: cannot start the video decoder: out of memory or threads", d->path);
    return ret < 0 ? err->status : QVL_OK;
}

/* Open the source with the sniffed demuxer, pick the best video stream, check its codec and frame size (against
 * d->max_pixels, before a frame is decoded), and open its decoder. */
static qvl_status vdec_open(vdec *d, qvl_error *err) {
    const char *path = d->path;
    d->pos = 0;
    uint8_t *buf = av_malloc(VIDEO_AVIO_BUFFER);
    if (buf) d->pb = avio_alloc_context(buf, VIDEO_AVIO_BUFFER, 0, d, avio_read_cb, NULL, avio_seek_cb);
    if (!d->pb) av_free(buf);
    d->fmt = avformat_alloc_context();
    if (!d->pb || !d->fmt) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    d->fmt->pb = d->pb;
    d->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    d->fmt->io_open = refuse_open;
    char codecs[512];
    decoder_names(codecs, sizeof codecs);
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "protocol_whitelist", "", 0);
    av_dict_set(&opts, "format_whitelist", VIDEO_FORMAT_WHITELIST, 0);
    av_dict_set(&opts, "codec_whitelist", codecs, 0);
    int ret = avformat_open_input(&d->fmt, "", d->ifmt, &opts); /* frees d->fmt on failure */
    av_dict_free(&opts);
    if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d, "not a readable video container", ret);
    ret = avformat_find_stream_info(d->fmt, NULL);
    if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d, "cannot read stream information", ret);
    /* The best video stream, by FFmpeg's own choice (as PyAV's streams.video[0] for the single-stream files
       transformers reads); its codec must be an accepted one. */
    ret = av_find_best_stream(d->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (ret < 0) return err_fail(err, QVL_ERR_FORMAT, "%s: no video stream", path);
    d->stream = ret;
    const AVCodecParameters *par = d->fmt->streams[d->stream]->codecpar;
    if (!codec_accepted(par->codec_id))
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: video codec %s is not one qvl decodes (h264, hevc, vp8, vp9, "
                        "av1, mpeg4, mpeg1/2video, h263, mjpeg, prores, dnxhd, ffv1, png, qtrle, rawvideo)", path,
                        avcodec_get_name(par->codec_id));
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec) return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: no decoder for its %s video stream", path,
                                avcodec_get_name(par->codec_id));
    if (par->width <= 0 || par->height <= 0)
        return err_fail(err, QVL_ERR_FORMAT, "%s: video stream has no frame size (%dx%d)", path, par->width,
                        par->height);
    if ((uint64_t)par->width * (uint64_t)par->height > d->max_pixels)
        return limit_fail(err, d->max_pixels_name, d->max_pixels, "%s: %dx%d frames (%llu pixels) have more than the "
                          "%llu pixels allowed", path, par->width, par->height,
                          (unsigned long long)par->width * (unsigned long long)par->height,
                          (unsigned long long)d->max_pixels);
    d->width = par->width;
    d->height = par->height;

    d->pkt = av_packet_alloc();
    d->frame = av_frame_alloc();
    if (!d->pkt || !d->frame) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    return open_decoder(d, codec, par, d->threads, err);
}

static int full_range(const AVFrame *f) {
    switch (f->format) {
    case AV_PIX_FMT_YUVJ420P: case AV_PIX_FMT_YUVJ422P: case AV_PIX_FMT_YUVJ444P:
    case AV_PIX_FMT_YUVJ440P: case AV_PIX_FMT_YUVJ411P:
        return 1;
    default:
        return f->color_range == AVCOL_RANGE_JPEG;
    }
}

/* Blend RGBA over white (transformers' convert_to_rgb in float32), rounded half to even into RGB24. */
static void blend_white(const uint8_t *rgba, size_t n_px, uint8_t *rgb) {
    for (size_t i = 0; i < n_px; i++) {
        float alpha = (float)rgba[4 * i + 3] / 255.0f;
        float bg = (1.0f - alpha) * 255.0f;
        for (int c = 0; c < 3; c++) {
            float v = bg + alpha * (float)rgba[4 * i + (size_t)c];
            float r = rintf(v);
            rgb[3 * i + (size_t)c] = (uint8_t)(r < 0.0f ? 0.0f : r > 255.0f ? 255.0f : r);
        }
    }
}

/* Convert one decoded frame into packed RGB24 at `dst` ([height·width·3]). */
static qvl_status convert_frame(vdec *d, const AVFrame *f, int64_t index, uint8_t *dst, qvl_error *err) {
    if (f->width != d->width || f->height != d->height)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: frame %lld is %dx%d, the stream's frames are %dx%d", d->path,
                        (long long)index, f->width, f->height, (int)d->width, (int)d->height);
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get((enum AVPixelFormat)f->format);
    if (!desc) return err_fail(err, QVL_ERR_FORMAT, "%s: frame %lld has no pixel format", d->path, (long long)index);
    int alpha = (desc->flags & AV_PIX_FMT_FLAG_ALPHA) != 0;
    enum AVPixelFormat dst_fmt = alpha ? AV_PIX_FMT_RGBA : AV_PIX_FMT_RGB24;
    d->sws = sws_getCachedContext(d->sws, f->width, f->height, (enum AVPixelFormat)f->format, f->width, f->height,
                                  dst_fmt, VIDEO_SWS_FLAGS, NULL, NULL, NULL);
    if (!d->sws)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: cannot convert pixel format %s to RGB", d->path, desc->name);
    if (!(desc->flags & AV_PIX_FMT_FLAG_RGB)) {
        /* sws_getCoefficients takes AVColorSpace values (SWS_CS_* mirror them) and maps unknown ones to BT.601. */
        sws_setColorspaceDetails(d->sws, sws_getCoefficients(f->colorspace), full_range(f),
                                 sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    }
    size_t n_px = (size_t)d->width * (size_t)d->height;
    uint8_t *out = dst;
    if (alpha) {
        if (!d->rgba) {
            d->rgba = malloc(n_px * 4 + VIDEO_SWS_SLACK);
            if (!d->rgba) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", d->path);
        }
        out = d->rgba;
    }
    uint8_t *planes[4] = {out, NULL, NULL, NULL};
    int strides[4] = {d->width * (alpha ? 4 : 3), 0, 0, 0};
    int rows = sws_scale(d->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, planes, strides);
    if (rows != f->height)
        return err_fail(err, QVL_ERR_FORMAT, "%s: cannot convert frame %lld (%s) to RGB", d->path, (long long)index,
                        desc->name);
    if (alpha) blend_white(d->rgba, n_px, dst);
    return QVL_OK;
}

/* Decoding state of one pass: the sorted indices to keep and where the next one goes. A counting pass (n = 0)
 * checks the limits on every frame it counts: count_p holds the sampling params, fps the stream's rate. */
typedef struct vpass {
    const int64_t *indices;
    size_t n, next;
    uint8_t *rgb;     /* [n][h·w·3]; with a sink, one frame */
    const video_sink *sink; /* NULL: the frames into rgb */
    int64_t decoded;  /* frames seen so far */
    const qvl_video_params *count_p;
    double fps;
    size_t slot0;     /* the clip's slot of indices[0] (a worker's stretch of a skipping read; else 0) */
} vpass;

/* One more frame decoded: within max_video_decode_pixels. */
static qvl_status count_decoded(vdec *d, qvl_error *err) {
    const uint64_t px = (uint64_t)d->width * (uint64_t)d->height; /* both ≤ INT32_MAX */
    if (px > d->max_decode_pixels || d->decoded_pixels > d->max_decode_pixels - px) /* a stream longer than its
                                                                                       header said; a counting pass */
        return limit_fail(err, "max_video_decode_pixels", d->max_decode_pixels,
                          "%s: %llu frames of %dx%d decoded, one more passes the %llu pixels of decoding allowed",
                          d->path, (unsigned long long)(d->decoded_pixels / px), (int)d->width, (int)d->height,
                          (unsigned long long)d->max_decode_pixels);
    d->decoded_pixels += px;
    if (d->info) d->info->frames_decoded++;
    return QVL_OK;
}

/* The decoded frame is frame `i` of the stream: store it in every slot whose index it is (with a sink: convert it
 * once into the one-frame buffer and hand it to the sink for each of those slots). */
static qvl_status deliver(vdec *d, vpass *ps, int64_t i, qvl_error *err) {
    size_t fs = (size_t)d->width * (size_t)d->height * 3;
    size_t first = ps->next;
    while (ps->next < ps->n && ps->indices[ps->next] == i) {
        uint8_t *slot = ps->sink ? ps->rgb : ps->rgb + ps->next * fs;
        if (ps->next == first) TRY(convert_frame(d, d->frame, i, slot, err));
        else if (!ps->sink) memcpy(slot, ps->rgb + first * fs, fs);
        if (ps->sink) TRY(ps->sink->frame(ps->sink->user, ps->next, slot, err));
        ps->next++;
    }
    return QVL_OK;
}

/* Take one decoded frame, the next in a sequential decode. Sets *done once all slots are filled. */
static qvl_status take_frame(vdec *d, vpass *ps, int *done, qvl_error *err) {
    int64_t i = ps->decoded++;
    TRY(count_decoded(d, err));
    if (ps->count_p)
        return video_count_check(ps->decoded, d->width, d->height, ps->fps, ps->count_p, ps->sink != NULL, d->path,
                                 err);
    TRY(deliver(d, ps, i, err));
    if (ps->next < ps->n && ps->indices[ps->next] < i)
        return err_fail(err, QVL_ERR_INTERNAL, "%s: sampled indices are not sorted", d->path);
    *done = ps->n > 0 && ps->next == ps->n;
    return QVL_OK;
}

/* Receive every frame the decoder has ready. */
static qvl_status drain(vdec *d, vpass *ps, int *done, qvl_error *err) {
    for (;;) {
        int ret = avcodec_receive_frame(d->dec, d->frame);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return QVL_OK;
        if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d, "corrupt video data", ret);
        qvl_status s = take_frame(d, ps, done, err);
        av_frame_unref(d->frame);
        if (s != QVL_OK || *done) return s;
    }
}

/* Decode from the start of the stream until every index in `ps` is filled or the stream ends. */
static qvl_status decode_pass(vdec *d, vpass *ps, qvl_error *err) {
    int done = 0;
    while (!done) {
        if (stop_now(d->stop))
            return err_fail(err, QVL_ERR_CANCELLED, "%s: video decode cancelled after %lld frames", d->path,
                            (long long)ps->decoded);
        int ret = av_read_frame(d->fmt, d->pkt);
        if (ret == AVERROR_EOF) break;
        if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d, "cannot read the video (truncated?)", ret);
        if (d->pkt->stream_index != d->stream) {
            av_packet_unref(d->pkt);
            continue;
        }
        ret = avcodec_send_packet(d->dec, d->pkt);
        if (ret == AVERROR(EAGAIN)) { /* the decoder wants its output taken first */
            TRY(drain(d, ps, &done, err));
            ret = done ? 0 : avcodec_send_packet(d->dec, d->pkt);
        }
        av_packet_unref(d->pkt);
        if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d, "corrupt video data", ret);
        TRY(drain(d, ps, &done, err));
    }
    if (done) return QVL_OK;
    int ret = avcodec_send_packet(d->dec, NULL); /* flush the frames still held (B-frames, frame threads) */
    if (ret < 0 && ret != AVERROR_EOF) return av_fail(err, QVL_ERR_FORMAT, d, "corrupt video data", ret);
    return drain(d, ps, &done, err);
}

/* ---- decoding only what sampling needs ------------------------------------------------------------------------
 *
 * A sampled frame's identity is its ordinal in a sequential decode's output (read_video_pyav's enumerate). For an
 * H.264 stream that can be proven to output one frame per packet in presentation order (h264_scan.h: frame
 * pictures only, the reordering depth stated, no frame-number gaps; here: every packet one picture with a
 * timestamp, all timestamps distinct, none marked discard or corrupt, the first packet an IDR picture holding the
 * earliest timestamp, as many packets as the header counts frames), that ordinal is the rank of the frame's
 * timestamp among the packets': a first pass over the packets (demuxing, no decoding) gives the ranks. Then the
 * decode skips what no sampled frame needs, in two ways that leave every decoded frame's pixels as a sequential
 * decode makes them:
 *   - a packet whose frame is not sampled is decoded with skip_frame = AVDISCARD_NONREF: if no frame references it
 *     (nal_ref_idc 0), the decoder drops it (the setting is read per packet, frame threads included: FFmpeg's
 *     pthread_frame.c copies it from the caller's context at each packet);
 *   - when the earliest packet a sampled frame still needs lies after a resume point — an IDR picture that no
 *     earlier packet's frame follows in presentation order (a closed GOP), with no parameter set or x264 version
 *     SEI between the first packet and it that is not a repeat (h264_scan.h) — the packets before that point are
 *     not sent at all: the decoder is flushed and starts again at the IDR, which marks every reference unused. A
 *     decoder that never had the stream's first packet is given it to parse first (skip_prime), so that it keeps
 *     what a sequential decoder keeps across the packets it was not sent.
 * The ordinals are checked as the frames come: each frame's timestamp must be a packet's, its rank above the last
 * one's, no frame that was decoded (sampled, or a reference) may be missing below it, and every sampled frame must
 * come. Anything else — a decoder error, a frame out of place — and the whole read is done again sequentially from
 * the start (a counting decode included; the sink's begin is called again), so the result is always the sequential
 * decode's: the skipping decode either gives the same frames or is not used. A stream that does not qualify, and
 * every other codec, decodes sequentially; so does a stream whose header counts its frames when sampling leaves
 * fewer than VIDEO_SKIP_MIN of them out (the first pass reads the whole file: not worth it to save a few frames).
 * Where the header has no count, the first pass counts the packets instead of decoding the stream to count it,
 * checking the limits packet by packet as the counting decode does frame by frame.
 * The packet table costs 34 bytes per packet (and 4 per sampled frame) while the video is read, of the order of
 * FFmpeg's own index of the stream, and holds at most VIDEO_SKIP_MAX_PACKETS; max_video_decode_pixels bounds each read as before (a stream read again after a
 * failed skipping read may decode up to twice that). */
typedef struct vskip {
    size_t n, cap;       /* packets of the stream, in decode order */
    int64_t *pts;        /* [n] each packet's timestamp */
    uint8_t *flags;      /* [n] H264_PKT_* */
    uint8_t *want;       /* [n] its frame is sampled */
    int64_t *sorted;     /* [n] the timestamps ascending: a frame's ordinal is its timestamp's place here */
    uint32_t *rank;      /* [n] packet → ordinal */
    uint32_t *pkt;       /* [n] ordinal → packet */
    uint32_t *resume;    /* [n] packet → the last resume point at or before it */
    uint32_t *sent;      /* [n] by ordinal: the decoder generation that was given its packet to decode (0: none) */
    uint32_t *first;     /* [slots] the earliest packet that slot or any after it needs */
    int consumed;        /* packets were read: the stream must be opened again */
} vskip;

static void vskip_free(vskip *k) {
    free(k->pts), free(k->flags), free(k->want), free(k->sorted), free(k->rank), free(k->pkt), free(k->resume);
    free(k->sent), free(k->first);
    memset(k, 0, sizeof *k);
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The ordinal of timestamp `pts`, or -1 when no packet has it. */
static int64_t rank_of(const vskip *k, int64_t pts) {
    const int64_t *hit = bsearch(&pts, k->sorted, k->n, sizeof *k->sorted, cmp_i64);
    return hit ? hit - k->sorted : -1;
}

/* One more packet into the table (grown by doubling; n stays ≤ total, which the caller checks first). */
static int vskip_push(vskip *k, int64_t pts, uint8_t flags) {
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 1024;
        int64_t *p = realloc(k->pts, cap * sizeof *p);
        if (p) k->pts = p;
        uint8_t *f = realloc(k->flags, cap);
        if (f) k->flags = f;
        if (!p || !f) return 0;
        k->cap = cap;
    }
    k->pts[k->n] = pts;
    k->flags[k->n++] = flags;
    return 1;
}

/* The first pass: read the stream's packets (no decoding) into k and decide whether the stream qualifies; *why is
 * NULL when it does, else the reason. `total` is the header's frame count, which the packets must match; 0 when
 * the header has none: the packets count the frames then, each one checked against the limits as the counting
 * decode checks each frame (sampling `p` at `fps`). Fails only on those limits, when the caller stops it or when
 * memory runs out: any other trouble is a reason to decode sequentially. */
static qvl_status skip_scan(vdec *d, int64_t total, const qvl_video_params *p, double fps, int streamed, vskip *k,
                            const char **why, qvl_error *err) {
    const AVCodecParameters *par = d->fmt->streams[d->stream]->codecpar;
    *why = NULL;
    h264_scan sc;
    h264_scan_init(&sc, par->extradata, par->extradata && par->extradata_size > 0 ? (size_t)par->extradata_size : 0);
    k->consumed = 1;
    while (!sc.unusable) {
        if (stop_now(d->stop))
            return err_fail(err, QVL_ERR_CANCELLED, "%s: video decode cancelled after reading %zu packets", d->path,
                            k->n);
        int ret = av_read_frame(d->fmt, d->pkt);
        if (ret == AVERROR_EOF) break;
        if (ret < 0) return *why = "unreadable packets", QVL_OK;
        const AVPacket *pk = d->pkt;
        qvl_status s = QVL_OK;
        if (pk->stream_index == d->stream) {
            if (total > 0 && (int64_t)k->n == total) *why = "more packets than the header's frame count";
            else if (k->n == VIDEO_SKIP_MAX_PACKETS) *why = "more packets than a skipping read tables";
            else if (pk->pts == AV_NOPTS_VALUE) *why = "a packet without a timestamp";
            else if (pk->flags & (AV_PKT_FLAG_DISCARD | AV_PKT_FLAG_CORRUPT)) *why = "a discarded or corrupt packet";
            else if (!vskip_push(k, pk->pts, (uint8_t)h264_scan_packet(&sc, pk->data, pk->data ? (size_t)pk->size : 0)))
                s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for the packet table", d->path);
            else if (total <= 0)
                s = video_count_check((int64_t)k->n, d->width, d->height, fps, p, streamed, d->path, err);
        }
        av_packet_unref(d->pkt);
        TRY(s);
        if (*why) return QVL_OK;
    }
    if (sc.unusable) return *why = sc.unusable, QVL_OK;
    if (!sc.sps_seen) return *why = "no sequence parameter set", QVL_OK;
    const size_t n = k->n;
    if (n == 0) return *why = "no packets", QVL_OK;
    if (total > 0 && (int64_t)n != total) return *why = "fewer packets than the header's frame count", QVL_OK;
    if (!(k->flags[0] & H264_PKT_IDR)) return *why = "the first picture is not an IDR picture", QVL_OK;
    k->want = calloc(n, 1);
    k->sorted = malloc(n * sizeof *k->sorted);
    k->rank = malloc(n * sizeof *k->rank);
    k->pkt = malloc(n * sizeof *k->pkt);
    k->resume = malloc(n * sizeof *k->resume);
    k->sent = calloc(n, sizeof *k->sent);
    if (!k->want || !k->sorted || !k->rank || !k->pkt || !k->resume || !k->sent)
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for the packet table", d->path);
    memcpy(k->sorted, k->pts, n * sizeof *k->sorted);
    qsort(k->sorted, n, sizeof *k->sorted, cmp_i64);
    for (size_t i = 1; i < n; i++)
        if (k->sorted[i] == k->sorted[i - 1]) return *why = "two packets with one timestamp", QVL_OK;
    if (k->pts[0] != k->sorted[0]) return *why = "a frame shown before the first IDR picture", QVL_OK;
    for (size_t i = 0; i < n; i++) {
        k->rank[i] = (uint32_t)rank_of(k, k->pts[i]);
        k->pkt[k->rank[i]] = (uint32_t)i;
    }
    /* Resume points: IDR packets whose frames, and every later packet's, come after every earlier packet's frame in
       presentation order (the ranks' running maximum below the suffix minimum, kept in `sent` for now), with no
       packet between the first and them that changes what a decoder keeps (H264_PKT_NEW_SETUP). */
    uint32_t max_before = 0, last = 0;
    int new_setup = 0;
    for (size_t i = 0; i < n; i++) k->sent[i] = k->rank[i];
    for (size_t i = n - 1; i-- > 0;)
        if (k->sent[i + 1] < k->sent[i]) k->sent[i] = k->sent[i + 1];
    for (size_t i = 0; i < n; i++) {
        if (k->flags[i] & H264_PKT_IDR && !new_setup && (i == 0 || max_before < k->sent[i])) last = (uint32_t)i;
        k->resume[i] = last;
        if (i == 0 || k->rank[i] > max_before) max_before = k->rank[i];
        if (k->flags[i] & H264_PKT_NEW_SETUP) new_setup = 1;
    }
    memset(k->sent, 0, n * sizeof *k->sent);
    return QVL_OK;
}

/* The sampled frames `v` into a qualifying stream's plan: which packets are wanted, and for each slot the earliest
 * packet it or a later slot needs. */
static qvl_status skip_sample(vdec *d, vskip *k, const qvl_video *v, const char **why, qvl_error *err) {
    k->first = malloc((size_t)v->n_frames * sizeof *k->first);
    if (!k->first) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for the packet table", d->path);
    uint32_t earliest = UINT32_MAX;
    for (size_t j = (size_t)v->n_frames; j-- > 0;) {
        const int64_t idx = v->indices[j];
        if (idx < 0 || (uint64_t)idx >= k->n) return *why = "a sampled index outside the stream", QVL_OK;
        const uint32_t p = k->pkt[idx];
        k->want[p] = 1;
        if (p < earliest) earliest = p;
        k->first[j] = earliest;
    }
    return QVL_OK;
}

/* The decoder's frame threads for a skipping read: twice FFmpeg's own choice (a thread a CPU and one more, at most
 * 16), since about half the packets in flight are ones it skips and they hold a thread each for next to no work
 * (300 s of 720p on 2 CPUs: 14.1-15.2 s with 4 threads or 8, 17.0-18.4 s with FFmpeg's choice). */
static int skip_threads(void) {
    const int n = 2 * (av_cpu_count() + 1);
    return n < 2 ? 2 : n > 16 ? 16 : n;
}

/* Where a skipping decode stands (one decoder, over one stretch of packets). */
typedef struct vstate {
    uint32_t gen;  /* the decoder's generation: flushing starts a new one */
    int64_t last;  /* the ordinal of the last frame out */
    int done;      /* every slot of the pass is filled */
    int sent_any;  /* a packet was sent since the decoder was opened or flushed */
    int skipping;  /* packets were left out since the last one sent */
    int primed;    /* the stream's first packet was given (decoded or only parsed) */
} vstate;

typedef struct vworker vworker;
static qvl_status par_put(vworker *w, vpass *ps, int64_t r, qvl_error *err);
static int par_stopped(const vworker *w);

/* A decoded frame in the skipping pass: checked against the ordinals (*why set when it does not fit), counted, and
 * delivered to its slots (by a worker `w`: handed to the reader). */
static qvl_status take_skipping(vdec *d, vpass *ps, const vskip *k, vstate *st, vworker *w, const char **why,
                                qvl_error *err) {
    const int64_t r = d->frame->pts == AV_NOPTS_VALUE ? -1 : rank_of(k, d->frame->pts);
    if (r < 0) return *why = "a frame with a timestamp no packet has", QVL_OK;
    if (d->frame->decode_error_flags || (d->frame->flags & AV_FRAME_FLAG_CORRUPT))
        return *why = "a frame with decoding errors", QVL_OK;
    if (r <= st->last) return *why = "frames out of order", QVL_OK;
    for (int64_t q = st->last + 1; q < r; q++)
        if (k->sent[q] == st->gen) return *why = "a decoded frame missing from the output", QVL_OK;
    if (ps->next < ps->n && ps->indices[ps->next] < r) return *why = "a sampled frame missing from the output", QVL_OK;
    st->last = r;
    ps->decoded++;
    if (w) {
        TRY(par_put(w, ps, r, err));
    } else {
        TRY(count_decoded(d, err));
        TRY(deliver(d, ps, r, err));
    }
    st->done = ps->next == ps->n;
    return QVL_OK;
}

static qvl_status drain_skipping(vdec *d, vpass *ps, const vskip *k, vstate *st, vworker *w, const char **why,
                                 qvl_error *err) {
    while (!st->done && !*why && !(w && par_stopped(w))) {
        int ret = avcodec_receive_frame(d->dec, d->frame);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return QVL_OK;
        if (ret < 0) return *why = "a decoding error", QVL_OK;
        qvl_status s = take_skipping(d, ps, k, st, w, why, err);
        av_frame_unref(d->frame);
        TRY(s);
    }
    return QVL_OK;
}

/* Give the decoder the stream's first packet to parse, not decode (skip_frame AVDISCARD_ALL: its parameter sets
 * and SEI are read, no slice is decoded), and flush: what a decoder keeps across a flush (parameter sets, the
 * encoder version an x264 SEI names, which FFmpeg's decoder works around for old x264 streams) is then what a
 * sequential decode has at any resume point (h264_scan.h: later packets only repeat the first one's parameter
 * sets, else no resume point follows them). */
static qvl_status skip_prime(vdec *d, AVPacket *first, vstate *st, const char **why) {
    d->dec->skip_frame = AVDISCARD_ALL;
    int ret = avcodec_send_packet(d->dec, first);
    if (ret >= 0) ret = avcodec_send_packet(d->dec, NULL);
    while (ret >= 0) ret = avcodec_receive_frame(d->dec, d->frame); /* none: nothing was decoded */
    av_frame_unref(d->frame);
    if (ret != AVERROR_EOF) return *why = "a decoding error", QVL_OK;
    avcodec_flush_buffers(d->dec);
    st->primed = 1;
    st->sent_any = 0;
    return QVL_OK;
}

/* One packet of the skipping pass, the `at`-th of the stream: left out when every sampled frame still to come is
 * served by a later resume point (the stream's first packet is then only parsed), else decoded (skipped by the
 * decoder when its frame is not sampled and not a reference) and its frames taken. The packet is unreferenced. */
static qvl_status skip_packet(vdec *d, vpass *ps, vskip *k, vstate *st, vworker *w, AVPacket *pkt, size_t at,
                              const char **why, qvl_error *err) {
    const uint32_t from = k->resume[k->first[ps->slot0 + ps->next]];
    if (at < from) { /* a later resume point serves every sampled frame left: not sent at all */
        qvl_status s = at == 0 ? skip_prime(d, pkt, st, why) : QVL_OK;
        av_packet_unref(pkt);
        st->skipping = 1;
        return s;
    }
    if (st->skipping) {
        if (st->sent_any) avcodec_flush_buffers(d->dec);
        st->gen++;
        st->skipping = 0;
    }
    const int want = k->want[at];
    d->dec->skip_frame = want ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
    if (want || (k->flags[at] & H264_PKT_REF)) k->sent[k->rank[at]] = st->gen;
    int ret = avcodec_send_packet(d->dec, pkt);
    if (ret == AVERROR(EAGAIN)) {
        qvl_status s = drain_skipping(d, ps, k, st, w, why, err);
        ret = s != QVL_OK || st->done || *why ? 0 : avcodec_send_packet(d->dec, pkt);
        if (s != QVL_OK) {
            av_packet_unref(pkt);
            return s;
        }
    }
    av_packet_unref(pkt);
    if (ret < 0) return *why = "a decoding error", QVL_OK;
    st->sent_any = 1;
    if (at == 0) st->primed = 1;
    return drain_skipping(d, ps, k, st, w, why, err);
}

/* The end of a skipping pass's packets: the frames the decoder still holds, and every sampled frame must have come. */
static qvl_status skip_end(vdec *d, vpass *ps, const vskip *k, vstate *st, vworker *w, const char **why,
                           qvl_error *err) {
    if (!st->done && !*why) {
        int ret = avcodec_send_packet(d->dec, NULL);
        if (ret < 0 && ret != AVERROR_EOF) return *why = "a decoding error", QVL_OK;
        TRY(drain_skipping(d, ps, k, st, w, why, err));
    }
    if (!st->done && !*why) *why = "a sampled frame missing from the output";
    return QVL_OK;
}

/* The skipping pass over a freshly opened stream (see above), on one decoder. *why is set when it could not give
 * the sequential decode's frames: the caller then reads the stream again. */
static qvl_status decode_skipping(vdec *d, vpass *ps, vskip *k, const char **why, qvl_error *err) {
    size_t at = 0; /* the packet's place in decode order */
    vstate st = {1, -1, 0, 0, 0, 0};
    while (!st.done && !*why) {
        if (stop_now(d->stop))
            return err_fail(err, QVL_ERR_CANCELLED, "%s: video decode cancelled after %lld frames", d->path,
                            (long long)ps->decoded);
        int ret = av_read_frame(d->fmt, d->pkt);
        if (ret == AVERROR_EOF) break;
        if (ret < 0) return *why = "unreadable packets", QVL_OK;
        if (d->pkt->stream_index != d->stream) {
            av_packet_unref(d->pkt);
            continue;
        }
        if (at >= k->n || d->pkt->pts != k->pts[at]) {
            av_packet_unref(d->pkt);
            return *why = "packets that differ from the first read", QVL_OK;
        }
        TRY(skip_packet(d, ps, k, &st, NULL, d->pkt, at++, why, err));
    }
    return skip_end(d, ps, k, &st, NULL, why, err);
}

/* ---- several stretches at once ----------------------------------------------------------------------------------
 *
 * A skipping read whose sampled frames lie in two or more stretches between resume points decodes them on several
 * decoders at once. A job is the packets [a, b) from one resume point to the next (or the stream's end) that hold
 * sampled frames: no packet at or after a references one before it, and [a, b) hold exactly the ordinals [a, b)
 * (every earlier packet's frame is shown before a's, every later one's after), so a job decodes on its own decoder to
 * the frames one pass gives them. That decoder is primed with the stream's first packet (skip_prime) and flushed
 * between jobs, as the one-decoder pass is when it resumes. The reader (the calling thread) reads every packet once, in
 * order, checks it against the first pass as before and queues it to its job; each worker takes the next job not
 * taken, decodes it as decode_skipping does (the same checks, over its job's ordinals and slots) and converts its
 * sampled frames to RGB; the reader hands them to the sink (or the frame buffer) as they come: each job's slots in
 * order, the jobs' interleaved (video_sink allows it). Bounded: VIDEO_PAR_QUEUE bytes of packets queued (the reader
 * waits, handing frames over meanwhile), VIDEO_PAR_OUT converted frames a worker (it waits for the reader), and no
 * job taken more than VIDEO_PAR_AHEAD jobs a worker past the first one not finished (a sink that takes temporal
 * patches in order, a stream's ring, keeps a later job's frames until the earlier ones come). A misfit
 * in any job stops every worker, and the stream is read again in order, as after a one-decoder skipping read. */
enum { VIDEO_PAR_MAX = 4, VIDEO_PAR_OUT = 2, VIDEO_PAR_POLL_MS = 20, VIDEO_PAR_AHEAD = 2 };
#define VIDEO_PAR_QUEUE ((size_t)32 << 20)

/* A queued packet. */
typedef struct vpk {
    AVPacket *pkt;
    size_t at;
    struct vpk *next;
} vpk;

typedef struct vjob {
    size_t a, b;      /* its packets */
    size_t j0, j1;    /* its slots */
    vpk *head, *tail; /* packets queued, not yet taken */
    int all_read;     /* the reader will queue no more */
    int dropping;     /* its worker is done: the reader drops its packets */
    int finished;     /* ... and has handed over its frames but VIDEO_PAR_OUT */
} vjob;

/* A converted frame: the worker's while it fills it, then ready for the reader, then free again. */
enum { VBUF_FREE, VBUF_FILLING, VBUF_READY };
typedef struct vbuf {
    uint8_t *rgb;
    int state;
    int64_t rank;
    size_t slot;
} vbuf;

typedef struct vpar vpar;
struct vworker {
    vpar *par;
    vdec d;            /* its decoder (no demuxer) */
    pthread_t thread;
    int started, exited;
    vbuf out[VIDEO_PAR_OUT];
    qvl_status status; /* a failure of its own (memory, the decode budget) */
    const char *why;   /* a misfit: the stream is read again in order */
    qvl_error err;
    vlog log;
};

struct vpar {
    pthread_mutex_t mu;
    pthread_cond_t to_reader, to_workers;
    vdec *d;           /* the reader's: the decode budget and the read's info */
    vskip *k;
    const int64_t *indices;
    size_t n_slots;
    vjob *jobs;
    size_t n_jobs, taken;
    size_t oldest;     /* the first job not finished: none is taken `window` jobs past it */
    size_t window;     /* VIDEO_PAR_AHEAD (or video_read_info.ahead) jobs a worker */
    size_t queued;     /* bytes of packets queued */
    vpk *spare;        /* queue entries to reuse */
    AVPacket *first;   /* the stream's first packet, for priming (set once the reader has it) */
    int first_set;
    _Atomic int stop;  /* every worker stops: a failure, a misfit, cancellation */
    int n_w;
    vworker w[VIDEO_PAR_MAX];
};

static int par_stopped(const vworker *w) { return w->par->stop; }

/* The jobs of a qualifying stream's sampling: one per stretch between resume points that holds sampled frames. */
static size_t par_jobs(const vskip *k, const qvl_video *v, vjob *jobs) {
    size_t n = 0, b = 0;
    for (size_t j = 0; j < (size_t)v->n_frames;) {
        const uint32_t a = k->resume[k->pkt[v->indices[j]]];
        size_t j1 = j;
        while (j1 < (size_t)v->n_frames && k->resume[k->pkt[v->indices[j1]]] == a) j1++;
        if (b < a + 1u) b = a + 1u;
        while (b < k->n && k->resume[b] == a) b++;
        jobs[n++] = (vjob){.a = a, .b = b, .j0 = j, .j1 = j1};
        j = j1;
    }
    return n;
}

/* One more frame decoded by a worker: counted (under the lock) against the read's decode budget; a sampled one
 * converted into a free buffer of the worker's and handed to the reader. */
static qvl_status par_put(vworker *w, vpass *ps, int64_t r, qvl_error *err) {
    vpar *P = w->par;
    const int sampled = ps->next < ps->n && ps->indices[ps->next] == r;
    vbuf *b = NULL;
    pthread_mutex_lock(&P->mu);
    qvl_status s = count_decoded(P->d, err);
    while (s == QVL_OK && sampled && !P->stop) {
        for (int i = 0; i < VIDEO_PAR_OUT && !b; i++)
            if (w->out[i].state == VBUF_FREE) b = &w->out[i];
        if (b) break;
        pthread_cond_wait(&P->to_workers, &P->mu);
    }
    if (b) b->state = VBUF_FILLING;
    pthread_mutex_unlock(&P->mu);
    if (s != QVL_OK || !b) return s; /* not sampled, or stopped */
    s = convert_frame(&w->d, w->d.frame, r, b->rgb, err);
    pthread_mutex_lock(&P->mu);
    b->state = s == QVL_OK ? VBUF_READY : VBUF_FREE;
    b->rank = r;
    b->slot = ps->slot0 + ps->next;
    pthread_cond_signal(&P->to_reader);
    pthread_mutex_unlock(&P->mu);
    while (ps->next < ps->n && ps->indices[ps->next] == r) ps->next++;
    return s;
}

/* Empty a job's queue (under the lock, or once the workers are joined): its packets unreferenced, its entries kept
 * for reuse. */
static void job_drop(vpar *P, vjob *job) {
    for (vpk *e = job->head; e; e = e->next) P->queued -= (size_t)e->pkt->size, av_packet_unref(e->pkt);
    if (job->tail) job->tail->next = P->spare, P->spare = job->head;
    job->head = job->tail = NULL;
}

/* The next packet of a worker's job into w->d.pkt (*got 0: the job has no more, or the read stops). */
static void par_pop(vworker *w, vjob *job, size_t *at, int *got) {
    vpar *P = w->par;
    pthread_mutex_lock(&P->mu);
    while (!job->head && !job->all_read && !P->stop) pthread_cond_wait(&P->to_workers, &P->mu);
    vpk *e = P->stop ? NULL : job->head;
    *got = e != NULL;
    if (e) {
        job->head = e->next;
        if (!job->head) job->tail = NULL;
        P->queued -= (size_t)e->pkt->size;
        av_packet_move_ref(w->d.pkt, e->pkt);
        *at = e->at;
        e->next = P->spare;
        P->spare = e;
        pthread_cond_signal(&P->to_reader);
    }
    pthread_mutex_unlock(&P->mu);
}

/* Decode one job on a worker's decoder. */
static qvl_status par_job(vworker *w, vjob *job, int *used, vstate *st, const char **why, qvl_error *err) {
    vpar *P = w->par;
    vpass ps = {P->indices + job->j0, job->j1 - job->j0, 0, NULL, NULL, 0, NULL, 0.0, job->j0};
    if (*used) avcodec_flush_buffers(w->d.dec); /* after the last job's end */
    *used = 1;
    *st = (vstate){1, (int64_t)job->a - 1, 0, 0, 0, st->primed};
    if (job->a > 0 && !st->primed) { /* the stream's first packet, parsed: see skip_prime */
        pthread_mutex_lock(&P->mu);
        while (!P->first_set && !P->stop && !job->all_read) pthread_cond_wait(&P->to_workers, &P->mu);
        const int have = P->first_set && !P->stop;
        int ret = have ? av_packet_ref(w->d.pkt, P->first) : 0;
        pthread_mutex_unlock(&P->mu);
        if (P->stop) return QVL_OK;
        if (!have) return *why = "fewer packets than the first read", QVL_OK;
        if (ret < 0) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", w->d.path);
        qvl_status s = skip_prime(&w->d, w->d.pkt, st, why);
        av_packet_unref(w->d.pkt);
        if (s != QVL_OK || *why) return s;
    }
    while (!st->done && !*why && !P->stop) {
        size_t at = 0;
        int got;
        par_pop(w, job, &at, &got);
        if (!got) break;
        TRY(skip_packet(&w->d, &ps, P->k, st, w, w->d.pkt, at, why, err));
    }
    if (P->stop) return QVL_OK;
    return skip_end(&w->d, &ps, P->k, st, w, why, err);
}

static void *par_worker(void *arg) {
    vworker *w = arg;
    vpar *P = w->par;
    vlog *outer = vlog_enter(&w->log);
    int used = 0;
    vstate st = {0};
    pthread_mutex_lock(&P->mu);
    while (!P->stop && P->taken < P->n_jobs) {
        /* Not too far past the first job not finished: its slots come before a later job's, so the frames the
         * later jobs hand over wait in the sink (a stream's ring takes temporal patches in order) for it. */
        if (P->taken >= P->oldest + P->window) {
            pthread_cond_wait(&P->to_workers, &P->mu);
            continue;
        }
        vjob *job = &P->jobs[P->taken++];
        pthread_mutex_unlock(&P->mu);
        w->status = par_job(w, job, &used, &st, &w->why, &w->err);
        pthread_mutex_lock(&P->mu);
        job->dropping = 1; /* what is queued for it, and what comes, is not needed */
        job_drop(P, job);
        job->finished = 1;
        const size_t was = P->oldest;
        while (P->oldest < P->n_jobs && P->jobs[P->oldest].finished) P->oldest++;
        if (P->oldest != was) pthread_cond_broadcast(&P->to_workers); /* a window waiter may go on */
        if (w->status != QVL_OK || w->why) {
            P->stop = 1;
            pthread_cond_broadcast(&P->to_workers);
        }
        pthread_cond_signal(&P->to_reader);
    }
    w->exited = 1;
    pthread_cond_signal(&P->to_reader);
    pthread_mutex_unlock(&P->mu);
    if (w->status != QVL_OK) vlog_append(&w->log, &w->err);
    tl_vlog = outer;
    return NULL;
}

static qvl_status par_cancelled(const vpar *P, const vpass *ps, qvl_error *err) {
    return err_fail(err, QVL_ERR_CANCELLED, "%s: video decode cancelled after %zu sampled frames", P->d->path,
                    ps->next);
}

/* Hand the ready frames to their slots; with `wait`, first wait (polling the caller's stop) until a frame is
 * ready or `until(P)` holds. Called by the reader without the lock. */
static qvl_status par_hand_over(vpar *P, vpass *ps, int wait, int (*until)(const vpar *), qvl_error *err) {
    vdec *d = P->d;
    vbuf *ready[VIDEO_PAR_MAX * VIDEO_PAR_OUT];
    size_t n_ready = 0;
    if (wait && stop_now(d->stop)) return par_cancelled(P, ps, err);
    pthread_mutex_lock(&P->mu);
    for (;;) {
        for (int i = 0; i < P->n_w; i++)
            for (int b = 0; b < VIDEO_PAR_OUT; b++)
                if (P->w[i].out[b].state == VBUF_READY) ready[n_ready++] = &P->w[i].out[b];
        if (n_ready || !wait || until(P)) break;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += VIDEO_PAR_POLL_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&P->to_reader, &P->mu, &t);
        pthread_mutex_unlock(&P->mu);
        if (stop_now(d->stop)) return par_cancelled(P, ps, err);
        pthread_mutex_lock(&P->mu);
    }
    pthread_mutex_unlock(&P->mu);
    const size_t fs = (size_t)d->width * (size_t)d->height * 3;
    qvl_status s = QVL_OK;
    for (size_t i = 0; i < n_ready && s == QVL_OK; i++)
        for (size_t j = ready[i]->slot; s == QVL_OK && j < P->n_slots && P->indices[j] == ready[i]->rank; j++) {
            if (ps->sink) s = ps->sink->frame(ps->sink->user, j, ready[i]->rgb, err);
            else memcpy(ps->rgb + j * fs, ready[i]->rgb, fs);
            if (s == QVL_OK) ps->next++;
        }
    if (n_ready) {
        pthread_mutex_lock(&P->mu);
        for (size_t i = 0; i < n_ready; i++) ready[i]->state = VBUF_FREE;
        pthread_cond_broadcast(&P->to_workers);
        pthread_mutex_unlock(&P->mu);
    }
    return s;
}

static int par_room(const vpar *P) { return P->stop || P->queued <= VIDEO_PAR_QUEUE; }

static int par_all_exited(const vpar *P) {
    for (int i = 0; i < P->n_w; i++)
        if (P->w[i].started && !P->w[i].exited) return 0;
    return 1;
}

/* Queue the reader's packet (d->pkt, the `at`-th) to `job`, waiting for room (handing frames over meanwhile). */
static qvl_status par_queue(vpar *P, vpass *ps, vjob *job, size_t at, qvl_error *err) {
    vdec *d = P->d;
    pthread_mutex_lock(&P->mu);
    while (!par_room(P)) {
        pthread_mutex_unlock(&P->mu);
        TRY(par_hand_over(P, ps, 1, par_room, err));
        pthread_mutex_lock(&P->mu);
    }
    qvl_status s = QVL_OK;
    if (!P->stop && !job->dropping) {
        vpk *e = P->spare;
        if (e) P->spare = e->next;
        else if ((e = calloc(1, sizeof *e)) && !(e->pkt = av_packet_alloc())) free(e), e = NULL;
        if (!e) {
            s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for the packet queue", d->path);
        } else {
            av_packet_move_ref(e->pkt, d->pkt);
            e->at = at;
            e->next = NULL;
            if (job->tail) job->tail->next = e;
            else job->head = e;
            job->tail = e;
            P->queued += (size_t)e->pkt->size;
            pthread_cond_broadcast(&P->to_workers);
        }
    }
    pthread_mutex_unlock(&P->mu);
    av_packet_unref(d->pkt);
    return s;
}

/* The reader's side of a skipping read on several decoders: every packet once, into its job's queue. */
static qvl_status par_read(vpar *P, vpass *ps, const char **why, qvl_error *err) {
    vdec *d = P->d;
    vskip *k = P->k;
    size_t at = 0, ji = 0;
    for (;;) {
        if (stop_now(d->stop)) return par_cancelled(P, ps, err);
        TRY(par_hand_over(P, ps, 0, par_room, err));
        pthread_mutex_lock(&P->mu);
        const size_t was = ji;
        for (; ji < P->n_jobs && P->jobs[ji].b <= at; ji++) P->jobs[ji].all_read = 1;
        const int stop = P->stop || ji == P->n_jobs;
        if (ji != was) pthread_cond_broadcast(&P->to_workers);
        pthread_mutex_unlock(&P->mu);
        if (stop) return QVL_OK;
        int ret = av_read_frame(d->fmt, d->pkt);
        if (ret == AVERROR_EOF) return *why = "fewer packets than the first read", QVL_OK; /* a job needs more */
        if (ret < 0) return *why = "unreadable packets", QVL_OK;
        if (d->pkt->stream_index != d->stream) {
            av_packet_unref(d->pkt);
            continue;
        }
        if (at >= k->n || d->pkt->pts != k->pts[at]) {
            av_packet_unref(d->pkt);
            return *why = "packets that differ from the first read", QVL_OK;
        }
        if (at == 0) {
            pthread_mutex_lock(&P->mu);
            ret = av_packet_ref(P->first, d->pkt);
            P->first_set = ret >= 0;
            pthread_cond_broadcast(&P->to_workers);
            pthread_mutex_unlock(&P->mu);
            if (ret < 0) {
                av_packet_unref(d->pkt);
                return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", d->path);
            }
        }
        if (at < P->jobs[ji].a) av_packet_unref(d->pkt);
        else TRY(par_queue(P, ps, &P->jobs[ji], at, err));
        at++;
    }
}

/* How many decoders a skipping read of `n_jobs` jobs runs at once, and each one's frame threads. */
static int par_decoders(const video_read_info *info, size_t n_jobs, int *threads) {
    const int cpus = av_cpu_count();
    long n = info && info->decoders > 0 ? info->decoders : cpus;
    if (n > VIDEO_PAR_MAX) n = VIDEO_PAR_MAX;
    if ((size_t)n > n_jobs) n = (long)n_jobs;
    const int per = n > 0 ? cpus / (int)n : 1;
    *threads = per <= 1 ? 1 : 2 * per > 16 ? 16 : 2 * per; /* as skip_threads, for its share of the CPUs */
    return (int)n;
}

/* The skipping pass on several decoders (see above), when the sampling spans two or more jobs and more than one
 * decoder may run; *used is 0 when it does not apply or the decoders cannot be set up (nothing was read: the caller
 * runs decode_skipping). */
static qvl_status decode_parallel(vdec *d, vpass *ps, vskip *k, const qvl_video *v, int *used, const char **why,
                                  qvl_error *err) {
    *used = 0;
    vjob *jobs = calloc((size_t)v->n_frames, sizeof *jobs);
    if (!jobs) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for the packet table", d->path);
    const size_t n_jobs = par_jobs(k, v, jobs);
    int threads = 1;
    const int n_w = n_jobs >= 2 ? par_decoders(d->info, n_jobs, &threads) : 0;
    if (n_w < 2) {
        free(jobs);
        return QVL_OK;
    }
    vpar *P = calloc(1, sizeof *P);
    if (!P) {
        free(jobs);
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", d->path);
    }
    P->d = d, P->k = k, P->indices = v->indices, P->n_slots = (size_t)v->n_frames, P->jobs = jobs;
    P->n_jobs = n_jobs;
    P->window = (size_t)(d->info && d->info->ahead > 0 ? d->info->ahead : VIDEO_PAR_AHEAD) * (size_t)n_w;
    pthread_mutex_init(&P->mu, NULL);
    pthread_condattr_t monotonic; /* the reader's timed waits: a clock that is never set back */
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&P->to_reader, &monotonic);
    pthread_condattr_destroy(&monotonic);
    pthread_cond_init(&P->to_workers, NULL);
    qvl_status s = QVL_OK;
    const AVCodecParameters *par = d->fmt->streams[d->stream]->codecpar;
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    const size_t fs = (size_t)d->width * (size_t)d->height * 3 + VIDEO_SWS_SLACK;
    P->first = av_packet_alloc();
    if (!P->first) s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", d->path);
    for (int i = 0; i < n_w && s == QVL_OK; i++) {
        vworker *w = &P->w[i];
        P->n_w = i + 1; /* what it holds is freed below, whatever fails */
        w->par = P;
        w->d.path = d->path, w->d.width = d->width, w->d.height = d->height, w->d.explode = 1;
        w->d.pkt = av_packet_alloc();
        w->d.frame = av_frame_alloc();
        for (int b = 0; b < VIDEO_PAR_OUT; b++) w->out[b].rgb = malloc(fs);
        int ok = w->d.pkt && w->d.frame;
        for (int b = 0; b < VIDEO_PAR_OUT; b++) ok = ok && w->out[b].rgb;
        if (!ok) {
            s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for %d decoders", d->path, n_w);
            break;
        }
        s = open_decoder(&w->d, codec, par, threads, err);
    }
    const int set_up = s == QVL_OK;
    if (!set_up) { /* no several decoders (memory, threads): one decoder reads it (decode_skipping); what was set
                      up is freed below */
        err_clear(err);
        s = QVL_OK;
    }
    int started = 0;
    for (int i = 0; i < P->n_w && set_up; i++) {
        P->w[i].started = pthread_create(&P->w[i].thread, NULL, par_worker, &P->w[i]) == 0;
        started += P->w[i].started;
    }
    if (s == QVL_OK && started > 0) {
        *used = 1;
        if (d->info) d->info->jobs = (int)n_jobs;
        s = par_read(P, ps, why, err);
        pthread_mutex_lock(&P->mu);
        for (size_t j = 0; j < P->n_jobs; j++) P->jobs[j].all_read = 1;
        if (s != QVL_OK || *why) P->stop = 1;
        pthread_cond_broadcast(&P->to_workers);
        pthread_mutex_unlock(&P->mu);
        while (s == QVL_OK) { /* the frames still to come */
            qvl_status h = par_hand_over(P, ps, 1, par_all_exited, err);
            if (h != QVL_OK) s = h;
            pthread_mutex_lock(&P->mu);
            int rest = 0;
            for (int i = 0; i < P->n_w; i++)
                for (int b = 0; b < VIDEO_PAR_OUT; b++) rest |= P->w[i].out[b].state == VBUF_READY;
            const int over = par_all_exited(P) && !rest;
            if (s != QVL_OK) {
                P->stop = 1;
                pthread_cond_broadcast(&P->to_workers);
            }
            pthread_mutex_unlock(&P->mu);
            if (over) break;
        }
    }
    for (int i = 0; i < P->n_w; i++)
        if (P->w[i].started) pthread_join(P->w[i].thread, NULL);
    for (int i = 0; i < P->n_w && *used && s == QVL_OK && !*why; i++) /* a worker's own failure, else its misfit */
        if (P->w[i].status != QVL_OK) {
            if (err) *err = P->w[i].err;
            s = P->w[i].status;
        }
    for (int i = 0; i < P->n_w && *used && s == QVL_OK && !*why; i++) *why = P->w[i].why;
    if (*used && s == QVL_OK && !*why && ps->next != ps->n) *why = "a sampled frame missing from the output";
    for (int i = 0; i < P->n_w; i++) {
        for (int b = 0; b < VIDEO_PAR_OUT; b++) free(P->w[i].out[b].rgb);
        vdec_close(&P->w[i].d);
    }
    for (size_t j = 0; j < P->n_jobs; j++) job_drop(P, &P->jobs[j]);
    while (P->spare) {
        vpk *e = P->spare;
        P->spare = e->next;
        av_packet_free(&e->pkt);
        free(e);
    }
    av_packet_free(&P->first);
    pthread_cond_destroy(&P->to_workers);
    pthread_cond_destroy(&P->to_reader);
    pthread_mutex_destroy(&P->mu);
    free(P);
    free(jobs);
    return s;
}

/* The frame-size limit: the smaller of max_image_pixels and p->max_pixels, named as the setting to raise. In a plan
 * p->max_pixels is itself the smaller of the item's decode and video max_pixels; `dp` (the item's decode params,
 * NULL outside a plan) tells which of the two it is. */
static qvl_status frame_limit(vdec *d, const qvl_video_params *p, const qvl_decode_params *dp, qvl_error *err) {
    qvl_limits lim;
    TRY(limits_take(&lim, p->limits, "qvl_video_params.limits", err));
    d->max_pixels = lim.max_image_pixels;
    d->max_pixels_name = "max_image_pixels";
    d->max_decode_pixels = lim.max_video_decode_pixels;
    if (p->max_pixels < d->max_pixels) {
        d->max_pixels = p->max_pixels;
        d->max_pixels_name = dp && dp->max_pixels <= p->max_pixels ? "qvl_decode_params.max_pixels"
                                                                   : "qvl_video_params.max_pixels";
    }
    return QVL_OK;
}

/* Before decoding: the frames up to the last sampled one (decoded in order from the start), with any counting pass
 * already made, within max_video_decode_pixels. */
static qvl_status decode_budget(const vdec *d, const qvl_video *v, qvl_error *err) {
    if (v->n_frames <= 0) return QVL_OK;
    const uint64_t px = (uint64_t)d->width * (uint64_t)d->height, frames = (uint64_t)v->indices[v->n_frames - 1] + 1;
    if (px && frames <= (d->max_decode_pixels - d->decoded_pixels) / px) return QVL_OK;
    return limit_fail(err, "max_video_decode_pixels", d->max_decode_pixels,
                      "%s: sampling frame %llu of %dx%d means decoding %llu frames%s, more than the %llu pixels of "
                      "decoding allowed", d->path, (unsigned long long)frames - 1, (int)d->width, (int)d->height,
                      (unsigned long long)frames, d->decoded_pixels ? " after counting them" : "",
                      (unsigned long long)d->max_decode_pixels);
}

/* Open the stream and read its sampled frames into out (or the sink): skipping what they do not need where the stream
 * qualifies (above), else sequentially — always when `seq_why` (the reason) is given. *retry is set when a
 * skipping read found the stream not to behave as it must: the caller then reads it again with a reason. */
static qvl_status video_load(vdec *d, const qvl_video_params *p, const qvl_decode_params *dp,
                             const video_sink *sink, const char *seq_why, vskip *k, int *retry, qvl_video *out,
                             qvl_error *err) {
    const char *path = d->path;
    TRY(frame_limit(d, p, dp, err));
    TRY(vdec_open(d, err));
    const AVStream *st = d->fmt->streams[d->stream];
    double fps = 0.0;
    if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) fps = av_q2d(st->avg_frame_rate);
    else if (st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0) fps = av_q2d(st->r_frame_rate);
    else fps = p->default_fps;

    const char *why = seq_why ? seq_why : st->codecpar->codec_id != AV_CODEC_ID_H264 ? "not H.264" : NULL;
    int64_t total = st->nb_frames;
    int counted = 0; /* 1: by decoding, 2: by its packets */
    if (total <= 0 && !why) { /* no count in the header: the packets count the frames of a stream that qualifies */
        TRY(video_count_check(0, d->width, d->height, fps, p, sink != NULL, path, err));
        TRY(skip_scan(d, 0, p, fps, sink != NULL, k, &why, err));
        vdec_close(d);
        d->threads = why ? 0 : skip_threads();
        d->explode = !why;
        TRY(vdec_open(d, err));
        if (!why) total = (int64_t)k->n, counted = 2;
    }
    if (total <= 0) { /* no count in the header: decode once to count, within the limits */
        TRY(video_count_check(0, d->width, d->height, fps, p, sink != NULL, path, err));
        vpass count = {NULL, 0, 0, NULL, sink, 0, p, fps, 0};
        TRY(decode_pass(d, &count, err));
        total = count.decoded;
        counted = 1;
        vdec_close(d);
        TRY(vdec_open(d, err));
    }
    if (total <= 0) return err_fail(err, QVL_ERR_FORMAT, "%s: the video stream has no frames", path);
    TRY(video_sample_into(out, d->width, d->height, total, fps, p, sink, 1, path, err));
    TRY(decode_budget(d, out, err));

    if (!why && !k->consumed) { /* a count from the header: scan when there is enough to skip to pay for it */
        const int64_t span = out->indices[out->n_frames - 1] + 1; /* the frames a sequential decode needs */
        if (span - out->n_frames < VIDEO_SKIP_MIN) {
            why = "too few frames to skip";
        } else {
            TRY(skip_scan(d, total, p, fps, sink != NULL, k, &why, err));
            vdec_close(d);
            d->threads = why ? 0 : skip_threads();
            d->explode = !why;
            TRY(vdec_open(d, err));
        }
    }
    if (!why) TRY(skip_sample(d, k, out, &why, err));
    if (why && counted == 2) { /* counted by its packets, yet not read skipping: count it by decoding */
        if (d->info) d->info->skipping_why = why;
        *retry = 1;
        return QVL_OK;
    }
    if (!why) {
        vpass fast = {out->indices, (size_t)out->n_frames, 0, out->rgb, sink, 0, NULL, 0.0, 0};
        int parallel = 0;
        TRY(decode_parallel(d, &fast, k, out, &parallel, &why, err));
        if (!parallel) TRY(decode_skipping(d, &fast, k, &why, err));
        if (d->info) d->info->skipping_why = why;
        *retry = why != NULL;
        return QVL_OK;
    }
    if (d->info) d->info->skipping_why = why;
    vpass ps = {out->indices, (size_t)out->n_frames, 0, out->rgb, sink, 0, NULL, 0.0, 0};
    TRY(decode_pass(d, &ps, err));
    if (ps.next == ps.n) return QVL_OK;
    /* The stream ended early: take the indices again over the frames it has. */
    int64_t have = ps.decoded;
    if (counted || have <= 0)
        return err_fail(err, QVL_ERR_FORMAT, "%s: the stream has %lld decodable frames, frame %lld was sampled", path,
                        (long long)have, (long long)out->indices[ps.n - 1]);
    free(out->rgb);
    free(out->indices);
    out->rgb = NULL;
    out->indices = NULL;
    vdec_close(d);
    TRY(vdec_open(d, err));
    TRY(video_sample_into(out, d->width, d->height, have, fps, p, sink, 1, path, err));
    TRY(decode_budget(d, out, err));
    vpass again = {out->indices, (size_t)out->n_frames, 0, out->rgb, sink, 0, NULL, 0.0, 0};
    TRY(decode_pass(d, &again, err));
    if (again.next != again.n)
        return err_fail(err, QVL_ERR_FORMAT, "%s: the stream has %lld decodable frames on a second read, %lld before",
                        path, (long long)again.decoded, (long long)have);
    return QVL_OK;
}

qvl_status video_container(const video_src *src, int fmt, const char *label, const qvl_video_params *p,
                           const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                           qvl_video *out, qvl_error *err) {
    return video_container_info(src, fmt, label, p, dp, stop, sink, NULL, out, err);
}

qvl_status video_container_info(const video_src *src, int fmt, const char *label, const qvl_video_params *p,
                                const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                                video_read_info *info, qvl_video *out, qvl_error *err) {
    static const char *const demuxer[] = {[DEC_MOV] = "mov", [DEC_MKV] = "matroska", [DEC_AVI] = "avi",
                                          [DEC_MPEGTS] = "mpegts"};
    if (!dec_is_video((dec_format)fmt))
        return err_fail(err, QVL_ERR_INTERNAL, "%s: video_container given format %d", label, fmt);
    vdec d;
    memset(&d, 0, sizeof d);
    d.path = label;
    d.src = src;
    d.stop = stop;
    d.info = info;
    if (info) info->frames_decoded = 0, info->skipping_why = NULL, info->jobs = 0;
    d.ifmt = av_find_input_format(demuxer[fmt]);
    qvl_status s;
    if (!d.ifmt) return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: a video (%s), but this FFmpeg has no %s demuxer",
                                 label, dec_format_name((dec_format)fmt), demuxer[fmt]);
    vlog log;
    vlog *outer = vlog_enter(&log);
    vskip k = {0};
    int retry = 0;
    s = video_load(&d, p, dp, sink, info && info->sequential ? "asked to decode sequentially" : NULL, &k, &retry, out,
                   err);
    if (s == QVL_OK && retry) { /* the skipping read was not the sequential decode's: read it again, in order */
        const char *why = info ? info->skipping_why : "";
        vskip_free(&k);
        vdec_close(&d);
        free(out->rgb), out->rgb = NULL;
        free(out->indices), out->indices = NULL;
        d.decoded_pixels = 0;
        d.threads = 0;
        d.explode = 0;
        s = video_load(&d, p, dp, sink, why ? why : "", &k, &retry, out, err);
    }
    vskip_free(&k);
    vdec_close(&d);
    if (sink) { /* the one-frame buffer: the frames went to the sink */
        free(out->rgb);
        out->rgb = NULL;
    }
    if (s != QVL_OK) vlog_append(&log, err);
    tl_vlog = outer;
    return s;
}

const char *video_probe_name(const uint8_t *head, size_t n, char *buf, size_t cap) {
    if (n == 0 || cap == 0) return NULL;
    uint8_t *copy = calloc(1, n + AVPROBE_PADDING_SIZE); /* the probe functions may read the zeroed padding */
    if (!copy) return NULL;
    memcpy(copy, head, n);
    AVProbeData pd = {.filename = "", .buf = copy, .buf_size = (int)n, .mime_type = NULL};
    int score = 0;
    vlog log; /* a probe function that logs: into this call's log, never stderr */
    vlog *outer = vlog_enter(&log);
    const AVInputFormat *f = av_probe_input_format3(&pd, 1, &score);
    tl_vlog = outer;
    free(copy);
    if (!f || score <= AVPROBE_SCORE_RETRY) return NULL;
    snprintf(buf, cap, "'%s'%s%s%s", f->name, f->long_name ? " (" : "", f->long_name ? f->long_name : "",
             f->long_name ? ")" : "");
    return buf;
}
