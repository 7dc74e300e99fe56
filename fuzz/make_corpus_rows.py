#!/usr/bin/env python3
"""make_corpus_rows.py — write the seed corpus for fuzz_rows (fuzz/corpus/rows/): one byte picking the limits (0:
the defaults; b: max_item_patches 1 + (b & 7), max_call_patches 1 + (b >> 3), max_input_bytes 64·b), then a .npy or
safetensors pixel-rows file: valid ones at and over each limit, header claims over them, truncated files. Each under
4 KB. Plain python3, no dependencies; rerun after editing (it only adds or overwrites the files it names)."""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "rows")


def npy(descr, shape, data, version=1, hlen=None):
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "%d," % shape[0] if len(shape) == 1 else ", ".join(str(d) for d in shape))
    pre = 10 if version == 1 else 12
    body = text + " " * (-(pre + len(text) + 1) % 64) + "\n"
    n = len(body) if hlen is None else hlen
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<H" if version == 1 else "<I", n) + body.encode() + data


def st(tensors, data):
    raw = json.dumps(tensors, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def limits(item, call):
    """The limits byte for max_item_patches = item (1..8) and max_call_patches = call (1..32); max_input_bytes is
    then 64 times the byte."""
    return bytes([(item - 1) | (call - 1) << 3])


F32_6x4 = struct.pack("<24f", *[i * 0.5 for i in range(24)])
PX = t("F32", [6, 4], 0, 96)
G2 = t("I64", [2, 3], 96, 144)
GRIDS = struct.pack("<6q", 1, 2, 3, 1, 1, 4)  # 6 + 4 rows
ST = st({"pixel_values": PX, "grid_thw": G2}, F32_6x4 + GRIDS)

CASES = {
    "npy_defaults": b"\0" + npy("<f4", (6, 4), F32_6x4),
    "npy_f2_defaults": b"\0" + npy("<f2", (2, 3), struct.pack("<6H", 0x3c00, 0, 0x7c00, 1, 2, 3), version=2),
    "npy_call_at": limits(8, 6) + npy("<f4", (6, 4), F32_6x4),
    "npy_call_over": limits(8, 5) + npy("<f4", (6, 4), F32_6x4),
    "npy_input_over": bytes([1]) + npy("<f4", (6, 4), F32_6x4),  # 224 bytes over max_input_bytes = 64
    "npy_claim_over_defaults": b"\0" + npy("<f4", (1048577, 1536), bytes(16)),
    "npy_hlen_4g": b"\0" + npy("<f4", (1, 1), bytes(4), version=2, hlen=0xFFFFFFFF),
    "npy_truncated": b"\0" + npy("<f4", (6, 4), F32_6x4[:92]),
    "st_defaults": b"\0" + ST,
    "st_item_at": limits(6, 10) + ST,
    "st_item_over": limits(5, 10) + ST,
    "st_call_over_grids": limits(8, 9) + ST,
    "st_call_over_rows": limits(8, 5) + ST,
    "st_i32_grid": b"\0" + st({"pixel_values": t("BF16", [4, 2], 0, 16), "grid_thw": t("I32", [3], 16, 28)},
                              bytes(16) + struct.pack("<3i", 1, 2, 2)),
    "st_grid_zero": b"\0" + st({"pixel_values": PX, "grid_thw": G2}, F32_6x4 + struct.pack("<6q", 1, 2, 3, 0, 1, 4)),
    "st_grid_overflow": b"\0" + st({"pixel_values": PX, "grid_thw": G2},
                                   F32_6x4 + struct.pack("<6q", 2**31 - 1, 2**31 - 1, 2**31 - 1, 1, 1, 1)),
    "st_claim_over_defaults": b"\0" + st({"pixel_values": t("F32", [1048577, 0], 0, 0)}, b""),
    "st_truncated": b"\0" + ST[:-8],
    "st_no_pixel_values": b"\0" + st({"x": PX}, F32_6x4),
    "neither": b"\0" + b"GIF89a\x01\x00\x01\x00",
}

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, data in CASES.items():
        assert len(data) < 4096, name
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(CASES)} files to {OUT}")
