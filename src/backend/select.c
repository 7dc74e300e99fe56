/* select.c — which backend a model load gets (backend_select), and precision auto's rule: the policy over the
 * entries the CPU backends offer (backend_cpu_entry) and what this machine can run (cpu_level, the AMX set's
 * state, the measured VDPBF16PS rate). A GPU backend would be chosen here too. */
#include <stdio.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "core/error.h"

int backend_auto_bf16(int amx_usable, int has_avx512bf16, double dot_vs_fma) {
    if (amx_usable) return BACKEND_AUTO_AMX;
    return has_avx512bf16 && dot_vs_fma >= BACKEND_AUTO_MIN_DOT_RATE ? BACKEND_AUTO_AVX512BF16 : BACKEND_AUTO_F32;
}

/* backend_auto_bf16's choice on this CPU. The rate is measured only where it decides (AVX512-BF16, no usable AMX). */
static int auto_pick(void) {
    const int amx = backend_amx_usable(), has = cpu_has_avx512bf16();
    return backend_auto_bf16(amx, has, has && !amx ? backend_bf16_dot_rate() : 0);
}

/* auto_pick's choice as a backend, or NULL for f32. */
static const backend *auto_bf16(void) {
    switch (auto_pick()) {
    case BACKEND_AUTO_AMX: return backend_cpu_entry(BE_CPU_BF16_AMX);
    case BACKEND_AUTO_AVX512BF16: return backend_cpu_entry(BE_CPU_BF16_AVX512);
    default: return NULL;
    }
}

void backend_auto_describe(char *buf, size_t n) {
    const int pick = auto_pick();
    const double rate = pick != BACKEND_AUTO_AMX && cpu_has_avx512bf16() ? backend_bf16_dot_rate() : 0;
    if (pick == BACKEND_AUTO_AMX)
        snprintf(buf, n, "bf16 on amx");
    else if (pick == BACKEND_AUTO_AVX512BF16)
        snprintf(buf, n, "bf16 on avx512bf16 (VDPBF16PS measured at %.2fx the f32 FMA rate)", rate);
    else if (rate > 0)
        snprintf(buf, n, "f32 (VDPBF16PS measured at %.2fx the f32 FMA rate; bf16 from %.2fx)", rate,
                 BACKEND_AUTO_MIN_DOT_RATE);
    else
        snprintf(buf, n, "f32 (no AMX or AVX512-BF16 kernels on this CPU)");
}

const backend *backend_bf16_available(void) {
    if (backend_amx_usable()) return backend_cpu_entry(BE_CPU_BF16_AMX);
    if (cpu_has_avx512bf16()) return backend_cpu_entry(BE_CPU_BF16_AVX512);
    return NULL;
}

/* The f32 entry of a kernel level (cpu_level's numbering: 3 AVX-512, 2 AVX2, else portable). */
static const backend *f32_for(int level) {
    const backend *be = level == QVL_ISA_AVX512 ? backend_cpu_entry(BE_CPU_F32_AVX512)
                        : level == QVL_ISA_AVX2 ? backend_cpu_entry(BE_CPU_F32_AVX2)
                                                : NULL;
    return be ? be : backend_cpu_entry(BE_CPU_F32_PORTABLE);
}

qvl_status backend_select(qvl_isa isa, qvl_precision precision, const backend **out, qvl_error *err) {
    int want, usable;
    *out = NULL;
    switch (isa) {
    case QVL_ISA_AUTO: want = cpu_level(); break;
    case QVL_ISA_AVX2:
        if (!cpu_has_avx2()) return err_fail(err, QVL_ERR_UNSUPPORTED, "qvl_model_load: this CPU has no AVX2+FMA");
        want = QVL_ISA_AVX2;
        break;
    case QVL_ISA_AVX512:
        if (!cpu_has_avx512())
            return err_fail(err, QVL_ERR_UNSUPPORTED, "qvl_model_load: this CPU has no AVX-512 (F, BW, DQ, VL)");
        want = QVL_ISA_AVX512;
        break;
    case QVL_ISA_AMX:
        if (precision == QVL_PRECISION_F32)
            return err_fail(err, QVL_ERR_UNSUPPORTED,
                            "qvl_model_load: the amx kernel set computes in bf16 (precision bf16 or auto), not f32");
        if (!backend_amx_usable()) {
            const char *why = backend_amx_status(&usable);
            return err_fail(err, QVL_ERR_UNSUPPORTED, "qvl_model_load: no AMX kernels on this CPU: AMX-BF16 %s", why);
        }
        if (precision != QVL_PRECISION_BF16 && precision != QVL_PRECISION_AUTO)
            return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: unknown precision %d", (int)precision);
        *out = backend_cpu_entry(BE_CPU_BF16_AMX);
        return QVL_OK;
    default: return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: unknown isa %d", (int)isa);
    }
    /* The bf16 set for the request: AUTO the best this CPU has (for precision auto, backend_auto_bf16's choice);
     * AVX512 the AVX512-BF16 set even where AMX exists, for precision auto only where its measured rate is
     * auto's (on an Intel Xeon, VDPBF16PS at half the FMA rate, auto stays f32 there too). (Not asked for f32: on
     * an AMX CPU the question requests the tile-data permission for the process.) */
    const backend *bf = isa != QVL_ISA_AUTO || precision == QVL_PRECISION_F32 ? NULL
                        : precision == QVL_PRECISION_AUTO                     ? auto_bf16()
                                                                              : backend_bf16_available();
    if (isa == QVL_ISA_AVX512 && cpu_has_avx512bf16() &&
        (precision != QVL_PRECISION_AUTO ||
         backend_auto_bf16(0, 1, backend_bf16_dot_rate()) == BACKEND_AUTO_AVX512BF16))
        bf = backend_cpu_entry(BE_CPU_BF16_AVX512);
    switch (precision) {
    case QVL_PRECISION_F32: *out = f32_for(want); return QVL_OK;
    case QVL_PRECISION_AUTO: *out = bf ? bf : f32_for(want); return QVL_OK;
    case QVL_PRECISION_BF16:
        if (bf) *out = bf;
        else if (isa == QVL_ISA_AUTO) *out = backend_cpu_entry(BE_CPU_BF16_PORTABLE); /* correct, slow: the portable reference arithmetic */
        else
            return err_fail(err, QVL_ERR_UNSUPPORTED, "qvl_model_load: no bf16 kernels for the %s kernel set on this CPU",
                            isa == QVL_ISA_AVX2 ? "avx2" : "avx512");
        return QVL_OK;
    default: return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: unknown precision %d", (int)precision);
    }
}
