#!/usr/bin/env bash
# doc_examples.sh — the README's and docs/'s examples run as printed, so the front door cannot drift from the
# product. A fenced block's info string says whether it runs: ```sh blocks run (each page's in order, as one bash
# script with -euo pipefail, in a scratch directory of its own), ```c blocks are complete programs, compiled with
# -Wall -Wextra -Werror against the public header and the built libqvl and run as `./prog Qwen3-VL-2B-Instruct
# photo.jpg`; ```text, ```json and the like are synopses or sample output and do not run (```python blocks run in
# make test-python: python/tests/test_docs.py). The scratch directory holds what the examples name:
# Qwen3-VL-2B-Instruct/ (a tiny synthetic model), photo.jpg, page.png, clip.mp4, frames/ (five PNGs), and `qvl` on
# PATH; /var/cache/qvl stands for a directory below it and port 8080 for a free port. Also checked: the README has
# at most 1,000 words, and every relative link of these pages names a file of the tree.
# Environment: QVL_BIN, QVL_SOURCE_DIR, QVL_BUILD_DIR, QVL_SANITIZE, QVL_MEDIA, QVL_VIDEO, QVL_CROSS.
set -u
QVL=${QVL_BIN:-build/qvl}
SRC=${QVL_SOURCE_DIR:-.}
BUILD=${QVL_BUILD_DIR:-build}
T_PREFIX=qvl-docs
if [[ ${QVL_MEDIA:-1} == 0 || ${QVL_VIDEO:-1} == 0 || ${QVL_CROSS:-0} == 1 ]]; then
    echo "doc_examples.sh: skipped ($([[ ${QVL_CROSS:-0} == 1 ]] && echo "a cross build: the C examples need the host's compiler" ||
        echo "the examples decode photos and videos, and this build has $([[ ${QVL_MEDIA:-1} == 0 ]] && echo "no image decoders" || echo "no FFmpeg")"))"
    exit 77
fi
# shellcheck source=shlib.bash
source "$(dirname "${BASH_SOURCE[0]}")/shlib.bash"
QVL=$(cd "$(dirname "$QVL")" && pwd)/$(basename "$QVL")
SRC=$(cd "$SRC" && pwd)
BUILD=$(cd "$BUILD" && pwd)
pages=("$SRC/README.md" "$SRC"/docs/*.md)

# The README is the front door: at most 1,000 words, code included.
words=$(wc -w <"$SRC/README.md")
if ((words <= 1000)); then ok; else bad "README.md has $words words (at most 1,000)"; fi

# Every relative link ](path) or ](path#anchor) of a page names a file or directory of the tree.
for p in "${pages[@]}"; do
    while IFS= read -r link; do
        target=${link%%#*}
        [[ -z $target ]] && continue
        if [[ -e "$(dirname "$p")/$target" ]]; then ok; else bad "${p#"$SRC"/}: link to $target: no such file"; fi
    done < <(grep -o '](\([^)]*\))' "$p" | sed 's/^](\(.*\))$/\1/' | grep -v '^[a-z]*://\|^mailto:')
done

# The blocks of page $1 whose info string is $2, each preceded by a line ": '#@ block N (line L)'" (a command, so
# that bash -x shows where a script stopped).
blocks() {
    awk -v want="$2" '
        /^```/ && !inb { inb = 1; run = (substr($0, 4) == want); if (run) printf ": \047#@ block %d (line %d)\047\n", ++n, NR; next }
        /^```/ && inb { inb = 0; next }
        inb && run { print }' "$1"
}

# A TCP port on loopback that nothing listens on.
free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
    done
    return 1
}

have_serve=0
"$QVL" --help | grep -q '^  serve ' && have_serve=1
have_curl=0
command -v curl >/dev/null && have_curl=1
n_sh=0 n_c=0
for p in "${pages[@]}"; do
    name=${p#"$SRC"/}
    id=$(echo "$name" | tr '/.' '__')

    # The shell blocks: one script per page.
    blocks "$p" sh >"$T/$id.sh.body"
    if [[ -s $T/$id.sh.body ]]; then
        if [[ $have_serve == 0 || $have_curl == 0 ]] && grep -q 'qvl serve\|curl ' "$T/$id.sh.body"; then
            echo "doc_examples.sh: $name's shell blocks not run: $([[ $have_serve == 0 ]] && echo "this build has no qvl serve" || echo "no curl on this machine")"
        else
            W=$T/$id
            examples_dir "$W" || bad "$name: the scratch directory"
            if ! port=$(free_port); then
                bad "$name: no free port for its server examples"
                continue
            fi
            { echo "set -euo pipefail"; sed -e "s#/var/cache/qvl#$W/cache#g" -e "s/\(127\.0\.0\.1\|localhost\):8080/\1:$port/g" \
                -e "s/--port 8080/--port $port/g" "$T/$id.sh.body"; } >"$W.sh"
            n_sh=$((n_sh + $(grep -c '^: .#@ block' "$W.sh")))
            # in a session of its own (setsid, here not forking: the id is the child's), so that a server the
            # script left running is stopped with its process group, whatever the script did
            (cd "$W" && PATH="$W/bin:$PATH" exec setsid timeout -k 5 300 bash -x "$W.sh") >"$T/out" 2>"$T/err" &
            sid=$!
            wait "$sid"
            rc=$?
            kill -TERM -- "-$sid" 2>/dev/null
            if [[ $rc -eq 0 ]]; then ok; else
                bad "$name: shell examples: exit $rc at $(grep -o '#@ block [0-9]* (line [0-9]*)' "$T/err" | tail -1 ||
                    echo '?')"
                tail -n 15 "$T/err" | sed 's/^/    /' >&2
            fi
        fi
    fi

    # The C programs: each compiled and run.
    blocks "$p" c >"$T/$id.c.all"
    k=0
    while IFS= read -r hdr; do
        k=$((k + 1))
        awk -v k="$k" '/^: .#@ block/ { i++; next } i == k' "$T/$id.c.all" >"$T/$id.$k.c"
        W=$T/$id-c$k
        examples_dir "$W" || bad "$name: the scratch directory"
        CC=${CC:-cc}
        SAN=()
        [[ ${QVL_SANITIZE:-0} == 1 || ${QVL_SANITIZE:-} == ON ]] && SAN=(-fsanitize=address,undefined)
        expect 0 "$name: C $hdr compiles" "$CC" -std=c11 -Wall -Wextra -Werror "${SAN[@]}" -I"$SRC/include" "$T/$id.$k.c" \
            -L"$BUILD" -lqvl -Wl,-rpath,"$BUILD" -o "$W/prog"
        expect 0 "$name: C $hdr runs" bash -c 'cd "$1" && ./prog Qwen3-VL-2B-Instruct photo.jpg' _ "$W"
        n_c=$((n_c + 1))
    done < <(grep -o '#@ block [0-9]* (line [0-9]*)' "$T/$id.c.all" | sed 's/^#@ //')
done
if ((n_sh >= 5)); then ok; else bad "only $n_sh shell blocks found in README.md and docs/"; fi

echo "doc_examples: $n_sh shell blocks and $n_c C programs from ${#pages[@]} pages; $pass passed, $fail failed"
[[ $fail -eq 0 ]]
