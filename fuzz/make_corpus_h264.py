#!/usr/bin/env python3
"""make_corpus_h264.py — write the seed corpus of fuzz_h264_scan (fuzz/corpus/h264_scan/) from the H.264 clips of
tests/data/video/. Needs the ffmpeg command (Debian's `ffmpeg`), which turns each clip into an Annex B elementary
stream (`-c copy -bsf:v h264_mp4toannexb -f h264`); the rest is plain Python.

A seed is the fuzz target's input: a 2-byte big-endian extradata length, the extradata, then packets each behind a
2-byte length. For each clip: the Annex B access units with no extradata (parameter sets in band); the same as an
avcC record (its SPS) and 4-byte length-prefixed packets; and cut short (a packet's length past the end)."""
import os
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "corpus", "h264_scan")
CLIPS = ["video_h264_bframes.mp4", "video_h264_opengop.mp4", "video_h264_interlaced.mp4", "video_testsrc_30.mp4",
         "video_3frames.mp4", "video_h264_slices_hrd.mp4", "video_h264_10bit_cqm.mp4", "video_h264_444_x264old.mp4",
         "video_h264_sps_change.mkv"]
MAX_UNITS = 12
# Access units taken from a clip other than its first MAX_UNITS: where its parameter sets change (the second
# stream of video_h264_sps_change.mkv starts at frame 60, with its own SPS, PPS and x264 SEI).
UNITS = {"video_h264_sps_change.mkv": list(range(6)) + list(range(60, 66))}


def nal_units(es):
    """The NAL units of an Annex B stream (without start codes)."""
    starts, i = [], 0
    while True:
        i = es.find(b"\x00\x00\x01", i)
        if i < 0:
            break
        starts.append(i + 3)
        i += 3
    units = []
    for k, s in enumerate(starts):
        e = starts[k + 1] - 3 if k + 1 < len(starts) else len(es)
        while e > s and es[e - 1] == 0:
            e -= 1
        units.append(es[s:e])
    return units


def access_units(units):
    """NAL units grouped into access units: a new one at an AUD, SPS or PPS after a slice, or a slice whose
    first_mb_in_slice is 0 (its first bit after the header is 1)."""
    aus, cur, seen_slice = [], [], False
    for u in units:
        t = u[0] & 0x1F
        starts = (t in (7, 8, 9) and seen_slice) or (t in (1, 5) and seen_slice and u[1] & 0x80)
        if starts:
            aus.append(cur)
            cur, seen_slice = [], False
        cur.append(u)
        seen_slice = seen_slice or t in (1, 5)
    if cur:
        aus.append(cur)
    return aus


def seed(extradata, packets):
    b = struct.pack(">H", len(extradata)) + extradata
    for p in packets:
        b += struct.pack(">H", len(p)) + p
    return b


def main():
    os.makedirs(OUT, exist_ok=True)
    for clip in CLIPS:
        es = subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-i",
                             os.path.join(ROOT, "tests", "data", "video", clip), "-c", "copy", "-bsf:v",
                             "h264_mp4toannexb", "-f", "h264", "-"], check=True, capture_output=True).stdout
        aus = access_units(nal_units(es))
        aus = [aus[i] for i in UNITS[clip]] if clip in UNITS else aus[:MAX_UNITS]
        name = clip.replace(".", "_")
        annexb = [b"".join(b"\x00\x00\x00\x01" + u for u in au) for au in aus]
        sps = next(u for au in aus for u in au if u[0] & 0x1F == 7)
        avcc = bytes([1, sps[1], sps[2], sps[3], 0xFF, 0xE1]) + struct.pack(">H", len(sps)) + sps + b"\x00"
        lp = [b"".join(struct.pack(">I", len(u)) + u for u in au if u[0] & 0x1F not in (7, 8, 9)) for au in aus]
        for tag, b in (("annexb_", seed(b"", annexb)), ("avcc_", seed(avcc, lp))):
            open(os.path.join(OUT, tag + name), "wb").write(b)
            open(os.path.join(OUT, "cut_" + tag + name), "wb").write(b[: len(b) * 2 // 3])


if __name__ == "__main__":
    main()
