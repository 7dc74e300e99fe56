#!/usr/bin/env python3
"""Draw a bench/run_peers.sh run as a PNG: one row of panels per tower (model), read from the run's own
machine-readable output (--work/results.tsv, with meta.tsv beside it).

    left panel:  time per case for every tool and precision (qvl f32, qvl bf16 per kernel set, transformers fp32 /
                 bf16, OpenVINO bf16, llama.cpp ...), seconds on a log scale
    right panel: qvl's achieved GFLOP/s as % of the measured peak of the unit each row ran on (f32 FMA,
                 AVX512-BF16 VDPBF16PS or AMX-BF16 TDPBF16PS); a unit whose peak could not be measured here (no AMX)
                 is written into the panel instead of a bar

With --markdown it also prints the same rows as Markdown tables (time per case with the ratio to the last qvl
row of the run, qvl bf16 by default, and qvl's per-phase times), for docs/PERFORMANCE.md.

Usage:
    python bench/chart_peers.py RUN1/results.tsv [RUN2/results.tsv ...] -o docs/peers.png [--title TEXT] [--markdown]
Pinned version: bench/requirements.txt (matplotlib).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CASE_ORDER = ("image", "video", "batch")


def read_tsv(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def read_meta(path: str) -> dict[str, str]:
    meta: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("\t")
                meta[k] = v
    except OSError:
        pass
    return meta


def case_key(c: str) -> tuple[int, int, str]:
    kind = next((i for i, p in enumerate(CASE_ORDER) if c.startswith(p)), len(CASE_ORDER))
    digits = "".join(ch for ch in c.split("x")[-1] if ch.isdigit())
    return (kind, int(digits or 0), c)


def row_name(r: dict[str, str]) -> str:
    if r["tool"] == "qvl":
        return f"qvl {r['precision']} ({r['kernels']})"
    if r["tool"] == "transformers":
        return f"transformers {r['precision']}"
    return f"{r['tool']} {r['precision']} ({r['kernels']})"


def num(s: str) -> float | None:
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tsv", nargs="+", help="results.tsv of one or more bench/run_peers.sh runs")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title", default="", help="figure title (default: from the runs' meta.tsv)")
    ap.add_argument("--markdown", action="store_true", help="also print Markdown tables of the rows")
    a = ap.parse_args()

    towers: dict[str, list[dict[str, str]]] = {}
    metas: dict[str, dict[str, str]] = {}
    for p in a.tsv:
        meta = read_meta(os.path.join(os.path.dirname(os.path.abspath(p)), "meta.tsv"))
        for r in read_tsv(p):
            towers.setdefault(r["tower"], []).append(r)
            metas.setdefault(r["tower"], meta)
    if not towers:
        print("chart_peers: no rows in " + ", ".join(a.tsv), file=sys.stderr)
        return 1

    fig, axes = plt.subplots(len(towers), 2, figsize=(15, 4.8 * len(towers)), squeeze=False,
                             gridspec_kw={"width_ratios": [2.2, 1]})
    cmap = plt.get_cmap("tab10")
    names_all: list[str] = []
    for rows in towers.values():
        for r in rows:
            if row_name(r) not in names_all:
                names_all.append(row_name(r))
    color = {n: cmap(i % 10) for i, n in enumerate(names_all)}

    for ti, (tower, rows) in enumerate(towers.items()):
        meta = metas[tower]
        cases = sorted({r["case"] for r in rows}, key=case_key)
        names = [n for n in names_all if any(row_name(r) == n for r in rows)]
        ms = {(row_name(r), r["case"]): num(r["median_ms"]) for r in rows}

        ax = axes[ti][0]
        width = 0.8 / max(1, len(names))
        for ni, n in enumerate(names):
            xs, ys = [], []
            for ci, c in enumerate(cases):
                v = ms.get((n, c))
                if v is not None and v > 0:
                    xs.append(ci - 0.4 + width * (ni + 0.5))
                    ys.append(v / 1e3)
            bars = ax.bar(xs, ys, width, label=n, color=color[n])
            for b, y in zip(bars, ys):
                ax.annotate(f"{y:.3g}", (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom", fontsize=7,
                            rotation=90, xytext=(0, 2), textcoords="offset points")
        ax.set_yscale("log")
        ax.set_xticks(range(len(cases)), cases)
        ax.set_ylabel("time per encode, s (log)")
        ax.set_title(f"{tower}: time per case (run at {meta.get('date', '?')}, load before "
                     f"{meta.get('load_before', '?')}, after {meta.get('load_after', '?')})", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.margins(y=0.25)

        ax = axes[ti][1]
        q = [r for r in rows if r["tool"] == "qvl"]
        qnames = [n for n in names if n.startswith("qvl ")]
        width = 0.8 / max(1, len(qnames))
        for ni, n in enumerate(qnames):
            xs, ys = [], []
            for ci, c in enumerate(cases):
                r = next((r for r in q if row_name(r) == n and r["case"] == c), None)
                v = num(r["pct_peak"]) if r else None
                if v is not None:
                    xs.append(ci - 0.4 + width * (ni + 0.5))
                    ys.append(v)
            unit = next((r["peak_unit"] for r in q if row_name(r) == n), "?")
            bars = ax.bar(xs, ys, width, label=f"{n}: % of {unit} peak", color=color[n])
            for b, y in zip(bars, ys):
                ax.annotate(f"{y:.0f}%", (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom", fontsize=7)
        amx = meta.get("peak_amx", "")
        if "not available" in amx or not amx:
            ax.text(0.5, 0.97, "AMX-BF16 (TDPBF16PS): not available on this machine", transform=ax.transAxes,
                    ha="center", va="top", fontsize=8, color="firebrick")
        ax.set_xticks(range(len(cases)), cases)
        ax.set_ylim(0, 110)
        ax.set_ylabel("% of the measured peak")
        ax.set_title("qvl: GFLOP/s as % of the peak of its unit", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
        ax.grid(axis="y", alpha=0.3)

    meta = next(iter(metas.values()))
    title = a.title or (f"bench/run_peers.sh: {meta.get('cpu', '?')}; threads {meta.get('threads', '?')}; "
                        f"AMX: {meta.get('amx', '?').split(' ')[0]}")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(a.output, dpi=110)
    print(f"chart_peers: wrote {a.output} ({len(towers)} tower(s))")
    if a.markdown:
        for tower, rows in towers.items():
            print_markdown(tower, rows, names_all)
    return 0


def print_markdown(tower: str, rows: list[dict[str, str]], names_all: list[str]) -> None:
    cases = sorted({r["case"] for r in rows}, key=case_key)
    names = [n for n in names_all if any(row_name(r) == n for r in rows)]
    by = {(row_name(r), r["case"]): r for r in rows}
    base = next((n for n in reversed(names) if n.startswith("qvl ")), None)  # the last qvl row: bf16 by default
    print(f"\n#### {tower}\n")
    print("| case | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for c in cases:
        b = num(by[(base, c)]["median_ms"]) if base and (base, c) in by else None
        cells = []
        for n in names:
            v = num(by[(n, c)]["median_ms"]) if (n, c) in by else None
            if v is None:
                cells.append("—")
            elif n == base or not b:
                cells.append(f"{v / 1e3:.2f} s")
            else:
                cells.append(f"{v / 1e3:.2f} s ({v / b:.2f}×)")
        print(f"| {c} | " + " | ".join(cells) + " |")
    rss = {n: next((r["rss_mib"] for r in rows if row_name(r) == n), "-") for n in names}
    print("| peak RSS, MiB | " + " | ".join(rss[n] for n in names) + " |")
    print(f"\n(in parentheses: that row's time ÷ {base}'s; > 1: slower than {base})\n" if base else "")
    q = [r for r in rows if r["tool"] == "qvl"]
    if q:
        print("| qvl row | case | time s | GFLOP/s | % of peak (unit, GFLOP/s) | patch | pos/rope | gemm | attn | norm | "
              "merger (ms) |")
        print("|---" * 11 + "|")
        for r in sorted(q, key=lambda r: (names.index(row_name(r)), case_key(r["case"]))):
            t = num(r["median_ms"]) or 0
            print(f"| {row_name(r)} | {r['case']} | {t / 1e3:.2f} | {r['gflops']} | {r['pct_peak']} % ({r['peak_unit']}, "
                  f"{r['peak_gflops']}) | {r['patch_ms']} | {r['pos_rope_ms']} | {r['gemm_ms']} | {r['attn_ms']} | "
                  f"{r['norm_ms']} | {r['merger_ms']} |")
    # llama.cpp rows with phases (bench/llama_clip_bench.cpp --profile: one extra run, every ggml node alone)
    lp = [r for r in rows if r["tool"] == "llama.cpp" and num(r.get("gemm_ms", "")) is not None]
    if lp:
        print("\n| llama.cpp row | case | time s | profiled phases: patch | pos/rope | gemm | attn | norm | merger (ms) |")
        print("|---" * 9 + "|")
        for r in sorted(lp, key=lambda r: (names.index(row_name(r)), case_key(r["case"]))):
            t = num(r["median_ms"]) or 0
            print(f"| {row_name(r)} | {r['case']} | {t / 1e3:.2f} | {r['patch_ms']} | {r['pos_rope_ms']} | "
                  f"{r['gemm_ms']} | {r['attn_ms']} | {r['norm_ms']} | {r['merger_ms']} |")


if __name__ == "__main__":
    sys.exit(main())
