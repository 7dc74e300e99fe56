/* video.c — sampled RGB frames of a video file through FFmpeg's libraries (QVL_VIDEO=ON; frame images and the
 * frame buffer: video_frames.c).
 *
 * Frame rate and frame count are read the way transformers' PyAV reader reads them (video_utils.read_video_pyav):
 * the stream's average frame rate (avg_frame_rate; r_frame_rate, then p->default_fps, where the container has
 * none) and the stream header's frame count (nb_frames). Where the header has no count (Matroska/WebM, raw
 * streams) the frames are counted by decoding the stream once; PyAV would report 0 frames there and fail.
 * Decoding is sequential from the start and keeps only the sampled frames (a repeated index is copied), stopping
 * after the last one, as read_video_pyav does. If the stream ends before the last sampled index (a header count
 * that overstates, e.g. an edit list), the indices are taken again over the frames actually decoded.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "core/error.h"
#include "image/image_params.h"
#include "image/video_frames.h"
#include "io/fileutil.h"

#define VIDEO_SWS_FLAGS SWS_BILINEAR

/* One open video stream and its decoder. */
typedef struct vdec {
    const char *path;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *frame;
    struct SwsContext *sws;
    uint8_t *rgba;         /* [h·w·4] scratch for frames with alpha */
    int stream;
    int32_t width, height; /* every frame must have this size */
} vdec;

static void vdec_close(vdec *d) {
    sws_freeContext(d->sws);
    av_frame_free(&d->frame);
    av_packet_free(&d->pkt);
    avcodec_free_context(&d->dec);
    avformat_close_input(&d->fmt);
    free(d->rgba);
    const char *path = d->path;
    memset(d, 0, sizeof *d);
    d->path = path;
}

static qvl_status av_fail(qvl_error *err, qvl_status s, const char *path, const char *what, int ret) {
    char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(ret, buf, sizeof buf);
    return err_fail(err, s, "%s: %s (%s)", path, what, buf);
}

/* Open the file, pick the best video stream, open its decoder, and check the frame size against max_pixels. */
static qvl_status vdec_open(vdec *d, const char *path, uint64_t max_pixels, qvl_error *err) {
    memset(d, 0, sizeof *d);
    d->path = path;
    /* A missing or unreadable file, or one that is not a regular file (FFmpeg would block on a FIFO), is an I/O
       error; everything FFmpeg refuses after that is the file's format. */
    int fd;
    size_t size;
    TRY(fu_open_fd(path, &fd, &size, err));
    close(fd);

    /* The path is a local file, never a URL or protocol ("concat:", "http:"), and nested resources that some
       demuxers open (playlists) are restricted to files as well. */
    size_t len = strlen(path);
    char *url = malloc(len + 6);
    if (!url) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    memcpy(url, "file:", 5);
    memcpy(url + 5, path, len + 1);
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "protocol_whitelist", "file", 0);
    int ret = avformat_open_input(&d->fmt, url, NULL, &opts);
    av_dict_free(&opts);
    free(url);
    if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, path, "not a readable video container", ret);
    ret = avformat_find_stream_info(d->fmt, NULL);
    if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, path, "cannot read stream information", ret);
    const AVCodec *codec = NULL;
    ret = av_find_best_stream(d->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (ret == AVERROR_DECODER_NOT_FOUND)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: no decoder for its video stream", path);
    if (ret < 0) return err_fail(err, QVL_ERR_FORMAT, "%s: no video stream", path);
    d->stream = ret;
    const AVCodecParameters *par = d->fmt->streams[d->stream]->codecpar;
    if (par->width <= 0 || par->height <= 0)
        return err_fail(err, QVL_ERR_FORMAT, "%s: video stream has no frame size (%dx%d)", path, par->width,
                        par->height);
    if ((uint64_t)par->width * (uint64_t)par->height > max_pixels)
        return err_fail(err, QVL_ERR_LIMIT, "%s: frames of %dx%d = %llu pixels exceed the limit of %llu", path,
                        par->width, par->height, (unsigned long long)par->width * (unsigned long long)par->height,
                        (unsigned long long)max_pixels);
    d->width = par->width;
    d->height = par->height;

    d->dec = avcodec_alloc_context3(codec);
    d->pkt = av_packet_alloc();
    d->frame = av_frame_alloc();
    if (!d->dec || !d->pkt || !d->frame) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", path);
    ret = avcodec_parameters_to_context(d->dec, par);
    if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, path, "bad codec parameters", ret);
    d->dec->thread_count = 0; /* FFmpeg picks; the output does not depend on it */
    ret = avcodec_open2(d->dec, codec, NULL);
    if (ret < 0) return av_fail(err, QVL_ERR_UNSUPPORTED, path, "cannot open the video decoder", ret);
    return QVL_OK;
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

/* Decoding state of one pass: the sorted indices to keep and where the next one goes. */
typedef struct vpass {
    const int64_t *indices;
    size_t n, next;
    uint8_t *rgb;     /* [n][h·w·3] */
    int64_t decoded;  /* frames seen so far */
} vpass;

/* Take one decoded frame: store it in every slot whose index it is. Sets *done once all slots are filled. */
static qvl_status take_frame(vdec *d, vpass *ps, int *done, qvl_error *err) {
    size_t fs = (size_t)d->width * (size_t)d->height * 3;
    int64_t i = ps->decoded++;
    size_t first = ps->next;
    while (ps->next < ps->n && ps->indices[ps->next] == i) {
        uint8_t *slot = ps->rgb + ps->next * fs;
        if (ps->next == first) TRY(convert_frame(d, d->frame, i, slot, err));
        else memcpy(slot, ps->rgb + first * fs, fs);
        ps->next++;
    }
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
        if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d->path, "corrupt video data", ret);
        qvl_status s = take_frame(d, ps, done, err);
        av_frame_unref(d->frame);
        if (s != QVL_OK || *done) return s;
    }
}

/* Decode from the start of the stream until every index in `ps` is filled or the stream ends. */
static qvl_status decode_pass(vdec *d, vpass *ps, qvl_error *err) {
    int done = 0;
    while (!done) {
        int ret = av_read_frame(d->fmt, d->pkt);
        if (ret == AVERROR_EOF) break;
        if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d->path, "cannot read the video (truncated?)", ret);
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
        if (ret < 0) return av_fail(err, QVL_ERR_FORMAT, d->path, "corrupt video data", ret);
        TRY(drain(d, ps, &done, err));
    }
    if (done) return QVL_OK;
    int ret = avcodec_send_packet(d->dec, NULL); /* flush the frames still held (B-frames, frame threads) */
    if (ret < 0 && ret != AVERROR_EOF) return av_fail(err, QVL_ERR_FORMAT, d->path, "corrupt video data", ret);
    return drain(d, ps, &done, err);
}

static qvl_status video_load(vdec *d, const char *path, const qvl_video_params *p, qvl_video *out, qvl_error *err) {
    TRY(vdec_open(d, path, p->max_pixels, err));
    const AVStream *st = d->fmt->streams[d->stream];
    double fps = 0.0;
    if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) fps = av_q2d(st->avg_frame_rate);
    else if (st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0) fps = av_q2d(st->r_frame_rate);
    else fps = p->default_fps;

    int64_t total = st->nb_frames;
    int counted = 0;
    if (total <= 0) { /* no count in the header: decode once to count */
        vpass count = {0};
        TRY(decode_pass(d, &count, err));
        total = count.decoded;
        counted = 1;
        vdec_close(d);
        TRY(vdec_open(d, path, p->max_pixels, err));
    }
    if (total <= 0) return err_fail(err, QVL_ERR_FORMAT, "%s: the video stream has no frames", path);
    TRY(video_sample_into(out, d->width, d->height, total, fps, p, path, err));

    vpass ps = {out->indices, (size_t)out->n_frames, 0, out->rgb, 0};
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
    TRY(vdec_open(d, path, p->max_pixels, err));
    TRY(video_sample_into(out, d->width, d->height, have, fps, p, path, err));
    vpass again = {out->indices, (size_t)out->n_frames, 0, out->rgb, 0};
    TRY(decode_pass(d, &again, err));
    if (again.next != again.n)
        return err_fail(err, QVL_ERR_FORMAT, "%s: the stream has %lld decodable frames on a second read, %lld before",
                        path, (long long)again.decoded, (long long)have);
    return QVL_OK;
}

qvl_status qvl_video_load(const char *path, const qvl_video_params *p, qvl_video *out, qvl_error *err) {
    err_clear(err);
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_load: %s is NULL", path ? "out" : "path");
    qvl_video_params def;
    TRY(video_params_take(&def, p, err));
    p = &def;
    vdec d;
    qvl_status s = video_load(&d, path, p, out, err);
    vdec_close(&d);
    if (s != QVL_OK) qvl_video_free(out);
    return s;
}
