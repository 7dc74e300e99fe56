/* replay.c — runs a libFuzzer target over a committed corpus as an ordinary test, without libFuzzer: each argument
 * is a file or a directory (its regular files, not recursive); every file's bytes go to LLVMFuzzerTestOneInput in
 * an exact-size heap buffer so ASan sees any read past the end. A crash or sanitizer report is the failure. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Returns 0 when the file was run, 1 when it could not be read. */
static int run_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n, fp);
        if (n < cap) break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(fp) || !buf;
    fclose(fp);
    if (bad) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        return 1;
    }
    /* Exact-size copy: a read one byte past the input must hit a redzone. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    size_t passed = 0, failed = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
        return 2;
    }
    for (int a = 1; a < argc; a++) {
        struct stat sb;
        if (stat(argv[a], &sb) != 0) {
            fprintf(stderr, "replay: cannot stat %s\n", argv[a]);
            failed++;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            if (run_file(argv[a])) failed++;
            else passed++;
            continue;
        }
        DIR *d = opendir(argv[a]);
        if (!d) {
            fprintf(stderr, "replay: cannot open directory %s\n", argv[a]);
            failed++;
            continue;
        }
        /* Sorted, so a crash is reproducible by position. */
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 64;
                char **nn = realloc(names, nc * sizeof *nn);
                if (!nn) break;
                names = nn;
                cap = nc;
            }
            size_t len = strlen(argv[a]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            if (!names[n]) break;
            snprintf(names[n], len, "%s/%s", argv[a], e->d_name);
            n++;
        }
        closedir(d);
        if (n) qsort(names, n, sizeof *names, cmp_str);
        for (size_t i = 0; i < n; i++) {
            if (stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
                if (run_file(names[i])) failed++;
                else passed++;
            }
            free(names[i]);
        }
        free(names);
    }
    printf("replay: %zu passed, %zu failed\n", passed, failed);
    if (passed == 0 && failed == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    return failed ? 1 : 0;
}
