#!/usr/bin/env bash
# Regenerate every committed oracle fixture under tests/fixtures/tower/ (oracle.py) and the end-to-end fixture(s)
# tests/fixtures/e2e_*.safetensors (e2e_oracle.py).
#
# usage: tests/oracle/make_fixtures.sh [QVL_BIN]      (default: build/qvl)
# env:   PYTHON   interpreter with tests/oracle/requirements.txt installed (default: .venv/bin/python)
#        ONLY     space-separated case names to regenerate (default: all), e.g. ONLY=e2e_rocket
#        OUTDIR   where fixtures go (default: tests/fixtures/tower, and tests/fixtures for e2e_*)
#        KEEP_CKPT=1  keep the synthesized checkpoints (their temp dir is printed)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
QVL="${1:-build/qvl}"
PYTHON="${PYTHON:-.venv/bin/python}"
cd "$ROOT"
[[ -x "$QVL" ]] || { echo "make_fixtures: no executable qvl at $QVL (build it first or pass its path)" >&2; exit 1; }
[[ -x "$PYTHON" ]] || { echo "make_fixtures: no python at $PYTHON (see tests/oracle/README.md)" >&2; exit 1; }

E2E_OUTDIR="${OUTDIR:-$ROOT/tests/fixtures}"
OUTDIR="${OUTDIR:-$ROOT/tests/fixtures/tower}"
mkdir -p "$OUTDIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qvl-fixtures.XXXXXX")"
if [[ "${KEEP_CKPT:-0}" == 1 ]]; then echo "make_fixtures: checkpoints kept in $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi

# name | preset | seed | depth (0: preset's) | deepstack (preset, none, or a list) | oracle args
# Grid sides are chosen so that most of them do not land exactly on position-table rows (real bilinear weights).
# tiny_tiles: one 272-row segment, so attention runs two query tiles (192 + 80) over key tiles 64 + 64 + 64 + 80
# (the last one having taken a 16-key tail), and the GEMMs several M blocks.
# wide_deep: the full 27-block Qwen3.5-27B tower (first and last block stored), where the bf16 precision's
# fidelity gates are set against transformers' bf16 error after it has compounded over the whole depth.
CASES=(
  "tiny_single   | tiny        | 1 | 0 | preset | --grid 1,8,8 --seed 101"
  "tiny_multi    | tiny        | 1 | 0 | preset | --grid 1,4,6 --grid 1,8,4 --grid 1,2,2 --seed 102"
  "tiny_video    | tiny        | 1 | 0 | preset | --grid 3,2,8 --grid 1,8,4 --seed 103"
  "tiny35_single | tiny-3.5    | 4 | 0 | preset | --grid 1,10,6 --seed 106"
  "wide_single   | qwen3.5-27b | 2 | 2 | preset | --grid 1,4,4 --seed 104"
  "w2b_deepstack | qwen3-vl-2b | 3 | 4 | 1,3    | --grid 1,4,4 --grid 1,2,4 --seed 105"
  "tiny_tiles    | tiny        | 1 | 0 | preset | --grid 1,8,34 --seed 107"
  "wide_deep     | qwen3.5-27b | 2 | 0 | preset | --grid 1,4,4 --seed 108 --stages ends"
)

# End to end: an image file through transformers' load_image, AutoImageProcessor and vision model (f32).
# name | preset | seed | depth | deepstack | image | max_pixels (0: the checkpoint's preprocessor_config.json)
# e2e_rocket: the 640x427 photograph at max_pixels 65536 (grid 1x12x18, 54 tokens, 216-row attention segment), so
# that merged + 2 DeepStack features at out_hidden 2048 stay at 1.3 MB.
E2E_CASES=(
  "e2e_rocket    | qwen3-vl-2b | 5 | 4 | 1,3    | tests/data/photos/rocket.jpg | 65536"
)

trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; printf '%s' "${s%"${s##*[![:space:]]}"}"; }

for c in "${CASES[@]}"; do
  IFS='|' read -r name preset seed depth ds oracle <<<"$c"
  name="$(trim "$name")"; preset="$(trim "$preset")"; seed="$(trim "$seed")"; depth="$(trim "$depth")"
  ds="$(trim "$ds")"; oracle="$(trim "$oracle")"
  synth="--preset $preset --seed $seed"
  [[ "$depth" == 0 ]] || synth+=" --depth $depth"
  [[ "$ds" == preset ]] || synth+=" --deepstack $ds"
  if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then continue; fi
  ckpt="$TMP/$name"
  echo "== $name: qvl synth $synth"
  # shellcheck disable=SC2086
  "$QVL" synth $synth --layout hf -o "$ckpt"
  fp="$("$QVL" info --model "$ckpt" | awk '$1 == "fingerprint:" {print $2}')"
  [[ -n "$fp" ]] || { echo "make_fixtures: no fingerprint from qvl info" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$PYTHON" tests/oracle/oracle.py --model "$ckpt" --stages all $oracle --out "$OUTDIR/$name.safetensors" \
    --meta synth_preset="$preset" --meta synth_seed="$seed" --meta synth_depth="$depth" \
    --meta synth_deepstack="$ds" --meta fingerprint="$fp" --meta pos_mode=closed
done

for c in "${E2E_CASES[@]}"; do
  IFS='|' read -r name preset seed depth ds image maxpx <<<"$c"
  name="$(trim "$name")"; preset="$(trim "$preset")"; seed="$(trim "$seed")"; depth="$(trim "$depth")"
  ds="$(trim "$ds")"; image="$(trim "$image")"; maxpx="$(trim "$maxpx")"
  synth="--preset $preset --seed $seed"
  [[ "$depth" == 0 ]] || synth+=" --depth $depth"
  [[ "$ds" == preset ]] || synth+=" --deepstack $ds"
  if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then continue; fi
  ckpt="$TMP/$name"
  echo "== $name: qvl synth $synth"
  # shellcheck disable=SC2086
  "$QVL" synth $synth --layout hf -o "$ckpt"
  fp="$("$QVL" info --model "$ckpt" | awk '$1 == "fingerprint:" {print $2}')"
  [[ -n "$fp" ]] || { echo "make_fixtures: no fingerprint from qvl info" >&2; exit 1; }
  "$PYTHON" tests/oracle/e2e_oracle.py --model "$ckpt" --image "$image" --max-pixels "$maxpx" \
    --out "$E2E_OUTDIR/$name.safetensors" \
    --meta synth_preset="$preset" --meta synth_seed="$seed" --meta synth_depth="$depth" \
    --meta synth_deepstack="$ds" --meta fingerprint="$fp"
done
echo "make_fixtures: done ($OUTDIR, $E2E_OUTDIR)"
