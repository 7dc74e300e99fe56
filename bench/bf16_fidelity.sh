#!/usr/bin/env bash
# bf16_fidelity.sh — fidelity of qvl's bf16 precision at full depth, per stage, next to transformers' own bf16 run:
# a synthetic checkpoint of a preset at full depth, tests/oracle/oracle.py (float32 and bfloat16 runs of
# transformers on the same weights and pixel rows; the bf16 run's per-stage error lands in the fixture's metadata),
# then `qvl encode --stages` in f32 and bf16 on the fixture's rows, and a table of ‖qvl − f32 oracle‖/‖f32 oracle‖
# per stage beside transformers-bf16's and their ratio.
#
#   bench/bf16_fidelity.sh [--qvl build/qvl] [--python PY] [--preset qwen3.5-27b] [--grid 1,28,28] [--seed 2]
#                          [--work DIR] [--keep]
# 448² is grid 1,28,28 (784 patches). The oracle runs on one thread: a minute or more for the 27-block tower.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
QVL="$root/build/qvl"; PY="$root/.venv/bin/python"; PRESET=qwen3.5-27b; GRID=1,28,28; SEED=2; WORK=""; KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --qvl) QVL=$2; shift 2 ;; --python) PY=$2; shift 2 ;; --preset) PRESET=$2; shift 2 ;;
    --grid) GRID=$2; shift 2 ;; --seed) SEED=$2; shift 2 ;; --work) WORK=$2; shift 2 ;; --keep) KEEP=1; shift ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "bf16_fidelity: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$WORK" ]]; then WORK=$(mktemp -d "${TMPDIR:-/tmp}/qvl-bf16fid.XXXXXX"); fi
[[ $KEEP == 1 ]] || trap 'rm -rf "$WORK"' EXIT
ck="$WORK/ckpt"; fx="$WORK/fixture.safetensors"
[[ -f "$ck/config.json" ]] || "$QVL" synth --preset "$PRESET" --seed "$SEED" --layout hf -o "$ck" >/dev/null
[[ -f "$fx" ]] || "$PY" "$root/tests/oracle/oracle.py" --model "$ck" --grid "$GRID" --seed 7 --out "$fx" --stages all \
  --meta synth_preset="$PRESET" --meta synth_seed="$SEED" >/dev/null
for p in f32 bf16; do
  "$QVL" encode --model "$ck" --pixels "$fx" -o "$WORK/qvl_$p.safetensors" --stages --precision "$p" -q
done
"$PY" - "$fx" "$WORK/qvl_f32.safetensors" "$WORK/qvl_bf16.safetensors" "$("$QVL" info --model "$ck" | sed -n 's/^bf16 kernels: *//p')" <<'PY'
import re, sys
import numpy as np
from safetensors import safe_open
fx, q32, q16, kern = sys.argv[1:5]
def load(p):
    with safe_open(p, "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, (f.metadata() or {})
ref, meta = load(fx); a, _ = load(q32); b, _ = load(q16)
def rel(x, y):
    x = x.astype(np.float64); y = y.astype(np.float64)
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))
order = sorted([k for k in ref if k in b and f"bf16_relerr.{k}" in meta],
               key=lambda k: (0, 0) if k == "patch" else (0, 1) if k == "pos" else
               (1, int(k[3:])) if k.startswith("blk") else (2, k))
print(f"bf16 kernels: {kern}; rows {ref['pixel_values'].shape[0]}")
print(f"{'stage':12s} {'qvl f32':>10s} {'qvl bf16':>10s} {'tf bf16':>10s} {'ratio':>7s}")
worst_blk = worst_out = 0.0
for k in order:
    tf = float(meta[f"bf16_relerr.{k}"]); e16 = rel(b[k], ref[k]); e32 = rel(a[k], ref[k])
    r = e16 / tf if tf > 0 else 0.0
    if k.startswith("blk"): worst_blk = max(worst_blk, r)
    if k == "merged" or k.startswith("deepstack"): worst_out = max(worst_out, r)
    print(f"{k:12s} {e32:10.3e} {e16:10.3e} {tf:10.3e} {r:7.3f}")
print(f"worst ratio: blocks {worst_blk:.3f} (gate 0.5), merged/DeepStack {worst_out:.3f} (gate 0.333)")
PY
