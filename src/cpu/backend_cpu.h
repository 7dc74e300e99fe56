/* backend_cpu.h — the CPU entries of the backend table (backend/table.c lists them; backend_cpu.c defines them).
 * Private to the library. */
#ifndef QVL_CPU_BACKEND_CPU_H
#define QVL_CPU_BACKEND_CPU_H

#include "backend/backend.h"

extern const backend backend_cpu_portable, backend_cpu_portable_bf16, backend_cpu_amx_emulated;
#if QVL_WITH_X86
extern const backend backend_cpu_avx2, backend_cpu_avx512, backend_cpu_avx512bf16, backend_cpu_amx;
#endif

#endif
