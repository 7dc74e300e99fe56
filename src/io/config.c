/* config.c — read and validate the vision configuration from config.json. */
#include "io/config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileutil.h"
#include "io/jsonutil.h"

/* Families whose vision tower is the Qwen3-VL tower. Top-level and vision_config model_type spellings. */
static const char *const k_families[] = {"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", NULL};
static const char *const k_vision_types[] = {"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe",
                                             "qwen3_5_vision", "qwen3_5_moe_vision", NULL};

static int in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return 1;
    return 0;
}

/* Read an integer field into *out (left unchanged when absent). */
static qvl_status get_int(const cJSON *obj, const char *key, int lo, int hi, int *out, const char *path,
                          qvl_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return QVL_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        char got[64];
        return err_fail(err, QVL_ERR_FORMAT, "%s: vision_config.%s must be an integer in [%d, %d], got %s", path, key,
                        lo, hi, json_describe(v, got, sizeof got));
    }
    *out = (int)v->valuedouble;
    return QVL_OK;
}

static qvl_status parse_vision(const cJSON *vc, const char *path, tower_config *c, qvl_error *err) {
    /* transformers' Qwen3VLVisionConfig defaults, used only for absent keys. */
    c->depth = 27; c->hidden = 1152; c->heads = 16; c->intermediate = 4304; c->out_hidden = 3584;
    c->patch = 16; c->temporal_patch = 2; c->merge = 2; c->in_channels = 3; c->num_pos = 2304;
    c->act = ACT_GELU_TANH; c->ln_eps = 1e-6f; c->rope_theta = 10000.0f;
    c->n_deepstack = 3; c->deepstack_index[0] = 8; c->deepstack_index[1] = 16; c->deepstack_index[2] = 24;

    TRY(get_int(vc, "depth", 1, 1024, &c->depth, path, err));
    TRY(get_int(vc, "hidden_size", 1, 65536, &c->hidden, path, err));
    TRY(get_int(vc, "num_heads", 1, 1024, &c->heads, path, err));
    TRY(get_int(vc, "intermediate_size", 1, 1 << 20, &c->intermediate, path, err));
    TRY(get_int(vc, "out_hidden_size", 1, 1 << 20, &c->out_hidden, path, err));
    TRY(get_int(vc, "patch_size", 1, 256, &c->patch, path, err));
    TRY(get_int(vc, "temporal_patch_size", 1, 16, &c->temporal_patch, path, err));
    TRY(get_int(vc, "spatial_merge_size", 1, 16, &c->merge, path, err));
    TRY(get_int(vc, "in_channels", 1, 16, &c->in_channels, path, err));
    TRY(get_int(vc, "num_position_embeddings", 1, 1 << 22, &c->num_pos, path, err));
    /* Every Qwen3-VL / Qwen3.5 release merges 2×2 and reads RGB; the merged-token count (qvl_merged_tokens, S/4,
     * which has no model to ask) and the preprocessing's 3-channel rows build that in. */
    if (c->merge != 2)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: vision_config.spatial_merge_size %d is not supported: the "
                        "merged-token layout qvl implements is 2×2 (spatial_merge_size 2)", path, c->merge);
    if (c->in_channels != 3)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: vision_config.in_channels %d is not supported: qvl's "
                        "preprocessing makes RGB patch rows (in_channels 3)", path, c->in_channels);

    const cJSON *act = cJSON_GetObjectItemCaseSensitive(vc, "hidden_act");
    if (act) {
        char got[64];
        if (!cJSON_IsString(act) || !act->valuestring)
            return err_fail(err, QVL_ERR_FORMAT, "%s: vision_config.hidden_act must be a string, got %s", path,
                            json_describe(act, got, sizeof got));
        if (strcmp(act->valuestring, "gelu_pytorch_tanh") == 0 || strcmp(act->valuestring, "gelu_new") == 0)
            c->act = ACT_GELU_TANH;
        else if (strcmp(act->valuestring, "gelu") == 0)
            c->act = ACT_GELU_ERF;
        else
            return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: vision_config.hidden_act '%s' is not supported "
                            "(gelu_pytorch_tanh, gelu_new, gelu)", path, act->valuestring);
    }

    /* Qwen3.5 has no DeepStack: the key is absent there (its model class deletes it), so the default applies
     * only to the Qwen3-VL families. */
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(vc, "deepstack_visual_indexes");
    if (strncmp(c->model_type, "qwen3_5", 7) == 0) c->n_deepstack = 0;
    if (ds && !cJSON_IsNull(ds)) {
        char got[64];
        if (!cJSON_IsArray(ds))
            return err_fail(err, QVL_ERR_FORMAT, "%s: vision_config.deepstack_visual_indexes must be a list, got %s",
                            path, json_describe(ds, got, sizeof got));
        int n = cJSON_GetArraySize(ds);
        if (n > QVL_MAX_DEEPSTACK)
            return err_fail(err, QVL_ERR_LIMIT, "%s: %d DeepStack indexes, at most %d supported", path, n,
                            QVL_MAX_DEEPSTACK);
        c->n_deepstack = n;
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(ds, i);
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                e->valuedouble >= c->depth)
                return err_fail(err, QVL_ERR_FORMAT, "%s: deepstack_visual_indexes[%d] must be a block index in "
                                "[0, %d), got %s", path, i, c->depth, json_describe(e, got, sizeof got));
            c->deepstack_index[i] = (int)e->valuedouble;
            for (int j = 0; j < i; j++)
                if (c->deepstack_index[j] == c->deepstack_index[i])
                    return err_fail(err, QVL_ERR_FORMAT, "%s: deepstack_visual_indexes repeats block %d", path,
                                    c->deepstack_index[i]);
        }
    }
    for (int i = 0; i < c->n_deepstack; i++)
        if (c->deepstack_index[i] >= c->depth)
            return err_fail(err, QVL_ERR_FORMAT, "%s: DeepStack block %d is past depth %d", path,
                            c->deepstack_index[i], c->depth);

    if (c->hidden % c->heads != 0)
        return err_fail(err, QVL_ERR_FORMAT, "%s: hidden_size %d is not a multiple of num_heads %d", path, c->hidden,
                        c->heads);
    c->head_dim = c->hidden / c->heads;
    if (c->head_dim > 1024)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: head_dim %d is larger than 1024", path, c->head_dim);
    if (c->head_dim % 4 != 0)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: head_dim %d: 2-D rotary needs a multiple of 4", path,
                        c->head_dim);
    c->pos_side = (int)lround(sqrt((double)c->num_pos));
    if (c->pos_side * c->pos_side != c->num_pos || c->pos_side < 2)
        return err_fail(err, QVL_ERR_FORMAT, "%s: num_position_embeddings %d is not a square ≥ 4", path, c->num_pos);
    c->row_len = c->in_channels * c->temporal_patch * c->patch * c->patch;
    return QVL_OK;
}

qvl_status config_load(const char *path, tower_config *cfg, qvl_error *err) {
    memset(cfg, 0, sizeof *cfg);
    char *text = NULL;
    size_t len = 0;
    TRY(fu_read_file(path, 16u << 20, &text, &len, err));
    qvl_status s = config_parse(text, len, path, cfg, err);
    free(text);
    return s;
}

qvl_status config_parse(const char *text, size_t len, const char *path, tower_config *cfg, qvl_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) TRY(json_parse_failure(text, len, path, err));
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_fail(err, QVL_ERR_FORMAT, "%s: not a JSON object (%zu bytes)", path, len);
    }
    qvl_status s = QVL_OK;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(root, "vision_config");
    const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
    if (vc && !cJSON_IsObject(vc)) {
        char got[64];
        s = err_fail(err, QVL_ERR_FORMAT, "%s: vision_config is not an object, got %s", path,
                     json_describe(vc, got, sizeof got));
        goto done;
    }
    if (!vc) vc = root; /* a vision-only config */
    if (!type || !(vc == root ? in_list(type, k_vision_types) : in_list(type, k_families))) {
        char got[64];
        if (type) snprintf(got, sizeof got, "'%.40s'", type);
        else json_describe(mt, got, sizeof got);
        s = err_fail(err, QVL_ERR_UNSUPPORTED, "%s: model_type is %s, not a Qwen3-VL family model (%s)", path, got,
                     vc == root ? "qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe, qwen3_5_vision, qwen3_5_moe_vision"
                                : "qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe");
        goto done;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", type);
    /* A vision-only config of a Qwen3.5 tower names itself qwen3_5_vision: report the family. */
    char *suffix = strstr(cfg->model_type, "_vision");
    if (suffix) *suffix = '\0';
    s = parse_vision(vc, path, cfg, err);
    if (s != QVL_OK) goto done;

    /* The merger's output width is the text model's hidden size. */
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON *th = tc ? cJSON_GetObjectItemCaseSensitive(tc, "hidden_size") : NULL;
    if (cJSON_IsNumber(th) && th->valuedouble != cfg->out_hidden)
        s = err_fail(err, QVL_ERR_FORMAT, "%s: vision_config.out_hidden_size %d differs from text_config.hidden_size "
                     "%.0f", path, cfg->out_hidden, th->valuedouble);
done:
    cJSON_Delete(root);
    return s;
}
