#!/usr/bin/env bash
# cli_cache.sh — `qvl cache` in every build (the cache is libqvl's, not the server's): stat, verify, gc and
# export-vllm over entries written by qvl 1.0.0 (tests/fixtures/cache), a flipped byte caught and deleted, sizes
# and usage errors. Environment: QVL_BIN, QVL_SOURCE_DIR. Needs only bash and coreutils.
set -u

QVL=${QVL_BIN:-${QVL_BUILD_DIR:-build}/qvl}
if [[ ! -x $QVL ]]; then
    echo "cli_cache.sh: qvl binary not found (QVL_BIN=$QVL)" >&2
    exit 1
fi
T_PREFIX=qvl-cli-cache
# shellcheck source=shlib.bash
source "$(dirname "${BASH_SOURCE[0]}")/shlib.bash"
SRC=${QVL_SOURCE_DIR:-.}

fill() { # fill ROOT: the two fixture entries in objects/
    local f k
    for f in "$SRC"/tests/fixtures/cache/*.safetensors; do
        k=$(basename "$f" .safetensors)
        mkdir -p "$1/objects/${k:0:2}"
        cp "$f" "$1/objects/${k:0:2}/$k.safetensors"
    done
}
C=$T/c
mkdir -p "$C"
fill "$C"
total=$(cat "$SRC"/tests/fixtures/cache/*.safetensors | wc -c)
expect 0 "help" "$QVL" cache --help
has "help lists the commands" "$T/out" 'export-vllm'
expect 0 "stat" "$QVL" cache stat "$C"
has "stat: entries" "$T/out" '^entries 2$'
has "stat: bytes" "$T/out" "^bytes $total\$"
expect 0 "verify" "$QVL" cache verify "$C"
has "verify: both whole" "$T/out" '^ok 2$'
expect 0 "export-vllm" "$QVL" cache export-vllm "$C" "$T/ex"
has "export: count" "$T/out" '^exported 2 entries'
n=$(find "$T/ex" -name encoder_cache.safetensors | wc -l)
if [[ $n -eq 2 ]]; then ok; else bad "export: $n links, want 2"; fi
expect 0 "gc within budget" "$QVL" cache gc "$C" --size 1G
has "gc: nothing evicted" "$T/out" '^evicted 0 entries, 0 bytes$'
# a flipped byte in the matrix: caught, deleted, exit 1
f=$(ls "$C"/objects/*/*.safetensors | head -1)
printf '\x7f' | dd of="$f" bs=1 seek=$(($(wc -c <"$f") - 40)) conv=notrunc status=none
expect 1 "verify a damaged entry" "$QVL" cache verify "$C"
has "verify: one corrupt" "$T/out" '^corrupt 1 \(deleted\)$'
if [[ ! -e $f ]]; then ok; else bad "the damaged entry is still there"; fi
expect 0 "gc to 0 bytes" "$QVL" cache gc "$C" --size 0
has "gc --size 0: the rest evicted" "$T/out" '^evicted 1 entries, [0-9]+ bytes$'
expect 0 "stat empty" "$QVL" cache stat "$C"
has "stat: empty" "$T/out" '^entries 0$'
expect 0 "gc size with a suffix" "$QVL" cache gc "$C" --size 512KiB
# a relative root exported to another file system (EXDEV: symbolic links, not hard ones): each link names its entry
# by an absolute path, so it resolves from its own directory (it named "rel/objects/...", and dangled there)
SHM=$(mktemp -d /dev/shm/qvl-cli-cache-XXXXXX 2>/dev/null) || SHM=
if [[ -n $SHM && $(stat -c %d "$SHM") != $(stat -c %d "$T") ]]; then
    mkdir -p "$T/rel"
    fill "$T/rel"
    QVL_ABS=$(cd "$(dirname "$QVL")" && pwd)/$(basename "$QVL")
    expect 0 "export-vllm a relative root across file systems" bash -c 'cd "$1" && "$2" cache export-vllm rel "$3"' \
        _ "$T" "$QVL_ABS" "$SHM/ex"
    n=0
    for l in "$SHM"/ex/*/encoder_cache.safetensors; do [[ -L $l && -f $l ]] && n=$((n + 1)); done
    if [[ $n -eq 2 ]]; then ok; else bad "export across file systems: $n of 2 symbolic links resolve"; fi
fi
[[ -n $SHM ]] && rm -rf "$SHM"
# an export that fails says so, on stderr, and exits 1 (it printed "exported 0 entries" too)
touch "$T/file"
expect 1 "export-vllm into a file" "$QVL" cache export-vllm "$C" "$T/file/ex"
has "export failure: named" "$T/err" 'cannot create'
if [[ ! -s $T/out ]]; then ok; else bad "export failure: stdout says $(cat "$T/out")"; fi
# a directory that is not a cache: named as such, and nothing created in it (stat made objects/, tmp/, gc/,
# vllm-ec/ and CACHEDIR.TAG in whatever it was pointed at)
mkdir -p "$T/plain"
echo x >"$T/plain/notes.txt"
for sub in stat verify; do
    expect 1 "$sub of a directory that is no cache" "$QVL" cache "$sub" "$T/plain"
    has "$sub: not a cache" "$T/err" 'is not a qvl cache'
done
if [[ $(ls -A "$T/plain") == notes.txt ]]; then ok; else bad "created in a plain directory: $(ls -A "$T/plain" | tr '\n' ' ')"; fi
# stat of a cache creates nothing either (here one without tmp/, gc/, vllm-ec/ or CACHEDIR.TAG)
mkdir -p "$T/bare"
fill "$T/bare"
expect 0 "stat of a bare cache" "$QVL" cache stat "$T/bare"
has "bare stat: entries" "$T/out" '^entries 2$'
if [[ $(ls -A "$T/bare") == objects ]]; then ok; else bad "stat created $(ls -A "$T/bare" | tr '\n' ' ')"; fi
expect 0 "gc of a bare cache" "$QVL" cache gc "$T/bare" --size 0
has "bare gc: both evicted" "$T/out" '^evicted 2 entries'
# usage errors
expect 2 "no root" "$QVL" cache stat
expect 2 "bad size" "$QVL" cache gc "$C" --size 1X
expect 2 "negative size" "$QVL" cache gc "$C" --size -1
expect 2 "unknown command" "$QVL" cache frob "$C"
expect 1 "not a directory" "$QVL" cache stat "$T/nope"
has "names the path" "$T/err" 'nope is not a cache directory'

echo "cli_cache.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
