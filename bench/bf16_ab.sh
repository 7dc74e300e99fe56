#!/usr/bin/env bash
# bf16_ab.sh — qvl f32, qvl bf16, transformers bfloat16 and float32 at one image size, alternating in one run
# (A B C D, A B C D, ...), so that a shared or drifting machine shifts every tool alike. Prints each run's line
# and the median per tool, and what oneDNN ran for transformers' bf16 linears (ONEDNN_VERBOSE, one extra run).
#
#   bench/bf16_ab.sh --model DIR [--qvl build/qvl] [--python PY] [--size 448] [--threads 2] [--rounds 3]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
QVL="$here/../build/qvl"; PY="$here/../.venv/bin/python"; MODEL=""; SIZE=448; THREADS=2; ROUNDS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL=$2; shift 2 ;; --qvl) QVL=$2; shift 2 ;; --python) PY=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;; --threads) THREADS=$2; shift 2 ;; --rounds) ROUNDS=$2; shift 2 ;;
    -h|--help) sed -n 2,7p "$0"; exit 0 ;;
    *) echo "bf16_ab: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$MODEL" ]] || { echo "bf16_ab: --model DIR is required" >&2; exit 2; }
lscpu | grep -qw amx_bf16 && echo "cpu: AMX-BF16 present" || echo "cpu: no AMX"
lscpu | grep -qw avx512_bf16 && echo "cpu: AVX512-BF16 present" || echo "cpu: no AVX512-BF16"
declare -A runs
qvl_run() { "$QVL" bench --model "$MODEL" --sizes "$SIZE" --video 0x0 --batch 0x0 --threads "$THREADS" --repeat 1 \
              --precision "$1" | awk '/^image/ {print $5}'; }
hf_run() { "$PY" "$here/hf_tower.py" --model "$MODEL" --sizes "$SIZE" --video 0x0 --batch 0x0 --threads "$THREADS" \
             --repeat 1 --dtypes "$1" 2>/dev/null | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p'; }
for r in $(seq "$ROUNDS"); do
  for tool in qvl-f32 qvl-bf16 hf-bfloat16 hf-float32; do
    case $tool in
      qvl-*) ms=$(qvl_run "${tool#qvl-}") ;;
      hf-*) ms=$(hf_run "${tool#hf-}") ;;
    esac
    echo "round $r $tool ${SIZE}² ${ms} ms"
    runs[$tool]+="$ms "
  done
done
echo "medians (${SIZE}², $THREADS threads, $ROUNDS rounds):"
for tool in qvl-f32 qvl-bf16 hf-bfloat16 hf-float32; do
  printf '  %-12s %s ms\n' "$tool" "$(tr ' ' '\n' <<<"${runs[$tool]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
done
echo "oneDNN kernels of transformers' bfloat16 run:"
ONEDNN_VERBOSE=1 "$PY" "$here/hf_tower.py" --model "$MODEL" --sizes "$SIZE" --video 0x0 --batch 0x0 \
  --threads "$THREADS" --repeat 1 --dtypes bfloat16 2>&1 | grep -o 'brg[a-z_]*:[a-z0-9_]*\|gemm:[a-z0-9_]*\|jit:[a-z0-9_]*' \
  | sort | uniq -c | sort -rn | head -5 || true
