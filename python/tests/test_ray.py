"""The Ray Data job on a local cluster (ray.init(num_cpus=2)) and on two nodes on 127.0.0.1
(ray.cluster_utils.Cluster): one row per input, embeddings bit-equal to the binding's, corrupt and missing files
as error rows, a rerun that resumes, and the cache-only mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import qvl

from conftest import data

ray = pytest.importorskip("ray")
pq = pytest.importorskip("pyarrow.parquet")
import qvl.ray as qray  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("corpus")
    for rel in ("tests/data/photos/rocket.jpg", "tests/data/photos/coffee.png", "tests/data/images/png_rgba.png",
                "tests/data/images/webp_lossy.webp", "tests/data/video/video_testsrc_30.mp4",
                "tests/data/bad/truncated.jpg"):
        shutil.copy(data(rel), d / os.path.basename(rel))
    (d / "notes.txt").write_text("not an image, not a video\n")
    return str(d)


def rows_of(out: str) -> dict[str, dict]:
    t = pq.read_table(out).to_pylist()
    paths = [r["path"] for r in t]
    assert len(paths) == len(set(paths)), "an input has more than one row"
    return {r["path"]: r for r in t}


def check_rows(rows: dict[str, dict], files: list[str], model_dir: str) -> None:
    enc = qvl.Encoder(model_dir, threads=1)
    ref = dict(zip(files, enc.encode(files)))
    assert set(rows) == set(files)
    for p, r in rows.items():
        want = ref[p]
        assert r["qvl_version"] == qvl.version()
        if want.ok:
            assert r["error"] is None, r["error"]
            assert (r["grid_t"], r["grid_h"], r["grid_w"]) == want.grid_thw
            assert r["n_tokens"] == want.n_tokens and r["dim"] == want.embeds.shape[1]
            assert r["n_deepstack"] == 2 and r["dtype"] == "float32" and r["key"] == want.key
            assert r["fingerprint"] == enc.fingerprint
            assert qray.decode_embeds(r).tobytes() == want.embeds.tobytes(), p
        else:
            assert r["error"] and r["embeds"] is None and os.path.basename(p) in r["error"]


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    yield
    ray.shutdown()


def test_local_job_resume_and_cache(local_ray, corpus: str, model_dir: str, tmp_path) -> None:
    files = qray.expand_inputs(os.path.join(corpus, "*"))
    missing = str(tmp_path / "missing.jpg")
    out = str(tmp_path / "out")
    s = qray.embed(model_dir, [os.path.join(corpus, "*"), missing], out, actors=2, threads_per_actor=1, batch_size=2)
    print(s)
    assert s["inputs"] == len(files) + 1 and s["rows"] == len(files) + 1 and s["lost"] == 0
    rows = rows_of(out)
    assert "no such file" in rows[missing]["error"]
    del rows[missing]
    check_rows(rows, files, model_dir)
    assert s["errors"] == 3  # truncated.jpg, notes.txt, missing.jpg
    # a rerun writes nothing new; with one more input, only that one
    s2 = qray.embed(model_dir, [os.path.join(corpus, "*"), missing], out, actors=1, threads_per_actor=2)
    assert s2["skipped"] == s2["inputs"] and s2["rows"] == 0 and s2["lost"] == 0
    extra = tmp_path / "extra"
    extra.mkdir()
    shutil.copy(data("tests/data/photos/chelsea.png"), extra / "chelsea.png")
    s3 = qray.embed(model_dir, [os.path.join(corpus, "*"), missing, str(extra)], out, actors=1,
                    threads_per_actor=2)
    assert s3["skipped"] == len(files) + 1 and s3["rows"] == 1 and s3["lost"] == 0
    assert len(rows_of(out)) == len(files) + 2
    # cache only: an entry per encoded input (the server's format and key for the job's output), equal to the
    # binding's; a manifest without embeddings
    cache = str(tmp_path / "cache")
    s4 = qray.embed(model_dir, os.path.join(corpus, "*"), str(tmp_path / "manifest"), cache=cache, cache_only=True,
                    actors=2, threads_per_actor=1)
    assert s4["lost"] == 0
    ref = qvl.Encoder(model_dir, threads=1).encode(files)
    for f, r in zip(files, ref):
        if r.ok:
            ent = qvl.read_cache_entry(cache, r.key)
            assert ent.data.tobytes() == r.embeds.tobytes() and ent.grid_thw == r.grid_thw and ent.meta["key"] == r.key
        else:
            assert r.key is None or not os.path.exists(qvl.cache.entry_path(cache, r.key))
    man = pq.read_table(str(tmp_path / "manifest"))
    assert "embeds" not in man.column_names and man.num_rows == len(files)
    # a Parquet run with the warm cache reads it (a read touches an entry older than an hour) and gives the same
    # bytes
    hit = [r for r in ref if r.ok][0]
    old = os.stat(qvl.cache.entry_path(cache, hit.key)).st_mtime - 7200
    os.utime(qvl.cache.entry_path(cache, hit.key), (old, old))
    out2 = str(tmp_path / "out2")
    qray.embed(model_dir, os.path.join(corpus, "*"), out2, cache=cache, actors=1, threads_per_actor=2)
    check_rows(rows_of(out2), files, model_dir)
    assert os.stat(qvl.cache.entry_path(cache, hit.key)).st_mtime > old + 3600


def test_two_node_cluster_cli(corpus: str, model_dir: str, tmp_path) -> None:
    """Two nodes on 127.0.0.1, one CPU each, one actor on each; the job run as `python -m qvl.ray`."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        out = str(tmp_path / "out")
        env = dict(os.environ, RAY_ADDRESS=cluster.address)
        p = subprocess.run([sys.executable, "-m", "qvl.ray", "--model", model_dir, "--input",
                            os.path.join(corpus, "*"), "--output", out, "--actors", "2", "--threads-per-actor", "1",
                            "--batch-size", "2"], env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-4000:]
        s = json.loads(p.stdout.strip().splitlines()[-1])
        files = qray.expand_inputs(os.path.join(corpus, "*"))
        assert s["inputs"] == len(files) and s["rows"] == len(files) and s["lost"] == 0 and s["errors"] == 2
        check_rows(rows_of(out), files, model_dir)
        ray.init(address=cluster.address, log_to_driver=False)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        ray.shutdown()
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
