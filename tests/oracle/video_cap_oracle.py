#!/usr/bin/env python3
"""Reference oracle for transformers' per-frame pixel cap of Qwen3-VL video (cap_pixels_per_frame=True).

Writes tests/fixtures/video_cap.safetensors (byte-reproducibly) with

  cap.params          I64 [N, 6]  per case (a grid of edge cases, then RANDOM_CASES drawn with a fixed seed): frames, height, width, size.shortest_edge, size.longest_edge,
                                  max_video_tokens
  cap.size            I64 [N, 2]  the height and width Qwen3VLVideoProcessor.resize(..., cap_pixels_per_frame=True)
                                  resizes those frames to (its own code, run on a meta-device tensor of that shape,
                                  the base class's resize replaced by one that records its target); -1, -1 where it
                                  raises (an aspect ratio above 200)
  pre.lut             F32 [3, 256]  as in video.safetensors (tests/oracle/video_oracle.py)
  pre.<case>.frames   U8  [T, H, W, 3]  input frames (video_oracle.make_frames)
  pre.<case>.size     I64 [3]     size.shortest_edge, size.longest_edge, max_video_tokens
  pre.<case>.grid     I64 [3]     video_grid_thw
  pre.<case>.codes    U8  [rows, 1536]  pixel_values_videos = pre.lut[c][codes] exactly

The pre cases run the whole processor (do_sample_frames=False, cap_pixels_per_frame=True) on frames given as
arrays. The cap (transformers 5.23, models/qwen3_vl/video_processing_qwen3_vl.py, resize):
    frame_cap = self.max_video_tokens * factor * factor
    pixels_per_frame = max(min(frame_cap, size.longest_edge // num_frames), int(size.shortest_edge * 1.05))
    max_pixels = pixels_per_frame * num_frames
then smart_resize with that max_pixels.

usage: .venv/bin/python tests/oracle/video_cap_oracle.py [--out PATH]   (tests/oracle/requirements.txt)
"""
import argparse
import os
import sys

import numpy as np
import torch
import transformers
from transformers.image_utils import SizeDict
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import save_deterministic  # noqa: E402
from video_oracle import encode_codes, make_frames, rescale_lut  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

FRAMES = [2, 3, 4, 5, 16, 60, 120, 768, 1000]
SIDES = [(48, 64), (44, 62), (33, 47), (720, 1280), (1080, 1920), (2160, 3840), (1280, 720), (16, 16), (20, 4100)]
SIZES = [(4096, 25165824), (131072, 786432), (4096, 16384), (100000, 200000)]
TOKENS = [768, 64, 1]
RANDOM_CASES = 1500  # and as many drawn at random (seeded): budgets, sides, counts and token caps near every edge

PRE_CASES = [
    # name, T, H, W, (shortest_edge, longest_edge, max_video_tokens), seed
    ("cap_t4_120x160", 4, 120, 160, (4096, 25165824, 8), 11),    # the cap binds: 8 tokens a frame
    ("cap_t5_96x136", 5, 96, 136, (4096, 25165824, 768), 12),    # odd T; the cap does not bind
    ("cap_t6_64x80_floor", 6, 64, 80, (4096, 16384, 2), 13),     # the 1.05 · shortest_edge floor binds
]


def capped_size(proc: Qwen3VLVideoProcessor, n: int, h: int, w: int, size: tuple[int, int]) -> tuple[int, int]:
    seen = {}

    def record(self, image, size, resample=None, **kwargs):
        seen["size"] = (size.height, size.width)
        return image

    base = Qwen3VLVideoProcessor.__mro__[1]
    orig = base.resize
    base.resize = record
    try:
        videos = torch.empty((1, n, 3, h, w), device="meta")
        proc.resize(videos=videos, size=SizeDict(shortest_edge=size[0], longest_edge=size[1]), resample=None,
                    factor=proc.patch_size * proc.merge_size, temporal_factor=proc.temporal_patch_size,
                    cap_pixels_per_frame=True)
    except ValueError:
        return (-1, -1)
    finally:
        base.resize = orig
    return seen["size"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "video_cap.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    tensors: dict[str, torch.Tensor] = {}
    params, sizes = [], []
    for tokens in TOKENS:
        proc = Qwen3VLVideoProcessor(max_video_tokens=tokens)
        if proc.max_video_tokens != tokens:
            sys.exit("video_cap_oracle: max_video_tokens did not reach the processor")
        for n in FRAMES:
            for h, w in SIDES:
                for size in SIZES:
                    params.append([n, h, w, size[0], size[1], tokens])
                    sizes.append(list(capped_size(proc, n, h, w, size)))
    rng = np.random.default_rng(20261206)
    procs: dict[int, Qwen3VLVideoProcessor] = {}
    for _ in range(RANDOM_CASES):
        n = int(rng.integers(2, 1001))
        h, w = (int(v) for v in rng.integers(16, 4001, size=2))
        lo = int(rng.integers(1024, 400001))
        hi = int(rng.integers(lo, 50_000_001))
        tokens = int(rng.integers(1, 2001))
        proc = procs.setdefault(tokens, Qwen3VLVideoProcessor(max_video_tokens=tokens))
        params.append([n, h, w, lo, hi, tokens])
        sizes.append(list(capped_size(proc, n, h, w, (lo, hi))))
    tensors["cap.params"] = torch.tensor(params, dtype=torch.int64)
    tensors["cap.size"] = torch.tensor(sizes, dtype=torch.int64)

    lut = rescale_lut(Qwen3VLVideoProcessor())
    tensors["pre.lut"] = lut
    for name, t, h, w, size, seed in PRE_CASES:
        frames = make_frames(t, h, w, seed)
        proc = Qwen3VLVideoProcessor(size={"shortest_edge": size[0], "longest_edge": size[1]},
                                     max_video_tokens=size[2])
        out = proc(videos=[frames], do_sample_frames=False, cap_pixels_per_frame=True, return_tensors="pt")
        pv, grid = out["pixel_values_videos"], out["video_grid_thw"]
        tensors[f"pre.{name}.frames"] = torch.from_numpy(frames)
        tensors[f"pre.{name}.size"] = torch.tensor(size, dtype=torch.int64)
        tensors[f"pre.{name}.grid"] = grid.reshape(3).to(torch.int64)
        tensors[f"pre.{name}.codes"] = encode_codes(pv.to(torch.float32), lut, name)
    save_deterministic(tensors, args.out, {"transformers": transformers.__version__, "torch": torch.__version__,
                                           "cases": str(len(params))})
    print(f"wrote {args.out}: {len(params)} size cases, {len(PRE_CASES)} row cases")


if __name__ == "__main__":
    main()
