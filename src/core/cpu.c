/* cpu.c — CPU feature detection (contract in cpu.h). */
#include "core/cpu.h"

#include <stdatomic.h>

#if QVL_WITH_X86
#include <cpuid.h>
#endif

static int detect(void) {
#if QVL_WITH_X86 && defined(__GNUC__)
    /* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c". AVX2, FMA and the
     * AVX-512 subsets through the builtin, which also checks that the OS saves the YMM / ZMM and mask state. */
    unsigned a, b, c, d;
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    if (!f16c || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 1;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return 3;
    return 2;
#else
    return 1;
#endif
}

int cpu_level(void) {
    static _Atomic int level; /* 0: not asked yet; the answer never changes, so a race only asks twice */
    int l = atomic_load_explicit(&level, memory_order_relaxed);
    if (l == 0) {
        l = detect();
        atomic_store_explicit(&level, l, memory_order_relaxed);
    }
    return l;
}

static int detect_bf16(void) {
#if QVL_WITH_X86 && defined(__GNUC__)
    /* CPUID leaf 7 sub-leaf 1, EAX bit 5 (AVX512_BF16); the ZMM state is checked by the AVX-512 level. */
    unsigned a, b, c, d;
    if (cpu_level() < 3 || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 1;
    return (a & (1u << 5)) ? 2 : 1;
#else
    return 1;
#endif
}

int cpu_has_avx512bf16(void) {
    static _Atomic int has; /* 0: not asked yet, 1: no, 2: yes */
    int h = atomic_load_explicit(&has, memory_order_relaxed);
    if (h == 0) {
        h = detect_bf16();
        atomic_store_explicit(&has, h, memory_order_relaxed);
    }
    return h == 2;
}
