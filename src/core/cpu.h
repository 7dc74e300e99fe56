/* cpu.h — which CPU kernel set this machine runs, detected once per process. */
#ifndef QVL_CORE_CPU_H
#define QVL_CORE_CPU_H

/* 1: portable C only; 2: AVX2 + FMA + F16C (the *_avx2.c files); 3: also AVX-512 F/BW/DQ/VL (the *_avx512.c
 * files). The same numbering as gemm_isa / attn_isa / qvl_isa. The first call asks CPUID (which traps to the
 * hypervisor on virtual machines); later calls read an atomic. Thread-safe. */
int qvl_cpu_level(void);

#endif
