"""Embed a corpus with Ray Data: files -> an actor pool of qvl encoders -> Parquet (or the key cache).

    python -m qvl.ray --model DIR --input 'PATHS_OR_GLOB' --output OUT [--actors N] [--threads-per-actor K]
                      [--batch-size B] [--cache DIR] [--cache-only]

The pipeline is ``ray.data.from_items(paths)`` -> ``map_batches(EncoderActor, compute=ActorPoolStrategy(size=N),
num_cpus=K)`` (one Encoder per actor, loaded once, K threads; the library reads each file in the actor, and the
actor writes each batch's rows as one Parquet part). Every input gives exactly one row: its embeddings, or its error (a corrupt, unreadable or
missing file, or one that turns so while the job runs, is an error row, never a failed job). A rerun skips the
inputs whose rows are already in OUT (resume) but encodes again those whose row is an error (``--no-retry-errors``
keeps them), the new row replacing the old: a run writes its rows under OUT/.qvl-run-ID/ and publishes them when
it ends, then drops the rows they replace, so a run that stops early loses no earlier row (and the next run
settles any input left with two). One job at a time per OUT. ``--cache DIR`` reads and fills the content-addressed cache that ``qvl serve --cache DIR`` and ``qvl
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
import shutil
import sys
import time
import uuid
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


def _parts(output: str) -> list[str]:
    """The Parquet parts of an output directory (a run's staging directory, hidden, is not among them)."""
    return sorted(glob.glob(os.path.join(output, "**", "*.parquet"), recursive=True))


def _scan(output: str) -> dict[str, list[tuple[str, int, bool]]]:
    """Each input's rows under `output`: path -> [(part file, its mtime_ns, row is an error)]."""
    import pyarrow.parquet as pq

    rows: dict[str, list[tuple[str, int, bool]]] = {}
    if not os.path.isdir(output):
        return rows
    for f in _parts(output):
        try:
            t = pq.read_table(f, columns=["path", "error"])
            m = os.stat(f).st_mtime_ns
        except Exception as e:  # not one of ours, or damaged outside the job: its inputs are encoded again
            print(f"qvl.ray: ignoring unreadable {f}: {e}", file=sys.stderr)
            continue
        for p, err in zip(t.column("path").to_pylist(), t.column("error").to_pylist()):
            rows.setdefault(p, []).append((f, m, err is not None))
    return rows


def written_paths(output: str, *, errors: bool = True) -> set[str]:
    """Inputs that already have a row in the Parquet files under `output` (for resume); with ``errors=False``,
    only those whose row holds embeddings (an error row is then retried)."""
    return {p for p, rs in _scan(output).items() if errors or not any(e for _, _, e in rs)}


def _drop_rows(drop: dict[str, set[str]]) -> None:
    """Remove the rows of the given inputs from the given parts: each part rewritten beside itself and renamed
    over the old one (atomic), or unlinked when no row is left."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for f, paths in sorted(drop.items()):
        t = pq.read_table(f)
        keep = t.filter(pc.invert(pc.is_in(t.column("path"), value_set=pa.array(sorted(paths), pa.string()))))
        if keep.num_rows == t.num_rows:
            continue
        if keep.num_rows == 0:
            os.unlink(f)
            continue
        tmp = os.path.join(os.path.dirname(f), f".{os.path.basename(f)}.{os.getpid()}.tmp")
        pq.write_table(keep, tmp)
        os.replace(tmp, f)


def compact(output: str) -> int:
    """Leave one row per input under `output`: where an input has several (a run stopped between publishing its
    rows and removing the ones they replace), the row in the newest part wins (ties: a row with embeddings over an
    error). Returns the number of rows removed."""
    drop: dict[str, set[str]] = {}
    n = 0
    for p, rs in _scan(output).items():
        if len(rs) < 2:
            continue
        best = max(rs, key=lambda r: (r[1], not r[2]))
        for f, _, _ in rs:
            if f != best[0]:
                drop.setdefault(f, set()).add(p)
                n += 1
        if sum(1 for f, _, _ in rs if f == best[0]) > 1:  # two rows in one part: never written so, left alone
            print(f"qvl.ray: {p} has two rows in {best[0]}", file=sys.stderr)
    _drop_rows(drop)
    return n


def _publish(output: str, stage: str) -> None:
    """Move a finished run's parts from `stage` into `output`, then drop the older rows of the inputs they hold
    (:func:`compact`: the newest part wins, so a rerun's row replaces an error row, or any row with resume off, and
    a batch written twice by a retried task counts once). Until then an input may have two rows, never none; the
    next run's :func:`compact` settles a run stopped in between."""
    for f in _parts(stage):
        dst = os.path.join(output, os.path.relpath(f, stage))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(f, dst)
    compact(output)
    shutil.rmtree(stage, ignore_errors=True)


def _error_row(path: str, msg: str) -> dict[str, Any]:
    return {"path": path, "key": None, "grid_t": None, "grid_h": None, "grid_w": None, "n_tokens": None,
            "dim": None, "n_deepstack": None, "dtype": None, "embeds": None, "fingerprint": None,
            "qvl_version": version(), "error": msg}


class EncoderActor:
    """One qvl Encoder per Ray actor, loaded once; each batch of paths becomes one row per path.

    The library reads each file itself (an image's bytes or a video by FFmpeg, where the actor runs): a file that
    is missing, unreadable, not a regular file (a FIFO or a directory is refused without blocking) or undecodable
    by then is that item's error, in its row; the batch's other items are encoded as usual."""

    def __init__(self, model: str, threads: int | None = None, dtype: str = "float32",
                 cache: str | None = None, cache_only: bool = False,
                 preprocess: Mapping[str, Any] | None = None, stage: str | None = None):
        self.enc = Encoder(model, threads=threads, cache_dir=cache)
        self.stage = stage
        self.dtype = dtype
        self.cache = cache
        self.cache_only = cache_only
        self.preprocess = dict(preprocess) if preprocess else None
        self.fp = self.enc.fingerprint
        self.version = version()

    def __call__(self, batch: Mapping[str, Any]) -> pa.Table:
        """Encode a batch; with a staging directory, write its rows there as one Parquet part (written beside it
        and renamed, so a part is whole or absent) and return only (path, error) per row, so the embeddings never
        pass through the object store or a write task."""
        col = batch["path"]
        paths = [str(p) for p in (col.to_pylist() if hasattr(col, "to_pylist") else col)]
        t = self._rows(paths)
        if self.stage is None:
            return t
        if self.cache_only:
            t = t.drop_columns(["embeds"])
        import pyarrow.parquet as pq

        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = os.path.join(self.stage, f".{name}.tmp")
        os.makedirs(self.stage, exist_ok=True)
        # No dictionary and no min/max statistics for the embeddings column: each value is a whole item's matrix
        # (megabytes), never repeated, and hashing and comparing them took 2/3 of a batch's write (209 against
        # 61 ms for 8 items of 196 x 8192 float32, pyarrow 26); the small columns keep both.
        small = [c for c in t.column_names if c != "embeds"]
        pq.write_table(t, tmp, use_dictionary=small, write_statistics=small)
        os.replace(tmp, os.path.join(self.stage, name))
        return t.select(["path", "error"])

    def _rows(self, paths: list[str]) -> pa.Table:
        try:
            if self.cache_only:
                return self._cache_only(paths)
            return self._encode(paths)
        except Exception as e:  # never lose a batch: every path gets its row, with the reason
            if len(paths) > 1:  # one item broke the call: the others are encoded alone
                return pa.concat_tables([self._rows([p]) for p in paths])
            return pa.Table.from_pylist([_error_row(paths[0], f"{paths[0]}: {type(e).__name__}: {e}")],
                                        schema=SCHEMA)

    def _encode(self, paths: list[str]) -> pa.Table:
        """One encode_batch call for the batch (one plan, the actor's threads over all its items); the embeddings
        column is a view of the batch's one output array (no copy into Python bytes)."""
        b = self.enc.encode_batch(paths, dtype=self.dtype, preprocess=self.preprocess, labels=paths)
        n = len(paths)
        big = np.ascontiguousarray(b.embeds)
        if sys.byteorder != "little":
            big = big.byteswap()
        row_bytes = big.shape[1] * big.itemsize if big.ndim == 2 else 0
        ok = [r.ok for r in b.results]
        if big.nbytes >= 2**31:  # past int32 offsets: one chunk per row
            emb = pa.chunked_array([pa.array([big[b.offsets[i]:b.offsets[i + 1]].tobytes() if ok[i] else None],
                                             pa.binary()) for i in range(n)], pa.binary())
        else:
            offs = (np.asarray(b.offsets, dtype=np.int64) * row_bytes).astype(np.int32)
            valid = pa.array(ok, pa.bool_()).buffers()[1]
            emb = pa.Array.from_buffers(pa.binary(), n, [valid, pa.py_buffer(offs), pa.py_buffer(big)],
                                        null_count=n - sum(ok))
        g = [r.grid_thw if r.ok else (None, None, None) for r in b.results]
        i32 = pa.int32()
        cols = {
            "path": pa.array(paths, pa.string()),
            "key": pa.array([r.key for r in b.results], pa.string()),
            "grid_t": pa.array([x[0] for x in g], i32), "grid_h": pa.array([x[1] for x in g], i32),
            "grid_w": pa.array([x[2] for x in g], i32),
            "n_tokens": pa.array([r.n_tokens if r.ok else None for r in b.results], pa.int64()),
            "dim": pa.array([big.shape[1] if r.ok else None for r in b.results], i32),
            "n_deepstack": pa.array([r.n_deepstack if r.ok else None for r in b.results], i32),
            "dtype": pa.array([self.dtype if r.ok else None for r in b.results], pa.string()),
            "embeds": emb,
            "fingerprint": pa.array([self.fp] * n, pa.string()),
            "qvl_version": pa.array([self.version] * n, pa.string()),
            "error": pa.array([None if r.ok else (r.error or "failed") for r in b.results], pa.string()),
        }
        return pa.table(cols, schema=SCHEMA)

    def _cache_only(self, paths: list[str]) -> pa.Table:
        want = []
        keys: dict[int, str] = {}
        for i, p in enumerate(paths):  # an entry already there is not read: its existence is enough
            try:
                keys[i] = self.enc.key(p, self.dtype, preprocess=self.preprocess)
            except Exception:
                want.append(i)  # the encode reports why
                continue
            if not os.path.isfile(qcache.entry_path(self.cache, keys[i])):
                want.append(i)
        # the Encoder looks each item up first and stores what it encodes
        results = dict(zip(want, self.enc.encode([paths[i] for i in want], dtype=self.dtype,
                                                 preprocess=self.preprocess,
                                                 labels=[paths[i] for i in want]))) if want else {}
        rows = []
        for i, p in enumerate(paths):
            r = results.get(i)
            if r is None:  # in the cache already
                rows.append({**_error_row(p, None), "key": keys[i], "fingerprint": self.fp})  # type: ignore[arg-type]
            elif not r.ok:
                rows.append({**_error_row(p, r.error or "failed"), "key": r.key, "fingerprint": self.fp})
            else:
                rows.append({**_error_row(p, None), "key": r.key, "grid_t": r.grid_thw[0],  # type: ignore[arg-type]
                             "grid_h": r.grid_thw[1], "grid_w": r.grid_thw[2], "n_tokens": r.n_tokens,
                             "fingerprint": self.fp})
        return pa.Table.from_pylist(rows, schema=SCHEMA)


def decode_embeds(row: Mapping[str, Any]) -> np.ndarray:
    """A Parquet row's embeddings as a [n_tokens, dim] array (bfloat16 as uint16 bit patterns)."""
    dt = {"float32": "<f4", "float16": "<f2", "bfloat16": "<u2"}[row["dtype"]]
    return np.frombuffer(row["embeds"], dtype=dt).reshape(int(row["n_tokens"]), int(row["dim"]))


def embed(model: str, inputs: str | Sequence[str], output: str | None, *, actors: int = 1,
          threads_per_actor: int | None = None, batch_size: int = 8, cache: str | None = None,
          cache_only: bool = False, dtype: str = "float32", preprocess: Mapping[str, Any] | None = None,
          resume: bool = True, retry_errors: bool = True, address: str | None = None) -> dict[str, Any]:
    """Run the job (see the module's doc); returns a summary: inputs, skipped (resumed), rows written this run,
    errors, retried (inputs whose earlier row was an error, encoded again), lost (inputs without exactly one row:
    always 0 unless something is badly wrong), seconds.

    A rerun (``resume``) skips the inputs that have a row, except those whose row is an error when
    ``retry_errors`` (the default): they are encoded again and the new row replaces the old one. Rows are
    written to a hidden staging directory under `output` and published when the run ends, so a run that stops
    early leaves the earlier rows as they were.

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
    if output:
        os.makedirs(output, exist_ok=True)
        for old in glob.glob(os.path.join(output, ".qvl-run-*")):  # a stopped run's unpublished rows
            shutil.rmtree(old, ignore_errors=True)
        compact(output)
    prior = _scan(output) if (resume and output) else {}
    todo = [p for p in paths if p not in prior or (retry_errors and any(e for _, _, e in prior[p]))]
    retried = sum(1 for p in todo if p in prior)
    if threads_per_actor is None:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        threads_per_actor = max(1, cpus // max(1, actors))
    n_rows = n_err = 0
    if todo:
        # The dataset is the paths alone: each actor's library reads its files (no read tasks competing with the
        # encoders for CPUs, no file bytes through the object store), and a file that cannot be read is its
        # row's error instead of a failed read task. A block per batch (at most 64 per actor; a bigger block is
        # cut into batches in its task) spreads the work over the actors. The
        # actors write the Parquet parts themselves (no write tasks, no embeddings through the object store).
        stage = os.path.join(os.path.abspath(output), f".qvl-run-{uuid.uuid4().hex}") if output else None
        ds = ray.data.from_items([{"path": p} for p in todo],
                                 override_num_blocks=max(1, min(-(-len(todo) // batch_size), 64 * actors)))
        ds = ds.map_batches(
            EncoderActor,
            fn_constructor_kwargs={"model": os.path.abspath(model), "threads": threads_per_actor, "dtype": dtype,
                                   "cache": os.path.abspath(cache) if cache else None, "cache_only": cache_only,
                                   "preprocess": dict(preprocess) if preprocess else None, "stage": stage},
            compute=ray.data.ActorPoolStrategy(size=actors),
            batch_size=batch_size,
            batch_format="pyarrow",
            num_cpus=threads_per_actor,
        )
        for t in ray.get(ds.select_columns(["error"]).to_arrow_refs()):
            n_rows += t.num_rows
            n_err += t.num_rows - t.column("error").null_count
        if stage:
            _publish(output, stage)  # type: ignore[arg-type]
    if output:
        seen = _scan(output)
        lost = sum(1 for p in paths if len(seen.get(p, ())) != 1)
    else:
        lost = len(todo) - n_rows
    return {"inputs": len(paths), "skipped": len(paths) - len(todo), "rows": n_rows, "errors": n_err,
            "retried": retried, "lost": lost, "seconds": time.perf_counter() - t0, "actors": actors,
            "threads_per_actor": threads_per_actor}


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
    ap.add_argument("--no-resume", action="store_true", help="encode every input, even those already written "
                    "(each new row replaces the input's old one)")
    ap.add_argument("--no-retry-errors", action="store_true",
                    help="on a rerun, keep the error rows of earlier runs instead of encoding those inputs again")
    ap.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else a local cluster)")
    a = ap.parse_args(list(argv) if argv is not None else None)
    try:
        s = embed(a.model, a.input, a.output, actors=a.actors, threads_per_actor=a.threads_per_actor,
                  batch_size=a.batch_size, cache=a.cache, cache_only=a.cache_only, dtype=a.dtype,
                  resume=not a.no_resume, retry_errors=not a.no_retry_errors,
                  address=a.address)
    except ValueError as e:
        ap.error(str(e))
    print(json.dumps(s))
    return 0 if s["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
