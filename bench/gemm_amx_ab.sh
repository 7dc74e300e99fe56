#!/usr/bin/env bash
# gemm_amx_ab.sh — this tree's AMX GEMM against REV's, in one process, alternated call by call (bench/gemm_amx_ab.c).
#
#   bench/gemm_amx_ab.sh REV [M [THREADS [ITERS [SHAPES]]]]     e.g. bench/gemm_amx_ab.sh HEAD~1 784 2 40
#
# Builds the benchmarks (cmake -S bench -B build-bench) for this tree's kernels, compiles REV's src/cpu/gemm_amx.c
# (from `git show`, with REV's headers in a scratch directory) with the same flags and its global symbols renamed
# old_*, links the two and runs them. REV's gemm_amx.c must have the same contracts (gemm_amx_run,
# gemm_amx_workspace_size) and the same weight panels as this tree's. Needs a CPU and OS where AMX is usable.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
rev=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_BENCH:-$root/build-bench}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -S "$root/bench" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target qvl_kernels >/dev/null
# REV's sources for the one file and the headers it includes
git -C "$root" archive "$rev" src include | tar -x -C "$tmp"
flags=(-O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -DQVL_WITH_X86=1 -ffp-contract=off -fno-fast-math -mavx512f -mavx512bw
       -mavx512dq -mavx512vl -mavx512bf16 -mfma -mf16c -mavx2)
"${CC:-cc}" "${flags[@]}" -I "$tmp/include" -I "$tmp/src" -c "$tmp/src/cpu/gemm_amx.c" -o "$tmp/old.o"
objcopy --redefine-sym gemm_amx_run=old_gemm_amx_run \
        --redefine-sym gemm_amx_workspace_size=old_gemm_amx_workspace_size \
        --redefine-sym gemm_amx_pack_a=old_gemm_amx_pack_a "$tmp/old.o"
"${CC:-cc}" -O2 -std=c11 -D_GNU_SOURCE -DQVL_WITH_X86=1 -I "$root/include" -I "$root/src" -I "$root/bench" \
    "$root/bench/gemm_amx_ab.c" "$tmp/old.o" "$build/libqvl_kernels.a" -lm -lpthread -o "$tmp/gemm_amx_ab"
echo "gemm_amx_ab: $(git -C "$root" rev-parse --short "$rev") (old) against the working tree (new); $(lscpu | sed -n 's/^Model name: *//p')"
"$tmp/gemm_amx_ab" "$@"
