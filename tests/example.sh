#!/usr/bin/env bash
# example.sh — the README's library example is examples/embed.c, verbatim; it compiles with -Wall -Wextra -Werror
# against the public header and the built libqvl.so (alone: nothing else on the link line), and runs: an image
# gives its grid and tokens, a missing file fails with the library's message. Environment: QVL_BIN,
# QVL_SOURCE_DIR, QVL_BUILD_DIR.
set -u
QVL=${QVL_BIN:-build/qvl}
SRC=${QVL_SOURCE_DIR:-.}
BUILD=${QVL_BUILD_DIR:-build}
T_PREFIX=qvl-example
# shellcheck source=shlib.bash
source "$(dirname "${BASH_SOURCE[0]}")/shlib.bash"
if [[ ${QVL_MEDIA:-1} == 0 || ${QVL_CROSS:-0} == 1 ]]; then # it encodes a JPEG, with the host's compiler
    echo "example.sh: skipped ($([[ ${QVL_CROSS:-0} == 1 ]] && echo "a cross build" || echo "built without image decoders (QVL_MEDIA=OFF)"))"
    exit 77
fi

# The README's ```c block after the "examples/embed.c" marker equals the file.
awk '/<!-- examples\/embed.c -->/{f=1; next} f && /^```c$/{g=1; next} g && /^```$/{exit} g' "$SRC/README.md" >"$T/readme.c"
if cmp -s "$T/readme.c" "$SRC/examples/embed.c"; then ok; else bad "README's example differs from examples/embed.c"; diff "$T/readme.c" "$SRC/examples/embed.c" | head >&2; fi
lines=$(wc -l <"$SRC/examples/embed.c")
if ((lines <= 30)); then ok; else bad "examples/embed.c has $lines lines (at most 30)"; fi

CC=${CC:-cc}
SAN=()
[[ ${QVL_SANITIZE:-0} == 1 || ${QVL_SANITIZE:-} == ON ]] && SAN=(-fsanitize=address,undefined)
expect 0 "compile the example" "$CC" -std=c11 -Wall -Wextra -Werror "${SAN[@]}" -I"$SRC/include" "$SRC/examples/embed.c" \
    -L"$BUILD" -lqvl -Wl,-rpath,"$(cd "$BUILD" && pwd)" -o "$T/embed"
"$QVL" synth --preset tiny --seed 1 -o "$T/m" >/dev/null || bad "synth"
expect 0 "run on a photo" "$T/embed" "$T/m" "$SRC/tests/data/photos/rocket.jpg"
has "grid and tokens" "$T/out" '^grid 1x26x40: 260 tokens x [0-9]+, first -?[0-9]'
expect 1 "a missing file" "$T/embed" "$T/m" "$T/missing.jpg"
has "the library's message" "$T/err" 'missing.jpg: cannot open'
expect 2 "usage" "$T/embed"

echo "example: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
