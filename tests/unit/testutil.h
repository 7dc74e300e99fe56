/* testutil.h — tiny assertion helpers shared by the unit tests. A failed check prints file:line and the
 * expression, counts the failure and lets the test continue; main returns tu_finish(). */
#ifndef QVL_TESTUTIL_H
#define QVL_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

extern int tu_failures;
extern int tu_checks;

#define CHECK(cond)                                                                                                   \
    do {                                                                                                              \
        tu_checks++;                                                                                                  \
        if (!(cond)) { tu_failures++; tu_report(__FILE__, __LINE__, #cond); }                                        \
    } while (0)

void tu_report(const char *file, int line, const char *what);
/* Exit status of a test this build cannot run (a feature compiled out); ctest reports it as skipped. */
#define TU_SKIP 77
/* Print "N passed, M failed" for the checks and return the process exit status. */
int tu_finish(const char *name);
/* Path helpers: QVL_SOURCE_DIR/rel, QVL_BIN; a fresh temp directory (mkdtemp under TMPDIR or /tmp). */
const char *tu_source_path(const char *rel, char *buf, size_t n);
const char *tu_tmpdir(char *buf, size_t n);
/* 1 if n bytes are equal; otherwise print how many differ, the largest difference and the first one. */
int tu_same_bytes(const unsigned char *got, const unsigned char *want, size_t n, const char *what);
/* A thread pool of n threads (1 ≤ n ≤ 8; NULL for 1), created on first use and kept until tu_finish. */
struct thread_pool *tu_pool(int n);
/* Wall-clock seconds (monotonic). */
double tu_now(void);
/* Remove a directory tree (rm -rf); 1 on success. */
int tu_rmtree(const char *dir);
/* Files in a test's temp directory:
 *   tu_path       dir/name in one of 16 rotating static buffers (so a few may be used at once)
 *   tu_read_file  the whole file (any kind: it reads to EOF), malloc'd (non-NULL when empty) and followed by a NUL
 *                 byte (not counted: text can be parsed as a string), its size in *n; NULL when it cannot be opened
 *                 or read; free with free()
 *   tu_write_file n bytes to path (created or truncated); 1 on success
 *   tu_dotfiles   the entries of dir other than "." and ".." whose names start with '.' (leftover temporaries);
 *                 -1 when dir cannot be opened */
const char *tu_path(const char *dir, const char *name);
void *tu_read_file(const char *path, size_t *n);
int tu_write_file(const char *path, const void *p, size_t n);
int tu_dotfiles(const char *dir);
/* The synthetic checkpoint `preset` (with `seed` and `layout`, other params the defaults) written into dir by
 * qvl_synth_write, as a CHECK; 1 on success, else the message is printed. tu_synth_load: "tiny" with `seed`
 * (QVL_LAYOUT_HF), then qvl_model_load (both CHECKs); the model, or NULL. */
int tu_synth(const char *dir, const char *preset, uint64_t seed, qvl_synth_layout layout);
qvl_model *tu_synth_load(const char *dir, uint64_t seed);
/* Deterministic generators shared by the tests: an LCG uniform in [-1, 1) over *state, and splitmix64. */
float tu_frand(uint32_t *state);
uint64_t tu_splitmix64(uint64_t x);
/* ‖a − b‖ / ‖b‖ and max |a − b| in double. */
double tu_relerr(const float *a, const float *b, size_t n, double *maxabs);

/* A buffer of `bytes` bytes that ends exactly at a PROT_NONE page, so a store (or load) even one byte past its end
 * faults (SIGSEGV) — the masked-store intrinsics the SIMD kernels use are invisible to ASan. The pointer is
 * guard − bytes: aligned to the largest power of two dividing `bytes` (4 for a float array; the kernels need no
 * more for their outputs), not to malloc's alignment. Contents start zeroed. NULL if the mapping fails; free with
 * tu_guarded_free (NULL is a no-op). */
void *tu_guarded_alloc(size_t bytes);
void tu_guarded_free(void *p);

#endif
