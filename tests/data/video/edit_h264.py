#!/usr/bin/env python3
"""Edit H.264 Annex B elementary streams for the video test corpus (README.md here): keep the parameter sets (SPS,
PPS) and x264's version SEI only where a stream first has them, and join streams. Reads and writes raw `.h264`
files; the ffmpeg CLI makes them and muxes the result (commands in README.md).

    edit_h264.py OUT.h264 IN.h264 [IN.h264 ...]

writes the inputs back to back, each with its setup units (NAL types 6, 7, 8) kept only before its first slice."""
import re
import sys


def nal_units(data):
    """The NAL units of an Annex B stream, without start codes or trailing zero bytes."""
    starts = [m.end() for m in re.finditer(b"\x00\x00\x01", data)]
    units = []
    for i, s in enumerate(starts):
        e = starts[i + 1] - 3 if i + 1 < len(starts) else len(data)
        body = data[s:e].rstrip(b"\x00")
        if body:
            units.append(body)
    return units


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = bytearray()
    for path in sys.argv[2:]:
        with open(path, "rb") as f:
            units = nal_units(f.read())
        seen_slice = False
        for u in units:
            kind = u[0] & 0x1F
            if kind in (1, 5):
                seen_slice = True
            elif kind in (6, 7, 8) and seen_slice:
                continue
            out += b"\x00\x00\x00\x01" + u
    with open(sys.argv[1], "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
