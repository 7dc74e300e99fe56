#!/usr/bin/env python3
"""Peer timing: transformers' own Qwen3-VL / Qwen3.5 vision model on the CPU, on the same checkpoint and the same
pixel rows as `qvl bench`, so the two can be compared case by case.

The model is loaded from a qvl-synth (or real) HF-layout checkpoint through the vision model class's
from_pretrained, exactly as tests/oracle/oracle.py loads it, in float32 and/or bfloat16, with sdpa attention.
Rows are, by default, the deterministic rows `qvl bench` feeds qvl_encode (xorshift64 from 0x243F6A8885A308D3,
((state >> 40) & 0xffff) / 32767.5 - 1 as float32, restarted for every case) — reproduced bit for bit here —
or are read from a float32 .npy [S, row_len] with --rows and --grid.

Each case runs once untimed (warm-up), then --repeat timed runs; the median is printed, one line a case:
    hf_tower dtype=float32 case=image448 grid=1x28x28 patches=784 threads=2 median_ms=... runs_ms=...

Usage:
    python bench/hf_tower.py --model DIR [--sizes 448,896] [--video 8x448] [--batch 8x224] [--threads 2]
                             [--repeat 3] [--dtypes float32,bfloat16]
    python bench/hf_tower.py --model DIR --rows ROWS.npy --grid 1,28,28 [--grid ...]
Pinned versions: bench/requirements.txt.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import transformers

# top-level model_type -> (module, vision model class), as in tests/oracle/oracle.py
MODEL_CLASSES = {
    "qwen3_vl": ("transformers.models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLVisionModel"),
    "qwen3_vl_moe": ("transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", "Qwen3VLMoeVisionModel"),
    "qwen3_5": ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5VisionModel"),
    "qwen3_5_moe": ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeVisionModel"),
}
BENCH_SEED = 0x243F6A8885A308D3  # tools/cli_bench.c
MASK64 = (1 << 64) - 1
PROG = "hf_tower"  # error prefix; bench/ov_tower.py, which imports this module, sets its own


def die(msg: str) -> None:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def _xorshift(x):
    """One xorshift64 step (13, 7, 17) on a Python int or a numpy uint64 array."""
    if isinstance(x, int):
        x ^= (x << 13) & MASK64
        x ^= x >> 7
        x ^= (x << 17) & MASK64
        return x
    x = x ^ (x << np.uint64(13))
    x = x ^ (x >> np.uint64(7))
    return x ^ (x << np.uint64(17))


def bench_rows(n: int, seed: int = BENCH_SEED) -> np.ndarray:
    """The first n floats `qvl bench` generates: state_i = T^i(seed) (T = one xorshift64 step), value_i =
    float32((state_{i+1} >> 40) & 0xffff) / 32767.5f - 1.0f.

    A Python loop over ~10^7 values is slow, so the stream is cut into B lanes of L steps each, advanced together
    with numpy. T is linear over GF(2), so the lane starts T^(j·L)(seed) come from the 64 columns of the matrix
    of T^L applied to the previous lane start."""
    if n <= 0:
        return np.zeros(0, np.float32)
    L = max(1, int(np.ceil(np.sqrt(n))))
    B = -(-n // L)
    # columns of T^L: the image of each basis vector after L steps
    cols = np.array([1 << b for b in range(64)], dtype=np.uint64)
    for _ in range(L):
        cols = _xorshift(cols)
    cols = [int(c) for c in cols]
    starts = np.empty(B, dtype=np.uint64)
    s = seed & MASK64
    for j in range(B):
        starts[j] = s
        t, b = 0, 0
        while s:
            if s & 1:
                t ^= cols[b]
            s >>= 1
            b += 1
        s = t
    out = np.empty((L, B), dtype=np.uint64)
    x = starts
    for k in range(L):
        x = _xorshift(x)
        out[k] = x
    vals = ((out.T.reshape(-1)[:n] >> np.uint64(40)) & np.uint64(0xFFFF)).astype(np.float32)
    return vals / np.float32(32767.5) - np.float32(1.0)


def parse_pair(s: str) -> tuple[int, int]:
    a, _, b = s.partition("x")
    try:
        return int(a), int(b)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not NxS")


def parse_grid(s: str) -> tuple[int, int, int]:
    try:
        t, h, w = (int(x) for x in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad grid {s!r}, expected t,h,w")
    return t, h, w


def bench_cases(sizes: str, video: tuple[int, int],
                batch: tuple[int, int]) -> list[tuple[str, list[tuple[int, int, int]]]]:
    """The cases `qvl bench` runs, as (name, [grid t,h,w of each item]): --sizes, --video FxS, --batch NxS."""
    cases: list[tuple[str, list[tuple[int, int, int]]]] = []
    for s in filter(None, sizes.split(",")):
        side = int(s)
        if side % 32:
            die(f"--sizes: {side} is not a multiple of 32")
        cases.append((f"image{side}", [(1, side // 16, side // 16)]))
    f, s = video
    if f > 0 and s > 0:
        cases.append((f"video{f}x{s}", [(f // 2, s // 16, s // 16)]))
    n, s = batch
    if n > 0 and s > 0:
        cases.append((f"batch{n}x{s}", [(1, s // 16, s // 16)] * n))
    return cases


def grid_desc(grids: list[tuple[int, int, int]]) -> str:
    """1x28x28, 8*1x14x14, or 1x28x28+1x14x14 for mixed grids."""
    return "+".join(f"{t}x{h}x{w}" for t, h, w in grids) if len(set(grids)) > 1 else \
        (f"{len(grids)}*" if len(grids) > 1 else "") + "x".join(map(str, grids[0]))


def load_model(model_dir: str, dtype: torch.dtype):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    mt = cfg.get("model_type")
    if mt not in MODEL_CLASSES:
        die(f"{model_dir}: model_type {mt!r} is not one of {sorted(MODEL_CLASSES)}")
    modname, clsname = MODEL_CLASSES[mt]
    cls = getattr(importlib.import_module(modname), clsname)
    model, info = cls.from_pretrained(
        model_dir,
        dtype=dtype,
        attn_implementation="sdpa",
        key_mapping={r"^model\.visual\.": ""},
        output_loading_info=True,
    )
    bad = {k: sorted(v) for k, v in info.items() if v}
    if bad:
        die(f"loading {model_dir} as {clsname} ({dtype}): {json.dumps(bad)[:2000]}")
    return model.eval(), clsname


def add_case_args(ap: argparse.ArgumentParser) -> None:
    """--model and the cases (--sizes, --video, --batch), as `qvl bench` takes them; bench/ov_tower.py too."""
    ap.add_argument("--model", required=True, help="HF-layout checkpoint directory")
    ap.add_argument("--sizes", default="448,896", help="square image sides, multiples of 32 ('' for none)")
    ap.add_argument("--video", type=parse_pair, default=(8, 448), help="FRAMESxSIDE (0x0 to skip)")
    ap.add_argument("--batch", type=parse_pair, default=(8, 224), help="NxSIDE images in one call (0x0 to skip)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_case_args(ap)
    ap.add_argument("--rows", help="float32 .npy [S, row_len] to encode instead of the bench cases (needs --grid)")
    ap.add_argument("--grid", type=parse_grid, action="append", help="t,h,w of each item in --rows, in row order")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads (default: all cores)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case after one warm-up")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma list of float32, bfloat16")
    a = ap.parse_args()
    if a.repeat < 1:
        die("--repeat must be >= 1")

    torch.set_num_threads(a.threads)
    if a.rows:
        if not a.grid:
            die("--rows needs --grid")
        cases = [("rows", a.grid)]
    else:
        cases = bench_cases(a.sizes, a.video, a.batch)

    print(f"hf_tower: torch {torch.__version__} transformers {transformers.__version__} threads={a.threads} "
          f"cpu_capability={torch.backends.cpu.get_cpu_capability()} repeat={a.repeat}", flush=True)
    file_rows = np.load(a.rows) if a.rows else None
    for dname in filter(None, a.dtypes.split(",")):
        dtype = getattr(torch, dname, None)
        if dtype not in (torch.float32, torch.bfloat16):
            die(f"--dtypes: {dname!r} is not float32 or bfloat16")
        t0 = time.perf_counter()
        model, clsname = load_model(a.model, dtype)
        load_s = time.perf_counter() - t0
        row_len = model.config.in_channels * model.config.temporal_patch_size * model.config.patch_size ** 2
        print(f"hf_tower: {clsname} {dname} loaded in {load_s:.1f}s", flush=True)
        for name, grids in cases:
            S = sum(t * h * w for t, h, w in grids)
            if file_rows is not None:
                if file_rows.shape != (S, row_len):
                    die(f"{a.rows}: shape {file_rows.shape}, grids need ({S}, {row_len})")
                rows = np.ascontiguousarray(file_rows, dtype=np.float32)
            else:
                rows = bench_rows(S * row_len).reshape(S, row_len)
            px = torch.from_numpy(rows).to(dtype)
            g = torch.tensor(grids, dtype=torch.int64)
            times = []
            with torch.inference_mode():
                for r in range(-1, a.repeat):
                    t = time.perf_counter()
                    model(px, grid_thw=g)
                    t = time.perf_counter() - t
                    if r >= 0:
                        times.append(t * 1e3)
            print(f"hf_tower dtype={dname} case={name} grid={grid_desc(grids)} patches={S} threads={a.threads} "
                  f"median_ms={statistics.median(times):.1f} runs_ms={','.join(f'{t:.1f}' for t in times)}",
                  flush=True)
        del model


if __name__ == "__main__":
    main()
