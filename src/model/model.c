/* model.c — load, describe, fingerprint and free a vision tower. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/limits.h"
#include "core/params.h"
#include "core/pool.h"
#include "image/image_params.h"
#include "io/checkpoint.h"
#include "io/fileutil.h"
#include "model/model.h"

void qvl_model_free(qvl_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) st_close(m->files[i]);
    free(m->files);
    free(m->blocks);
    free(m->bound);
    free(m->owned_patch);
    free(m->owned_pos);
    if (m->be && m->small_be != m->small) m->be->release(m->be, m->small_be);
    free(m->small);
    if (m->be) m->be->release(m->be, m->panels);
    free(m);
}

static void fill_info(qvl_model *m) {
    const tower_config *c = &m->cfg;
    qvl_model_info *in = &m->info;
    snprintf(in->model_type, sizeof in->model_type, "%s", c->model_type);
    in->depth = c->depth;
    in->hidden = c->hidden;
    in->heads = c->heads;
    in->head_dim = c->head_dim;
    in->intermediate = c->intermediate;
    in->out_hidden = c->out_hidden;
    in->patch = c->patch;
    in->temporal_patch = c->temporal_patch;
    in->merge = c->merge;
    in->in_channels = c->in_channels;
    in->num_pos = c->num_pos;
    in->row_len = c->row_len;
    in->n_deepstack = c->n_deepstack;
    memcpy(in->deepstack_index, c->deepstack_index, sizeof in->deepstack_index);
    in->weight_dtype = m->blocks[0].qkv.w.dtype;
    in->isa = m->be->isa;
    in->precision = (int)m->be->precision;
    snprintf(in->backend, sizeof in->backend, "%s", m->be->name);
    const backend *bf = backend_bf16_available();
    snprintf(in->bf16_backend, sizeof in->bf16_backend, "%s", bf ? bf->name : "");
    int amx_usable;
    snprintf(in->amx, sizeof in->amx, "%s", backend_amx_status(&amx_usable));
    backend_auto_describe(in->auto_precision, sizeof in->auto_precision);
    in->n_tensors = m->n_bound;
    in->n_params = 0;
    in->weight_bytes = 0;
    for (size_t i = 0; i < m->n_bound; i++) {
        uint64_t n = 1;
        for (int d = 0; d < m->bound[i].ndim; d++) n *= (uint64_t)m->bound[i].shape[d];
        in->n_params += n;
        in->weight_bytes += m->bound[i].nbytes;
    }
}

/* Every Linear of the tower, in canonical order. */
static size_t linears(qvl_model *m, linear **out) {
    size_t n = 0;
    out[n++] = &m->patch;
    for (int i = 0; i < m->cfg.depth; i++) {
        out[n++] = &m->blocks[i].qkv;
        out[n++] = &m->blocks[i].proj;
        out[n++] = &m->blocks[i].fc1;
        out[n++] = &m->blocks[i].fc2;
    }
    out[n++] = &m->merger.fc1;
    out[n++] = &m->merger.fc2;
    for (int k = 0; k < m->cfg.n_deepstack; k++) {
        out[n++] = &m->deepstack[k].fc1;
        out[n++] = &m->deepstack[k].fc2;
    }
    return n;
}

/* ---- reading and checking each tensor ---------------------------------------------------------------------------
 * A NaN or an infinity anywhere in the tower's weights turns every embedding into NaN; a checkpoint is checked at
 * load, each tensor as it is read, so that it fails there with QVL_ERR_NONFINITE naming the tensor and the element
 * rather than returning NaN embeddings as a success. The pool's threads each read a chunk (pread; none when the
 * bytes are already in memory) and scan it while it is in their cache. */
typedef struct scan_job {
    const st_file *file; /* NULL: the bytes are at data already */
    const st_tensor *src;
    unsigned char *data;
    size_t n, esize;
    qvl_dtype dtype;
    atomic_size_t first; /* smallest non-finite index found (n: none) */
    pthread_mutex_t lock; /* guards the read error below */
    long err_chunk;       /* the lowest chunk whose read failed (-1: none), its error in err */
    qvl_error err;
} scan_job;

enum { SCAN_CHUNK = 1 << 18 }; /* elements */

static void scan_range(void *ctx, long c0, long c1, int thread) {
    (void)thread;
    scan_job *j = ctx;
    for (long c = c0; c < c1; c++) {
        const size_t i0 = (size_t)c * SCAN_CHUNK, n = j->n - i0 < SCAN_CHUNK ? j->n - i0 : SCAN_CHUNK;
        unsigned char *p = j->data + i0 * j->esize;
        if (j->file) {
            qvl_error e;
            err_clear(&e);
            if (st_read(j->file, j->src, i0 * j->esize, n * j->esize, p, &e) != QVL_OK) {
                pthread_mutex_lock(&j->lock);
                if (j->err_chunk < 0 || c < j->err_chunk) j->err_chunk = c, j->err = e;
                pthread_mutex_unlock(&j->lock);
                return;
            }
        }
        const size_t k = j->dtype == QVL_DTYPE_F32 ? first_nonfinite_f32(p, n)
                                                   : first_nonfinite_16(p, n, j->dtype == QVL_DTYPE_BF16);
        if (k == n) continue;
        size_t want = i0 + k, cur = atomic_load(&j->first);
        while (want < cur && !atomic_compare_exchange_weak(&j->first, &cur, want)) {
        }
    }
}

/* Read bound tensor t into dst (when it is not in memory already: data NULL) and find its first non-finite
 * element (*bad = n, its element count, when all are finite). */
static qvl_status read_scan(const bound_tensor *t, void *dst, size_t n, size_t *bad, thread_pool *pool,
                            qvl_error *err) {
    scan_job j = {.file = t->data ? NULL : t->file, .src = t->src, .data = t->data ? (void *)t->data : dst, .n = n,
                  .esize = t->dtype == QVL_DTYPE_F32 ? 4 : 2, .dtype = t->dtype, .err_chunk = -1};
    atomic_init(&j.first, n);
    if (pthread_mutex_init(&j.lock, NULL) != 0) return err_fail(err, QVL_ERR_NOMEM, "cannot create a mutex");
    if (n) pool_for(pool, (long)((n + SCAN_CHUNK - 1) / SCAN_CHUNK), 1, scan_range, &j);
    pthread_mutex_destroy(&j.lock);
    *bad = atomic_load(&j.first);
    if (j.err_chunk >= 0) return err_fail(err, j.err.status, "%s", j.err.message);
    return QVL_OK;
}

static qvl_status nonfinite_weight(const char *name, size_t i, int cols, qvl_error *err) {
    return err_fail(err, QVL_ERR_NONFINITE, "checkpoint tensor %s: element %zu (row %zu, column %zu) is NaN or "
                    "infinite; the weights must be finite", name, i, cols ? i / (size_t)cols : 0,
                    cols ? i % (size_t)cols : i);
}

/* Which Linears run in bf16 arithmetic under precision bf16: every block GEMM (97 % of the FLOPs of the 448²
 * Qwen3.5-27B tower) but the fc2 of the blocks feeding the first DeepStack feature (below). The patch embedding (0.4 %, on raw normalized pixels) and the mergers' fc1/fc2 (final and
 * DeepStack, 2.4 %) stay f32: measured at full depth (bench/bf16_fidelity.sh, 27 blocks at 448²), the merged
 * output's error against the fp32 oracle is 0.275 of transformers-bf16's with f32 mergers and 0.326 with bf16 ones
 * (docs/PARITY.md), and the encode takes about 2 % longer on AVX512-BF16. On AMX (backends with `split`) they
 * run as BF16X2 instead where their weights are stored as bf16. */
static be_arith arith_of(const qvl_model *m, const linear *l) {
    if (m->be->precision != QVL_PRECISION_BF16) return BE_ARITH_F32;
    int small = l == &m->patch || l == &m->merger.fc1 || l == &m->merger.fc2;
    for (int d = 0; d < m->cfg.n_deepstack; d++)
        if (l == &m->deepstack[d].fc1 || l == &m->deepstack[d].fc2) small = 1;
    /* fc2 of the blocks up to the first DeepStack tap too: the first DeepStack feature is taken after a few
     * blocks, where transformers' own bf16 error is still small, and bf16 fc2 operands (the GELU output) alone
     * put it at 0.36 of that error at full depth (Qwen3-VL-2B, 64 rows); with these fc2 kept precise it is 0.27,
     * and the later features and the merged output improve too (docs/PARITY.md). Costs a quarter of those
     * blocks' bf16 time (6 of 24 blocks on the 2B). */
    if (!small && m->cfg.n_deepstack > 0)
        for (int b = 0; b <= m->cfg.deepstack_index[0] && b < m->cfg.depth; b++)
            if (l == &m->blocks[b].fc2) small = 1;
    if (!small) return BE_ARITH_BF16;
    /* On tiles (AMX) f32 would run at a fourteenth of the tile rate: split A into two bf16 terms instead, which
     * multiplies bf16-stored weights exactly and A to 16 significant bits. Other weights stay f32. */
    return m->be->split && l->w.dtype == QVL_DTYPE_BF16 ? BE_ARITH_BF16X2 : BE_ARITH_F32;
}

/* The fingerprint's header for one tensor: name, NUL, dtype name, NUL, ndim and dims as little-endian u64, byte
 * count. Its bytes follow (fingerprint_bytes). */
static void fingerprint_header(XXH3_state_t *st, const bound_tensor *t) {
    const char *dt = qvl_dtype_name(t->dtype);
    unsigned char le[8];
    XXH3_128bits_update(st, t->name, strlen(t->name) + 1);
    XXH3_128bits_update(st, dt, strlen(dt) + 1);
    uint64_t vals[7] = {(uint64_t)t->ndim};
    for (int d = 0; d < t->ndim; d++) vals[1 + d] = (uint64_t)t->shape[d];
    vals[1 + t->ndim] = t->nbytes;
    for (int v = 0; v < t->ndim + 2; v++) {
        for (int k = 0; k < 8; k++) le[k] = (unsigned char)(vals[v] >> (8 * k));
        XXH3_128bits_update(st, le, 8);
    }
}

/* Index in ls of the Linear whose weight is bound tensor i (n_ls: a vector or the position table). */
static size_t linear_of(linear *const *ls, size_t n_ls, size_t i) {
    size_t k = 0;
    while (k < n_ls && ls[k]->w.bound != i) k++;
    return k;
}

static int is_block_qkv(const qvl_model *m, const linear *l) {
    for (int b = 0; b < m->cfg.depth; b++)
        if (l == &m->blocks[b].qkv) return 1;
    return 0;
}

/* One pass over every bound tensor in canonical order, each read from its file once (into `bounce`, or the
 * position table straight into owned_pos; bind made the MLX conv weight's bytes itself): check it is finite; if it
 * is a Linear's weight, pack it into GEMM panels at byte off[k] of m->panels for ls[k] (bf16 stays bf16: the panels
 * take the checkpoint's own bytes); and hash it into the fingerprint: XXH3-128 over a versioned header, then per
 * tensor in canonical order its header and bytes (the conv weight in HF layout whatever was stored). */
static qvl_status load_pass(qvl_model *m, linear *const *ls, size_t n_ls, const size_t *off, void *bounce,
                            thread_pool *pool, XXH3_state_t *st, qvl_error *err) {
    static const char tag[] = "qvl-fingerprint-v1";
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, tag, sizeof tag);
    for (size_t i = 0; i < m->n_bound; i++) {
        const bound_tensor *t = &m->bound[i];
        const size_t k = linear_of(ls, n_ls, i);
        linear *l = k < n_ls ? ls[k] : NULL;
        const void *data = t->data ? t->data : i == m->pos.bound ? m->owned_pos : bounce;
        const size_t n = (size_t)t->nbytes / (t->dtype == QVL_DTYPE_F32 ? 4 : 2);
        size_t bad = n;
        TRY(read_scan(t, (void *)data, n, &bad, pool, err));
        if (bad < n) {
            const int cols = l ? l->w.cols : t->ndim >= 2 ? (int)t->shape[t->ndim - 1] : 0;
            char name[128]; /* an MLX-layout conv weight is scanned as permuted: its row and column are HF's */
            snprintf(name, sizeof name, "%s%s", t->name,
                     l == &m->patch && m->info.conv_layout_mlx ? " (as permuted from MLX layout)" : "");
            return nonfinite_weight(name, bad, cols, err);
        }
        const int pack = l && !m->describe_only;
        unsigned char *panel = pack ? (unsigned char *)m->panels + off[k] : NULL;
        const backend *be = m->be;
        /* a block's qkv for the backend's qkv_rope where it has one (the rotary embedding in the GEMM's epilogue) */
        const int qkv = pack && be->pack_qkv && is_block_qkv(m, l);
        if (pack && (qkv ? be->pack_qkv(be, &l->packed, panel, data, l->w.dtype, (size_t)l->w.cols, l->w.rows,
                                        l->w.cols, m->cfg.head_dim, arith_of(m, l), pool)
                         : be->pack(be, &l->packed, panel, data, l->w.dtype, (size_t)l->w.cols, l->w.rows, l->w.cols,
                                    arith_of(m, l), pool)) != 0)
            return err_fail(err, QVL_ERR_INTERNAL, "packing a %dx%d weight failed", l->w.rows, l->w.cols);
        fingerprint_header(st, t);
        XXH3_128bits_update(st, data, (size_t)t->nbytes);
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(st));
    memcpy(m->fp, canon.digest, 16);
    return QVL_OK;
}

/* Read the weights in (load_pass), the one tensor the forward reads in its stored form, the position table, into
 * memory of the model's own, and close the checkpoint's files: a loaded model holds no file, so the files may be
 * rewritten, truncated or deleted under it (a server's model directory updated in place) without the forward or
 * the fingerprint ever reading the new bytes. The files are read (pread), never mapped, so a file that shrinks or
 * fails to read during the load fails it with QVL_ERR_IO instead of raising SIGBUS. */
static qvl_status load_weights(qvl_model *m, int n_threads, qvl_error *err) {
    const size_t cap = 3 + 4 * (size_t)m->cfg.depth + 2 * (size_t)m->cfg.n_deepstack;
    linear **ls = malloc(cap * sizeof *ls);
    size_t *off = malloc(cap * sizeof *off);
    XXH3_state_t *st = XXH3_createState();
    thread_pool *pool = NULL; /* the load's own threads, gone when it is done */
    qvl_status s = QVL_OK;
    if (!ls || !off || !st) s = err_fail(err, QVL_ERR_NOMEM, "out of memory loading weights");
    const size_t n = s == QVL_OK ? linears(m, ls) : 0;
    size_t total = 0;
    for (size_t i = 0; i < n && s == QVL_OK && !m->describe_only; i++) {
        const wmat *w = &ls[i]->w;
        off[i] = total;
        if (size_add_overflow(total, m->be->pack_size(w->rows, w->cols, w->dtype, arith_of(m, ls[i])), &total))
            s = err_fail(err, QVL_ERR_LIMIT, "packed weights overflow");
    }
    if (s == QVL_OK && !m->describe_only && !(m->panels = m->be->alloc(m->be, total)))
        s = err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes of packed weights", total);
    /* the vectors where the backend reads them: a copy in its memory unless that is the host's */
    m->small_be = m->small;
    if (s == QVL_OK && !m->describe_only && !m->be->host_memory) {
        if (!(m->small_be = m->be->alloc(m->be, m->n_small * sizeof(float))))
            s = err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes of vectors", m->n_small * sizeof(float));
        else
            m->be->upload(m->be, m->small_be, m->small, m->n_small * sizeof(float));
    }
    const size_t pos_bytes = (size_t)m->pos.rows * (size_t)m->pos.cols * (m->pos.dtype == QVL_DTYPE_F32 ? 4 : 2);
    if (s == QVL_OK && !(m->owned_pos = malloc(pos_bytes ? pos_bytes : 1)))
        s = err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes for the position table", pos_bytes);
    size_t most = 64; /* the largest tensor read through the bounce buffer */
    for (size_t i = 0; i < m->n_bound; i++)
        if (i != m->pos.bound && !m->bound[i].data && m->bound[i].nbytes > most) most = (size_t)m->bound[i].nbytes;
    void *bounce = s == QVL_OK ? aligned_alloc(64, (most + 63) & ~(size_t)63) : NULL;
    if (s == QVL_OK && !bounce) s = err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes to read weights", most);
    if (s == QVL_OK) s = pool_create(&pool, n_threads, err);
    if (s == QVL_OK) s = load_pass(m, ls, n, off, bounce, pool, st, err);
    if (s == QVL_OK && m->be->status) s = m->be->status(m->be, err); /* the packing and uploads went well */
    pool_destroy(pool);
    free(bounce);
    XXH3_freeState(st);
    free(off);
    if (s == QVL_OK) {
        m->pos.data = m->owned_pos;
        /* Nothing points into the files from here on: the matrices are read only as panels, and the rest was
         * widened into `small` or read into owned_pos. */
        for (size_t i = 0; i < m->n_bound; i++) {
            m->bound[i].data = NULL;
            m->bound[i].file = NULL;
            m->bound[i].src = NULL;
        }
        free(m->owned_patch);
        m->owned_patch = NULL;
        m->info.n_files = m->n_files;
        for (int i = 0; i < m->n_files; i++) st_close(m->files[i]);
        free(m->files);
        m->files = NULL;
        m->n_files = 0;
    }
    free(ls);
    return s;
}

const char *qvl_isa_name(int isa) {
    switch (isa) {
    case QVL_ISA_AUTO: return "auto";
    case 1: return "portable";
    case QVL_ISA_AVX2: return "avx2";
    case QVL_ISA_AVX512: return "avx512";
    case QVL_ISA_AMX: return "amx";
    default: return "unknown";
    }
}

const char *qvl_precision_name(int precision) {
    switch (precision) {
    case QVL_PRECISION_F32: return "f32";
    case QVL_PRECISION_BF16: return "bf16";
    case QVL_PRECISION_AUTO: return "auto";
    default: return "unknown";
    }
}

static void load_defaults(qvl_load_params *p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->isa = QVL_ISA_AUTO;
    p->n_threads = 0;
    p->precision = QVL_PRECISION_F32;
    p->describe_only = 0;
}

void qvl_load_params_init(qvl_load_params *p, size_t struct_size) {
    qvl_load_params d;
    load_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

qvl_status model_load_on(const char *dir, const qvl_load_params *params, const backend *on, qvl_model **out,
                         qvl_error *err) {
    err_clear(err);
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: out is NULL");
    *out = NULL;
    if (!dir) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: dir is NULL");
    if (!*dir) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: dir is the empty string");
    qvl_load_params lp;
    load_defaults(&lp);
    TRY(params_take(&lp, sizeof lp, params, "qvl_load_params", err));
    if (lp.describe_only != 0 && lp.describe_only != 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: describe_only is %d (0 or 1)", lp.describe_only);
    if (lp.reserved1 != 0)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: qvl_load_params.reserved1 is %d (must be 0: "
                        "initialise the struct with qvl_load_params_default)", lp.reserved1);
    if (lp.n_threads < 0 || lp.n_threads > QVL_MAX_THREADS)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: n_threads %d is outside 0..%d (0: one per CPU)",
                        lp.n_threads, QVL_MAX_THREADS);
    const backend *be = on;
    if (!be) TRY(backend_select(lp.isa, lp.precision, &be, err));
    qvl_model *m = calloc(1, sizeof *m);
    if (!m) return err_fail(err, QVL_ERR_NOMEM, "out of memory");
    m->be = be;
    m->describe_only = lp.describe_only;
    char path[4096];
    qvl_status s = fu_join(path, sizeof path, dir, "config.json", err);
    if (s == QVL_OK) s = config_load(path, &m->cfg, err);
    if (s == QVL_OK) {
        preprocess_defaults(&m->pre);
        video_defaults(&m->pre_video);
        m->pre_status = qvl_preprocess_params_load(dir, &m->pre, &m->pre_video, &m->pre_err);
        /* out of memory is not the files' fault: fail the load rather than every plan of the model's life */
        if (m->pre_status == QVL_ERR_NOMEM) s = err_fail(err, QVL_ERR_NOMEM, "%s", m->pre_err.message);
    }
    if (s == QVL_OK) {
        checkpoint ck;
        s = checkpoint_open(dir, &m->cfg, &ck, err);
        if (s == QVL_OK) s = model_bind(m, &ck, err);
        if (s == QVL_OK) checkpoint_take_files(&ck, &m->files, &m->n_files); /* the bound tensors point into them */
        checkpoint_close(&ck);
    }
    if (s == QVL_OK) s = load_weights(m, lp.n_threads, err);
    if (s != QVL_OK) {
        qvl_model_free(m);
        return s;
    }
    fill_info(m);
    *out = m;
    return QVL_OK;
}

qvl_status qvl_model_load(const char *dir, const qvl_load_params *params, qvl_model **out, qvl_error *err) {
    return model_load_on(dir, params, NULL, out, err);
}

void qvl_model_get_info_sized(const qvl_model *m, qvl_model_info *info, size_t size) {
    if (!info) return;
    memset(info, 0, size);
    if (m) memcpy(info, &m->info, size < sizeof m->info ? size : sizeof m->info);
}

qvl_status qvl_model_fingerprint(qvl_model *m, uint8_t digest[16], char hex[33], qvl_error *err) {
    err_clear(err);
    if (!m) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_fingerprint: model is NULL");
    if (digest) memcpy(digest, m->fp, 16);
    if (hex) {
        for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", m->fp[i]);
    }
    return QVL_OK;
}
