"""Preprocessing oracle: transformers' own Qwen3-VL image processors on a corpus of images.

For every corpus image it records what transformers 5.23 produces with the Qwen3-VL published settings
(size shortest_edge 65536 / longest_edge 16777216, patch 16, temporal 2, merge 2, mean = std = 0.5):
  - the smart_resize target and grid_thw,
  - the resized uint8 image of each path (torchvision: tvF.resize(uint8 CHW, BICUBIC, antialias=True), exactly
    what TorchvisionBackend.resize calls; PIL: Image.resize(BICUBIC), what the PIL backend's np_resize calls),
  - the pixel_values rows of Qwen2VLImageProcessor (fast, torchvision backend) and Qwen2VLImageProcessorPil.
Large arrays are stored as xxh64 digests of their little-endian bytes plus their first row; the C test
(tests/unit/test_preprocess.c) recomputes them with qvl and compares bit for bit.

Inputs: the files in tests/data/photos and tests/data/images, decoded the way transformers does for a file
(load_image: PIL open, ImageOps.exif_transpose, convert("RGB"); then the processors' convert_to_rgb), and synthetic images whose pixels the C test regenerates
from the recipe (see synth_image). An input the processor refuses (aspect ratio above 200) is recorded as an
expected error.

usage: .venv/bin/python tests/oracle/preprocess_oracle.py [--out tests/fixtures/preprocess.safetensors]
"""
import argparse
import glob
import os
import sys

import numpy as np
import PIL
import torch
import torchvision
import transformers
import xxhash
from PIL import Image
from torchvision.transforms.v2 import functional as tvF
from transformers.image_transforms import convert_to_rgb
from transformers.image_utils import load_image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor, smart_resize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import save_deterministic  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SETTINGS = dict(size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16, temporal_patch_size=2,
                merge_size=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
MASK = (1 << 64) - 1

# Synthetic inputs: (name, kind, width, height, seed). Chosen for the branches of smart_resize and the resize.
SYNTH = [
    ("noise_10x10", "noise", 10, 10, 1),            # tiny: min branch, upscale
    ("smooth_33x17", "smooth", 33, 17, 2),          # tiny, odd sides
    ("noise_333x517", "noise", 333, 517, 3),        # odd sides, downscale one axis, upscale the other
    ("smooth_320x256", "smooth", 320, 256, 4),      # exact multiples of 32: resize is the identity
    ("noise_336x336", "noise", 336, 336, 5),        # round-half-even tie: 336 -> 320
    ("smooth_1280x720", "smooth", 1280, 720, 6),    # tie 720 -> 704
    ("noise_1000x1000", "noise", 1000, 1000, 7),    # 31.25 -> 992
    ("noise_3000x20", "noise", 3000, 20, 8),        # extreme aspect (150:1)
    ("noise_20x4100", "noise", 20, 4100, 9),        # aspect 205:1: refused
    ("smooth_4200x4100", "smooth", 4200, 4100, 10), # over max_pixels: max branch
    ("noise_100x100", "noise", 100, 100, 11),       # min branch, beta = 2.56
]


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & MASK
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & MASK
    return z ^ (z >> np.uint64(31))


def synth_image(kind, w, h, seed):
    """The pixels the C test regenerates: noise = top byte of splitmix64(seed·φ + index), index = (y·w + x)·3 + c;
    smooth = r = x·255/(w−1), g = y·255/(h−1), b = 7·(x + y) mod 256 (integer arithmetic)."""
    if kind == "noise":
        with np.errstate(over="ignore"):
            idx = np.arange(w * h * 3, dtype=np.uint64)
            base = np.uint64((seed * 0x9E3779B97F4A7C15) & MASK)
            v = splitmix64(idx + base)
        return (v >> np.uint64(56)).astype(np.uint8).reshape(h, w, 3)
    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    r = x * 255 // max(w - 1, 1)
    g = y * 255 // max(h - 1, 1)
    b = (7 * (x + y)) % 256
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def digest(a):
    return xxhash.xxh64(np.ascontiguousarray(a).tobytes()).intdigest()


def run_case(name, img, fast, pil, tensors, meta):
    rgb = np.asarray(img)
    h, w = rgb.shape[:2]
    try:
        th, tw = smart_resize(h, w, factor=32, min_pixels=65536, max_pixels=16777216)
    except ValueError as e:
        meta[f"{name}.error"] = str(e)
        tensors[f"{name}.size"] = torch.tensor([h, w], dtype=torch.int64)
        for proc in (fast, pil):  # both processors must refuse it too
            try:
                proc(images=[img], return_tensors="pt")
            except ValueError:
                continue
            raise SystemExit(f"{name}: smart_resize refused it but a processor did not")
        print(f"{name}: {w}x{h} refused ({e})")
        return
    chw = torch.from_numpy(rgb).permute(2, 0, 1).contiguous()
    tv = tvF.resize(chw, [th, tw], interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
    tv = tv.permute(1, 2, 0).contiguous().numpy()
    pl = np.asarray(img.resize((tw, th), Image.BICUBIC)) if (tw, th) != (w, h) else rgb
    out_fast = fast(images=[img], return_tensors="pt")
    out_pil = pil(images=[img], return_tensors="pt")
    rows_fast = out_fast["pixel_values"].numpy().astype("<f4")
    rows_pil = np.asarray(out_pil["pixel_values"]).astype("<f4")
    grid = out_fast["image_grid_thw"].numpy().astype(np.int64)
    if not np.array_equal(grid, np.asarray(out_pil["image_grid_thw"])):
        raise SystemExit(f"{name}: the two processors disagree on the grid")
    if grid.tolist() != [[1, th // 16, tw // 16]]:
        raise SystemExit(f"{name}: grid {grid.tolist()} does not follow smart_resize {th}x{tw}")
    tensors[f"{name}.size"] = torch.tensor([h, w], dtype=torch.int64)
    tensors[f"{name}.grid"] = torch.from_numpy(grid.reshape(3))
    tensors[f"{name}.rows_fast.row0"] = torch.from_numpy(rows_fast[0].copy())
    tensors[f"{name}.rows_pil.row0"] = torch.from_numpy(rows_pil[0].copy())
    digests = {"rows_fast": digest(rows_fast), "rows_pil": digest(rows_pil), "resized_tv": digest(tv),
               "resized_pil": digest(pl), "input": digest(rgb)}
    # uint64 digests do not fit int64 tensors' sign; store them as decimal strings.
    for k, v in digests.items():
        meta[f"{name}.{k}.xxh64"] = str(v)
    print(f"{name}: {w}x{h} -> {tw}x{th}, grid {grid.tolist()[0]}, {rows_fast.shape[0]} rows")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/preprocess.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    fast = Qwen2VLImageProcessor(**SETTINGS)
    pil = Qwen2VLImageProcessorPil(**SETTINGS)
    tensors, meta, names = {}, {}, []
    for name, kind, w, h, seed in SYNTH:
        img = Image.fromarray(synth_image(kind, w, h, seed))
        run_case(name, img, fast, pil, tensors, meta)
        meta[f"{name}.recipe"] = f"{kind},{w},{h},{seed}"
        names.append(name)
    files = sorted(glob.glob(os.path.join(ROOT, "tests/data/photos/*.*")) +
                   glob.glob(os.path.join(ROOT, "tests/data/images/*.*")))
    for path in files:
        if path.endswith((".md", ".txt", ".py")):
            continue
        rel = os.path.relpath(path, ROOT)
        name = "file:" + rel
        try:
            # What the processors see: load_image, then their convert_to_rgb (which whitens a colour key that
            # survived load_image's convert("RGB")).
            img = Image.fromarray(convert_to_rgb(load_image(path), return_numpy=True))
        except Exception as e:  # a file transformers cannot load is not part of this corpus
            print(f"{rel}: skipped ({type(e).__name__}: {e})")
            continue
        run_case(name, img, fast, pil, tensors, meta)
        names.append(name)
    meta.update({
        "format": "qvl-preprocess-fixture/1",
        "generator": "tests/oracle/preprocess_oracle.py",
        "cases": ";".join(names),
        "torch_version": torch.__version__, "torchvision_version": torchvision.__version__,
        "transformers_version": transformers.__version__, "pillow_version": PIL.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "settings": repr(SETTINGS),
        "fast_class": f"{type(fast).__module__}.{type(fast).__name__}",
        "pil_class": f"{type(pil).__module__}.{type(pil).__name__}",
        "decode": "transformers.image_utils.load_image (PIL open, ImageOps.exif_transpose, convert('RGB')) then "
                  "image_transforms.convert_to_rgb",
    })
    save_deterministic(tensors, args.out, meta)
    print(f"wrote {args.out}: {len(names)} cases")


if __name__ == "__main__":
    main()
