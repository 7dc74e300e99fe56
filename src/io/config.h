/* config.h — the vision tower's configuration, read from a checkpoint's config.json. */
#ifndef QVL_IO_CONFIG_H
#define QVL_IO_CONFIG_H

#include <stddef.h>

#include "qvl.h"

typedef enum tower_act { ACT_GELU_TANH = 0, ACT_GELU_ERF = 1 } tower_act;

typedef struct tower_config {
    char model_type[32];   /* top-level family: qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe */
    int depth, hidden, heads, head_dim, intermediate, out_hidden;
    int patch, temporal_patch, merge, in_channels, num_pos, pos_side;
    int row_len;           /* in_channels · temporal_patch · patch² */
    tower_act act;           /* block MLP activation (mergers always use erf GELU) */
    int n_deepstack;
    int deepstack_index[QVL_MAX_DEEPSTACK];
    float ln_eps;          /* 1e-6: hard-coded in the reference modeling code */
    float rope_theta;      /* 10000: hard-coded in the reference modeling code */
} tower_config;

/* Parse `path` (a config.json with a vision_config object, or a vision-only config). Absent fields take the
 * transformers class defaults of Qwen3VLVisionConfig; every value is range-checked. */
qvl_status config_load(const char *path, tower_config *cfg, qvl_error *err);
/* The same on `len` bytes of JSON text in memory (need not be NUL-terminated); `path` names it in errors. */
qvl_status config_parse(const char *text, size_t len, const char *path, tower_config *cfg, qvl_error *err);

#endif
