// llama_clip_bench.cpp — peer timing: llama.cpp's Qwen3-VL vision encoder (tools/mtmd clip API) on the CPU.
//
// Times clip_image_batch_encode on already-normalized SIZE x SIZE input: one untimed run (it also reserves the
// compute buffers for this size), then --repeat timed runs; prints the median. A run is --calls encodes of
// --frames 1 (a still image: llama.cpp's image path) or --frames 2 (two frames: its video path, the two temporal
// kernels on two frames, i.e. exactly one Qwen temporal patch). Qwen3-VL attends within one temporal patch, so
//     image SIZE²        --calls 1 --frames 1
//     video F x SIZE²    --calls F/2 --frames 2   (the rows of a (F/2, g, g) grid, one temporal patch a call)
//     batch N x SIZE²    --calls N --frames 1     (llama.cpp's Qwen3-VL graph takes one image per call)
// do the same work as qvl's one call on that grid (qvl batches the calls' GEMMs; llama.cpp cannot).
//
// --profile P: one more, untimed run with the scheduler's eval callback asking for every node, so that each ggml
// node is computed on its own and timed; the nodes are sorted into qvl bench's phases (patch, pos/rope, gemm,
// attn, norm, merger; setup = graph build, allocation and input upload before the first node; other = the rest)
// and printed as phases_ms=..., with that run's total. The timed runs never use the callback.
// --out OUT.npy writes the embeddings of the last timed run, float32 [calls * tokens, n_embd] (DeepStack
// features concatenated after the merger's, as llama.cpp returns them; qvl's layout), for value comparisons.
//
// The pixels are the ones `qvl bench` feeds qvl_encode for a SIZE² image: its deterministic rows (xorshift64
// from 0x243F6A8885A308D3, ((state >> 40) & 0xffff) / 32767.5 - 1), or the rows of a float32 .npy [S, 1536]
// given with --rows, folded back into an interleaved-RGB image. Rows are merge-block-major Qwen patch rows
// (c, t, ph, pw); llama.cpp takes a still image and applies both temporal kernels to the same frame, so the
// t = 0 half of each row is what it sees (the work is the same; the values of the t = 1 half are unused).
//
// llama.cpp is not part of qvl: it is fetched and built beside the project (see docs/PERFORMANCE.md), and this
// file is compiled against that build by bench/run_peers.sh:
//     g++ -O2 -std=c++17 -I$LLAMA/tools/mtmd -I$LLAMA/ggml/include -I$LLAMA/include bench/llama_clip_bench.cpp
//         -L$LLAMA/build/bin -lmtmd -lggml -lggml-base -lggml-cpu -Wl,-rpath,$LLAMA/build/bin -o llama_clip_bench
// Usage: llama_clip_bench MMPROJ.gguf SIZE [--fa 0|1|-1] [--threads N] [--repeat N] [--rows ROWS.npy]
//                          [--calls N] [--frames 1|2] [--profile 0|1] [--out OUT.npy]
#include "clip.h"
#include "clip-impl.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

static constexpr int PATCH = 16, ROW_LEN = 3 * 2 * PATCH * PATCH;

// qvl bench's rows: the first n values of its xorshift64 stream (tools/cli_bench.c).
static std::vector<float> bench_rows(size_t n) {
    std::vector<float> v(n);
    uint64_t st = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < n; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        v[i] = (float) ((st >> 40) & 0xffff) / 32767.5f - 1.0f;
    }
    return v;
}

// Reads a little-endian float32 C-order 2-D .npy; returns false with a message on anything else.
static bool read_npy(const char * path, std::vector<float> & out, size_t & rows, size_t & cols) {
    FILE * f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "%s: cannot open\n", path); return false; }
    unsigned char pre[10];
    bool ok = fread(pre, 1, 10, f) == 10 && memcmp(pre, "\x93NUMPY", 6) == 0;
    size_t hlen = 0;
    if (ok && pre[6] == 1) {
        hlen = pre[8] | (pre[9] << 8);
    } else if (ok) {
        unsigned char b[2];
        ok = fread(b, 1, 2, f) == 2;
        hlen = pre[8] | (pre[9] << 8) | ((size_t) b[0] << 16) | ((size_t) b[1] << 24);
    }
    std::string h(hlen, '\0');
    ok = ok && hlen > 0 && fread(&h[0], 1, hlen, f) == hlen;
    ok = ok && h.find("'descr': '<f4'") != std::string::npos && h.find("'fortran_order': False") != std::string::npos;
    size_t p = ok ? h.find("'shape': (") : std::string::npos;
    ok = ok && p != std::string::npos && sscanf(h.c_str() + p + 10, "%zu, %zu)", &rows, &cols) == 2;
    if (ok) {
        out.resize(rows * cols);
        ok = fread(out.data(), sizeof(float), out.size(), f) == out.size();
    }
    fclose(f);
    if (!ok) fprintf(stderr, "%s: not a float32 C-order 2-D .npy\n", path);
    return ok;
}

// Merge-block-major rows [S, (c, t, ph, pw)] of a (1, g, g) grid, starting at row r0 -> interleaved RGB image of
// frame t (0 or 1) of that temporal patch.
static std::vector<float> rows_to_image(const std::vector<float> & rows, size_t r0, int t, int size) {
    const int g = size / PATCH;
    std::vector<float> img((size_t) size * size * 3);
    size_t r = r0;
    for (int bh = 0; bh < g / 2; bh++)
        for (int bw = 0; bw < g / 2; bw++)
            for (int mh = 0; mh < 2; mh++)
                for (int mw = 0; mw < 2; mw++, r++)
                    for (int c = 0; c < 3; c++)
                        for (int ph = 0; ph < PATCH; ph++)
                            for (int pw = 0; pw < PATCH; pw++) {
                                const int y = (bh * 2 + mh) * PATCH + ph, x = (bw * 2 + mw) * PATCH + pw;
                                img[((size_t) y * size + x) * 3 + c] =
                                    rows[r * ROW_LEN + ((size_t) c * 2 + t) * PATCH * PATCH + ph * PATCH + pw];
                            }
    return img;
}


// Writes a float32 C-order 2-D .npy.
static bool write_npy(const char * path, const std::vector<float> & v, size_t rows, size_t cols) {
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                    std::to_string(cols) + "), }";
    while ((10 + h.size() + 1) % 64) h += ' ';
    h += '\n';
    FILE * f = fopen(path, "wb");
    if (!f) { fprintf(stderr, "%s: cannot create\n", path); return false; }
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char) (h.size() & 0xff),
                                   (unsigned char) (h.size() >> 8)};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(h.data(), 1, h.size(), f) == h.size() &&
              fwrite(v.data(), sizeof(float), rows * cols, f) == rows * cols;
    ok = (fclose(f) == 0) && ok;
    if (!ok) fprintf(stderr, "%s: write failed\n", path);
    return ok;
}

// --profile: the scheduler asks the callback whether it wants each node (ask = true); saying yes makes it compute
// that node alone and call back (ask = false) once it is done, so the time between two calls is one node's.
using clk = std::chrono::steady_clock;
struct node_time { const ggml_tensor * t; double ms; };
struct profiler {
    bool on = false, started = false;
    clk::time_point t_encode, t_last;
    double setup_ms = 0;
    std::vector<node_time> nodes;
};
static bool profile_cb(ggml_tensor * t, bool ask, void * ud) {
    profiler * p = (profiler *) ud;
    if (!p->on) return false; // timed runs: the split is computed as one graph
    auto now = clk::now();
    if (ask) {
        if (!p->started) {
            p->started = true;
            p->setup_ms = std::chrono::duration<double, std::milli>(now - p->t_encode).count();
            p->t_last = now;
        }
        return true;
    }
    p->nodes.push_back({t, std::chrono::duration<double, std::milli>(now - p->t_last).count()});
    p->t_last = now;
    return true;
}

enum phase { PH_PATCH, PH_POS, PH_GEMM, PH_ATTN, PH_NORM, PH_MERGER, PH_OTHER, PH_N };
static const char * const PHASE_NAME[PH_N] = {"patch", "pos_rope", "gemm", "attn", "norm", "merger", "other"};

static bool is_weight(const ggml_tensor * t) {
    return t && t->buffer && ggml_backend_buffer_get_usage(t->buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
}
static bool starts_with(const char * s, const char * p) { return strncmp(s, p, strlen(p)) == 0; }

// Sorts the profiled nodes of one encode into phases, by the names qwen3vl.cpp gives its graph (patch_bias,
// inp_pos_emb, layer_out-N) and by op: the patch embedding up to patch_bias, the position embedding up to
// inp_pos_emb, the merger after the last layer_out (and the DeepStack mergers: nodes fed by v.deepstack.* weights),
// and in the blocks: matmuls by weights with their bias and activation (gemm), rope (pos_rope), activation x
// activation matmuls, softmax, flash attention and the layout copies around them (attn), norms with their
// affine and the residual adds (norm).
static void phases_of(const std::vector<node_time> & nodes, double out[PH_N]) {
    for (int i = 0; i < PH_N; i++) out[i] = 0;
    long i_pb = -1, i_pe = -1, i_last = -1;
    for (size_t i = 0; i < nodes.size(); i++) {
        const char * n = ggml_get_name(nodes[i].t);
        if (!strcmp(n, "patch_bias")) i_pb = (long) i;
        if (!strcmp(n, "inp_pos_emb")) i_pe = (long) i;
        if (starts_with(n, "layer_out-")) i_last = (long) i;
    }
    std::unordered_map<const ggml_tensor *, int> cls;
    for (size_t i = 0; i < nodes.size(); i++) {
        const ggml_tensor * t = nodes[i].t;
        const long li = (long) i;
        int c = PH_OTHER;
        bool from_merger = false;
        int src0c = -1;
        for (int s = 0; s < GGML_MAX_SRC && t->src[s]; s++) {
            auto it = cls.find(t->src[s]);
            if (it != cls.end() && it->second == PH_MERGER) from_merger = true;
            if (s == 0 && it != cls.end()) src0c = it->second;
            if (is_weight(t->src[s]) && starts_with(ggml_get_name(t->src[s]), "v.deepstack")) from_merger = true;
        }
        if (i_pb >= 0 && li <= i_pb) c = PH_PATCH;
        else if (i_pe >= 0 && li <= i_pe) c = PH_POS;
        else if (i_last >= 0 && li > i_last) c = PH_MERGER;
        else if (from_merger) c = PH_MERGER;
        else {
            switch (t->op) {
                case GGML_OP_ROPE: c = PH_POS; break;
                case GGML_OP_MUL_MAT: c = is_weight(t->src[0]) ? PH_GEMM : PH_ATTN; break;
                case GGML_OP_FLASH_ATTN_EXT:
                case GGML_OP_SOFT_MAX: c = PH_ATTN; break;
                case GGML_OP_NORM:
                case GGML_OP_RMS_NORM: c = PH_NORM; break;
                case GGML_OP_ADD:
                case GGML_OP_MUL:
                    if (is_weight(t->src[1])) c = src0c == PH_NORM ? PH_NORM : PH_GEMM;
                    else c = PH_NORM; // residual
                    break;
                case GGML_OP_UNARY:
                case GGML_OP_GLU: c = PH_GEMM; break;
                case GGML_OP_CONT:
                case GGML_OP_CPY:
                case GGML_OP_DUP: c = PH_ATTN; break;
                case GGML_OP_NONE:
                case GGML_OP_VIEW:
                case GGML_OP_RESHAPE:
                case GGML_OP_PERMUTE:
                case GGML_OP_TRANSPOSE: c = src0c >= 0 ? src0c : PH_OTHER; break;
                default: c = PH_OTHER; break;
            }
        }
        cls[t] = c;
        out[c] += nodes[i].ms;
    }
}

int main(int argc, char ** argv) {
    const char * usage = "usage: %s MMPROJ SIZE [--fa 0|1|-1] [--threads N] [--repeat N] [--rows ROWS.npy] "
                         "[--calls N] [--frames 1|2] [--profile 0|1] [--out OUT.npy]\n";
    if (argc < 3) {
        fprintf(stderr, usage, argv[0]);
        return 1;
    }
    const char * path = argv[1];
    const int size = atoi(argv[2]);
    int fa = 1, nth = 2, ntimed = 3, calls = 1, frames = 1, prof = 0;
    const char * rows_path = nullptr, * out_path = nullptr;
    for (int i = 3; i < argc; i += 2) {
        if (i + 1 >= argc) { fprintf(stderr, "%s needs a value\n", argv[i]); return 1; }
        if (!strcmp(argv[i], "--fa")) fa = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) nth = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) ntimed = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows")) rows_path = argv[i + 1];
        else if (!strcmp(argv[i], "--calls")) calls = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--frames")) frames = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--profile")) prof = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); fprintf(stderr, usage, argv[0]); return 1; }
    }
    if (size < 32 || size % 32 || nth < 1 || ntimed < 1 || calls < 1 || calls > 4096 || (frames != 1 && frames != 2)) {
        fprintf(stderr, "SIZE must be a multiple of 32, --threads, --repeat and --calls (<= 4096) >= 1, --frames 1 or 2\n");
        return 1;
    }
    const size_t S1 = (size_t) (size / PATCH) * (size / PATCH), S = S1 * (size_t) calls;
    std::vector<float> rows;
    if (rows_path) {
        size_t r = 0, c = 0;
        if (!read_npy(rows_path, rows, r, c)) return 1;
        if (r != S || c != (size_t) ROW_LEN) {
            fprintf(stderr, "%s: shape (%zu, %zu), %d call(s) of a %d² grid need (%zu, %d)\n", rows_path, r, c, calls,
                    size, S, ROW_LEN);
            return 1;
        }
    } else {
        rows = bench_rows(S * ROW_LEN);
    }

    profiler pr;
    clip_context_params cp{};
    cp.use_gpu = false;
    cp.flash_attn_type = fa < 0 ? CLIP_FLASH_ATTN_TYPE_AUTO
                                : (fa ? CLIP_FLASH_ATTN_TYPE_ENABLED : CLIP_FLASH_ATTN_TYPE_DISABLED);
    cp.image_min_tokens = -1;
    cp.image_max_tokens = -1;
    cp.warmup = false; // the untimed first run reserves the compute buffers for this very size
    if (prof) {
        cp.cb_eval = profile_cb;
        cp.cb_eval_user_data = &pr;
    }
    auto t_load0 = clk::now();
    clip_init_result res = clip_init(path, cp);
    auto t_load1 = clk::now();
    if (!res.ctx_v) {
        fprintf(stderr, "clip_init failed\n");
        return 2;
    }
    clip_ctx * ctx = res.ctx_v;

    std::vector<clip_image_f32_batch> batches((size_t) calls);
    for (int k = 0; k < calls; k++) {
        for (int t = 0; t < frames; t++) {
            batches[k].entries.emplace_back();
            batches[k].entries.back().set_size({size, size}, false, false);
            batches[k].entries.back().cpy_buf(rows_to_image(rows, (size_t) k * S1, t, size));
        }
    }
    rows.clear();
    rows.shrink_to_fit();
    const int n_tok = clip_n_output_tokens(ctx, &batches[0].entries[0]);
    const int n_embd = clip_n_mmproj_embd(ctx);
    std::vector<float> out((size_t) n_tok * n_embd); // clip only copies into a pre-sized buffer
    std::vector<float> all(out_path ? (size_t) calls * out.size() : 0);

    auto run = [&](bool keep) {
        for (int k = 0; k < calls; k++) {
            if (!clip_image_batch_encode(ctx, nth, &batches[k], out)) return false;
            if (keep) std::copy(out.begin(), out.end(), all.begin() + (ptrdiff_t) ((size_t) k * out.size()));
        }
        return true;
    };
    std::vector<double> ms;
    for (int i = 0; i < 1 + ntimed; ++i) {
        auto t0 = clk::now();
        if (!run(out_path && i == ntimed)) {
            fprintf(stderr, "encode failed\n");
            return 3;
        }
        double d = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
        if (i > 0) ms.push_back(d);
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0, sumsq = 0;
    bool finite = true;
    for (float v : out) { sum += v; sumsq += (double) v * v; finite = finite && std::isfinite(v); }

    double ph[PH_N] = {0};
    double prof_total = 0, setup_total = 0;
    size_t prof_nodes = 0;
    if (prof) { // one more run, untimed in the median, each node on its own
        pr.on = true;
        auto t0 = clk::now();
        for (int k = 0; k < calls; k++) {
            pr.started = false;
            pr.nodes.clear();
            pr.t_encode = clk::now();
            if (!clip_image_batch_encode(ctx, nth, &batches[k], out)) { fprintf(stderr, "encode failed\n"); return 3; }
            double p1[PH_N];
            phases_of(pr.nodes, p1);
            for (int j = 0; j < PH_N; j++) ph[j] += p1[j];
            setup_total += pr.setup_ms;
            prof_nodes += pr.nodes.size();
        }
        prof_total = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
        pr.on = false;
    }
    if (out_path && !write_npy(out_path, all, (size_t) calls * n_tok, (size_t) n_embd)) return 4;

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("llama_clip file=%s size=%d calls=%d frames=%d patches=%zu fa=%d threads=%d load_ms=%.0f median_ms=%.1f runs_ms=",
           path, size, calls, frames, S, fa, nth, std::chrono::duration<double, std::milli>(t_load1 - t_load0).count(),
           sorted[sorted.size() / 2]);
    for (size_t i = 0; i < ms.size(); ++i) printf("%s%.1f", i ? "," : "", ms[i]);
    printf(" out=%dx%d tokens=%d finite=%d mean=%.5g rms=%.5g peak_rss_mib=%.0f ggml_cpu=avx2:%d,avx512:%d,avx512_bf16:%d",
           n_tok, n_embd, n_tok * calls, (int) finite, sum / out.size(), std::sqrt(sumsq / out.size()),
           ru.ru_maxrss / 1024.0, ggml_cpu_has_avx2(), ggml_cpu_has_avx512(), ggml_cpu_has_avx512_bf16());
    if (prof) {
        printf(" profiled_ms=%.1f profiled_nodes=%zu phases_ms=setup:%.1f", prof_total, prof_nodes, setup_total);
        for (int j = 0; j < PH_N; j++) printf(",%s:%.1f", PHASE_NAME[j], ph[j]);
    }
    printf("\n");
    clip_free(ctx);
    return 0;
}
