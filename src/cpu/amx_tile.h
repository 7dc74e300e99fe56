/* amx_tile.h — the AMX tile operations of the AMX kernels (gemm_amx.c, attention_amx.c), in one of two builds
 * of the same kernel source:
 *   - the instructions (x86-64, called only after cpu_amx_usable()): each operation is an inline-asm statement
 *     that names the memory it reads or writes, so the compiler can neither drop nor move the stores that fill a
 *     tile configuration or an operand buffer (gcc 12 at -O2 drops the stores filling the config before the
 *     usual `_tile_loadconfig(&cfg)` intrinsic, which does not tell it that LDTILECFG reads them); on 32-bit
 *     x86, which has no tile instructions, no-ops that are never called;
 *   - QVL_AMX_EMULATE (amx_emulated.c): a C model of the same instructions on any CPU, following the Intel SDM's
 *     pseudocode, so the kernels' layouts, blocking and edge handling are tested on machines without AMX. The
 *     model checks what the CPU would fault on (an unconfigured tile, shapes TDPBF16PS rejects, a bad config)
 *     and aborts with a message, as the instruction would raise #UD; it reads and writes memory through C, so
 *     AddressSanitizer sees every access.
 * Tile numbers are integer literals (or macros that expand to them).
 *
 * TDPBF16PS c, a, b as modelled (the SDM's pseudocode): for row m of c and column n, with K = a.colsb / 4 pairs,
 *   te = 0, to = 0;  for k in 0..K-1: te = fma(a[m][2k], b[k][2n], te); to = fma(a[m][2k+1], b[k][2n+1], to);
 *   c[m][n] = c[m][n] + (te + to)
 * in f32 with round to nearest even, denormal inputs read as zero and denormal results flushed to zero (each
 * step). Private to the library. */
#ifndef QVL_CPU_AMX_TILE_H
#define QVL_CPU_AMX_TILE_H

#include <stddef.h>
#include <stdint.h>

/* LDTILECFG's 64-byte operand (palette 1): bytes per row and rows of tiles 0-7, the rest zero. */
typedef struct amx_tilecfg {
    uint8_t palette;   /* 1 */
    uint8_t start_row; /* 0 */
    uint8_t reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile t (at most 64; entries 8-15 zero) */
    uint8_t rows[16];   /* rows of tile t (at most 16; entries 8-15 zero) */
} amx_tilecfg;
/* The layout LDTILECFG reads (Intel SDM): colsb at byte 16, rows at byte 48, 64 bytes in all. */
_Static_assert(sizeof(amx_tilecfg) == 64 && offsetof(amx_tilecfg, colsb) == 16 && offsetof(amx_tilecfg, rows) == 48,
               "amx_tilecfg is not LDTILECFG's 64-byte layout");

#define AMX_STR_(x) #x
#define AMX_STR(x) AMX_STR_(x)

#if QVL_AMX_EMULATE
/* Kernel functions get a suffix in the emulated build, so both builds link into one library. */
#define AMX_NAME(x) x##_emulated
void amx_emu_loadconfig(const amx_tilecfg *cfg);
void amx_emu_loadd(int t, const void *base, size_t stride);
void amx_emu_stored(int t, void *base, size_t stride);
void amx_emu_zero(int t);
void amx_emu_dpbf16ps(int c, int a, int b);
void amx_emu_release(void);
#define AMX_LOADCONFIG(cfg) amx_emu_loadconfig(cfg)
#define AMX_LOADD(t, base, stride) amx_emu_loadd((t), (base), (size_t)(stride))
#define AMX_STORED(t, base, stride) amx_emu_stored((t), (base), (size_t)(stride))
#define AMX_ZERO(t) amx_emu_zero(t)
#define AMX_DPBF16PS(c, a, b) amx_emu_dpbf16ps((c), (a), (b))
#define AMX_RELEASE() amx_emu_release()
#define AMX_PREFETCH_L2(p) ((void)(p))
#elif !defined(__x86_64__)
/* 32-bit x86 has no tile instructions (the assembler rejects them outside 64-bit mode), and cpu_amx_state() never
 * reports AMX usable there, so these kernels are compiled but never called: the operations do nothing. */
#define AMX_NAME(x) x
#define AMX_LOADCONFIG(cfg) ((void)(cfg))
#define AMX_LOADD(t, base, stride) ((void)(t), (void)(base), (void)(stride))
#define AMX_STORED(t, base, stride) ((void)(t), (void)(base), (void)(stride))
#define AMX_ZERO(t) ((void)(t))
#define AMX_DPBF16PS(c, a, b) ((void)(c), (void)(a), (void)(b))
#define AMX_RELEASE() ((void)0)
#define AMX_PREFETCH_L2(p) ((void)(p))
#else
#define AMX_NAME(x) x
/* The "m" operand is the whole 64-byte config: the compiler sees LDTILECFG read every byte of it. */
#define AMX_LOADCONFIG(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(const amx_tilecfg *)(cfg)) : "memory")
#define AMX_LOADD(t, base, stride)                                                                                   \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" AMX_STR(t)::"r"((const void *)(base)), "r"((long)(stride))        \
                     : "memory")
#define AMX_STORED(t, base, stride)                                                                                  \
    __asm__ volatile("tilestored %%tmm" AMX_STR(t) ", (%0,%1,1)" ::"r"((void *)(base)), "r"((long)(stride))         \
                     : "memory")
#define AMX_ZERO(t) __asm__ volatile("tilezero %%tmm" AMX_STR(t)::)
/* AT&T operand order: tdpbf16ps b, a, c computes c += a·b. */
#define AMX_DPBF16PS(c, a, b)                                                                                        \
    __asm__ volatile("tdpbf16ps %%tmm" AMX_STR(b) ", %%tmm" AMX_STR(a) ", %%tmm" AMX_STR(c)::)
#define AMX_RELEASE() __asm__ volatile("tilerelease" ::: "memory")
/* A hint that the line holding p will be read soon, towards L2 (PREFETCHT1; never faults). */
#define AMX_PREFETCH_L2(p) __asm__ volatile("prefetcht1 %0" ::"m"(*(const char *)(p)))
#endif

/* A config with every tile of `n` (n <= 8) shaped rows[t] x colsb[t]. */
static inline void amx_tilecfg_set(amx_tilecfg *cfg, int n, const uint8_t *rows, const uint16_t *colsb) {
    uint8_t *p = (uint8_t *)cfg;
    for (size_t i = 0; i < sizeof *cfg; i++) p[i] = 0;
    cfg->palette = 1;
    for (int t = 0; t < n; t++) {
        cfg->rows[t] = rows[t];
        cfg->colsb[t] = colsb[t];
    }
}

#endif
