/* remote.h — tests only: backends whose memory is not the host's (remote.c). Private to the library. */
#ifndef QVL_BACKEND_REMOTE_H
#define QVL_BACKEND_REMOTE_H

#include <stddef.h>

#include "backend/backend.h"

/* The remote entries ("remote": the portable f32 set, "remote-bf16": the portable bf16 set, "remote-amx": the AMX
 * set over the C model of the tiles), *n of them; backend_table lists them too. */
const backend *backend_remote_entries(size_t *n);
/* How many times an operation of a remote entry was handed a host address where its own memory was expected. */
long backend_remote_strays(void);

#endif
