/* cpu.c — CPU feature detection (contract in cpu.h). */
#include "core/cpu.h"

#include <stdatomic.h>

#if QVL_WITH_X86
#include <cpuid.h>
#endif
#if QVL_WITH_X86 && defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
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

static cpu_amx detect_amx(void) {
#if QVL_WITH_X86 && defined(__GNUC__) && defined(__x86_64__)
    /* CPUID leaf 7 sub-leaf 0 EDX: bit 22 AMX-BF16, bit 24 AMX-TILE; leaf 1 ECX bit 27: OSXSAVE (XGETBV). */
    unsigned a, b, c, d;
    if (!cpu_has_avx512bf16() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return CPU_AMX_ABSENT;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return CPU_AMX_ABSENT;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return CPU_AMX_NO_OS;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & (3u << 17)) != (3u << 17)) return CPU_AMX_NO_OS;
#if defined(__linux__)
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): without it the first tile instruction is SIGILL. */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return CPU_AMX_REFUSED;
#endif
    return CPU_AMX_USABLE;
#else
    return CPU_AMX_ABSENT;
#endif
}

cpu_amx cpu_amx_state(void) {
    static _Atomic int state; /* 0: not asked yet; the request is idempotent, so a race only asks twice */
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (s == 0) {
        s = (int)detect_amx();
        atomic_store_explicit(&state, s, memory_order_release);
    }
    return (cpu_amx)s;
}

const char *cpu_amx_describe(cpu_amx s) {
    switch (s) {
    case CPU_AMX_USABLE: return "usable (tile data permission granted)";
    case CPU_AMX_NO_OS: return "present, but the OS does not enable the tile state (XCR0)";
    case CPU_AMX_REFUSED: return "present, but Linux refused the tile data permission (arch_prctl; kernel < 5.16?)";
    default: return "absent";
    }
}
