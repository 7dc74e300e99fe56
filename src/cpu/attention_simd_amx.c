/* attention_simd_amx.c — the AMX attention kernel (attention_amx.c) with the instruction build's AVX-512 layouts
 * and softmax over the C model of the tile instructions (amx_emulated.c): attn_amx_run_emulated_simd, tests only,
 * called only after cpu_has_avx512bf16(). With it everything of the instruction build but the tile instructions
 * themselves is checked bit for bit against the definition on any AVX512-BF16 CPU. Named *_amx.c so the build
 * compiles it with the AMX kernels' flags (AVX-512 + BF16), on x86 only. */
#define QVL_AMX_EMULATE 1
#define ATTN_AMX_SIMD 1

#include "cpu/attention_amx.c"
