#!/usr/bin/env bash
# run_peers.sh — qvl side by side with its peers on this CPU: the same checkpoint, the same pixel rows, the same
# thread count, run one after the other. Prints each tool's own lines, then a summary with time ratios
# qvl ÷ peer (> 1: qvl is slower; < 1: qvl is faster). Every timed row also goes to --work/results.tsv (one line a
# tool, precision and case: times, per-phase times for qvl, GFLOP/s, % of the measured peak of the unit used, peak
# RSS, the machine's load) and the machine to --work/meta.tsv; bench/chart_peers.py draws them.
#
#   bench/run_peers.sh --qvl build/qvl --llama /path/to/llama.cpp/build --model DIR [options]
#
# qvl runs once per entry of --qvl-precisions (`qvl bench --precision P --isa S`); the row is named after the
# precision and the kernel set the library chose (e.g. "qvl bf16 (avx512bf16)"). Its GFLOP/s are set against the
# peak of the unit that set runs on: qvl bench's own %peak, against that unit's peak measured around each case (f32
# FMA, VDPBF16PS or TDPBF16PS; a qvl build older than that sets bf16 rows against the f32 peak, and then the
# VDPBF16PS peak of bench/peak_flops.c built -mavx512bf16 or the TDPBF16PS peak of bench/amx_peak.c, measured here
# just before and after the run, is used instead; both are logged, "not available" on a CPU without the unit). The log also says whether the CPU has AMX and which
# oneDNN implementations transformers ran (ONEDNN_VERBOSE=1 on one short 224² run per dtype).
#
# Peers:
#   transformers  bench/hf_tower.py: the vision model class on the CPU, float32 and bfloat16 (bench/requirements.txt)
#   OpenVINO      bench/ov_tower.py: the same transformers model exported per case for its fixed grid with
#                 openvino.convert_model and run by the CPU plugin at its default inference precision (bf16 on a CPU
#                 with AMX or AVX512-BF16), INFERENCE_NUM_THREADS = --threads; rows "OpenVINO bf16". Runs when
#                 openvino imports in --python (pinned in bench/requirements.txt); otherwise a meta line says why. The
#                 export (tens of seconds a case) is not timed; its seconds and the error against transformers
#                 float32 on the first case (bench/ov_tower.py --check) go to meta.tsv.
#   llama.cpp     optional: bench/llama_clip_bench.cpp against an existing llama.cpp build (--llama DIR, or
#                 LLAMA_CPP_BUILD=DIR in the environment; without either, or without DIR/bin/libmtmd.so, the
#                 llama.cpp rows are skipped with a meta line saying why). Its source tree is the build's
#                 CMAKE_HOME_DIRECTORY. It times clip_image_batch_encode (tools/mtmd, projector qwen3vl_merger, which
#                 covers both the Qwen3-VL towers with DeepStack and the Qwen3.5 tower) on the same rows as qvl:
#                 image S = one still-image encode; video FxS = F/2 two-frame encodes (one temporal patch each:
#                 Qwen3-VL attends within a temporal patch, so this is the same work as qvl's one call); batch NxS =
#                 N one-image encodes (its Qwen3-VL graph takes one image or two frames per call). Peak RSS by
#                 /usr/bin/time, per-phase times from one extra profiled run (--llama-profile). The mmproj GGUFs
#                 are made by that tree's own converter, into --work unless already there (or in --llama-mmproj-dir):
#                   PYTHONPATH=$SRC/gguf-py $PY $SRC/convert_hf_to_gguf.py MODEL --mmproj --outtype TYPE \
#                       --outfile OUT.gguf          # TYPE: f32 f16 bf16 q8_0
#   OpenBLAS      bench/openblas_sgemm.c (cblas_sgemm, f32) on the tower's GEMM shapes; with --qvl-gemm, qvl's own
#                 GEMM (bench_gemm from bench/CMakeLists.txt) on the same shapes for the ratio.
# Nothing is installed and nothing of llama.cpp is built: the two small bench programs are compiled into --work.
#
# Options:
#   --threads N        threads for every tool (default 2)
#   --qvl-precisions LIST  qvl runs as PRECISION[:ISA], precision f32|bf16|auto, ISA a `qvl bench --isa` value
#                      (default f32,bf16; e.g. bf16:avx512 forces the AVX512-BF16 set where auto would pick another)
#   --repeat N         timed runs per case after one warm-up (default 3)
#   --sizes LIST       square image sides for qvl, transformers and OpenVINO (default 448,896)
#   --video FxS        video case for qvl, transformers and OpenVINO (default 8x448; 0x0 skips)
#   --batch NxS        batch case for qvl, transformers and OpenVINO (default 8x224; 0x0 skips)
#   --openvino 0|1     the OpenVINO peer (default 1: run it where openvino imports in --python)
#   --openvino-precisions LIST  OpenVINO runs as `bench/ov_tower.py --precision P`, P default (the plugin's own),
#                      bf16 or f32 (default: default)
#   --llama DIR        a llama.cpp build directory with bin/libmtmd.so (also --llama-cpp; default $LLAMA_CPP_BUILD)
#   --llama-sizes LIST image sides for llama.cpp (default: --sizes); its video and batch cases follow --video, --batch
#   --llama-cases LIST llama.cpp runs as MMPROJTYPE:FLASHATTN, types f32 f16 bf16 q8_0, flash attention 1 or 0
#                      (default: every type with flash attention on, what mtmd's "auto" picks on the CPU, then off:
#                      f32:1,f16:1,bf16:1,q8_0:1,f32:0,f16:0,bf16:0,q8_0:0; pick the best at 448² first, then pass
#                      only that one for the large cases)
#   --llama-profile 0|1  the per-phase run of llama.cpp (default 1: one more encode per case, not in the median)
#   --llama-mmproj-dir DIR  use DIR/<model dir name>-TYPE.gguf as the mmproj files (made with the command above)
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
#   --only LIST        run only these of qvl,hf,ov,blas,llama (default all; ov is OpenVINO)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
QVL="" LLAMA="${LLAMA_CPP_BUILD:-}" MODEL="" THREADS=2 REPEAT=3 SIZES=448,896 VIDEO=8x448 BATCH=8x224 LLAMA_SIZES=""
LLAMA_CASES=f32:1,f16:1,bf16:1,q8_0:1,f32:0,f16:0,bf16:0,q8_0:0 LLAMA_PROFILE=1 LLAMA_MMPROJ_DIR="" BLAS_CORES=auto,Haswell,SkylakeX QVL_GEMM="" LLAMA_CPU_LIB="" PY="" WORK="${TMPDIR:-/tmp}/qvl-peers"
ONLY=qvl,hf,ov,blas,llama QUIET_WAIT=0 QVL_PRECS=f32,bf16 OPENVINO=1 OV_PRECS=default

die() { echo "run_peers: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value (see the header of $0)"
    case "$1" in
        --qvl) QVL=$2 ;; --llama | --llama-cpp) LLAMA=$2 ;; --model) MODEL=$2 ;; --threads) THREADS=$2 ;; --repeat) REPEAT=$2 ;;
        --sizes) SIZES=$2 ;; --video) VIDEO=$2 ;; --batch) BATCH=$2 ;; --llama-sizes) LLAMA_SIZES=$2 ;;
        --llama-cases) LLAMA_CASES=$2 ;; --blas-cores) BLAS_CORES=$2 ;; --qvl-gemm) QVL_GEMM=$2 ;; --llama-cpu-lib) LLAMA_CPU_LIB=$2 ;;
        --python) PY=$2 ;; --work) WORK=$2 ;; --only) ONLY=$2 ;; --quiet-wait) QUIET_WAIT=$2 ;;
        --qvl-precisions) QVL_PRECS=$2 ;; --llama-profile) LLAMA_PROFILE=$2 ;; --llama-mmproj-dir) LLAMA_MMPROJ_DIR=$2 ;;
        --openvino) OPENVINO=$2 ;; --openvino-precisions) OV_PRECS=$2 ;;
        *) die "unknown option $1 (see the header of $0)" ;;
    esac
    shift 2
done
idle_pct() { # share of CPU time idle over 2 s, in percent
    local a b
    read -r -a a < /proc/stat; sleep 2; read -r -a b < /proc/stat
    local tot=0 i
    for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
    echo $(( tot > 0 ? 100 * (b[4] - a[4] + b[5] - a[5]) / tot : 0 ))
}
IDLE=- LOAD1=-   # what the last wait_quiet found, for results.tsv
wait_quiet() { # wait_quiet LABEL: up to QUIET_WAIT seconds for an idle machine; logs what it found
    IDLE=- LOAD1=$(cut -d' ' -f1 /proc/loadavg)
    [ "$QUIET_WAIT" -gt 0 ] || return 0
    local t0=$SECONDS p
    while :; do
        p=$(idle_pct)
        if [ "$p" -ge 90 ] || [ $((SECONDS - t0)) -ge "$QUIET_WAIT" ]; then break; fi
    done
    IDLE=$p LOAD1=$(cut -d' ' -f1 /proc/loadavg)
    echo "[$1: machine ${p}% idle after $((SECONDS - t0)) s wait; load $LOAD1]"
}
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
if [ -z "$MODEL" ] || [ ! -f "$MODEL/config.json" ]; then die "--model DIR with config.json is required"; fi
want qvl && { [ -x "$QVL" ] || die "--qvl PATH to the qvl binary is required"; }
want llama && [ -n "$LLAMA" ] && { [ -d "$LLAMA" ] || die "--llama $LLAMA: not a directory"; }
for op in ${OV_PRECS//,/ }; do
    case $op in default | bf16 | f32) ;; *) die "--openvino-precisions: '$op' is not default|bf16|f32" ;; esac
done
[ -n "$LLAMA_SIZES" ] || LLAMA_SIZES=$SIZES
if [ -z "$PY" ]; then
    if [ -x "$root/.venv/bin/python" ]; then PY="$root/.venv/bin/python"; else PY=python3; fi
fi
mkdir -p "$WORK"
MODEL=$(cd "$MODEL" && pwd)

declare -A MS=()    # "row|case" -> median ms (row: "qvl f32 (avx512)", "hf bf16", "OpenVINO bf16", ...)
declare -A GF=()    # "tool|shape|M" -> GFLOP/s
QROWS=()            # the qvl rows in run order (the first one is the base of the ratios)
case_of() { # "image 448²" / "video 8x448²" / "batch 8x224²" -> image448 / video8x448 / batch8x224
    echo "$1$2" | sed 's/²//'
}
TSV="$WORK/results.tsv" META="$WORK/meta.tsv"
printf 'tower\ttool\tprecision\tkernels\tcase\tpatches\tmedian_ms\tgflops\tpct_peak\tpeak_unit\tpeak_gflops\trss_mib\tpatch_ms\tpos_rope_ms\tgemm_ms\tattn_ms\tnorm_ms\tmerger_ms\tidle_pct\tload1\n' > "$TSV"
: > "$META"
meta() { printf '%s\t%s\n' "$1" "$2" >> "$META"; echo "$1: $2"; }
row() { local IFS=$'\t'; echo "$*" >> "$TSV"; }   # one results.tsv line, fields in the header's order
TOWER=$("$PY" -c "import json, sys; c = json.load(open(sys.argv[1])); v = c.get('vision_config', c); \
print('%s depth %s hidden %s' % (c.get('model_type', '?'), v.get('depth', '?'), v.get('hidden_size', '?')))" \
    "$MODEL/config.json" 2>/dev/null || basename "$MODEL")

echo "== machine"
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta cpu "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores online"
meta isa "$(grep -m1 -o -w -E 'avx2|fma|avx512f|avx512_bf16|avx512_fp16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
amx=$(grep -m1 -o -w -E 'amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)
if [ -n "$amx" ]; then meta amx "yes (${amx% })"; else meta amx "no (no amx_bf16 / amx_tile in the CPU flags): AMX rows are not available on this machine"; fi
meta load_before "$(cut -d' ' -f1-3 /proc/loadavg)"
meta threads "$THREADS, repeat: $REPEAT (median after one warm-up)"
meta tower "$TOWER ($MODEL)"
meta qvl "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (work tree modified)')"
echo

# ------------------------------------------------------------------------------------------------------------ peaks
# The bf16 units' peaks, for qvl's bf16 rows (the f32 FMA peak is qvl bench's own). Built into --work here.
PEAK_BF16="" PEAK_AMX=""
if want qvl; then
    if grep -q -w avx512_bf16 /proc/cpuinfo &&
        gcc -O2 -mavx512f -mavx512bf16 -fopenmp -o "$WORK/peak_flops_bf16" "$here/peak_flops.c" 2> "$WORK/peak_build.log"; then
        PEAK_BF16="$WORK/peak_flops_bf16"
    fi
    if gcc -O2 -mamx-tile -mamx-bf16 -pthread -o "$WORK/amx_peak" "$here/amx_peak.c" 2>> "$WORK/peak_build.log"; then
        PEAK_AMX="$WORK/amx_peak"
    fi
fi
peak_of() { # peak_of bf16|amx: GFLOP/s on THREADS threads, wall clock, or "" where the unit is not available
    local out t=$THREADS
    if [ "$1" = bf16 ]; then
        [ -n "$PEAK_BF16" ] || return 0
        [ "$t" -le 2 ] || t=2   # peak_flops times 1 and 2 threads
        out=$(OMP_NUM_THREADS=$t "$PEAK_BF16") || return 0
    else
        [ -n "$PEAK_AMX" ] || return 0
        out=$("$PEAK_AMX" "$THREADS") || return 0
    fi
    echo "$out" | sed -n "s/^threads $t: \([0-9.]*\) GFLOP.*/\1/p"
}
mean2() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "") printf "%.1f", (a + b) / 2; else if (a != "") print a; else print b }'; }
if want qvl; then
    echo "== peaks ($THREADS threads, wall clock; measured again around every qvl bf16 run)"
    p=$(peak_of bf16)
    if [ -n "$p" ]; then meta peak_avx512bf16 "$p GFLOP/s (VDPBF16PS, bench/peak_flops.c -mavx512bf16)"
    else meta peak_avx512bf16 "not available on this machine (no avx512_bf16, or the compiler lacks -mavx512bf16)"; fi
    if [ -n "$PEAK_AMX" ]; then
        amxout=$("$PEAK_AMX" "$THREADS" || true); echo "$amxout"
        p=$(echo "$amxout" | sed -n "s/^threads $THREADS: \([0-9.]*\) GFLOP.*/\1/p")
        if [ -n "$p" ]; then meta peak_amx "$p GFLOP/s (TDPBF16PS, bench/amx_peak.c)"
        else meta peak_amx "not available on this machine ($(echo "$amxout" | head -1))"; fi
    else
        meta peak_amx "not available (the compiler does not build bench/amx_peak.c with -mamx-tile -mamx-bf16)"
    fi
    echo
fi

# ---------------------------------------------------------------------------------------------------------------- qvl
if want qvl; then
    "$QVL" bench --help >/dev/null 2>&1 || die "$QVL has no bench command"
    for qp in ${QVL_PRECS//,/ }; do
        prec=${qp%%:*} isa=auto
        [ "$qp" = "$prec" ] || isa=${qp#*:}
        log="$WORK/qvl-$prec-$isa.log"
        echo "== qvl --precision $prec --isa $isa ($QVL)"
        wait_quiet "qvl $qp"
        pb="" pa=""
        if [ "$prec" != f32 ]; then pb=$(peak_of bf16); pa=$(peak_of amx); fi
        "$QVL" bench --model "$MODEL" --sizes "$SIZES" --video "$VIDEO" --batch "$BATCH" --threads "$THREADS" \
            --repeat "$REPEAT" --precision "$prec" --isa "$isa" | tee "$log"
        kern=$(sed -n 's/^precision: .*(backend \([^)]*\)).*/\1/p' "$log")
        realprec=$(sed -n 's/^precision: \([a-z0-9]*\).*/\1/p' "$log")
        rss=$(sed -n 's/^peak RSS: \([0-9.]*\) MiB.*/\1/p' "$log")
        name="qvl ${realprec:-$prec} (${kern:-?})"
        unit=fma_f32 pk=""
        if [ "${realprec:-$prec}" != f32 ]; then
            if [ "$prec" != f32 ]; then pb=$(mean2 "$pb" "$(peak_of bf16)"); pa=$(mean2 "$pa" "$(peak_of amx)"); fi
            case $kern in
                *amx*) unit=amx_bf16 pk=$pa ;;
                *) unit=avx512_bf16 pk=$pb ;;
            esac
            echo "[$name: % of the ${unit} peak measured around the run: ${pk:-not available} GFLOP/s]"
        fi
        # qvl bench sets a bf16 row against its unit's peak measured around each case itself (its header names
        # the unit) — closer than the run-level mean above when the machine drifts; older builds, the f32 peak
        own=0
        if [ "$unit" = fma_f32 ] || grep -qE '^threads: .*measured bf16 (VDPBF16PS|TDPBF16PS) peak' "$log"; then own=1; fi
        [ "$unit" = fma_f32 ] || [ "$own" = 0 ] || echo "[$name: per case, qvl bench's own % of that peak, measured around each case]"
        QROWS+=("$name")
        while read -r a b np _ t gf pct _ ph po ge at no me; do
            c=$(case_of "$a" "$b")
            MS["$name|$c"]=$t
            if [ "$own" = 1 ]; then
                pct=${pct%\%}
                pk=$(awk -v g="$gf" -v p="$pct" 'BEGIN { if (p > 0) printf "%.1f", 100 * g / p; else print "" }')
            else
                pct=$(awk -v g="$gf" -v p="$pk" 'BEGIN { if (p > 0) printf "%.1f", 100 * g / p; else print "-" }')
            fi
            row "$TOWER" qvl "${realprec:-$prec}" "${kern:--}" "$c" "$np" "$t" "$gf" "${pct:--}" "$unit" "${pk:--}" \
                "${rss:--}" "$ph" "$po" "$ge" "$at" "$no" "$me" "$IDLE" "$LOAD1"
        done < <(grep -E '^(image|video|batch) [0-9x]+² +[0-9]' "$log")
        echo
    done
fi

# ------------------------------------------------------------------------------------------------------ transformers
onednn_summary() { # onednn_summary LOG: "kind impl xN, ..." of the oneDNN primitives a run executed
    local s
    s=$(grep -E '^onednn_verbose,.*,exec,' "$1" |
        awk -F, '{ for (i = 1; i <= NF; i++) if ($i == "exec") { print $(i + 2) "/" $(i + 3); break } }' |
        sort | uniq -c | sort -rn | awk '{ printf "%s%s x%s", sep, $2, $1; sep = ", " }')
    echo "${s:-no oneDNN primitive executed}"
}
if want hf; then
    echo "== transformers (bench/hf_tower.py, $PY)"
    for d in float32 bfloat16; do
        short=$([ "$d" = float32 ] && echo fp32 || echo bf16)
        log="$WORK/hf-$d.log"
        wait_quiet "transformers $d"
        /usr/bin/time -f '%M' -o "$WORK/hf-$d.rss" "$PY" "$here/hf_tower.py" --model "$MODEL" --sizes "$SIZES" \
            --video "$VIDEO" --batch "$BATCH" --threads "$THREADS" --repeat "$REPEAT" --dtypes "$d" 2>&1 |
            grep -E '^hf_tower' | tee "$log"
        rss=$(awk '/^[0-9]+$/ { printf "%.1f", $1 / 1024 }' "$WORK/hf-$d.rss")
        while read -r line; do
            c=$(echo "$line" | sed -n 's/.*case=\([a-z0-9x]*\).*/\1/p')
            np=$(echo "$line" | sed -n 's/.* patches=\([0-9]*\).*/\1/p')
            m=$(echo "$line" | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')
            MS["hf $short|$c"]=$m
            row "$TOWER" transformers "$short" "$(sed -n 's/.*cpu_capability=\([a-zA-Z0-9_]*\).*/\1/p' "$log" | head -1)" \
                "$c" "$np" "$m" - - - - "${rss:--}" - - - - - - "$IDLE" "$LOAD1"
        done < <(grep -E '^hf_tower dtype=' "$log")
        echo "[transformers $d: peak RSS ${rss:-?} MiB]"
    done
    # What oneDNN ran: one short run per dtype (224², one timed encode) with ONEDNN_VERBOSE=1.
    for d in float32 bfloat16; do
        ONEDNN_VERBOSE=1 "$PY" "$here/hf_tower.py" --model "$MODEL" --sizes 224 --video 0x0 --batch 0x0 \
            --threads "$THREADS" --repeat 1 --dtypes "$d" > "$WORK/onednn-$d.log" 2>&1 || true
        meta "onednn_$d" "$(onednn_summary "$WORK/onednn-$d.log") (ONEDNN_VERBOSE=1, one 224² warm-up + encode)"
    done
    echo
fi

# ---------------------------------------------------------------------------------------------------------- OpenVINO
# Optional: runs when --openvino is 1 and openvino imports in --python; otherwise, and when a run fails, a meta line
# says why and the run goes on. Peak RSS is the whole process: transformers' float32 model and the export included.
if want ov && [ "$OPENVINO" != 1 ]; then
    meta openvino "skipped: --openvino $OPENVINO"
    echo
elif want ov && ! ovver=$("$PY" -c 'import openvino; print(openvino.__version__)' 2>&1); then
    meta openvino "skipped: openvino does not import in $PY ($(echo "$ovver" | tail -1); pip install -r bench/requirements.txt)"
    echo
elif want ov; then
    echo "== OpenVINO (bench/ov_tower.py, $PY)"
    meta openvino "$ovver (bench/ov_tower.py: transformers' vision model exported per case for its fixed grid by openvino.convert_model, compiled for the CPU plugin, INFERENCE_NUM_THREADS=$THREADS; time = median of --repeat runs after one warm-up, the export not included)"
    for op in ${OV_PRECS//,/ }; do
        log="$WORK/ov-$op.log"
        wait_quiet "openvino $op"
        if ! /usr/bin/time -f '%M' -o "$WORK/ov-$op.rss" "$PY" "$here/ov_tower.py" --model "$MODEL" --sizes "$SIZES" \
            --video "$VIDEO" --batch "$BATCH" --threads "$THREADS" --repeat "$REPEAT" --precision "$op" --check 2>&1 |
            tee "$WORK/ov-$op.full.log" | grep -E '^ov_tower' | tee "$log"; then
            # e.g. a large grid's export killed for memory: the cases it finished before are still rows, without
            # a peak RSS (the file's is the failed case's)
            meta "openvino_failed_$op" "bench/ov_tower.py --precision $op failed (the cases it finished are kept): $(tail -1 "$WORK/ov-$op.full.log")"
            rm -f "$WORK/ov-$op.rss"
        fi
        rss=""
        [ ! -f "$WORK/ov-$op.rss" ] || rss=$(awk '/^[0-9]+$/ { printf "%.1f", $1 / 1024 }' "$WORK/ov-$op.rss")
        conv=""
        while read -r line; do
            c=$(echo "$line" | sed -n 's/.*case=\([a-z0-9x]*\).*/\1/p')
            d=$(echo "$line" | sed -n 's/^ov_tower dtype=\([a-z0-9]*\).*/\1/p')
            np=$(echo "$line" | sed -n 's/.* patches=\([0-9]*\).*/\1/p')
            m=$(echo "$line" | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')
            k=$(sed -n "s/^ov_tower: case=$c .* kernels=\([^ ]*\).*/\1/p" "$log" | head -1)
            conv="$conv${conv:+, }$c $(echo "$line" | sed -n 's/.*convert_s=\([0-9.]*\).*/\1/p') s"
            MS["OpenVINO $d|$c"]=$m
            row "$TOWER" OpenVINO "$d" "${k:--}" "$c" "$np" "$m" - - - - "${rss:--}" - - - - - - "$IDLE" "$LOAD1"
        done < <(grep -E '^ov_tower dtype=' "$log")
        meta "openvino_$op" "export per case (not timed): ${conv:-none}; peak RSS ${rss:-?} MiB (with the float32 model and the export)"
        chk=$(sed -n 's/^ov_tower check //p' "$log")
        [ -z "$chk" ] || meta "openvino_${op}_check" "$chk"
    done
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
# Optional: runs only when a llama.cpp build is given (--llama DIR or LLAMA_CPP_BUILD=DIR); otherwise, and when
# that build lacks libmtmd or the bench does not compile against it, a meta line says why and the run goes on.
llama_build_bench() { # sets src (the llama.cpp source tree) and libdir; compiles bench/llama_clip_bench.cpp
    LLAMA=$(cd "$LLAMA" && pwd)
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$LLAMA/CMakeCache.txt" 2>/dev/null || true)
    [ -n "$src" ] || src=$(cd "$LLAMA/.." && pwd)
    libdir="$LLAMA/bin"
    g++ -O2 -std=c++17 -I"$src/tools/mtmd" -I"$src/ggml/include" -I"$src/include" "$here/llama_clip_bench.cpp" \
        -L"$libdir" -lmtmd -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$libdir" -o "$WORK/llama_clip_bench" \
        2> "$WORK/llama_clip_bench.build.log"
}
llama_skip() { meta llama.cpp "skipped: $*"; echo; }
if want llama && [ -z "$LLAMA" ]; then
    llama_skip "no llama.cpp build given (--llama DIR or LLAMA_CPP_BUILD=DIR)"
elif want llama && [ ! -e "$LLAMA/bin/libmtmd.so" ]; then
    llama_skip "$LLAMA/bin/libmtmd.so not found (build the mtmd target of that llama.cpp build)"
elif want llama && ! llama_build_bench; then
    llama_skip "bench/llama_clip_bench.cpp does not build against $LLAMA (see $WORK/llama_clip_bench.build.log)"
elif want llama; then
    echo "== llama.cpp mtmd ($src, build $LLAMA)"
    ver=$(cat "$src/PEERS_COMMIT" 2>/dev/null || git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
    meta llama.cpp "$ver ($src, build $LLAMA${LLAMA_CPU_LIB:+; libggml-cpu.so from $LLAMA_CPU_LIB})"
    meta llama.cpp_method "bench/llama_clip_bench.cpp: clip_image_batch_encode on the same rows; image = 1 still-image encode, video FxS = F/2 two-frame encodes (one temporal patch each), batch NxS = N encodes; time = median of --repeat runs after one warm-up; peak RSS by /usr/bin/time; phases from one extra run with every ggml node computed alone (profile=$LLAMA_PROFILE)"
    # what the tower's output is in qvl: tokens x out_hidden * (1 + DeepStack mergers)
    want_embd=$("$PY" -c "import json, sys; c = json.load(open(sys.argv[1])); v = c.get('vision_config', c); \
print(v['out_hidden_size'] * (1 + len(v.get('deepstack_visual_indexes', []))))" "$MODEL/config.json" 2>/dev/null || echo '?')
    tag=$(echo "$MODEL" | md5sum | cut -c1-8)   # mmproj files are cached per model directory
    lcases=()
    for s in ${LLAMA_SIZES//,/ }; do lcases+=("image$s 1 1 $s"); done
    vf=${VIDEO%x*} vs=${VIDEO#*x} bn=${BATCH%x*} bs=${BATCH#*x}
    if [ "$vf" -ge 2 ] && [ $((vf % 2)) -eq 0 ]; then lcases+=("video${VIDEO} $((vf / 2)) 2 $vs")
    elif [ "$vf" -gt 0 ]; then meta llama.cpp_video "video $VIDEO not run: llama.cpp encodes two frames a call"; fi
    [ "$bn" -ge 1 ] && lcases+=("batch${BATCH} $bn 1 $bs")
    for lc in ${LLAMA_CASES//,/ }; do
        t=${lc%%:*} fa=${lc#*:}
        case "$t:$fa" in f32:[01] | f16:[01] | bf16:[01] | q8_0:[01]) ;; *) die "--llama-cases: '$lc' is not f32|f16|bf16|q8_0:0|1" ;; esac
        f="$WORK/mmproj-$tag-$t.gguf"
        [ -z "$LLAMA_MMPROJ_DIR" ] || f="$LLAMA_MMPROJ_DIR/$(basename "$MODEL")-$t.gguf"
        if [ ! -s "$f" ]; then
            echo "converting $MODEL -> $f (convert_hf_to_gguf.py --mmproj --outtype $t)"
            PYTHONPATH="$src/gguf-py" "$PY" "$src/convert_hf_to_gguf.py" "$MODEL" --mmproj --outtype "$t" \
                --outfile "$f.tmp" > "$WORK/convert-$t.log" 2>&1 || {
                meta "llama.cpp_mmproj_$t" "skipped: the conversion failed (see $WORK/convert-$t.log: $(tail -1 "$WORK/convert-$t.log"))"
                continue
            }
            mv "$f.tmp" "$f"
        fi
        meta "llama.cpp_mmproj_$t" "$f ($(du -m "$f" | cut -f1) MiB)"
        for lcase in "${lcases[@]}"; do
            read -r c calls frames s <<< "$lcase"
            err="$WORK/llama-$t-fa$fa-$c.log"
            wait_quiet "llama $t fa$fa $c"
            if ! LD_LIBRARY_PATH="${LLAMA_CPU_LIB}${LLAMA_CPU_LIB:+:}${LD_LIBRARY_PATH:-}" /usr/bin/time -f '%M' \
                -o "$WORK/llama.rss" "$WORK/llama_clip_bench" "$f" "$s" --fa "$fa" --threads "$THREADS" \
                --repeat "$REPEAT" --calls "$calls" --frames "$frames" --profile "$LLAMA_PROFILE" > "$err.out" 2> "$err" ||
                ! line=$(grep '^llama_clip' "$err.out"); then
                echo "llama_clip_bench failed on $t fa$fa $c: see $err"
                meta "llama.cpp_failed_${t}_fa${fa}_$c" "llama_clip_bench failed: $(tail -1 "$err")"
                continue
            fi
            rss=$(awk '/^[0-9]+$/ { printf "%.1f", $1 / 1024 }' "$WORK/llama.rss")
            echo "mmproj=$t case=$c ${line#llama_clip file=* } rss_mib=${rss:-?}"
            isa=$(echo "$line" | grep -q 'avx512:1' && echo avx512 || echo avx2)
            m=$(echo "$line" | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')
            np=$(echo "$line" | sed -n 's/.* patches=\([0-9]*\).*/\1/p')
            embd=$(echo "$line" | sed -n 's/.* out=[0-9]*x\([0-9]*\).*/\1/p')
            [ "$embd" = "$want_embd" ] ||
                meta "llama.cpp_shape_$t" "out width $embd, qvl's is $want_embd (out_hidden x (1 + DeepStack mergers))"
            ph() { local v; v=$(echo "$line" | sed -n "s/.*phases_ms=.*[:,]$1:\([0-9.]*\).*/\1/p"); echo "${v:--}"; }
            MS["llama $isa ${t^^} fa$fa|$c"]=$m
            row "$TOWER" llama.cpp "$t" "$isa fa$fa" "$c" "${np:--}" "$m" - - - - "${rss:--}" "$(ph patch)" \
                "$(ph pos_rope)" "$(ph gemm)" "$(ph attn)" "$(ph norm)" "$(ph merger)" "$IDLE" "$LOAD1"
        done
    done
    echo
fi

# ---------------------------------------------------------------------------------------------------------- summary
set +u   # empty associative arrays read as unset under -u in some bash versions
echo "== summary: time ratio qvl ÷ peer (> 1: qvl slower, < 1: qvl faster); load after: $(cut -d' ' -f1-3 /proc/loadavg)"
meta load_after "$(cut -d' ' -f1-3 /proc/loadavg)"
echo "(rows and per-phase times: $TSV; the machine: $META; chart: bench/chart_peers.py $TSV)"
printf '%-12s %-24s %-24s %10s %10s %9s\n' case qvl peer "qvl ms" "peer ms" "qvl/peer"
cases=$(for k in "${!MS[@]}"; do echo "${k#*|}"; done | sort -u -V | awk '/^image/ {print; next} {r = r $0 "\n"} END {printf "%s", r}')
peers=$(for k in "${!MS[@]}"; do echo "${k%%|*}"; done | { grep -v '^qvl ' || true; } | sort -u)
for c in $cases; do
    for qi in "${!QROWS[@]}"; do
        qn=${QROWS[$qi]}
        q=${MS["$qn|$c"]:-}
        [ -n "$q" ] || continue
        # against the other qvl rows run before it (qvl bf16 ÷ qvl f32), then against every peer
        others=$(for j in "${!QROWS[@]}"; do [ "$j" -lt "$qi" ] && echo "${QROWS[$j]}"; done; echo "$peers")
        while read -r p; do
            [ -n "$p" ] || continue
            v=${MS["$p|$c"]:-}
            [ -n "$v" ] || continue
            r=$(awk -v a="$q" -v b="$v" 'BEGIN { printf "%.2f", a / b }')
            printf '%-12s %-24s %-24s %10s %10s %9s\n' "$c" "$qn" "$p" "$q" "$v" "$r"
        done <<< "$others"
    done
    [ "${#QROWS[@]}" -gt 0 ] || while read -r p; do
        [ -n "$p" ] && [ -n "${MS["$p|$c"]:-}" ] && printf '%-12s %-24s %-24s %10s %10s %9s\n' "$c" - "$p" - "${MS["$p|$c"]}" -
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
