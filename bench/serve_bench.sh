#!/usr/bin/env bash
# serve_bench.sh — qvl serve's throughput and latency on loopback against `qvl encode` on the same images
# (docs/PERFORMANCE.md, "qvl serve"). Usage: bench/serve_bench.sh BUILD_DIR MODEL_DIR [SIZES] [CLIENTS] [REQUESTS]
# SIZES default "224 448", CLIENTS "1 4 16", REQUESTS 32; SERVE_ARGS: extra qvl serve options (--timeout-ms ...);
# HIT_FILE: an image file whose cache hits are timed too (uploading it instead of a noise BMP).
# Starts and stops its own server on a free port.
set -euo pipefail
B=$(cd "$1" && pwd); M=$2; SIZES=${3:-"224 448"}; CLIENTS=${4:-"1 4 16"}; N=${5:-32}
QVL=$B/qvl
T=$(mktemp -d "${TMPDIR:-/tmp}/qvl-serve-bench-XXXXXX")
trap 'kill $SP 2>/dev/null || true; rm -rf "$T"' EXIT
cc -O2 -pthread "$(dirname "$0")/serve_load.c" -o "$T/serve_load"
start() { # start ARGS...: a server on a free port, $P and $SP set
  rm -f "$T/port"
  # shellcheck disable=SC2086
  "$QVL" serve --model "$M" --port 0 --port-file "$T/port" ${SERVE_ARGS:-} "$@" 2>>"$T/log" &
  SP=$!
  for _ in $(seq 600); do [[ -s $T/port ]] && break; sleep 0.1; done
  P=$(cat "$T/port")
  for _ in $(seq 6000); do # ready once the weights are loaded and warmed
    { exec 3<>"/dev/tcp/127.0.0.1/$P" && printf 'GET /health/ready HTTP/1.0\r\n\r\n' >&3 && head -1 <&3 | grep -q ' 200 ' &&
      exec 3>&-; } 2>/dev/null && break
    sleep 0.1
  done
}
echo "# $(date -u +%FT%TZ) model $M, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for s in $SIZES; do
  mkdir -p "$T/img$s"
  "$T/serve_load" --write-dir "$T/img$s" --requests "$N" --size "$s"
  t0=$(date +%s.%N)
  "$QVL" encode -q --model "$M" -o "$T/ref.safetensors" "$T/img$s"/*.bmp
  t1=$(date +%s.%N)
  echo "qvl encode, $N images of ${s}²: $(awk "BEGIN{printf \"%.2f\", $N / ($t1 - $t0)}") img/s (one process, one by one)"
  start
  for c in $CLIENTS; do "$T/serve_load" --port "$P" --clients "$c" --requests "$N" --size "$s" --pid "$SP"; done
  kill -TERM $SP; wait $SP || true
  start --cache "$T/cache"
  "$T/serve_load" --port "$P" --clients 1 --requests 1 --size "$s" --same >/dev/null
  echo -n "cache hits: "; "$T/serve_load" --port "$P" --clients 1 --requests 200 --size "$s" --same --pid "$SP"
  if [[ -n ${HIT_FILE:-} ]]; then # the same hits with a real photograph as the upload (e.g. a 448² JPEG)
    "$T/serve_load" --port "$P" --clients 1 --requests 1 --file "$HIT_FILE" >/dev/null
    echo -n "cache hits, $HIT_FILE: "; "$T/serve_load" --port "$P" --clients 1 --requests 200 --file "$HIT_FILE" --pid "$SP"
  fi
  kill -TERM $SP; wait $SP || true
  rm -rf "$T/cache"
done
