"""Python binding and Ray job timings for docs/PERFORMANCE.md: the binding's overhead over the library on 448²
images, and the Ray Data job's throughput (1 actor × 2 threads, 2 actors × 1 thread) next to the CLI on one corpus.

    python bench/python_bench.py --qvl build/qvl [--depth 8] [--images 24] [--rounds 2] [--work DIR]
                                 [--ray-only] [--baseline MODULE]

Runs with the qvl package importable (installed, or PYTHONPATH=python QVL_LIBRARY=build). The checkpoint is
`qvl synth --preset qwen3-vl-2b` (its real tower width, DeepStack) with --depth blocks; the corpus is 448×448
JPEGs cut from the repository's photographs. Configurations alternate within each round (A/B), so that a busy
machine slows them alike; medians over rounds are printed as a markdown table. --ray-only skips the binding's
overhead; --baseline MODULE (say a copy of an older qvl/ray.py importable as MODULE) adds its 1 actor × 2 threads
job to the alternation, for an A/B of a change to the job."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import qvl

ROOT = Path(__file__).resolve().parents[1]


def corpus(d: Path, n: int) -> list[str]:
    from PIL import Image

    srcs = [Image.open(ROOT / "tests/data/photos" / f).convert("RGB") for f in ("rocket.jpg", "coffee.png",
                                                                                "chelsea.png")]
    out = []
    for i in range(n):
        im = srcs[i % len(srcs)]
        w, h = im.size
        s = min(w, h)
        x = (i * 37) % max(1, w - s + 1)
        crop = im.crop((x, 0, x + s, s)).resize((448, 448), Image.BICUBIC)
        p = d / f"img{i:03d}.jpg"
        crop.save(p, quality=90)
        out.append(str(p))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qvl", default=str(ROOT / "build/qvl"))
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--images", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", default=None)
    ap.add_argument("--ray-only", action="store_true")
    ap.add_argument("--baseline", default=None)
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="qvl-pybench-"))
    work.mkdir(parents=True, exist_ok=True)
    model = qvl.synth(work / "m", "qwen3-vl-2b", seed=1, depth=a.depth, deepstack=[1, min(3, a.depth - 1)])
    files = corpus(work, a.images)
    print(f"model: qwen3-vl-2b tower, depth {a.depth}; corpus: {len(files)} JPEGs 448x448; load "
          f"{os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} CPUs", flush=True)

    if not a.ray_only:
        binding_overhead(a, model, files, work)
    ray_jobs(a, model, files, work)
    return 0


def binding_overhead(a: argparse.Namespace, model: str, files: list[str], work: Path) -> None:
    # A) binding overhead: per image, the call's wall time less the library's own decode + preprocess + encode
    enc = qvl.Encoder(model, threads=2)
    enc.encode(files[:1])
    over, lib_ms, wall_ms = [], [], []
    bind_total, cli_total = [], []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for f in files:
            t = time.perf_counter()
            [r] = enc.encode([f])
            w = (time.perf_counter() - t) * 1e3
            c = r.decode_ms + r.preprocess_ms + r.encode_ms
            over.append(w - c)
            lib_ms.append(r.encode_ms)
            wall_ms.append(w)
        bind_total.append(time.perf_counter() - t0)
        out = work / "cli.safetensors"
        t0 = time.perf_counter()
        subprocess.run([a.qvl, "encode", "-q", "-t", "2", "--model", model, *files, "-o", str(out)], check=True)
        cli_total.append(time.perf_counter() - t0)
    o = statistics.median(over)
    e = statistics.median(lib_ms)
    print("\n| 448² image, 2 threads | median |\n|---|---|")
    print(f"| library encode (qvl_plan_encode) | {e:.1f} ms |")
    print(f"| binding call, wall | {statistics.median(wall_ms):.1f} ms |")
    print(f"| binding overhead (wall − library decode/preprocess/encode) | {o:.2f} ms ({100 * o / e:.2f} % of the"
          f" encode) |")
    print(f"| {len(files)} images: binding, one call each | {statistics.median(bind_total):.2f} s |")
    print(f"| {len(files)} images: `qvl encode -t 2 FILES` (model load included) | {statistics.median(cli_total):.2f}"
          " s |", flush=True)


def ray_jobs(a: argparse.Namespace, model: str, files: list[str], work: Path) -> None:
    # B) Ray: the job against the CLI on the same corpus
    import importlib

    import ray

    import qvl.ray as qray

    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    confs = ["cli", "1x2", "2x1"] + (["base1x2"] if a.baseline else [])
    base = importlib.import_module(a.baseline) if a.baseline else None
    times: dict[str, list[float]] = {c: [] for c in confs}
    for rnd in range(a.rounds):
        for conf in (confs if rnd % 2 == 0 else confs[::-1]):
            if conf == "cli":
                t0 = time.perf_counter()
                subprocess.run([a.qvl, "encode", "-q", "-t", "2", "--model", model, *files, "-o",
                                str(work / "cli.safetensors")], check=True)
                times[conf].append(time.perf_counter() - t0)
                print(f"round {rnd} cli: {times[conf][-1]:.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
                continue
            actors, threads = (2, 1) if conf == "2x1" else (1, 2)
            out = work / f"ray-{conf}-{rnd}"
            s = (base if conf == "base1x2" else qray).embed(  # type: ignore[union-attr]
                model, files, str(out), actors=actors, threads_per_actor=threads, batch_size=4, resume=False)
            assert s["lost"] == 0 and s["errors"] == 0, s
            times[conf].append(s["seconds"])
            print(f"round {rnd} {conf}: {s['seconds']:.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    ray.shutdown()
    cli = statistics.median(times["cli"])
    print(f"\n| {len(files)} × 448², 2 CPUs | wall (median of {a.rounds}) | images/s | vs CLI |\n|---|---|---|---|")
    names = [("cli", "`qvl encode -t 2` (one process)"), ("1x2", "Ray job, 1 actor × 2 threads"),
             ("2x1", "Ray job, 2 actors × 1 thread")]
    if a.baseline:
        names.append(("base1x2", f"Ray job `{a.baseline}`, 1 actor × 2 threads"))
    for conf, name in names:
        t = statistics.median(times[conf])
        print(f"| {name} | {t:.2f} s | {len(files) / t:.2f} | {100 * cli / t:.0f} % |")
    print(f"\nall runs: {times}; load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
