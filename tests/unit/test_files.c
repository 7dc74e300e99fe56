/* test_files.c — opening and writing files: every path the library reads is opened without blocking, so a FIFO (or
 * a directory) where a file is expected fails at once with a message naming the path and what it is; every whole
 * file it writes goes through a unique temporary beside the destination, refuses a destination that is not a
 * regular file and leaves nothing behind when it fails. Each case that could hang runs in a child under alarm(10),
 * so a regression fails instead of blocking the suite. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "io/fileutil.h"
#include "qvl.h"
#include "testutil.h"

static char g_root[256];

static const char *tpath(const char *name) { return tu_path(g_root, name); }

/* Run `fn(arg)` in a child under alarm(10); the child writes the error message to a pipe. Returns the message
 * ("" when the call succeeded; "TIMEOUT" when it blocked). */
typedef qvl_status (*opener)(const char *path, qvl_error *err);
static const char *in_child(opener fn, const char *path) {
    static char msg[600];
    int p[2];
    msg[0] = '\0';
    if (pipe(p) != 0) return "pipe failed";
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        alarm(10);
        qvl_error err;
        err_clear(&err);
        qvl_status s = fn(path, &err);
        const char *m = s == QVL_OK ? "" : err.message;
        ssize_t w = write(p[1], m, strlen(m));
        _exit(w < 0);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t k;
    while (n < sizeof msg - 1 && (k = read(p[0], msg + n, sizeof msg - 1 - n)) > 0) n += (size_t)k;
    msg[n] = '\0';
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) return "TIMEOUT";
    return msg;
}

static qvl_status op_model(const char *dir, qvl_error *err) {
    qvl_model *m = NULL;
    qvl_status s = qvl_model_load(dir, NULL, &m, err);
    qvl_model_free(m);
    return s;
}
static qvl_status op_image(const char *path, qvl_error *err) {
    qvl_image img;
    memset(&img, 0, sizeof img);
    qvl_status s = qvl_image_load(path, NULL, &img, err);
    if (s == QVL_OK) qvl_image_free(&img);
    return s;
}
static qvl_status op_rows(const char *path, qvl_error *err) {
    float *rows = NULL;
    size_t n, len;
    qvl_status s = qvl_read_rows(path, &rows, &n, &len, NULL, NULL, err);
    free(rows);
    return s;
}
static qvl_status op_video(const char *path, qvl_error *err) {
    qvl_video v;
    memset(&v, 0, sizeof v);
    qvl_status s = qvl_video_load(path, NULL, &v, err);
    if (s == QVL_OK) qvl_video_free(&v);
    return s;
}
static qvl_status op_preproc(const char *dir, qvl_error *err) {
    qvl_preprocess_params p;
    qvl_video_params v;
    qvl_preprocess_params_default(&p);
    qvl_video_params_default(&v);
    return qvl_preprocess_params_load(dir, &p, &v, err);
}

/* fn(path) fails fast, naming `name` (the path's tail) and containing `what`. */
static void fails_fast(const char *label, opener fn, const char *path, const char *name, const char *what) {
    const char *m = in_child(fn, path);
    int good = *m && strcmp(m, "TIMEOUT") != 0 && strstr(m, name) && strstr(m, what);
    CHECK(good);
    if (!good) printf("  %s: got '%s', want a message with '%s' and '%s'\n", label, m, name, what);
}

/* Replace dir/name by a FIFO (or a directory). */
static void plant(const char *dir, const char *name, int as_dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK(unlink(p) == 0);
    CHECK((as_dir ? mkdir(p, 0755) : mkfifo(p, 0644)) == 0);
}

static void test_fifo_inputs(void) {
    char d[600];
    snprintf(d, sizeof d, "%s/m_config", g_root);
    tu_synth(d, "tiny", 0, QVL_LAYOUT_HF);
    plant(d, "config.json", 0);
    fails_fast("config.json FIFO", op_model, d, "config.json", "FIFO");

    snprintf(d, sizeof d, "%s/m_single", g_root);
    tu_synth(d, "tiny", 0, QVL_LAYOUT_HF);
    plant(d, "model.safetensors", 0);
    fails_fast("model.safetensors FIFO", op_model, d, "model.safetensors", "FIFO");

    snprintf(d, sizeof d, "%s/m_dir", g_root);
    tu_synth(d, "tiny", 0, QVL_LAYOUT_HF);
    plant(d, "model.safetensors", 1);
    fails_fast("model.safetensors directory", op_model, d, "model.safetensors", "a directory");

    snprintf(d, sizeof d, "%s/m_sidecar", g_root);
    tu_synth(d, "tiny", 0, QVL_LAYOUT_SIDECAR);
    plant(d, "optiq/optiq_vision.safetensors", 0);
    fails_fast("sidecar FIFO", op_model, d, "optiq_vision.safetensors", "FIFO");

    snprintf(d, sizeof d, "%s/m_index", g_root);
    tu_synth(d, "tiny", 0, QVL_LAYOUT_SHARDED);
    plant(d, "model.safetensors.index.json", 0);
    fails_fast("index FIFO", op_model, d, "model.safetensors.index.json", "FIFO");

    snprintf(d, sizeof d, "%s/m_shard", g_root);
    tu_synth(d, "tiny", 0, QVL_LAYOUT_SHARDED);
    plant(d, "model-00001-of-00003.safetensors", 0);
    fails_fast("shard FIFO", op_model, d, "model-00001-of-00003.safetensors", "FIFO");

    snprintf(d, sizeof d, "%s/m_preproc", g_root);
    tu_synth(d, "tiny", 0, QVL_LAYOUT_HF);
    plant(d, "preprocessor_config.json", 0);
    fails_fast("preprocessor_config.json FIFO", op_preproc, d, "preprocessor_config.json", "FIFO");

    CHECK(mkfifo(tpath("img.png"), 0644) == 0);
    if (QVL_WITH_MEDIA) fails_fast("image FIFO", op_image, tpath("img.png"), "img.png", "FIFO");
    CHECK(mkfifo(tpath("rows.npy"), 0644) == 0);
    fails_fast("rows FIFO", op_rows, tpath("rows.npy"), "rows.npy", "FIFO");
    CHECK(mkfifo(tpath("clip.mp4"), 0644) == 0);
    if (QVL_WITH_VIDEO) fails_fast("video FIFO", op_video, tpath("clip.mp4"), "clip.mp4", "FIFO");
}

static qvl_status op_npy(const char *path, qvl_error *err) {
    const float x[6] = {1, 2, 3, 4, 5, 6};
    return qvl_write_npy(path, x, 2, 3, err);
}
static qvl_status op_st(const char *path, qvl_error *err) {
    const float x[6] = {1, 2, 3, 4, 5, 6};
    qvl_out_tensor t = {.name = "x", .data = x, .rows = 2, .cols = 3};
    return qvl_write_safetensors(path, &t, 1, NULL, 0, NULL, 0, err);
}
static qvl_status op_tmp(const char *path, qvl_error *err) {
    fu_tmpfile t;
    TRY(fu_tmp_open(&t, path, err));
    fu_tmp_write(&t, "abc", 3);
    return fu_tmp_finish(&t, QVL_OK, 0, err);
}

static int file_is(const char *path, const char *text) {
    char buf[64] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(text) && memcmp(buf, text, n) == 0;
}

static void test_writes(void) {
    char d[600];
    snprintf(d, sizeof d, "%s/out", g_root);
    CHECK(mkdir(d, 0755) == 0);
    const opener ops[3] = {op_npy, op_st, op_tmp};
    const char *names[3] = {"qvl_write_npy", "qvl_write_safetensors", "fu_tmp_open"};
    char fifo[700], lnk[700], sub[700], dev[700], file[700], victim[700], planted[720];
    snprintf(fifo, sizeof fifo, "%s/fifo", d);
    snprintf(lnk, sizeof lnk, "%s/link", d);
    snprintf(sub, sizeof sub, "%s/sub", d);
    /* the device is reached through a link of our own: were it not refused, only the link would be replaced */
    snprintf(dev, sizeof dev, "%s/null", d);
    CHECK(symlink("/dev/null", dev) == 0);
    snprintf(victim, sizeof victim, "%s/victim", g_root);
    CHECK(mkfifo(fifo, 0644) == 0 && symlink(fifo, lnk) == 0 && mkdir(sub, 0755) == 0);
    FILE *f = fopen(victim, "wb");
    CHECK(f && fputs("keep", f) >= 0 && fclose(f) == 0);
    for (int i = 0; i < 3; i++) {
        /* a FIFO (must not block), a symlink to one, a directory, a device: refused, nothing replaced */
        qvl_error e2;
        CHECK(fu_check_dest("/dev/null", &e2) == QVL_ERR_INVALID_ARG && strstr(e2.message, "a device"));
        fails_fast(names[i], ops[i], fifo, "fifo", "a FIFO");
        fails_fast(names[i], ops[i], lnk, "link", "a FIFO");
        fails_fast(names[i], ops[i], sub, "sub", "a directory");
        fails_fast(names[i], ops[i], dev, "null", "a device");
        struct stat st;
        CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
        CHECK(lstat(lnk, &st) == 0 && S_ISLNK(st.st_mode));
        CHECK(lstat(dev, &st) == 0 && S_ISLNK(st.st_mode));
        CHECK(tu_dotfiles(d) == 0);

        /* a symlink planted at the old "<path>.tmp" name is not followed: its target keeps its bytes */
        snprintf(file, sizeof file, "%s/o%d", d, i);
        snprintf(planted, sizeof planted, "%s.tmp", file);
        CHECK(symlink(victim, planted) == 0);
        CHECK(*in_child(ops[i], file) == '\0');
        CHECK(file_is(victim, "keep"));
        CHECK(lstat(file, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644);
        CHECK(unlink(planted) == 0);
        CHECK(tu_dotfiles(d) == 0);
    }
    /* a failed write (a directory that does not exist) leaves nothing */
    qvl_error err;
    CHECK(op_npy(tpath("nodir/x.npy"), &err) == QVL_ERR_IO && strstr(err.message, "nodir/x.npy"));
    /* a failed fu_tmp_finish removes the temporary */
    fu_tmpfile t;
    CHECK(fu_tmp_open(&t, tpath("out/failed"), &err) == QVL_OK);
    fu_tmp_write(&t, "x", 1);
    CHECK(tu_dotfiles(d) == 1);
    CHECK(fu_tmp_finish(&t, QVL_ERR_FORMAT, 0, &err) == QVL_ERR_FORMAT);
    CHECK(tu_dotfiles(d) == 0 && access(tpath("out/failed"), F_OK) != 0);
}

int main(void) {
    CHECK(tu_tmpdir(g_root, sizeof g_root) != NULL);
    test_fifo_inputs();
    test_writes();
    tu_rmtree(g_root);
    return tu_finish("test_files");
}
