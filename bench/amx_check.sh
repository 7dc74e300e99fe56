#!/usr/bin/env bash
# amx_check.sh — on an AMX machine, in one run of a few minutes: whether qvl's AMX-BF16 kernel set is usable here
# (lscpu, `qvl info`), the hardware halves of its tests (test_amx, test_amx_attention, test_backend,
# test_parity_amx), the TDPBF16PS peak (bench/amx_peak.c), the bf16 GEMM sets per tower shape
# (bench/bench_gemm_bf16.c), the tile loads' cost (bench/amx_loads.c), the AMX attention alone
# (bench/bench_attention.c, BENCH_ISA=amx), and `qvl bench` on a synthetic Qwen3.5-27B tower in f32, bf16 on AMX and bf16 on
# AVX512-BF16, on 2 threads and on every core. Every step has a time limit; a step that fails or runs out is
# reported and the rest still run. Writes OUT/summary.txt (the lines that matter) and one log per step.
#
# Usage: bench/amx_check.sh [--out DIR] [--threads LIST] [--sizes LIST] [--jobs N] [--budget SECONDS]
#   --out DIR        where the build, the checkpoint and the logs go (default /tmp/qvl-amx-check)
#   --threads LIST   thread counts for qvl bench (default "2,$(nproc)")
#   --sizes LIST     qvl bench image sides (default 448)
#   --jobs N         build parallelism (default nproc)
#   --budget S       stop starting new steps after S seconds (default 330)
# Needs cmake and a C compiler; the image/video libraries are optional (the build falls back to a core-only
# library, which is all these steps use). Exit status 0 when every step that ran passed, 1 otherwise, 77 when
# the CPU has no AMX (nothing here can be measured; the run stops after saying so).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
OUT=/tmp/qvl-amx-check THREADS="" SIZES=448 JOBS=$(nproc) BUDGET=330
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --sizes) SIZES=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "amx_check.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$THREADS" ] || THREADS="2,$(nproc)"
mkdir -p "$OUT" || exit 2
SUM="$OUT/summary.txt"
: > "$SUM"
t_start=$(date +%s)
failed=0
say() { echo "$*" | tee -a "$SUM"; }
# step NAME LIMIT CMD...: run CMD with its output in OUT/NAME.log, under a time limit, unless the budget is spent
step() {
    local name=$1 limit=$2
    shift 2
    local used=$(( $(date +%s) - t_start ))
    if [ "$used" -ge "$BUDGET" ]; then say "[$name] not run: the ${BUDGET} s budget is spent"; failed=1; return 1; fi
    local t0 rc
    t0=$(date +%s)
    timeout --kill-after=5 "$limit" bash -c '"$@"' _ "$@" > "$OUT/$name.log" 2>&1 # (bash: runs exported functions)
    rc=$?
    local secs=$(( $(date +%s) - t0 ))
    case $rc in
        0) say "[$name] ok (${secs} s)" ;;
        77) say "[$name] skipped (${secs} s): $(tail -1 "$OUT/$name.log")" ;;
        124|137) say "[$name] TIMED OUT after ${limit} s"; failed=1 ;;
        *) say "[$name] FAILED, exit $rc (${secs} s): $(tail -1 "$OUT/$name.log")"; failed=1 ;;
    esac
    return $rc
}

say "== amx_check.sh at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
say "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores online"
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'amx_bf16|amx_tile|amx_int8|avx512_bf16|avx512f' | tr '\n' ' ')
say "cpu flags: ${flags:-none of amx_bf16 amx_tile amx_int8 avx512_bf16 avx512f}"
# (QVL_AMX_CHECK_ANYWAY=1 runs every step on a CPU without AMX too: for trying the script itself out)
if { ! echo "$flags" | grep -qw amx_bf16 || ! echo "$flags" | grep -qw amx_tile; } && [ "${QVL_AMX_CHECK_ANYWAY:-0}" != 1 ]; then
    say "no AMX-BF16 on this CPU: nothing to check here"
    exit 77
fi

B="$OUT/build" BB="$OUT/build-bench"
targets="qvl_cli test_amx test_amx_attention test_backend test_parity_amx"
configure() {
    cmake -S "$root" -B "$B" -DCMAKE_BUILD_TYPE=Release -DQVL_BUILD_TESTS=ON "$@" &&
        cmake --build "$B" -j "$JOBS" --target $targets
}
export -f configure
export root B JOBS targets
if ! step build 240 configure; then
    rm -rf "$B"
    step build-core 240 configure -DQVL_MEDIA=OFF -DQVL_VIDEO=OFF || { say "no build: stopping"; exit 1; }
fi
export QVL_SOURCE_DIR="$root"
step synth 120 "$B/qvl" synth -p qwen3.5-27b -s 1 -o "$OUT/synth27"
step info 60 "$B/qvl" info --model "$OUT/synth27"
sed -n 's/^\(bf16 kernels\|amx\):/&/p' "$OUT/info.log" | sed 's/^/  /' | tee -a "$SUM"
for t in test_amx test_amx_attention test_backend; do
    step "$t" 120 "$B/$t"
    grep -h "NOTE\|AMX-BF16 on this CPU\|passed, .* failed" "$OUT/$t.log" | sed 's/^/  /' | tee -a "$SUM"
done
step test_parity_amx 240 "$B/test_parity_amx"
grep -h "passed, .* failed\|merged" "$OUT/test_parity_amx.log" | tail -4 | sed 's/^/  /' | tee -a "$SUM"

if step build-bench 180 bash -c "cmake -S '$root/bench' -B '$BB' -DCMAKE_BUILD_TYPE=Release >/dev/null &&
        cmake --build '$BB' -j '$JOBS' --target amx_peak bench_gemm_bf16 amx_loads bench_attention"; then
    step amx_peak 60 "$BB/amx_peak" "$(nproc)"
    tail -n "$(( $(nproc) + 2 ))" "$OUT/amx_peak.log" | sed 's/^/  /' | tee -a "$SUM"
    step bench_gemm_bf16 150 "$BB/bench_gemm_bf16" 784
    sed 's/^/  /' "$OUT/bench_gemm_bf16.log" | tail -20 | tee -a "$SUM"
    step amx_loads 60 "$BB/amx_loads"
    sed 's/^/  /' "$OUT/amx_loads.log" | tee -a "$SUM"
    step bench_attention 90 env BENCH_ISA=amx BENCH_SCRATCH=4304 "$BB/bench_attention" 784 3136
    sed 's/^/  /' "$OUT/bench_attention.log" | tee -a "$SUM"
fi

for th in ${THREADS//,/ }; do
    for pi in f32:auto bf16:amx bf16:avx512; do
        prec=${pi%%:*} isa=${pi#*:}
        name="bench-$prec-$isa-t$th"
        step "$name" 150 "$B/qvl" bench --model "$OUT/synth27" --sizes "$SIZES" --video 0x0 --batch 0x0 \
            --repeat 3 --threads "$th" --precision "$prec" --isa "$isa"
        grep -hE "^(threads|precision|image)|GEMM" "$OUT/$name.log" | sed 's/^/  /' | tee -a "$SUM"
    done
done
say "== done in $(( $(date +%s) - t_start )) s; logs in $OUT"
exit $failed
