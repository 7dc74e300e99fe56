#!/usr/bin/env python3
"""Resize oracle: torchvision's and Pillow's antialiased bicubic on a deterministic corpus, for test_resize.c.

Writes one safetensors file (default tests/fixtures/resize/corpus.safetensors) with

  cases   I32 [N, 8]   per case: sw, sh, c, dw, dh, gen, seed, stored
                       gen 0: the input is stored as src_IDX; gen 1/2: the input is generated from `seed` by
                       gen_image() below (test_resize.c has the same recipe), only the outputs' xxh64 are stored
                       stored 1: tv_IDX / pil_IDX / pilh_IDX hold the outputs, 0: only `hashes` does
  hashes  U64 [N, 3]   xxh64 (seed 0) of the torchvision, Pillow and Pillow-horizontal-first output bytes
  src_IDX, tv_IDX, pil_IDX, pilh_IDX   U8 [h, w, c] (IDX = three digits)

torchvision: F.resize(uint8 CHW view of the HWC array, [dh, dw], BICUBIC, antialias=True) on CPU, exactly the call
transformers' Qwen2VLImageProcessor makes. Pillow: Image.resize((dw, dh), BICUBIC) on mode L / RGB / RGBX (c = 1/3/4;
RGBX resamples all four bytes without the RGBA premultiplication). Run it on an AVX2 or AVX-512 machine:
torch's generic (ATEN_CPU_CAPABILITY=default) kernel returns garbage for a width-1 input whose width is unchanged. Pillow >= 13 runs the vertical pass first when
the height loses more than twice the pixels the width does; "pilh" is the older order (Pillow <= 12.1: horizontal
first, uint8 intermediate), made here with two single-axis resizes. Versions go to __metadata__.

usage: .venv/bin/python tests/oracle/resize_oracle.py [--out PATH]
"""
import argparse
import json
import os
import platform
import struct

import numpy as np
import PIL
import safetensors
import torch
import torchvision
import xxhash
from PIL import Image
from torchvision.transforms.v2 import functional as F

M64 = (1 << 64) - 1


def splitmix64(x):
    """splitmix64 of a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def gen_image(gen, seed, h, w, c):
    """The generated inputs test_resize.c reproduces. i = (y·w + x)·c + ch, the byte's index.
    gen 1 (noise):   byte = splitmix64(seed·2^32 + i) >> 56
    gen 2 (texture): byte = (x·x/8 + 3·y + 85·ch + ((x >> 4) ^ (y >> 4))·29 + (splitmix64(seed·2^32 + i) >> 61)) & 255
                     — smooth ramps, block edges and a little noise; all integer arithmetic."""
    y, x, ch = np.meshgrid(np.arange(h, dtype=np.uint64), np.arange(w, dtype=np.uint64),
                           np.arange(c, dtype=np.uint64), indexing="ij")
    i = (y * np.uint64(w) + x) * np.uint64(c) + ch
    r = splitmix64(np.uint64(seed) * np.uint64(1 << 32) + i)
    if gen == 1:
        v = r >> np.uint64(56)
    elif gen == 2:
        v = (x * x // np.uint64(8) + np.uint64(3) * y + np.uint64(85) * ch + ((x >> np.uint64(4)) ^ (y >> np.uint64(4))) *
             np.uint64(29) + (r >> np.uint64(61))) & np.uint64(255)
    else:
        raise ValueError(gen)
    return v.astype(np.uint8)


def small_image(kind, h, w, c, rng):
    """Stored inputs: noise, smooth gradients, sharp edges / checkerboards, extremes (0/255 overshoot)."""
    y, x = np.mgrid[0:h, 0:w]
    if kind == "noise":
        return rng.integers(0, 256, size=(h, w, c), dtype=np.uint8)
    if kind == "grad":
        base = [(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 255 // max(w + h - 2, 1)),
                (255 - x * 255 // max(w - 1, 1))]
        return np.stack([base[k % 4] for k in range(c)], axis=-1).astype(np.uint8)
    if kind == "checker":
        cb = (((x // 2) + (y // 3)) % 2) * 255
        return np.stack([cb if k % 2 == 0 else 255 - cb for k in range(c)], axis=-1).astype(np.uint8)
    if kind == "edges":
        v = np.where(x * 3 + y * 2 > w + h, 250, 5) + np.where((x % 7) == 0, -5, 0) + np.where((y % 5) == 0, 5, 0)
        return np.stack([np.roll(v, k, axis=1) for k in range(c)], axis=-1).astype(np.uint8)
    raise ValueError(kind)


# (sw, sh, dw, dh, c, image kind). Widths first, as PIL sizes.
SMALL = [
    # downscale by many factors, both axes
    (64, 48, 32, 24, 3, "noise"), (64, 48, 21, 16, 3, "noise"), (64, 48, 16, 12, 3, "grad"),
    (97, 61, 13, 9, 3, "noise"), (97, 61, 48, 30, 3, "edges"), (80, 80, 79, 79, 3, "noise"),
    (80, 80, 41, 39, 3, "checker"), (75, 50, 7, 5, 3, "noise"), (100, 90, 9, 8, 3, "grad"),
    (55, 45, 50, 40, 3, "noise"), (60, 60, 28, 28, 3, "noise"), (63, 47, 2, 2, 3, "noise"),
    (33, 29, 1, 1, 3, "noise"), (90, 70, 56, 42, 3, "edges"), (72, 96, 24, 32, 3, "checker"),
    # extreme ratios (high torch precision, wide windows)
    (3000, 3, 2, 2, 3, "noise"), (4000, 2, 1, 1, 1, "noise"), (2, 2000, 1, 3, 3, "noise"),
    (800, 4, 3, 4, 3, "grad"), (1000, 2, 28, 1, 3, "noise"), (5, 700, 5, 6, 1, "noise"),
    # pass order: Pillow 12.2/12.3 go vertical first for H > 100·W shrinking H, Pillow 13 when ΔH > 2·ΔW
    (2, 300, 3, 100, 3, "noise"), (3, 400, 2, 50, 3, "noise"), (2, 250, 2, 77, 3, "noise"), (300, 2, 100, 3, 3, "noise"),
    (64, 48, 60, 20, 3, "noise"), (30, 80, 25, 33, 4, "edges"), (40, 61, 38, 20, 1, "noise"), (40, 61, 35, 50, 3, "noise"),
    # upscale
    (2, 1, 3, 1, 3, "noise"), (5, 4, 37, 29, 3, "noise"), (1, 1, 7, 5, 3, "noise"), (1, 1, 3, 1, 1, "noise"),
    (8, 8, 64, 64, 3, "checker"), (13, 11, 28, 28, 3, "edges"), (20, 15, 31, 23, 3, "grad"), (3, 2, 32, 32, 4, "noise"),
    (16, 12, 17, 13, 3, "noise"), (7, 9, 50, 11, 3, "noise"),
    # one axis up, the other down
    (40, 10, 13, 37, 3, "noise"), (9, 60, 45, 14, 3, "edges"), (50, 3, 10, 30, 3, "noise"),
    # one axis only
    (64, 48, 64, 20, 3, "noise"), (64, 48, 30, 48, 3, "noise"), (64, 48, 64, 97, 3, "grad"),
    (64, 48, 100, 48, 3, "checker"), (31, 17, 31, 5, 1, "noise"), (31, 17, 6, 17, 4, "noise"),
    # identity
    (17, 13, 17, 13, 3, "noise"), (1, 1, 1, 1, 3, "noise"), (32, 32, 32, 32, 1, "grad"),
    # tiny sides
    (1, 3, 2, 1, 3, "noise"), (3, 1, 1, 2, 3, "noise"), (2, 2, 1, 1, 3, "noise"), (3, 3, 2, 2, 4, "noise"),
    (1, 2, 1, 3, 1, "noise"), (2, 3, 3, 2, 3, "checker"), (3, 2, 1, 3, 3, "edges"),
    # odd sizes, other channel counts, clamping
    (37, 23, 19, 11, 1, "noise"), (37, 23, 19, 11, 4, "noise"), (41, 29, 17, 31, 4, "edges"),
    (45, 33, 22, 16, 1, "checker"), (29, 31, 57, 59, 1, "edges"), (99, 7, 33, 5, 3, "checker"),
    (48, 48, 27, 27, 3, "checker"), (53, 41, 35, 27, 3, "grad"), (128, 96, 56, 42, 3, "noise"),
    (120, 90, 64, 48, 4, "noise"), (33, 65, 17, 64, 3, "noise"),
]

# (sw, sh, dw, dh, c, gen, seed): generated inputs, hashed outputs.
LARGE = [
    (1000, 750, 672, 512, 3, 1, 1),
    (1000, 750, 672, 504, 3, 2, 2),
    (1600, 1200, 896, 672, 3, 2, 3),
    (640, 480, 1344, 1008, 3, 1, 4),
    (1333, 1000, 448, 336, 3, 1, 5),
    (1024, 20, 3072, 8, 4, 1, 6),
    (500, 1500, 224, 672, 3, 1, 7),  # Pillow 13 goes vertical first in these two
    (900, 1600, 700, 672, 3, 2, 8),
]


def resize_tv(a, dw, dh):
    t = torch.from_numpy(a).permute(2, 0, 1)  # CHW view with channels-last strides, as transformers passes it
    out = F.resize(t, [dh, dw], interpolation=F.InterpolationMode.BICUBIC, antialias=True)
    return np.ascontiguousarray(out.permute(1, 2, 0).numpy())


def resize_pil(a, dw, dh, h_first=False):
    c = a.shape[2]
    im = Image.frombytes({1: "L", 3: "RGB", 4: "RGBX"}[c], (a.shape[1], a.shape[0]), a.tobytes())
    if h_first:
        im = im.resize((dw, a.shape[0]), Image.BICUBIC).resize((dw, dh), Image.BICUBIC)
    else:
        im = im.resize((dw, dh), Image.BICUBIC)
    return np.ascontiguousarray(np.asarray(im).reshape(dh, dw, c))


def save_sorted(tensors, path, meta):
    """safetensors writer with a byte-stable header (the package orders __metadata__ keys at random): metadata first,
    then tensors by name, data in the same order, header padded with spaces to a multiple of 8."""
    dtypes = {np.dtype(np.uint8): "U8", np.dtype(np.int32): "I32", np.dtype(np.uint64): "U64"}
    header, blobs, off = {"__metadata__": dict(sorted(meta.items()))}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                                   "fixtures", "resize", "corpus.safetensors")))
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(20240611)
    tensors, cases, hashes = {}, [], []
    idx = 0
    for sw, sh, dw, dh, c, kind in SMALL:
        a = small_image(kind, sh, sw, c, rng)
        outs = resize_tv(a, dw, dh), resize_pil(a, dw, dh), resize_pil(a, dw, dh, h_first=True)
        tensors[f"src_{idx:03d}"] = a
        for name, o in zip(("tv", "pil", "pilh"), outs):
            tensors[f"{name}_{idx:03d}"] = o
        cases.append([sw, sh, c, dw, dh, 0, 0, 1])
        hashes.append([xxhash.xxh64_intdigest(o.tobytes()) for o in outs])
        idx += 1
    for sw, sh, dw, dh, c, gen, seed in LARGE:
        a = gen_image(gen, seed, sh, sw, c)
        outs = resize_tv(a, dw, dh), resize_pil(a, dw, dh), resize_pil(a, dw, dh, h_first=True)
        cases.append([sw, sh, c, dw, dh, gen, seed, 0])
        hashes.append([xxhash.xxh64_intdigest(o.tobytes()) for o in outs])
        idx += 1
    tensors["cases"] = np.array(cases, dtype=np.int32)
    tensors["hashes"] = np.array(hashes, dtype=np.uint64)
    meta = {
        "generator": "tests/oracle/resize_oracle.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
        "xxhash": xxhash.VERSION,
        "python": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "n_cases": str(idx),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_sorted(tensors, args.out, meta)
    print(f"resize_oracle: {idx} cases -> {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
