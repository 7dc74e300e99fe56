#!/usr/bin/env python3
"""make_video.py — a synthetic H.264 test video for the video benchmarks (bench/video_bench.sh), never committed.

    bench/make_video.py OUT.mp4 [--seconds 60] [--size 1280x720] [--fps 30] [--gop 243] [--loop N]

A moving colour pattern (gradients that drift frame by frame and a bright square that crosses the picture: every
frame differs, as in camera footage, so no frame decodes for free), libx264 at preset veryfast, yuv420p, a
keyframe every --gop frames (243: what the 720p clip of the issue that motivated the benchmark had), the frame
count in the MP4 header. With --loop N, the --seconds encoded once are written N times over (the packets copied with
their timestamps moved on, no re-encoding; the encoder is forced to start each copy on an IDR frame, a closed GOP):
an hour of 1080p at 30 fps in minutes instead of hours, every frame still decoded in full. Needs PyAV
(bench/requirements.txt) with libx264, which its wheels include.
"""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--size", default="1280x720", help="WIDTHxHEIGHT, both even")
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--gop", type=int, default=243, help="frames between keyframes")
    ap.add_argument("--loop", type=int, default=1, help="write the encoded --seconds this many times over")
    a = ap.parse_args()
    import av

    w, h = (int(v) for v in a.size.split("x"))
    if w % 2 or h % 2 or w < 16 or h < 16:
        sys.exit("make_video: --size needs even sides of at least 16")
    n = int(round(a.seconds * a.fps))
    if a.loop > 1:
        return loop(a, av, w, h, n)
    with av.open(a.out, "w") as c:
        encode(c, a, av, w, h, n, {})
    print(f"make_video: {a.out}: {n} frames of {w}x{h} at {a.fps} fps, a keyframe every {a.gop}")


def encode(c, a, av, w, h, n, extra):
    """n frames of the moving pattern into container c: libx264 veryfast, a keyframe every a.gop (+ extra options)."""
    s = c.add_stream("libx264", rate=a.fps)
    s.width, s.height, s.pix_fmt = w, h, "yuv420p"
    s.options = {"preset": "veryfast", "crf": "23", "g": str(a.gop), "keyint_min": str(a.gop), "sc_threshold": "0",
                 **extra}
    y, x = np.mgrid[0:h, 0:w].astype(np.int32)
    for i in range(n):
        img = np.empty((h, w, 3), np.uint8)
        img[..., 0] = (x + 3 * i) & 255
        img[..., 1] = (y + 2 * i) & 255
        img[..., 2] = ((x + y) // 4 + 5 * i) & 255
        sq = max(8, h // 6)
        x0, y0 = (7 * i) % max(1, w - sq), (3 * i) % max(1, h - sq)
        img[y0:y0 + sq, x0:x0 + sq] = 255
        for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
            c.mux(p)
    for p in s.encode(None):
        c.mux(p)


def loop(a, av, w, h, n):
    """Encode n frames once (closed GOPs), then mux their packets a.loop times, timestamps moved on each time."""
    import io
    seg = io.BytesIO()
    with av.open(seg, "w", format="mp4") as c:
        encode(c, a, av, w, h, n, {"x264-params": "open-gop=0"})
    seg.seek(0)
    with av.open(seg) as src, av.open(a.out, "w") as dst:
        ins = src.streams.video[0]
        outs = dst.add_stream_from_template(ins)
        packets = [p for p in src.demux(ins) if p.size]
        span = max(p.pts for p in packets) - min(p.pts for p in packets) + packets[0].duration
        for k in range(a.loop):
            for p in packets:
                q = av.Packet(bytes(p))
                q.pts, q.dts, q.duration = p.pts + k * span, p.dts + k * span, p.duration
                q.is_keyframe = p.is_keyframe
                q.time_base = p.time_base
                q.stream = outs
                dst.mux(q)
    print(f"make_video: {a.out}: {n * a.loop} frames of {w}x{h} at {a.fps} fps ({n} encoded once, written "
          f"{a.loop} times), a keyframe every {a.gop} and at each copy's start")


if __name__ == "__main__":
    main()
