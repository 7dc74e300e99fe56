/* test_video_input.c — what reaches FFmpeg, and how: video from memory gives the same frames as from the file (bit
 * for bit); HLS playlists and ffconcat scripts that name a real local video are refused and that video is never
 * opened or read (inotify watches it); text and empty files named like images get qvl's own message; the accepted
 * containers (MP4, Matroska/WebM, AVI, MPEG-TS) are read and other codecs refused; FFmpeg's log text ends up in the
 * failure's message and never on stderr, per thread; plan items (PATH and ENCODED) choose image or video the same
 * way; the limits refuse a video before its frames are decoded (the frames FFmpeg hands back are counted by a
 * wrapper of avcodec_receive_frame defined here, which the program's own definition makes the one every caller
 * reaches). In a QVL_VIDEO=OFF build the same entry points exist and refuse containers with QVL_ERR_UNSUPPORTED. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/inotify.h>
#endif
#if QVL_WITH_VIDEO
#include <dlfcn.h>
#include <stdatomic.h>

#include <libavcodec/avcodec.h>
#include <libavutil/log.h>
#endif

#include "qvl.h"
#include "testutil.h"

static char g_tmp[1024];

#if QVL_WITH_VIDEO
/* Frames decoded so far, by anyone in the process (qvl, and FFmpeg's own stream probe). */
static atomic_long g_frames;
static int (*g_receive_frame)(AVCodecContext *, AVFrame *);

static void count_frames_init(void) {
    void *sym = dlsym(RTLD_NEXT, "avcodec_receive_frame");
    memcpy(&g_receive_frame, &sym, sizeof g_receive_frame);
}

int avcodec_receive_frame(AVCodecContext *c, AVFrame *f) {
    if (!g_receive_frame) return AVERROR(ENOSYS);
    int ret = g_receive_frame(c, f);
    if (ret == 0) atomic_fetch_add(&g_frames, 1);
    return ret;
}
#endif

static const char *tpath(const char *name) { return tu_path(g_tmp, name); }

static int write_file(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(d, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* stderr into a file for the duration of a check: what FFmpeg (or anything) printed there. */
typedef struct capture {
    int saved, fd;
    char path[1200];
} capture;

static void capture_begin(capture *c, const char *name) {
    fflush(stderr);
    snprintf(c->path, sizeof c->path, "%s", tpath(name));
    c->fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    c->saved = dup(2);
    if (c->fd >= 0 && c->saved >= 0) dup2(c->fd, 2);
}

/* Restores stderr; returns what was written (malloc'd, NUL-terminated). */
static char *capture_end(capture *c) {
    fflush(stderr);
    if (c->saved >= 0) {
        dup2(c->saved, 2);
        close(c->saved);
    }
    if (c->fd >= 0) close(c->fd);
    size_t n;
    char *b = tu_read_file(c->path, &n);
    char *s = malloc(n + 1);
    if (s) {
        if (n) memcpy(s, b, n);
        s[n] = 0;
    }
    free(b);
    return s;
}

static int same_video(const qvl_video *a, const qvl_video *b) {
    if (a->width != b->width || a->height != b->height || a->n_frames != b->n_frames ||
        a->total_frames != b->total_frames || memcmp(&a->fps, &b->fps, sizeof a->fps) != 0)
        return 0;
    for (int32_t i = 0; i < a->n_frames; i++)
        if (a->indices[i] != b->indices[i]) return 0;
    size_t n = (size_t)a->n_frames * (size_t)a->width * (size_t)a->height * 3;
    return memcmp(a->rgb, b->rgb, n) == 0;
}

/* Every clip, and a still, read from memory: exactly the file's frames, indices, count and rate. */
static void test_memory(void) {
    static const char *clips[] = {"video_testsrc_30.mp4", "video_testsrc_30.webm", "video_25fps.mkv",
                                  "video_3frames.mp4",    "video_alpha.mov",       "video_editlist.mp4",
                                  "video_2997.mp4",       "video_mpeg4.avi",       "video_mpeg2.ts",
                                  "frames/video_frame_2.png"};
    for (size_t i = 0; i < sizeof clips / sizeof clips[0]; i++) {
        char rel[256], path[1024];
        snprintf(rel, sizeof rel, "tests/data/video/%s", clips[i]);
        tu_source_path(rel, path, sizeof path);
        size_t n;
        void *bytes = tu_read_file(path, &n);
        CHECK(bytes != NULL);
        for (int nf = 0; bytes && nf <= 6; nf += 6) {
            qvl_video_params p;
            qvl_video_params_default(&p);
            p.num_frames = nf;
            qvl_video a, b;
            qvl_error ea, eb;
            qvl_status sa = qvl_video_load(path, &p, &a, &ea), sb = qvl_video_decode(bytes, n, &p, &b, &eb);
            int still = strstr(clips[i], ".png") != NULL;
            if (!QVL_WITH_VIDEO && !still) {
                CHECK(sa == QVL_ERR_UNSUPPORTED && sb == QVL_ERR_UNSUPPORTED);
                CHECK(has(ea.message, path) && has(eb.message, "<memory>") && has(eb.message, "QVL_VIDEO=OFF"));
            } else if (!QVL_WITH_MEDIA && still) {
                CHECK(sa == QVL_ERR_UNSUPPORTED && sb == QVL_ERR_UNSUPPORTED);
            } else {
                CHECK(sa == QVL_OK && sb == QVL_OK);
                if (sa != QVL_OK || sb != QVL_OK) fprintf(stderr, "  %s: %s / %s\n", clips[i], ea.message, eb.message);
                CHECK(sa != QVL_OK || sb != QVL_OK || same_video(&a, &b));
                if (sa == QVL_OK && nf == 0)
                    printf("%s: %dx%d, %lld frames at %g fps, %d sampled: memory and file identical\n", clips[i],
                           (int)a.width, (int)a.height, (long long)a.total_frames, a.fps, (int)a.n_frames);
            }
            qvl_video_free(&a);
            qvl_video_free(&b);
        }
        free(bytes);
    }
    /* Arguments: NULL data with bytes, NULL out; zero bytes are an empty input. */
    qvl_video v;
    qvl_error err;
    CHECK(qvl_video_decode(NULL, 5, NULL, &v, &err) == QVL_ERR_INVALID_ARG && has(err.message, "data"));
    CHECK(qvl_video_decode("abc", 3, NULL, NULL, &err) == QVL_ERR_INVALID_ARG && has(err.message, "out"));
    CHECK(qvl_video_decode(NULL, 0, NULL, &v, &err) == QVL_ERR_FORMAT && has(err.message, "<memory>: empty"));
    CHECK(v.rgb == NULL && v.n_frames == 0);
}

/* Inputs that name other files: refused before FFmpeg reads them, and the named video is never opened. */
static void test_references(void) {
    char src[1024], seg[1200];
    tu_source_path("tests/data/video/video_testsrc_30.mp4", src, sizeof src);
    size_t n;
    void *clip = tu_read_file(src, &n);
    snprintf(seg, sizeof seg, "%s", tpath("seg.mp4"));
    CHECK(clip && write_file(seg, clip, n));
    free(clip);
    struct {
        const char *name, *format;
        char text[2600];
    } refs[6] = {{"list.m3u8", "'hls'", ""},      {"abs.m3u8", "'hls'", ""},        {"master.m3u8", "'hls'", ""},
                 {"cat.ffconcat", "'concat'", ""}, {"abs.ffconcat", "'concat'", ""}, {"list.png", "'hls'", ""}};
    snprintf(refs[0].text, sizeof refs[0].text,
             "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nseg.mp4\n#EXT-X-ENDLIST\n");
    snprintf(refs[1].text, sizeof refs[1].text,
             "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nfile:%s\n#EXT-X-ENDLIST\n", seg);
    snprintf(refs[2].text, sizeof refs[2].text, "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1000\nlist.m3u8\n");
    snprintf(refs[3].text, sizeof refs[3].text, "ffconcat version 1.0\nfile seg.mp4\nfile seg.mp4\n");
    snprintf(refs[4].text, sizeof refs[4].text, "ffconcat version 1.0\nfile '%s'\n", seg);
    snprintf(refs[5].text, sizeof refs[5].text, "%s", refs[0].text); /* a playlist named like an image */
#ifdef __linux__
    int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ino >= 0 && inotify_add_watch(ino, seg, IN_OPEN | IN_ACCESS) < 0) {
        close(ino);
        ino = -1;
    }
    if (ino < 0) printf("inotify unavailable (an emulator?): that the named video is never opened is not checked\n");
#endif
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        const char *path = tpath(refs[i].name);
        CHECK(write_file(path, refs[i].text, strlen(refs[i].text)));
        qvl_video v;
        qvl_error err;
        capture cap;
        capture_begin(&cap, "stderr.txt");
        qvl_status s = qvl_video_load(path, NULL, &v, &err);
        qvl_error em;
        qvl_status sm = qvl_video_decode(refs[i].text, strlen(refs[i].text), NULL, &v, &em);
        /* and through a plan: a PATH item and an ENCODED item */
        qvl_item it[2];
        qvl_item_default(&it[0]);
        it[0].kind = QVL_ITEM_PATH;
        it[0].path = path;
        qvl_item_default(&it[1]);
        it[1].kind = QVL_ITEM_ENCODED;
        it[1].data = refs[i].text;
        it[1].size = strlen(refs[i].text);
        qvl_plan *plan = NULL;
        qvl_error ep;
        CHECK(qvl_plan_create(NULL, it, 2, NULL, &plan, &ep) == QVL_OK);
        char *said = capture_end(&cap);
        qvl_status want = QVL_WITH_VIDEO ? QVL_ERR_UNSUPPORTED : QVL_ERR_FORMAT;
        CHECK(s == want && err.status == want && v.rgb == NULL);
        CHECK(has(err.message, path));
        CHECK(sm == want && has(em.message, "<memory>"));
        if (QVL_WITH_VIDEO) CHECK(has(err.message, refs[i].format) && has(em.message, refs[i].format));
        for (size_t k = 0; plan && k < 2; k++) {
            qvl_item_info info;
            qvl_plan_item(plan, k, &info);
            CHECK(info.status == want && has(info.message, refs[i].format) == QVL_WITH_VIDEO);
        }
        qvl_plan_free(plan);
        CHECK(said && said[0] == 0);
        if (said && said[0]) fprintf(stderr, "  stderr: %s\n", said);
        printf("%s: %s\n", refs[i].name, err.message);
        free(said);
    }
#ifdef __linux__
    /* Not one open or read of the video the playlists name. */
    char ev[4096];
    ssize_t got = ino >= 0 ? read(ino, ev, sizeof ev) : 0;
    CHECK(got <= 0);
    if (got > 0) fprintf(stderr, "  %s was opened or read (%zd bytes of inotify events)\n", seg, got);
    /* the watch works: our own read of it is seen */
    size_t k;
    free(tu_read_file(seg, &k));
    CHECK(ino < 0 || read(ino, ev, sizeof ev) > 0);
    if (ino >= 0) printf("%s: not opened or read while the playlists were refused (inotify)\n", seg);
    if (ino >= 0) close(ino);
#endif
}

/* Files that are neither an image nor an accepted container, whatever their name: qvl's own message. */
static void test_unrecognised(void) {
    static const struct {
        const char *name, *bytes;
        size_t n;
        const char *says;
    } cases[] = {
        {"text.png", "This is text, not a PNG\n", 24, "starting \"This is text, no\"..."},
        {"empty.jpg", "", 0, "empty (0 bytes)"},
        {"short.jpg", "hi", 2, "starting \"hi\""},
        {"binary.mp4", "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10", 17,
         "starting 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f..."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = tpath(cases[i].name);
        CHECK(write_file(path, cases[i].bytes, cases[i].n));
        qvl_video v;
        qvl_error err;
        capture cap;
        capture_begin(&cap, "stderr.txt");
        qvl_status s = qvl_video_load(path, NULL, &v, &err);
        qvl_item it;
        qvl_item_default(&it);
        it.kind = QVL_ITEM_PATH;
        it.path = path;
        qvl_plan *plan = NULL;
        qvl_error ep;
        CHECK(qvl_plan_create(NULL, &it, 1, NULL, &plan, &ep) == QVL_OK);
        char *said = capture_end(&cap);
        CHECK(s == QVL_ERR_FORMAT && has(err.message, path) &&
              has(err.message, "not a recognised image or video format") && has(err.message, cases[i].says));
        qvl_item_info info;
        if (plan) {
            qvl_plan_item(plan, 0, &info);
            CHECK(info.status == QVL_ERR_FORMAT && has(info.message, path) &&
                  has(info.message, "not a recognised image or video format") && has(info.message, cases[i].says));
        }
        qvl_plan_free(plan);
        CHECK(said && said[0] == 0);
        printf("%s: %s\n", cases[i].name, err.message);
        free(said);
        /* As an image: the same description. */
        qvl_image img;
        CHECK(qvl_image_load(path, NULL, &img, &err) == QVL_ERR_FORMAT && has(err.message, cases[i].says));
    }
    /* A video given to the image decoder says so. */
    char mp4[1024];
    tu_source_path("tests/data/video/video_3frames.mp4", mp4, sizeof mp4);
    qvl_image img;
    qvl_error err;
    CHECK(qvl_image_load(mp4, NULL, &img, &err) == QVL_ERR_FORMAT && has(err.message, "a video (MP4/QuickTime)"));
}

/* A container with a codec outside the list, and ENCODED video items. */
static void test_codecs_and_items(void) {
    char path[1024];
    tu_source_path("tests/data/bad/video_codec_huffyuv.avi", path, sizeof path);
    qvl_video v;
    qvl_error err;
    CHECK(qvl_video_load(path, NULL, &v, &err) == QVL_ERR_UNSUPPORTED);
    CHECK(has(err.message, QVL_WITH_VIDEO ? "video codec huffyuv is not one qvl decodes" : "QVL_VIDEO=OFF"));
    printf("huffyuv: %s\n", err.message);

    /* An ENCODED video item: the rows of the PATH item, kind "video". */
    char mp4[1024];
    tu_source_path("tests/data/video/video_testsrc_30.mp4", mp4, sizeof mp4);
    size_t n;
    void *bytes = tu_read_file(mp4, &n);
    qvl_item it[2];
    qvl_item_default(&it[0]);
    it[0].kind = QVL_ITEM_PATH;
    it[0].path = mp4;
    qvl_item_default(&it[1]);
    it[1].kind = QVL_ITEM_ENCODED;
    it[1].data = bytes;
    it[1].size = n;
    qvl_plan *plan = NULL;
    CHECK(bytes && qvl_plan_create(NULL, it, 2, NULL, &plan, &err) == QVL_OK);
    if (plan) {
        qvl_item_info a, b;
        qvl_plan_item(plan, 0, &a);
        qvl_plan_item(plan, 1, &b);
        if (QVL_WITH_VIDEO) {
            CHECK(a.status == QVL_OK && b.status == QVL_OK && strcmp(b.kind, "video") == 0);
            CHECK(a.n_rows == b.n_rows && a.n_frames == b.n_frames && a.n_rows > 0 &&
                  memcmp(qvl_plan_rows(plan, 0), qvl_plan_rows(plan, 1), a.n_rows * 1536 * sizeof(float)) == 0);
        } else {
            CHECK(b.status == QVL_ERR_UNSUPPORTED && has(b.message, "QVL_VIDEO=OFF"));
        }
    }
    qvl_plan_free(plan);
    free(bytes);
}

/* FFmpeg's log: in the message of the call that failed, never on stderr. */
static void test_log(void) {
    static const struct {
        const char *file, *ffmpeg_says;
    } bad[] = {{"tests/data/bad/video_truncated.mp4", "moov atom not found"},
               {"tests/data/bad/video_truncated_mdat.mp4", "partial file"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[1024];
        tu_source_path(bad[i].file, path, sizeof path);
        size_t n;
        void *bytes = tu_read_file(path, &n);
        qvl_video v;
        qvl_error err, em;
        capture cap;
        capture_begin(&cap, "stderr.txt");
        qvl_status s = qvl_video_load(path, NULL, &v, &err);
        qvl_status sm = qvl_video_decode(bytes, n, NULL, &v, &em);
#if QVL_WITH_VIDEO
        av_log(NULL, AV_LOG_ERROR, "a message outside any qvl call\n"); /* dropped, once qvl installed its hook */
#endif
        char *said = capture_end(&cap);
        free(bytes);
        if (!QVL_WITH_VIDEO) {
            CHECK(s == QVL_ERR_UNSUPPORTED && sm == QVL_ERR_UNSUPPORTED);
        } else {
            CHECK(s == QVL_ERR_FORMAT && sm == QVL_ERR_FORMAT);
            CHECK(has(err.message, "(FFmpeg: ") && has(err.message, bad[i].ffmpeg_says) && has(err.message, path));
            CHECK(has(em.message, bad[i].ffmpeg_says) && has(em.message, "<memory>"));
        }
        CHECK(said && said[0] == 0);
        if (said && said[0]) fprintf(stderr, "  on stderr: %s\n", said);
        free(said);
        printf("%s: %s\n", bad[i].file, err.message);
    }
}

/* Several threads failing at once: each message holds its own file's FFmpeg text, never the other's. */
typedef struct log_job {
    const char *path, *mine, *theirs;
    int bad;
} log_job;

static void *log_worker(void *arg) {
    log_job *j = arg;
    for (int r = 0; r < 20; r++) {
        qvl_video v;
        qvl_error err;
        if (qvl_video_load(j->path, NULL, &v, &err) != QVL_ERR_FORMAT || !has(err.message, j->mine) ||
            has(err.message, j->theirs))
            j->bad++;
    }
    return NULL;
}

static void test_log_threads(void) {
    if (!QVL_WITH_VIDEO) return;
    char a[1024], b[1024];
    tu_source_path("tests/data/bad/video_truncated.mp4", a, sizeof a);
    tu_source_path("tests/data/bad/video_truncated_mdat.mp4", b, sizeof b);
    log_job jobs[4] = {{a, "moov atom not found", "partial file", 0}, {b, "partial file", "moov atom", 0},
                       {a, "moov atom not found", "partial file", 0}, {b, "partial file", "moov atom", 0}};
    pthread_t th[4];
    int started[4] = {0};
    for (int i = 0; i < 4; i++) started[i] = pthread_create(&th[i], NULL, log_worker, &jobs[i]) == 0;
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        CHECK(started[i]);
        if (started[i]) pthread_join(th[i], NULL);
        bad += jobs[i].bad;
    }
    CHECK(bad == 0);
    printf("log, 4 threads x 20 failing loads: %d messages wrong\n", bad);
}

#if QVL_WITH_VIDEO
/* qvl_video_load of tests/data/video/`file` under `lim` (NULL: the defaults) and p's other fields as given; the
 * frames FFmpeg decoded for it. */
static long load_counted(const char *file, const qvl_video_params *p, qvl_status *s, qvl_error *err) {
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "tests/data/video/%s", file);
    tu_source_path(rel, path, sizeof path);
    qvl_video v;
    long before = atomic_load(&g_frames);
    *s = qvl_video_load(path, p, &v, err);
    long n = atomic_load(&g_frames) - before;
    printf("%s: %s after %ld decoded frames: %s\n", file, qvl_status_name(*s), n, err->message);
    qvl_video_free(&v);
    return n;
}

/* The limits a video breaks are found from its header before its frames are decoded: the frame size against
 * max_image_pixels and max_pixels (in a plan, the smaller of the decode and the video max_pixels, each named when
 * it is the one that applied). video_25fps.mkv has no frame count in its header (Matroska): 40 frames, which
 * the count would decode before. */
static void test_limits_first(void) {
    qvl_limits lim;
    qvl_limits_default(&lim);
    lim.max_image_pixels = 100;
    qvl_video_params p;
    qvl_video_params_default(&p);
    p.limits = &lim;
    qvl_status s;
    qvl_error err;
    long n = load_counted("video_25fps.mkv", NULL, &s, &err); /* counted (40), then 4 sampled: decoded twice */
    CHECK(s == QVL_OK && n >= 44);
    n = load_counted("video_25fps.mkv", &p, &s, &err);
    CHECK(s == QVL_ERR_LIMIT && has(err.message, "62x44 frames") && has(err.message, "limit max_image_pixels = 100"));
    CHECK(n <= 2); /* FFmpeg's stream probe alone */
    qvl_video_params_default(&p);
    p.max_pixels = 100;
    n = load_counted("video_25fps.mkv", &p, &s, &err);
    CHECK(s == QVL_ERR_LIMIT && has(err.message, "limit qvl_video_params.max_pixels = 100") && n <= 2);

    char mkv[1024];
    tu_source_path("tests/data/video/video_25fps.mkv", mkv, sizeof mkv);
    size_t size;
    void *bytes = tu_read_file(mkv, &size);
    CHECK(bytes != NULL);
    qvl_decode_params dp;
    qvl_decode_params_default(&dp);
    dp.max_pixels = 100;
    qvl_video_params vp;
    qvl_video_params_default(&vp);
    vp.max_pixels = 100;
    qvl_item it[3];
    for (int i = 0; i < 3; i++) {
        qvl_item_default(&it[i]);
        it[i].kind = QVL_ITEM_ENCODED, it[i].data = bytes, it[i].size = size;
    }
    it[0].decode = &dp;
    it[1].video = &vp;
    it[2].kind = QVL_ITEM_PATH, it[2].path = mkv, it[2].decode = &dp;
    qvl_plan *plan = NULL;
    CHECK(bytes && qvl_plan_create(NULL, it, 3, NULL, &plan, &err) == QVL_OK);
    static const char *const want[3] = {"limit qvl_decode_params.max_pixels = 100",
                                        "limit qvl_video_params.max_pixels = 100",
                                        "limit qvl_decode_params.max_pixels = 100"};
    for (size_t i = 0; plan && i < 3; i++) {
        qvl_item_info in;
        qvl_plan_item(plan, i, &in);
        printf("  item %zu: %s\n", i, in.message);
        CHECK(in.status == QVL_ERR_LIMIT && has(in.message, want[i]));
    }
    qvl_plan_free(plan);
    free(bytes);
}

/* A stream without a frame count is counted within the limits: refused as soon as what sampling picks from the
 * frames counted so far breaks max_video_frames or max_video_pixels (before: only after all 40 frames were
 * decoded), and read exactly as before when it keeps within them. */
static void test_count_bounded(void) {
    qvl_limits lim;
    qvl_limits_default(&lim);
    lim.max_video_frames = 1; /* the defaults pick 4: min_frames, all 4 under this limit from the 2nd frame on */
    qvl_video_params p;
    qvl_video_params_default(&p);
    p.limits = &lim;
    qvl_status s;
    qvl_error err;
    long n = load_counted("video_25fps.mkv", &p, &s, &err);
    CHECK(s == QVL_ERR_LIMIT && has(err.message, "sampling picks at least 2 frames") &&
          has(err.message, "limit max_video_frames = 1") && n <= 4);
    lim.max_video_frames = 4; /* num_frames over the limit: refused before the count starts */
    p.num_frames = 5;
    n = load_counted("video_25fps.mkv", &p, &s, &err);
    CHECK(s == QVL_ERR_LIMIT && has(err.message, "limit max_video_frames = 4") && n <= 2);
    p.num_frames = 0;
    p.fps = 0; /* every frame, up to max_frames: over 10 at the 11th */
    lim.max_video_frames = 10;
    n = load_counted("video_25fps.mkv", &p, &s, &err);
    CHECK(s == QVL_ERR_LIMIT && has(err.message, "at least 11 frames") && n >= 11 && n <= 13);
    qvl_video_params_default(&p);
    p.limits = &lim;
    lim.max_video_frames = 4096;
    lim.max_video_pixels = 3 * 62 * 44; /* 4 frames picked: over it at the 4th counted */
    n = load_counted("video_25fps.mkv", &p, &s, &err);
    CHECK(s == QVL_ERR_LIMIT && has(err.message, "at least 4 frames of 62x44") &&
          has(err.message, "limit max_video_pixels = 8184") && n <= 6);

    /* At the limits: counted to the end, the same frames as without them. */
    lim.max_video_frames = 4;
    lim.max_video_pixels = 4 * 62 * 44;
    char path[1024];
    tu_source_path("tests/data/video/video_25fps.mkv", path, sizeof path);
    qvl_video a, b;
    CHECK(qvl_video_load(path, &p, &a, &err) == QVL_OK && qvl_video_load(path, NULL, &b, &err) == QVL_OK);
    CHECK(a.total_frames == 40 && a.n_frames == 4 && same_video(&a, &b));
    qvl_video_free(&a);
    qvl_video_free(&b);
}

/* A video in memory is held to max_input_bytes as an image buffer is (before, any size passed), standalone and as
 * an ENCODED item; a video file read from its path is not (FFmpeg reads it in pieces). */
static void test_input_bytes(void) {
    char path[1024];
    tu_source_path("tests/data/video/video_2997.mp4", path, sizeof path);
    size_t size;
    void *bytes = tu_read_file(path, &size);
    CHECK(bytes != NULL && size > 1000);
    if (!bytes) return;
    qvl_limits lim;
    qvl_limits_default(&lim);
    lim.max_input_bytes = size - 1;
    qvl_video_params p;
    qvl_video_params_default(&p);
    p.limits = &lim;
    qvl_video v;
    qvl_error err;
    CHECK(qvl_video_decode(bytes, size, &p, &v, &err) == QVL_ERR_LIMIT && has(err.message, "<memory>") &&
          has(err.message, "limit max_input_bytes = ") && v.rgb == NULL);
    printf("video in memory over max_input_bytes: %s\n", err.message);
    CHECK(qvl_video_load(path, &p, &v, &err) == QVL_OK);
    qvl_video_free(&v);
    lim.max_input_bytes = size;
    CHECK(qvl_video_decode(bytes, size, &p, &v, &err) == QVL_OK && v.n_frames > 0);
    qvl_video_free(&v);

    lim.max_input_bytes = size - 1;
    qvl_plan_params pp;
    qvl_plan_params_default(&pp);
    pp.limits = &lim;
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_ENCODED, it.data = bytes, it.size = size, it.label = "clip";
    qvl_plan *plan = NULL;
    CHECK(qvl_plan_create(NULL, &it, 1, &pp, &plan, &err) == QVL_OK);
    qvl_item_info in = {0};
    if (plan) qvl_plan_item(plan, 0, &in);
    CHECK(in.status == QVL_ERR_LIMIT && has(in.message, "clip: ") && has(in.message, "max_input_bytes"));
    qvl_plan_free(plan);
    free(bytes);
}
#endif

int main(void) {
#if QVL_WITH_VIDEO
    count_frames_init();
    CHECK(g_receive_frame != NULL);
#endif
    CHECK(tu_tmpdir(g_tmp, sizeof g_tmp) != NULL);
    test_memory();
    test_references();
    test_unrecognised();
    test_codecs_and_items();
    test_log();
    test_log_threads();
#if QVL_WITH_VIDEO
    test_limits_first();
    test_count_bounded();
    test_input_bytes();
#endif
    tu_rmtree(g_tmp);
    return tu_finish("test_video_input");
}
