/* remote.c — tests only: backends whose memory is not the host's, as a GPU's is not. Each wraps a CPU entry and
 * runs its kernels, but hands out addresses 2^52 bytes above the host memory they stand for: no user-space host
 * address is that high (x86-64 user space stays below 2^47 unless asked, AArch64's below 2^48), and there an
 * address is not canonical on x86-64 (with 4-level paging) and outside both translation ranges on AArch64 (bits
 * 48-55 set; top-byte-ignore covers only 56-63), so a read or write through one faults at once. Every operation takes such addresses back down before
 * it calls the wrapped entry. So a forward pass that gives the same bits on a remote entry as on the entry it wraps
 * has reached the backend's memory only through its operations (the tower's whole seam: allocations, uploads,
 * downloads, the row operations), as a GPU backend needs.
 *
 * A host pointer passed where the backend's memory is expected (a missed upload) is used as it is, so the encode
 * still completes, and is counted (backend_remote_strays): the entries' status reports it, as a GPU backend reports
 * a failure its operations could not return, so the load or encode fails with QVL_ERR_BACKEND naming the first
 * operation. Unlike a GPU's, the count is the process's and never cleared: after one stray every load and encode
 * on a remote entry fails, which is what a test wants. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/remote.h"
#include "core/error.h"

#if UINTPTR_MAX > 0xffffffffu
#define REMOTE_OFFSET ((uintptr_t)1 << 52)
static int is_remote(const void *p) { return (uintptr_t)p >= REMOTE_OFFSET; }
#else /* a 32-bit address space has none to spare: the host's addresses, and no stray can be told */
#define REMOTE_OFFSET ((uintptr_t)0)
static int is_remote(const void *p) { return p != NULL; }
#endif

static atomic_long strays;
static _Atomic(const char *) first_stray; /* the operation of the first */

long backend_remote_strays(void) { return atomic_load(&strays); }

static qvl_status r_status(const backend *be, qvl_error *err) {
    const long n = atomic_load(&strays);
    if (n == 0) return QVL_OK;
    return err_fail(err, QVL_ERR_BACKEND, "backend %s: %ld host addresses were handed to its operations where its own "
                    "memory was expected (the first to %s)", be->name, n, atomic_load(&first_stray));
}

/* The host address behind a remote one (NULL stays NULL). */
static void *host_of(const void *p, const char *what) {
    if (!p) return NULL;
    if (!is_remote(p)) {
        const char *none = NULL;
        atomic_compare_exchange_strong(&first_stray, &none, what);
        atomic_fetch_add(&strays, 1);
        return (void *)p;
    }
    return (void *)((uintptr_t)p - REMOTE_OFFSET);
}

static void *remote_of(const void *p) { return p ? (void *)((uintptr_t)p + REMOTE_OFFSET) : NULL; }

static const backend *inner(const backend *be) { return backend_cpu_entry((be_cpu_entry)be->inner); }

static void *r_alloc(const backend *be, size_t bytes) { return remote_of(inner(be)->alloc(inner(be), bytes)); }

static void r_release(const backend *be, void *p) { inner(be)->release(inner(be), host_of(p, "release")); }

static void r_upload(const backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(host_of(dst, "upload"), src, bytes);
}

static void r_download(const backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, host_of(src, "download"), bytes);
}

static void r_store_rows(const backend *be, const float *src, size_t lds, size_t rows, size_t cols, void *dst,
                         size_t ld, qvl_dtype dt, thread_pool *pool) {
    inner(be)->store_rows(inner(be), host_of(src, "store_rows"), lds, rows, cols, dst, ld, dt, pool);
}

/* The weight as the wrapped entry packed it: its panels at their host address. */
static be_weight weight_of(const be_weight *w, const char *what) {
    be_weight h = *w;
    h.data = host_of(w->data, what);
    return h;
}

static int r_pack(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N,
                  int K, be_arith ar, thread_pool *pool) {
    const int s = inner(be)->pack(inner(be), out, host_of(buf, "pack"), B, dtype, ldb, N, K, ar, pool);
    if (s == 0) out->data = remote_of(out->data);
    return s;
}

static int r_pack_qkv(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb,
                      int N, int K, int head_dim, be_arith ar, thread_pool *pool) {
    const int s = inner(be)->pack_qkv(inner(be), out, host_of(buf, "pack_qkv"), B, dtype, ldb, N, K, head_dim, ar,
                                      pool);
    if (s == 0) out->data = remote_of(out->data);
    return s;
}

static void r_linear(const backend *be, const be_weight *w, const float *A, size_t lda, int M, const float *bias,
                     float *C, size_t ldc, int accumulate, be_act act, void *ws, int max_k, thread_pool *pool) {
    const be_weight h = weight_of(w, "linear");
    inner(be)->linear(inner(be), &h, host_of(A, "linear"), lda, M, host_of(bias, "linear"), host_of(C, "linear"), ldc,
                      accumulate, act, host_of(ws, "linear"), max_k, pool);
}

static void r_linear_packed(const backend *be, const be_weight *w, const float *A, size_t lda, const void *A_packed,
                            int M, const float *bias, float *C, size_t ldc, void *C_packed, int accumulate, be_act act,
                            void *ws, int max_k, thread_pool *pool) {
    const char *n = "linear_packed";
    const be_weight h = weight_of(w, n);
    inner(be)->linear_packed(inner(be), &h, host_of(A, n), lda, host_of(A_packed, n), M, host_of(bias, n),
                             host_of(C, n), ldc, host_of(C_packed, n), accumulate, act, host_of(ws, n), max_k, pool);
}

static void r_layernorm_packed(const backend *be, const float *x, size_t ldx, void *y, size_t rows, size_t cols,
                               const float *w, const float *b, float eps, void *ws, thread_pool *pool) {
    const char *n = "layernorm_packed";
    inner(be)->layernorm_packed(inner(be), host_of(x, n), ldx, host_of(y, n), rows, cols, host_of(w, n),
                                host_of(b, n), eps, host_of(ws, n), pool);
}

static void r_qkv_rope(const backend *be, const be_weight *w, const float *A, size_t lda, const void *A_packed, int M,
                       const float *bias, const float *cos_t, const float *sin_t, void *qkv_op, void *ws, int max_k,
                       thread_pool *pool) {
    const char *n = "qkv_rope";
    const be_weight h = weight_of(w, n);
    inner(be)->qkv_rope(inner(be), &h, host_of(A, n), lda, host_of(A_packed, n), M, host_of(bias, n),
                        host_of(cos_t, n), host_of(sin_t, n), host_of(qkv_op, n), host_of(ws, n), max_k, pool);
}

static void r_attention(const backend *be, const be_attn *a, void *ws, thread_pool *pool) {
    const char *n = "attention";
    be_attn h = *a; /* cu is the host's (be_attn) */
    h.q = host_of(a->q, n), h.k = host_of(a->k, n), h.v = host_of(a->v, n), h.out = host_of(a->out, n);
    h.scratch = host_of(a->scratch, n), h.qkv_op = host_of(a->qkv_op, n), h.out_packed = host_of(a->out_packed, n);
    inner(be)->attention(inner(be), &h, host_of(ws, n), pool);
}

static void r_layernorm(const backend *be, const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols,
                        const float *w, const float *b, float eps, thread_pool *pool) {
    const char *n = "layernorm";
    inner(be)->layernorm(inner(be), host_of(x, n), ldx, host_of(y, n), ldy, rows, cols, host_of(w, n), host_of(b, n),
                         eps, pool);
}

static void r_rope(const backend *be, float *qkv, size_t ld, size_t rows, int heads, int head_dim, const float *cos_t,
                   const float *sin_t, thread_pool *pool) {
    const char *n = "rope";
    inner(be)->rope(inner(be), host_of(qkv, n), ld, rows, heads, head_dim, host_of(cos_t, n), host_of(sin_t, n), pool);
}

static void r_add_rows(const backend *be, float *x, size_t ldx, const float *y, size_t ldy, size_t rows, size_t cols,
                       thread_pool *pool) {
    inner(be)->add_rows(inner(be), host_of(x, "add_rows"), ldx, host_of(y, "add_rows"), ldy, rows, cols, pool);
}

/* A remote entry: the wrapped entry's descriptor (sizes, alignment, precision, which optional operations it has),
 * its operations replaced by the wrappers above, its memory remote. */
static backend remote_wrap(be_cpu_entry e, const char *name) {
    const backend *in = backend_cpu_entry(e);
    backend b = *in;
    b.name = name;
    b.inner = (int)e;
    b.test_only = 1;
    b.host_memory = 0;
    b.pack = r_pack, b.linear = r_linear, b.attention = r_attention, b.layernorm = r_layernorm, b.rope = r_rope;
    b.add_rows = r_add_rows, b.alloc = r_alloc, b.release = r_release, b.upload = r_upload, b.download = r_download;
    b.store_rows = r_store_rows, b.status = r_status;
    b.linear_packed = in->linear_packed ? r_linear_packed : NULL;
    b.layernorm_packed = in->layernorm_packed ? r_layernorm_packed : NULL;
    b.pack_qkv = in->pack_qkv ? r_pack_qkv : NULL;
    b.qkv_rope = in->qkv_rope ? r_qkv_rope : NULL;
    return b;
}

static backend entries[3];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    entries[0] = remote_wrap(BE_CPU_F32_PORTABLE, "remote");
    entries[1] = remote_wrap(BE_CPU_BF16_PORTABLE, "remote-bf16");
    entries[2] = remote_wrap(BE_CPU_BF16_AMX_EMULATED, "remote-amx");
}

const backend *backend_remote_entries(size_t *n) {
    pthread_once(&once, init);
    *n = sizeof entries / sizeof entries[0];
    return entries;
}
