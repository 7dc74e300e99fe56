#!/usr/bin/env python3
"""make_video.py — a synthetic H.264 test video for the video benchmarks (bench/video_bench.sh), never committed.

    bench/make_video.py OUT.mp4 [--seconds 60] [--size 1280x720] [--fps 30] [--gop 243]

A moving colour pattern (gradients that drift frame by frame and a bright square that crosses the picture: every
frame differs, as in camera footage, so no frame decodes for free), libx264 at preset veryfast, yuv420p, a
keyframe every --gop frames (243: what the 720p clip of the issue that motivated the benchmark had), the frame
count in the MP4 header. Needs PyAV (bench/requirements.txt) with libx264, which its wheels include.
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
    a = ap.parse_args()
    import av

    w, h = (int(v) for v in a.size.split("x"))
    if w % 2 or h % 2 or w < 16 or h < 16:
        sys.exit("make_video: --size needs even sides of at least 16")
    n = int(round(a.seconds * a.fps))
    with av.open(a.out, "w") as c:
        s = c.add_stream("libx264", rate=a.fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"preset": "veryfast", "crf": "23", "g": str(a.gop), "keyint_min": str(a.gop),
                     "sc_threshold": "0"}
        y, x = np.mgrid[0:h, 0:w].astype(np.int32)
        for i in range(n):
            img = np.empty((h, w, 3), np.uint8)
            img[..., 0] = (x + 3 * i) & 255
            img[..., 1] = (y + 2 * i) & 255
            img[..., 2] = ((x + y) // 4 + 5 * i) & 255
            sq = max(8, h // 6)
            x0 = (7 * i) % max(1, w - sq)
            y0 = (3 * i) % max(1, h - sq)
            img[y0:y0 + sq, x0:x0 + sq] = 255
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)
    print(f"make_video: {a.out}: {n} frames of {w}x{h} at {a.fps} fps, a keyframe every {a.gop}")


if __name__ == "__main__":
    main()
