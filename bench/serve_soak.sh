#!/usr/bin/env bash
# serve_soak.sh — qvl serve under steady load for SECONDS (default 300): 4 clients, rounds of 1000 distinct 224²
# images, the server's RSS printed after each round (docs/PERFORMANCE.md). With a cache budget smaller than one
# round's entries, every round evicts (least recently used) as it writes, so the cache's GC runs throughout.
# Usage: bench/serve_soak.sh BUILD_DIR MODEL_DIR [SECONDS] [CACHE_SIZE]
set -euo pipefail
B=$(cd "$1" && pwd); M=$2; DUR=${3:-300}; CS=${4:-64M}
T=$(mktemp -d "${TMPDIR:-/tmp}/qvl-soak-XXXXXX")
trap 'kill $SP 2>/dev/null || true; rm -rf "$T"' EXIT
cc -O2 -pthread "$(dirname "$0")/serve_load.c" -o "$T/serve_load"
"$B/qvl" serve --model "$M" --port 0 --port-file "$T/port" --cache "$T/cache" --cache-size "$CS" 2>"$T/log" &
SP=$!
for _ in $(seq 600); do [[ -s $T/port ]] && break; sleep 0.1; done
P=$(cat "$T/port")
sleep 1
end=$((SECONDS + DUR)); round=0
while ((SECONDS < end)); do
  round=$((round + 1))
  echo "t=$SECONDS s round $round: $("$T/serve_load" --port "$P" --clients 4 --requests 1000 --size 224 --pid "$SP")"
done
kill -TERM $SP; wait $SP && echo "server exit 0"
du -sh "$T/cache"
