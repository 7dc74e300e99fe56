/* checkpoint.h — find a vision tower's weights on disk and describe them as a table of tensors.
 *
 * Sources, first match wins: the OptiQ sidecar optiq/optiq_vision.safetensors (the only source when present);
 * a sharded model.safetensors.index.json (only the shards holding tower tensors are opened); a single
 * model.safetensors. Name prefixes: model.visual., vision_tower., model.language_model.visual., visual.
 *
 * The table lists every tower tensor (a name under the prefix starting with patch_embed., pos_embed., blocks.,
 * merger. or deepstack_merger_list.) by its canonical name, the stored name without the prefix; where a name is in
 * several files the first file opened wins. Shapes are canonical (Hugging Face): a patch-embed Conv3d weight
 * stored in MLX order (out, kT, kH, kW, in) is listed with its HF shape (out, in, kT, kH, kW) and layout
 * CKPT_LAYOUT_MLX_CONV, its data left as stored for the reader to permute. The files are opened and their headers
 * validated; no tensor's bytes are read here (the reader reads them with st_read). Nothing here knows what the tower does
 * with a tensor: the reader asks for names and shapes with checkpoint_get. */
#ifndef QVL_IO_CHECKPOINT_H
#define QVL_IO_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "io/config.h"
#include "io/safetensors.h"
#include "qvl.h"

typedef enum ckpt_layout {
    CKPT_LAYOUT_STORED = 0,  /* data is in the order of `shape` */
    CKPT_LAYOUT_MLX_CONV = 1 /* a 5-D conv weight: `shape` is (out, in, kT, kH, kW), data is (out, kT, kH, kW, in) */
} ckpt_layout;

typedef struct ckpt_tensor {
    const char *name;           /* canonical: the stored name without the prefix ("blocks.3.attn.qkv.weight") */
    st_dtype stored_dtype;      /* as stored */
    qvl_dtype dtype;            /* the same, when `supported` */
    int supported;              /* stored as F32, F16 or BF16 */
    int ndim;
    int64_t shape[ST_MAX_DIMS]; /* canonical (HF) shape */
    int64_t stored_shape[ST_MAX_DIMS];
    ckpt_layout layout;
    const st_tensor *src;       /* the stored tensor in files[file], its bytes read with st_read */
    uint64_t nbytes;
    int file;                   /* index into checkpoint.files */
} ckpt_tensor;

typedef struct checkpoint {
    qvl_weight_source source;
    char prefix[40];        /* the tensor name prefix found, e.g. "model.visual." */
    st_file **files;        /* open files, in the order searched; owned until checkpoint_take_files */
    int n_files;
    ckpt_tensor *tensors;   /* sorted by canonical name */
    size_t n_tensors;
} checkpoint;

/* Find and open the weights of `dir`, detect the prefix, refuse a quantized tower, and list the tower tensors.
 * `cfg` says which conv shape is MLX order (its in_channels and patch). On failure *ck is empty and nothing
 * leaks; on success release it with checkpoint_close. */
qvl_status checkpoint_open(const char *dir, const tower_config *cfg, checkpoint *ck, qvl_error *err);

/* The entry for canonical `name`, or NULL. */
const ckpt_tensor *checkpoint_find(const checkpoint *ck, const char *name);

/* The entry for canonical `name`, checked: present (else QVL_ERR_SHAPE naming the stored name, the expected shape
 * and the files searched), of canonical shape `shape` (else QVL_ERR_SHAPE naming the file and both shapes in the
 * stored order) and stored as F32, F16 or BF16 (else QVL_ERR_UNSUPPORTED). */
qvl_status checkpoint_get(const checkpoint *ck, const char *name, int ndim, const int64_t *shape,
                          const ckpt_tensor **out, qvl_error *err);

/* Hand the open files over to the caller (who then st_closes each and frees the array); the table's names and
 * sources point into them, so they must outlive any use of it. */
void checkpoint_take_files(checkpoint *ck, st_file ***files, int *n_files);

/* Free the table and close any files not taken. Accepts an empty or NULL checkpoint. */
void checkpoint_close(checkpoint *ck);

#endif
