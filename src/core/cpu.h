/* cpu.h — which CPU kernel set this machine runs, detected once per process. */
#ifndef QVL_CORE_CPU_H
#define QVL_CORE_CPU_H

/* QVL_WITH_X86 (0/1, set by CMake): the *_avx2.c / *_avx512.c kernels are compiled in. Off x86 they are not, the
 * dispatchers reference them only under #if QVL_WITH_X86, and cpu_level() is 1. */
#ifndef QVL_WITH_X86
#if defined(__x86_64__) || defined(__i386__)
#define QVL_WITH_X86 1
#else
#define QVL_WITH_X86 0
#endif
#endif

/* 1: portable C only; 2: AVX2 + FMA + F16C (the *_avx2.c files); 3: also AVX-512 F/BW/DQ/VL (the *_avx512.c
 * files). The same numbering as gemm_isa / attn_isa / qvl_isa. The first call asks CPUID (which traps to the
 * hypervisor on virtual machines); later calls read an atomic. Thread-safe. */
int cpu_level(void);

/* Nonzero when this CPU runs the *_avx2.c code (level 2 or more), the *_avx512.c code (which also uses
 * AVX2/FMA/F16C: level 3). */
static inline int cpu_has_avx2(void) { return cpu_level() >= 2; }
static inline int cpu_has_avx512(void) { return cpu_level() >= 3; }
/* Nonzero when this CPU runs the *_avx512bf16.c code: AVX-512 (level 3) and AVX512-BF16 (VDPBF16PS). */
int cpu_has_avx512bf16(void);

/* AMX-BF16 for this process. ABSENT: no AMX-TILE / AMX-BF16 in CPUID, or no AVX512-BF16 (which the AMX kernels'
 * packers use); NO_OS: the CPU has them but the OS does not enable the tile state (XCR0 bits 17-18); REFUSED:
 * Linux refused the tile data permission (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): a kernel before
 * 5.16, or a policy); USABLE: granted. The first call asks CPUID and XGETBV and requests the permission (for the
 * whole process, before any thread runs a tile instruction); later calls read an atomic. Thread-safe. */
typedef enum cpu_amx { CPU_AMX_ABSENT = 1, CPU_AMX_NO_OS = 2, CPU_AMX_REFUSED = 3, CPU_AMX_USABLE = 4 } cpu_amx;
cpu_amx cpu_amx_state(void);
static inline int cpu_amx_usable(void) { return cpu_amx_state() == CPU_AMX_USABLE; }
/* A phrase for `qvl info`: "usable", "absent", "present, but the OS does not enable the tile state", ... */
const char *cpu_amx_describe(cpu_amx s);

#endif
