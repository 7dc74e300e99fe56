#!/usr/bin/env bash
# serve_video.sh — one long video through `qvl serve`, two builds side by side (docs/PERFORMANCE.md, "qvl serve and
# long videos"). Usage: bench/serve_video.sh BUILD_A BUILD_B MODEL_DIR VIDEO [ROUNDS]
# Each round starts a server of A, then of B (no cache), POSTs VIDEO as a raw body and reads the answer, while a small
# image is sent IMAGE_AT seconds (default 2) after the video began (its latency: how long a request waits behind the
# video). Per run: the
# answer's first byte and whole time, the image's latency, the server's peak RSS (VmHWM) and the answer's SHA-256
# (the same in every run: the bits do not depend on the build). ROUNDS default 2; SERVE_ARGS: extra options.
set -euo pipefail
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); M=$3; V=$4; R=${5:-2}
T=$(mktemp -d "${TMPDIR:-/tmp}/qvl-serve-video-XXXXXX")
SP=
trap '[[ -n $SP ]] && kill $SP 2>/dev/null; rm -rf "$T"' EXIT
bytes=$(stat -c %s "$V")
limit=$((bytes + (1 << 20)))
python3 - "$T/img.bmp" <<'EOF'
import struct, sys, random
w = h = 224
random.seed(1)
row = bytes(random.getrandbits(8) for _ in range(w * 3))
data = row * h
hdr = b"BM" + struct.pack("<IHHI", 54 + len(data), 0, 0, 54) + struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(data), 0, 0, 0, 0)
open(sys.argv[1], "wb").write(hdr + data)
EOF
start() { # start QVL: a server on a free port, $P and $SP set
  rm -f "$T/port"
  # shellcheck disable=SC2086
  "$1" serve --model "$M" --port 0 --port-file "$T/port" --max-body "$limit" --limit "max_input_bytes=$limit" \
    --timeout-ms 3600000 ${SERVE_ARGS:-} 2>>"$T/log" &
  SP=$!
  for _ in $(seq 600); do [[ -s $T/port ]] && break; sleep 0.1; done
  P=$(cat "$T/port")
  for _ in $(seq 6000); do
    curl -sf "http://127.0.0.1:$P/health/ready" >/dev/null 2>&1 && break
    sleep 0.1
  done
}
run() { # run NAME BUILD
  start "$2/qvl"
  python3 - "$P" "$V" "$T/answer" >"$T/video.t" <<'EOF' &
import http.client, sys, time
port, video, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
body = open(video, "rb").read()
t0 = time.monotonic()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=7200)
c.request("POST", "/v1/encode", body=body, headers={"Content-Type": "video/mp4"})
r = c.getresponse()
first = None
with open(out, "wb") as f:
    while True:
        b = r.read1(1 << 20)
        if not b:
            break
        if first is None:
            first = time.monotonic() - t0
        f.write(b)
print(f"{first or 0:.3f} {time.monotonic() - t0:.3f} {r.status}")
EOF
  local cp=$!
  sleep "${IMAGE_AT:-2}"
  local img
  img=$(curl -s -o /dev/null -H 'Content-Type: image/bmp' --data-binary @"$T/img.bmp" -w '%{time_total}' \
    "http://127.0.0.1:$P/v1/encode?dtype=f16")
  wait $cp
  local hwm
  hwm=$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$SP/status")
  kill -TERM $SP; wait $SP || true; SP=
  read -r first total code <"$T/video.t"
  printf '%s: HTTP %s, first data byte %.2f s, whole %.2f s, an image sent %s s in answered in %.2f s, peak RSS %s MiB, %s\n' \
    "$1" "$code" "$first" "$total" "${IMAGE_AT:-2}" "$img" "$hwm" "$(sha256sum "$T/answer" | cut -c1-16)"
}
echo "# $(date -u +%FT%TZ) $(basename "$V") ($bytes bytes), model $M, $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p')"
echo "# A = $A ($(git -C "$A/.." rev-parse --short HEAD 2>/dev/null || echo ?)), B = $B ($(git -C "$B/.." rev-parse --short HEAD 2>/dev/null || echo ?))"
for ((i = 0; i < R; i++)); do
  run A "$A"
  run B "$B"
done
