/* unit_rate.h — how fast this CPU's bf16 dot product (VDPBF16PS) runs beside its f32 FMA, measured.
 *
 * Whether the AVX512-BF16 kernels beat the f32 ones depends on the core, not on CPUID: VDPBF16PS measured twice
 * the AVX-512 FMA's FLOP rate on AMD Zen 4 and Zen 5, and half of it on Intel Sapphire/Emerald Rapids, whose bf16
 * speed is in the AMX tiles (which a hypervisor may hide from CPUID, leaving only AVX512-BF16 in sight). Precision
 * auto asks this (backend_cpu.c) instead of guessing from the vendor or model. */
#ifndef QVL_CPU_UNIT_RATE_H
#define QVL_CPU_UNIT_RATE_H

/* The FLOP rate of VDPBF16PS (16 lanes x 2 bf16 products) over that of the AVX-512 f32 FMA (16 lanes), on the
 * calling thread: each timed in short loops of independent chains, alternated (a warm-up pair first, for the
 * AVX-512 clock), best of several each, about 2 ms in all; a CPU whose rates differ by 2x in either direction
 * reads within a few percent of it. Call only where cpu_has_avx512bf16(). 0 if the clock failed. */
double unit_rate_bf16_dot_vs_fma(void);

#endif
