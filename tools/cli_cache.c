/* cli_cache.c — `qvl cache`: inspect, collect, verify or export the embedding cache (qvl_cache_*, libqvl), and
 * the size strings it and `qvl serve --cache-size` take. In every build: the cache is the library's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

int cli_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'K': case 'k': shift = 10; break;
        case 'M': case 'm': shift = 20; break;
        case 'G': case 'g': shift = 30; break;
        case 'T': case 't': shift = 40; break;
        default: return -1;
        }
        end++;
        if (*end == 'i') end++;
        if (*end == 'B' || *end == 'b') end++;
        if (*end) return -1;
    }
    if (shift && v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static const char cache_help[] =
    "usage: qvl cache stat ROOT | gc ROOT [--size SIZE] | verify ROOT | export-vllm ROOT DIR\n"
    "The content-addressed embedding cache of qvl serve, qvl encode --cache and the Python binding:\n"
    "  stat         entries and bytes\n"
    "  gc           evict least recently used entries down to SIZE (default: 90 % of 10G)\n"
    "  verify       check every entry's checksum, deleting the corrupt ones (exit 1 if any)\n"
    "  export-vllm  DIR/<key>/encoder_cache.safetensors links, vLLM's shared-storage encoder-cache layout\n"
    "ROOT must be a cache already (with its objects/ directory): no command creates one.\n"
    "SIZE: bytes, or with K, M, G, T (powers of 1024; KiB, MB, ... are the same).\n"
    "\n"
    "Examples:\n"
    "  qvl cache stat /var/cache/qvl\n"
    "  qvl cache gc /var/cache/qvl --size 5G\n"
    "  qvl cache export-vllm /var/cache/qvl /var/cache/qvl-vllm   # for vLLM's shared-storage encoder cache\n";

int cmd_cache(int argc, char **argv) {
    const int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (argc < 3 || help) {
        fputs(cache_help, help ? stdout : stderr);
        return help ? 0 : CLI_EXIT_USAGE;
    }
    const char *sub = argv[1], *root = argv[2];
    uint64_t size = (uint64_t)10 << 30;
    int target_given = 0;
    if (strcmp(sub, "gc") == 0 && argc == 5 && strcmp(argv[3], "--size") == 0) {
        if (cli_parse_size(argv[4], &size)) return cli_usage("--size: a size like 10G");
        target_given = 1;
    } else if (!(strcmp(sub, "export-vllm") == 0 ? argc == 4 : argc == 3)) {
        return cli_usage("see 'qvl cache --help'");
    }
    if (strcmp(sub, "stat") && strcmp(sub, "gc") && strcmp(sub, "verify") && strcmp(sub, "export-vllm"))
        return cli_usage("unknown cache command '%s' (see 'qvl cache --help')", sub);
    struct stat st;
    if (stat(root, &st) || !S_ISDIR(st.st_mode)) return cli_fail("%s is not a cache directory", root);
    qvl_cache_params p;
    qvl_cache_params_default(&p);
    p.max_bytes = size;
    p.existing = 1; /* a query of a cache: nothing is created, and a directory that is none is named as such */
    qvl_cache *c = NULL;
    qvl_error err;
    if (qvl_cache_open(root, &p, &c, &err) != QVL_OK) return cli_fail("%s", err.message);
    int rc = 0;
    if (strcmp(sub, "stat") == 0) {
        qvl_cache_stats s;
        qvl_cache_get_stats(c, &s); /* scanned at open */
        printf("entries %llu\nbytes %llu\n", (unsigned long long)s.entries, (unsigned long long)s.bytes);
    } else if (strcmp(sub, "gc") == 0) {
        uint64_t ev;
        size_t n;
        /* --size 0: everything (a target of 0 means the cache's own size to qvl_cache_gc; no entry is 1 byte) */
        const uint64_t target = !target_given ? 0 : size ? size : 1;
        if (qvl_cache_gc(c, target, &ev, &n, &err) != QVL_OK) rc = cli_fail("%s", err.message);
        else printf("evicted %zu entries, %llu bytes\n", n, (unsigned long long)ev);
    } else if (strcmp(sub, "verify") == 0) {
        size_t ok, bad;
        if (qvl_cache_verify(c, &ok, &bad, &err) != QVL_OK) {
            rc = cli_fail("%s", err.message);
        } else {
            printf("ok %zu\ncorrupt %zu (deleted)\n", ok, bad);
            if (bad) rc = CLI_EXIT_FAIL;
        }
    } else {
        size_t n;
        if (qvl_cache_export_vllm(c, argv[3], &n, &err) != QVL_OK)
            rc = n ? cli_fail("%s (%zu entries exported)", err.message, n) : cli_fail("%s", err.message);
        else printf("exported %zu entries to %s\n", n, argv[3]);
    }
    qvl_cache_close(c);
    return rc;
}
