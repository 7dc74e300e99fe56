#!/usr/bin/env python3
"""Reference oracle for the qvl vision tower.

Loads an HF-layout checkpoint (as written by `qvl synth --layout hf`) into transformers' own vision model class
through `from_pretrained(dtype=...)`, runs it on CPU in float32 and in bfloat16 on deterministic pixel values, captures
every intermediate stage with forward hooks, and writes one safetensors fixture holding the inputs, the float32 stages
(written byte-reproducibly) and, in `__metadata__`, the provenance plus the bf16 run's error against the f32 run per stage.

Usage:
    python oracle.py --model DIR --grid 1,8,8 [--grid t,h,w ...] --seed 0 --out FIXTURE.safetensors [--stages all|ends]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys

import numpy as np
import safetensors
import torch
import transformers

# --------------------------------------------------------------------------------------------------------------------
# model classes (transformers 5.23)

MODEL_CLASSES = {
    # top-level model_type -> (module, vision model class)
    "qwen3_vl": ("transformers.models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLVisionModel"),
    "qwen3_vl_moe": ("transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", "Qwen3VLMoeVisionModel"),
    "qwen3_5": ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5VisionModel"),
    "qwen3_5_moe": ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeVisionModel"),
}
PREFIX = "model.visual."
ATTN_IMPL = "sdpa"
NUM_THREADS = 1  # determinism over speed; recorded in the metadata
PIXEL_GENERATOR = "torch.Generator('cpu').manual_seed(seed); torch.rand(S, K, generator=g, dtype=float32) * 2 - 1"


def die(msg: str) -> None:
    print(f"oracle: error: {msg}", file=sys.stderr)
    sys.exit(1)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def parse_grid(s: str) -> tuple[int, int, int]:
    try:
        t, h, w = (int(x) for x in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad grid {s!r}, expected t,h,w")
    if t < 1 or h < 2 or w < 2 or h % 2 or w % 2:
        raise argparse.ArgumentTypeError(f"bad grid {s!r}: need t >= 1 and even h, w >= 2")
    return t, h, w


def stored_dtype(st_path: str) -> str:
    dtypes = set()
    with safetensors.safe_open(st_path, framework="pt") as f:
        keys = list(f.keys())
        for k in keys:
            if k.startswith(PREFIX):
                dtypes.add(str(f.get_slice(k).get_dtype()))
    if not keys or not dtypes:
        die(f"{st_path}: no tensors named {PREFIX}*")
    return ",".join(sorted(dtypes))


def load_model(model_dir: str, model_type: str, dtype: torch.dtype):
    import importlib

    modname, clsname = MODEL_CLASSES[model_type]
    cls = getattr(importlib.import_module(modname), clsname)
    # The vision config class has base_config_key = "vision_config", so from_pretrained picks the `vision_config`
    # sub-dict of the top-level config.json. key_mapping strips the checkpoint prefix.
    model, info = cls.from_pretrained(
        model_dir,
        dtype=dtype,
        attn_implementation=ATTN_IMPL,
        key_mapping={r"^model\.visual\.": ""},
        output_loading_info=True,
    )
    bad = {k: sorted(v) for k, v in info.items() if v}
    if bad:
        die(f"loading {model_dir} as {clsname} ({dtype}): {json.dumps(bad)[:2000]}")
    model.eval()
    if model.config._attn_implementation != ATTN_IMPL:
        die(f"attn implementation is {model.config._attn_implementation}, wanted {ATTN_IMPL}")
    inv = model.rotary_pos_emb.inv_freq
    if inv.dtype != torch.float32:
        die(f"rotary inv_freq buffer is {inv.dtype} after from_pretrained(dtype={dtype}); expected float32")
    for name, p in model.named_parameters():
        if p.dtype != dtype:
            die(f"parameter {name} is {p.dtype}, wanted {dtype}")
    return model, cls


def run(model, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run the model's own forward, capturing stages with hooks. Returns float32 copies."""
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    caps: dict[str, torch.Tensor] = {}
    handles = []

    def out_hook(name):
        def fn(mod, args, out):
            caps[name] = out.detach().clone()

        return fn

    def rope_hook(mod, args, out):
        caps["rope_cos"], caps["rope_sin"] = (o.detach().clone() for o in out)

    def blk0_pre_hook(mod, args, kwargs):
        caps["_blk0_in"] = args[0].detach().clone()

    handles.append(model.patch_embed.register_forward_hook(out_hook("patch")))
    handles.append(model.rotary_pos_emb.register_forward_hook(rope_hook))
    handles.append(model.blocks[0].register_forward_pre_hook(blk0_pre_hook, with_kwargs=True))
    for i, blk in enumerate(model.blocks):
        handles.append(blk.register_forward_hook(out_hook(f"blk{i}")))
    handles.append(model.merger.register_forward_hook(out_hook("merged")))
    for k, m in enumerate(getattr(model, "deepstack_merger_list", [])):
        handles.append(m.register_forward_hook(out_hook(f"deepstack{k}")))
    try:
        with torch.no_grad():
            out = model(pixel_values, grid_thw=grid_thw)
            # The interpolated position embedding the forward adds, recomputed with the very same helper and
            # expression as Qwen3VLVisionModel.forward / Qwen3_5VisionModel.forward (float32 weighted sum).
            idx, wts = get_vision_interpolation_indices_and_weights(
                grid_thw,
                num_grid_per_side=model.num_grid_per_side,
                mode=model.interpolation_mode,
                align_corners=model.interpolation_align_corners,
                spatial_merge_size=model.config.spatial_merge_size,
            )
            pos = (model.pos_embed(idx) * wts[:, :, None]).sum(1)
    finally:
        for h in handles:
            h.remove()

    # Self-checks: the recomputed pos is what the model added; the output object agrees with the hooks.
    dt = caps["patch"].dtype
    if not torch.equal(caps["patch"] + pos.to(dt), caps.pop("_blk0_in")):
        die("recomputed position embedding does not reproduce the input of block 0")
    if not torch.equal(out.pooler_output, caps["merged"]):
        die("pooler_output differs from the merger hook")
    if not torch.equal(out.last_hidden_state, caps[f"blk{len(model.blocks) - 1}"]):
        die("last_hidden_state differs from the last block hook")
    ds = getattr(out, "deepstack_features", None) or []
    for k, t in enumerate(ds):
        if not torch.equal(t, caps[f"deepstack{k}"]):
            die(f"deepstack_features[{k}] differs from its hook")
    caps["pos"] = pos  # float32 in both runs (the bf16 model casts it to bf16 only when adding)
    caps["pos_added"] = pos.to(dt)  # what is actually added (bf16 in the bf16 run)
    caps["rope_inv_freq"] = model.rotary_pos_emb.inv_freq.detach().clone()
    return {k: v.float().contiguous() for k, v in caps.items()}


def save_deterministic(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str]) -> None:
    """Write a safetensors file byte-reproducibly (safetensors' own writer orders `__metadata__` through a hash map,
    so two identical runs give different bytes). Header: sorted keys, tensors laid out in sorted-name order, header
    padded with spaces to a multiple of 8 as the format requires."""
    dtypes = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.uint8: "U8"}
    header: dict = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, off = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        b = t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":"), sort_keys=False).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    # read back through the safetensors package
    with safetensors.safe_open(path, framework="pt") as f:
        if f.metadata() != metadata or sorted(f.keys()) != sorted(tensors):
            die(f"{path}: read-back mismatch")
        for name in tensors:
            if not torch.equal(f.get_tensor(name), tensors[name]):
                die(f"{path}: read-back mismatch in {name}")


def err(a: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    a64, r64 = a.double(), ref.double()
    d = a64 - r64
    n = r64.norm().item()
    rel = d.norm().item() / n if n > 0 else float(d.norm().item() > 0) * float("inf")
    return rel, d.abs().max().item() if d.numel() else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint dir (config.json + model.safetensors, HF layout)")
    ap.add_argument("--grid", type=parse_grid, action="append", required=True, help="t,h,w (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", choices=("all", "ends"), default="all")
    ap.add_argument("--store-bf16", action="store_true", help="also store the bf16 run's stages as bf16.<stage> (f32)")
    ap.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                    help="extra __metadata__ entry (make_fixtures.sh records the synth parameters and fingerprint)")
    args = ap.parse_args()

    torch.set_num_threads(NUM_THREADS)
    torch.use_deterministic_algorithms(True)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    cfg_path = os.path.join(args.model, "config.json")
    st_path = os.path.join(args.model, "model.safetensors")
    for p in (cfg_path, st_path):
        if not os.path.isfile(p):
            die(f"missing {p}")
    with open(cfg_path) as f:
        cfg = json.load(f)
    model_type = cfg.get("model_type")
    if model_type not in MODEL_CLASSES:
        die(f"unsupported model_type {model_type!r} (known: {', '.join(MODEL_CLASSES)})")
    vc = cfg.get("vision_config") or die("config.json has no vision_config")
    tc = cfg.get("text_config") or {}
    if "hidden_size" in tc and tc["hidden_size"] != vc.get("out_hidden_size"):
        print(f"oracle: warning: text_config.hidden_size {tc['hidden_size']} != out_hidden_size "
              f"{vc.get('out_hidden_size')}", file=sys.stderr)

    models = {}
    for tag, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        models[tag], cls = load_model(args.model, model_type, dt)
    m32 = models["f32"]
    c = m32.config
    K = c.in_channels * c.temporal_patch_size * c.patch_size * c.patch_size
    grids = args.grid
    S = sum(t * h * w for t, h, w in grids)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    pixel_values = torch.rand(S, K, generator=g, dtype=torch.float32) * 2 - 1
    grid_thw = torch.tensor(grids, dtype=torch.int64)

    res = {tag: run(m, pixel_values, grid_thw) for tag, m in models.items()}
    f32, b16 = res["f32"], res["bf16"]
    if not torch.equal(f32["rope_inv_freq"], b16["rope_inv_freq"]):
        die("inv_freq differs between the f32 and bf16 models")

    depth = c.depth
    ds_names = sorted((k for k in f32 if k.startswith("deepstack")), key=lambda s: int(s[9:]))
    stage_order = ["patch", "pos", "pos_added"] + [f"blk{i}" for i in range(depth)] + ["merged"] + ds_names
    if args.stages == "all":
        stored = [s for s in stage_order if s != "pos_added"] + ["rope_inv_freq", "rope_cos", "rope_sin"]
    else:
        stored = ["patch", "pos"] + sorted({"blk0", f"blk{depth - 1}"}, key=lambda s: int(s[3:])) + ["merged"] + ds_names
        stored += ["rope_inv_freq"]

    tensors = {"pixel_values": pixel_values.contiguous(), "grid_thw": grid_thw.contiguous()}
    for s in stored:
        tensors[s] = f32[s]
        if args.store_bf16 and s in b16:
            tensors[f"bf16.{s}"] = b16[s]

    meta = {
        "format": "qvl-oracle-fixture/1",
        "generator": "tests/oracle/oracle.py",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "torch_num_threads": str(torch.get_num_threads()),
        "device": "cpu",
        "attn_implementation": m32.config._attn_implementation,
        "load": "from_pretrained(dir, dtype={float32,bfloat16}, attn_implementation='sdpa', "
                "key_mapping={'^model\\\\.visual\\\\.': ''})",
        "rope_inv_freq_dtype": str(m32.rotary_pos_emb.inv_freq.dtype).replace("torch.", "") + "/"
                               + str(models["bf16"].rotary_pos_emb.inv_freq.dtype).replace("torch.", ""),
        "pos_interpolation": "transformers.vision_utils.get_vision_interpolation_indices_and_weights"
                             "(mode=bilinear, align_corners=True): closed-form src=i*(G-1)/(n-1) fp32, fp32 weights, "
                             "fp32 sum over 4 taps (generation B)",
        "model_type": model_type,
        "model_class": f"{cls.__module__}.{cls.__name__}",
        "config_class": type(m32.config).__name__,
        "vision_config": json.dumps(vc, sort_keys=True),
        "weights_dtype": stored_dtype(st_path),
        "weights_file": "model.safetensors",
        "weights_sha256": sha256_file(st_path),
        "config_sha256": sha256_file(cfg_path),
        "seed": str(args.seed),
        "pixel_generator": PIXEL_GENERATOR,
        "grids": ";".join(",".join(map(str, g_)) for g_ in grids),
        "stages_mode": args.stages,
        "stages_stored": ",".join(stored),
        "stage_dtype": "float32 (f32 run); bf16.<stage> = bf16 run upcast to float32" if args.store_bf16
                       else "float32 (f32 run)",
        "depth": str(depth),
        "deepstack_visual_indexes": ",".join(map(str, getattr(c, "deepstack_visual_indexes", []) or [])),
        "bf16_err_note": "||bf16-f32||/||f32|| and max|bf16-f32| in float64; pos = fp32 sum before the bf16 cast, "
                         "pos_added = after it",
    }
    for kv in args.meta:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            die(f"--meta {kv!r}: expected KEY=VALUE")
        meta[key] = value
    for s in stage_order + ["rope_cos", "rope_sin", "rope_inv_freq"]:
        rel, mx = err(b16[s], f32[s])
        meta[f"bf16_relerr.{s}"] = repr(rel)
        meta[f"bf16_maxabs.{s}"] = repr(mx)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_deterministic(tensors, args.out, meta)
    summary = " ".join(f"{s}={float(meta['bf16_relerr.' + s]):.2e}" for s in stage_order)
    print(f"oracle: wrote {args.out}: S={S} stages={len(stored)} bf16 relerr: {summary}")


if __name__ == "__main__":
    main()
