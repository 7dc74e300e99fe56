#!/usr/bin/env python3
"""End-to-end oracle: a photograph file through transformers' own loading, image processor and vision model.

Takes an HF-layout checkpoint written by `qvl synth --layout hf` and an image file, and does what a transformers
user does, in float32 on the CPU:
  image   = transformers.image_utils.load_image(path)
  proc    = AutoImageProcessor.from_pretrained(CKPT)          (the checkpoint's preprocessor_config.json; the
                                                                default fast, torchvision-backed class)
  batch   = proc(images=image, return_tensors="pt"[, size={shortest_edge, longest_edge: --max-pixels}])
  out     = VisionModel.from_pretrained(CKPT, dtype=float32)(batch.pixel_values, grid_thw=batch.image_grid_thw)
with the vision model class, loading and self-checks of oracle.py. It writes one small safetensors fixture with the
merged output (`merged`), every DeepStack feature (`deepstack{k}`) and `grid_thw`; the processor's rows are kept
as an xxh64 digest and their first row only (so the fixture stays small). Metadata: versions, the checkpoint's
digests, the input file's size and digests, the decoded image size, the processor class and settings, and the
bf16 run's error against the f32 run per output (for scale).

The C test (tests/unit/test_e2e.c) runs `qvl encode` on the same file and a checkpoint re-synthesized from the
recorded recipe and compares.

usage: e2e_oracle.py --model CKPT --image tests/data/photos/rocket.jpg --out FIXTURE [--max-pixels N]
                     [--meta KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys

import numpy as np
import PIL
import safetensors
import torch
import torchvision
import transformers
import xxhash
from transformers import AutoImageProcessor
from transformers.image_utils import load_image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402  (model classes, loading, deterministic writer, error figures)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def xxh64_bytes(b: bytes) -> str:
    return str(xxhash.xxh64(b).intdigest())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint dir written by qvl synth --layout hf")
    ap.add_argument("--image", required=True, help="image file (inside the source tree: its path is recorded)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-pixels", type=int, default=0,
                    help="override the checkpoint's size.longest_edge (0: keep it); qvl encode --max-pixels N")
    ap.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()

    torch.set_num_threads(oracle.NUM_THREADS)
    torch.use_deterministic_algorithms(True)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    cfg_path = os.path.join(args.model, "config.json")
    st_path = os.path.join(args.model, "model.safetensors")
    pre_path = os.path.join(args.model, "preprocessor_config.json")
    for p in (cfg_path, st_path, pre_path, args.image):
        if not os.path.isfile(p):
            oracle.die(f"missing {p}")
    with open(cfg_path) as f:
        cfg = json.load(f)
    model_type = cfg.get("model_type")
    if model_type not in oracle.MODEL_CLASSES:
        oracle.die(f"unsupported model_type {model_type!r}")
    image_rel = os.path.relpath(os.path.abspath(args.image), ROOT)
    if image_rel.startswith(".."):
        oracle.die(f"{args.image} is outside the source tree; the C test finds the input by its recorded path")
    with open(args.image, "rb") as f:
        image_bytes = f.read()

    # The processor, as from_pretrained gives it for this checkpoint, and the call a user makes.
    proc = AutoImageProcessor.from_pretrained(args.model)
    call_kwargs = {"return_tensors": "pt"}
    if args.max_pixels:
        call_kwargs["size"] = {"shortest_edge": proc.size["shortest_edge"], "longest_edge": args.max_pixels}
    image = load_image(args.image)
    batch = proc(images=image, **call_kwargs)
    pixel_values, grid_thw = batch["pixel_values"], batch["image_grid_thw"]
    if pixel_values.dtype != torch.float32 or grid_thw.dtype != torch.int64 or tuple(grid_thw.shape) != (1, 3):
        oracle.die(f"processor returned {pixel_values.dtype} {tuple(pixel_values.shape)}, grid {grid_thw}")
    rows = pixel_values.contiguous().numpy().astype("<f4", copy=False)

    res = {}
    for tag, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        model, cls = oracle.load_model(args.model, model_type, dt)
        if tag == "f32":
            m32, cls32 = model, cls
        res[tag] = oracle.run(model, pixel_values, grid_thw)
    f32, b16 = res["f32"], res["bf16"]
    ds_names = sorted((k for k in f32 if k.startswith("deepstack")), key=lambda s: int(s[9:]))
    outputs = ["merged"] + ds_names

    tensors = {"grid_thw": grid_thw.contiguous(), "pixel_values.row0": torch.from_numpy(rows[0].copy())}
    for s in outputs:
        tensors[s] = f32[s]
    vc = cfg["vision_config"]
    grid = grid_thw[0].tolist()
    meta = {
        "format": "qvl-e2e-fixture/1",
        "generator": "tests/oracle/e2e_oracle.py",
        "torch_version": torch.__version__,
        "torchvision_version": torchvision.__version__,
        "transformers_version": transformers.__version__,
        "pillow_version": PIL.__version__,
        "safetensors_version": safetensors.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "torch_num_threads": str(torch.get_num_threads()),
        "device": "cpu",
        "image": image_rel,
        "image_bytes": str(len(image_bytes)),
        "image_sha256": hashlib.sha256(image_bytes).hexdigest(),
        "image_xxh64": xxh64_bytes(image_bytes),
        "image_load": "transformers.image_utils.load_image(path)",
        "image_decoded": f"{image.width}x{image.height} {image.mode}",
        "processor": "AutoImageProcessor.from_pretrained(ckpt)",
        "processor_class": f"{type(proc).__module__}.{type(proc).__name__}",
        "processor_call": "proc(images=image, " + ", ".join(f"{k}={v!r}" for k, v in call_kwargs.items()) + ")",
        "preprocessor_config_sha256": oracle.sha256_file(pre_path),
        "max_pixels": str(args.max_pixels),
        "pixel_values_shape": ",".join(map(str, rows.shape)),
        "pixel_values.xxh64": xxh64_bytes(rows.tobytes()),
        "grid": ",".join(map(str, grid)),
        "tokens": str(f32["merged"].shape[0]),
        "attn_implementation": m32.config._attn_implementation,
        "load": "from_pretrained(dir, dtype={float32,bfloat16}, attn_implementation='sdpa', "
                "key_mapping={'^model\\\\.visual\\\\.': ''})",
        "model_type": model_type,
        "model_class": f"{cls32.__module__}.{cls32.__name__}",
        "vision_config": json.dumps(vc, sort_keys=True),
        "weights_dtype": oracle.stored_dtype(st_path),
        "weights_sha256": oracle.sha256_file(st_path),
        "config_sha256": oracle.sha256_file(cfg_path),
        "outputs": ",".join(outputs),
        "depth": str(m32.config.depth),
        "deepstack_visual_indexes": ",".join(map(str, getattr(m32.config, "deepstack_visual_indexes", []) or [])),
        "bf16_err_note": "||bf16-f32||/||f32|| and max|bf16-f32| in float64, same processor rows into the bf16 model",
    }
    for kv in args.meta:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            oracle.die(f"--meta {kv!r}: expected KEY=VALUE")
        meta[key] = value
    for s in outputs:
        rel, mx = oracle.err(b16[s], f32[s])
        meta[f"bf16_relerr.{s}"] = repr(rel)
        meta[f"bf16_maxabs.{s}"] = repr(mx)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    oracle.save_deterministic(tensors, args.out, meta)
    size = os.path.getsize(args.out)
    print(f"e2e_oracle: wrote {args.out} ({size} bytes): {image_rel} {image.width}x{image.height} -> grid "
          f"{grid}, {meta['tokens']} tokens, outputs {','.join(outputs)}; bf16 relerr "
          + " ".join(f"{s}={float(meta['bf16_relerr.' + s]):.2e}" for s in outputs))


if __name__ == "__main__":
    main()
