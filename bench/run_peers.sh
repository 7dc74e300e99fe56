#!/usr/bin/env bash
# run_peers.sh — qvl side by side with its peers on this CPU: the same checkpoint, the same pixel rows, the same
# thread count, run one after the other. Prints each tool's own lines, then a summary with time ratios
# qvl ÷ peer (> 1: qvl is slower; < 1: qvl is faster).
#
#   bench/run_peers.sh --qvl build/qvl --llama /path/to/llama.cpp/build --model DIR [options]
#
# Peers:
#   transformers  bench/hf_tower.py: the vision model class on the CPU, float32 and bfloat16 (bench/requirements.txt)
#   llama.cpp     bench/llama_clip_bench.cpp against an existing llama.cpp build (--llama; its source tree is the
#                 build's CMAKE_HOME_DIRECTORY): clip_image_batch_encode with F32 / F16 / BF16 mmproj files,
#                 flash attention on and off. The mmproj files are converted from --model with that tree's own
#                 convert_hf_to_gguf.py --mmproj unless already in --work.
#   OpenBLAS      bench/openblas_sgemm.c (cblas_sgemm, f32) on the tower's GEMM shapes; with --qvl-gemm, qvl's own
#                 GEMM (bench_gemm from bench/CMakeLists.txt) on the same shapes for the ratio.
# Nothing is installed and nothing of llama.cpp is built: the two small bench programs are compiled into --work.
#
# Options:
#   --threads N        threads for every tool (default 2)
#   --repeat N         timed runs per case after one warm-up (default 3)
#   --sizes LIST       square image sides for qvl and transformers (default 448,896)
#   --video FxS        video case for qvl and transformers (default 8x448; 0x0 skips)
#   --batch NxS        batch case for qvl and transformers (default 8x224; 0x0 skips)
#   --llama-sizes LIST image sides for llama.cpp (default: --sizes)
#   --llama-cases LIST llama.cpp runs as MMPROJTYPE:FLASHATTN, types f32 f16 bf16, flash attention 1 or 0
#                      (default f32:1,f32:0,f16:1,f16:0,bf16:1,bf16:0)
#   --blas-cores LIST  OpenBLAS kernels: auto (its own detection) and/or OPENBLAS_CORETYPE names
#                      (default auto,Haswell,SkylakeX)
#   --llama-cpu-lib DIR  run llama.cpp with the libggml-cpu.so found in DIR (LD_LIBRARY_PATH), e.g. the bin/ of a
#                      second build configured -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF, to time its
#                      AVX2 kernels; the ISA each run used is read back from ggml and shown in the peer's name
#   --qvl-gemm PATH    qvl's bench_gemm binary, for GEMM ratios per shape (optional)
#   --python PY        Python with bench/requirements.txt (default: .venv/bin/python if present, else python3)
#   --work DIR         scratch: compiled benches, mmproj files, logs (default ${TMPDIR:-/tmp}/qvl-peers)
#   --quiet-wait S     before each tool run, wait up to S seconds for the machine to be idle (>= 90% idle over
#                      2 s, from /proc/stat); the idle share found is logged (default 0: no wait)
#   --only LIST        run only these of qvl,hf,blas,llama (default all)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
QVL="" LLAMA="" MODEL="" THREADS=2 REPEAT=3 SIZES=448,896 VIDEO=8x448 BATCH=8x224 LLAMA_SIZES=""
LLAMA_CASES=f32:1,f32:0,f16:1,f16:0,bf16:1,bf16:0 BLAS_CORES=auto,Haswell,SkylakeX QVL_GEMM="" LLAMA_CPU_LIB="" PY="" WORK="${TMPDIR:-/tmp}/qvl-peers"
ONLY=qvl,hf,blas,llama QUIET_WAIT=0

die() { echo "run_peers: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value (see the header of $0)"
    case "$1" in
        --qvl) QVL=$2 ;; --llama) LLAMA=$2 ;; --model) MODEL=$2 ;; --threads) THREADS=$2 ;; --repeat) REPEAT=$2 ;;
        --sizes) SIZES=$2 ;; --video) VIDEO=$2 ;; --batch) BATCH=$2 ;; --llama-sizes) LLAMA_SIZES=$2 ;;
        --llama-cases) LLAMA_CASES=$2 ;; --blas-cores) BLAS_CORES=$2 ;; --qvl-gemm) QVL_GEMM=$2 ;; --llama-cpu-lib) LLAMA_CPU_LIB=$2 ;;
        --python) PY=$2 ;; --work) WORK=$2 ;; --only) ONLY=$2 ;; --quiet-wait) QUIET_WAIT=$2 ;;
        *) die "unknown option $1 (see the header of $0)" ;;
    esac
    shift 2
done
idle_pct() { # share of CPU time idle over 2 s, in percent
    local a b
    a=($(head -1 /proc/stat)); sleep 2; b=($(head -1 /proc/stat))
    local tot=0 i
    for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
    echo $(( tot > 0 ? 100 * (b[4] - a[4] + b[5] - a[5]) / tot : 0 ))
}
wait_quiet() { # wait_quiet LABEL: up to QUIET_WAIT seconds for an idle machine; logs what it found
    [ "$QUIET_WAIT" -gt 0 ] || return 0
    local t0=$SECONDS p
    while :; do
        p=$(idle_pct)
        if [ "$p" -ge 90 ] || [ $((SECONDS - t0)) -ge "$QUIET_WAIT" ]; then break; fi
    done
    echo "[$1: machine ${p}% idle after $((SECONDS - t0)) s wait; load $(cut -d' ' -f1 /proc/loadavg)]"
}
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
[ -n "$MODEL" ] && [ -f "$MODEL/config.json" ] || die "--model DIR with config.json is required"
want qvl && { [ -x "$QVL" ] || die "--qvl PATH to the qvl binary is required"; }
want llama && { [ -d "$LLAMA" ] || die "--llama PATH of an existing llama.cpp build is required"; }
[ -n "$LLAMA_SIZES" ] || LLAMA_SIZES=$SIZES
if [ -z "$PY" ]; then
    if [ -x "$root/.venv/bin/python" ]; then PY="$root/.venv/bin/python"; else PY=python3; fi
fi
mkdir -p "$WORK"
MODEL=$(cd "$MODEL" && pwd)

declare -A MS=()    # "tool|case" -> median ms
declare -A GF=()    # "tool|shape|M" -> GFLOP/s
case_of() { # "image 448²" / "video 8x448²" / "batch 8x224²" -> image448 / video8x448 / batch8x224
    echo "$1$2" | sed 's/²//'
}

echo "== machine"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores online"
echo "isa: $(grep -m1 -o -w -E 'avx2|fma|avx512f|avx512_bf16|avx512_fp16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "threads: $THREADS, repeat: $REPEAT (median after one warm-up)"
echo "qvl: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (work tree modified)')"
echo

# ---------------------------------------------------------------------------------------------------------------- qvl
if want qvl; then
    echo "== qvl ($QVL)"
    log="$WORK/qvl.log"
    if "$QVL" bench --help >/dev/null 2>&1; then
        wait_quiet qvl
        "$QVL" bench --model "$MODEL" --sizes "$SIZES" --video "$VIDEO" --batch "$BATCH" --threads "$THREADS" \
            --repeat "$REPEAT" | tee "$log"
        while read -r a b _ _ t _; do
            MS["qvl|$(case_of "$a" "$b")"]=$t
        done < <(grep -E '^(image|video|batch) [0-9x]+² +[0-9]' "$log")
    else
        # no `qvl bench` in this build: time `qvl encode` (it prints its own encode time) on the same rows
        echo "(qvl bench not available: timing qvl encode per image size on the bench rows)"
        for s in ${SIZES//,/ }; do
            g=$((s / 16))
            PYTHONDONTWRITEBYTECODE=1 "$PY" -c "import sys, numpy as np; sys.path.insert(0, '$here'); import hf_tower as h; \
                np.save('$WORK/rows$s.npy', h.bench_rows($g * $g * 1536).reshape($g * $g, 1536))"
            ts=()
            for r in $(seq 0 "$REPEAT"); do
                out=$("$QVL" encode --model "$MODEL" --pixels "$WORK/rows$s.npy" --grid "1,$g,$g" \
                    --threads "$THREADS" -o "$WORK/out$s.npy" 2>&1)
                t=$(echo "$out" | grep -o -E '[0-9.]+ ms' | head -1 | cut -d' ' -f1)
                [ -n "$t" ] || die "cannot read the encode time from: $out"
                [ "$r" -gt 0 ] && ts+=("$t")
            done
            med=$(printf '%s\n' "${ts[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
            echo "image${s}: runs ${ts[*]} ms, median $med ms" | tee -a "$log"
            MS["qvl|image$s"]=$med
        done
    fi
    echo
fi

# ------------------------------------------------------------------------------------------------------ transformers
if want hf; then
    echo "== transformers (bench/hf_tower.py, $PY)"
    log="$WORK/hf.log"
    wait_quiet transformers
    "$PY" "$here/hf_tower.py" --model "$MODEL" --sizes "$SIZES" --video "$VIDEO" --batch "$BATCH" \
        --threads "$THREADS" --repeat "$REPEAT" --dtypes float32,bfloat16 2>&1 | grep -E '^hf_tower' | tee "$log"
    while read -r line; do
        d=$(echo "$line" | sed -n 's/.*dtype=\([a-z0-9]*\).*/\1/p')
        c=$(echo "$line" | sed -n 's/.*case=\([a-z0-9x]*\).*/\1/p')
        m=$(echo "$line" | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')
        [ "$d" = float32 ] && MS["hf fp32|$c"]=$m || MS["hf bf16|$c"]=$m
    done < <(grep -E '^hf_tower dtype=' "$log")
    echo
fi

# ---------------------------------------------------------------------------------------------------------- OpenBLAS
BLAS_SHAPES="qkv attn_out mlp_fc1 mlp_fc2 merger_fc1 merger_fc2 patch_embed"
if want blas; then
    echo "== OpenBLAS cblas_sgemm (bench/openblas_sgemm.c)"
    gcc -O2 -o "$WORK/openblas_sgemm" "$here/openblas_sgemm.c" -lopenblas
    for core in ${BLAS_CORES//,/ }; do
        log="$WORK/openblas_$core.log"
        wait_quiet "openblas $core"
        # OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE may be exported on this machine to steer older OpenBLAS builds:
        # unset both here only, then either let OpenBLAS detect the CPU or name the kernel.
        if [ "$core" = auto ]; then
            env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS="$THREADS" \
                "$WORK/openblas_sgemm" --repeat "$REPEAT" | tee "$log"
        else
            env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE="$core" OPENBLAS_NUM_THREADS="$THREADS" \
                "$WORK/openblas_sgemm" --repeat "$REPEAT" | tee "$log"
        fi
        while read -r sh m _ _ _ g; do GF["blas $core|$sh|$m"]=$g; done < <(grep -E '^[a-z_0-9]+ +[0-9]+ ' "$log")
    done
    if [ -n "$QVL_GEMM" ]; then
        [ "$THREADS" -le 2 ] || echo "(bench_gemm times 1 and 2 threads only: its 2-thread column is used)"
        echo "-- qvl GEMM ($QVL_GEMM)"
        log="$WORK/qvl_gemm.log"
        wait_quiet "qvl gemm"
        BENCH_THREADS=$((THREADS < 2 ? THREADS : 2)) "$QVL_GEMM" 784 3136 | tee "$log"
        col=$((THREADS < 2 ? 6 : 7))
        # bench_gemm names: qkv proj fc1 fc2 merger.fc1 merger.fc2 patch
        while read -r sh m _ _ v1 v2 g1 g2; do
            [ "$v2" = packed ] || continue
            g=$([ "$col" = 6 ] && echo "$g1" || echo "$g2")
            case $sh in proj) sh=attn_out ;; fc1) sh=mlp_fc1 ;; fc2) sh=mlp_fc2 ;; merger.fc1) sh=merger_fc1 ;;
                        merger.fc2) sh=merger_fc2 ;; patch) sh=patch_embed ;; esac
            GF["qvl $v1|$sh|$m"]=$g
        done < <(grep -E ' packed ' "$log" | sed 's/\[[^]]*\]//g')
    fi
    echo
fi

# --------------------------------------------------------------------------------------------------------- llama.cpp
if want llama; then
    LLAMA=$(cd "$LLAMA" && pwd)
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$LLAMA/CMakeCache.txt" 2>/dev/null || true)
    [ -n "$src" ] || src=$(cd "$LLAMA/.." && pwd)
    libdir="$LLAMA/bin"
    [ -e "$libdir/libmtmd.so" ] || die "$libdir/libmtmd.so not found: build the mtmd target of $LLAMA first"
    echo "== llama.cpp mtmd ($src, build $LLAMA)"
    ver=$(cat "$src/PEERS_COMMIT" 2>/dev/null || git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
    echo "commit: $ver${LLAMA_CPU_LIB:+; libggml-cpu.so from $LLAMA_CPU_LIB}"
    g++ -O2 -std=c++17 -I"$src/tools/mtmd" -I"$src/ggml/include" -I"$src/include" "$here/llama_clip_bench.cpp" \
        -L"$libdir" -lmtmd -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$libdir" -o "$WORK/llama_clip_bench"
    tag=$(echo "$MODEL" | md5sum | cut -c1-8)   # mmproj files are cached per model directory
    for lc in ${LLAMA_CASES//,/ }; do
        t=${lc%%:*} fa=${lc#*:}
        case "$t:$fa" in f32:[01] | f16:[01] | bf16:[01]) ;; *) die "--llama-cases: '$lc' is not f32|f16|bf16:0|1" ;; esac
        f="$WORK/mmproj-$tag-$t.gguf"
        if [ ! -s "$f" ]; then
            echo "converting $MODEL -> $f (convert_hf_to_gguf.py --mmproj --outtype $t)"
            PYTHONPATH="$src/gguf-py" "$PY" "$src/convert_hf_to_gguf.py" "$MODEL" --mmproj --outtype "$t" \
                --outfile "$f.tmp" > "$WORK/convert-$t.log" 2>&1 || die "conversion failed: see $WORK/convert-$t.log"
            mv "$f.tmp" "$f"
        fi
        for s in ${LLAMA_SIZES//,/ }; do
            err="$WORK/llama-$t-fa$fa-$s.log"
            wait_quiet "llama $t fa$fa $s"
            line=$(LD_LIBRARY_PATH="${LLAMA_CPU_LIB}${LLAMA_CPU_LIB:+:}${LD_LIBRARY_PATH:-}" \
                "$WORK/llama_clip_bench" "$f" "$s" --fa "$fa" --threads "$THREADS" --repeat "$REPEAT" 2> "$err" |
                grep '^llama_clip') || die "llama_clip_bench failed: see $err"
            echo "mmproj=$t ${line#llama_clip file=* }"
            isa=$(echo "$line" | grep -q 'avx512:1' && echo avx512 || echo avx2)
            MS["llama $isa ${t^^} fa$fa|image$s"]=$(echo "$line" | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')
        done
    done
    echo
fi

# ---------------------------------------------------------------------------------------------------------- summary
set +u   # empty associative arrays read as unset under -u in some bash versions
echo "== summary: time ratio qvl ÷ peer (> 1: qvl slower, < 1: qvl faster); load after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s %-22s %10s %10s %9s\n' case peer "qvl ms" "peer ms" "qvl/peer"
cases=$(for k in "${!MS[@]}"; do echo "${k#*|}"; done | sort -u -V | awk '/^image/ {print; next} {r = r $0 "\n"} END {printf "%s", r}')
peers=$(for k in "${!MS[@]}"; do echo "${k%%|*}"; done | { grep -v '^qvl$' || true; } | sort -u)
for c in $cases; do
    q=${MS["qvl|$c"]:-}
    while read -r p; do
        v=${MS["$p|$c"]:-}
        [ -n "$v" ] || continue
        if [ -n "$q" ]; then r=$(awk -v a="$q" -v b="$v" 'BEGIN { printf "%.2f", a / b }'); else r=n/a; fi
        printf '%-12s %-22s %10s %10s %9s\n' "$c" "$p" "${q:-n/a}" "$v" "$r"
    done <<< "$peers"
done
if [ "${#GF[@]}" -gt 0 ]; then
    echo
    echo "GEMM GFLOP/s, $THREADS threads (OpenBLAS: f32; qvl: f32 A, B pre-packed as f32 or bf16 panels);"
    echo "time ratio qvl ÷ OpenBLAS = OpenBLAS GFLOP/s ÷ qvl GFLOP/s (> 1: qvl slower)"
    blas=$(for k in "${!GF[@]}"; do echo "${k%%|*}"; done | sort -u | { grep '^blas' || true; } | tr '\n' ',')
    qv=$(for k in "${!GF[@]}"; do echo "${k%%|*}"; done | sort -u -r | { grep '^qvl' || true; } | tr '\n' ',')  # qvl f32 first: the ratio column uses it
    printf '%-12s %5s' shape M
    IFS=, read -r -a bl <<< "$blas"; IFS=, read -r -a ql <<< "$qv"
    for b in "${bl[@]}"; do printf ' %14s' "${b#blas }"; done
    for q in "${ql[@]}"; do printf ' %14s' "$q"; done
    [ "${#ql[@]}" -gt 0 ] && for b in "${bl[@]}"; do printf ' %18s' "qvl ${ql[0]#qvl }/${b#blas }"; done
    echo
    for m in 784 3136; do
        for sh in $BLAS_SHAPES; do
            printf '%-12s %5s' "$sh" "$m"
            for b in "${bl[@]}"; do printf ' %14s' "${GF["$b|$sh|$m"]:-n/a}"; done
            for q in "${ql[@]}"; do printf ' %14s' "${GF["$q|$sh|$m"]:-n/a}"; done
            if [ "${#ql[@]}" -gt 0 ]; then
                for b in "${bl[@]}"; do
                    printf ' %18s' "$(awk -v a="${GF["$b|$sh|$m"]:-0}" -v q="${GF["${ql[0]}|$sh|$m"]:-0}" \
                        'BEGIN { if (q > 0) printf "%.2f", a / q; else print "n/a" }')"
                done
            fi
            echo
        done
    done
fi
