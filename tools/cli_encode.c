/* cli_encode.c — `qvl encode`: preprocessed pixel rows in (.npy or safetensors), merged tokens and DeepStack
 * features out (.npy or safetensors), optionally with every stage tap for parity bisection. */
#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char encode_help[] =
    "Usage: qvl encode --model DIR INPUT... -o OUT [options]\n"
    "       qvl encode --model DIR --pixels ROWS [--grid T,H,W ...] -o OUT [--stages] [--threads N]\n"
    "\n"
    "Encode images and videos (or preprocessed patch rows) with the model's vision tower.\n"
    "\n"
    "INPUT is an image (JPEG, PNG, WebP, GIF, BMP), a video file (anything FFmpeg reads), or a directory of frame\n"
    "images taken as one video. Each input is preprocessed exactly as transformers' Qwen3-VL processors do\n"
    "(smart-resize with the model's preprocessor_config.json limits, bicubic resize, normalization, patchify) and\n"
    "encoded on its own. OUT (.safetensors) gets, per input i, \"item{i}.merged\" [tokens, out_hidden] and\n"
    "\"item{i}.deepstack{k}\", a \"grid_thw\" row per encoded input, and metadata naming each input and its status.\n"
    "An input that fails (unreadable, corrupt, too large) is reported and skipped; the others are still written,\n"
    "and the exit status is 3 (1, and no output file, when none succeeded). Metadata item{i}.* names each input,\n"
    "its status or error, its grid and, for videos, the sampled frame indices, the source fps and the seconds of\n"
    "each temporal patch (the prompt's <t seconds>).\n"
    "\n"
    "Input options:\n"
    "      --resize KIND      torchvision (default: transformers' default processor), pil (PIL processor, mlx-vlm;\n"
    "                         Pillow >= 13) or pil-legacy (Pillow <= 12.1)\n"
    "      --min-pixels N     image pixel budget (default: the model's preprocessor_config.json, else 65536)\n"
    "      --max-pixels N     (default: the model's preprocessor_config.json, else 16777216)\n"
    "      --size HxW         exact resize target in pixels (multiples of 32) instead of smart-resize\n"
    "      --video-min-pixels N  video pixel budget of a whole clip (default: the model's\n"
    "                         video_preprocessor_config.json, else 4096)\n"
    "      --video-max-pixels N  (default: the model's video_preprocessor_config.json, else 25165824)\n"
    "      --fps F            video frames sampled per second (default 2)\n"
    "      --num-frames N     sample exactly N frames of each video\n"
    "      --max-frames N     at most N frames per video (default 768)\n"
    "      --cap-pixels-per-frame  transformers' per-frame pixel cap (cap_pixels_per_frame=True, qwen-vl-utils'\n"
    "                         rule): a clip of n frames gets n x max(min(max_video_tokens x 1024, budget / n),\n"
    "                         1.05 x video min pixels) pixels, so few frames cost few tokens (default: the\n"
    "                         model's video_preprocessor_config.json, else off, as transformers 5.23)\n"
    "      --max-video-tokens N  merged tokens per frame under the cap (default: the config's, else 768)\n"
    "      --max-decode-pixels N  refuse images and frames above N pixels before decoding (default 178956970)\n"
    "      --limit NAME=N     set one resource limit (repeatable; docs/SECURITY.md lists them): max_image_pixels,\n"
    "                         max_canvas_pixels, max_input_bytes, max_png_chunk_bytes, max_jpeg_scans,\n"
    "                         max_video_frames, max_video_pixels, max_item_patches, max_call_patches,\n"
    "                         max_decode_work, max_video_decode_pixels\n"
    "      --alpha MODE       transparent images: white (default: composited onto white, as transformers'\n"
    "                         processors do with PIL images) or drop (alpha dropped, as load_image does)\n"
    "      --preprocess-only  write \"item{i}.pixel_values\" and grids instead of encoding\n"
    "      --max-batch-rows N patch rows per encode pass (default 4096): a video above it is encoded in pieces of\n"
    "                         whole temporal patches while it decodes, each written as it is done, so that memory\n"
    "                         is set by N, not by the video's length (the same bits whatever N)\n"
    "      --cache DIR        look each input up in the embedding cache DIR (qvl serve's), and store what is\n"
    "                         encoded there (entries keyed as qvl serve keys layout=split dtype=f32)\n"
    "  -q, --quiet            no progress lines on stderr and no report on stdout\n"
    "\n"
    "ROWS is a .npy float32 array [S, row_len], or a safetensors file with \"pixel_values\" [S, row_len] (or the\n"
    "\"item{i}.pixel_values\" that --preprocess-only writes) and optionally \"grid_thw\" [n, 3] (used when no\n"
    "--grid is given). Rows are merge-block-major as the Qwen preprocessor emits them; S must equal the sum of\n"
    "t*h*w over the grids.\n"
    "\n"
    "If OUT ends in .npy it receives the merged tokens [S/4, out_hidden] only; otherwise OUT is a safetensors file\n"
    "with \"merged\", \"deepstack{k}\" for each DeepStack feature, \"grid_thw\" (int64 [n, 3]) and, with --stages,\n"
    "every stage tap under its stage name (patch, pos, blk0..., deepstack{k}, merged).\n"
    "\n"
    "Options:\n"
    "  -m, --model DIR        model directory\n"
    "  -p, --pixels ROWS      input rows (.npy or .safetensors)\n"
    "  -g, --grid T,H,W       one image (T = 1) or video in patch units; repeat for several items, in row order\n"
    "  -o, --output OUT       output file (.npy or .safetensors)\n"
    "      --stages           also write every stage tap (safetensors output only)\n"
    "  -t, --threads N        worker threads (default 0: all cores)\n"
    "      --isa SET          CPU kernels: auto (default: the widest this CPU runs), avx2, avx512\n"
    "                         or amx (bf16 on AMX tiles; with --precision bf16, avx512 forces AVX512-BF16)\n"
    "      --precision P      f32 (default), bf16 (GEMM and attention operands in bf16, f32 accumulation; fast\n"
    "                         on AMX, or AVX512-BF16 on AMD Zen 4/5) or auto (bf16 where faster: see qvl info)\n"
    "      --pos-mode MODE    position-embedding interpolation: closed (default) or linspace\n"
    "  -h, --help             show this help\n"
    "\n"
    "Examples:\n"
    "  qvl encode --model Qwen3-VL-2B-Instruct photo.jpg clip.mp4 frames/ -o out.safetensors\n"
    "  qvl encode --model Qwen3-VL-2B-Instruct --fps 1 --max-frames 32 --precision auto clip.mp4 -o clip.safetensors\n"
    "  qvl encode --model Qwen3-VL-2B-Instruct --cache /var/cache/qvl --quiet photo.jpg -o out.safetensors\n";

/* Stage taps copied out of the encoder as they arrive. */
typedef struct stage_rec {
    char name[48];
    float *data;
    size_t rows, cols;
} stage_rec;

typedef struct stage_list {
    stage_rec *v;
    size_t n, cap;
    int failed;
} stage_list;

static void on_tap(void *user, const char *stage, const float *data, size_t rows, size_t cols) {
    stage_list *l = user;
    if (l->failed) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        stage_rec *q = realloc(l->v, cap * sizeof *q);
        if (!q) { l->failed = 1; return; }
        l->v = q;
        l->cap = cap;
    }
    stage_rec *r = &l->v[l->n];
    /* A repeated stage name (should not happen) keeps every copy under a unique name. */
    int dup = 0;
    for (size_t i = 0; i < l->n; i++) dup += strncmp(l->v[i].name, stage, sizeof r->name - 1) == 0;
    if (dup) snprintf(r->name, sizeof r->name, "%s.%d", stage, dup);
    else snprintf(r->name, sizeof r->name, "%s", stage);
    if (rows && cols > ((size_t)-1 / sizeof(float)) / rows) { l->failed = 1; return; }
    r->data = malloc(rows * cols * sizeof(float) + 1);
    if (!r->data) { l->failed = 1; return; }
    memcpy(r->data, data, rows * cols * sizeof(float));
    r->rows = rows;
    r->cols = cols;
    l->n++;
}

static int parse_grid(const char *s, qvl_grid *g) {
    char buf[64];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    long v[3];
    char *save = NULL, *tok = strtok_r(buf, ",x", &save);
    for (int k = 0; k < 3; k++, tok = strtok_r(NULL, ",x", &save))
        if (!tok || cli_parse_long(tok, 1, 1L << 20, &v[k]) != 0) return -1;
    if (tok) return -1;
    *g = (qvl_grid){(int32_t)v[0], (int32_t)v[1], (int32_t)v[2]};
    return 0;
}

/* --limit NAME=N into the qvl_limits field NAME (cli.h). */
int cli_parse_limit(const char *s, qvl_limits *l) {
    static const struct {
        const char *name;
        size_t off;
        int u32;
    } f[] = {
#define LIMIT_ROW(name, bits) {#name, offsetof(qvl_limits, name), (bits) == 32},
        QVL_LIMIT_FIELDS(LIMIT_ROW)
#undef LIMIT_ROW
    };
    const char *eq = strchr(s, '=');
    if (!eq) return -1;
    uint64_t v;
    if (cli_parse_u64(eq + 1, &v) != 0 || v == 0) return -1;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (strlen(f[i].name) != (size_t)(eq - s) || strncmp(s, f[i].name, (size_t)(eq - s)) != 0) continue;
        unsigned char *p = (unsigned char *)l + f[i].off;
        if (f[i].u32) {
            if (v > UINT32_MAX) return -1;
            uint32_t w = (uint32_t)v;
            memcpy(p, &w, sizeof w);
        } else {
            memcpy(p, &v, sizeof v);
        }
        return 0;
    }
    return -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int parse_size(const char *s, int32_t *h, int32_t *w) {
    long a, b;
    char buf[64], *x;
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    if (!(x = strchr(buf, 'x'))) return -1;
    *x = '\0';
    if (cli_parse_long(buf, 1, 1L << 20, &a) != 0 || cli_parse_long(x + 1, 1, 1L << 20, &b) != 0) return -1;
    *h = (int32_t)a;
    *w = (int32_t)b;
    return 0;
}

int cmd_encode(int argc, char **argv) {
    enum { OPT_STAGES = 256, OPT_POS_MODE, OPT_RESIZE, OPT_MIN_PX, OPT_MAX_PX, OPT_SIZE, OPT_FPS, OPT_NUM_FRAMES,
           OPT_MAX_FRAMES, OPT_MAX_DECODE, OPT_PREPROCESS_ONLY, OPT_ISA, OPT_ALPHA, OPT_LIMIT, OPT_CACHE,
           OPT_PRECISION, OPT_CAP, OPT_MAX_VT, OPT_VMIN_PX, OPT_VMAX_PX, OPT_MAX_BATCH };
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},  {"pixels", required_argument, NULL, 'p'},
        {"grid", required_argument, NULL, 'g'},   {"output", required_argument, NULL, 'o'},
        {"stages", no_argument, NULL, OPT_STAGES}, {"threads", required_argument, NULL, 't'},
        {"pos-mode", required_argument, NULL, OPT_POS_MODE}, {"help", no_argument, NULL, 'h'},
        {"resize", required_argument, NULL, OPT_RESIZE}, {"min-pixels", required_argument, NULL, OPT_MIN_PX},
        {"max-pixels", required_argument, NULL, OPT_MAX_PX}, {"size", required_argument, NULL, OPT_SIZE},
        {"fps", required_argument, NULL, OPT_FPS}, {"num-frames", required_argument, NULL, OPT_NUM_FRAMES},
        {"max-frames", required_argument, NULL, OPT_MAX_FRAMES},
        {"max-decode-pixels", required_argument, NULL, OPT_MAX_DECODE}, {"isa", required_argument, NULL, OPT_ISA},
        {"precision", required_argument, NULL, OPT_PRECISION},
        {"preprocess-only", no_argument, NULL, OPT_PREPROCESS_ONLY}, {"quiet", no_argument, NULL, 'q'},
        {"alpha", required_argument, NULL, OPT_ALPHA}, {"limit", required_argument, NULL, OPT_LIMIT},
        {"cache", required_argument, NULL, OPT_CACHE},
        {"cap-pixels-per-frame", no_argument, NULL, OPT_CAP},
        {"max-video-tokens", required_argument, NULL, OPT_MAX_VT},
        {"video-min-pixels", required_argument, NULL, OPT_VMIN_PX},
        {"video-max-pixels", required_argument, NULL, OPT_VMAX_PX},
        {"max-batch-rows", required_argument, NULL, OPT_MAX_BATCH},
        {NULL, 0, NULL, 0}};
    media_opts mo;
    memset(&mo, 0, sizeof mo);
    qvl_load_params_default(&mo.load);
    qvl_ctx_params_default(&mo.ctx);
    qvl_preprocess_params_default(&mo.pp);
    qvl_video_params_default(&mo.vp);
    qvl_decode_params_default(&mo.dp);
    uint64_t u;
    char *endp;
    const char *model_dir = NULL, *pixels_path = NULL, *out_path = NULL;
    qvl_grid cli_grids[64];
    size_t n_cli_grids = 0;
    int stages = 0;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    qvl_limits lim;
    qvl_limits_default(&lim);
    cp.limits = &lim;
    int c, rc0;
    long v;
    while ((c = getopt_long(argc, argv, ":m:p:g:o:t:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': pixels_path = optarg; break;
        case 'g':
            if (n_cli_grids == sizeof cli_grids / sizeof cli_grids[0]) return cli_usage("--grid: at most 64 grids");
            if (parse_grid(optarg, &cli_grids[n_cli_grids]) != 0)
                return cli_usage("--grid: '%s' is not T,H,W (positive integers)", optarg);
            n_cli_grids++;
            break;
        case 'o': out_path = optarg; break;
        case OPT_STAGES: stages = 1; break;
        case 't':
            if (cli_parse_long(optarg, 0, QVL_MAX_THREADS, &v) != 0)
                return cli_usage("--threads: '%s' is not in 0..%d", optarg, QVL_MAX_THREADS);
            cp.n_threads = (int)v;
            break;
        case OPT_POS_MODE:
            if (strcmp(optarg, "closed") == 0) cp.pos_mode = QVL_POS_CLOSED_FORM;
            else if (strcmp(optarg, "linspace") == 0) cp.pos_mode = QVL_POS_LINSPACE;
            else return cli_usage("--pos-mode: unknown mode '%s' (closed, linspace)", optarg);
            break;
        case OPT_RESIZE:
            if (strcmp(optarg, "torchvision") == 0) mo.pp.resize = QVL_RESIZE_TORCHVISION;
            else if (strcmp(optarg, "pil") == 0) mo.pp.resize = QVL_RESIZE_PIL;
            else if (strcmp(optarg, "pil-legacy") == 0) mo.pp.resize = QVL_RESIZE_PIL_LEGACY;
            else return cli_usage("--resize: unknown kind '%s' (torchvision, pil, pil-legacy)", optarg);
            mo.set_resize = 1;
            break;
        case OPT_MIN_PX:
        case OPT_MAX_PX:
            if (cli_parse_u64(optarg, &u) != 0 || u == 0) return cli_usage("--%s: '%s' is not a positive integer",
                                                                            c == OPT_MIN_PX ? "min-pixels" : "max-pixels", optarg);
            if (c == OPT_MIN_PX) mo.pp.min_pixels = u, mo.set_min = 1;
            else mo.pp.max_pixels = u, mo.set_max = 1;
            break;
        case OPT_VMIN_PX:
        case OPT_VMAX_PX:
            if (cli_parse_u64(optarg, &u) != 0 || u == 0)
                return cli_usage("--%s: '%s' is not a positive integer",
                                 c == OPT_VMIN_PX ? "video-min-pixels" : "video-max-pixels", optarg);
            if (c == OPT_VMIN_PX) mo.pp.video_min_pixels = u, mo.set_vmin = 1;
            else mo.pp.video_max_pixels = u, mo.set_vmax = 1;
            break;
        case OPT_SIZE:
            if (parse_size(optarg, &mo.pp.size_h, &mo.pp.size_w) != 0)
                return cli_usage("--size: '%s' is not HxW (positive integers)", optarg);
            mo.set_size = 1;
            break;
        case OPT_FPS:
            mo.vp.fps = strtod(optarg, &endp);
            if (*endp || !(mo.vp.fps > 0 && mo.vp.fps < 1e6)) return cli_usage("--fps: '%s' is not a positive number", optarg);
            mo.set_fps = 1;
            break;
        case OPT_NUM_FRAMES:
        case OPT_MAX_FRAMES:
            if (cli_parse_long(optarg, 1, 1L << 24, &v) != 0)
                return cli_usage("--%s: '%s' is not in 1..16777216", c == OPT_NUM_FRAMES ? "num-frames" : "max-frames", optarg);
            if (c == OPT_NUM_FRAMES) mo.vp.num_frames = (int32_t)v, mo.set_num_frames = 1;
            else mo.vp.max_frames = (int32_t)v, mo.set_max_frames = 1;
            break;
        case OPT_CAP: mo.pp.cap_pixels_per_frame = 1, mo.set_cap = 1; break;
        case OPT_MAX_VT:
            if (cli_parse_long(optarg, 1, 1L << 20, &v) != 0)
                return cli_usage("--max-video-tokens: '%s' is not in 1..1048576", optarg);
            mo.pp.max_video_tokens = (int32_t)v, mo.set_max_vt = 1;
            break;
        case OPT_MAX_DECODE:
            if (cli_parse_u64(optarg, &u) != 0 || u == 0) return cli_usage("--max-decode-pixels: '%s' is not a positive integer", optarg);
            mo.dp.max_pixels = u;
            mo.vp.max_pixels = u;
            break;
        case OPT_LIMIT:
            if (cli_parse_limit(optarg, &lim) != 0)
                return cli_usage("--limit: '%s' is not NAME=N with N ≥ 1 and NAME a qvl_limits field (see --help)",
                                 optarg);
            break;
        case OPT_MAX_BATCH:
            if (cli_parse_long(optarg, 1, 1L << 30, &v) != 0)
                return cli_usage("--max-batch-rows: '%s' is not in 1..1073741824", optarg);
            mo.max_batch_rows = (size_t)v;
            break;
        case OPT_PREPROCESS_ONLY: mo.preprocess_only = 1; break;
        case OPT_ALPHA:
            if (strcmp(optarg, "white") == 0) mo.dp.alpha = QVL_ALPHA_WHITE;
            else if (strcmp(optarg, "drop") == 0) mo.dp.alpha = QVL_ALPHA_DROP;
            else return cli_usage("--alpha: '%s' is not white or drop", optarg);
            break;
        case OPT_ISA:
            if (cli_parse_isa(optarg, &mo.load.isa)) return cli_usage("--isa: '%s' is not auto, avx2, avx512 or amx", optarg);
            break;
        case OPT_CACHE:
            mo.cache_dir = optarg;
            break;
        case OPT_PRECISION:
            if (cli_parse_precision(optarg, &mo.load.precision))
                return cli_usage("--precision: '%s' is not f32, bf16 or auto", optarg);
            break;
        case 'q': mo.quiet = 1; break;
        case 'h': fputs(encode_help, stdout); return 0;
        default: return cli_bad_option("encode", c, argv);
        }
    }
    if (mo.set_vmin && mo.set_vmax && mo.pp.video_min_pixels > mo.pp.video_max_pixels)
        return cli_usage("--video-min-pixels %llu is above --video-max-pixels %llu",
                         (unsigned long long)mo.pp.video_min_pixels, (unsigned long long)mo.pp.video_max_pixels);
    if (mo.set_min && mo.set_max && mo.pp.min_pixels > mo.pp.max_pixels) /* as the config parser refuses it */
        return cli_usage("--min-pixels %llu is above --max-pixels %llu", (unsigned long long)mo.pp.min_pixels,
                         (unsigned long long)mo.pp.max_pixels);
    if (mo.set_size && mo.set_max && (uint64_t)mo.pp.size_h * (uint64_t)mo.pp.size_w > mo.pp.max_pixels)
        return cli_usage("--size %dx%d is %llu pixels, above --max-pixels %llu", mo.pp.size_h, mo.pp.size_w,
                         (unsigned long long)mo.pp.size_h * (unsigned long long)mo.pp.size_w,
                         (unsigned long long)mo.pp.max_pixels);
    qvl_error gerr;
    if (n_cli_grids && qvl_limits_check_grids(&lim, cli_grids, n_cli_grids, &gerr) != QVL_OK)
        return cli_usage("--grid: %s", gerr.message); /* before the rows are read or anything is allocated */
    if (optind < argc) {
        if (pixels_path || n_cli_grids || stages)
            return cli_usage("file inputs do not combine with --pixels, --grid or --stages (see 'qvl encode --help')");
        if (!out_path) return cli_usage("encode needs -o OUT (see 'qvl encode --help')");
        if (ends_with(out_path, ".npy")) /* it wrote a safetensors file under the .npy name */
            return cli_usage("-o %s: file inputs write a safetensors file (item{i}.merged, item{i}.deepstack{k}, "
                             "metadata); name it .safetensors (.npy is for --pixels: the merged tokens alone)", out_path);
        if (!model_dir && !mo.preprocess_only) return cli_usage("encode needs --model DIR (see 'qvl encode --help')");
        rc0 = cli_check_output(out_path, model_dir, (const char *const *)(argv + optind), argc - optind);
        if (rc0) return rc0;
        mo.model_dir = model_dir;
        mo.out_path = out_path;
        mo.inputs = argv + optind;
        mo.n_inputs = argc - optind;
        mo.ctx = cp;
        mo.pp.n_threads = cp.n_threads;
        return encode_media(&mo);
    }
    if (!model_dir || !pixels_path || !out_path)
        return cli_usage("encode needs --model, --pixels and -o (see 'qvl encode --help')");
    if (mo.max_batch_rows) return cli_usage("--max-batch-rows is for file inputs (--pixels encodes its rows in one pass)");
    rc0 = cli_check_output(out_path, model_dir, &pixels_path, 1);
    if (rc0) return rc0;
    int npy_out = ends_with(out_path, ".npy");
    if (npy_out && stages) return cli_usage("--stages needs a safetensors output, not .npy");

    int rc = CLI_EXIT_FAIL;
    qvl_error err;
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    qvl_plan *plan = NULL;
    qvl_st_writer *w = NULL;
    float *rows = NULL, *out = NULL;
    qvl_grid *file_grids = NULL;
    size_t n_rows = 0, row_len = 0, n_file_grids = 0;
    stage_list taps = {0};
    qvl_item *items = NULL;
    void **outs = NULL;

    double t_load = cli_now_ms();
    if (qvl_model_load(model_dir, &mo.load, &m, &err) != QVL_OK) { rc = cli_fail("%s", err.message); goto done; }
    t_load = cli_now_ms() - t_load;
    qvl_model_info in;
    qvl_model_get_info(m, &in);

    /* under --limit; the file's grid_thw is neither read nor checked when --grid replaces it */
    if (qvl_read_rows_limited(pixels_path, &lim, &rows, &n_rows, &row_len, n_cli_grids ? NULL : &file_grids,
                              n_cli_grids ? NULL : &n_file_grids, &err) != QVL_OK) {
        rc = cli_fail("%s", err.message);
        goto done;
    }
    const qvl_grid *grids = n_cli_grids ? cli_grids : file_grids;
    size_t n_grids = n_cli_grids ? n_cli_grids : n_file_grids;
    if (n_grids == 0) {
        rc = cli_fail("%s: no grid_thw in the input; pass --grid T,H,W", pixels_path);
        goto done;
    }
    /* One ROWS item per grid, at its rows; the plan checks each grid and the row length (the library's one
     * source of those rules). The rows must add up to the file's. */
    size_t need = qvl_patch_rows(grids, n_grids);
    if (need != n_rows) {
        rc = cli_fail("%s: %zu pixel rows given, the grids need %zu", pixels_path, n_rows, need ? need : 0);
        goto done;
    }
    items = calloc(n_grids, sizeof *items);
    outs = calloc(n_grids, sizeof *outs);
    if (!items || !outs) { rc = cli_fail("out of memory"); goto done; }
    for (size_t i = 0, r = 0; i < n_grids; i++) {
        qvl_item_default(&items[i]);
        items[i].kind = QVL_ITEM_ROWS;
        items[i].rows = rows + r * row_len;
        items[i].grid = grids[i];
        items[i].row_len = row_len;
        r += qvl_patch_rows(&grids[i], 1);
    }
    if (qvl_ctx_create(m, &cp, &ctx, &err) != QVL_OK) { rc = cli_fail("%s", err.message); goto done; }
    qvl_plan_params pl;
    qvl_plan_params_default(&pl);
    pl.layout = QVL_OUTPUT_SPLIT;
    pl.deepstack = !npy_out;      /* .npy: the merged tokens alone, every item's one after the other */
    pl.max_batch_rows = n_rows;   /* one pass over every grid, so stage taps cover all rows */
    if (qvl_plan_create(ctx, items, n_grids, &pl, &plan, &err) != QVL_OK) { rc = cli_fail("%s", err.message); goto done; }
    for (size_t i = 0; i < n_grids; i++) {
        qvl_item_info info;
        qvl_plan_item(plan, i, &info);
        if (info.status != QVL_OK) { rc = cli_fail("%s: %s", pixels_path, info.message); goto done; }
    }
    const size_t total = qvl_plan_out_bytes(plan), O = (size_t)in.out_hidden;
    if (!(out = malloc(total ? total : 1))) { rc = cli_fail("out of memory for %zu output bytes", total); goto done; }
    for (size_t i = 0, off = 0; i < n_grids; i++) {
        qvl_item_info info;
        qvl_plan_item(plan, i, &info);
        outs[i] = (unsigned char *)out + off;
        off += info.out_bytes;
    }
    if (stages) qvl_ctx_set_tap(ctx, on_tap, &taps);
    double t_enc = cli_now_ms();
    if (qvl_plan_encode(ctx, plan, outs, &err) != QVL_OK) { rc = cli_fail("%s", err.message); goto done; }
    t_enc = cli_now_ms() - t_enc;
    if (taps.failed) { rc = cli_fail("out of memory collecting stage taps"); goto done; }
    const size_t n_tok = n_rows / ((size_t)in.merge * (size_t)in.merge);

    if (npy_out) {
        if (qvl_write_npy(out_path, out, n_tok, O, &err) != QVL_OK) { rc = cli_fail("%s", err.message); goto done; }
    } else {
        if (qvl_st_writer_open(out_path, 0, &w, &err) != QVL_OK) { rc = cli_fail("%s", err.message); goto done; }
        const size_t planes = 1 + (size_t)in.n_deepstack;
        int64_t shape[2] = {(int64_t)n_tok, (int64_t)O};
        char name[48];
        for (size_t k = 0; k < planes; k++) { /* each output: every item's plane k, in order */
            if (k == 0) snprintf(name, sizeof name, "merged");
            else snprintf(name, sizeof name, "deepstack%zu", k - 1);
            qvl_st_writer_tensor(w, name, "F32", shape, 2, NULL);
            for (size_t i = 0; i < n_grids; i++) {
                qvl_item_info info;
                qvl_plan_item(plan, i, &info);
                const size_t plane = info.n_tokens * O;
                qvl_st_writer_data(w, (const float *)outs[i] + k * plane, plane * sizeof(float), NULL);
            }
        }
        int64_t gshape[2] = {(int64_t)n_grids, 3};
        if (qvl_st_writer_tensor(w, "grid_thw", "I64", gshape, 2, NULL) == QVL_OK)
            for (size_t i = 0; i < n_grids; i++) {
                int64_t g[3] = {grids[i].t, grids[i].h, grids[i].w};
                qvl_st_writer_data(w, g, sizeof g, NULL);
            }
        /* Stage taps, less the final merged and DeepStack ones (written above, whole). */
        for (size_t i = 0; i < taps.n; i++) {
            const char *tn = taps.v[i].name;
            if (strncmp(tn, "merged", 6) == 0 || strncmp(tn, "deepstack", 9) == 0) continue;
            int64_t ts[2] = {(int64_t)taps.v[i].rows, (int64_t)taps.v[i].cols};
            if (qvl_st_writer_tensor(w, tn, "F32", ts, 2, NULL) == QVL_OK)
                qvl_st_writer_data(w, taps.v[i].data, taps.v[i].rows * taps.v[i].cols * sizeof(float), NULL);
        }
        qvl_st_writer_meta(w, "producer", "qvl", NULL);
        qvl_st_writer_meta(w, "qvl_version", qvl_version(), NULL);
        qvl_st_writer_meta(w, "pos_mode", cp.pos_mode == QVL_POS_LINSPACE ? "linspace" : "closed", NULL);
        qvl_status fs = qvl_st_writer_finish(w, &err);
        w = NULL;
        if (fs != QVL_OK) { rc = cli_fail("%s", err.message); goto done; }
    }

    for (size_t i = 0, first = 0; i < n_grids; i++) {
        size_t t = qvl_patch_rows(&grids[i], 1);
        printf("item %zu: grid %dx%dx%d, %zu patches, %zu tokens (rows %zu..%zu)\n", i, grids[i].t, grids[i].h,
               grids[i].w, t, t / ((size_t)in.merge * (size_t)in.merge), first, first + t - 1);
        first += t;
    }
    printf("tokens: %zu x %zu, deepstack features: %d%s\n", n_tok, O, in.n_deepstack,
           stages ? ", stages written" : "");
    printf("time: %.1f ms encode (%.1f ms load)\n", t_enc, t_load);
    printf("output: %s\n", out_path);
    rc = 0;
done:
    qvl_st_writer_abort(w);
    for (size_t i = 0; i < taps.n; i++) free(taps.v[i].data);
    free(taps.v);
    free(out);
    free(outs);
    free(items);
    qvl_plan_free(plan);
    qvl_free(rows);
    qvl_free(file_grids);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    return rc;
}
