#!/usr/bin/env bash
# serve_ab.sh — two builds of qvl serve measured alternately in one run (A, B, A, B, ...), so that a shared
# machine's load falls on both alike (docs/PERFORMANCE.md, "qvl serve").
# Usage: bench/serve_ab.sh BUILD_A BUILD_B MODEL_DIR [SIZE] [ROUNDS] [MODE]
#   MODE hits (default): one client, the same SIZE² image 200 times after one store (cache hits): p50 / p99;
#   MODE load: `qvl encode` on REQUESTS distinct images, then the server at saturation with CLIENTS clients.
# SIZE 448, ROUNDS 3; CLIENTS (load) "4 16", REQUESTS (load) 64; SERVE_ARGS: extra qvl serve options.
set -euo pipefail
A=$(cd "$1" && pwd); Bd=$(cd "$2" && pwd); M=$3; S=${4:-448}; R=${5:-3}; MODE=${6:-hits}
CLIENTS=${CLIENTS:-"4 16"}; N=${REQUESTS:-64}
T=$(mktemp -d "${TMPDIR:-/tmp}/qvl-serve-ab-XXXXXX")
SP=
trap '[[ -n $SP ]] && kill $SP 2>/dev/null; rm -rf "$T"' EXIT
cc -O2 -pthread "$(dirname "$0")/serve_load.c" -o "$T/serve_load"
start() { # start QVL ARGS...: a server on a free port, $P and $SP set
  local q=$1; shift
  rm -f "$T/port"
  # shellcheck disable=SC2086
  "$q" serve --model "$M" --port 0 --port-file "$T/port" ${SERVE_ARGS:-} "$@" 2>>"$T/log" &
  SP=$!
  for _ in $(seq 600); do [[ -s $T/port ]] && break; sleep 0.1; done
  P=$(cat "$T/port")
  for _ in $(seq 6000); do
    { exec 3<>"/dev/tcp/127.0.0.1/$P" && printf 'GET /health/ready HTTP/1.0\r\n\r\n' >&3 && head -1 <&3 | grep -q ' 200 ' &&
      exec 3>&-; } 2>/dev/null && break
    sleep 0.1
  done
}
stop() { kill -TERM "$SP"; wait "$SP" || true; SP=; }
echo "# $(date -u +%FT%TZ) model $M, ${S}², $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); A=$A B=$Bd"
if [[ $MODE == load ]]; then
  mkdir -p "$T/img"
  "$T/serve_load" --write-dir "$T/img" --requests "$N" --size "$S"
fi
for r in $(seq "$R"); do
  for side in A B; do
    d=$A; [[ $side == B ]] && d=$Bd
    if [[ $MODE == hits ]]; then
      rm -rf "$T/cache"
      start "$d/qvl" --cache "$T/cache"
      "$T/serve_load" --port "$P" --clients 1 --requests 1 --size "$S" --same >/dev/null
      echo -n "round $r $side cache hits: "; "$T/serve_load" --port "$P" --clients 1 --requests 200 --size "$S" --same
      stop
    else
      t0=$(date +%s.%N)
      "$d/qvl" encode -q --model "$M" -o "$T/ref.safetensors" "$T/img"/*.bmp
      t1=$(date +%s.%N)
      echo "round $r $side qvl encode: $(awk "BEGIN{printf \"%.2f\", $N / ($t1 - $t0)}") img/s"
      start "$d/qvl"
      for c in $CLIENTS; do
        echo -n "round $r $side server, $c clients: "; "$T/serve_load" --port "$P" --clients "$c" --requests "$N" --size "$S"
      done
      stop
    fi
  done
  echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
done
