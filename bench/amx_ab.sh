#!/usr/bin/env bash
# amx_ab.sh — one of this tree's AMX kernels against REV's, in one process, alternated call by call: on a VM whose
# tile rate wanders by 2x from minute to minute (another guest on the cores' siblings), separate runs of two builds
# cannot tell 10 % apart, but two calls a few milliseconds apart see the same machine.
#
#   bench/amx_ab.sh gemm REV [M [THREADS [ITERS [SHAPES]]]]      bench/gemm_amx_ab.c, e.g. gemm HEAD~1 784 2 40
#   bench/amx_ab.sh attention REV [S [THREADS [ITERS [NSEG]]]]   bench/attn_amx_ab.c, e.g. attention HEAD 3136 2 20
#
# Builds the benchmarks' kernel library (cmake -S bench -B build-bench) from this tree, compiles REV's
# src/cpu/gemm_amx.c or src/cpu/attention_amx.c (from `git archive`, with REV's headers, in a scratch directory)
# with the same flags and its global symbols renamed old_*, links the two and runs them. REV's file must keep the
# same contracts (and, for the GEMM, the same weight panels). Needs a CPU and OS where AMX is usable.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
kernel=$1 rev=$2
shift 2
case "$kernel" in
    gemm) src=gemm_amx.c syms=(gemm_amx_run gemm_amx_run_packed gemm_amx_run_qkv gemm_amx_workspace_size gemm_amx_pack_a) ;;
    attention) src=attention_amx.c syms=(attn_amx_run attn_amx_check) ;;
    *) echo "amx_ab: the kernel is gemm or attention, not $kernel" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_BENCH:-$root/build-bench}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -S "$root/bench" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target qvl_kernels >/dev/null
git -C "$root" archive "$rev" src include | tar -x -C "$tmp"
flags=(-O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -DQVL_WITH_X86=1 -ffp-contract=off -fno-fast-math -mavx512f -mavx512bw
       -mavx512dq -mavx512vl -mavx512bf16 -mfma -mf16c -mavx2)
"${CC:-cc}" "${flags[@]}" -I "$tmp/include" -I "$tmp/src" -c "$tmp/src/cpu/$src" -o "$tmp/old.o"
renames=()
for s in "${syms[@]}"; do renames+=(--redefine-sym "$s=old_$s"); done
objcopy "${renames[@]}" "$tmp/old.o"
main=$([ "$kernel" = gemm ] && echo gemm_amx_ab.c || echo attn_amx_ab.c)
"${CC:-cc}" -O2 -std=c11 -D_GNU_SOURCE -DQVL_WITH_X86=1 -I "$root/include" -I "$root/src" -I "$root/bench" \
    "$root/bench/$main" "$tmp/old.o" "$build/libqvl_kernels.a" -lm -lpthread -o "$tmp/ab"
echo "amx_ab: $kernel, $(git -C "$root" rev-parse --short "$rev") (old) against the working tree (new);" \
     "$(lscpu | sed -n 's/^Model name: *//p')"
"$tmp/ab" "$@"
