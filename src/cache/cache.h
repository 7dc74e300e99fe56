/* cache.h — internals of the embedding cache (src/cache/cache.c) that the fuzz target and tests reach. */
#ifndef QVL_CACHE_CACHE_H
#define QVL_CACHE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

/* An entry file can be at most this large (a bigger file is corrupt). */
#define CACHE_ENTRY_MAX_BYTES ((uint64_t)4 << 30)
/* Its safetensors header at most this (the untrusted length field is checked against it and the file). */
#define CACHE_HEADER_MAX_BYTES ((uint64_t)64 << 20)

/* 1 when s is 64 lowercase hex digits. */
int cache_is_key(const char *s);
/* Parse and verify the bytes of an entry file for `key` (NULL: any key): header, checksum, tensors, grid. On
 * success fills *e (data points into file; `file`/`file_bytes` are left for the caller) and returns QVL_OK;
 * otherwise QVL_ERR_FORMAT with a message naming what is wrong, and *e unspecified. */
qvl_status cache_entry_parse(const uint8_t *file, size_t len, const char *key, qvl_cache_entry *e, qvl_error *err);

/* Test hook: called by a collection on c with each victim's path after its last check and just before it is
 * removed (NULL: none, the default). Set it while no collection runs on c. */
void cache_set_evict_hook(qvl_cache *c, void (*hook)(const char *path, void *arg), void *arg);

#endif
