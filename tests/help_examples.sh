#!/usr/bin/env bash
# help_examples.sh — the examples that end `qvl --help` and `qvl COMMAND --help` run as printed. Each line under
# "Examples:" that starts with "qvl" runs in a scratch directory where Qwen3-VL-2B-Instruct is a tiny synthetic
# model, photo.jpg a photograph, clip.mp4 a 2-second video, frames/ five frame images, and /var/cache/qvl (and
# /var/cache/qvl-vllm) stand for directories below the scratch directory; it must exit 0. qvl serve's examples (a
# server that runs until stopped, and the curl requests to it) are checked for being there, not run: the server's
# own tests send those requests. Every command's help must have at least two examples, and no help text may print
# a printf escape as is ('%%'). Under an emulator (QVL_CROSS=1) qvl bench's examples are counted, not run.
# Environment: QVL_BIN, QVL_CROSS, QVL_SOURCE_DIR. Needs only bash and coreutils.
set -u

QVL=${QVL_BIN:-build/qvl}
SRC=${QVL_SOURCE_DIR:-.}
T_PREFIX=qvl-help
if [[ ${QVL_MEDIA:-1} == 0 || ${QVL_VIDEO:-1} == 0 ]]; then # the examples encode a photo and a video
    echo "help_examples.sh: skipped, built without $([[ ${QVL_MEDIA:-1} == 0 ]] && echo "image decoders (QVL_MEDIA=OFF)" ||
        echo "FFmpeg (QVL_VIDEO=OFF)")"
    exit 77
fi
# shellcheck source=shlib.bash
source "$(dirname "${BASH_SOURCE[0]}")/shlib.bash"
QVL=$(cd "$(dirname "$QVL")" && pwd)/$(basename "$QVL") # the examples run in another directory
SRC=$(cd "$SRC" && pwd)

W=$T/w
examples_dir "$W" || bad "the examples' directory (the model, photo, video, frames)"
cd "$W" || exit 1

# The example lines of a help text on stdin, without their two-space indent.
examples() { sed -n '/^Examples:$/,$p' | sed -n 's/^  \([a-z].*\)$/\1/p'; }

# In the order that leaves each example what it needs: the cache exists before `qvl cache` looks at it.
for cmd in "" info encode bench synth cache; do
    name=${cmd:-qvl}
    # shellcheck disable=SC2086 # cmd is one word or none
    "$QVL" $cmd --help >"$T/help" 2>&1 || bad "$name --help: exit $?"
    # a printf escape printed as is (qvl cache --help said "90 %% of 10G": its text goes out through fputs)
    if grep -q '%%' "$T/help"; then bad "$name --help prints '%%'"; else ok; fi
    n=0
    while IFS= read -r line; do
        [[ $line == qvl\ * ]] || continue
        n=$((n + 1))
        line=${line//\/var\/cache\/qvl/$W\/cache}
        # under an emulator a benchmark measures nothing and takes minutes: there the bench lines are only counted
        if [[ ${QVL_CROSS:-0} == 1 && $line == qvl\ bench\ * ]]; then continue; fi
        expect 0 "$name example: $line" eval "\"\$QVL\" ${line#qvl }"
    done < <(examples <"$T/help")
    if [[ $n -ge 2 ]]; then ok; else bad "$name --help: $n examples, want at least 2"; fi
done
if ls Qwen3-VL-2B-Instruct/config.json tiny/config.json synth-2b/config.json out.safetensors clip.safetensors \
    cache-vllm >/dev/null 2>&1; then ok; else bad "the examples' outputs: $(ls)"; fi

if "$QVL" --help | grep -q '^  serve '; then
    "$QVL" serve --help >"$T/help" 2>&1 || bad "serve --help: exit $?"
    n=$(examples <"$T/help" | grep -c '^qvl serve --model \|^curl .*127\.0\.0\.1:8080/v1/')
    if [[ $n -ge 2 ]]; then ok; else bad "serve --help: $n examples, want at least 2"; fi
fi

echo "help_examples: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
