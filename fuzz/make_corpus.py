#!/usr/bin/env python3
"""make_corpus.py — write the seed corpus for fuzz_safetensors into fuzz/corpus/safetensors/.

Small safetensors files, valid and malformed, each under 4 KB. Plain python3, no dependencies; rerun after editing
(it only adds or overwrites the files it names, so fuzzer-found crashers committed beside them are kept)."""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")


def st(header, data=b"", hlen=None, pad=True):
    """8-byte little-endian header length, the JSON header (str or dict), the data."""
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    raw = text.encode("utf-8")
    if pad and hlen is None:
        raw += b" " * (-len(raw) % 8)  # the Python writer pads the header with spaces to 8 bytes
    n = len(raw) if hlen is None else hlen
    return struct.pack("<Q", n) + raw + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


CASES = {
    # Valid.
    "valid_empty": st({}),
    "valid_meta_only": st({"__metadata__": {"format": "pt"}}),
    "valid_one_f32": st({"w": t("F32", [2, 2], 0, 16)}, bytes(range(16))),
    "valid_several": st(
        {
            "__metadata__": {"format": "pt", "note": "seed"},
            "model.visual.patch_embed.proj.weight": t("BF16", [4, 3, 2], 0, 48),
            "model.visual.blocks.0.norm1.weight": t("F16", [4], 48, 56),
            "b": t("U8", [8], 56, 64),
            "scalar": t("F64", [], 64, 72),
            "empty": t("I32", [0, 5], 72, 72),
            "f8": t("F8_E5M2", [2, 2], 72, 76),
        },
        bytes(76),
    ),
    "valid_all_dtypes": st(
        {f"t_{d}": t(d, [1], i * 8, i * 8 + s) for i, (d, s) in enumerate(
            [("F32", 4), ("F16", 2), ("BF16", 2), ("F64", 8), ("I64", 8), ("I32", 4), ("I16", 2), ("I8", 1),
             ("U8", 1), ("BOOL", 1), ("U16", 2), ("U32", 4), ("U64", 8), ("F8_E4M3", 1), ("F8_E5M2", 1)])},
        bytes(15 * 8),
    ),
    # Framing.
    "bad_empty": b"",
    "bad_seven": b"\x02\x00\x00\x00\x00\x00\x00",
    "bad_truncated": st("{}", hlen=100),
    "bad_huge_hlen": st("{}", hlen=1 << 63),
    "bad_zero_hlen": st("", hlen=0),
    # JSON.
    "bad_json": st('{"a": {'),
    "bad_not_object": st("[1, 2, 3]"),
    "bad_trailing": st("{} x", pad=False),
    "bad_deep": st("[" * 1200 + "]" * 1200),
    # Entries.
    "bad_dtype": st({"a": t("F128", [1], 0, 16)}, bytes(16)),
    "bad_shape_negative": st({"a": t("U8", [-1], 0, 0)}),
    "bad_shape_fraction": st('{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}', bytes(1)),
    "bad_shape_string": st({"a": t("U8", ["2"], 0, 2)}, bytes(2)),
    "bad_too_many_dims": st({"a": t("U8", [1] * 9, 0, 1)}, bytes(1)),
    "bad_shape_mismatch": st({"a": t("F32", [2, 3], 0, 20)}, bytes(24)),
    "bad_shape_overflow": st({"a": t("F64", [1 << 32, 1 << 29], 0, 0)}),
    "bad_span_outside": st({"a": t("F32", [2], 4, 12)}, bytes(8)),
    "bad_overlap": st({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}, bytes(12)),
    "bad_duplicate": st('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                        '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', bytes(2)),
    "bad_offsets_arity": st({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]}}, bytes(2)),
    "bad_meta_value": st({"__metadata__": {"format": "pt", "n": 3}}),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, blob in CASES.items():
        assert len(blob) < 4096, name
        with open(os.path.join(OUT, name), "wb") as fp:
            fp.write(blob)
    print(f"wrote {len(CASES)} files to {OUT}")


if __name__ == "__main__":
    main()
