/* cli_media.c — `qvl encode INPUT...`: images, videos and frame directories in; per-input merged tokens and
 * DeepStack features (or, with --preprocess-only, pixel rows) out, keyed "item{i}.*" in one safetensors file.
 * Each input is decoded, preprocessed and encoded on its own, so one bad input loses nothing else. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

/* One input's outcome. */
typedef struct item {
    const char *path;
    const char *kind;      /* "image", "video", "frames" */
    int ok;
    char error[1100];
    qvl_grid grid;
    size_t n_tok;
    float *rows;           /* --preprocess-only: [S, row_len] */
    float *merged;         /* [n_tok, O] */
    float *ds[QVL_MAX_DEEPSTACK];
    double ms_decode, ms_pre, ms_enc;
    int32_t src_w, src_h, frames;
} item;

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Image files by their first bytes: JPEG, PNG, GIF, WebP, BMP. Anything else is handed to FFmpeg as a video. */
static int looks_like_image(const char *path) {
    unsigned char b[12] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 1; /* let the image loader report the I/O error */
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return 1;
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return 1;
    if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) return 1;
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return 1;
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return 1;
    return 0;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The regular files of a directory, sorted by name, as one video's frames. */
static qvl_status load_frames_dir(const char *dir, const qvl_video_params *vp, qvl_video *v, qvl_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err->message, sizeof err->message, "%s: cannot open directory", dir);
        return err->status = QVL_ERR_IO;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    qvl_status s = QVL_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (!p) { s = QVL_ERR_NOMEM; break; }
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) { free(p); continue; }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **q = realloc(names, cap * sizeof *q);
            if (!q) { free(p); s = QVL_ERR_NOMEM; break; }
            names = q;
        }
        names[n++] = p;
    }
    closedir(d);
    if (s == QVL_OK && n == 0) {
        snprintf(err->message, sizeof err->message, "%s: no frame images in the directory", dir);
        s = err->status = QVL_ERR_INVALID_ARG;
    } else if (s == QVL_ERR_NOMEM) {
        snprintf(err->message, sizeof err->message, "%s: out of memory listing frames", dir);
        err->status = s;
    }
    if (s == QVL_OK) {
        qsort(names, n, sizeof *names, name_cmp);
        s = qvl_video_from_images((const char *const *)names, n, vp, v, err);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return s;
}

/* Decode and preprocess one input into it->rows. */
static qvl_status prepare_item(item *it, const media_opts *o, int row_len, qvl_error *err) {
    double t0 = cli_now_ms();
    qvl_image img = {0};
    qvl_video vid = {0};
    qvl_status s;
    const int dir = is_dir(it->path), video = dir || !looks_like_image(it->path);
    it->kind = dir ? "frames" : video ? "video" : "image";
    if (!video) s = qvl_image_load(it->path, &o->dp, &img, err);
    else if (dir) s = load_frames_dir(it->path, &o->vp, &vid, err);
    else s = qvl_video_load(it->path, &o->vp, &vid, err);
    it->ms_decode = cli_now_ms() - t0;
    if (s != QVL_OK) return s;
    t0 = cli_now_ms();
    s = video ? qvl_video_grid(&vid, &o->pp, &it->grid, err) : qvl_image_grid(&img, &o->pp, &it->grid, err);
    size_t n_rows = s == QVL_OK ? qvl_patch_rows(&it->grid, 1) : 0;
    if (s == QVL_OK && (n_rows == 0 || (size_t)row_len > ((size_t)-1 / sizeof(float)) / n_rows)) {
        snprintf(err->message, sizeof err->message, "%s: %zu patch rows is too many", it->path, n_rows);
        s = err->status = QVL_ERR_LIMIT;
    }
    if (s == QVL_OK && !(it->rows = malloc(n_rows * (size_t)row_len * sizeof(float)))) {
        snprintf(err->message, sizeof err->message, "%s: out of memory for %zu patch rows", it->path, n_rows);
        s = err->status = QVL_ERR_NOMEM;
    }
    if (s == QVL_OK)
        s = video ? qvl_preprocess_video(&vid, &o->pp, it->rows, &it->grid, err)
                  : qvl_preprocess_image(&img, &o->pp, it->rows, &it->grid, err);
    it->src_w = video ? vid.width : img.width;
    it->src_h = video ? vid.height : img.height;
    it->frames = video ? vid.n_frames : 1;
    it->ms_pre = cli_now_ms() - t0;
    it->n_tok = qvl_merged_tokens(&it->grid, 1);
    qvl_image_free(&img);
    qvl_video_free(&vid);
    return s;
}

static qvl_status encode_item(item *it, qvl_ctx *ctx, const qvl_model_info *in, qvl_error *err) {
    size_t O = (size_t)in->out_hidden, S = qvl_patch_rows(&it->grid, 1);
    if (cli_alloc_outputs(it->n_tok, O, in->n_deepstack, &it->merged, it->ds)) {
        snprintf(err->message, sizeof err->message, "%s: out of memory for %zu output tokens", it->path, it->n_tok);
        return err->status = QVL_ERR_NOMEM;
    }
    double t0 = cli_now_ms();
    qvl_status s = qvl_encode(ctx, it->rows, S, &it->grid, 1, it->merged, in->n_deepstack ? it->ds : NULL, err);
    it->ms_enc = cli_now_ms() - t0;
    free(it->rows);
    it->rows = NULL;
    return s;
}

static void free_item(item *it) {
    free(it->rows);
    free(it->merged);
    for (int k = 0; k < QVL_MAX_DEEPSTACK; k++) free(it->ds[k]);
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
    if (o->set_fps) vp.fps = o->vp.fps;
    if (o->set_num_frames) vp.num_frames = o->vp.num_frames;
    if (o->set_max_frames) vp.max_frames = o->vp.max_frames;
    vp.max_pixels = o->vp.max_pixels;
    pp.n_threads = o->pp.n_threads;
    o->pp = pp;
    o->vp = vp;
    return 0;
}

/* Write every successful item, keyed item{i}.*, with per-input metadata. */
static int write_output(const media_opts *o, item *items, int n, const qvl_model_info *in) {
    size_t cap = (size_t)n * (2 + QVL_MAX_DEEPSTACK), n_out = 0, n_grids = 0;
    qvl_out_tensor *outs = calloc(cap + 1, sizeof *outs);
    char (*names)[48] = calloc(cap + 1, sizeof *names);
    qvl_grid *grids = calloc((size_t)n + 1, sizeof *grids);
    const char **meta = calloc((size_t)n * 4 + 8, sizeof *meta);
    char (*mbuf)[1200] = calloc((size_t)n * 2 + 2, sizeof *mbuf);
    int rc = 0;
    if (!outs || !names || !grids || !meta || !mbuf) { rc = cli_fail("out of memory writing %s", o->out_path); goto done; }
    size_t n_meta = 0;
    int row_len = in ? in->row_len : 3 * o->pp.temporal_patch * o->pp.patch * o->pp.patch;
    size_t O = in ? (size_t)in->out_hidden : 0;
    for (int i = 0; i < n; i++) {
        item *it = &items[i];
        snprintf(mbuf[2 * i], sizeof mbuf[0], "item%d", i);
        if (it->ok)
            snprintf(mbuf[2 * i + 1], sizeof mbuf[0], "%s|%s|ok|grid %d,%d,%d|tokens %zu|grid_thw row %zu", it->path,
                     it->kind, it->grid.t, it->grid.h, it->grid.w, it->n_tok, n_grids);
        else
            snprintf(mbuf[2 * i + 1], sizeof mbuf[0], "%s|%s|error|%s", it->path, it->kind ? it->kind : "?", it->error);
        meta[2 * n_meta] = mbuf[2 * i];
        meta[2 * n_meta + 1] = mbuf[2 * i + 1];
        n_meta++;
        if (!it->ok) continue;
        grids[n_grids++] = it->grid;
        if (o->preprocess_only) {
            snprintf(names[n_out], sizeof names[0], "item%d.pixel_values", i);
            outs[n_out] = (qvl_out_tensor){names[n_out], it->rows, qvl_patch_rows(&it->grid, 1), (size_t)row_len};
            n_out++;
            continue;
        }
        snprintf(names[n_out], sizeof names[0], "item%d.merged", i);
        outs[n_out] = (qvl_out_tensor){names[n_out], it->merged, it->n_tok, O};
        n_out++;
        for (int k = 0; in && k < in->n_deepstack; k++) {
            snprintf(names[n_out], sizeof names[0], "item%d.deepstack%d", i, k);
            outs[n_out] = (qvl_out_tensor){names[n_out], it->ds[k], it->n_tok, O};
            n_out++;
        }
    }
    static const char *resize_names[] = {"torchvision", "pil", "pil-legacy"};
    meta[2 * n_meta] = "producer", meta[2 * n_meta + 1] = "qvl", n_meta++;
    meta[2 * n_meta] = "resize", meta[2 * n_meta + 1] = resize_names[o->pp.resize], n_meta++;
    meta[2 * n_meta] = "content", meta[2 * n_meta + 1] = o->preprocess_only ? "pixel_values" : "embeddings", n_meta++;
    qvl_error err;
    if (qvl_write_safetensors(o->out_path, outs, n_out, grids, n_grids, meta, n_meta, &err) != QVL_OK)
        rc = cli_fail("%s", err.message);
done:
    free(outs);
    free(names);
    free(grids);
    free(meta);
    free(mbuf);
    return rc;
}

int encode_media(media_opts *o) {
    int rc = resolve_settings(o);
    if (rc) return rc;
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    qvl_model_info in;
    qvl_error err;
    int row_len = 3 * o->pp.temporal_patch * o->pp.patch * o->pp.patch;
    if (o->model_dir && !o->preprocess_only) {
        if (qvl_model_load(o->model_dir, &o->load, &m, &err) != QVL_OK) return cli_fail("%s", err.message);
        qvl_model_get_info(m, &in);
        if (in.row_len != row_len || in.patch != o->pp.patch || in.merge != o->pp.merge ||
            in.temporal_patch != o->pp.temporal_patch) {
            qvl_model_free(m);
            return cli_fail("%s: preprocessor patch %d/temporal %d/merge %d does not fit the tower's %d/%d/%d",
                            o->model_dir, o->pp.patch, o->pp.temporal_patch, o->pp.merge, in.patch,
                            in.temporal_patch, in.merge);
        }
        if (qvl_ctx_create(m, &o->ctx, &ctx, &err) != QVL_OK) {
            qvl_model_free(m);
            return cli_fail("%s", err.message);
        }
    }
    item *items = calloc((size_t)o->n_inputs, sizeof *items);
    if (!items) {
        qvl_ctx_free(ctx);
        qvl_model_free(m);
        return cli_fail("out of memory");
    }
    int n_ok = 0;
    double t_all = cli_now_ms();
    for (int i = 0; i < o->n_inputs; i++) {
        item *it = &items[i];
        it->path = o->inputs[i];
        err.status = QVL_OK;
        err.message[0] = '\0';
        qvl_status s = prepare_item(it, o, row_len, &err);
        if (s == QVL_OK && ctx) s = encode_item(it, ctx, &in, &err);
        it->ok = s == QVL_OK;
        if (!it->ok) snprintf(it->error, sizeof it->error, "%s", err.message[0] ? err.message : qvl_status_name(s));
        n_ok += it->ok;
        if (!o->quiet) {
            if (it->ok)
                fprintf(stderr, "[%d/%d] %s: %s %dx%d%s -> grid %dx%dx%d, %zu tokens (decode %.0f ms, preprocess %.0f ms"
                        ", encode %.0f ms)\n", i + 1, o->n_inputs, it->path, it->kind, it->src_w, it->src_h,
                        it->frames > 1 ? " (video)" : "", it->grid.t, it->grid.h, it->grid.w, it->n_tok,
                        it->ms_decode, it->ms_pre, it->ms_enc);
            else
                fprintf(stderr, "[%d/%d] %s: failed: %s\n", i + 1, o->n_inputs, it->path, it->error);
        }
    }
    t_all = cli_now_ms() - t_all;
    rc = write_output(o, items, o->n_inputs, m ? &in : NULL);
    if (!rc) {
        for (int i = 0; i < o->n_inputs; i++) {
            const item *it = &items[i];
            if (it->ok)
                printf("item %d: %s (%s %dx%d, %d frame%s): grid %dx%dx%d, %zu tokens, preprocess %.1f ms, encode %.1f ms\n",
                       i, it->path, it->kind, it->src_w, it->src_h, it->frames, it->frames == 1 ? "" : "s", it->grid.t,
                       it->grid.h, it->grid.w, it->n_tok, it->ms_decode + it->ms_pre, it->ms_enc);
            else
                printf("item %d: %s: FAILED: %s\n", i, it->path, it->error);
        }
        printf("%d of %d inputs %s in %.1f ms\noutput: %s\n", n_ok, o->n_inputs,
               o->preprocess_only ? "preprocessed" : "encoded", t_all, o->out_path);
        if (n_ok < o->n_inputs) rc = n_ok ? CLI_EXIT_PARTIAL : CLI_EXIT_FAIL;
    }
    for (int i = 0; i < o->n_inputs; i++) free_item(&items[i]);
    free(items);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    return rc;
}
