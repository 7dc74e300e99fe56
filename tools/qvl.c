/* qvl.c — the qvl command-line tool: dispatch, shared helpers, and the `info` and `synth` commands
 * (`encode` lives in cli_encode.c). Errors print one line "qvl: error: <reason>" on stderr; a failed operation
 * exits 1, a usage error 2. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>

#include "cli.h"
#if QVL_WITH_SERVER
#include "serve/serve.h"
#endif

/* ---------------------------------------------------------------------------------------------------------------
 * Shared helpers
 * ------------------------------------------------------------------------------------------------------------- */

static int vreport(int code, const char *fmt, va_list ap) CLI_PRINTF(2, 0);
static int vreport(int code, const char *fmt, va_list ap) {
    char msg[1200];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* Keep the report to one line whatever the message holds. */
    for (char *c = msg; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    fprintf(stderr, "qvl: error: %s\n", msg);
    return code;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vreport(CLI_EXIT_FAIL, fmt, ap);
    va_end(ap);
    return r;
}

int cli_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vreport(CLI_EXIT_USAGE, fmt, ap);
    va_end(ap);
    return r;
}

int cli_bad_option(const char *cmd, int c, char **argv) {
    const char *arg = argv[optind - 1];
    if (c == ':') return cli_usage("option '%s' needs a value (see 'qvl %s --help')", arg, cmd);
    if (optopt) return cli_usage("unknown option '-%c' (see 'qvl %s --help')", optopt, cmd);
    return cli_usage("unknown option '%s' (see 'qvl %s --help')", arg, cmd);
}

int cli_parse_isa(const char *s, qvl_isa *out) {
    if (strcmp(s, "auto") == 0) *out = QVL_ISA_AUTO;
    else if (strcmp(s, "avx2") == 0) *out = QVL_ISA_AVX2;
    else if (strcmp(s, "avx512") == 0) *out = QVL_ISA_AVX512;
    else if (strcmp(s, "amx") == 0) *out = QVL_ISA_AMX;
    else return -1;
    return 0;
}

int cli_parse_precision(const char *s, qvl_precision *out) {
    if (strcmp(s, "f32") == 0) *out = QVL_PRECISION_F32;
    else if (strcmp(s, "bf16") == 0) *out = QVL_PRECISION_BF16;
    else if (strcmp(s, "auto") == 0) *out = QVL_PRECISION_AUTO;
    else return -1;
    return 0;
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = (uint64_t)v;
    return 0;
}

int cli_alloc_outputs(size_t n_tok, size_t O, int n_ds, float **merged, float *ds[QVL_MAX_DEEPSTACK]) {
    if (n_tok && O > ((size_t)-1 / sizeof(float) - 1) / n_tok) return -1;
    const size_t bytes = n_tok * O * sizeof(float) + 1; /* + 1: never malloc(0) */
    if (!(*merged = malloc(bytes))) return -1;
    for (int k = 0; k < n_ds; k++)
        if (!(ds[k] = malloc(bytes))) return -1;
    return 0;
}

static const char *kind_of(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) || S_ISBLK(m) ? "a device"
           : S_ISSOCK(m) ? "a socket" : "a special file";
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* 1 (and the name in `hit`) if a regular file directly in `dir` is the file `o`. */
static int in_dir(const char *dir, const struct stat *o, char *hit, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    struct stat st;
    int found = 0;
    while (!found && (e = readdir(d))) {
        snprintf(hit, cap, "%s/%s", dir, e->d_name);
        found = stat(hit, &st) == 0 && S_ISREG(st.st_mode) && same_file(&st, o);
    }
    closedir(d);
    return found;
}

int cli_check_output(const char *out, const char *model_dir, const char *const *inputs, int n_inputs) {
    struct stat o, st, parent;
    int have = stat(out, &o) == 0;
    if (have && !S_ISREG(o.st_mode))
        return cli_usage("-o %s: exists and is %s, not a regular file; refusing to replace it", out, kind_of(o.st_mode));
    char dir[4096];
    const char *slash = strrchr(out, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == out ? 1 : (int)(slash - out), out);
    int have_parent = stat(dir, &parent) == 0;
    for (int i = 0; i < n_inputs; i++) {
        if (stat(inputs[i], &st) != 0) continue; /* the input's own error comes later */
        if (have && S_ISREG(st.st_mode) && same_file(&st, &o))
            return cli_usage("-o %s is the input %s; refusing to overwrite an input", out, inputs[i]);
        if (have_parent && S_ISDIR(st.st_mode) && same_file(&st, &parent))
            return cli_usage("-o %s is inside the frame directory input %s; refusing to write there", out, inputs[i]);
    }
    if (have && model_dir) {
        char hit[4096], sub[4096];
        snprintf(sub, sizeof sub, "%s/optiq", model_dir);
        if (in_dir(model_dir, &o, hit, sizeof hit) || in_dir(sub, &o, hit, sizeof hit))
            return cli_usage("-o %s is %s, a file of the model; refusing to overwrite it", out, hit);
    }
    return 0;
}

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---------------------------------------------------------------------------------------------------------------
 * qvl info
 * ------------------------------------------------------------------------------------------------------------- */

static const char info_help[] =
    "Usage: qvl info --model DIR [--json]\n"
    "\n"
    "Read the vision tower of a model directory and describe it: family, dimensions, DeepStack taps, tensor and\n"
    "parameter counts, weight dtype and bytes, where the weights were found, tensor prefix, conv layout, the\n"
    "content fingerprint and the kernels an encode would run. Every weight is read and checked finite (the\n"
    "exit status is 1 if one is not), but none is packed for the kernels.\n"
    "\n"
    "Options:\n"
    "  -m, --model DIR   model directory (config.json + safetensors)\n"
    "      --json        one JSON object on stdout instead: the same values under the names qvl serve's GET /info\n"
    "                    uses (model_type, fingerprint, weight_dtype, kernels, qvl_version, ...), deepstack_index a\n"
    "                    list, bf16_kernels null where there is no bf16 kernel set; auto_precision what\n"
    "                    --precision auto runs on this CPU and why\n"
    "  -h, --help        show this help\n"
    "\n"
    "Examples:\n"
    "  qvl info --model Qwen3-VL-2B-Instruct\n"
    "  qvl info --model Qwen3-VL-2B-Instruct --json      # as qvl serve's GET /info\n";

static const char *source_name(qvl_weight_source s) {
    switch (s) {
    case QVL_SOURCE_SIDECAR: return "sidecar";
    case QVL_SOURCE_SHARDED: return "sharded";
    case QVL_SOURCE_SINGLE: return "single";
    }
    return "?";
}

/* 0 when everything printed reached stdout; else the failure (a full disk, a closed pipe) as an error, 1. */
static int stdout_flushed(void) {
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    return cli_fail("writing to stdout: %s", strerror(errno));
}

/* `s` with every byte that is not part of well-formed UTF-8 replaced by '?', into out (n bytes): JSON strings are
 * Unicode, and a path is any bytes. */
static const char *utf8_or_marks(const char *s, char *out, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p && o + 5 < n) {
        const int len = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 && p[0] >= 0xc2 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3
                        : (p[0] & 0xf8) == 0xf0 && p[0] <= 0xf4 ? 4 : 0;
        int ok = len > 0;
        for (int k = 1; ok && k < len; k++) ok = (p[k] & 0xc0) == 0x80;
        if (ok && len == 3) { /* no overlong forms, no surrogates */
            const unsigned cp = (p[0] & 0x0fu) << 12 | (p[1] & 0x3fu) << 6;
            ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
        }
        if (ok && len == 4) {
            const unsigned cp = (p[0] & 0x07u) << 18 | (p[1] & 0x3fu) << 12;
            ok = cp >= 0x10000 && cp <= 0x10ffff;
        }
        if (!ok) {
            out[o++] = '?', p++;
            continue;
        }
        for (int k = 0; k < len; k++) out[o++] = (char)*p++;
    }
    out[o] = 0;
    return out;
}

/* qvl info --json: the description as one JSON object (printed with a newline; 0 on success). Keys are those of
 * qvl serve's GET /info where it has them (model_type, fingerprint, weight_dtype, kernels, qvl_version, ...), else
 * qvl_model_info's field names. */
static int print_info_json(const char *dir, const qvl_model_info *in, const char *hex) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return cli_fail("out of memory");
    char path[4096 + 8];
    int ok = 1; /* every Add succeeded */
#define ADD_STR(k, v) ok &= cJSON_AddStringToObject(o, k, v) != NULL
#define ADD_NUM(k, v) ok &= cJSON_AddNumberToObject(o, k, (double)(v)) != NULL
    ADD_STR("qvl_version", qvl_version());
    ADD_STR("model", utf8_or_marks(dir, path, sizeof path));
    ADD_STR("model_type", in->model_type);
    ADD_STR("fingerprint", hex);
    ADD_NUM("depth", in->depth);
    ADD_NUM("hidden", in->hidden);
    ADD_NUM("heads", in->heads);
    ADD_NUM("head_dim", in->head_dim);
    ADD_NUM("intermediate", in->intermediate);
    ADD_NUM("out_hidden", in->out_hidden);
    ADD_NUM("n_deepstack", in->n_deepstack);
    cJSON *ds = cJSON_AddArrayToObject(o, "deepstack_index");
    ok &= ds != NULL;
    for (int k = 0; ds && k < in->n_deepstack; k++) {
        cJSON *v = cJSON_CreateNumber(in->deepstack_index[k]);
        ok &= v && cJSON_AddItemToArray(ds, v);
    }
    ADD_NUM("patch", in->patch);
    ADD_NUM("temporal_patch", in->temporal_patch);
    ADD_NUM("merge", in->merge);
    ADD_NUM("in_channels", in->in_channels);
    ADD_NUM("row_len", in->row_len);
    ADD_NUM("num_pos", in->num_pos);
    ADD_NUM("n_tensors", in->n_tensors);
    ADD_NUM("n_params", in->n_params); /* exact below 2^53 */
    ADD_NUM("weight_bytes", in->weight_bytes);
    ADD_STR("weight_dtype", qvl_dtype_name(in->weight_dtype));
    ADD_STR("kernels", qvl_isa_name(in->isa));
    if (in->bf16_backend[0]) ADD_STR("bf16_kernels", in->bf16_backend);
    else ok &= cJSON_AddNullToObject(o, "bf16_kernels") != NULL;
    ADD_STR("amx", in->amx);
    ADD_STR("auto_precision", in->auto_precision);
    ADD_STR("source", source_name(in->source));
    ADD_NUM("n_files", in->n_files);
    ADD_STR("prefix", in->prefix);
    ADD_STR("conv_layout", in->conv_layout_mlx ? "mlx" : "hf");
#undef ADD_STR
#undef ADD_NUM
    char *js = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!js) return cli_fail("out of memory");
    puts(js);
    cJSON_free(js);
    return 0;
}

static int cmd_info(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'}, {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *dir = NULL;
    int c, json = 0;
    while ((c = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': dir = optarg; break;
        case 'j': json = 1; break;
        case 'h': fputs(info_help, stdout); return 0;
        default: return cli_bad_option("info", c, argv);
        }
    }
    if (optind < argc) return cli_usage("unexpected argument '%s' (see 'qvl info --help')", argv[optind]);
    if (!dir) return cli_usage("info needs --model DIR (see 'qvl info --help')");

    qvl_error err;
    qvl_model *m = NULL;
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    lp.describe_only = 1;
    if (qvl_model_load(dir, &lp, &m, &err) != QVL_OK) return cli_fail("%s", err.message);
    qvl_model_info in;
    qvl_model_get_info(m, &in);
    char hex[33] = "";
    uint8_t digest[16];
    if (qvl_model_fingerprint(m, digest, hex, &err) != QVL_OK) {
        qvl_model_free(m);
        return cli_fail("%s", err.message);
    }
    if (json) {
        const int rc = print_info_json(dir, &in, hex);
        qvl_model_free(m);
        return rc ? rc : stdout_flushed();
    }
    char ds[16 * QVL_MAX_DEEPSTACK] = "none";
    if (in.n_deepstack > 0) {
        size_t len = 0;
        for (int k = 0; k < in.n_deepstack && len < sizeof ds; k++)
            len += (size_t)snprintf(ds + len, sizeof ds - len, "%s%d", k ? "," : "", in.deepstack_index[k]);
    }
    printf("model:         %s\n", dir);
    printf("family:        %s\n", in.model_type);
    printf("depth:         %d\n", in.depth);
    printf("hidden:        %d\n", in.hidden);
    printf("heads:         %d (head_dim %d)\n", in.heads, in.head_dim);
    printf("intermediate:  %d\n", in.intermediate);
    printf("out_hidden:    %d\n", in.out_hidden);
    printf("patch:         %d (temporal %d, merge %d, in_channels %d, row_len %d)\n", in.patch, in.temporal_patch,
           in.merge, in.in_channels, in.row_len);
    printf("pos_embed:     %d\n", in.num_pos);
    printf("deepstack:     %s\n", ds);
    printf("tensors:       %zu\n", in.n_tensors);
    printf("params:        %llu\n", (unsigned long long)in.n_params);
    printf("weight_bytes:  %llu (%.1f MiB)\n", (unsigned long long)in.weight_bytes,
           (double)in.weight_bytes / (1024.0 * 1024.0));
    printf("dtype:         %s\n", qvl_dtype_name(in.weight_dtype));
    printf("kernels:       %s\n", qvl_isa_name(in.isa));
    printf("bf16 kernels:  %s\n", in.bf16_backend[0] ? in.bf16_backend : "none (--precision bf16 runs the portable reference)");
    printf("amx:           %s\n", in.amx);
    printf("auto:          %s\n", in.auto_precision);
    printf("source:        %s (%d file%s)\n", source_name(in.source), in.n_files, in.n_files == 1 ? "" : "s");
    printf("prefix:        %s\n", in.prefix);
    printf("conv_layout:   %s\n", in.conv_layout_mlx ? "mlx" : "hf");
    printf("fingerprint:   %s\n", hex);
    qvl_model_free(m);
    return stdout_flushed();
}

/* ---------------------------------------------------------------------------------------------------------------
 * qvl synth
 * ------------------------------------------------------------------------------------------------------------- */

static void synth_help(void) {
    fputs("Usage: qvl synth --preset NAME --seed N --layout LAYOUT [--dtype DT] [--depth N] [--deepstack LIST|none]\n"
          "                 -o DIR\n"
          "\n"
          "Write a deterministic synthetic checkpoint (config.json, preprocessor_config.json, weights) into DIR.\n"
          "The same options always give byte-identical files, and every layout holds the same values.\n"
          "\n"
          "Options:\n"
          "  -p, --preset NAME      tower shape (default tiny):",
          stdout);
    for (const char *const *p = qvl_synth_presets(); *p; p++) printf(" %s", *p);
    fputs("\n"
          "  -s, --seed N           value seed (default 0)\n"
          "  -l, --layout LAYOUT    hf (default), mlx, sidecar, sharded or nested\n"
          "  -d, --dtype DT         bf16 (default), f16 or f32\n"
          "      --depth N          number of blocks (default: the preset's)\n"
          "      --deepstack LIST   DeepStack block indexes, e.g. 1,3, or none (default: the preset's, those < depth)\n"
          "  -o, --output DIR       output directory (created if missing)\n"
          "  -h, --help             show this help\n"
          "\n"
          "Examples:\n"
          "  qvl synth --preset tiny --seed 1 --layout hf -o tiny\n"
          "  qvl synth --preset qwen3-vl-2b --depth 2 --seed 1 --layout sharded -o synth-2b   # two blocks, real widths\n",
          stdout);
}

static int parse_deepstack(const char *s, qvl_synth_params *p) {
    if (strcmp(s, "none") == 0) {
        p->n_deepstack = 0;
        return 0;
    }
    char buf[256];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (n == QVL_MAX_DEEPSTACK || cli_parse_long(tok, 0, 1000, &v) != 0) return -1;
        p->deepstack_index[n++] = (int)v;
    }
    if (n == 0) return -1;
    p->n_deepstack = n;
    return 0;
}

static int cmd_synth(int argc, char **argv) {
    enum { OPT_DEPTH = 256, OPT_DEEPSTACK };
    static const struct option opts[] = {
        {"preset", required_argument, NULL, 'p'}, {"seed", required_argument, NULL, 's'},
        {"layout", required_argument, NULL, 'l'}, {"dtype", required_argument, NULL, 'd'},
        {"depth", required_argument, NULL, OPT_DEPTH}, {"deepstack", required_argument, NULL, OPT_DEEPSTACK},
        {"output", required_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    qvl_synth_params p;
    qvl_synth_params_default(&p);
    const char *out = NULL;
    int c;
    long v;
    while ((c = getopt_long(argc, argv, ":p:s:l:d:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': p.preset = optarg; break;
        case 's':
            if (cli_parse_u64(optarg, &p.seed) != 0)
                return cli_usage("--seed: '%s' is not a non-negative integer", optarg);
            break;
        case 'l':
            if (strcmp(optarg, "hf") == 0) p.layout = QVL_LAYOUT_HF;
            else if (strcmp(optarg, "mlx") == 0) p.layout = QVL_LAYOUT_MLX;
            else if (strcmp(optarg, "sidecar") == 0) p.layout = QVL_LAYOUT_SIDECAR;
            else if (strcmp(optarg, "sharded") == 0) p.layout = QVL_LAYOUT_SHARDED;
            else if (strcmp(optarg, "nested") == 0) p.layout = QVL_LAYOUT_NESTED;
            else return cli_usage("--layout: unknown layout '%s' (hf, mlx, sidecar, sharded, nested)", optarg);
            break;
        case 'd':
            if (strcmp(optarg, "bf16") == 0) p.dtype = QVL_DTYPE_BF16;
            else if (strcmp(optarg, "f16") == 0) p.dtype = QVL_DTYPE_F16;
            else if (strcmp(optarg, "f32") == 0) p.dtype = QVL_DTYPE_F32;
            else return cli_usage("--dtype: unknown dtype '%s' (bf16, f16, f32)", optarg);
            break;
        case OPT_DEPTH:
            if (cli_parse_long(optarg, 1, 64, &v) != 0) return cli_usage("--depth: '%s' is not in 1..64", optarg);
            p.depth = (int)v;
            break;
        case OPT_DEEPSTACK:
            if (parse_deepstack(optarg, &p) != 0)
                return cli_usage("--deepstack: '%s' is not a comma-separated list of block indexes or 'none'", optarg);
            break;
        case 'o': out = optarg; break;
        case 'h': synth_help(); return 0;
        default: return cli_bad_option("synth", c, argv);
        }
    }
    if (optind < argc) return cli_usage("unexpected argument '%s' (see 'qvl synth --help')", argv[optind]);
    if (!out) return cli_usage("synth needs -o DIR (see 'qvl synth --help')");
    int known = 0;
    for (const char *const *n = qvl_synth_presets(); *n; n++) known |= strcmp(*n, p.preset) == 0;
    if (!known) return cli_usage("--preset: unknown preset '%s' (see 'qvl synth --help')", p.preset);

    qvl_error err;
    double t0 = cli_now_ms();
    if (qvl_synth_write(&p, out, &err) != QVL_OK) return cli_fail("%s", err.message);
    printf("wrote %s (preset %s, seed %llu, %.0f ms)\n", out, p.preset, (unsigned long long)p.seed, cli_now_ms() - t0);
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Dispatch
 * ------------------------------------------------------------------------------------------------------------- */

static const char main_help[] =
    "Usage: qvl COMMAND [OPTIONS]\n"
    "\n"
    "The Qwen3-VL / Qwen3.5 vision encoder.\n"
    "\n"
    "Commands:\n"
    "  info     describe a model directory's vision tower\n"
    "  encode   encode images, videos or preprocessed pixel rows into visual tokens\n"
    "  bench    time encoding at several input sizes, with a per-phase breakdown\n"
    "  synth    write a deterministic synthetic checkpoint\n"
#if QVL_WITH_SERVER
    "  serve    an HTTP encoder server (continuous batching, embedding cache, vLLM image_embeds)\n"
#endif
    "  cache    inspect, collect, verify or export the embedding cache\n"
    "\n"
    "Options:\n"
    "  -h, --help      show this help ('qvl COMMAND --help' for a command's options)\n"
    "  -V, --version   print the version\n"
    "\n"
    "Examples:\n"
    "  qvl synth --preset tiny --seed 1 --layout hf -o tiny      # a small synthetic model to try things on\n"
    "  qvl info --model tiny\n"
    "  qvl encode --model tiny photo.jpg clip.mp4 -o out.safetensors\n";

int main(int argc, char **argv) {
    opterr = 0;
    if (argc < 2) {
        fputs(main_help, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(main_help, stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("qvl %d.%d.%d\n", QVL_VERSION_MAJOR, QVL_VERSION_MINOR, QVL_VERSION_PATCH);
        return 0;
    }
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "encode") == 0) return cmd_encode(argc - 1, argv + 1);
    if (strcmp(cmd, "synth") == 0) return cmd_synth(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "cache") == 0) return cmd_cache(argc - 1, argv + 1);
#if QVL_WITH_SERVER
    if (strcmp(cmd, "serve") == 0) return cmd_serve(argc - 1, argv + 1);
#else
    if (strcmp(cmd, "serve") == 0)
        return cli_fail("this qvl was built without the server (libmicrohttpd not found, or QVL_SERVER=OFF)");
#endif
    if (cmd[0] == '-') return cli_usage("unknown option '%s' (see 'qvl --help')", cmd);
    return cli_usage("unknown command '%s' (see 'qvl --help')", cmd);
}
