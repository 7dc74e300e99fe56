#!/usr/bin/env python3
"""Where qvl's bf16 error comes from: an emulation of precision bf16 in torch on a parity fixture's checkpoint and
rows, with each rounding site switched off in turn.

The emulation runs transformers' own float32 vision model with the inputs and weights of chosen linears rounded to
bf16 (nearest even; the products of two bf16 are exact in f32, the sums are f32) and attention's Q, K, V and P
rounded likewise (P = exp(s - max) rounded before both the row sum and P·V, as qvl's kernels do). Sites: qkv, proj,
fc1, fc2 (the block linears), qk (Q and K), pv (P and V), merger (the final and DeepStack mergers' linears, f32 in
qvl). For each variant it prints ||emulated - f32|| / ||f32|| per stage divided by transformers' own bf16 run's
error (the parity gate's ratio).

    python tests/oracle/bf16_ablation.py --model CKPT --fixture FIXTURE.safetensors [--variants all,-fc2,...]

CKPT: the fixture's checkpoint (`qvl synth` with the fixture's synth_* metadata, --layout hf). One thread.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

SITES = ("qkv", "proj", "fc1", "fc2", "qk", "pv")


def rb(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


class Emu:
    def __init__(self) -> None:
        self.on: set[str] = set()


def install(model, emu: Emu) -> None:
    def lin(site, mod):
        orig = mod.forward

        def fwd(x):
            if site in emu.on:
                return F.linear(rb(x), rb(mod.weight), mod.bias)
            return orig(x)

        mod.forward = fwd

    for blk in model.blocks:
        lin("qkv", blk.attn.qkv)
        lin("proj", blk.attn.proj)
        lin("fc1", blk.mlp.linear_fc1)
        lin("fc2", blk.mlp.linear_fc2)
    mergers = [model.merger] + list(getattr(model, "deepstack_merger_list", []))
    for m in mergers:
        for name in ("linear_fc1", "linear_fc2"):
            lin("merger", getattr(m, name))

    sdpa = F.scaled_dot_product_attention

    def attn(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if not ({"qk", "pv"} & emu.on):
            return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)
        sc = scale if scale is not None else 1.0 / q.shape[-1] ** 0.5
        if "qk" in emu.on:
            q, k = rb(q), rb(k)
        s = torch.matmul(q, k.transpose(-1, -2)) * sc
        if attn_mask is not None:
            s = s + attn_mask if attn_mask.dtype != torch.bool else s.masked_fill(~attn_mask, float("-inf"))
        p = torch.exp(s - s.amax(-1, keepdim=True))
        if "pv" in emu.on:
            p, v = rb(p), rb(v)
        return torch.matmul(p, v) / p.sum(-1, keepdim=True)

    F.scaled_dot_product_attention = attn
    torch.nn.functional.scaled_dot_product_attention = attn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--variants", default="all,-qkv,-proj,-fc1,-fc2,-qk,-pv,all+merger,qkv,proj,fc1,fc2,qk,pv")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import safetensors

    with safetensors.safe_open(args.fixture, framework="pt") as f:
        px = f.get_tensor("pixel_values")
        grid = f.get_tensor("grid_thw")
        meta = f.metadata()
    with open(os.path.join(args.model, "config.json")) as fh:
        mt = json.load(fh)["model_type"]
    m32, _ = oracle.load_model(args.model, mt, torch.float32)
    ref = oracle.run(m32, px, grid)
    emu = Emu()
    install(m32, emu)
    stages = [s for s in ref if s == "merged" or s.startswith("blk") or s.startswith("deepstack")]
    stages.sort(key=lambda s: (0, int(s[3:])) if s.startswith("blk") else (1, s))
    tf = {s: float(meta[f"bf16_relerr.{s}"]) for s in stages if f"bf16_relerr.{s}" in meta}
    print(f"fixture {os.path.basename(args.fixture)}: rows {px.shape[0]}; ratio = emulated error / tf-bf16 error")
    print(f"{'variant':14s} " + " ".join(f"{s:>10s}" for s in stages))
    for var in args.variants.split(","):
        if var.startswith("all"):
            on = set(SITES)
            if var.endswith("+merger"):
                on.add("merger")
        elif var.startswith("-"):
            on = set(SITES) - {var[1:]}
        else:
            on = {var}
        emu.on = on
        out = oracle.run(m32, px, grid)
        emu.on = set()
        row = [oracle.err(out[s], ref[s])[0] / tf[s] for s in stages]
        print(f"{var:14s} " + " ".join(f"{r:10.3f}" for r in row), flush=True)


if __name__ == "__main__":
    main()
