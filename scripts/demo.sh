#!/usr/bin/env bash
# The main job on the bundled default: a small synthetic checkpoint (made by `qvl synth`, deterministic) and
# the bundled patch rows data/sample_rows.npy (an 8×8-patch image, 128×128 pixels). Writes build/demo.safetensors.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
QVL="$BUILD/qvl"
MODEL="$BUILD/demo-model"
[ -f "$MODEL/config.json" ] || "$QVL" synth --preset tiny --seed 1 --layout hf -o "$MODEL"
"$QVL" info --model "$MODEL"
"$QVL" encode --model "$MODEL" --pixels data/sample_rows.npy --grid 1,8,8 -o "$BUILD/demo.safetensors"
