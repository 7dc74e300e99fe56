// llama_clip_bench.cpp — peer timing: llama.cpp's Qwen3-VL vision encoder (tools/mtmd clip API) on the CPU.
//
// Times clip_image_batch_encode on one already-normalized SIZE x SIZE image: one untimed encode (it also
// reserves the compute buffers for this size), then --repeat timed encodes; prints the median.
//
// The pixels are the ones `qvl bench` feeds qvl_encode for a SIZE² image: its deterministic rows (xorshift64
// from 0x243F6A8885A308D3, ((state >> 40) & 0xffff) / 32767.5 - 1), or the rows of a float32 .npy [S, 1536]
// given with --rows, folded back into an interleaved-RGB image. Rows are merge-block-major Qwen patch rows
// (c, t, ph, pw); llama.cpp takes a still image and applies both temporal kernels to the same frame, so the
// t = 0 half of each row is what it sees (the work is the same; the values of the t = 1 half are unused).
//
// llama.cpp is not part of qvl: it is fetched and built beside the project (see docs/PERFORMANCE.md), and this
// file is compiled against that build by bench/run_peers.sh:
//     g++ -O2 -std=c++17 -I$LLAMA/tools/mtmd -I$LLAMA/ggml/include -I$LLAMA/include bench/llama_clip_bench.cpp \
//         -L$LLAMA/build/bin -lmtmd -lggml -lggml-base -lggml-cpu -Wl,-rpath,$LLAMA/build/bin -o llama_clip_bench
// Usage: llama_clip_bench MMPROJ.gguf SIZE [--fa 0|1|-1] [--threads N] [--repeat N] [--rows ROWS.npy]
#include "clip.h"
#include "clip-impl.h"
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

// Merge-block-major rows [S, (c, t, ph, pw)] of a (1, g, g) grid -> interleaved RGB image of the t = 0 frame.
static std::vector<float> rows_to_image(const std::vector<float> & rows, int size) {
    const int g = size / PATCH;
    std::vector<float> img((size_t) size * size * 3);
    size_t r = 0;
    for (int bh = 0; bh < g / 2; bh++)
        for (int bw = 0; bw < g / 2; bw++)
            for (int mh = 0; mh < 2; mh++)
                for (int mw = 0; mw < 2; mw++, r++)
                    for (int c = 0; c < 3; c++)
                        for (int ph = 0; ph < PATCH; ph++)
                            for (int pw = 0; pw < PATCH; pw++) {
                                const int y = (bh * 2 + mh) * PATCH + ph, x = (bw * 2 + mw) * PATCH + pw;
                                img[((size_t) y * size + x) * 3 + c] =
                                    rows[r * ROW_LEN + (size_t) c * 2 * PATCH * PATCH + ph * PATCH + pw];
                            }
    return img;
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MMPROJ SIZE [--fa 0|1|-1] [--threads N] [--repeat N] [--rows ROWS.npy]\n", argv[0]);
        return 1;
    }
    const char * path = argv[1];
    const int size = atoi(argv[2]);
    int fa = 1, nth = 2, ntimed = 3;
    const char * rows_path = nullptr;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--fa")) fa = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) nth = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) ntimed = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows")) rows_path = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 1; }
    }
    if (size < 32 || size % 32 || nth < 1 || ntimed < 1) {
        fprintf(stderr, "SIZE must be a multiple of 32, --threads and --repeat >= 1\n");
        return 1;
    }
    const size_t S = (size_t) (size / PATCH) * (size / PATCH);
    std::vector<float> rows;
    if (rows_path) {
        size_t r = 0, c = 0;
        if (!read_npy(rows_path, rows, r, c)) return 1;
        if (r != S || c != (size_t) ROW_LEN) {
            fprintf(stderr, "%s: shape (%zu, %zu), a %d² image needs (%zu, %d)\n", rows_path, r, c, size, S, ROW_LEN);
            return 1;
        }
    } else {
        rows = bench_rows(S * ROW_LEN);
    }
    std::vector<float> px = rows_to_image(rows, size);

    clip_context_params cp{};
    cp.use_gpu = false;
    cp.flash_attn_type = fa < 0 ? CLIP_FLASH_ATTN_TYPE_AUTO
                                : (fa ? CLIP_FLASH_ATTN_TYPE_ENABLED : CLIP_FLASH_ATTN_TYPE_DISABLED);
    cp.image_min_tokens = -1;
    cp.image_max_tokens = -1;
    cp.warmup = false; // the untimed first encode reserves the compute buffers for this very size
    auto t_load0 = std::chrono::steady_clock::now();
    clip_init_result res = clip_init(path, cp);
    auto t_load1 = std::chrono::steady_clock::now();
    if (!res.ctx_v) {
        fprintf(stderr, "clip_init failed\n");
        return 2;
    }
    clip_ctx * ctx = res.ctx_v;

    clip_image_f32_batch batch;
    batch.entries.emplace_back();
    batch.entries[0].set_size({size, size}, false, false);
    batch.entries[0].cpy_buf(px);
    const int n_tok = clip_n_output_tokens(ctx, &batch.entries[0]);
    const int n_embd = clip_n_mmproj_embd(ctx);
    std::vector<float> out((size_t) n_tok * n_embd); // clip only copies into a pre-sized buffer

    std::vector<double> ms;
    for (int i = 0; i < 1 + ntimed; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        if (!clip_image_batch_encode(ctx, nth, &batch, out)) {
            fprintf(stderr, "encode failed\n");
            return 3;
        }
        double d = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0) ms.push_back(d);
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0, sumsq = 0;
    bool finite = true;
    for (float v : out) { sum += v; sumsq += (double) v * v; finite = finite && std::isfinite(v); }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("llama_clip file=%s size=%d patches=%zu fa=%d threads=%d load_ms=%.0f median_ms=%.1f runs_ms=", path, size, S,
           fa, nth, std::chrono::duration<double, std::milli>(t_load1 - t_load0).count(), sorted[sorted.size() / 2]);
    for (size_t i = 0; i < ms.size(); ++i) printf("%s%.1f", i ? "," : "", ms[i]);
    printf(" out=%dx%d finite=%d mean=%.5g rms=%.5g peak_rss_mib=%.0f ggml_cpu=avx2:%d,avx512:%d,avx512_bf16:%d\n",
           n_tok, n_embd, (int) finite, sum / out.size(), std::sqrt(sumsq / out.size()), ru.ru_maxrss / 1024.0,
           ggml_cpu_has_avx2(), ggml_cpu_has_avx512(), ggml_cpu_has_avx512_bf16());
    clip_free(ctx);
    return 0;
}
