/* video_frames.h — shared by the video readers (video.c, video_frames.c): the sampled-frame buffer of a qvl_video. */
#ifndef QVL_IMAGE_VIDEO_FRAMES_H
#define QVL_IMAGE_VIDEO_FRAMES_H

#include <stdint.h>

#include "core/stop.h"
#include "qvl.h"

/* libswscale's SIMD output loops may store up to a vector past the end of a packed row (seen: 8 bytes at width 62,
 * RGB24); frame buffers are packed rows, so only a buffer's last row can overrun, into this slack after it. */
enum { VIDEO_SWS_SLACK = 64 };

/* Where a reader puts the sampled frames. Without a sink (NULL), into the qvl_video's own buffer: every sampled
 * frame held at its source size, as qvl_video_load returns them (max_video_pixels bounds them). With one, each
 * sampled frame goes to it as soon as it is decoded, in slot order, and the reader holds one source frame at a
 * time: the plan resizes it into the clip's rows there (preprocess.c, video_rows), so that what a video holds is
 * set by its rows, not by its length or source size.
 *   begin  the sampling is known: v's width, height, n_frames, indices, total_frames and fps are set and v->rgb
 *          is not the frames (NULL, or the reader's one-frame buffer). Called again, with the new sampling, when
 *          a stream ends before its header's frame count and is sampled again over the frames it has: whatever
 *          the first call prepared is then to be dropped.
 *   frame  slot `slot` (0 ... n_frames − 1, each once; a repeated index gives each of its slots) is the w x h RGB
 *          frame rgb, valid during the call. In slot order, except where a reader decodes several stretches of a
 *          stream at once (video.c): then each stretch's slots come in order, the stretches' interleaved. Always
 *          called on the reader's calling thread. */
typedef struct video_sink {
    qvl_status (*begin)(void *user, const qvl_video *v, qvl_error *err);
    qvl_status (*frame)(void *user, size_t slot, const uint8_t *rgb, qvl_error *err);
    void *user;
} video_sink;

/* Sample indices for `total` source frames at `fps` (p's sampling) into out->indices, and allocate out->rgb for
 * the frames it holds, of w x h (and VIDEO_SWS_SLACK bytes after them): without a sink every sampled one; with one,
 * one frame where held_one is set (a container's decode buffer), else none; sets width, height, n_frames, total_frames and fps and, with a sink,
 * calls its begin. Sampling no frame is an error; `what` (a path) names the video in messages. The limits:
 * max_video_frames on the sampled count, max_image_pixels on a frame, max_video_pixels on the held frames
 * (without a sink, all of them). On failure out may hold partial allocations (qvl_video_free). */
qvl_status video_sample_into(qvl_video *out, int32_t w, int32_t h, int64_t total, double fps,
                             const qvl_video_params *p, const video_sink *sink, int held_one, const char *what,
                             qvl_error *err);

/* While a stream whose header gives no frame count is counted: what sampling (p, at `fps`) picks from the `counted`
 * frames seen so far (at least 1) against max_video_frames and (without a sink: `streamed` 0) max_video_pixels for
 * frames of w x h. The pick never
 * shrinks as the count grows (each branch of sample_frames clamps a non-decreasing function of the frame count), so
 * one over a limit now is over it for the whole stream: such a video is refused (QVL_ERR_LIMIT) as soon as that is
 * certain, instead of after it is decoded to its end; one within the limits is counted exactly, as its indices
 * need. */
qvl_status video_count_check(int64_t counted, int32_t w, int32_t h, double fps, const qvl_video_params *p,
                             int streamed, const char *what, qvl_error *err);

/* The bytes of one video: a caller's buffer (fd = -1), or a regular file we opened ourselves (fu_open_fd) and read
 * with pread at our own offsets, so that nothing ever opens the path again. `size` is the buffer's or the file's
 * size when it was opened: nothing past it is read. */
typedef struct video_src {
    const uint8_t *data;
    int fd;
    uint64_t size;
} video_src;

/* Up to n bytes from offset `off` (fewer at the end); the count, or -1 with errno set. */
long video_src_read(const video_src *src, void *buf, size_t n, uint64_t off);

/* Read one video whose first bytes dec_sniff recognised as a container (`fmt`): FFmpeg in video.c; the
 * QVL_VIDEO=OFF build's video_none.c refuses it with QVL_ERR_UNSUPPORTED. `label` names it in messages; `p` holds
 * full (taken) params; `dp` the item's decode params or NULL (only to name the frame-size limit that applied);
 * `stop` (core/stop.h) is polled before each packet; `sink` (NULL: none) takes the sampled frames as they are
 * decoded. On failure out may hold partial allocations (qvl_video_free). */
qvl_status video_container(const video_src *src, int fmt, const char *label, const qvl_video_params *p,
                           const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                           qvl_video *out, qvl_error *err);

/* How a container was read (tests and benchmarks: video_container_info). */
typedef struct video_read_info {
    int sequential;           /* in: 1 decodes every frame in order, never skipping (the reference way) */
    int decoders;             /* in: for a skipping read, at most this many decoders at once (0: the reader's
                                 choice, by the CPUs; 1: one) */
    int ahead;                /* in: on several decoders, how many jobs a decoder may be past the first one not
                                 finished, per decoder (0: the reader's choice, 2; 1 the tightest) */
    int jobs;                 /* out: the stretches decoded on several decoders at once (0: one decoder) */
    const char *skipping_why; /* out: NULL when the sampled frames were decoded skipping what they do not need
                                 (video.c); else why they were not (a static string) */
    int64_t frames_decoded;   /* out: frames the decoder returned, every pass */
} video_read_info;

/* video_container, and how it read the frames into `info` (NULL: as video_container). The QVL_VIDEO=OFF build has
 * no such function. */
qvl_status video_container_info(const video_src *src, int fmt, const char *label, const qvl_video_params *p,
                                const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                                video_read_info *info, qvl_video *out, qvl_error *err);

/* For bytes that are no image and no accepted container: FFmpeg's name for the format it would read them as (e.g.
 * "hls", "concat"), with its long name, when FFmpeg recognises them with confidence; NULL when it does not, and
 * always in the QVL_VIDEO=OFF build. Only looks at the bytes (FFmpeg's probe functions over a copy); opens
 * nothing. */
const char *video_probe_name(const uint8_t *head, size_t n, char *buf, size_t cap);

/* The video entry points of a plan's items, with the item's resolved decode params `dp` (full, taken; NULL: the
 * defaults, which is what the public calls pass): the images a video is read from (a frame directory's files, a
 * still) are decoded with its EXIF and alpha settings, as the same file given as an image item would be, under
 * the smaller of dp->max_pixels and p->max_pixels and p's limits. `stop` (core/stop.h; NULL: never) cancels the
 * read before it starts, between packets of a container, between frame files and within a JPEG's or PNG's decode.
 * `sink` (NULL: none, the frames are returned in out->rgb) takes each sampled frame as soon as it is read: out then
 * holds the sampling (indices, sizes, counts, rate) but no frames (out->rgb is freed or NULL).
 *   video_load_item       qvl_video_load
 *   video_decode_labeled  qvl_video_decode (ENCODED items), `label` naming the bytes in messages; `p` full
 *   video_from_images_item  qvl_video_from_images (PATH directories) */
qvl_status video_load_item(const char *path, const qvl_video_params *p, const qvl_decode_params *dp,
                           const stop_probe *stop, const video_sink *sink, qvl_video *out, qvl_error *err);
qvl_status video_decode_labeled(const void *data, size_t size, const qvl_video_params *p,
                                const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                                const char *label, qvl_video *out, qvl_error *err);
qvl_status video_from_images_item(const char *const *paths, size_t n, const qvl_video_params *p,
                                  const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                                  qvl_video *out, qvl_error *err);

#endif
