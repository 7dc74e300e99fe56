/* test_st_writer.c — the streaming safetensors writer: pieces and metadata read back exactly (through the
 * library's own reader); a header that outgrows its reserved region; sticky errors and abort leave the destination
 * as it was and no temporary behind; special files refused; a symlink at the destination is replaced, its target
 * untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "qvl.h"
#include "testutil.h"

static char tmp[900];

static const char *at(const char *name) { return tu_path(tmp, name); }

/* 1 if the file holds exactly the string s. */
static int file_is(const char *path, const char *s) {
    size_t n;
    char *b = tu_read_file(path, &n);
    int same = b && n == strlen(s) && memcmp(b, s, n) == 0;
    free(b);
    return same;
}

/* Two tensors in pieces, metadata before and after; `reserve` for the header. */
static void roundtrip(size_t reserve, int n_meta) {
    const char *path = at("a.safetensors");
    qvl_st_writer *w = NULL;
    qvl_error err;
    CHECK(qvl_st_writer_open(path, reserve, &w, &err) == QVL_OK);
    float x[6 * 5];
    for (int i = 0; i < 30; i++) x[i] = (float)i * 0.5f - 3.0f;
    int64_t shape[2] = {6, 5}, gs[2] = {1, 3}, g[3] = {1, 4, 6};
    CHECK(qvl_st_writer_meta(w, "first", "value | with \"quotes\"", &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "x", "F32", shape, 2, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, x, 10 * sizeof(float), &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, x + 10, 20 * sizeof(float), &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "grid_thw", "I64", gs, 2, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, g, sizeof g, &err) == QVL_OK);
    char k[32], v[64];
    for (int i = 0; i < n_meta; i++) {
        snprintf(k, sizeof k, "key%d", i);
        snprintf(v, sizeof v, "value %d of a longer metadata entry", i);
        CHECK(qvl_st_writer_meta(w, k, v, &err) == QVL_OK);
    }
    CHECK(qvl_st_writer_finish(w, &err) == QVL_OK && err.status == QVL_OK);
    CHECK(tu_dotfiles(tmp) == 0);
    st_file *f = NULL;
    CHECK(st_load(path, SIZE_MAX, &f, &err) == QVL_OK);
    if (!f) return;
    const st_tensor *t = st_find(f, "x");
    CHECK(t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == 6 && t->shape[1] == 5 &&
          memcmp(t->data, x, sizeof x) == 0);
    t = st_find(f, "grid_thw");
    CHECK(t && t->dtype == ST_I64 && memcmp(t->data, g, sizeof g) == 0);
    CHECK(st_meta(f, "first") && strcmp(st_meta(f, "first"), "value | with \"quotes\"") == 0);
    if (n_meta) CHECK(st_meta(f, "key0") && strcmp(st_meta(f, "key0"), "value 0 of a longer metadata entry") == 0);
    struct stat sb;
    stat(path, &sb);
    printf("  reserve %zu, %d extra keys: %lld bytes\n", reserve, n_meta, (long long)sb.st_size);
    if (reserve >= 4096) CHECK((uint64_t)sb.st_size == 8 + reserve + sizeof x + sizeof g); /* header padded */
    st_close(f);
}

static void test_errors_sticky(void) {
    const char *path = at("keep.safetensors");
    CHECK(tu_write_file(path, "old contents", strlen("old contents")));
    qvl_st_writer *w = NULL;
    qvl_error err;
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    int64_t shape[1] = {4};
    float x[8] = {0};
    CHECK(qvl_st_writer_tensor(w, "x", "F32", shape, 1, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, x, sizeof x, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, path) &&
          strstr(err.message, "expects 16 more"));
    /* sticky: the next call returns the same error */
    CHECK(qvl_st_writer_meta(w, "k", "v", &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "expects 16 more"));
    CHECK(qvl_st_writer_finish(w, &err) == QVL_ERR_INVALID_ARG);
    CHECK(file_is(path, "old contents") && tu_dotfiles(tmp) == 0);
    /* a short tensor at finish */
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "x", "F32", shape, 1, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, x, 8, &err) == QVL_OK);
    CHECK(qvl_st_writer_finish(w, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "8 bytes short"));
    CHECK(file_is(path, "old contents") && tu_dotfiles(tmp) == 0);
    /* bad names and dtypes */
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "x", "F33", shape, 1, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "F33"));
    qvl_st_writer_abort(w);
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "__metadata__", "F32", shape, 1, &err) == QVL_ERR_INVALID_ARG);
    qvl_st_writer_abort(w);
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "x", "F32", shape, 1, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, x, 16, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "x", "F32", shape, 1, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "twice"));
    qvl_st_writer_abort(w);
    /* abort after good writes */
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "x", "F32", shape, 1, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, x, 16, &err) == QVL_OK);
    qvl_st_writer_abort(w);
    qvl_st_writer_abort(NULL);
    CHECK(file_is(path, "old contents") && tu_dotfiles(tmp) == 0);
}

/* A writer at `path` holding "before" (3 floats of p[2]), then a group given part of its data and dropped, a tensor
 * half written and dropped, then the group `names` (three planes [5, 4], p[k] each) filled side by side, a row of
 * each plane at a time, the last plane first. */
static qvl_st_writer *planes_written(const char *path, float p[3][20], const char *const names[3]) {
    qvl_st_writer *w = NULL;
    qvl_error err;
    const int64_t shape[2] = {5, 4}, one[1] = {3};
    const char *gone[2] = {"gone0", "gone1"};
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "before", "F32", one, 1, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, p[2], 12, &err) == QVL_OK);
    CHECK(qvl_st_writer_group(w, 2, gone, "F32", shape, 2, &err) == QVL_OK);
    CHECK(qvl_st_writer_data_to(w, 1, p[1], 32, &err) == QVL_OK);
    CHECK(qvl_st_writer_drop(w, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "half", "F32", shape, 2, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, p[1], 40, &err) == QVL_OK);
    CHECK(qvl_st_writer_drop(w, &err) == QVL_OK);
    CHECK(qvl_st_writer_group(w, 3, names, "F32", shape, 2, &err) == QVL_OK);
    for (int r = 0; r < 5; r++)
        for (int k = 2; k >= 0; k--) CHECK(qvl_st_writer_data_to(w, (size_t)k, p[k] + 4 * r, 16, &err) == QVL_OK);
    return w;
}

/* A group: three planes of [5, 4] filled side by side, a row of each at a time; a group dropped after part of its data
 * (and a tensor dropped half written) leaves the file as if they were never declared; a group short of data fails at
 * the next declaration; data_to outside a group, and sequential data while one is open, are refused. */
static void test_group(void) {
    const char *path = at("g.safetensors");
    qvl_st_writer *w = NULL;
    qvl_error err;
    float p[3][20];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 20; i++) p[k][i] = (float)(100 * k + i);
    const char *names[3] = {"item0.merged", "item0.deepstack0", "item0.deepstack1"};
    const int64_t shape[2] = {5, 4}, one[1] = {3};
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_data_to(w, 0, p[0], 16, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "of a group of 0"));
    qvl_st_writer_abort(w);
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_tensor(w, "before", "F32", one, 1, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, p[2], 12, &err) == QVL_OK);
    /* a group given two rows, then dropped; a tensor half written, dropped */
    const char *gone[2] = {"gone0", "gone1"};
    CHECK(qvl_st_writer_group(w, 2, gone, "F32", shape, 2, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, p[0], 16, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "a group is open"));
    qvl_st_writer_abort(w);
    w = planes_written(path, p, names);
    CHECK(qvl_st_writer_data_to(w, 0, p[0], 4, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "expects 0 more"));
    qvl_st_writer_abort(w);
    /* again without the overrun, and read back */
    w = planes_written(path, p, names);
    CHECK(qvl_st_writer_tensor(w, "after", "F32", one, 1, &err) == QVL_OK);
    CHECK(qvl_st_writer_data(w, p[0], 12, &err) == QVL_OK);
    CHECK(qvl_st_writer_finish(w, &err) == QVL_OK);
    st_file *f = NULL;
    CHECK(st_load(path, SIZE_MAX, &f, &err) == QVL_OK);
    if (f) {
        for (int k = 0; k < 3; k++) {
            const st_tensor *t = st_find(f, names[k]);
            CHECK(t && t->shape[0] == 5 && t->shape[1] == 4 && memcmp(t->data, p[k], sizeof p[k]) == 0);
        }
        const st_tensor *b = st_find(f, "before"), *a = st_find(f, "after");
        CHECK(b && memcmp(b->data, p[2], 12) == 0 && a && memcmp(a->data, p[0], 12) == 0);
        CHECK(!st_find(f, "gone0") && !st_find(f, "gone1") && !st_find(f, "half"));
        struct stat sb;
        CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == 8 + 65536 + 12 + sizeof p + 12);
        st_close(f);
    }
    /* a group short of data */
    CHECK(qvl_st_writer_open(path, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_group(w, 3, names, "F32", shape, 2, &err) == QVL_OK);
    CHECK(qvl_st_writer_data_to(w, 0, p[0], sizeof p[0], &err) == QVL_OK);
    CHECK(qvl_st_writer_data_to(w, 1, p[1], sizeof p[1], &err) == QVL_OK);
    CHECK(qvl_st_writer_data_to(w, 2, p[2], 8, &err) == QVL_OK);
    CHECK(qvl_st_writer_finish(w, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "item0.deepstack1 is 72 bytes short"));
    CHECK(tu_dotfiles(tmp) == 0);
}

static void test_destinations(void) {
    qvl_st_writer *w = NULL;
    qvl_error err;
    const char *fifo = at("fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(qvl_st_writer_open(fifo, 0, &w, &err) == QVL_ERR_INVALID_ARG && !w && strstr(err.message, "FIFO"));
    CHECK(qvl_st_writer_open(tmp, 0, &w, &err) == QVL_ERR_INVALID_ARG && !w && strstr(err.message, "directory"));
    CHECK(qvl_st_writer_open("/dev/null", 0, &w, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "device"));
    CHECK(qvl_st_writer_open("", 0, &w, &err) == QVL_ERR_INVALID_ARG && strstr(err.message, "empty"));
    CHECK(qvl_st_writer_open(at("no/such/dir/x"), 0, &w, &err) == QVL_ERR_IO && strstr(err.message, "no/such/dir"));
    /* a symlink at the destination to a FIFO is refused; to a file, the link is replaced and the file kept */
    const char *lf = at("link_fifo"), *target = at("target.txt"), *lk = at("link.safetensors");
    CHECK(symlink(fifo, lf) == 0);
    CHECK(qvl_st_writer_open(lf, 0, &w, &err) == QVL_ERR_INVALID_ARG);
    CHECK(tu_write_file(target, "target", strlen("target")));
    CHECK(symlink(target, lk) == 0);
    CHECK(qvl_st_writer_open(lk, 0, &w, &err) == QVL_OK);
    CHECK(qvl_st_writer_finish(w, &err) == QVL_OK);
    struct stat sb;
    CHECK(lstat(lk, &sb) == 0 && S_ISREG(sb.st_mode) && file_is(target, "target"));
    CHECK(tu_dotfiles(tmp) == 0);
}

int main(void) {
    CHECK(tu_tmpdir(tmp, sizeof tmp) != NULL);
    roundtrip(0, 0);
    test_group();
    roundtrip(8, 200); /* the header outgrows 8 bytes: moved in front of the data at finish */
    roundtrip(4096, 3);
    test_errors_sticky();
    test_destinations();
    tu_rmtree(tmp);
    return tu_finish("test_st_writer");
}
