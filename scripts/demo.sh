#!/usr/bin/env bash
# The main job on the bundled default: a small synthetic checkpoint (made by `qvl synth`, deterministic) and the
# bundled sample photograph tests/data/photos/rocket.jpg (public domain). Writes build/demo.safetensors.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
QVL="$BUILD/qvl"
MODEL="$BUILD/demo-model"
[ -f "$MODEL/config.json" ] || "$QVL" synth --preset tiny --seed 1 --layout hf -o "$MODEL"
"$QVL" info --model "$MODEL"
"$QVL" encode --model "$MODEL" tests/data/photos/rocket.jpg -o "$BUILD/demo.safetensors"
