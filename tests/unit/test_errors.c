/* test_errors.c — "errors always say why" (qvl.h, "Errors"): every bad input the suite has — tests/data/bad/, every
 * file of every fuzz corpus (through the public API that consumes it), bad preprocessor configs, bad videos, .npy
 * and safetensors edge cases — and API misuse (NULL arguments, zeroed or too-new params structs, unknown enum values,
 * thread counts out of range, grids that do not match the rows). For each failure: a non-OK status, err.status equal
 * to it, a one-line message that is not empty, is not err_fail's "(no detail)" safety net, and names the input (its
 * path or label, or the argument or field). Every call starts from a dirty err (a stale failure or garbage bytes),
 * so a success must leave err cleared and a failure must report its own cause: the clear-on-entry rule. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "testutil.h"

static char tmp[512];
static int n_bad, n_accepted, n_nomsg;

static const char *tpath(const char *name) { return tu_path(tmp, name); }

/* Sorted regular files of a directory (NULL-terminated; free with free_list). */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static char **list_dir(const char *dir, size_t *count) {
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    size_t n = 0, cap = 16;
    char **v = malloc(cap * sizeof *v);
    struct dirent *e;
    while (v && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char full[2048];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n + 1 >= cap) {
            char **nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        v[n] = malloc(strlen(full) + 1);
        if (v[n]) strcpy(v[n++], full);
    }
    closedir(d);
    if (!v) return NULL;
    qsort(v, n, sizeof *v, cmp_str);
    v[n] = NULL;
    *count = n;
    return v;
}
static void free_list(char **v) {
    for (size_t i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

/* ---------------------------------------------------------------------------------------------------------------
 * The checks
 * ------------------------------------------------------------------------------------------------------------- */

#define STALE "stale message of an earlier call"

/* A dirty err before every call: alternately a stale failure with a message, and garbage bytes (an uninitialised
 * struct: an invalid status, no NUL anywhere). */
static qvl_error *dirty(qvl_error *e) {
    static int k;
    if (k++ % 2) {
        e->status = QVL_ERR_INTERNAL;
        snprintf(e->message, sizeof e->message, "%s", STALE);
    } else {
        memset(e, 0xA5, sizeof *e);
    }
    return e;
}

static int has_nul(const qvl_error *e) { return memchr(e->message, '\0', sizeof e->message) != NULL; }

/* Contains `needle`, case-sensitively; NULL needle: nothing required. */
static int names(const qvl_error *e, const char *needle) { return !needle || strstr(e->message, needle) != NULL; }

static void report(const char *what, const char *why, qvl_status s, const qvl_error *e, const char *n1,
                   const char *n2) {
    fprintf(stderr, "  %s: %s (status %d \"%s\", err.status %d, message \"%.300s\"%s%s%s%s%s)\n", what, why, (int)s,
            qvl_status_name(s), (int)e->status, has_nul(e) ? e->message : "<no NUL>", n1 ? ", want \"" : "",
            n1 ? n1 : "", n1 ? "\"" : "", n2 ? " and \"" : "", n2 ? n2 : "");
}

/* A failure must say why: status, err.status, a one-line message of its own naming n1 and n2. */
static void check_failure(const char *what, qvl_status s, const qvl_error *e, const char *n1, const char *n2) {
    n_bad++;
    int ok = 1;
    const char *why = NULL;
    if (e->status != s) why = "err.status differs from the returned status";
    else if (!has_nul(e) || e->message[0] == '\0') why = "empty message", n_nomsg++;
    else if (strstr(e->message, ERR_NO_DETAIL)) why = "only the safety net's text", n_nomsg++;
    else if (strstr(e->message, STALE)) why = "the stale message of an earlier call";
    else if (strchr(e->message, '\n')) why = "more than one line";
    else if (!names(e, n1) || !names(e, n2)) why = "message does not name the input";
    if (why) ok = 0, report(what, why, s, e, n1, n2);
    else if (getenv("QVL_TEST_VERBOSE")) fprintf(stderr, "  ok: %.80s -> %s\n", what, e->message);
    CHECK(ok);
}

/* Must fail. */
static void expect_fail(const char *what, qvl_status s, const qvl_error *e, const char *n1, const char *n2) {
    if (s == QVL_OK) {
        n_bad++;
        report(what, "accepted, should fail", s, e, NULL, NULL);
        CHECK(s != QVL_OK);
        return;
    }
    check_failure(what, s, e, n1, n2);
}

/* Must succeed and leave err cleared. */
static int expect_ok(const char *what, qvl_status s, const qvl_error *e) {
    int ok = s == QVL_OK && e->status == QVL_OK && e->message[0] == '\0';
    if (!ok) report(what, s == QVL_OK ? "succeeded but err is not cleared" : "failed, should succeed", s, e, NULL,
                    NULL);
    CHECK(ok);
    return ok;
}

/* Either: a corpus file may be valid. Accepted ones must leave err cleared. */
static void either(const char *what, qvl_status s, const qvl_error *e, const char *n1, const char *n2) {
    if (s == QVL_OK) {
        n_accepted++;
        expect_ok(what, s, e);
    } else {
        check_failure(what, s, e, n1, n2);
    }
}

/* ---------------------------------------------------------------------------------------------------------------
 * Bad files and fuzz corpora, through the public API
 * ------------------------------------------------------------------------------------------------------------- */

static void image_bytes(const char *path) {
    size_t n;
    void *b = tu_read_file(path, &n);
    CHECK(b != NULL);
    if (!b) return;
    qvl_decode_params dp;
    qvl_decode_params_default(&dp);
    dp.max_pixels = 4u << 20;
    qvl_image img;
    qvl_error err;
    qvl_status s = qvl_image_decode(b, n, &dp, &img, dirty(&err));
    either(path, s, &err, NULL, NULL); /* bytes in memory: no name to give, but a message all the same */
    if (s != QVL_OK) CHECK(img.rgb == NULL && img.width == 0 && img.height == 0);
    qvl_image_free(&img);
    s = qvl_image_load(path, &dp, &img, dirty(&err));
    either(path, s, &err, path, NULL);
    qvl_image_free(&img);
    free(b);
}

static void test_bad_dir(void) {
    char dir[1024];
    size_t n;
    char **files = list_dir(tu_source_path("tests/data/bad", dir, sizeof dir), &n);
    CHECK(files && n >= 10);
    for (size_t i = 0; files && files[i]; i++) {
        const char *base = strrchr(files[i], '/') + 1;
        qvl_error err;
        if (strncmp(base, "video_", 6) == 0) {
            qvl_video v;
            expect_fail(files[i], qvl_video_load(files[i], NULL, &v, dirty(&err)), &err, files[i], NULL);
            CHECK(v.rgb == NULL && v.n_frames == 0);
            qvl_video_free(&v);
            /* A bad frame in a frame list. */
            char good[1024];
            const char *paths[2] = {tu_source_path("tests/data/video/frames/video_frame_0.png", good, sizeof good),
                                    files[i]};
            if (QVL_WITH_MEDIA) /* the good first frame is a PNG */
                expect_fail(files[i], qvl_video_from_images(paths, 2, NULL, &v, dirty(&err)), &err, files[i], NULL);
            qvl_video_free(&v);
        } else {
            image_bytes(files[i]);
            /* Every bad file is bad: none may be accepted from disk either. */
            qvl_image img;
            expect_fail(files[i], qvl_image_load(files[i], NULL, &img, dirty(&err)), &err, files[i], NULL);
            qvl_image_free(&img);
        }
    }
    free_list(files);
}

/* Pixel rows from a file (npy or safetensors corpus bytes written as one). */
static void rows_file(const char *label, const char *path, int must_fail) {
    float *rows = (float *)1;
    qvl_grid *grids = (qvl_grid *)1;
    size_t nr = 7, rl = 7, ng = 7;
    qvl_error err;
    qvl_status s = qvl_read_rows(path, &rows, &nr, &rl, &grids, &ng, dirty(&err));
    if (must_fail) expect_fail(label, s, &err, path, NULL);
    else either(label, s, &err, path, NULL);
    if (s != QVL_OK) CHECK(rows == NULL && grids == NULL && nr == 0 && rl == 0 && ng == 0);
    qvl_free(rows);
    qvl_free(grids);
}

static void test_corpus_rows(const char *corpus, const char *ext) {
    char dir[1024], rel[128];
    snprintf(rel, sizeof rel, "fuzz/corpus/%s", corpus);
    size_t n;
    char **files = list_dir(tu_source_path(rel, dir, sizeof dir), &n);
    CHECK(files && n > 0);
    for (size_t i = 0; files && files[i]; i++) {
        size_t len;
        void *b = tu_read_file(files[i], &len);
        CHECK(b != NULL);
        char name[300];
        snprintf(name, sizeof name, "%s_%s%s", corpus, strrchr(files[i], '/') + 1, ext);
        const char *p = tpath(name);
        CHECK(b && tu_write_file(p, b, len));
        rows_file(files[i], p, strncmp(strrchr(files[i], '/') + 1, "bad_", 4) == 0);
        free(b);
    }
    free_list(files);
}

static void test_corpus_decode(void) {
    char dir[1024];
    size_t n;
    char **files = list_dir(tu_source_path("fuzz/corpus/decode", dir, sizeof dir), &n);
    CHECK(files && n > 0);
    for (size_t i = 0; files && files[i]; i++) image_bytes(files[i]);
    free_list(files);
}

/* A fresh model directory holding `text` as `name`. */
static const char *model_dir_with(const char *sub, const char *name, const void *text, size_t len) {
    const char *d = tpath(sub);
    char p[1200];
    mkdir(d, 0777);
    snprintf(p, sizeof p, "%s/config.json", d);
    remove(p);
    snprintf(p, sizeof p, "%s/preprocessor_config.json", d);
    remove(p);
    snprintf(p, sizeof p, "%s/video_preprocessor_config.json", d);
    remove(p);
    snprintf(p, sizeof p, "%s/%s", d, name);
    CHECK(tu_write_file(p, text, len));
    return d;
}

static void preproc_load(const char *label, const char *dir, const char *name, int must_fail, const char *field) {
    qvl_preprocess_params pp;
    qvl_video_params vp;
    qvl_preprocess_params_default(&pp);
    qvl_video_params_default(&vp);
    qvl_error err;
    qvl_status s = qvl_preprocess_params_load(dir, &pp, &vp, dirty(&err));
    char file[1200];
    snprintf(file, sizeof file, "%s/%s", dir, name);
    if (must_fail) expect_fail(label, s, &err, file, field);
    else either(label, s, &err, file, field);
}

static void test_corpus_config(void) {
    char dir[1024];
    size_t n;
    char **files = list_dir(tu_source_path("fuzz/corpus/config", dir, sizeof dir), &n);
    CHECK(files && n > 0);
    for (size_t i = 0; files && files[i]; i++) {
        size_t len;
        void *b = tu_read_file(files[i], &len);
        CHECK(b != NULL);
        if (!b) continue;
        /* As config.json: no weights beside it, so even a valid config fails, naming the directory. */
        const char *d = model_dir_with("cfg", "config.json", b, len);
        qvl_model *m = (qvl_model *)1;
        qvl_error err;
        expect_fail(files[i], qvl_model_load(d, NULL, &m, dirty(&err)), &err, d, NULL);
        CHECK(m == NULL);
        qvl_model_free(m);
        /* As either preprocessor config. */
        d = model_dir_with("pre", "preprocessor_config.json", b, len);
        preproc_load(files[i], d, "preprocessor_config.json", 0, NULL);
        d = model_dir_with("vpre", "video_preprocessor_config.json", b, len);
        preproc_load(files[i], d, "video_preprocessor_config.json", 0, NULL);
        free(b);
    }
    free_list(files);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Hand-made bad inputs
 * ------------------------------------------------------------------------------------------------------------- */

static void test_bad_preprocessor_configs(void) {
    static const struct {
        const char *json, *field;
    } image[] = {
        {"{\"patch_size\": \"x\"}", "patch_size"},
        {"{\"patch_size\": -16}", "patch_size"},
        {"{\"patch_size\": 0}", "patch_size"},
        {"{\"patch_size\": 16.5}", "patch_size"},
        {"{\"patch_size\": 1e300}", "patch_size"},
        {"{\"patch_size\": true}", "patch_size"},
        {"{\"patch_size\": [16]}", "patch_size"},
        {"{\"patch_size\": {}}", "patch_size"},
        {"{\"merge_size\": 0}", "merge_size"},
        {"{\"merge_size\": \"2\"}", "merge_size"},
        {"{\"temporal_patch_size\": 100}", "temporal_patch_size"},
        {"{\"min_pixels\": -1}", "min_pixels"},
        {"{\"max_pixels\": \"many\"}", "max_pixels"},
        {"{\"min_pixels\": 1000, \"max_pixels\": 10}", "max_pixels"},
        {"{\"size\": {\"shortest_edge\": \"a\"}}", "shortest_edge"},
        {"{\"size\": {\"shortest_edge\": 100, \"longest_edge\": 10}}", "longest_edge"},
        {"{\"size\": {\"longest_edge\": -5}}", "longest_edge"},
        {"{\"size\": 5}", "size"},
        {"{\"size\": \"big\"}", "size"},
        {"{\"image_mean\": [0.5, 0.5]}", "image_mean"},
        {"{\"image_mean\": \"x\"}", "image_mean"},
        {"{\"image_mean\": [0.5, \"a\", 0.5]}", "image_mean"},
        {"{\"image_std\": [0.5, 0, 0.5]}", "image_std"},
        {"{\"image_std\": [0.5, 0.5, 1e300]}", "image_std"},
        {"{\"rescale_factor\": 0}", "rescale_factor"},
        {"{\"rescale_factor\": \"x\"}", "rescale_factor"},
        {"{", "JSON"},
        {"[]", "JSON"},
        {"", "JSON"},
        {"null", "JSON"},
        {"\"patch_size\"", "JSON"},
    };
    for (size_t i = 0; i < sizeof image / sizeof image[0]; i++) {
        const char *d = model_dir_with("pp", "preprocessor_config.json", image[i].json, strlen(image[i].json));
        preproc_load(image[i].json, d, "preprocessor_config.json", 1, image[i].field);
    }
    static const struct {
        const char *json, *field;
    } video[] = {
        {"{\"fps\": 0}", "fps"},
        {"{\"fps\": \"x\"}", "fps"},
        {"{\"fps\": -2}", "fps"},
        {"{\"min_frames\": 0}", "min_frames"},
        {"{\"max_frames\": -1}", "max_frames"},
        {"{\"max_frames\": 2.5}", "max_frames"},
        {"{\"num_frames\": 1.5}", "num_frames"},
        {"{\"num_frames\": [4]}", "num_frames"},
        {"{\"size\": {\"shortest_edge\": 100, \"longest_edge\": 10}}", "longest_edge"},
        {"{\"size\": {\"longest_edge\": \"x\"}}", "longest_edge"},
        {"{\"size\": []}", "size"},
        {"{\"min_pixels\": 0}", "min_pixels"},
        {"{\"cap_pixels_per_frame\": 1}", "cap_pixels_per_frame"},
        {"{\"cap_pixels_per_frame\": \"true\"}", "cap_pixels_per_frame"},
        {"{\"max_video_tokens\": 0}", "max_video_tokens"},
        {"{\"max_video_tokens\": 2.5}", "max_video_tokens"},
        {"{\"max_video_tokens\": 1e9}", "max_video_tokens"},
        {"not json", "JSON"},
    };
    for (size_t i = 0; i < sizeof video / sizeof video[0]; i++) {
        const char *d = model_dir_with("vp", "video_preprocessor_config.json", video[i].json, strlen(video[i].json));
        preproc_load(video[i].json, d, "video_preprocessor_config.json", 1, video[i].field);
    }
    /* A model directory whose preprocessor_config.json is a directory, and one that is too large. */
    const char *d = model_dir_with("ppdir", "x", "", 0);
    char p[1200];
    snprintf(p, sizeof p, "%s/preprocessor_config.json", d);
    mkdir(p, 0777);
    qvl_preprocess_params pp;
    qvl_preprocess_params_default(&pp);
    qvl_error err;
    either("preprocessor_config.json is a directory", qvl_preprocess_params_load(d, &pp, NULL, dirty(&err)), &err, p,
           NULL);
    rmdir(p);
    size_t big = (1u << 20) + 10;
    char *text = malloc(big);
    if (text) {
        memset(text, ' ', big);
        text[0] = '{';
        text[big - 1] = '}';
        d = model_dir_with("ppbig", "preprocessor_config.json", text, big);
        preproc_load("preprocessor_config.json over 1 MiB", d, "preprocessor_config.json", 1, NULL);
        free(text);
    }
}

static void test_bad_model_configs(void) {
    static const struct {
        const char *json, *field;
    } cfg[] = {
        {"{\"model_type\": \"llama\"}", "model_type"},
        {"{\"model_type\": 7}", "model_type"},
        {"{}", "model_type"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": 3}", "vision_config"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"depth\": \"x\"}}", "depth"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"depth\": -1}}", "depth"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"patch_size\": \"x\"}}", "patch_size"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"hidden_size\": 100, \"num_heads\": 3}}", "num_heads"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"hidden_act\": 5}}", "hidden_act"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"hidden_act\": \"relu\"}}", "hidden_act"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"deepstack_visual_indexes\": 3}}", "deepstack"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"deepstack_visual_indexes\": [99]}}", "deepstack"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"num_position_embeddings\": 10}}",
         "num_position_embeddings"},
        {"{\"model_type\": \"qwen3_vl\", \"vision_config\": {}, \"text_config\": {\"hidden_size\": 5}}",
         "hidden_size"},
        {"not json", "JSON"},
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        const char *d = model_dir_with("mc", "config.json", cfg[i].json, strlen(cfg[i].json));
        qvl_model *m;
        qvl_error err;
        char file[1200];
        snprintf(file, sizeof file, "%s/config.json", d);
        expect_fail(cfg[i].json, qvl_model_load(d, NULL, &m, dirty(&err)), &err, file, cfg[i].field);
    }
    qvl_model *m;
    qvl_error err;
    const char *none = tpath("no-such-model");
    expect_fail("missing model dir", qvl_model_load(none, NULL, &m, dirty(&err)), &err, none, NULL);
}

/* Little-endian .npy bytes with a given header dict and `data_bytes` zero bytes after it. */
static size_t npy_bytes(unsigned char *out, size_t cap, int major, const char *dict, size_t data_bytes) {
    size_t dl = strlen(dict), pre = major == 1 ? 10 : 12, n = pre + dl + data_bytes;
    if (n > cap) return 0;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (unsigned char)major;
    out[7] = 0;
    if (major == 1) {
        out[8] = (unsigned char)dl;
        out[9] = (unsigned char)(dl >> 8);
    } else {
        for (int k = 0; k < 4; k++) out[8 + k] = (unsigned char)(dl >> (8 * k));
    }
    memcpy(out + pre, dict, dl);
    memset(out + pre + dl, 0, data_bytes);
    return n;
}

static void test_npy_edges(void) {
    static const struct {
        int major;
        const char *dict;
        size_t data;
        int bad;
    } c[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, 0},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1536), }", 0, 0},
        {2, "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", 8, 0},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23, 1},  /* one byte short */
        {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", 24, 1},
        {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, 1},
        {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (6,), }", 6, 1},
        {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (a, 3), }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, }", 24, 1},
        {1, "{'descr': '<f4', 'shape': (2, 3), }", 24, 1},
        {1, "{'fortran_order': False, 'shape': (2, 3), }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1, }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 1), }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", 24, 1},
        {1, "{'descr': \"<f4\\\", 'fortran_order': False, 'shape': (2, 3), }", 24, 1},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
            "1,1,1,1,1,1,1,1), }", 4, 1},
        {4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, 1},
        {1, "[]", 0, 1},
    };
    unsigned char buf[1024];
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        size_t n = npy_bytes(buf, sizeof buf, c[i].major, c[i].dict, c[i].data);
        CHECK(n > 0);
        const char *p = tpath("edge.npy");
        CHECK(tu_write_file(p, buf, n));
        rows_file(c[i].dict, p, c[i].bad);
    }
    /* A header length past the end of the file, the magic alone, an empty file, a directory, a missing file. */
    size_t n = npy_bytes(buf, sizeof buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    buf[8] = 0xff;
    buf[9] = 0x7f;
    CHECK(tu_write_file(tpath("hlen.npy"), buf, n));
    rows_file("npy header length past the end", tpath("hlen.npy"), 1);
    CHECK(tu_write_file(tpath("magic.npy"), "\x93NUMPY", 6));
    rows_file("npy magic alone", tpath("magic.npy"), 1);
    CHECK(tu_write_file(tpath("empty.npy"), "", 0));
    rows_file("empty file", tpath("empty.npy"), 1);
    mkdir(tpath("adir.npy"), 0777);
    rows_file("a directory", tpath("adir.npy"), 1);
    rows_file("a missing file", tpath("missing.npy"), 1);
}

/* A safetensors file from a header and `data_bytes` bytes of `fill`. */
static void write_st(const char *path, const char *json, size_t data_bytes, unsigned char fill) {
    size_t hl = strlen(json), n = 8 + hl + data_bytes;
    unsigned char *b = malloc(n);
    if (!b) return;
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    memcpy(b + 8, json, hl);
    memset(b + 8 + hl, fill, data_bytes);
    CHECK(tu_write_file(path, b, n));
    free(b);
}

static void test_rows_safetensors_edges(void) {
    static const struct {
        const char *json;
        size_t data;
        unsigned char fill;
        const char *field;
        int bad;
    } c[] = {
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24, 0, NULL, 0},
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
         "\"grid_thw\":{\"dtype\":\"I64\",\"shape\":[1,3],\"data_offsets\":[12,36]}}", 36, 1, NULL, 0},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24, 0, "pixel_values", 1},
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[2,3,1],\"data_offsets\":[0,24]}}", 24, 0, "pixel_values", 1},
        {"{\"pixel_values\":{\"dtype\":\"I32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24, 0, "dtype", 1},
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
         "\"grid_thw\":{\"dtype\":\"I16\",\"shape\":[1,3],\"data_offsets\":[12,18]}}", 18, 1, "grid_thw", 1},
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
         "\"grid_thw\":{\"dtype\":\"I64\",\"shape\":[2,2],\"data_offsets\":[12,44]}}", 44, 1, "grid_thw", 1},
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
         "\"grid_thw\":{\"dtype\":\"I64\",\"shape\":[1,3],\"data_offsets\":[12,36]}}", 36, 0, "grid_thw", 1},
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
         "\"grid_thw\":{\"dtype\":\"I32\",\"shape\":[1,3],\"data_offsets\":[12,24]}}", 24, 0xff, "grid_thw", 1},
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
         "\"grid_thw\":{\"dtype\":\"I64\",\"shape\":[1,3],\"data_offsets\":[12,36]}}", 36, 0x7f, "grid_thw", 1},
        {"{\"pixel_values\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 20, 0, "pixel_values", 1},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const char *p = tpath("edge.safetensors");
        write_st(p, c[i].json, c[i].data, c[i].fill);
        float *rows;
        size_t nr, rl, ng;
        qvl_grid *g;
        qvl_error err;
        qvl_status s = qvl_read_rows(p, &rows, &nr, &rl, &g, &ng, dirty(&err));
        if (c[i].bad) expect_fail(c[i].json, s, &err, p, c[i].field);
        else either(c[i].json, s, &err, p, NULL);
        if (s == QVL_OK) {
            qvl_free(rows);
            qvl_free(g);
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------------
 * API misuse, and clear-on-entry of every public function that takes an err
 * ------------------------------------------------------------------------------------------------------------- */


static void test_image_api(void) {
    char p[1024];
    const char *png = tu_source_path("tests/data/video/frames/video_frame_0.png", p, sizeof p);
    qvl_error err;
    qvl_image img = {0}, out;
    expect_ok("qvl_image_load", qvl_image_load(png, NULL, &img, dirty(&err)), &err);
    expect_fail("qvl_image_load path", qvl_image_load(NULL, NULL, &out, dirty(&err)), &err, "path", NULL);
    expect_fail("qvl_image_load out", qvl_image_load(png, NULL, NULL, dirty(&err)), &err, "out", NULL);
    expect_fail("qvl_image_load missing", qvl_image_load(tpath("none.png"), NULL, &out, dirty(&err)), &err,
                tpath("none.png"), NULL);
    expect_fail("qvl_image_load dir", qvl_image_load(tmp, NULL, &out, dirty(&err)), &err, tmp, NULL);
    expect_fail("qvl_image_decode out", qvl_image_decode("x", 1, NULL, NULL, dirty(&err)), &err, "out", NULL);
    expect_fail("qvl_image_decode data", qvl_image_decode(NULL, 10, NULL, &out, dirty(&err)), &err, "data", NULL);
    expect_fail("qvl_image_decode empty", qvl_image_decode("", 0, NULL, &out, dirty(&err)), &err, NULL, NULL);
    qvl_decode_params dp;
    memset(&dp, 0, sizeof dp);
    expect_fail("qvl_image_load zeroed params", qvl_image_load(png, &dp, &out, dirty(&err)), &err, "struct_size",
                NULL);
    qvl_decode_params_default(&dp);
    dp.alpha = (qvl_alpha_mode)9;
    expect_fail("qvl_image_load alpha 9", qvl_image_load(png, &dp, &out, dirty(&err)), &err, "alpha", NULL);
    qvl_decode_params_default(&dp);
    dp.max_pixels = 10;
    expect_fail("qvl_image_load max_pixels 10", qvl_image_load(png, &dp, &out, dirty(&err)), &err, png, NULL);
    /* A struct from a newer header with a field this library does not know set. */
    struct {
        qvl_decode_params p;
        uint64_t extra;
    } newer;
    memset(&newer, 0, sizeof newer);
    qvl_decode_params_init(&newer.p, sizeof newer);
    newer.extra = 1;
    expect_fail("qvl_image_load newer params", qvl_image_load(png, &newer.p, &out, dirty(&err)), &err, "struct_size",
                NULL);

    /* Resize. */
    expect_ok("qvl_image_resize", qvl_image_resize(&img, 8, 8, QVL_RESIZE_PIL, 1, &out, dirty(&err)), &err);
    qvl_image_free(&out);
    expect_fail("qvl_image_resize src", qvl_image_resize(NULL, 8, 8, QVL_RESIZE_PIL, 1, &out, dirty(&err)), &err,
                "src", NULL);
    expect_fail("qvl_image_resize out", qvl_image_resize(&img, 8, 8, QVL_RESIZE_PIL, 1, NULL, dirty(&err)), &err,
                "out", NULL);
    expect_fail("qvl_image_resize 0x8", qvl_image_resize(&img, 0, 8, QVL_RESIZE_PIL, 1, &out, dirty(&err)), &err,
                "size", NULL);
    expect_fail("qvl_image_resize mode 9", qvl_image_resize(&img, 8, 8, (qvl_resize_mode)9, 1, &out, dirty(&err)),
                &err, "mode", NULL);
    expect_fail("qvl_image_resize n_threads -1", qvl_image_resize(&img, 8, 8, QVL_RESIZE_PIL, -1, &out, dirty(&err)),
                &err, "n_threads", NULL);
    expect_fail("qvl_image_resize n_threads 100000",
                qvl_image_resize(&img, 8, 8, QVL_RESIZE_PIL, 100000, &out, dirty(&err)), &err, "n_threads", NULL);

    /* Smart resize. */
    int32_t h, w;
    expect_ok("qvl_smart_resize", qvl_smart_resize(224, 300, 32, 4096, 1 << 20, &h, &w, dirty(&err)), &err);
    expect_fail("qvl_smart_resize height 0", qvl_smart_resize(0, 300, 32, 4096, 1 << 20, &h, &w, dirty(&err)), &err,
                "height", NULL);
    expect_fail("qvl_smart_resize factor -1", qvl_smart_resize(224, 300, -1, 4096, 1 << 20, &h, &w, dirty(&err)), &err,
                "factor", NULL);
    expect_fail("qvl_smart_resize aspect", qvl_smart_resize(10, 3000, 1, 1, 1 << 30, &h, &w, dirty(&err)), &err,
                "aspect", NULL);
    expect_fail("qvl_smart_resize out_height", qvl_smart_resize(224, 300, 32, 4096, 1 << 20, NULL, &w, dirty(&err)),
                &err, "out_height", NULL);
    expect_fail("qvl_smart_resize out_width", qvl_smart_resize(224, 300, 32, 4096, 1 << 20, &h, NULL, dirty(&err)),
                &err, "out_width", NULL);

    /* Grid and preprocess. */
    qvl_preprocess_params pp;
    qvl_preprocess_params_default(&pp);
    pp.min_pixels = 32 * 32;
    qvl_grid g;
    expect_ok("qvl_image_grid", qvl_image_grid(&img, &pp, &g, dirty(&err)), &err);
    size_t rows = qvl_patch_rows(&g, 1);
    float *buf = malloc(rows * 1536 * sizeof(float));
    CHECK(buf != NULL);
    expect_ok("qvl_preprocess_image", qvl_preprocess_image(&img, &pp, buf, &g, dirty(&err)), &err);
    expect_fail("qvl_image_grid img", qvl_image_grid(NULL, &pp, &g, dirty(&err)), &err, "img", NULL);
    expect_fail("qvl_image_grid grid", qvl_image_grid(&img, &pp, NULL, dirty(&err)), &err, "grid", NULL);
    expect_fail("qvl_preprocess_image rows", qvl_preprocess_image(&img, &pp, NULL, &g, dirty(&err)), &err, "rows",
                NULL);
    expect_fail("qvl_preprocess_image img", qvl_preprocess_image(NULL, &pp, buf, &g, dirty(&err)), &err, "img", NULL);
    static const struct {
        const char *what, *field;
    } badp[] = {{"zeroed", "struct_size"}, {"patch 0", "patch"},       {"merge 99", "merge"},
                {"resize 9", "resize"},    {"rescale 0", "rescale_factor"}, {"std 0", "image_std"},
                {"size 30x30", "size"},    {"n_threads -3", "n_threads"}};
    for (size_t i = 0; i < sizeof badp / sizeof badp[0]; i++) {
        qvl_preprocess_params q = pp; /* the grid `buf` was sized for, unless refused */
        switch (i) {
        case 0: memset(&q, 0, sizeof q); break;
        case 1: q.patch = 0; break;
        case 2: q.merge = 99; break;
        case 3: q.resize = (qvl_resize_mode)9; break;
        case 4: q.rescale_factor = 0; break;
        case 5: q.image_std[1] = 0; break;
        case 6: q.size_h = q.size_w = 30; break;
        case 7: q.n_threads = -3; break;
        }
        expect_fail(badp[i].what, qvl_image_grid(&img, &q, &g, dirty(&err)), &err, badp[i].field, NULL);
        expect_fail(badp[i].what, qvl_preprocess_image(&img, &q, buf, &g, dirty(&err)), &err, badp[i].field, NULL);
    }
    free(buf);
    qvl_image_free(&img);
}

static void test_video_api(void) {
    char f[5][1024], odd[1024];
    const char *paths[5];
    for (int i = 0; i < 5; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/video/frames/video_frame_%d.png", i);
        paths[i] = tu_source_path(rel, f[i], sizeof f[i]);
    }
    qvl_error err;
    qvl_video v = {0}, w;
    expect_ok("qvl_video_from_images", qvl_video_from_images(paths, 5, NULL, &v, dirty(&err)), &err);
    expect_fail("qvl_video_from_images paths", qvl_video_from_images(NULL, 5, NULL, &w, dirty(&err)), &err, "paths",
                NULL);
    expect_fail("qvl_video_from_images n 0", qvl_video_from_images(paths, 0, NULL, &w, dirty(&err)), &err, "n", NULL);
    expect_fail("qvl_video_from_images out", qvl_video_from_images(paths, 5, NULL, NULL, dirty(&err)), &err, "out",
                NULL);
    const char *withnull[2] = {paths[0], NULL};
    expect_fail("qvl_video_from_images NULL entry", qvl_video_from_images(withnull, 2, NULL, &w, dirty(&err)), &err,
                "path", NULL);
    const char *mixed[2] = {paths[0], tu_source_path("tests/data/video/frames/video_frame_12x16.png", odd, sizeof odd)};
    expect_fail("qvl_video_from_images sizes", qvl_video_from_images(mixed, 2, NULL, &w, dirty(&err)), &err, odd,
                NULL);

    char mp4[1024];
    tu_source_path("tests/data/video/video_3frames.mp4", mp4, sizeof mp4);
    qvl_video_params vp;
    qvl_video_params_default(&vp);
    qvl_status s = qvl_video_load(mp4, &vp, &w, dirty(&err));
    if (s == QVL_ERR_UNSUPPORTED) either("qvl_video_load (no video support)", s, &err, NULL, NULL);
    else expect_ok("qvl_video_load", s, &err);
    qvl_video_free(&w);
    expect_fail("qvl_video_load path", qvl_video_load(NULL, NULL, &w, dirty(&err)), &err, "path", NULL);
    expect_fail("qvl_video_load out", qvl_video_load(mp4, NULL, NULL, dirty(&err)), &err, "out", NULL);
    expect_fail("qvl_video_load missing", qvl_video_load(tpath("none.mp4"), NULL, &w, dirty(&err)), &err,
                tpath("none.mp4"), NULL);
    /* fps <= 0 means "every frame" (fps=None), default_fps is used only without a native rate, and min_frames 0 is
     * no minimum: those may pass; the others must fail. */
    static const struct {
        const char *what, *field;
        int must;
    } badv[] = {{"zeroed", "struct_size", 1},     {"fps -1", NULL, 0},       {"num_frames -2", "num_frames", 1},
                {"default_fps 0", NULL, 0},        {"min_frames 0", NULL, 0}, {"max_frames -1", "max_frames", 1}};
    for (size_t i = 0; i < sizeof badv / sizeof badv[0]; i++) {
        qvl_video_params q;
        qvl_video_params_default(&q);
        switch (i) {
        case 0: memset(&q, 0, sizeof q); break;
        case 1: q.fps = -1; break;
        case 2: q.num_frames = -2; break;
        case 3: q.default_fps = 0; break;
        case 4: q.min_frames = 0; break;
        case 5: q.max_frames = -1; break;
        }
        qvl_status s1 = qvl_video_from_images(paths, 5, &q, &w, dirty(&err));
        if (badv[i].must) expect_fail(badv[i].what, s1, &err, badv[i].field, NULL);
        else either(badv[i].what, s1, &err, NULL, NULL);
        qvl_video_free(&w);
        int64_t idx[16];
        size_t n;
        s1 = qvl_video_sample_indices(100, 30, &q, idx, 16, &n, dirty(&err));
        if (badv[i].must) expect_fail(badv[i].what, s1, &err, badv[i].field, NULL);
        else either(badv[i].what, s1, &err, NULL, NULL);
    }

    /* Sampling. */
    int64_t idx[64];
    size_t n;
    expect_ok("qvl_video_sample_indices", qvl_video_sample_indices(60, 30, NULL, idx, 64, &n, dirty(&err)), &err);
    expect_fail("qvl_video_sample_indices n", qvl_video_sample_indices(60, 30, NULL, idx, 64, NULL, dirty(&err)),
                &err, "n", NULL);
    expect_fail("qvl_video_sample_indices indices", qvl_video_sample_indices(60, 30, NULL, NULL, 64, &n, dirty(&err)),
                &err, "indices", NULL);
    expect_fail("qvl_video_sample_indices total 0", qvl_video_sample_indices(0, 30, NULL, idx, 64, &n, dirty(&err)),
                &err, "frames", NULL);
    expect_fail("qvl_video_sample_indices total -5", qvl_video_sample_indices(-5, 30, NULL, idx, 64, &n, dirty(&err)),
                &err, "frames", NULL);
    qvl_video_params nofps;
    qvl_video_params_default(&nofps);
    nofps.default_fps = 0;
    expect_fail("qvl_video_sample_indices no rate",
                qvl_video_sample_indices(60, 0.0 / 0.0, &nofps, idx, 64, &n, dirty(&err)), &err, "default_fps", NULL);

    /* Video grid and preprocess. */
    qvl_preprocess_params pp;
    qvl_preprocess_params_default(&pp);
    qvl_grid g;
    expect_ok("qvl_video_grid", qvl_video_grid(&v, &pp, &g, dirty(&err)), &err);
    float *buf = malloc(qvl_patch_rows(&g, 1) * 1536 * sizeof(float));
    CHECK(buf != NULL);
    expect_ok("qvl_preprocess_video", qvl_preprocess_video(&v, &pp, buf, &g, dirty(&err)), &err);
    expect_fail("qvl_video_grid v", qvl_video_grid(NULL, &pp, &g, dirty(&err)), &err, "v", NULL);
    expect_fail("qvl_video_grid grid", qvl_video_grid(&v, &pp, NULL, dirty(&err)), &err, "grid", NULL);
    expect_fail("qvl_preprocess_video rows", qvl_preprocess_video(&v, &pp, NULL, &g, dirty(&err)), &err, "rows",
                NULL);
    qvl_preprocess_params z;
    memset(&z, 0, sizeof z);
    expect_fail("qvl_video_grid zeroed", qvl_video_grid(&v, &z, &g, dirty(&err)), &err, "struct_size", NULL);
    free(buf);
    qvl_video_free(&v);

    /* Preprocessor configs. */
    qvl_preprocess_params q;
    qvl_preprocess_params_default(&q);
    expect_ok("qvl_preprocess_params_load", qvl_preprocess_params_load(tmp, &q, NULL, dirty(&err)), &err);
    expect_fail("qvl_preprocess_params_load model_dir", qvl_preprocess_params_load(NULL, &q, NULL, dirty(&err)), &err,
                "model_dir", NULL);
    expect_fail("qvl_preprocess_params_load zeroed", qvl_preprocess_params_load(tmp, &z, NULL, dirty(&err)), &err,
                "struct_size", NULL);
    qvl_video_params zv;
    memset(&zv, 0, sizeof zv);
    expect_fail("qvl_preprocess_params_load zeroed video", qvl_preprocess_params_load(tmp, NULL, &zv, dirty(&err)),
                &err, "struct_size", NULL);
}

static void test_files_api(void) {
    qvl_error err;
    float data[6] = {1, 2, 3, 4, 5, 6};
    const char *np = tpath("w.npy"), *sp = tpath("w.safetensors"), *bad = tpath("no/such/dir/x.npy");
    expect_ok("qvl_write_npy", qvl_write_npy(np, data, 2, 3, dirty(&err)), &err);
    expect_fail("qvl_write_npy path", qvl_write_npy(NULL, data, 2, 3, dirty(&err)), &err, "path", NULL);
    expect_fail("qvl_write_npy data", qvl_write_npy(np, NULL, 2, 3, dirty(&err)), &err, "data", NULL);
    expect_fail("qvl_write_npy overflow", qvl_write_npy(np, data, SIZE_MAX, 3, dirty(&err)), &err, np, NULL);
    expect_fail("qvl_write_npy no dir", qvl_write_npy(bad, data, 2, 3, dirty(&err)), &err, bad, NULL);

    float *rows;
    size_t nr, rl, ng;
    qvl_grid *g;
    expect_ok("qvl_read_rows", qvl_read_rows(np, &rows, &nr, &rl, NULL, NULL, dirty(&err)), &err);
    qvl_free(rows);
    expect_fail("qvl_read_rows path", qvl_read_rows(NULL, &rows, &nr, &rl, &g, &ng, dirty(&err)), &err, "path", NULL);
    expect_fail("qvl_read_rows rows", qvl_read_rows(np, NULL, &nr, &rl, &g, &ng, dirty(&err)), &err, "rows", NULL);
    expect_fail("qvl_read_rows n_rows", qvl_read_rows(np, &rows, NULL, &rl, &g, &ng, dirty(&err)), &err, "n_rows",
                NULL);
    expect_fail("qvl_read_rows row_len", qvl_read_rows(np, &rows, &nr, NULL, &g, &ng, dirty(&err)), &err, "row_len",
                NULL);
    expect_fail("qvl_read_rows n_grids", qvl_read_rows(np, &rows, &nr, &rl, &g, NULL, dirty(&err)), &err, "n_grids",
                NULL);

    qvl_out_tensor t[2] = {{"a", data, 2, 3}, {"b", data, 3, 2}};
    qvl_grid grids[1] = {{1, 2, 2}};
    const char *meta[2] = {"k", "v"};
    expect_ok("qvl_write_safetensors", qvl_write_safetensors(sp, t, 2, grids, 1, meta, 1, dirty(&err)), &err);
    expect_fail("qvl_write_safetensors path", qvl_write_safetensors(NULL, t, 2, NULL, 0, NULL, 0, dirty(&err)), &err,
                "path", NULL);
    expect_fail("qvl_write_safetensors t", qvl_write_safetensors(sp, NULL, 2, NULL, 0, NULL, 0, dirty(&err)), &err,
                "t ", NULL);
    expect_fail("qvl_write_safetensors grids", qvl_write_safetensors(sp, t, 2, NULL, 1, NULL, 0, dirty(&err)), &err,
                "grids", NULL);
    qvl_out_tensor dup[2] = {{"a", data, 2, 3}, {"a", data, 3, 2}};
    expect_fail("qvl_write_safetensors duplicate", qvl_write_safetensors(sp, dup, 2, NULL, 0, NULL, 0, dirty(&err)),
                &err, sp, "a");
    qvl_out_tensor gt[1] = {{"grid_thw", data, 2, 3}};
    expect_fail("qvl_write_safetensors grid_thw clash", qvl_write_safetensors(sp, gt, 1, grids, 1, NULL, 0,
                dirty(&err)), &err, sp, "grid_thw");
    qvl_out_tensor noname[1] = {{NULL, data, 2, 3}};
    expect_fail("qvl_write_safetensors NULL name", qvl_write_safetensors(sp, noname, 1, NULL, 0, NULL, 0, dirty(&err)),
                &err, sp, "name");
    qvl_out_tensor nodata[1] = {{"a", NULL, 2, 3}};
    expect_fail("qvl_write_safetensors NULL data", qvl_write_safetensors(sp, nodata, 1, NULL, 0, NULL, 0, dirty(&err)),
                &err, sp, "data");
    const char *badmeta[2] = {"k", NULL};
    expect_fail("qvl_write_safetensors NULL meta value", qvl_write_safetensors(sp, t, 2, NULL, 0, badmeta, 1,
                dirty(&err)), &err, sp, "value");
    expect_fail("qvl_write_safetensors NULL meta", qvl_write_safetensors(sp, t, 2, NULL, 0, NULL, 1, dirty(&err)),
                &err, sp, "meta");
    const char *bads = tpath("no/such/dir/x.safetensors");
    expect_fail("qvl_write_safetensors no dir", qvl_write_safetensors(bads, t, 2, NULL, 0, NULL, 0, dirty(&err)),
                &err, bads, NULL);
    /* Read back: a safetensors file with no pixel_values names the file and the tensor it wants. */
    expect_fail("qvl_read_rows no pixel_values", qvl_read_rows(sp, &rows, &nr, &rl, &g, &ng, dirty(&err)), &err, sp,
                "pixel_values");
    /* Neither magic: a damaged .npy (whatever its name) is not parsed as safetensors ("header length 3785..."). */
    static const char damaged[] = "\x93NUMPX\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
    const char *dn[2] = {tpath("damaged.bin"), tpath("damaged.npy")};
    for (int i = 0; i < 2; i++) {
        CHECK(tu_write_file(dn[i], damaged, sizeof damaged - 1));
        expect_fail("qvl_read_rows bad magic", qvl_read_rows(dn[i], &rows, &nr, &rl, &g, &ng, dirty(&err)), &err,
                    dn[i], "neither a .npy (magic \\x93NUMPY) nor a safetensors file");
    }
}

static void test_model_api(const char *model_dir) {
    qvl_error err;
    qvl_model *m = NULL, *m2;
    expect_ok("qvl_model_load", qvl_model_load(model_dir, NULL, &m, dirty(&err)), &err);
    CHECK(m != NULL);
    if (!m) return;
    expect_fail("qvl_model_load dir", qvl_model_load(NULL, NULL, &m2, dirty(&err)), &err, "dir", NULL);
    expect_fail("qvl_model_load empty dir", qvl_model_load("", NULL, &m2, dirty(&err)), &err, "dir", NULL);
    expect_fail("qvl_model_load out", qvl_model_load(model_dir, NULL, NULL, dirty(&err)), &err, "out", NULL);
    qvl_load_params lp;
    memset(&lp, 0, sizeof lp);
    expect_fail("qvl_model_load zeroed", qvl_model_load(model_dir, &lp, &m2, dirty(&err)), &err, "struct_size", NULL);
    qvl_load_params_default(&lp);
    lp.isa = (qvl_isa)7;
    expect_fail("qvl_model_load isa 7", qvl_model_load(model_dir, &lp, &m2, dirty(&err)), &err, "isa", NULL);
    qvl_load_params_default(&lp);
    lp.n_threads = -1;
    expect_fail("qvl_model_load n_threads -1", qvl_model_load(model_dir, &lp, &m2, dirty(&err)), &err, "n_threads",
                NULL);
    lp.n_threads = QVL_MAX_THREADS + 1;
    expect_fail("qvl_model_load n_threads max+1", qvl_model_load(model_dir, &lp, &m2, dirty(&err)), &err,
                "n_threads", NULL);

    uint8_t digest[16];
    char hex[33];
    expect_ok("qvl_model_fingerprint", qvl_model_fingerprint(m, digest, hex, dirty(&err)), &err);
    expect_fail("qvl_model_fingerprint model", qvl_model_fingerprint(NULL, digest, hex, dirty(&err)), &err, "model",
                NULL);

    qvl_ctx *ctx = NULL, *c2;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = 1;
    expect_ok("qvl_ctx_create", qvl_ctx_create(m, &cp, &ctx, dirty(&err)), &err);
    expect_fail("qvl_ctx_create model", qvl_ctx_create(NULL, &cp, &c2, dirty(&err)), &err, "model", NULL);
    expect_fail("qvl_ctx_create out", qvl_ctx_create(m, &cp, NULL, dirty(&err)), &err, "out", NULL);
    cp.n_threads = -1;
    expect_fail("qvl_ctx_create n_threads -1", qvl_ctx_create(m, &cp, &c2, dirty(&err)), &err, "n_threads", NULL);
    cp.n_threads = QVL_MAX_THREADS + 1;
    expect_fail("qvl_ctx_create n_threads max+1", qvl_ctx_create(m, &cp, &c2, dirty(&err)), &err, "n_threads", NULL);
    qvl_ctx_params_default(&cp);
    cp.pos_mode = (qvl_pos_mode)5;
    expect_fail("qvl_ctx_create pos_mode 5", qvl_ctx_create(m, &cp, &c2, dirty(&err)), &err, "pos_mode", NULL);
    memset(&cp, 0, sizeof cp);
    expect_fail("qvl_ctx_create zeroed", qvl_ctx_create(m, &cp, &c2, dirty(&err)), &err, "struct_size", NULL);
    if (!ctx) {
        qvl_model_free(m);
        return;
    }

    /* Plans: arguments, params and items. */
    {
        qvl_plan *pl = NULL;
        qvl_item it;
        qvl_item_default(&it);
        char photo[1024];
        it.path = tu_source_path("tests/data/photos/rocket.jpg", photo, sizeof photo);
        if (!QVL_WITH_MEDIA) { /* a ROWS item instead of the photo */
            static float rows[16 * 1536];
            it.kind = QVL_ITEM_ROWS, it.rows = rows, it.grid = (qvl_grid){1, 2, 2};
        }
        expect_ok("qvl_plan_create", qvl_plan_create(ctx, &it, 1, NULL, &pl, dirty(&err)), &err);
        expect_fail("qvl_plan_create out", qvl_plan_create(ctx, &it, 1, NULL, NULL, dirty(&err)), &err, "out", NULL);
        qvl_plan *p2 = NULL;
        expect_fail("qvl_plan_create items", qvl_plan_create(ctx, NULL, 1, NULL, &p2, dirty(&err)), &err, "items",
                    NULL);
        qvl_item zero;
        memset(&zero, 0, sizeof zero);
        expect_fail("qvl_plan_create zeroed item", qvl_plan_create(ctx, &zero, 1, NULL, &p2, dirty(&err)), &err,
                    "struct_size", "qvl_item_default");
        qvl_plan_params pp;
        memset(&pp, 0, sizeof pp);
        expect_fail("qvl_plan_create zeroed params", qvl_plan_create(ctx, &it, 1, &pp, &p2, dirty(&err)), &err,
                    "qvl_plan_params", NULL);
        qvl_plan_params_default(&pp);
        pp.layout = (qvl_output_layout)7;
        expect_fail("qvl_plan_create layout 7", qvl_plan_create(ctx, &it, 1, &pp, &p2, dirty(&err)), &err, "layout",
                    NULL);
        qvl_plan_params_default(&pp);
        pp.dtype = (qvl_dtype)7;
        expect_fail("qvl_plan_create dtype 7", qvl_plan_create(ctx, &it, 1, &pp, &p2, dirty(&err)), &err, "dtype",
                    NULL);
        expect_fail("qvl_plan_encode ctx", qvl_plan_encode(NULL, pl, NULL, dirty(&err)), &err, "ctx", NULL);
        expect_fail("qvl_plan_encode plan", qvl_plan_encode(ctx, NULL, NULL, dirty(&err)), &err, "plan", NULL);
        expect_fail("qvl_plan_encode outputs", qvl_plan_encode(ctx, pl, NULL, dirty(&err)), &err, "outputs", NULL);
        expect_fail("qvl_plan_encode_chunks ctx", qvl_plan_encode_chunks(NULL, pl, NULL, NULL, NULL, dirty(&err)), &err,
                    "qvl_plan_encode_chunks: ctx", NULL);
        expect_fail("qvl_plan_encode_chunks outputs", qvl_plan_encode_chunks(ctx, pl, NULL, NULL, NULL, dirty(&err)),
                    &err, "qvl_plan_encode_chunks: outputs", NULL);
        expect_fail("qvl_ctx_reserve_plan plan", qvl_ctx_reserve_plan(ctx, NULL, dirty(&err)), &err, "plan", NULL);
        expect_ok("qvl_ctx_reserve_plan", qvl_ctx_reserve_plan(ctx, pl, dirty(&err)), &err);
        qvl_item_info info;
        qvl_plan_item(pl, 0, &info);
        void *o = malloc(info.out_bytes);
        expect_ok("qvl_plan_encode", qvl_plan_encode(ctx, pl, &o, dirty(&err)), &err);
        free(o);
        qvl_plan_item(pl, 5, &info);
        CHECK(info.status == QVL_ERR_INVALID_ARG && strstr(info.message, "out of range"));
        qvl_plan_free(pl);
        /* Each bad item kind through the plan: the item fails alone, its message names it. */
        static const char *labels[] = {"no path", "no bytes", "no pixels", "no frames", "no rows", "kind 9"};
        qvl_item bad[6];
        for (int i = 0; i < 6; i++) qvl_item_default(&bad[i]), bad[i].label = labels[i];
        bad[0].kind = QVL_ITEM_PATH, bad[1].kind = QVL_ITEM_ENCODED, bad[2].kind = QVL_ITEM_PIXELS;
        bad[3].kind = QVL_ITEM_FRAMES, bad[4].kind = QVL_ITEM_ROWS, bad[5].kind = (qvl_item_kind)9;
        expect_ok("qvl_plan_create bad items", qvl_plan_create(ctx, bad, 6, NULL, &pl, dirty(&err)), &err);
        for (int i = 0; i < 6; i++) {
            qvl_plan_item(pl, i, &info);
            qvl_error ie;
            ie.status = info.status;
            snprintf(ie.message, sizeof ie.message, "%s", info.message);
            expect_fail(labels[i], info.status, &ie, labels[i], NULL);
        }
        qvl_plan_free(pl);
    }

    qvl_model_info in;
    qvl_model_get_info(m, &in);
    expect_ok("qvl_ctx_reserve", qvl_ctx_reserve(ctx, 16, 16, dirty(&err)), &err);
    expect_fail("qvl_ctx_reserve ctx", qvl_ctx_reserve(NULL, 16, 16, dirty(&err)), &err, "ctx", NULL);
    /* A failed reserve leaves the ctx as it was (its sizing pass once cleared the scratch pointers, and the next
     * encode on that ctx crashed): the encode below runs on the same ctx. */
    expect_fail("qvl_ctx_reserve SIZE_MAX", qvl_ctx_reserve(ctx, SIZE_MAX, 16, dirty(&err)), &err, "rows", NULL);

    /* Encode: one 1x2x2 grid (4 rows); merged [1, out_hidden]. */
    const size_t RL = (size_t)in.row_len, O = (size_t)in.out_hidden, H = (size_t)in.hidden;
    float *px = calloc(16 * RL, sizeof(float)), *merged = calloc(16 * O, sizeof(float));
    float *hid = calloc(16 * H, sizeof(float)), *out = calloc(16 * H, sizeof(float));
    CHECK(px && merged && hid && out);
    if (px && merged && hid && out) {
        qvl_grid g1 = {1, 2, 2};
        expect_ok("qvl_encode", qvl_encode(ctx, px, 4, &g1, 1, merged, NULL, dirty(&err)), &err);
        expect_ok("qvl_run_blocks", qvl_run_blocks(ctx, hid, 4, &g1, 1, 0, out, dirty(&err)), &err);
        expect_fail("qvl_encode ctx", qvl_encode(NULL, px, 4, &g1, 1, merged, NULL, dirty(&err)), &err, "ctx", NULL);
        expect_fail("qvl_encode pixels", qvl_encode(ctx, NULL, 4, &g1, 1, merged, NULL, dirty(&err)), &err, "pixels",
                    NULL);
        expect_fail("qvl_encode merged", qvl_encode(ctx, px, 4, &g1, 1, NULL, NULL, dirty(&err)), &err, "merged",
                    NULL);
        expect_fail("qvl_encode grids", qvl_encode(ctx, px, 4, NULL, 1, merged, NULL, dirty(&err)), &err, "grids",
                    NULL);
        expect_fail("qvl_encode n_grids 0", qvl_encode(ctx, px, 4, &g1, 0, merged, NULL, dirty(&err)), &err, "grids",
                    NULL);
        expect_fail("qvl_encode rows 5", qvl_encode(ctx, px, 5, &g1, 1, merged, NULL, dirty(&err)), &err, "rows",
                    NULL);
        expect_fail("qvl_encode rows 0", qvl_encode(ctx, px, 0, &g1, 1, merged, NULL, dirty(&err)), &err, "rows",
                    NULL);
        static const qvl_grid bad[] = {{1, 3, 2}, {0, 2, 2}, {1, 2, -2}, {-1, 2, 2}, {1, 0, 0}, {1, 2, 3}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char what[64];
            snprintf(what, sizeof what, "qvl_encode grid %dx%dx%d", bad[i].t, bad[i].h, bad[i].w);
            expect_fail(what, qvl_encode(ctx, px, 4, &bad[i], 1, merged, NULL, dirty(&err)), &err, "grid", NULL);
            expect_fail(what, qvl_run_blocks(ctx, hid, 4, &bad[i], 1, 1, out, dirty(&err)), &err, "grid", NULL);
        }
        qvl_grid huge = {1, 1 << 16, 1 << 16};
        expect_fail("qvl_encode huge grid", qvl_encode(ctx, px, 4, &huge, 1, merged, NULL, dirty(&err)), &err, "grid",
                    NULL);
        expect_fail("qvl_run_blocks ctx", qvl_run_blocks(NULL, hid, 4, &g1, 1, 0, out, dirty(&err)), &err, "ctx",
                    NULL);
        expect_fail("qvl_run_blocks hidden", qvl_run_blocks(ctx, NULL, 4, &g1, 1, 0, out, dirty(&err)), &err, "hidden",
                    NULL);
        expect_fail("qvl_run_blocks out", qvl_run_blocks(ctx, hid, 4, &g1, 1, 0, NULL, dirty(&err)), &err, "out",
                    NULL);
        expect_fail("qvl_run_blocks rows 8", qvl_run_blocks(ctx, hid, 8, &g1, 1, 0, out, dirty(&err)), &err, "rows",
                    NULL);
        /* And a success right after a failure on the same err leaves it cleared. */
        qvl_encode(ctx, px, 5, &g1, 1, merged, NULL, &err);
        CHECK(err.status != QVL_OK);
        expect_ok("qvl_encode after a failure", qvl_encode(ctx, px, 4, &g1, 1, merged, NULL, &err), &err);
    }
    free(px);
    free(merged);
    free(hid);
    free(out);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
}

static void test_synth_api(const char *model_dir) {
    qvl_error err;
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    sp.preset = "tiny";
    expect_ok("qvl_synth_write", qvl_synth_write(&sp, model_dir, dirty(&err)), &err);
    expect_fail("qvl_synth_write dir", qvl_synth_write(&sp, NULL, dirty(&err)), &err, "dir", NULL);
    expect_fail("qvl_synth_write empty dir", qvl_synth_write(&sp, "", dirty(&err)), &err, "dir", NULL);
    static const struct {
        const char *what, *field;
    } bad[] = {{"zeroed", "struct_size"},   {"preset", "preset"},           {"layout 9", "layout"},
               {"dtype 9", "dtype"},        {"depth -1", "depth"},          {"n_deepstack 9", "n_deepstack"},
               {"index 99", "deepstack_index"}, {"decreasing", "deepstack_index"},
               {"qwen3.5 deepstack", "n_deepstack"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qvl_synth_params p;
        qvl_synth_params_default(&p);
        switch (i) {
        case 0: memset(&p, 0, sizeof p); break;
        case 1: p.preset = "no-such-preset"; break;
        case 2: p.layout = (qvl_synth_layout)9; break;
        case 3: p.dtype = (qvl_dtype)9; break;
        case 4: p.depth = -1; break;
        case 5: p.n_deepstack = 9; break;
        case 6: p.n_deepstack = 1, p.deepstack_index[0] = 99; break;
        case 7: p.n_deepstack = 2, p.deepstack_index[0] = 2, p.deepstack_index[1] = 1; break;
        case 8: p.preset = "tiny-3.5", p.n_deepstack = 1, p.deepstack_index[0] = 0; break;
        }
        expect_fail(bad[i].what, qvl_synth_write(&p, tpath("synth-bad"), dirty(&err)), &err, bad[i].field, NULL);
    }
    /* A directory path that is a file. */
    const char *file = tpath("afile");
    CHECK(tu_write_file(file, "x", 1));
    expect_fail("qvl_synth_write onto a file", qvl_synth_write(&sp, file, dirty(&err)), &err, file, NULL);
}

/* err_fail itself: the first failure wins only over a real one; the net catches an empty format. */
static void test_err_fail(void) {
    qvl_error e;
    err_clear(&e);
    CHECK(err_fail(&e, QVL_ERR_IO, "first %d", 1) == QVL_ERR_IO && strcmp(e.message, "first 1") == 0);
    CHECK(err_fail(&e, QVL_ERR_FORMAT, "second") == QVL_ERR_FORMAT && e.status == QVL_ERR_IO &&
          strcmp(e.message, "first 1") == 0);
    memset(&e, 0xA5, sizeof e); /* garbage: not a failure, so it does not hide this one */
    CHECK(err_fail(&e, QVL_ERR_SHAPE, "real cause") == QVL_ERR_SHAPE && e.status == QVL_ERR_SHAPE &&
          strcmp(e.message, "real cause") == 0);
    e.status = QVL_ERR_IO; /* a status with no message, as a hand-rolled assignment leaves it */
    e.message[0] = '\0';
    err_fail(&e, QVL_ERR_LIMIT, "limit");
    CHECK(e.status == QVL_ERR_LIMIT && strcmp(e.message, "limit") == 0);
    err_clear(&e);
    const char *empty = "";
    err_fail(&e, QVL_ERR_NOMEM, "%s", empty);
    CHECK(e.status == QVL_ERR_NOMEM && strstr(e.message, ERR_NO_DETAIL) && strstr(e.message, "out of memory"));
    CHECK(err_fail(NULL, QVL_ERR_IO, "x") == QVL_ERR_IO);
}

int main(void) {
    double t0 = tu_now();
    CHECK(tu_tmpdir(tmp, sizeof tmp) != NULL);
    test_err_fail();
    test_bad_dir();
    test_corpus_rows("npy", ".npy");
    test_corpus_rows("safetensors", ".safetensors");
    test_corpus_decode();
    test_corpus_config();
    test_bad_preprocessor_configs();
    test_bad_model_configs();
    test_npy_edges();
    test_rows_safetensors_edges();
    if (QVL_WITH_MEDIA) { /* both decode good images first */
        test_image_api();
        test_video_api();
    } else {
        printf("test_errors: image and video API cases skipped, built without image decoders (QVL_MEDIA=OFF)\n");
    }
    test_files_api();
    char model[1024];
    snprintf(model, sizeof model, "%s", tpath("model"));
    test_synth_api(model);
    test_model_api(model);
    printf("test_errors: %d bad inputs, %d accepted, %d without a message (%.1f s)\n", n_bad, n_accepted, n_nomsg,
           tu_now() - t0);
    CHECK(n_nomsg == 0);
    CHECK(n_bad > 300);
    tu_rmtree(tmp);
    return tu_finish("test_errors");
}
