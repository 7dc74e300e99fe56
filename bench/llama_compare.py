#!/usr/bin/env python3
"""qvl's f32 output next to llama.cpp's on the very same preprocessed input: the relative error per output part.

Makes one (1, g, g) grid of pixel rows (uniform in [-1, 1], seeded; both temporal halves of each row differ),
encodes it with `qvl encode --pixels ... --precision f32`, and with bench/llama_clip_bench (compiled against a
llama.cpp build, see bench/run_peers.sh) as one two-frame encode (--frames 2), which applies the two temporal
kernels to the two halves as the checkpoint's Conv3d does: the same input, no preprocessing in between. Then
compares llama.cpp's [tokens, out_hidden * (1 + L)] output with qvl's "merged" and "deepstack{k}" parts:
rel = ||llama - qvl|| / ||qvl|| (Frobenius), and the largest absolute difference, per part and per mmproj file.

    python bench/llama_compare.py --qvl build/qvl --bench WORK/llama_clip_bench --model DIR \
        --mmproj A.gguf [--mmproj B.gguf ...] [--size 448] [--threads 2] [--work DIR] [--seed 1]
Pinned versions: bench/requirements.txt (numpy, safetensors).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qvl", required=True)
    ap.add_argument("--bench", required=True, help="llama_clip_bench built against a llama.cpp build")
    ap.add_argument("--model", required=True)
    ap.add_argument("--mmproj", action="append", required=True)
    ap.add_argument("--size", type=int, default=448)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=None, help="scratch directory (default: a new temporary one)")
    a = ap.parse_args()
    if a.size % 32:
        ap.error("--size must be a multiple of 32")
    work = a.work or tempfile.mkdtemp(prefix="qvl-llama-compare-")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    v = cfg.get("vision_config", cfg)
    out_hidden = int(v["out_hidden_size"])
    n_ds = len(v.get("deepstack_visual_indexes", []))
    g = a.size // 16
    rows = np.random.default_rng(a.seed).uniform(-1.0, 1.0, size=(g * g, 1536)).astype(np.float32)
    rows_path = os.path.join(work, "rows.npy")
    np.save(rows_path, rows)

    qvl_out = os.path.join(work, "qvl.safetensors")
    subprocess.run([a.qvl, "encode", "--model", a.model, "--pixels", rows_path, "--grid", f"1,{g},{g}", "-o", qvl_out,
                    "--precision", "f32", "--threads", str(a.threads), "-q"], check=True)
    q = load_file(qvl_out)
    parts = [("merged", q["merged"])] + [(f"deepstack{k}", q[f"deepstack{k}"]) for k in range(n_ds)]
    ref = np.concatenate([p for _, p in parts], axis=1)
    print(f"qvl f32: {ref.shape[0]} tokens x {ref.shape[1]} ({out_hidden} x (1 + {n_ds} DeepStack))")

    worst = 0.0
    for mm in a.mmproj:
        out = os.path.join(work, "llama-" + os.path.basename(mm) + ".npy")
        r = subprocess.run([a.bench, mm, str(a.size), "--fa", "0", "--threads", str(a.threads), "--repeat", "1",
                            "--frames", "2", "--rows", rows_path, "--out", out], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{mm}: llama_clip_bench failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
            return 1
        got = np.load(out)
        if got.shape != ref.shape:
            print(f"{mm}: shape {got.shape}, qvl's is {ref.shape}: not comparable")
            return 1
        msg = []
        off = 0
        for name, p in parts:
            d = got[:, off:off + p.shape[1]].astype(np.float64) - p
            rel = float(np.linalg.norm(d) / max(np.linalg.norm(p), 1e-30))
            worst = max(worst, rel)
            msg.append(f"{name} rel {rel:.3g} max|d| {float(np.abs(d).max()):.3g}")
            off += p.shape[1]
        print(f"{os.path.basename(mm)}: shape {got.shape[0]}x{got.shape[1]} = qvl's; " + "; ".join(msg))
    print(f"worst relative error: {worst:.3g} (scratch: {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
