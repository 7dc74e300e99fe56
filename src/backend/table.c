/* table.c — every backend entry a load can run on: the CPU entries (backend_cpu.c; backend_select picks among those
 * this CPU runs) and, tests only, the remote entries (remote.c). A GPU backend is a new entry here. */
#include <pthread.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/remote.h"
#include "cpu/backend_cpu.h"

static const backend *table[16];
static size_t n_table;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    static const backend *const cpu[] = {
        &backend_cpu_portable, &backend_cpu_portable_bf16, &backend_cpu_amx_emulated,
#if QVL_WITH_X86
        &backend_cpu_avx2, &backend_cpu_avx512, &backend_cpu_avx512bf16, &backend_cpu_amx,
#endif
    };
    for (size_t i = 0; i < sizeof cpu / sizeof cpu[0]; i++) table[n_table++] = cpu[i];
    size_t nr;
    const backend *r = backend_remote_entries(&nr);
    for (size_t i = 0; i < nr && n_table < sizeof table / sizeof table[0]; i++) table[n_table++] = &r[i];
}

const backend *const *backend_table(size_t *n) {
    pthread_once(&once, init);
    *n = n_table;
    return table;
}

const backend *backend_find(const char *name) {
    size_t n;
    const backend *const *t = backend_table(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i]->name, name) == 0) return t[i];
    return NULL;
}
