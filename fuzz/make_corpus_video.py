#!/usr/bin/env python3
"""make_corpus_video.py — write the seed corpus of fuzz_video (fuzz/corpus/video/) and the extra video inputs of the
tests: an AVI and an MPEG-TS clip (tests/data/video/), a container with a codec qvl does not accept
(tests/data/bad/). Needs PyAV (the pinned oracle venv: PYTHON=/work/venv/bin/python, or .venv/bin/python); the
encoders' output may differ between FFmpeg builds, so rerun only to replace these files on purpose.

Seeds: every clip of tests/data/video/ and the two made here, whole and cut short (its first 512 bytes, half of it,
all but its last 64 bytes), a still PNG, and the inputs qvl must refuse before FFmpeg reads them: HLS playlists
(media and master), an ffconcat script, an SDP description, text and an empty file."""
import glob
import io
import os

import av
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "corpus", "video")


def frames(n, w, h):
    for i in range(n):
        y, x = np.mgrid[0:h, 0:w]
        rgb = np.stack([(x * 8 + i * 20) % 256, (y * 10 + i * 5) % 256, (x * y + i) % 256], -1).astype(np.uint8)
        yield av.VideoFrame.from_ndarray(rgb, format="rgb24")


def clip(fmt, codec, n=8, w=32, h=24, pix="yuv420p", rate=10):
    buf = io.BytesIO()
    c = av.open(buf, "w", format=fmt)
    s = c.add_stream(codec, rate=rate)
    s.width, s.height, s.pix_fmt = w, h, pix
    for f in frames(n, w, h):
        for p in s.encode(f):
            c.mux(p)
    for p in s.encode():
        c.mux(p)
    c.close()
    return buf.getvalue()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    print(f"{os.path.relpath(path, ROOT)}: {len(data)} bytes")


def main():
    data = {
        os.path.join(ROOT, "tests", "data", "video", "video_mpeg4.avi"): clip("avi", "mpeg4"),
        os.path.join(ROOT, "tests", "data", "video", "video_mpeg2.ts"): clip("mpegts", "mpeg2video"),
        os.path.join(ROOT, "tests", "data", "bad", "video_codec_huffyuv.avi"): clip("avi", "huffyuv", 2, 16, 16,
                                                                                      "yuv422p"),
    }
    for path, b in data.items():
        write(path, b)
    os.makedirs(OUT, exist_ok=True)
    clips = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "video", "video_*")))
    for path in clips:
        b = open(path, "rb").read()
        name = os.path.basename(path).replace(".", "_")
        write(os.path.join(OUT, "clip_" + name), b)
        write(os.path.join(OUT, "cut512_" + name), b[:512])
        write(os.path.join(OUT, "cuthalf_" + name), b[: len(b) // 2])
        write(os.path.join(OUT, "cutend_" + name), b[:-64])
    write(os.path.join(OUT, "still_png"), open(os.path.join(ROOT, "tests", "data", "video", "frames",
                                                             "video_frame_0.png"), "rb").read())
    write(os.path.join(OUT, "refuse_hls.m3u8"), b"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n"
          b"#EXTINF:2.0,\nvideo_testsrc_30.mp4\n#EXTINF:2.0,\n/etc/passwd\n#EXT-X-ENDLIST\n")
    write(os.path.join(OUT, "refuse_hls_master.m3u8"), b"#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1000\nmedia.m3u8\n")
    write(os.path.join(OUT, "refuse_ffconcat"), b"ffconcat version 1.0\nfile video_testsrc_30.mp4\nfile /etc/passwd\n")
    write(os.path.join(OUT, "refuse_sdp"), b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nc=IN IP4 127.0.0.1\r\n"
          b"t=0 0\r\nm=video 5004 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n")
    write(os.path.join(OUT, "refuse_text"), b"This is not a video file.\n")
    write(os.path.join(OUT, "refuse_empty"), b"")


if __name__ == "__main__":
    main()
