/* params.h — the ABI rule for params structs (qvl.h, "ABI: params structs"): every struct starts with
 * size_t struct_size; the library reads only the caller's struct_size bytes and defaults the rest. */
#ifndef QVL_CORE_PARAMS_H
#define QVL_CORE_PARAMS_H

#include <stddef.h>

#include "qvl.h"

/* Write the first `dst_size` bytes of the defaults `full` (`full_size` bytes) into `dst`, with struct_size =
 * dst_size (a caller's *_init(p, sizeof *p)). dst_size below sizeof(size_t) writes nothing. */
void params_init(void *dst, size_t dst_size, const void *full, size_t full_size);

/* Overlay the caller's struct `caller` (NULL: keep the defaults) onto `full` (defaults, `full_size` bytes) and set
 * full's struct_size to full_size. Refuses a struct_size of 0 (not initialised) and fields this library does not
 * know that are set (a caller built against a newer qvl.h). `type` names the struct in messages. */
qvl_status params_take(void *full, size_t full_size, const void *caller, const char *type, qvl_error *err);

/* Copy `full` back into a caller's struct of its own struct_size (in/out parameters). */
void params_give(void *caller, const void *full, size_t full_size);

#endif
