#!/usr/bin/env bash
# video_bench.sh — long videos side by side: qvl's preprocessing (`qvl encode --preprocess-only`: decode, sample,
# resize, patchify) against transformers' (bench/hf_video.py: PyAV through transformers' load_video, then
# Qwen3VLVideoProcessor), on synthetic H.264 videos made by bench/make_video.py (never committed). Per video and
# tool, --repeat runs, the two tools alternating (which goes first alternates too): wall time, peak RSS, CPU
# seconds (user + sys) and each tool's own split (qvl: decode / preprocess ms; transformers: import / decode /
# processor s), and the grid, which must be the same.
#
#   bench/video_bench.sh [--videos LIST] [--repeat N] [--num-frames N] [--qvl BIN] [--python PY] [--work DIR]
#
#   --videos LIST   SECONDSxWIDTHxHEIGHT[@FPS] entries, comma-separated (default 60x1280x720,300x1280x720;
#                   FPS 30 unless given)
#   --repeat N      runs per tool and video (default 2)
#   --num-frames N  sample exactly N frames instead of fps 2 (both tools)
#   --qvl BIN       the qvl CLI (default build/qvl)
#   --python PY     a Python with bench/requirements.txt (default .venv/bin/python)
#   --work DIR      where the videos and logs go (default /tmp/qvl-video-bench; videos are kept and reused)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
videos=60x1280x720,300x1280x720 repeat=2 nf="" qvl=$root/build/qvl py=$root/.venv/bin/python work=/tmp/qvl-video-bench
while [ $# -gt 0 ]; do
    case $1 in
        --videos) videos=$2 ;; --repeat) repeat=$2 ;; --num-frames) nf=$2 ;; --qvl) qvl=$2 ;; --python) py=$2 ;;
        --work) work=$2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "video_bench: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
[ -x "$qvl" ] || { echo "video_bench: no qvl at $qvl (make build)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "video_bench: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
mkdir -p "$work"
echo "video_bench: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $("$qvl" --version 2>&1 | head -1)"
qvl_args=(encode --preprocess-only) hf_args=()
if [ -n "$nf" ]; then qvl_args+=(--num-frames "$nf"); hf_args+=(--num-frames "$nf"); fi

one() { # tool video log: one timed run; prints "wall peak_kib cpu_s | the tool's own line"
    local tool=$1 v=$2 log=$3
    if [ "$tool" = qvl ]; then
        /usr/bin/time -f "TIME %e %M %U %S" "$qvl" "${qvl_args[@]}" "$v" -o "$work/rows.safetensors" >"$log" 2>&1
        rm -f "$work/rows.safetensors"
    else
        /usr/bin/time -f "TIME %e %M %U %S" "$py" "$root/bench/hf_video.py" "${hf_args[@]}" "$v" >"$log" 2>&1
    fi
    local t own
    if grep -q '^Command exited with non-zero status' "$log"; then
        echo "video_bench: $tool failed on $v; its output:" >&2
        tail -5 "$log" >&2
        exit 1
    fi
    t=$(grep '^TIME ' "$log" | tail -1)
    if [ "$tool" = qvl ]; then own=$(grep '^item 0:' "$log" | sed 's/^item 0: [^(]*//'); else own=$(grep '^hf_video:' "$log" | sed 's/^hf_video: //'); fi
    awk -v t="$t" -v own="$own" 'BEGIN { split(t, a, " "); printf "%7.2f s %7.0f MiB %6.2f CPU-s | %s\n", a[2], a[3] / 1024, a[4] + a[5], own }'
}

IFS=, read -r -a list <<<"$videos"
for spec in "${list[@]}"; do
    fps=30
    case $spec in *@*) fps=${spec#*@}; spec=${spec%@*} ;; esac
    IFS=x read -r secs w h <<<"$spec"
    v=$work/v${secs}s_${w}x${h}_${fps}fps.mp4
    [ -s "$v" ] || "$py" "$root/bench/make_video.py" "$v" --seconds "$secs" --size "${w}x${h}" --fps "$fps" >&2
    echo "== ${secs} s of ${w}x${h} at ${fps} fps ($(du -mL "$v" | cut -f1) MB)${nf:+, $nf frames}"
    for r in $(seq 1 "$repeat"); do
        order=(qvl transformers)
        [ $((r % 2)) -eq 0 ] && order=(transformers qvl)
        for tool in "${order[@]}"; do
            line=$(one "$tool" "$v" "$work/$tool.log") || exit 1
            printf '  %-12s run %d: %s\n' "$tool" "$r" "$line"
        done
    done
done
