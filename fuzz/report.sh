#!/usr/bin/env bash
# fuzz/report.sh — build every fuzz target (fuzz/fuzz_*.c) with clang's libFuzzer, ASan, UBSan and source-based
# coverage, fuzz each for a while from a copy of its committed corpus, and print per target: executions, libFuzzer's
# coverage counters (cov: edges, ft: features), the corpus size reached, crashes, and llvm-cov's line coverage of
# the target's parser files (and of the whole library).
#
#   fuzz/report.sh [SECONDS_PER_TARGET]        (default 10; `make fuzz-report FUZZ_SECONDS=60`)
#   env: BUILD (build dir, default build-fuzz-report), CC (default clang), TARGETS (names, default every
#        fuzz/fuzz_*.c), JOBS, KEEP=1 keeps the work directory (logs, grown corpora, profiles, crash files)
#
# A crash or sanitizer report is saved as crash-* in the work directory and makes the script exit 1: once fixed,
# add the input to fuzz/corpus/NAME/ under a descriptive name, so the replay test keeps it fixed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-${FUZZ_SECONDS:-10}}
build=${BUILD:-$root/build-fuzz-report}
cc=${CC:-clang}
jobs=${JOBS:-$(nproc)}

tool() { # the first of NAME, NAME-14, NAME-15, ... on PATH
    local n
    for n in "$1" "$1"-{14..20}; do
        if command -v "$n" >/dev/null 2>&1; then echo "$n"; return 0; fi
    done
    echo "fuzz/report.sh: $1 not found (install llvm)" >&2
    return 1
}
profdata=$(tool llvm-profdata)
llvmcov=$(tool llvm-cov)
command -v "$cc" >/dev/null || { echo "fuzz/report.sh: $cc not found (libFuzzer needs clang)" >&2; exit 1; }

# The parser files whose line coverage is reported for each target (a target not listed: the whole library).
files_for() {
    case "$1" in
        config) echo src/io/config.c src/io/jsonutil.c ;;
        preproc) echo src/image/preproc_config.c src/io/jsonutil.c ;;
        npy) echo src/io/npy.c ;;
        rows) echo src/io/files.c src/io/npy.c src/io/safetensors.c ;;
        safetensors) echo src/io/safetensors.c ;;
        decode) echo src/image/decode.c src/image/decode_bmp.c src/image/decode_gif.c src/image/decode_jpeg.c \
                     src/image/decode_png.c src/image/decode_webp.c ;;
        video) echo src/image/video.c src/image/video_frames.c ;;
        *) echo "" ;;
    esac
}

if [ -n "${TARGETS:-}" ]; then
    read -r -a names <<<"$TARGETS"
else
    names=()
    for f in "$root"/fuzz/fuzz_*.c; do
        n=$(basename "$f" .c)
        names+=("${n#fuzz_}")
    done
fi

cov_flags="-fprofile-instr-generate -fcoverage-mapping"
echo "== building ${names[*]} in $build ($cc, libFuzzer + ASan + UBSan + coverage)"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQVL_FUZZ=ON \
      -DQVL_BUILD_SHARED=OFF -DQVL_INSTALL=OFF \
      -DCMAKE_C_FLAGS="$cov_flags" -DCMAKE_EXE_LINKER_FLAGS="$cov_flags" >/dev/null
# By default every target this configuration defines (fuzz_serve_request only where the server is built, with
# libmicrohttpd); named ones must all exist.
if [ -z "${TARGETS:-}" ]; then
    have=$(cmake --build "$build" --target help | sed -n 's/^\.\.\. \(fuzz_[a-z_]*\)$/\1/p')
    kept=()
    for n in "${names[@]}"; do
        if grep -qx "fuzz_$n" <<<"$have"; then kept+=("$n"); else echo "== fuzz_$n: not built here (skipped)"; fi
    done
    names=("${kept[@]}")
fi
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done
cmake --build "$build" -j"$jobs" --target "${targets[@]}" >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/qvl-fuzz-report.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
failed=0
rows=()
for n in "${names[@]}"; do
    bin="$build/fuzz_$n"
    corpus="$root/fuzz/corpus/$n"
    mkdir -p "$work/$n"
    seeds=0
    if [ -d "$corpus" ]; then
        cp "$corpus"/* "$work/$n"/ 2>/dev/null || true
        seeds=$(find "$corpus" -maxdepth 1 -type f | wc -l)
    fi
    maxlen=()
    [ "$n" = decode ] || [ "$n" = video ] || maxlen=(-max_len=4096)
    echo "== fuzz_$n: ${secs}s from $seeds seeds"
    rc=0
    # -fork=0, one process; crash inputs go to the work directory
    ( cd "$work" && LLVM_PROFILE_FILE="$work/$n.profraw" "$bin" -max_total_time="$secs" "${maxlen[@]}" \
          -print_final_stats=1 -artifact_prefix="$work/$n-" "$work/$n" >"$work/$n.log" 2>&1 ) || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$n.log" | tail -1)
    last=$(grep -E '^#[0-9]+.*cov: ' "$work/$n.log" | tail -1 || true)
    cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
    units=$(sed -n 's/.*corp: \([0-9]*\)\/.*/\1/p' <<<"$last")
    crashes=$(find "$work" -maxdepth 1 -name "$n-*" -type f | wc -l)
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        failed=1
        echo "   fuzz_$n exited $rc with $crashes crash file(s); the end of its log:"
        tail -30 "$work/$n.log" | sed 's/^/   | /'
    fi
    parser="-" lib="-"
    if [ -s "$work/$n.profraw" ]; then
        "$profdata" merge -sparse "$work/$n.profraw" -o "$work/$n.profdata"
        pf=$(files_for "$n")
        if [ -n "$pf" ]; then
            # shellcheck disable=SC2086
            parser=$(cd "$root" && "$llvmcov" report "$bin" -instr-profile="$work/$n.profdata" $pf |
                     awk '/^TOTAL/ {print $8 - $9 "/" $8 " lines (" $10 ")"}')
        fi
        lib=$(cd "$root" && "$llvmcov" report "$bin" -instr-profile="$work/$n.profdata" "$root/src" |
              awk '/^TOTAL/ {print $8 - $9 "/" $8 " lines (" $10 ")"}')
    fi
    rows+=("$(printf '%-17s %10s %6s %6s %7s %6s  %-26s %s' "fuzz_$n" "${execs:-?}" "${cov:-?}" "${ft:-?}" \
              "${units:-?}" "$crashes" "$parser" "$lib")")
done

echo
echo "fuzz report: ${secs}s per target, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $($cc --version | head -1)"
printf '%-17s %10s %6s %6s %7s %6s  %-26s %s\n' target execs cov ft corpus crash "parser lines covered" \
       "linked src/ lines covered"
for r in "${rows[@]}"; do echo "$r"; done
[ "${KEEP:-0}" = 1 ] && echo "work directory kept: $work"
exit $failed
