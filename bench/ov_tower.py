#!/usr/bin/env python3
"""Peer timing: OpenVINO's CPU plugin running transformers' Qwen3-VL / Qwen3.5 vision model, exported per case for a
fixed grid, on the same checkpoint and the same pixel rows as `qvl bench` (and bench/hf_tower.py).

Per case, the vision model (loaded in float32 by bench/hf_tower.py's load_model) is wrapped so that forward takes
only the pixel rows: grid_thw is a constant of the wrapper, so the position-embedding interpolation, the rotary
tables and the per-item attention split fold into constants of the graph, as OpenVINO's own export of these models
does. The wrapper returns the merged tokens, with the DeepStack mergers' outputs concatenated after them where the
tower has any (the layout of qvl's output: out_hidden x (1 + DeepStack mergers)). It is converted with
openvino.convert_model(example_input=rows), reshaped to the case's static [S, row_len] and compiled for "CPU" with
INFERENCE_NUM_THREADS=--threads and, by default, the plugin's own inference precision (bf16 on a CPU with AMX or
AVX512-BF16, f32 elsewhere); --precision bf16|f32 sets INFERENCE_PRECISION_HINT instead. The precision the compiled
model reports is the dtype printed. Rows are `qvl bench`'s deterministic rows (bench/hf_tower.py's bench_rows).

Each case runs once untimed (warm-up), then --repeat timed runs; the median is printed, one line a case:
    ov_tower dtype=bf16 case=image448 grid=1x28x28 patches=784 threads=2 median_ms=... runs_ms=... convert_s=...
        compile_s=...
With --check, the first case's output is also set against transformers float32 on the same rows (and, for scale,
transformers bfloat16's against the same float32): max |difference| and ||difference|| / ||float32||.

Usage:
    python bench/ov_tower.py --model DIR [--sizes 448,896] [--video 8x448] [--batch 8x224] [--threads 2]
                             [--repeat 3] [--precision default|bf16|f32] [--check]
Pinned versions: bench/requirements.txt.
"""
from __future__ import annotations

import argparse
import collections
import copy
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_tower  # noqa: E402  (same directory: row generation, cases, model loading)
from hf_tower import add_case_args, bench_cases, bench_rows, die, grid_desc, load_model  # noqa: E402

import numpy as np  # noqa: E402
import openvino as ov  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

hf_tower.PROG = "ov_tower"


class FixedGridTower(torch.nn.Module):
    """The vision model with grid_thw fixed: forward(pixel_values) -> merged tokens [+ DeepStack outputs]."""

    def __init__(self, model: torch.nn.Module, grids: list[tuple[int, int, int]]):
        super().__init__()
        self.model = model
        self.register_buffer("grid_thw", torch.tensor(grids, dtype=torch.int64), persistent=False)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        out = self.model(pixel_values, grid_thw=self.grid_thw)
        deepstack = getattr(out, "deepstack_features", None) or []
        return torch.cat([out.pooler_output, *deepstack], dim=-1) if deepstack else out.pooler_output


def op_counts(model: ov.Model) -> str:
    c = collections.Counter(op.get_type_name() for op in model.get_ordered_ops())
    return " ".join(f"{k}={c[k]}" for k in ("MatMul", "ScaledDotProductAttention") if c[k])


def runtime_kernels(compiled: ov.CompiledModel) -> tuple[str, str]:
    """(the primitive most of the runtime graph's GEMM nodes ran, a summary of the heavy nodes: GEMMs, the patch
    convolution, attention, and Subgraph, the plugin's fused snippets, where its attention lands on AVX512 / AMX)."""
    c: collections.Counter = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        layer = rt["layerType"].astype(str) if "layerType" in rt else op.get_type_name()
        if layer in ("FullyConnected", "MatMul", "Convolution", "ScaledAttn", "Subgraph"):
            prim = rt["primitiveType"].astype(str) if "primitiveType" in rt else "?"
            c[(layer, prim)] += 1
    main = max((k for k in c if k[0] in ("FullyConnected", "MatMul")), key=lambda k: c[k], default=("", "?"))[1]
    return main, ", ".join(f"{layer}/{prim} x{n}" for (layer, prim), n in c.most_common())


def errors(got: np.ndarray, ref: np.ndarray) -> str:
    d = got.astype(np.float64) - ref.astype(np.float64)
    rel = float(np.linalg.norm(d) / max(float(np.linalg.norm(ref.astype(np.float64))), 1e-30))
    return f"max_abs={float(np.abs(d).max()):.3g} rel={rel:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_case_args(ap)
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="INFERENCE_NUM_THREADS, and torch's threads for the export (default: all cores)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case after one warm-up")
    ap.add_argument("--precision", default="default", choices=("default", "bf16", "f32"),
                    help="INFERENCE_PRECISION_HINT (default: the CPU plugin's own, bf16 where the CPU has it)")
    ap.add_argument("--check", action="store_true",
                    help="set the first case's output against transformers float32 (and bfloat16) on the same rows")
    a = ap.parse_args()
    if a.repeat < 1:
        die("--repeat must be >= 1")
    cases = bench_cases(a.sizes, a.video, a.batch)
    if not cases:
        die("no case to run")

    torch.set_num_threads(a.threads)
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": a.threads}
    if a.precision != "default":
        config["INFERENCE_PRECISION_HINT"] = a.precision
    caps = ",".join(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    print(f"ov_tower: openvino {ov.__version__} torch {torch.__version__} transformers {transformers.__version__} "
          f"threads={a.threads} precision={a.precision} "
          f"plugin_default={core.get_property('CPU', 'INFERENCE_PRECISION_HINT').get_type_name()} "
          f"capabilities={caps} repeat={a.repeat}", flush=True)

    t0 = time.perf_counter()
    model, clsname = load_model(a.model, torch.float32)
    row_len = model.config.in_channels * model.config.temporal_patch_size * model.config.patch_size ** 2
    print(f"ov_tower: {clsname} float32 loaded in {time.perf_counter() - t0:.1f}s", flush=True)

    for ci, (name, grids) in enumerate(cases):
        S = sum(t * h * w for t, h, w in grids)
        rows = bench_rows(S * row_len).reshape(S, row_len)
        px = torch.from_numpy(rows)
        wrapper = FixedGridTower(model, grids).eval()

        t0 = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings: the grid-derived values are meant to be constants
            ov_model = ov.convert_model(wrapper, example_input=px)
        ov_model.reshape({0: [S, row_len]})
        convert_s = time.perf_counter() - t0
        ops = op_counts(ov_model)
        t0 = time.perf_counter()
        compiled = core.compile_model(ov_model, "CPU", config)
        compile_s = time.perf_counter() - t0
        dtype = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        kern, kern_all = runtime_kernels(compiled)
        print(f"ov_tower: case={name} converted in {convert_s:.1f}s ({ops}), compiled in {compile_s:.1f}s "
              f"(inference precision {dtype}, threads {compiled.get_property('INFERENCE_NUM_THREADS')}); "
              f"kernels={kern} runtime: {kern_all}", flush=True)
        del ov_model

        req = compiled.create_infer_request()
        times = []
        for r in range(-1, a.repeat):
            t = time.perf_counter()
            req.infer({0: rows}, share_inputs=True)
            t = time.perf_counter() - t
            if r >= 0:
                times.append(t * 1e3)
        print(f"ov_tower dtype={dtype} case={name} grid={grid_desc(grids)} patches={S} threads={a.threads} "
              f"median_ms={statistics.median(times):.1f} runs_ms={','.join(f'{t:.1f}' for t in times)} "
              f"convert_s={convert_s:.1f} compile_s={compile_s:.1f}", flush=True)

        if a.check and ci == 0:
            got = req.get_output_tensor(0).data.copy()
            with torch.inference_mode():
                ref = wrapper(px).numpy()
                bf = FixedGridTower(copy.deepcopy(model).to(torch.bfloat16), grids).eval()
                hf_bf16 = bf(px.to(torch.bfloat16)).float().numpy()
                del bf
            if got.shape != ref.shape:
                die(f"--check: OpenVINO's output is {got.shape}, transformers' {ref.shape}")
            print(f"ov_tower check case={name} out={got.shape[0]}x{got.shape[1]} vs transformers float32: "
                  f"openvino {dtype} {errors(got, ref)}; transformers bfloat16 {errors(hf_bf16, ref)}", flush=True)
        del req, compiled


if __name__ == "__main__":
    main()
