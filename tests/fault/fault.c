/* fault.c — fault injection as SQLite does it: along each path through the library (model load, image decode,
 * preprocess, plan, encode, writing the outputs), fail the Nth allocation, and separately the Nth read and the
 * Nth write, for every N from 1 until the path completes without reaching the fault. For every N the path must
 * either return a non-OK status with a message, or (a failure the code legitimately absorbs) return OK with the
 * same output as the fault-free run; it must not crash or leak (under ASan/LSan a leak check runs after every N),
 * and it must leave no partial output: the destination directory holds exactly what it held before (an older
 * file at the destination stays as it was), or on success exactly the new file.
 *
 * How the faults get in, with no change to the library:
 *   - allocations: this program defines malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign, strdup
 *     and strndup. An executable's definitions win over the C library's (and ASan's weak ones), so every
 *     allocation in the process goes through them: the library's own, and those of cJSON, libpng, libjpeg,
 *     libwebp, giflib and libc (stdio buffers, threads). They count while armed and forward to ASan's allocator
 *     (__interceptor_*) in a sanitizer build, to glibc's (__libc_*) otherwise.
 *   - reads and writes: the link wraps the library's own calls (-Wl,--wrap=...; the static internal library is
 *     linked into this program), so only what qvl itself calls is counted: reads are fread, read, pread, mmap
 *     (a failed read is EIO; with --eof a failed pread returns 0 instead, the end of file a reader sees when the
 *     file was truncated after it was opened);
 *     writes are fwrite, write, pwrite, fflush, fsync, ftruncate, rename and the fclose of a stream open for
 *     writing (whose buffered bytes are written then).
 * Workers would make the counts nondeterministic, so every path runs on one thread, and only the main thread's
 * calls are counted.
 *
 * The status must name the cause: QVL_ERR_NOMEM for a failed allocation, QVL_ERR_IO for a failed read or write
 * (one exception, libwebp's demuxer, which cannot tell a failed allocation from a parse error: see below). Some
 * allocations are never failed, because the dependency making them crashes on it (see spared()).
 *
 * Usage: qvl_fault [--stride K] [--max-runs M] [--path NAME] [--class alloc|read|write] [--at FUNC] [--n N]
 *                  [--eof] [-v] [--trace]
 *   --stride K  try N = 1, 1+K, 1+2K, ... and the last; default 1 (every N)
 *   --max-runs M  per path and class, at most about M values of N (the stride is raised to fit): the bounded
 *               slice every ctest run has (fault_slice)
 *   --n N       only this N (reproduce one failure)
 *   --at FUNC   count (and fail) only the calls made with FUNC on the stack (ASan builds; elsewhere exit 77).
 *               Each frame is named by its innermost function: a function inlined into its caller hides the
 *               caller at that call (WebPAnimDecoderNew, from webp/demux.h, hides dec_webp)
 *   --eof       an injected pread fault reads 0 bytes (end of file) instead of failing with EIO
 *   --trace     print where each fault is injected (the stack, in ASan builds); -v prints each outcome
 * The source tree is found through QVL_SOURCE_DIR (test images). Exit status 0 when every N passed. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl.h"

#if defined(__SANITIZE_ADDRESS__)
#define FAULT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FAULT_ASAN 1
#endif
#endif
#ifdef FAULT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
#endif

/* ---- the counters -------------------------------------------------------------------------------------------- */

enum { C_ALLOC, C_READ, C_WRITE, N_CLASSES };
static const char *const class_names[N_CLASSES] = {"alloc", "read", "write"};

static volatile int g_armed;              /* counting on */
static volatile long g_count[N_CLASSES];  /* calls seen while armed */
static volatile long g_target = -1;       /* the call of class g_class that fails (1-based); -1: none */
static volatile int g_class;
static volatile int g_hit;                /* the fault was injected */
static int g_trace;                       /* --trace: print the stack of each injected fault (ASan builds) */
static int g_eof;                         /* --eof: an injected pread fault is an end of file, not EIO */

/* --at FUNC: only calls with FUNC on their stack count (and can fail), found by symbolizing the stack (ASan builds:
 * the sanitizer's symbolizer). A regression test names the function it covers instead of an N that moves with
 * every change to the code. */
static const char *g_at;
__attribute__((noinline)) static int on_stack(const char *func) {
#ifdef FAULT_ASAN
    void *pcs[64];
    g_armed = 0; /* backtrace and the symbolizer allocate */
    int n = backtrace(pcs, 64), found = 0;
    char buf[4096];
    for (int i = 2; i < n && !found; i++) {
        /* every frame at this pc, inlined ones included, one function name per line */
        __sanitizer_symbolize_pc((char *)pcs[i] - 1, "%f\n", buf, sizeof buf);
        for (char *line = buf; line && *line && !found;) {
            char *nl = strchr(line, '\n');
            size_t len = nl ? (size_t)(nl - line) : strlen(line);
            found = len == strlen(func) && memcmp(line, func, len) == 0;
            line = nl ? nl + 1 : NULL;
        }
    }
    g_armed = 1;
    return found;
#else
    (void)func;
    return 0;
#endif
}

/* Only the main thread's calls count: the paths run on one thread, but FFmpeg's decoders start their own (and a
 * new thread's start-up allocates inside the sanitizer runtime, which must not fail). */
static pthread_t g_main_thread;

/* 1 if this call (of class c) must fail. */
static int fault_now(int c) {
    if (!g_armed || !pthread_equal(pthread_self(), g_main_thread)) return 0;
    if (g_at && !on_stack(g_at)) return 0;
    long k = ++g_count[c];
    if (c == g_class && k == g_target) {
        g_hit = 1;
#ifdef FAULT_ASAN
        if (g_trace) {
            g_armed = 0;
            fprintf(stderr, "qvl_fault: injecting the %s fault here:\n", c == C_ALLOC ? "alloc" : c == C_READ ? "read"
                    : "write");
            __sanitizer_print_stack_trace();
            g_armed = 1;
        }
#endif
        return 1;
    }
    return 0;
}

/* Allocations that are never failed: those made inside a library whose own out-of-memory handling is broken, so
 * that failing them tests the library rather than qvl. libwebp 1.2.4 (Debian 12) frees a stack address when an
 * allocation inside WebPDecode fails under WebPAnimDecoderGetNext (ASan: bad-free); qvl's handling of a failed
 * WebP decode is still reached through its own allocations and the demuxer's. FFmpeg 5.1 (Debian 12) dereferences
 * NULL inside avformat_open_input when some of its allocations fail (SIGSEGV in libavformat): FFmpeg's
 * allocations (av_malloc in libavutil, and libswscale's) are not failed either; the video path's own are. */
__attribute__((noinline, no_sanitize_address)) static int spared(const void *caller) {
    Dl_info info;
    return dladdr(caller, &info) && info.dli_fname &&
           (strstr(info.dli_fname, "/libwebp.so") || strstr(info.dli_fname, "/libav") ||
            strstr(info.dli_fname, "/libswscale"));
}
/* Where the injected allocation fault was: the caller's library (basename), for the one exception below. */
static char g_hit_lib[64];
__attribute__((noinline, no_sanitize_address)) static int alloc_fault(const void *caller) {
    if (spared(caller) || !fault_now(C_ALLOC)) return 0;
    Dl_info info;
    const char *lib = dladdr(caller, &info) && info.dli_fname ? info.dli_fname : "";
    const char *base = strrchr(lib, '/') ? strrchr(lib, '/') + 1 : lib;
    size_t n = strlen(base) < sizeof g_hit_lib - 1 ? strlen(base) : sizeof g_hit_lib - 1;
    memcpy(g_hit_lib, base, n);
    g_hit_lib[n] = '\0';
    return 1;
}
#define ALLOC_FAULT() (g_armed && alloc_fault(__builtin_return_address(0)))

/* ---- allocation interposition -------------------------------------------------------------------------------- */

#ifdef FAULT_ASAN
extern void *__interceptor_malloc(size_t);
extern void *__interceptor_calloc(size_t, size_t);
extern void *__interceptor_realloc(void *, size_t);
extern void *__interceptor_aligned_alloc(size_t, size_t);
extern void *__interceptor_memalign(size_t, size_t);
extern int __interceptor_posix_memalign(void **, size_t, size_t);
#define REAL_MALLOC __interceptor_malloc
#define REAL_CALLOC __interceptor_calloc
#define REAL_REALLOC __interceptor_realloc
#define REAL_ALIGNED __interceptor_aligned_alloc
#define REAL_MEMALIGN __interceptor_memalign
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
#define REAL_MALLOC __libc_malloc
#define REAL_CALLOC __libc_calloc
#define REAL_REALLOC __libc_realloc
#define REAL_ALIGNED __libc_memalign
#define REAL_MEMALIGN __libc_memalign
#endif

void *malloc(size_t n) {
    if (ALLOC_FAULT()) return errno = ENOMEM, NULL;
    return REAL_MALLOC(n);
}
void *calloc(size_t a, size_t b) {
    if (ALLOC_FAULT()) return errno = ENOMEM, NULL;
    return REAL_CALLOC(a, b);
}
void *realloc(void *p, size_t n) {
    if (ALLOC_FAULT()) return errno = ENOMEM, NULL;
    return REAL_REALLOC(p, n);
}
void *aligned_alloc(size_t a, size_t n) {
    if (ALLOC_FAULT()) return errno = ENOMEM, NULL;
    return REAL_ALIGNED(a, n);
}
void *memalign(size_t a, size_t n) {
    if (ALLOC_FAULT()) return errno = ENOMEM, NULL;
    return REAL_MEMALIGN(a, n);
}
int posix_memalign(void **p, size_t a, size_t n) {
    if (ALLOC_FAULT()) return ENOMEM;
    void *q = REAL_MEMALIGN(a, n);
    if (!q) return ENOMEM;
    *p = q;
    return 0;
}
/* ASan's strdup allocates inside the runtime, past malloc: these go through the counted malloc. */
char *strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}
char *strndup(const char *s, size_t m) {
    size_t n = strnlen(s, m);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- I/O wrappers (-Wl,--wrap=NAME: the library's calls to NAME come here; __real_NAME is the original) ---- */

size_t __real_fread(void *, size_t, size_t, FILE *);
size_t __real_fwrite(const void *, size_t, size_t, FILE *);
ssize_t __real_read(int, void *, size_t);
ssize_t __real_write(int, const void *, size_t);
ssize_t __real_pread(int, void *, size_t, off_t);
ssize_t __real_pwrite(int, const void *, size_t, off_t);
void *__real_mmap(void *, size_t, int, int, int, off_t);
int __real_fflush(FILE *);
int __real_fclose(FILE *);
int __real_fsync(int);
int __real_ftruncate(int, off_t);
int __real_rename(const char *, const char *);
size_t __wrap_fread(void *p, size_t a, size_t b, FILE *f);
size_t __wrap_fwrite(const void *p, size_t a, size_t b, FILE *f);
ssize_t __wrap_read(int fd, void *p, size_t n);
ssize_t __wrap_write(int fd, const void *p, size_t n);
ssize_t __wrap_pread(int fd, void *p, size_t n, off_t o);
ssize_t __wrap_pwrite(int fd, const void *p, size_t n, off_t o);
void *__wrap_mmap(void *a, size_t n, int prot, int fl, int fd, off_t o);
int __wrap_fflush(FILE *f);
int __wrap_fclose(FILE *f);
int __wrap_fsync(int fd);
int __wrap_ftruncate(int fd, off_t n);
int __wrap_rename(const char *a, const char *b);

/* A failed stdio call sets the stream's error indicator (ferror), as glibc's own failures do. */
static void set_ferror(FILE *f) { f->_flags |= _IO_ERR_SEEN; }

size_t __wrap_fread(void *p, size_t a, size_t b, FILE *f) {
    if (fault_now(C_READ)) return set_ferror(f), errno = EIO, 0;
    return __real_fread(p, a, b, f);
}
size_t __wrap_fwrite(const void *p, size_t a, size_t b, FILE *f) {
    if (fault_now(C_WRITE)) return set_ferror(f), errno = ENOSPC, 0;
    return __real_fwrite(p, a, b, f);
}
ssize_t __wrap_read(int fd, void *p, size_t n) {
    if (fault_now(C_READ)) return errno = EIO, -1;
    return __real_read(fd, p, n);
}
ssize_t __wrap_write(int fd, const void *p, size_t n) {
    if (fault_now(C_WRITE)) return errno = ENOSPC, -1;
    return __real_write(fd, p, n);
}
ssize_t __wrap_pread(int fd, void *p, size_t n, off_t o) {
    if (fault_now(C_READ)) return g_eof ? 0 : (errno = EIO, -1);
    return __real_pread(fd, p, n, o);
}
ssize_t __wrap_pwrite(int fd, const void *p, size_t n, off_t o) {
    if (fault_now(C_WRITE)) return errno = ENOSPC, -1;
    return __real_pwrite(fd, p, n, o);
}
void *__wrap_mmap(void *a, size_t n, int prot, int fl, int fd, off_t o) {
    if (fd >= 0 && fault_now(C_READ)) return errno = ENOMEM, MAP_FAILED;
    return __real_mmap(a, n, prot, fl, fd, o);
}
int __wrap_fflush(FILE *f) {
    if (f && __fwriting(f) && fault_now(C_WRITE)) return set_ferror(f), errno = ENOSPC, EOF;
    return __real_fflush(f);
}
int __wrap_fclose(FILE *f) {
    /* A stream open for writing writes what it buffers at close: that write can fail (the stream is closed
     * all the same, as fclose does). */
    int w = f && __fwritable(f) && fault_now(C_WRITE);
    int r = __real_fclose(f);
    if (w) return errno = ENOSPC, EOF;
    return r;
}
int __wrap_fsync(int fd) {
    if (fault_now(C_WRITE)) return errno = EIO, -1;
    return __real_fsync(fd);
}
int __wrap_ftruncate(int fd, off_t n) {
    if (fault_now(C_WRITE)) return errno = ENOSPC, -1;
    return __real_ftruncate(fd, n);
}
int __wrap_rename(const char *a, const char *b) {
    if (fault_now(C_WRITE)) return errno = EIO, -1;
    return __real_rename(a, b);
}

/* ---- harness ------------------------------------------------------------------------------------------------- */

static char g_root[1024], g_model[1200], g_out[1200], g_src[1024];
static int g_verbose;
static const char *g_cur_path = "";
static long g_failures;

/* Harness work inside an armed run (buffers for outputs) is not counted and never fails. */
#define UNARMED(...)                                                                                                  \
    do {                                                                                                              \
        int armed_ = g_armed;                                                                                         \
        g_armed = 0;                                                                                                  \
        __VA_ARGS__;                                                                                                  \
        g_armed = armed_;                                                                                             \
    } while (0)

static void say_where(void) {
    char b[256];
    int k = snprintf(b, sizeof b, "\nqvl_fault: died in path %s, class %s, N = %ld (rerun with --path %s --class %s "
                     "--n %ld)\n", g_cur_path, class_names[g_class], g_target, g_cur_path, class_names[g_class],
                     g_target);
    if (k > 0) (void)!write(2, b, (size_t)k < sizeof b ? (size_t)k : sizeof b - 1);
}
static void on_signal(int sig) {
    say_where();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The whole of a file (unarmed); NULL if absent. */
static unsigned char *slurp(const char *path, size_t *n) {
    unsigned char *b = NULL;
    UNARMED({
        FILE *f = fopen(path, "rb");
        *n = 0;
        if (f) {
            struct stat st;
            if (fstat(fileno(f), &st) == 0 && (b = REAL_MALLOC((size_t)st.st_size + 1)) != NULL)
                *n = __real_fread(b, 1, (size_t)st.st_size, f);
            __real_fclose(f);
        }
    });
    return b;
}

/* What a path produced: a status, its message, and the bytes it made (file contents or memory) to compare. */
typedef struct result {
    qvl_status status;
    qvl_error err;
    unsigned char *bytes; /* REAL_MALLOC'd */
    size_t n;
    const char *dest;     /* the output file's name in g_out, or NULL when the path writes none */
} result;

static void keep(result *r, const void *p, size_t n) {
    if (!n) return;
    UNARMED({
        unsigned char *b = REAL_REALLOC(r->bytes, r->n + n + 1);
        if (b) {
            memcpy(b + r->n, p, n);
            r->bytes = b;
            r->n += n;
        }
    });
}

/* A tiny image's pixels as bytes. */
static void keep_image(result *r, const qvl_image *im) {
    int32_t wh[2] = {im->width, im->height};
    keep(r, wh, sizeof wh);
    keep(r, im->rgb, (size_t)im->width * im->height * 3);
}

static void src_path(char *buf, size_t n, const char *rel) { snprintf(buf, n, "%s/%s", g_src, rel); }

/* A 48x40 RGB gradient (made unarmed, kept): the preprocess path's input, and the pipeline's without decoders. */
static uint8_t g_px[40][48][3];
static void make_pixels(void) {
    for (int y = 0; y < 40; y++)
        for (int x = 0; x < 48; x++)
            for (int c = 0; c < 3; c++) g_px[y][x][c] = (uint8_t)(x * 5 + y * 3 * c + 17 * c);
}

/* ---- the paths ----------------------------------------------------------------------------------------------- */

static qvl_status fail_item(const qvl_plan *plan, qvl_error *err) {
    for (size_t i = 0; i < qvl_plan_count(plan); i++) {
        qvl_item_info in;
        qvl_plan_item(plan, i, &in);
        if (in.status != QVL_OK) {
            err->status = in.status;
            snprintf(err->message, sizeof err->message, "%s", in.message);
            return in.status;
        }
    }
    return QVL_OK;
}

/* Model load (config.json, safetensors, preprocessor_config.json), a context, a plan over a PNG and a JPEG file
 * and a WebP in memory (decode + preprocess; without decoders, QVL_MEDIA=OFF: pixels in memory), the encode, and
 * the embeddings written as safetensors. */
static void path_pipeline(result *r) {
    static unsigned char *webp;
    static size_t webp_n;
    char png[1600], jpg[1600], webpf[1600], dest[1600];
    src_path(png, sizeof png, "tests/data/images/png_exif_6.png");
    src_path(jpg, sizeof jpg, "tests/data/images/jpeg_420.jpg");
    src_path(webpf, sizeof webpf, "tests/data/images/webp_lossy.webp");
    if (!webp) webp = slurp(webpf, &webp_n);
    snprintf(dest, sizeof dest, "%s/emb.safetensors", g_out);
    r->dest = "emb.safetensors";
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    qvl_plan *plan = NULL;
    void *outs[3] = {0};
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    lp.n_threads = 1;
    qvl_status s = qvl_model_load(g_model, &lp, &m, &r->err);
    if (s == QVL_OK) {
        qvl_ctx_params cp;
        qvl_ctx_params_default(&cp);
        cp.n_threads = 1;
        s = qvl_ctx_create(m, &cp, &ctx, &r->err);
    }
    qvl_item it[3];
    for (int i = 0; i < 3; i++) qvl_item_default(&it[i]);
#if QVL_WITH_MEDIA
    it[0].kind = QVL_ITEM_PATH, it[0].path = png;
    it[1].kind = QVL_ITEM_PATH, it[1].path = jpg;
    it[2].kind = QVL_ITEM_ENCODED, it[2].data = webp, it[2].size = webp_n, it[2].label = "webp bytes";
#else
    for (int i = 0; i < 3; i++)
        it[i].kind = QVL_ITEM_PIXELS, it[i].image = (qvl_pixels){&g_px[0][0][0] + i * 3, 48 - i, 40, 3, 48 * 3};
#endif
    if (s == QVL_OK) s = qvl_plan_create(ctx, it, 3, NULL, &plan, &r->err);
    if (s == QVL_OK) s = fail_item(plan, &r->err);
    qvl_item_info in[3];
    if (s == QVL_OK) {
        for (int i = 0; i < 3; i++) {
            qvl_plan_item(plan, (size_t)i, &in[i]);
            UNARMED(outs[i] = REAL_CALLOC(1, in[i].out_bytes));
        }
        s = qvl_plan_encode(ctx, plan, outs, &r->err);
    }
    if (s == QVL_OK) {
        qvl_out_tensor t[3];
        qvl_grid g[3];
        static const char *const names[3] = {"png", "jpeg", "webp"};
        for (int i = 0; i < 3; i++) {
            t[i] = (qvl_out_tensor){names[i], outs[i], in[i].n_tokens, in[i].out_cols};
            g[i] = in[i].grid;
        }
        const char *meta[2] = {"source", "fault test"};
        s = qvl_write_safetensors(dest, t, 3, g, 3, meta, 1, &r->err);
    }
    for (int i = 0; i < 3; i++) free(outs[i]);
    qvl_plan_free(plan);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    r->status = s;
}

#if QVL_WITH_MEDIA
/* Decoding files of every format. */
static void path_decode(result *r) {
    static const char *const files[] = {"tests/data/images/png_rgba16_interlaced.png",
                                        "tests/data/images/png_p_trns_index.png",
                                        "tests/data/images/jpeg_420.jpg",
                                        "tests/data/images/jpeg_progressive.jpg",
                                        "tests/data/images/jpeg_cmyk.jpg",
                                        "tests/data/images/jpeg_exif_6.jpg",
                                        "tests/data/images/webp_lossy.webp",
                                        "tests/data/images/webp_alpha_lossless.webp",
                                        "tests/data/images/webp_anim.webp",
                                        "tests/data/images/gif_trans.gif",
                                        "tests/data/images/gif_anim.gif",
                                        "tests/data/images/bmp_24.bmp"};
    r->status = QVL_OK;
    for (size_t i = 0; i < sizeof files / sizeof *files && r->status == QVL_OK; i++) {
        char p[1600];
        src_path(p, sizeof p, files[i]);
        qvl_image im = {0};
        r->status = qvl_image_load(p, NULL, &im, &r->err);
        if (r->status == QVL_OK) keep_image(r, &im);
        qvl_image_free(&im);
    }
}
#endif

/* The model directory's preprocessing params, then resize + normalize + patchify of a decoded image (both
 * resize kernels), and qvl_image_resize. */
static void path_preprocess(result *r) {
    qvl_image im = {48, 40, &g_px[0][0][0]};
    qvl_preprocess_params pp;
    qvl_video_params vp;
    qvl_preprocess_params_default(&pp);
    qvl_video_params_default(&vp);
    qvl_status s = qvl_preprocess_params_load(g_model, &pp, &vp, &r->err);
    pp.n_threads = 1;
    for (int mode = 0; mode < 2 && s == QVL_OK; mode++) {
        pp.resize = mode ? QVL_RESIZE_PIL : QVL_RESIZE_TORCHVISION;
        qvl_grid g;
        s = qvl_image_grid(&im, &pp, &g, &r->err);
        if (s != QVL_OK) break;
        size_t n = qvl_patch_rows(&g, 1) * 3 * (size_t)pp.temporal_patch * (size_t)pp.patch * (size_t)pp.patch;
        float *rows;
        UNARMED(rows = REAL_MALLOC(n * sizeof *rows));
        s = qvl_preprocess_image(&im, &pp, rows, &g, &r->err);
        if (s == QVL_OK) keep(r, rows, n * sizeof *rows);
        free(rows);
    }
    if (s == QVL_OK) {
        qvl_image out = {0};
        s = qvl_image_resize(&im, 77, 53, QVL_RESIZE_PIL, 1, &out, &r->err);
        if (s == QVL_OK) keep_image(r, &out);
        qvl_image_free(&out);
    }
    r->status = s;
}

/* Model load of the other layouts (a sharded checkpoint with its index; MLX names and conv layout), in full and
 * describe-only, and the weights' fingerprint. */
static char g_sharded[1200], g_mlx[1200];
static void path_load_layouts(result *r) {
    const char *dirs[2] = {g_sharded, g_mlx};
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    lp.n_threads = 1;
    r->status = QVL_OK;
    for (int i = 0; i < 4 && r->status == QVL_OK; i++) { /* each layout loaded in full, then describe-only */
        qvl_model *m = NULL;
        lp.describe_only = i >= 2;
        r->status = qvl_model_load(dirs[i % 2], &lp, &m, &r->err);
        uint8_t d[16];
        char hex[33];
        if (r->status == QVL_OK) r->status = qvl_model_fingerprint(m, d, hex, &r->err);
        if (r->status == QVL_OK) keep(r, d, sizeof d);
        qvl_model_free(m);
    }
}

#if QVL_WITH_VIDEO
/* A video file through FFmpeg (demux, decode, sample, convert), whole (qvl_video_load) and as a plan's item, whose
 * frames go into its rows as they are decoded (the sink, the per-frame resize and patchify). */
static void video_file(result *r, const char *rel) {
    char p[1600];
    src_path(p, sizeof p, rel);
    qvl_video_params vp;
    qvl_video_params_default(&vp);
    qvl_video v = {0};
    r->status = qvl_video_load(p, &vp, &v, &r->err);
    if (r->status == QVL_OK) {
        int32_t wh[3] = {v.width, v.height, v.n_frames};
        keep(r, wh, sizeof wh);
        keep(r, v.rgb, (size_t)v.width * v.height * 3 * (size_t)v.n_frames);
        keep(r, v.indices, (size_t)v.n_frames * sizeof *v.indices);
    }
    qvl_video_free(&v);
    if (r->status != QVL_OK) return;
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_PATH;
    it.path = p;
    qvl_plan *plan = NULL;
    r->status = qvl_plan_create(NULL, &it, 1, NULL, &plan, &r->err);
    if (r->status == QVL_OK) r->status = fail_item(plan, &r->err);
    if (r->status == QVL_OK) {
        qvl_item_info in;
        qvl_plan_item(plan, 0, &in);
        keep(r, qvl_plan_rows(plan, 0), in.n_rows * 1536 * sizeof(float));
    }
    qvl_plan_free(plan);
}

static void path_video(result *r) { video_file(r, "tests/data/video/video_3frames.mp4"); }

/* An H.264 stream read skipping what its sampled frames do not need (video.c): Matroska, so its packets count its
 * frames first; closed GOPs, so the decoder restarts at IDR pictures. */
static void path_video_skip(result *r) { video_file(r, "tests/data/video/video_h264_bframes.mkv"); }
#endif

static float g_data[6 * 40];

/* qvl_st_writer: metadata, two tensors in pieces, a header that outgrows its reserve (the copy at finish). */
static void path_st_writer(result *r) {
    char dest[1600];
    snprintf(dest, sizeof dest, "%s/w.safetensors", g_out);
    r->dest = "w.safetensors";
    qvl_st_writer *w = NULL;
    qvl_status s = qvl_st_writer_open(dest, 64, &w, &r->err);
    if (s == QVL_OK) s = qvl_st_writer_meta(w, "format", "pt", &r->err);
    const int64_t sh1[2] = {6, 40}, sh2[1] = {16};
    if (s == QVL_OK) s = qvl_st_writer_tensor(w, "a.long.tensor.name.to.outgrow.the.reserve", "F32", sh1, 2, &r->err);
    for (int k = 0; k < 6 && s == QVL_OK; k++) s = qvl_st_writer_data(w, g_data + k * 40, 40 * sizeof(float), &r->err);
    if (s == QVL_OK) s = qvl_st_writer_tensor(w, "b", "F32", sh2, 1, &r->err);
    if (s == QVL_OK) s = qvl_st_writer_data(w, g_data, 16 * sizeof(float), &r->err);
    if (s == QVL_OK) s = qvl_st_writer_meta(w, "late", "key", &r->err);
    if (s == QVL_OK) {
        s = qvl_st_writer_finish(w, &r->err);
        w = NULL;
    }
    qvl_st_writer_abort(w);
    r->status = s;
}

static void path_write_st(result *r) {
    char dest[1600];
    snprintf(dest, sizeof dest, "%s/o.safetensors", g_out);
    r->dest = "o.safetensors";
    const qvl_out_tensor t[2] = {{"x", g_data, 6, 40}, {"y", g_data + 40, 2, 8}};
    const qvl_grid g[1] = {{1, 2, 2}};
    const char *meta[4] = {"k", "v", "path", "a,b"};
    r->status = qvl_write_safetensors(dest, t, 2, g, 1, meta, 2, &r->err);
}

static void path_write_npy(result *r) {
    char dest[1600];
    snprintf(dest, sizeof dest, "%s/o.npy", g_out);
    r->dest = "o.npy";
    r->status = qvl_write_npy(dest, g_data, 6, 40, &r->err);
}

/* Reading pixel rows back (qvl_read_rows: .npy and .safetensors with grid_thw), from files made unarmed. */
static void path_read_rows(result *r) {
    static char npy[1600], st[1600];
    if (!npy[0]) {
        snprintf(npy, sizeof npy, "%s/rows.npy", g_root);
        snprintf(st, sizeof st, "%s/rows.safetensors", g_root);
        qvl_error e;
        const qvl_out_tensor t[1] = {{"pixel_values", g_data, 6, 40}};
        const qvl_grid g[1] = {{1, 2, 3}};
        UNARMED(qvl_write_npy(npy, g_data, 6, 40, &e); qvl_write_safetensors(st, t, 1, g, 1, NULL, 0, &e));
    }
    const char *files[2] = {npy, st};
    r->status = QVL_OK;
    for (int i = 0; i < 2 && r->status == QVL_OK; i++) {
        float *rows = NULL;
        qvl_grid *grids = NULL;
        size_t nr = 0, rl = 0, ng = 0;
        r->status = qvl_read_rows(files[i], &rows, &nr, &rl, &grids, &ng, &r->err);
        if (r->status == QVL_OK) {
            keep(r, rows, nr * rl * sizeof *rows);
            keep(r, grids, ng * sizeof *grids);
        }
        qvl_free(rows);
        qvl_free(grids);
    }
}

typedef struct path_def {
    const char *name;
    void (*fn)(result *);
} path_def;
static const path_def g_paths[] = {
    {"pipeline", path_pipeline},
#if QVL_WITH_MEDIA
    {"decode", path_decode},
#endif
    {"preprocess", path_preprocess},
    {"load_layouts", path_load_layouts},
#if QVL_WITH_VIDEO
    {"video", path_video},
    {"video_skip", path_video_skip},
#endif
    {"st_writer", path_st_writer}, {"write_safetensors", path_write_st}, {"write_npy", path_write_npy},
    {"read_rows", path_read_rows},
};

/* ---- the sweep ----------------------------------------------------------------------------------------------- */

static const char g_old[] = "an older file at the destination\n";

/* Empty g_out, then put the older file at `dest` (when the path writes one). */
static void reset_out(const char *dest) {
    DIR *d = opendir(g_out);
    if (d) {
        struct dirent *e;
        char p[1600];
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
            snprintf(p, sizeof p, "%s/%s", g_out, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    if (dest) {
        char p[1600];
        snprintf(p, sizeof p, "%s/%s", g_out, dest);
        FILE *f = fopen(p, "wb");
        if (f) {
            __real_fwrite(g_old, 1, sizeof g_old - 1, f);
            __real_fclose(f);
        }
    }
}

/* The names in g_out, one line each (for messages); the count in *n. */
static void list_out(char *buf, size_t cap, int *n) {
    *n = 0;
    buf[0] = '\0';
    DIR *d = opendir(g_out);
    if (!d) return;
    struct dirent *e;
    size_t len = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        (*n)++;
        int k = snprintf(buf + len, cap - len, "%s%s", len ? " " : "", e->d_name);
        if (k > 0 && (size_t)k < cap - len) len += (size_t)k;
    }
    closedir(d);
}

__attribute__((format(printf, 4, 5))) static void failf(const path_def *p, int c, long n, const char *fmt, ...);
static void failf(const path_def *p, int c, long n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s %s N=%ld: ", p->name, class_names[c], n);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    g_failures++;
}

/* One run of path p with the Nth call of class c failing (n = -1: none). 1 if the fault was reached. */
static int run_once(const path_def *p, int c, long n, result *r, const result *ref) {
    memset(r, 0, sizeof *r);
    /* the destination's name: a path writes to the same one every run */
    r->dest = ref ? ref->dest : NULL;
    reset_out(r->dest);
    memset((void *)g_count, 0, sizeof g_count);
    g_class = c;
    g_target = n;
    g_hit = 0;
    g_hit_lib[0] = '\0';
    g_cur_path = p->name;
    g_armed = 1;
    p->fn(r);
    g_armed = 0;
    int hit = g_hit;
    if (!ref) return hit;

    /* the outcome */
    if (r->status != QVL_OK) {
        if (r->err.status != r->status || r->err.message[0] == '\0')
            failf(p, c, n, "status %s without its message (err.status %s, \"%s\")", qvl_status_name(r->status),
                  qvl_status_name(r->err.status), r->err.message);
        if (!hit) failf(p, c, n, "failed without a fault: %s", r->err.message);
        /* the status names the cause: a failed read or write is an I/O error, a failed allocation out of memory */
        const qvl_status want = c == C_ALLOC ? QVL_ERR_NOMEM : QVL_ERR_IO;
        /* The exception: libwebp's demuxer returns NULL for a failed allocation and for a parse error alike, so
         * qvl can only say "corrupt, or out of memory" (QVL_ERR_FORMAT, the message names both). */
        const int unknowable = c == C_ALLOC && r->status == QVL_ERR_FORMAT &&
                               strncmp(g_hit_lib, "libwebpdemux.so", 15) == 0 && strstr(r->err.message, "out of memory");
        if (hit && r->status != want && !unknowable)
            failf(p, c, n, "status %s, expected %s: %s", qvl_status_name(r->status), qvl_status_name(want),
                  r->err.message);
    } else if (!ref->dest && (r->n != ref->n || (r->n && memcmp(r->bytes, ref->bytes, r->n) != 0))) {
        failf(p, c, n, "returned OK with a different result (%zu bytes, expected %zu)", r->n, ref->n);
    }
    if (g_verbose && hit)
        fprintf(stderr, "  %s %s N=%ld: %s %s\n", p->name, class_names[c], n, qvl_status_name(r->status),
                r->err.message);
    /* the destination directory */
    char names[2048];
    int count;
    list_out(names, sizeof names, &count);
    if (r->dest) {
        char path[1600];
        snprintf(path, sizeof path, "%s/%s", g_out, r->dest);
        size_t len;
        unsigned char *got = slurp(path, &len);
        if (count != 1 || !got)
            failf(p, c, n, "the output directory holds [%s], expected only %s", names, r->dest);
        else if (r->status != QVL_OK && (len != sizeof g_old - 1 || memcmp(got, g_old, len) != 0))
            failf(p, c, n, "failed (%s) but replaced %s (%zu bytes)", r->err.message, r->dest, len);
        else if (r->status == QVL_OK && (len != ref->n || memcmp(got, ref->bytes, len) != 0))
            failf(p, c, n, "returned OK but %s differs from the fault-free run's", r->dest);
        free(got);
    } else if (count != 0) {
        failf(p, c, n, "left files behind: [%s]", names);
    }
#ifdef FAULT_ASAN
    if (__lsan_do_recoverable_leak_check()) failf(p, c, n, "leak (LeakSanitizer's report above)");
#endif
    return hit;
}

static void free_result(result *r) {
    free(r->bytes);
    r->bytes = NULL;
}

/* The fault-free run: its output (the file it writes, when it writes one) is the reference. */
static int reference(const path_def *p, result *ref, long counts[N_CLASSES]) {
    run_once(p, C_ALLOC, -1, ref, NULL);
    for (int c = 0; c < N_CLASSES; c++) counts[c] = g_count[c];
    if (ref->status != QVL_OK) {
        fprintf(stderr, "FAIL %s: the fault-free run failed: %s\n", p->name, ref->err.message);
        g_failures++;
        return 0;
    }
    if (ref->dest) {
        char path[1600];
        snprintf(path, sizeof path, "%s/%s", g_out, ref->dest);
        free(ref->bytes);
        ref->bytes = slurp(path, &ref->n);
    }
    return 1;
}

static void usage(void) {
    fprintf(stderr, "usage: qvl_fault [--stride K] [--max-runs M] [--path NAME] [--class alloc|read|write] [--at FUNC] [--n N] "
                    "[--eof] [-v] [--trace]\n");
    exit(2);
}

int main(int argc, char **argv) {
    long stride = 1, only_n = -1, max_runs = 0;
    const char *only_path = NULL;
    int only_class = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--stride") && i + 1 < argc) stride = atol(argv[++i]);
        else if (!strcmp(argv[i], "--max-runs") && i + 1 < argc) max_runs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) only_n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--path") && i + 1 < argc) only_path = argv[++i];
        else if (!strcmp(argv[i], "--at") && i + 1 < argc) g_at = argv[++i];
        else if (!strcmp(argv[i], "--class") && i + 1 < argc) {
            const char *c = argv[++i];
            for (int k = 0; k < N_CLASSES; k++)
                if (!strcmp(c, class_names[k])) only_class = k;
            if (only_class < 0) usage();
        } else if (!strcmp(argv[i], "-v")) g_verbose = 1;
        else if (!strcmp(argv[i], "--trace")) g_trace = 1;
        else if (!strcmp(argv[i], "--eof")) g_eof = 1;
        else usage();
    }
    if (stride < 1) stride = 1;
    g_main_thread = pthread_self();
#ifndef FAULT_ASAN
    if (g_at) {
        fprintf(stderr, "qvl_fault: --at needs a sanitizer build (its symbolizer finds the functions)\n");
        return 77;
    }
#endif
    const char *src = getenv("QVL_SOURCE_DIR");
    snprintf(g_src, sizeof g_src, "%s", src && *src ? src : ".");
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGABRT, on_signal);
    signal(SIGFPE, on_signal);
#ifdef FAULT_ASAN
    __asan_set_death_callback(say_where);
#endif
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/qvl_fault.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(g_model, sizeof g_model, "%s/model", g_root);
    snprintf(g_out, sizeof g_out, "%s/out", g_root);
    if (mkdir(g_out, 0700) != 0) {
        perror("mkdir");
        return 1;
    }
    for (size_t i = 0; i < sizeof g_data / sizeof *g_data; i++) g_data[i] = (float)i * 0.25f - 7.0f;
    make_pixels();
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    sp.preset = "tiny";
    qvl_error err;
    snprintf(g_sharded, sizeof g_sharded, "%s/sharded", g_root);
    snprintf(g_mlx, sizeof g_mlx, "%s/mlx", g_root);
    qvl_status ss = qvl_synth_write(&sp, g_model, &err);
    sp.layout = QVL_LAYOUT_SHARDED;
    if (ss == QVL_OK) ss = qvl_synth_write(&sp, g_sharded, &err);
    sp.layout = QVL_LAYOUT_MLX;
    if (ss == QVL_OK) ss = qvl_synth_write(&sp, g_mlx, &err);
    if (ss != QVL_OK) {
        fprintf(stderr, "qvl_fault: cannot write the synthetic models: %s\n", err.message);
        return 1;
    }

    long total_runs = 0;
    int found = 0;
    for (size_t pi = 0; pi < sizeof g_paths / sizeof *g_paths; pi++) {
        const path_def *p = &g_paths[pi];
        if (only_path && strcmp(only_path, p->name)) continue;
        found = 1;
        /* twice: the first run warms what a process does once (CPU detection, libc's first allocations) */
        result ref = {0};
        long counts[N_CLASSES];
        if (!reference(p, &ref, counts)) continue;
        free_result(&ref);
        if (!reference(p, &ref, counts)) continue;
        for (int c = 0; c < N_CLASSES; c++) {
            if (only_class >= 0 && c != only_class) continue;
            long st = stride;
            if (max_runs > 0 && counts[c] / st > max_runs) st = (counts[c] + max_runs - 1) / max_runs;
            long runs = 0, hits = 0, ok_after = 0;
            if (only_n > 0) {
                result r;
                hits += run_once(p, c, only_n, &r, &ref);
                runs++;
                free_result(&r);
            } else {
                /* N = 1, 1 + st, ...; then every N past the count of the fault-free run, until one completes
                 * without reaching the fault (a count that grew under faults is followed to its end). */
                for (long n = 1;; n = n < counts[c] && n + st > counts[c] ? counts[c] : n + st) {
                    result r;
                    int hit = run_once(p, c, n, &r, &ref);
                    free_result(&r);
                    runs++;
                    hits += hit;
                    if (r.status == QVL_OK && hit) ok_after++;
                    if (!hit) break;
                    if (n >= counts[c] && st > 1) st = 1;
                }
            }
            total_runs += runs;
            if (g_at && hits == 0 && counts[c] == 0) {
                fprintf(stderr, "FAIL %s %s: no %s call under %s to fail\n", p->name, class_names[c], class_names[c],
                        g_at);
                g_failures++;
            }
            printf("%-18s %-5s calls %5ld  runs %5ld  faults %5ld  absorbed %ld\n", p->name, class_names[c],
                   counts[c], runs, hits, ok_after);
            fflush(stdout);
        }
        free_result(&ref);
    }
    if (!found) {
        fprintf(stderr, "qvl_fault: no path %s in this build (decode needs QVL_MEDIA)\n", only_path);
        return 77;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "qvl_fault: could not remove %s\n", g_root);
    printf("qvl_fault: %ld runs, %ld failures\n", total_runs, g_failures);
    return g_failures ? 1 : 0;
}
