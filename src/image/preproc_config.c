/* preproc_config.c — preprocessing settings from a model's preprocessor_config.json and
 * video_preprocessor_config.json, the way transformers' Qwen2-VL image and Qwen3-VL video processors read them:
 * size.shortest_edge / size.longest_edge are the pixel budget, and legacy top-level min_pixels / max_pixels
 * override them. Absent files and keys keep the values already in the structs. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/limits.h"
#include "core/params.h"
#include "image/image_params.h"
#include "image/preproc_config.h"
#include "io/fileutil.h"
#include "io/jsonutil.h"

static qvl_status num(const cJSON *obj, const char *key, double lo, double hi, double *out, const char *path,
                      qvl_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return QVL_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        char got[64];
        return err_fail(err, QVL_ERR_FORMAT, "%s: '%s' must be a number in [%g, %g], got %s", path, key, lo, hi,
                        json_describe(v, got, sizeof got));
    }
    *out = v->valuedouble;
    return QVL_OK;
}

static qvl_status integer(const cJSON *obj, const char *key, double lo, double hi, double *out, const char *path,
                          qvl_error *err) {
    double v = NAN;
    TRY(num(obj, key, lo, hi, &v, path, err));
    if (isnan(v)) return QVL_OK;
    if (v != floor(v)) return err_fail(err, QVL_ERR_FORMAT, "%s: '%s' must be an integer, got %.17g", path, key, v);
    *out = v;
    return QVL_OK;
}

/* The pixel budget: size.{shortest_edge,longest_edge}, overridden by top-level min_pixels / max_pixels. */
static qvl_status budget(const cJSON *root, const char *path, uint64_t *min_px, uint64_t *max_px, qvl_error *err) {
    double lo = (double)*min_px, hi = (double)*max_px;
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(root, "size");
    if (size && !cJSON_IsNull(size) && !cJSON_IsObject(size)) {
        char got[64];
        return err_fail(err, QVL_ERR_FORMAT, "%s: 'size' must be an object with shortest_edge / longest_edge, got %s",
                        path, json_describe(size, got, sizeof got));
    }
    if (cJSON_IsObject(size)) {
        TRY(integer(size, "shortest_edge", 1, 1e12, &lo, path, err));
        TRY(integer(size, "longest_edge", 1, 1e12, &hi, path, err));
    }
    TRY(integer(root, "min_pixels", 1, 1e12, &lo, path, err));
    TRY(integer(root, "max_pixels", 1, 1e12, &hi, path, err));
    if (lo > hi)
        return err_fail(err, QVL_ERR_FORMAT,
                        "%s: min pixels %.0f (size.shortest_edge / min_pixels) above max pixels %.0f "
                        "(size.longest_edge / max_pixels)", path, lo, hi);
    *min_px = (uint64_t)lo;
    *max_px = (uint64_t)hi;
    return QVL_OK;
}

/* A list of 3 finite numbers (nonzero ones when `nonzero`: a divisor). */
static qvl_status triple(const cJSON *root, const char *key, int nonzero, float out[3], const char *path,
                         qvl_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!a || cJSON_IsNull(a)) return QVL_OK;
    char got[64];
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3)
        return err_fail(err, QVL_ERR_FORMAT, "%s: '%s' must be a list of 3 numbers, got %s", path, key,
                        json_describe(a, got, sizeof got));
    float v[3];
    for (int c = 0; c < 3; c++) {
        const cJSON *e = cJSON_GetArrayItem(a, c);
        if (!cJSON_IsNumber(e) || !isfinite((float)e->valuedouble) || (nonzero && (float)e->valuedouble == 0))
            return err_fail(err, QVL_ERR_FORMAT, "%s: '%s'[%d] must be a finite%s number, got %s", path, key, c,
                            nonzero ? ", nonzero" : "", json_describe(e, got, sizeof got));
        v[c] = (float)e->valuedouble;
    }
    for (int c = 0; c < 3; c++) out[c] = v[c];
    return QVL_OK;
}

static qvl_status parse_json(const char *text, size_t len, const char *path, cJSON **root, qvl_error *err) {
    return json_parse_object(text, len, path, root, err);
}

/* The budget's lower end makes every input at least min_px / px_per_row patch rows, however small it is: a
 * min_pixels of 4e8 would turn a 1x1 image into 1.5 M patches. It must stay within the default
 * qvl_limits.max_item_patches, so that the file alone cannot make every item fail or cost gigabytes. */
static qvl_status min_bounded(const char *path, const char *what, uint64_t min_px, uint64_t px_per_row,
                              qvl_error *err) {
    const uint64_t rows = min_px / (px_per_row ? px_per_row : 1);
    if (rows > LIMIT_DEF_ITEM_PATCHES)
        return err_fail(err, QVL_ERR_LIMIT, "%s: %s %llu would make every input at least %llu patch rows, more than "
                        "the %llu of qvl_limits.max_item_patches (its default); lower it", path, what,
                        (unsigned long long)min_px, (unsigned long long)rows,
                        (unsigned long long)LIMIT_DEF_ITEM_PATCHES);
    return QVL_OK;
}

static qvl_status image_config(const cJSON *r, const char *path, qvl_preprocess_params *p, qvl_error *err) {
    double patch = p->patch, tp = p->temporal_patch, merge = p->merge, rescale = p->rescale_factor;
    TRY(budget(r, path, &p->min_pixels, &p->max_pixels, err));
    TRY(integer(r, "patch_size", 1, 1024, &patch, path, err));
    TRY(integer(r, "temporal_patch_size", 1, 16, &tp, path, err));
    TRY(integer(r, "merge_size", 1, 16, &merge, path, err));
    TRY(num(r, "rescale_factor", 1e-9, 1e9, &rescale, path, err));
    TRY(triple(r, "image_mean", 0, p->image_mean, path, err));
    TRY(triple(r, "image_std", 1, p->image_std, path, err));
    p->patch = (int32_t)patch;
    p->temporal_patch = (int32_t)tp;
    p->merge = (int32_t)merge;
    p->rescale_factor = rescale;
    return min_bounded(path, "min pixels (size.shortest_edge / min_pixels)", p->min_pixels,
                       (uint64_t)p->patch * (uint64_t)p->patch, err);
}

static qvl_status video_config(const cJSON *r, const char *path, qvl_preprocess_params *p, qvl_video_params *v,
                               qvl_error *err) {
    if (p) {
        TRY(budget(r, path, &p->video_min_pixels, &p->video_max_pixels, err));
        /* transformers' per-frame cap: a boolean (null: unset, transformers' default, off) and its token count */
        const cJSON *cap = cJSON_GetObjectItemCaseSensitive(r, "cap_pixels_per_frame");
        if (cap && !cJSON_IsNull(cap)) {
            char got[64];
            if (!cJSON_IsBool(cap))
                return err_fail(err, QVL_ERR_FORMAT, "%s: 'cap_pixels_per_frame' must be true, false or null, got %s",
                                path, json_describe(cap, got, sizeof got));
            p->cap_pixels_per_frame = cJSON_IsTrue(cap) ? 1 : 0;
        }
        double tokens = p->max_video_tokens;
        TRY(integer(r, "max_video_tokens", 1, 1048576, &tokens, path, err));
        p->max_video_tokens = (int32_t)tokens;
        TRY(min_bounded(path, "video min pixels (size.shortest_edge / min_pixels)", p->video_min_pixels,
                        (uint64_t)p->patch * (uint64_t)p->patch * (uint64_t)(p->temporal_patch > 0 ? p->temporal_patch : 1),
                        err));
    }
    if (!v) return QVL_OK;
    double fps = v->fps, minf = v->min_frames, maxf = v->max_frames, nf = v->num_frames;
    TRY(num(r, "fps", 1e-6, 1e6, &fps, path, err));
    TRY(integer(r, "min_frames", 1, 1e7, &minf, path, err));
    TRY(integer(r, "max_frames", 1, 1e7, &maxf, path, err));
    TRY(integer(r, "num_frames", 1, 1e7, &nf, path, err));
    v->fps = fps;
    v->min_frames = (int32_t)minf;
    v->max_frames = (int32_t)maxf;
    v->num_frames = (int32_t)nf;
    return QVL_OK;
}

qvl_status preproc_config_parse(const char *text, size_t len, const char *path, int video, qvl_preprocess_params *p,
                                qvl_video_params *v, qvl_error *err) {
    if (!text || (!video && !p))
        return err_fail(err, QVL_ERR_INVALID_ARG, "preproc_config_parse: %s is NULL", !text ? "text" : "p");
    cJSON *root;
    TRY(parse_json(text, len, path, &root, err));
    qvl_status s = video ? video_config(root, path, p, v, err) : image_config(root, path, p, err);
    cJSON_Delete(root);
    return s;
}

/* model_dir/name, parsed by preproc_config_parse when the file exists (a missing file keeps the defaults). */
static qvl_status load_file(const char *model_dir, const char *name, int video, qvl_preprocess_params *p,
                            qvl_video_params *v, qvl_error *err) {
    char path[4096];
    TRY(fu_join(path, sizeof path, model_dir, name, err));
    if (!fu_exists(path)) return QVL_OK; /* one that is there but no regular file (a FIFO) is reported */
    char *text;
    size_t len;
    TRY(fu_read_file(path, 1u << 20, &text, &len, err));
    qvl_status s = preproc_config_parse(text, len, path, video, p, v, err);
    free(text);
    return s;
}

qvl_status qvl_preprocess_params_load(const char *model_dir, qvl_preprocess_params *p, qvl_video_params *v,
                                      qvl_error *err) {
    err_clear(err);
    if (!model_dir) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params_load: model_dir is NULL");
    /* In/out structs of the caller's version: work on full copies, give back the caller's bytes. */
    qvl_preprocess_params pf;
    qvl_video_params vf;
    if (p) TRY(preprocess_params_take(&pf, p, err));
    if (v) TRY(video_params_take(&vf, v, err));
    if (p) TRY(load_file(model_dir, "preprocessor_config.json", 0, &pf, v ? &vf : NULL, err));
    TRY(load_file(model_dir, "video_preprocessor_config.json", 1, p ? &pf : NULL, v ? &vf : NULL, err));
    if (p) params_give(p, &pf, sizeof pf);
    if (v) params_give(v, &vf, sizeof vf);
    return QVL_OK;
}
