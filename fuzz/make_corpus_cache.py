#!/usr/bin/env python3
"""Seeds for fuzz_cache_entry: small cache entries as qvl_cache_put writes them (fuzz/corpus/cache_entry), sound
ones and damaged ones. Needs only the standard library and libxxhash.so.0 (ctypes). Run from the repository root."""

import ctypes
import json
import os
import struct

x = ctypes.CDLL("libxxhash.so.0")


class H(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


x.XXH3_128bits.restype = H
x.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh(b: bytes) -> str:
    h = x.XXH3_128bits(b, len(b))
    return f"{h.high64:016x}{h.low64:016x}"


KEY = "ab" * 32


def entry(shape, dtype="F32", grid=(1, 2, 2), key=KEY, body=None, hdr=None, gof=None) -> bytes:
    n = 1
    for v in shape:
        n *= v
    esz = 4 if dtype == "F32" else 2
    mat = body if body is not None else bytes((i * 7) & 255 for i in range(n * esz))
    data = mat + struct.pack("<3q", *grid)
    h = {"__metadata__": {"qvl_entry": "1", "key": key, "fingerprint": "0" * 32, "qvl_version": "1.0.0",
                          "created": "1796137800", "xxh3_128": xxh(data)},
         "ec_cache": {"dtype": dtype, "shape": list(shape), "data_offsets": [0, len(mat)]},
         "grid_thw": {"dtype": "I64", "shape": [1, 3], "data_offsets": gof or [len(mat), len(mat) + 24]}}
    if hdr:
        hdr(h)
    js = json.dumps(h, separators=(",", ":")).encode()
    hl = (8 + len(js) + 63) // 64 * 64 - 8
    return hl.to_bytes(8, "little") + js + b" " * (hl - len(js)) + data


seeds = {
    "ok_2d_f32": entry((2, 4)),
    "ok_3d_bf16": entry((3, 2, 4), "BF16"),
    "ok_f16_odd": entry((1, 3), "F16", (1, 2, 6)),
    "ok_empty": entry((0, 4)),
    "bad_checksum": bytearray(entry((2, 4))),
    "bad_shape_bytes": entry((2, 5), body=bytes(32)),
    "bad_dtype": entry((2, 4), "I8"),
    "bad_grid_zero": entry((2, 4), grid=(0, 2, 2)),
    "bad_grid_huge": entry((2, 4), grid=(1, 2, 1 << 40)),
    "bad_grid_offsets": entry((2, 4), gof=[8, 40]),
    "bad_offsets_past_end": entry((2, 4), hdr=lambda h: h["ec_cache"].update(data_offsets=[0, 1 << 50])),
    "bad_offsets_float": entry((2, 4), hdr=lambda h: h["ec_cache"].update(data_offsets=[0.5, 32.5])),
    "bad_shape_overflow": entry((2, 4), hdr=lambda h: h["ec_cache"].update(shape=[1 << 39, 1 << 39, 1 << 39])),
    "bad_shape_negative": entry((2, 4), hdr=lambda h: h["ec_cache"].update(shape=[-2, -4])),
    "bad_shape_1d": entry((2, 4), hdr=lambda h: h["ec_cache"].update(shape=[8])),
    "bad_no_meta": entry((2, 4), hdr=lambda h: h.pop("__metadata__")),
    "bad_meta_not_object": entry((2, 4), hdr=lambda h: h.update(__metadata__=[1, 2])),
    "bad_header_array": b"\x08\x00\x00\x00\x00\x00\x00\x00[1,2,3] ",
    "bad_huge_hlen": b"\xff\xff\xff\xff\xff\xff\xff\x7f{}",
    "bad_short": b"\x01\x00\x00",
}
seeds["bad_checksum"][-30] ^= 1
seeds["bad_checksum"] = bytes(seeds["bad_checksum"])
seeds["bad_truncated"] = entry((2, 4))[:-5]
out = "fuzz/corpus/cache_entry"
os.makedirs(out, exist_ok=True)
for name, b in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(b)
print(f"{len(seeds)} seeds in {out}")
