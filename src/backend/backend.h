/* backend.h — the compute backend the tower runs on: one descriptor (kernel set + arithmetic precision) chosen
 * when the model is loaded, its memory, and the operations the forward pass (src/model/tower.c) calls through it.
 *
 * The tower knows nothing of ISAs, tile sizes, panel layouts or where the backend's memory is: it asks the backend
 * to allocate its weights and activations (alloc), to pack each Linear's weight once (backend_pack), to size its
 * workspaces, to move host data in and out (upload, download, store_rows), and then to run
 *   - linear:    C[M, N] (=|+=) act(A[M, K] · Wᵀ + bias), A and C float32 (row strides lda, ldc), W packed;
 *                with accumulate, C = C + act(A·Wᵀ + bias) (the residual add);
 *   - attention: softmax(q·kᵀ·scale)·v over segments, per head (no mask, no n×n matrix);
 *   - layernorm: row-wise, statistics in double (see the cpu implementation);
 *   - rope, add_rows: the rotary embedding and the position table's add;
 * and, where it has them, the same operations on operands in its own layouts (packed_size and below). Every
 * pointer an operation takes is the backend's memory (from alloc, or an offset into it) unless its comment says
 * host; the tower computes addresses in it but never reads or writes through them. A backend whose memory is the
 * host's (host_memory: the CPU entries) may also be handed host buffers directly (the caller's pixel rows and
 * float32 outputs), which saves the copies. Every operation threads over the pool it is given and its result does
 * not depend on the thread count.
 *
 * The backends are entries of one table (table.c): the CPU entries of backend_cpu.c (f32 portable, f32 AVX2, f32
 * AVX-512, bf16 on AMX tiles, bf16 on AVX512-BF16 (VDPBF16PS) and its portable reference, and, tests only, the AMX
 * set over a C model of the tile instructions) and, tests only, remote.c's models of a backend whose memory is not
 * the host's; backend_select (select.c) picks one for a load. A NEON or a CUDA backend is a new entry there and
 * touches no caller. Private to the library. */
#ifndef QVL_BACKEND_BACKEND_H
#define QVL_BACKEND_BACKEND_H

#include <stddef.h>

#include "core/pool.h"
#include "qvl.h"

/* Epilogue of a linear, applied in f32 on the accumulators (values equal to the cpu GEMM's gemm_epilogue). */
typedef enum be_act { BE_ACT_NONE = 0, BE_ACT_GELU_TANH = 1, BE_ACT_GELU_ERF = 2 } be_act;

/* Arithmetic of one packed weight's GEMM. F32: A and W widened to f32, f32 FMA chain. BF16: A rounded to bf16
 * (nearest even) while packing, W stored as bf16, bf16 products accumulated in f32. BF16X2 (backends with
 * `split`; only for weights stored as bf16, which it then multiplies exactly): A split into two bf16 terms,
 * hi = bf16(a) and lo = bf16(a − hi), both multiplied by W and accumulated in f32 — a to 16 significant bits
 * (about 2^-17 relative) instead of 8, at twice BF16's tile work: for the small GEMMs (patch embedding, mergers)
 * that bf16 would cost fidelity and f32 would cost time on AMX. */
typedef enum be_arith { BE_ARITH_F32 = 0, BE_ARITH_BF16 = 1, BE_ARITH_BF16X2 = 2 } be_arith;

/* A weight [N, K] packed once at load into the backend's panel layout. The fields are the backend's to read;
 * callers keep the struct and the memory (backend_pack_size bytes, 64-byte aligned) alive while it is used. */
typedef struct be_weight {
    int N, K;
    qvl_dtype dtype; /* panel element type: QVL_DTYPE_F32 or QVL_DTYPE_BF16 */
    unsigned order;  /* element order of bf16 panels (cpu/gemm.h, gemm_bf16_order) */
    be_arith arith;
    int kp_panel;    /* bf16 panels: pair steps stored per 16-column panel ((K + 1) / 2, or padded to whole tiles) */
    const void *data;
    int rope_hd;     /* 0, or a block's qkv weight packed by pack_qkv in its rotary column order (heads of rope_hd) */
} be_weight;

typedef struct be_attn {
    const float *q, *k, *v; /* rotary applied; head h at columns [h·hd, (h+1)·hd) */
    size_t ldq, ldk, ldv;
    float *out;
    size_t ldo;
    int n_heads, head_dim;
    const int *cu; /* host: cu[0] = 0 ... cu[n_seg] = S, the segment boundaries */
    int n_seg;
    float scale;
    void *scratch; /* free for the call (attn_args.scratch), or NULL */
    size_t scratch_bytes;
    /* Backends with qkv_rope: q, k, v from its operand instead (qkv_op; q, k, v and their strides unused), and with
     * out_packed the output as proj's linear_packed A operand (K = n_heads·head_dim) instead of out. */
    const void *qkv_op;
    void *out_packed;
} be_attn;

typedef struct backend backend;
struct backend {
    const char *name;      /* "avx512", "avx2", "portable", "avx512bf16", "portable-bf16" */
    int isa;               /* qvl_isa of its f32 GEMM kernels (QVL_ISA_AVX512, ..., 1 for portable) */
    qvl_precision precision;
    /* Row chunks of the MLPs should be multiples of this (the GEMM's M block), so chunking adds no partial tiles. */
    int m_align;
    /* Bytes for a [N, K] weight stored as `dtype`, packed for arithmetic `ar` (0 when N or K <= 0). */
    size_t (*pack_size)(int N, int K, qvl_dtype dtype, be_arith ar);
    /* Pack host B [N, K] (row stride ldb, stored dtype, may be unaligned) into buf; 0, or -1 for a bad shape. */
    int (*pack)(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                be_arith ar, thread_pool *pool);
    /* Workspace bytes of linear() on n_threads threads for weights with K <= max_k. */
    size_t (*linear_ws)(int n_threads, int max_k);
    /* ws: linear_ws(pool_size(pool), max_k) bytes with w->K <= max_k. */
    void (*linear)(const backend *be, const be_weight *w, const float *A, size_t lda, int M, const float *bias,
                   float *C, size_t ldc, int accumulate, be_act act, void *ws, int max_k, thread_pool *pool);
    /* Optional (NULL where the backend has none): its GEMM's own bf16 operand layout, so that a linear whose
     * result only feeds another linear's bf16 arithmetic hands it over without an f32 round trip (one pass less over
     * [M, N] each way, and no packing in the consumer). packed_size: bytes of an [M, K] operand in it. linear_packed:
     * linear() with A read from A_packed (an operand written by a linear_packed before, K = w->K; w->arith
     * BE_ARITH_BF16) instead of A, and/or the result written into C_packed (a next linear's [M, w->N] operand; not
     * with accumulate) instead of C; each pointer NULL for the plain f32 side. The bits are those of linear() into
     * C followed by the consumer's own packing of C. An operand's rows from r on (r a multiple of m_align) start
     * packed_size(r, K) bytes into it, so a chunk of rows is an operand of its own. */
    size_t (*packed_size)(int M, int K);
    /* layernorm() into that layout: y an [rows, cols] operand (K = cols) of a next linear. ws: linear_ws(
     * pool_size(pool), max_k) bytes with cols <= max_k. The bits of layernorm() followed by the consumer's packing. */
    void (*layernorm_packed)(const backend *be, const float *x, size_t ldx, void *y, size_t rows, size_t cols,
                             const float *w, const float *b, float eps, void *ws, thread_pool *pool);
    void (*linear_packed)(const backend *be, const be_weight *w, const float *A, size_t lda, const void *A_packed,
                          int M, const float *bias, float *C, size_t ldc, void *C_packed, int accumulate, be_act act,
                          void *ws, int max_k, thread_pool *pool);
    /* Optional (NULL where the backend has none): the block's attention half on its own operands. pack_qkv: pack()
     * for a block's qkv weight [3H, K] (Q, K, V of H = n_heads·head_dim columns each) in the column order qkv_rope
     * needs, setting out->rope_hd = head_dim; for a shape or arithmetic it does not take, pack() itself (rope_hd
     * 0). qkv_rope: linear() with a weight so packed, the rotary embedding (cos_t, sin_t [M, head_dim / 2],
     * tables_rope's) applied in its epilogue, Q, K, V written into qkv_op (qkv_op_size(M, N) bytes) for
     * attention's be_attn.qkv_op instead of C; A as linear_packed's. The bits of linear(), rope and the
     * attention's own rounding of its operands. */
    int (*pack_qkv)(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N,
                    int K, int head_dim, be_arith ar, thread_pool *pool);
    size_t (*qkv_op_size)(int M, int N);
    void (*qkv_rope)(const backend *be, const be_weight *w, const float *A, size_t lda, const void *A_packed, int M,
                     const float *bias, const float *cos_t, const float *sin_t, void *qkv_op, void *ws, int max_k,
                     thread_pool *pool);
    size_t (*attention_ws)(int head_dim, int n_threads);
    void (*attention)(const backend *be, const be_attn *a, void *ws, thread_pool *pool);
    void (*layernorm)(const backend *be, const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols,
                      const float *w, const float *b, float eps, thread_pool *pool);
    /* Rotate q and k of `qkv` in place (rows of stride ld: q at [0, H), k at [H, 2H), H = heads·head_dim) by the
     * tables cos_t, sin_t [rows, head_dim / 2] (tables_rope's): per pair (a, b) = (x[k], x[k + head_dim/2]),
     * a·cos − b·sin and b·cos + a·sin, each product rounded (no FMA). */
    void (*rope)(const backend *be, float *qkv, size_t ld, size_t rows, int heads, int head_dim, const float *cos_t,
                 const float *sin_t, thread_pool *pool);
    /* x[r, c] += y[r, c] for r < rows, c < cols (row strides ldx, ldy). */
    void (*add_rows)(const backend *be, float *x, size_t ldx, const float *y, size_t ldy, size_t rows, size_t cols,
                     thread_pool *pool);
    /* Memory. alloc: `bytes` of the backend's memory, 64-byte aligned, or NULL (out of memory); release(NULL) does
     * nothing. upload / download: `bytes` from host src into the backend's dst / from the backend's src into host
     * dst. store_rows: rows [rows, cols] of float32 in the backend's memory (row stride lds) into host dst (row
     * stride ld elements) as `dt` (f32, or bf16 / f16 rounded to nearest even). All three are done when they
     * return: the host reads dst, and may reuse src, right after. */
    void *(*alloc)(const backend *be, size_t bytes);
    void (*release)(const backend *be, void *p);
    void (*upload)(const backend *be, void *dst, const void *src, size_t bytes);
    void (*download)(const backend *be, void *dst, const void *src, size_t bytes);
    void (*store_rows)(const backend *be, const float *src, size_t lds, size_t rows, size_t cols, void *dst, size_t ld,
                       qvl_dtype dt, thread_pool *pool);
    int host_memory; /* 1: its memory is the host's (see above) */
    /* Optional (NULL: its operations cannot fail): whether an operation or transfer on the calling thread failed
     * since the last call, which the operations cannot return themselves (a GPU's launch, copy or allocation errors
     * surface later): QVL_OK, or the failure's status (QVL_ERR_BACKEND, QVL_ERR_NOMEM) with its cause in err; the
     * call clears it. The load asks after packing, the tower at the end of every encode that ran an operation,
     * failed or not (a failure is then the encode's own, and the backend's is cleared). */
    qvl_status (*status)(const backend *be, qvl_error *err);
    int kernel; /* the backend's own kernel-set index (private to its implementation) */
    int set;    /* its bf16 kernel set (private to its implementation) */
    int test_only; /* a model of other hardware (the emulated AMX set): tests only, never selected */
    int split;     /* it runs BE_ARITH_BF16X2 weights */
    int inner;     /* the be_cpu_entry a wrapping entry (remote.c) runs its operations on */
};

/* The backend for a kernel-set request and a precision into *out (AUTO resolved for this CPU: AVX-512, else
 * AVX2, else portable; auto precision: backend_auto_bf16's choice, else f32; bf16 on AMX where the
 * AMX set is usable (cpu_amx_usable() and its start-up check), else AVX512-BF16, else the portable bf16 set,
 * correct but slow). QVL_ISA_AMX: bf16 on AMX (precision f32 is refused: AMX has no f32 arithmetic);
 * QVL_ISA_AVX512 with bf16: the AVX512-BF16 set even where AMX exists (with auto: only by backend_auto_bf16's
 * measured rule, AMX left aside). QVL_ERR_UNSUPPORTED when this CPU lacks
 * what was asked, QVL_ERR_INVALID_ARG for unknown values. */
qvl_status backend_select(qvl_isa isa, qvl_precision precision, const backend **out, qvl_error *err);
/* The bf16 backend precision bf16 would choose on this CPU, or NULL (none: bf16 precision is refused). */
const backend *backend_bf16_available(void);
/* Which bf16 kernel set precision auto takes: BACKEND_AUTO_AMX where the AMX set is usable (amx_usable);
 * BACKEND_AUTO_AVX512BF16 where the CPU has AVX512-BF16 and its VDPBF16PS was measured at BACKEND_AUTO_MIN_DOT_RATE
 * times the f32 FMA's FLOP rate or more (dot_vs_fma, backend_bf16_dot_rate: twice on AMD Zen 4 and Zen 5, where
 * the set is 1.6-1.8x faster than f32); else BACKEND_AUTO_F32 — on Intel Sapphire/Emerald Rapids VDPBF16PS runs
 * at half the FMA rate, and the set was 1.4-1.9x slower than f32 and further from the reference
 * (docs/PERFORMANCE.md, sessions 22 and 33), both where the OS does not enable the AMX tiles and where a
 * hypervisor hides AMX from CPUID. 1.25 lies between the two measured rates (a factor 1.6 below 2.0, 2.5 above
 * 0.5); below it bf16 would buy little speed for its error. */
#define BACKEND_AUTO_MIN_DOT_RATE 1.25
enum { BACKEND_AUTO_F32 = 0, BACKEND_AUTO_AVX512BF16 = 1, BACKEND_AUTO_AMX = 2 };
int backend_auto_bf16(int amx_usable, int has_avx512bf16, double dot_vs_fma);
/* This CPU's VDPBF16PS : f32 FMA FLOP rate (unit_rate.h), measured on the first call (about 3 ms) and remembered
 * for the process; 0 without AVX512-BF16 (or x86 kernels). Thread-safe. */
double backend_bf16_dot_rate(void);
/* What precision auto runs on this CPU (with isa auto) and why, for `qvl info`: "bf16 on amx", "bf16 on
 * avx512bf16 (VDPBF16PS measured at 2.01x the f32 FMA rate)", "f32 (VDPBF16PS measured at 0.50x ...)". */
void backend_auto_describe(char *buf, size_t n);
/* The AMX set's state on this CPU for `qvl info`: cpu_amx_describe's phrase, or what its start-up check (a small
 * GEMM and attention against their definitions, run once per process) found. Sets *usable. */
const char *backend_amx_status(int *usable);
/* 1 when the AMX set is usable and the tiles gave its definitions' bits in the start-up check (0 when they gave a
 * correct sum in another order, or AMX is not usable): whether tests can compare the instructions bit for bit. */
int backend_amx_exact(void);
/* The AMX start-up check run over the C model of the tiles instead of the instructions (tests, any CPU): 2 when
 * it agrees with the definitions bit for bit, as the model must. */
int backend_amx_check_emulated(void);
/* The CPU entries backend_select picks from (backend_cpu.c), or NULL where this build has none (the x86 sets off
 * x86); BE_CPU_BF16_AMX_EMULATED: the AMX set over the C model of the tiles (tests only). */
typedef enum be_cpu_entry {
    BE_CPU_F32_PORTABLE, BE_CPU_F32_AVX2, BE_CPU_F32_AVX512, BE_CPU_BF16_PORTABLE, BE_CPU_BF16_AVX512, BE_CPU_BF16_AMX,
    BE_CPU_BF16_AMX_EMULATED
} be_cpu_entry;
const backend *backend_cpu_entry(be_cpu_entry e);
/* Whether the AMX set runs here: cpu_amx_usable() and its start-up check, asked once per process (on an AMX CPU
 * the first call requests the tile-data permission, so it is asked only where bf16 is). */
int backend_amx_usable(void);
/* Every backend of the table (tests): *n entries; some may not run on this CPU (backend_runs). */
const backend *const *backend_table(size_t *n);
/* The table's entry named `name` ("portable", "amx-emulated", "remote", ...), or NULL. */
const backend *backend_find(const char *name);
int backend_runs(const backend *be);

#endif
