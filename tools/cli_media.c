/* cli_media.c — `qvl encode INPUT...`: images, videos and frame directories in; per-input merged tokens and
 * DeepStack features (or, with --preprocess-only, pixel rows) out, keyed "item{i}.*" in one safetensors file.
 * Each input is planned (decoded, preprocessed), encoded and written on its own through the library's plan API and
 * streaming writer, so one bad input loses nothing else and only one input's outputs are held at a time. When no
 * input succeeds, no output file is left behind. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* The most bytes of an input read ahead into memory (read_input): the Python binding's bound too. */
#define CLI_READ_AHEAD_BYTES ((uint64_t)64 << 20)

/* The bytes of the file at path, read once so that its cache key and its encode come from the same bytes (a file
 * replaced between the two reads would otherwise be stored under the other content's key); NULL where the input
 * stays a path for the library to open: not a regular file (a directory of frames; a FIFO or device, which the
 * library refuses at once), one that cannot be opened or read (the plan reports why, naming it), an empty one, or
 * one of more than `limit` bytes (a long video, which FFmpeg reads in pieces; an image over max_input_bytes). */
static void *read_input(const char *path, uint64_t limit, size_t *n_out) {
    *n_out = 0;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sb;
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 && (uint64_t)sb.st_size <= limit) {
        cap = (size_t)sb.st_size + 1; /* a byte more than its size: a file that grew meanwhile fills the buffer */
        buf = malloc(cap);
        while (buf && n < cap) {
            const ssize_t r = read(fd, buf + n, cap - n);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                if (r < 0) n = 0;
                break;
            }
            n += (size_t)r;
        }
    }
    close(fd);
    if (buf && (n == 0 || n == cap)) { /* unreadable, emptied or grown meanwhile: left a path */
        free(buf);
        buf = NULL;
    }
    if (buf) *n_out = n;
    return buf;
}

/* Preprocessing settings: defaults, then the model's json files, then the command line. */
static int resolve_settings(media_opts *o) {
    if (!o->model_dir) return 0;
    qvl_preprocess_params pp = o->pp;
    qvl_video_params vp = o->vp;
    qvl_error err;
    if (qvl_preprocess_params_load(o->model_dir, &pp, &vp, &err) != QVL_OK) return cli_fail("%s", err.message);
    if (o->set_resize) pp.resize = o->pp.resize;
    if (o->set_min) pp.min_pixels = o->pp.min_pixels;
    if (o->set_max) pp.max_pixels = o->pp.max_pixels;
    if (o->set_size) pp.size_h = o->pp.size_h, pp.size_w = o->pp.size_w;
    if (o->set_vmin) pp.video_min_pixels = o->pp.video_min_pixels;
    if (o->set_vmax) pp.video_max_pixels = o->pp.video_max_pixels;
    if (o->set_fps) vp.fps = o->vp.fps;
    if (o->set_num_frames) vp.num_frames = o->vp.num_frames;
    if (o->set_max_frames) vp.max_frames = o->vp.max_frames;
    if (o->set_cap) pp.cap_pixels_per_frame = o->pp.cap_pixels_per_frame;
    if (o->set_max_vt) pp.max_video_tokens = o->pp.max_video_tokens;
    vp.max_pixels = o->vp.max_pixels;
    pp.n_threads = o->pp.n_threads;
    o->pp = pp;
    o->vp = vp;
    return 0;
}

/* Metadata "item{i}.{field}"; the writer keeps its own copy. */
static void meta(qvl_st_writer *w, const char *field, int i, const char *value) {
    char key[64];
    snprintf(key, sizeof key, "item%d.%s", i, field);
    qvl_st_writer_meta(w, key, value, NULL); /* a failure is sticky: finish reports it */
}

/* `prefix` and v as Python's repr prints a float: the fewest significant digits that read back as v, in positional
 * notation with at least one decimal ("30.0", "0.25") where 1e-4 <= |v| < 1e16 (and for 0), else as "1e-05". */
static int print_double(char *buf, size_t cap, const char *prefix, double v) {
    if (!isfinite(v)) return snprintf(buf, cap, "%s%s", prefix, isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
    char e[40];
    int prec = 1;
    for (; prec < 17; prec++) { /* the shortest %e that reads back as v */
        snprintf(e, sizeof e, "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    snprintf(e, sizeof e, "%.*e", prec - 1, v);
    const int e10 = atoi(strchr(e, 'e') + 1);
    const double a = fabs(v);
    if (a != 0 && (a < 1e-4 || a >= 1e16)) return snprintf(buf, cap, "%s%s", prefix, e);
    const int decimals = prec - 1 - e10;
    return snprintf(buf, cap, "%s%.*f", prefix, decimals > 0 ? decimals : 1, v);
}

/* "[a, b, c]" of n values printed by `fmt` into a malloc'd string (NULL on overflow or no memory). */
static char *json_list(size_t n, const int64_t *iv, const double *dv) {
    size_t cap = 16 + n * 28, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[len++] = '[';
    for (size_t i = 0; i < n; i++) {
        int k = iv ? snprintf(s + len, cap - len, "%s%" PRId64, i ? ", " : "", iv[i])
                   : print_double(s + len, cap - len, i ? ", " : "", dv[i]);
        if (k < 0 || (size_t)k >= cap - len) {
            free(s);
            return NULL;
        }
        len += (size_t)k;
    }
    snprintf(s + len, cap - len, "]");
    return s;
}

/* Per-input metadata: item{i}.path / kind / status / error, and for encoded ones the grid, tokens, the grid_thw row
 * and, for videos, the frame indices, source fps and the seconds of each temporal patch (the prompt's
 * "<t seconds>", Qwen3VLProcessor's arithmetic). Separate keys, so nothing in a path needs escaping. */
static void item_meta(qvl_st_writer *w, int i, const char *path, const qvl_item_info *in, size_t grid_row) {
    char v[160];
    meta(w, "path", i, path);
    meta(w, "kind", i, in->kind && *in->kind ? in->kind : "?");
    meta(w, "status", i, in->status == QVL_OK ? "ok" : qvl_status_name(in->status));
    if (in->status != QVL_OK) {
        meta(w, "error", i, in->message);
        return;
    }
    snprintf(v, sizeof v, "%d,%d,%d", in->grid.t, in->grid.h, in->grid.w);
    meta(w, "grid", i, v);
    snprintf(v, sizeof v, "%zu", in->n_tokens);
    meta(w, "tokens", i, v);
    snprintf(v, sizeof v, "%zu", grid_row);
    meta(w, "grid_thw_row", i, v);
    snprintf(v, sizeof v, "%dx%d", in->src_width, in->src_height);
    meta(w, "source_size", i, v);
    if (!in->n_frames) return;
    print_double(v, sizeof v, "", in->source_fps);
    meta(w, "source_fps", i, v);
    snprintf(v, sizeof v, "%" PRId64, in->total_frames);
    meta(w, "total_frames", i, v);
    char *l = json_list((size_t)in->n_frames, in->frame_indices, NULL);
    if (l) meta(w, "frame_indices", i, l);
    free(l);
    l = json_list(in->n_timestamps, NULL, in->timestamps);
    if (l) meta(w, "timestamps", i, l);
    free(l);
}

/* One tensor [rows, cols] of F32 from `data`. */
static void put_f32(qvl_st_writer *w, const char *name, const float *data, size_t rows, size_t cols) {
    int64_t shape[2] = {(int64_t)rows, (int64_t)cols};
    if (qvl_st_writer_tensor(w, name, "F32", shape, 2, NULL) == QVL_OK)
        qvl_st_writer_data(w, data, rows * cols * sizeof(float), NULL);
}

/* The tensor of item i's plane k: "item{i}.merged", then "item{i}.deepstack{k-1}". */
static void plane_name(char *buf, size_t cap, int i, size_t k) {
    if (k == 0) snprintf(buf, cap, "item%d.merged", i);
    else snprintf(buf, cap, "item%d.deepstack%zu", i, k - 1);
}

/* An input encoded as a stream (qvl_encode_stream): its planes written to the file part by part, as item{i}.merged
 * and item{i}.deepstack{k}, filled side by side (qvl_st_writer_group); or preprocessed as one
 * (qvl_preprocess_stream, --preprocess-only): its rows as item{i}.pixel_values. The item's info kept from the
 * first part. */
typedef struct streamed {
    qvl_st_writer *w;
    int i;
    size_t parts;
    int grouped; /* its tensors declared (qvl_st_writer_group): what a failure takes back */
    qvl_item_info info;
    int64_t *indices;
    double *timestamps;
    int write_failed;
} streamed;

/* At a stream's first part: its info kept (with copies of the arrays it points to, valid during the call only) and
 * its n tensors [rows, cols] declared. 0, or 1 when that failed (write_failed). */
static int stream_begin(streamed *so, const qvl_item_info *info, size_t n, const char *const *names, size_t rows,
                        size_t cols) {
    so->info = *info;
    so->indices = malloc((info->n_frames > 0 ? (size_t)info->n_frames : 1) * sizeof *so->indices);
    so->timestamps = malloc((info->n_timestamps ? info->n_timestamps : 1) * sizeof *so->timestamps);
    if (!so->indices || !so->timestamps) return so->write_failed = 1;
    if (info->n_frames > 0) memcpy(so->indices, info->frame_indices, (size_t)info->n_frames * sizeof *so->indices);
    if (info->n_timestamps) memcpy(so->timestamps, info->timestamps, info->n_timestamps * sizeof *so->timestamps);
    so->info.frame_indices = so->indices, so->info.timestamps = so->timestamps;
    const int64_t shape[2] = {(int64_t)rows, (int64_t)cols};
    if (qvl_st_writer_group(so->w, n, names, "F32", shape, 2, NULL) != QVL_OK) return so->write_failed = 1;
    so->grouped = 1;
    return 0;
}

static int on_part(void *user, const qvl_item_info *info, const qvl_chunk *c) {
    streamed *so = user;
    if (so->parts++ == 0) {
        char names[1 + QVL_MAX_DEEPSTACK][48];
        const char *np[1 + QVL_MAX_DEEPSTACK];
        for (size_t k = 0; k < info->n_planes && k <= QVL_MAX_DEEPSTACK; k++) {
            plane_name(names[k], sizeof names[k], so->i, k);
            np[k] = names[k];
        }
        if (stream_begin(so, info, info->n_planes, np, info->n_tokens, info->out_cols)) return 1;
    }
    for (size_t k = 0; k < info->n_planes; k++)
        if (qvl_st_writer_data_to(so->w, k, (const unsigned char *)c->data + k * c->plane_stride,
                                  c->n_tokens * info->out_cols * sizeof(float), NULL) != QVL_OK)
            return so->write_failed = 1;
    return 0;
}

static int on_rows(void *user, const qvl_item_info *info, const qvl_rows_chunk *c) {
    streamed *so = user;
    if (so->parts++ == 0) {
        char name[48];
        snprintf(name, sizeof name, "item%d.pixel_values", so->i);
        const char *np[1] = {name};
        if (stream_begin(so, info, 1, np, info->n_rows, c->row_len)) return 1;
    }
    if (qvl_st_writer_data_to(so->w, 0, c->rows, c->n_rows * c->row_len * sizeof(float), NULL) != QVL_OK)
        return so->write_failed = 1;
    return 0;
}

int encode_media(media_opts *o) {
    int rc = resolve_settings(o);
    if (rc) return rc;
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    qvl_model_info in;
    qvl_error err;
    memset(&in, 0, sizeof in);
    if (o->model_dir && !o->preprocess_only) { /* preprocessing alone needs no weights */
        if (qvl_model_load(o->model_dir, &o->load, &m, &err) != QVL_OK) return cli_fail("%s", err.message);
        qvl_model_get_info(m, &in);
        if (qvl_ctx_create(m, &o->ctx, &ctx, &err) != QVL_OK) {
            qvl_model_free(m);
            return cli_fail("%s", err.message);
        }
    }
    /* Room for the header up front (metadata is a few hundred bytes an input, plus its path and any message). */
    size_t reserve = 8192;
    for (int i = 0; i < o->n_inputs; i++) reserve += 2048 + 2 * strlen(o->inputs[i]);
    qvl_st_writer *w = NULL;
    qvl_grid *grids = calloc((size_t)o->n_inputs + 1, sizeof *grids);
    if (!grids) rc = cli_fail("out of memory");
    else if (qvl_st_writer_open(o->out_path, reserve, &w, &err) != QVL_OK) rc = cli_fail("%s", err.message);
    if (rc) {
        free(grids);
        qvl_ctx_free(ctx);
        qvl_model_free(m);
        return rc;
    }
    qvl_cache *cache = NULL;
    char fp[33] = "";
    if (o->cache_dir && ctx) {
        if (qvl_cache_open(o->cache_dir, NULL, &cache, &err) != QVL_OK)
            fprintf(stderr, "qvl: warning: --cache: %s; encoding without it\n", err.message);
        qvl_model_fingerprint(m, NULL, fp, NULL);
    }
    qvl_plan_params pl;
    qvl_plan_params_default(&pl);
    pl.limits = o->ctx.limits; /* the ctx has them too; a plan without a model (--preprocess-only) needs them */
    pl.layout = QVL_OUTPUT_SPLIT; /* item{i}.merged and item{i}.deepstack{k}: planes of one buffer */
    pl.preprocess = &o->pp;
    pl.video = &o->vp;
    pl.decode = &o->dp;
    pl.max_batch_rows = o->max_batch_rows ? o->max_batch_rows : 4096; /* streams' default, and plans' here */
    const size_t O = (size_t)in.out_hidden;
    size_t n_grids = 0;
    int n_ok = 0;
    double t_all = cli_now_ms();
    const int progress = !isatty(STDOUT_FILENO); /* the report goes elsewhere: say how far it is on stderr */
    qvl_limits def_lim;
    qvl_limits_default(&def_lim);
    const uint64_t max_input = (o->ctx.limits ? o->ctx.limits : &def_lim)->max_input_bytes;
    const uint64_t read_ahead = max_input < CLI_READ_AHEAD_BYTES ? max_input : CLI_READ_AHEAD_BYTES;
    for (int i = 0; i < o->n_inputs; i++) {
        const char *path = o->inputs[i];
        qvl_item it;
        qvl_item_default(&it);
        /* With a model, a file's bytes are read once (read_input) for its key and its encode both; the rest, and
         * every input of --preprocess-only (no key), the library opens by its path. */
        size_t n_bytes = 0;
        void *bytes = ctx ? read_input(path, read_ahead, &n_bytes) : NULL;
        if (bytes) {
            it.kind = QVL_ITEM_ENCODED;
            it.data = bytes;
            it.size = n_bytes;
            it.label = path;
        } else {
            it.kind = QVL_ITEM_PATH;
            it.path = path;
        }
        qvl_plan *plan = NULL;
        qvl_item_info info;
        memset(&info, 0, sizeof info);
        void *buf = NULL;
        char fail_msg[1200] = "";
        int hit = 0;
        /* The content-addressed cache key (the same the binding and servers compute): of the bytes read, or, for a
         * path the library opens, of its file(s) before the encode (for the cache lookup) and after it. */
        char key[QVL_KEY_HEX];
        const int key_before = ctx && (bytes || cache) && qvl_item_key(ctx, &it, &pl, NULL, key, NULL) == QVL_OK;
        int have_key = key_before;
        if (cache && have_key) {
            qvl_cache_entry ent;
            /* split planes as every writer stores them (qvl_cache_put): the entry's planes, tokens and cols */
            hit = qvl_cache_get(cache, key, &ent, NULL) == QVL_OK && ent.result == QVL_CACHE_HIT &&
                  strcmp(ent.dtype, "F32") == 0 && ent.cols == O && (buf = malloc(ent.nbytes ? ent.nbytes : 1)) != NULL;
            if (hit) { /* the entry stands for the encode */
                memcpy(buf, ent.data, ent.nbytes);
                info.status = QVL_OK;
                info.message = "";
                info.kind = "cached";
                info.grid = ent.grid;
                info.n_tokens = ent.n_tokens;
                info.n_planes = ent.n_planes;
                info.n_rows = info.n_tokens * 4;
            }
            qvl_free(ent.file);
        }
        /* Without a cache entry to store (which takes the whole output), an input is encoded as a stream: a long
         * video's rows and output are never held whole, and its tokens (or with --preprocess-only its rows) are in
         * the file as they are made. */
        streamed so = {w, i, 0, 0, {0}, NULL, NULL, 0};
        int stream = !hit && (o->preprocess_only || (ctx && !cache)), overlapped = 0;
        double t_stream = 0;
        if (stream) {
            t_stream = cli_now_ms();
            const qvl_status s = o->preprocess_only ? qvl_preprocess_stream(NULL, &it, &pl, on_rows, &so, &err)
                                                    : qvl_encode_stream(ctx, &it, &pl, on_part, &so, &err);
            t_stream = cli_now_ms() - t_stream;
            if (s == QVL_OK && !so.write_failed) {
                info = so.info;
                /* a streamed video's decode, preprocess and encode overlap: its one time (an image, or a video read
                 * again whole, has its own decode and preprocess times; what is left of the call is its encode) */
                overlapped = info.decode_ms == 0 && info.preprocess_ms == 0;
                if (overlapped) info.encode_ms = t_stream;
                else if (info.encode_ms == 0 && !o->preprocess_only)
                    info.encode_ms = t_stream - info.decode_ms - info.preprocess_ms;
            } else {
                if (so.grouped) qvl_st_writer_drop(w, NULL); /* its tensors taken back (a write failure is sticky) */
                /* read again whole, as a plan reads it, when it was sampled again after parts were written (any
                 * other failure stands) */
                if (s == QVL_ERR_RESAMPLED && so.grouped && !so.write_failed) {
                    stream = 0; /* sampled again after parts were written: read again and encoded whole, as a plan */
                } else {
                    info.status = so.write_failed ? QVL_ERR_IO : s;
                    snprintf(fail_msg, sizeof fail_msg, "%s", so.write_failed ? "writing the output failed" : err.message);
                    info.message = fail_msg;
                    info.kind = so.parts && so.info.kind ? so.info.kind : "?";
                }
            }
        }
        if (hit || stream) {
        } else if (qvl_plan_create(ctx, &it, 1, &pl, &plan, &err) != QVL_OK) {
            info.status = err.status;
            info.message = err.message;
            info.kind = "?";
        } else {
            qvl_plan_item(plan, 0, &info);
        }
        if (!hit && !stream && info.status == QVL_OK && ctx) {
            buf = malloc(info.out_bytes ? info.out_bytes : 1);
            if (!buf) {
                snprintf(fail_msg, sizeof fail_msg, "%s: out of memory for %zu output bytes", path, info.out_bytes);
                info.status = QVL_ERR_NOMEM;
                info.message = fail_msg;
            } else {
                qvl_plan_encode(ctx, plan, &buf, &err);
                qvl_plan_item(plan, 0, &info); /* its status and encode time, either way */
            }
        }
        const int ok = info.status == QVL_OK;
        if (ok && ctx && !bytes && !hit) { /* keyed now; with --cache, only if the key is the same again */
            char again[QVL_KEY_HEX];
            const int have_again = qvl_item_key(ctx, &it, &pl, NULL, again, NULL) == QVL_OK;
            if (!cache) {
                have_key = have_again;
                memcpy(key, again, sizeof key);
            } else if (!have_again || strcmp(key, again) != 0) {
                have_key = 0;
                fprintf(stderr, "qvl: warning: %s changed while it was encoded: %s\n", path,
                        cache ? "not stored in the cache, and no key written" : "no key written");
            }
        }
        if (cache && have_key && ok && !hit &&
            qvl_cache_put_kind(cache, key, info.kind, QVL_DTYPE_F32, buf, info.n_planes, info.n_tokens, O, info.grid,
                               fp, &err) != QVL_OK)
            fprintf(stderr, "qvl: warning: %s: could not store it in the cache: %s\n", path, err.message);
        item_meta(w, i, path, &info, n_grids);
        if (hit) meta(w, "cache", i, "hit");
        if (ok && have_key) meta(w, "key", i, key);
        char name[48];
        if (ok && o->preprocess_only && !stream) {
            snprintf(name, sizeof name, "item%d.pixel_values", i);
            put_f32(w, name, qvl_plan_rows(plan, 0), info.n_rows, 3 * (size_t)o->pp.temporal_patch *
                    (size_t)o->pp.patch * (size_t)o->pp.patch);
        } else if (ok && !stream) {
            for (size_t k = 0; k < info.n_planes; k++) {
                plane_name(name, sizeof name, i, k);
                put_f32(w, name, (const float *)buf + k * info.n_tokens * O, info.n_tokens, O);
            }
        }
        if (ok) grids[n_grids++] = info.grid;
        n_ok += ok;
        /* Progress on stderr as each input is done, where the report (stdout) goes elsewhere: on a terminal the
         * report's line says the same. A stream's decode, preprocess and encode overlap: its one time is theirs. */
        char times[160];
        if (overlapped)
            snprintf(times, sizeof times, "streamed: decode + preprocess%s %.1f ms", o->preprocess_only ? "" : " + encode",
                     info.encode_ms);
        else if (o->preprocess_only)
            snprintf(times, sizeof times, "decode %.1f ms, preprocess %.1f ms", info.decode_ms, info.preprocess_ms);
        else snprintf(times, sizeof times, "decode %.1f ms, preprocess %.1f ms, encode %.1f ms", info.decode_ms,
                      info.preprocess_ms, info.encode_ms);
        if (!o->quiet && progress) {
            if (ok)
                fprintf(stderr, "[%d/%d] %s: %s %dx%d -> grid %dx%dx%d, %zu tokens (%s)\n", i + 1, o->n_inputs, path,
                        info.kind, info.src_width, info.src_height, info.grid.t, info.grid.h, info.grid.w,
                        info.n_tokens, times);
            else
                fprintf(stderr, "[%d/%d] %s: failed: %s\n", i + 1, o->n_inputs, path, info.message);
        }
        if (!o->quiet) {
            if (ok)
                printf("item %d: %s (%s %dx%d, %d frame%s): grid %dx%dx%d, %zu tokens, %s\n", i, path, info.kind,
                       info.src_width, info.src_height, info.n_frames ? info.n_frames : 1, info.n_frames > 1 ? "s" : "",
                       info.grid.t, info.grid.h, info.grid.w, info.n_tokens, times);
            else
                printf("item %d: %s: FAILED: %s\n", i, path, info.message);
            fflush(stdout);
        }
        free(buf);
        free(so.indices);
        free(so.timestamps);
        qvl_plan_free(plan);
        free(bytes);
    }
    t_all = cli_now_ms() - t_all;
    static const char *resize_names[] = {"torchvision", "pil", "pil-legacy"};
    char ver[32];
    snprintf(ver, sizeof ver, "%s", qvl_version());
    qvl_st_writer_meta(w, "producer", "qvl", NULL);
    qvl_st_writer_meta(w, "qvl_version", ver, NULL);
    qvl_st_writer_meta(w, "resize", resize_names[o->pp.resize], NULL);
    qvl_st_writer_meta(w, "alpha", o->dp.alpha == QVL_ALPHA_DROP ? "drop" : "white", NULL);
    qvl_st_writer_meta(w, "content", o->preprocess_only ? "pixel_values" : "embeddings", NULL);
    if (m) {
        char hex[33];
        if (qvl_model_fingerprint(m, NULL, hex, NULL) == QVL_OK) qvl_st_writer_meta(w, "fingerprint", hex, NULL);
    }
    if (n_grids) {
        int64_t shape[2] = {(int64_t)n_grids, 3};
        int64_t *g = malloc(n_grids * 3 * sizeof *g);
        if (g) {
            for (size_t i = 0; i < n_grids; i++) g[3 * i] = grids[i].t, g[3 * i + 1] = grids[i].h, g[3 * i + 2] = grids[i].w;
            if (qvl_st_writer_tensor(w, "grid_thw", "I64", shape, 2, NULL) == QVL_OK)
                qvl_st_writer_data(w, g, n_grids * 3 * sizeof *g, NULL);
        }
        free(g);
    }
    if (n_ok == 0) {
        qvl_st_writer_abort(w); /* nothing succeeded: no output file */
        rc = CLI_EXIT_FAIL;
        if (!o->quiet) printf("0 of %d inputs %s; no output written\n", o->n_inputs,
                              o->preprocess_only ? "preprocessed" : "encoded");
    } else if (qvl_st_writer_finish(w, &err) != QVL_OK) {
        rc = cli_fail("%s", err.message);
    } else {
        if (!o->quiet)
            printf("%d of %d inputs %s in %.1f ms\noutput: %s\n", n_ok, o->n_inputs,
                   o->preprocess_only ? "preprocessed" : "encoded", t_all, o->out_path);
        if (n_ok < o->n_inputs) rc = CLI_EXIT_PARTIAL;
    }
    free(grids);
    qvl_cache_close(cache);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    return rc;
}
