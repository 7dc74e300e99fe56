"""Embed a corpus with Ray Data: files -> an actor pool of qvl encoders -> Parquet (or the key cache).

    python -m qvl.ray --model DIR --input 'PATHS_OR_GLOB' --output OUT [--actors N] [--threads-per-actor K]
                      [--batch-size B] [--cache DIR] [--cache-only]

The pipeline is ``ray.data.read_binary_files(paths, include_paths=True)`` -> ``map_batches(EncoderActor,
compute=ActorPoolStrategy(size=N), num_cpus=K)`` (one Encoder per actor, loaded once, K threads) ->
``write_parquet(OUT)``. Every input gives exactly one row: its embeddings, or its error (a corrupt, unreadable or
missing file is an error row, never a failed job). A rerun skips the inputs whose rows are already in OUT
(resume). ``--cache DIR`` reads and fills the content-addressed cache that ``qvl serve --cache DIR`` and ``qvl
encode --cache DIR`` use (the same files, see :mod:`qvl.cache`): each entry is the output a server request with
the job's dtype, ``layout=concat`` and DeepStack gives, under that request's key, so a fleet serving from DIR
(or a shared copy of it) finds the job's entries. ``--cache-only`` fills the cache and writes no embeddings
(with ``--output``, a manifest of rows without them).

Rows: path, key, grid_t, grid_h, grid_w, n_tokens, dim, n_deepstack, dtype, embeds (the [n_tokens, dim] array's
bytes, little-endian, C order; dim = out_hidden·(1 + n_deepstack), the concat layout), fingerprint, qvl_version,
error (null when ok).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

import ray  # the Ray package (this module is qvl.ray; absolute imports reach the top-level ray)
import pyarrow as pa

from . import cache as qcache
from .encoder import Encoder, version

SCHEMA = pa.schema([
    ("path", pa.string()),
    ("key", pa.string()),
    ("grid_t", pa.int32()),
    ("grid_h", pa.int32()),
    ("grid_w", pa.int32()),
    ("n_tokens", pa.int64()),
    ("dim", pa.int32()),
    ("n_deepstack", pa.int32()),
    ("dtype", pa.string()),
    ("embeds", pa.binary()),
    ("fingerprint", pa.string()),
    ("qvl_version", pa.string()),
    ("error", pa.string()),
])

_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM")


def _is_image(b: bytes) -> bool:
    return b.startswith(_IMAGE_MAGIC) or (b[:4] == b"RIFF" and b[8:12] == b"WEBP")


def expand_inputs(inputs: str | Sequence[str]) -> list[str]:
    """Input files from paths, directories (their files, recursively) and glob patterns; sorted, each once."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [os.fspath(inputs)]
    out: set[str] = set()
    for spec in inputs:
        matches = glob.glob(spec, recursive=True) if glob.has_magic(spec) else [spec]
        for m in matches:
            if os.path.isdir(m):
                for root, _, files in os.walk(m):
                    out.update(os.path.join(root, f) for f in files if not f.startswith("."))
            else:
                out.add(m)
    return sorted(os.path.abspath(p) for p in out)


def written_paths(output: str) -> set[str]:
    """Inputs that already have a row in the Parquet files under `output` (for resume)."""
    import pyarrow.parquet as pq

    done: set[str] = set()
    if not os.path.isdir(output):
        return done
    for f in sorted(glob.glob(os.path.join(output, "**", "*.parquet"), recursive=True)):
        try:
            done.update(pq.read_table(f, columns=["path"]).column("path").to_pylist())
        except Exception as e:  # a file cut short by a crash: its inputs are encoded again
            print(f"qvl.ray: ignoring unreadable {f}: {e}", file=sys.stderr)
    return done


def _error_row(path: str, msg: str) -> dict[str, Any]:
    return {"path": path, "key": None, "grid_t": None, "grid_h": None, "grid_w": None, "n_tokens": None,
            "dim": None, "n_deepstack": None, "dtype": None, "embeds": None, "fingerprint": None,
            "qvl_version": version(), "error": msg}


class EncoderActor:
    """One qvl Encoder per Ray actor, loaded once; each batch of files becomes one row per file."""

    def __init__(self, model: str, threads: int | None = None, dtype: str = "float32",
                 cache: str | None = None, cache_only: bool = False,
                 preprocess: Mapping[str, Any] | None = None):
        self.enc = Encoder(model, threads=threads, cache_dir=cache)
        self.dtype = dtype
        self.cache = cache
        self.cache_only = cache_only
        self.preprocess = dict(preprocess) if preprocess else None
        self.fp = self.enc.fingerprint

    def __call__(self, batch: Mapping[str, Any]) -> pa.Table:
        paths = [str(p) for p in batch["path"]]
        blobs = [bytes(b) for b in batch["bytes"]]
        # images go in as their bytes; anything else (videos) by path, read by FFmpeg where the file lives
        items = [b if _is_image(b) else p for p, b in zip(paths, blobs)]
        rows = []
        want = list(range(len(items)))
        keys: dict[int, str] = {}
        if self.cache_only:  # an entry already there is not read: its existence is enough
            want = []
            for i, it in enumerate(items):
                try:
                    keys[i] = self.enc.key(it, self.dtype, preprocess=self.preprocess)
                except Exception:
                    want.append(i)  # the encode reports why
                    continue
                if not os.path.isfile(qcache.entry_path(self.cache, keys[i])):
                    want.append(i)
        # with a cache the Encoder looks each item up first and stores what it encodes
        results = dict(zip(want, self.enc.encode([items[i] for i in want], dtype=self.dtype,
                                                 preprocess=self.preprocess,
                                                 labels=[paths[i] for i in want]))) if want else {}
        for i, p in enumerate(paths):
            r = results.get(i)
            if r is None:  # cache only, in the cache already
                rows.append({**_error_row(p, None), "key": keys[i], "fingerprint": self.fp})  # type: ignore[arg-type]
                continue
            if not r.ok:
                rows.append({**_error_row(p, r.error or "failed"), "key": r.key, "fingerprint": self.fp})
                continue
            if self.cache_only:
                rows.append({**_error_row(p, None), "key": r.key, "grid_t": r.grid_thw[0], "grid_h": r.grid_thw[1],  # type: ignore[arg-type]
                             "grid_w": r.grid_thw[2], "n_tokens": r.n_tokens, "fingerprint": self.fp})
            else:
                rows.append(self._row(p, r.key, r.grid_thw, r.embeds, r.n_deepstack))
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    def _row(self, path: str, key: str | None, grid: Any, e: np.ndarray, nds: int) -> dict[str, Any]:
        if self.dtype == "float16" and e.dtype == np.float32:
            e = e.astype(np.float16)
        elif self.dtype == "bfloat16" and e.dtype == np.float32:
            from .encoder import _bf16_bits

            e = _bf16_bits(e)
        e = np.ascontiguousarray(e)
        return {"path": path, "key": key, "grid_t": int(grid[0]), "grid_h": int(grid[1]), "grid_w": int(grid[2]),
                "n_tokens": int(e.shape[0]), "dim": int(e.shape[1]), "n_deepstack": int(nds), "dtype": self.dtype,
                "embeds": e.astype(e.dtype.newbyteorder("<"), copy=False).tobytes(), "fingerprint": self.fp,
                "qvl_version": version(), "error": None}


def decode_embeds(row: Mapping[str, Any]) -> np.ndarray:
    """A Parquet row's embeddings as a [n_tokens, dim] array (bfloat16 as uint16 bit patterns)."""
    dt = {"float32": "<f4", "float16": "<f2", "bfloat16": "<u2"}[row["dtype"]]
    return np.frombuffer(row["embeds"], dtype=dt).reshape(int(row["n_tokens"]), int(row["dim"]))


def embed(model: str, inputs: str | Sequence[str], output: str | None, *, actors: int = 1,
          threads_per_actor: int | None = None, batch_size: int = 8, cache: str | None = None,
          cache_only: bool = False, dtype: str = "float32", preprocess: Mapping[str, Any] | None = None,
          resume: bool = True, address: str | None = None) -> dict[str, Any]:
    """Run the job (see the module's doc); returns a summary: inputs, skipped (resumed), rows written this run,
    errors, lost (inputs without exactly one row: always 0 unless something is badly wrong), seconds.

    Ray is initialised (``ray.init(address)``) unless it already is. ``threads_per_actor`` defaults to the
    cluster's CPUs divided by ``actors``."""
    if output is None and not cache_only:
        raise ValueError("an output directory is needed unless cache_only")
    if cache_only and not cache:
        raise ValueError("cache_only needs a cache directory")
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    t0 = time.perf_counter()
    paths = expand_inputs(inputs)
    done = written_paths(output) if (resume and output) else set()
    todo = [p for p in paths if p not in done]
    # Unreadable inputs never reach the reader (one would fail its read task, and the job): they are error rows.
    readable, bad = [], []
    for p in todo:
        if not os.path.isfile(p):
            bad.append(_error_row(p, f"{p}: {'no such file' if not os.path.exists(p) else 'not a regular file'}"))
        elif not os.access(p, os.R_OK):
            bad.append(_error_row(p, f"{p}: cannot open: permission denied"))
        else:
            readable.append(p)
    if threads_per_actor is None:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        threads_per_actor = max(1, cpus // max(1, actors))
    n_rows = n_err = 0
    pieces = []
    if readable:
        # reads reserve no CPU (the actors hold the CPUs; reading is I/O) and a few run at once
        ds = ray.data.read_binary_files(readable, include_paths=True, num_cpus=0, concurrency=max(2, actors),
                                        override_num_blocks=max(1, min(len(readable), 4 * actors * 4)))
        ds = ds.map_batches(
            EncoderActor,
            fn_constructor_kwargs={"model": os.path.abspath(model), "threads": threads_per_actor, "dtype": dtype,
                                   "cache": os.path.abspath(cache) if cache else None, "cache_only": cache_only,
                                   "preprocess": dict(preprocess) if preprocess else None},
            compute=ray.data.ActorPoolStrategy(size=actors),
            batch_size=batch_size,
            batch_format="numpy",
            num_cpus=threads_per_actor,
        )
        pieces.append(ds)
    if bad:
        pieces.append(ray.data.from_arrow(pa.Table.from_pylist(bad, schema=SCHEMA)))
    if pieces:
        ds = pieces[0] if len(pieces) == 1 else pieces[0].union(*pieces[1:])
        if output:
            if cache_only:
                ds = ds.drop_columns(["embeds"])
            ds.write_parquet(output, ray_remote_args={"num_cpus": 0})
            n_rows, n_err = _count_run(output, set(todo))
        else:
            stats = ds.select_columns(["error"]).to_pandas()
            n_rows, n_err = len(stats), int(stats["error"].notna().sum())
    lost = 0
    if output:
        import pyarrow.parquet as pq

        seen: dict[str, int] = {}
        for f in glob.glob(os.path.join(output, "**", "*.parquet"), recursive=True):
            try:
                for p in pq.read_table(f, columns=["path"]).column("path").to_pylist():
                    seen[p] = seen.get(p, 0) + 1
            except Exception:
                pass
        lost = sum(1 for p in paths if seen.get(p, 0) != 1)
    else:
        lost = len(todo) - n_rows
    return {"inputs": len(paths), "skipped": len(paths) - len(todo), "rows": n_rows, "errors": n_err,
            "lost": lost, "seconds": time.perf_counter() - t0, "actors": actors,
            "threads_per_actor": threads_per_actor}


def _count_run(output: str, todo: set[str]) -> tuple[int, int]:
    import pyarrow.parquet as pq

    rows = errs = 0
    for f in glob.glob(os.path.join(output, "**", "*.parquet"), recursive=True):
        try:
            t = pq.read_table(f, columns=["path", "error"])
        except Exception:
            continue
        for p, e in zip(t.column("path").to_pylist(), t.column("error").to_pylist()):
            if p in todo:
                rows += 1
                errs += e is not None
    return rows, errs


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qvl.ray", description="Embed images and videos with Ray Data.")
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--input", required=True, action="append",
                    help="files, directories or glob patterns (quote them); repeatable")
    ap.add_argument("--output", help="Parquet output directory (rows appended; a rerun resumes)")
    ap.add_argument("--actors", type=int, default=1, help="encoder actors (default 1)")
    ap.add_argument("--threads-per-actor", type=int, default=None,
                    help="threads (and CPUs reserved) per actor (default: cluster CPUs / actors)")
    ap.add_argument("--batch-size", type=int, default=8, help="files per batch (default 8)")
    ap.add_argument("--cache", help="content-addressed cache directory (the one qvl serve --cache reads)")
    ap.add_argument("--cache-only", action="store_true", help="fill the cache; no embeddings in the output")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--no-resume", action="store_true", help="encode every input, even those already written")
    ap.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else a local cluster)")
    a = ap.parse_args(list(argv) if argv is not None else None)
    try:
        s = embed(a.model, a.input, a.output, actors=a.actors, threads_per_actor=a.threads_per_actor,
                  batch_size=a.batch_size, cache=a.cache, cache_only=a.cache_only, dtype=a.dtype,
                  resume=not a.no_resume, address=a.address)
    except ValueError as e:
        ap.error(str(e))
    print(json.dumps(s))
    return 0 if s["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
